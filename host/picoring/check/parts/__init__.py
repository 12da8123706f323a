"""The checker's parts: each one concern of the checker (check/checker.py's module doc), a
listener of the run's events; the Checker feeds each event to each part that has a method for
it, in the order of the standard set (checker.standard_parts), and builds one report from theirs.

    ledger.py          what the parts share: frame counts, requests pending, who is in the
                       critical section, when recovery first acted, the violations found
    liveness.py        every request served (or failed, with a reason); latency
    safety.py          mutual exclusion and the token's entry numbers, a crash forgiven
    bounds.py          the descriptor's bounds (the paper's): messages per request, service traffic
    fairness.py        overtaking, by all and by one node; responsiveness
    forwards.py        BinarySearch's searches: each request's forwards (a protocol's own count)
    recovery.py        timeouts, regenerated and discarded tokens, restarts, events lost
    soft_exclusion.py  soft mutual exclusion's measures (the wandering token and its benchmark)
    resource.py        the shared counter's audit (--resource fram)

The listener interface (every method optional; t: the run's time, node: an index):

    request(t, node, rid)       a request made (rid: its number, from 1; already pending)
    enter(t, node, seq)         an entry (seq: the token's entry number, or None); the request
                                it serves, if any, is still ledger.pending[node] (rid, t requested,
                                hop frames, logical messages and entries then): the liveness part
                                takes it after every part has seen the entry
    exit(t, node)               an exit; a true result ends the event there (an exit that only
                                closed a critical section already judged an overlap)
    fail(t, node, reason)       the request pending at node reported failed
    restarted(t, node)          the board at node restarted
    events_lost(t, node)        the host lost some of node's events
    frame(t, kind)              a recovery frame sent (claim, again: not the paper's traffic)
    token_seen(t)               a sign of a live token in a ring trace (sent, entry, exit, made)
    regen(event)                a regen event (a token made after a timeout)
    discard(t, node)            a discard event
    timeout(t, node, extra)     a recovery timeout fired
    lost_frame(event)           a frame a ring's wire lost (a lost event)
    tokens(t, node, a)          the simulator: a handler's action bits REGENERATED or DISCARDED
    lost(t, node)               the simulator: a token lost on a wire
    message_sent(src, mkind, w) a new message of the protocol layer (w: its payload's first word)
    start(t)                    the run's measures count from t
    clock_rates(rates)          the boards' clocks against the trace's time (an end event's)
    wire(event)                 a ring trace's send or recv event (a frame on a link)
    res(event)                  an access to the shared resource (a true result: the part now
                                listens to more, and the Checker routes the events again)
    finish()                    the run is over: judge what is still open
    report()                    this part's keys of the report (a dict; "recovery" merges)

A part may narrow what it is fed with `listens`: the names of the methods it wants (the soft
exclusion part in a run of hard exclusion: none). A listener added to a Checker (Checker.add, a
figure's measure) is fed before the parts, so it sees the state each event finds.
"""
