# The discrete-event core of the simulator: a ring of protocol nodes
# (firmware/protocol.py), one time unit per hop, a critical section of cs_time
# units, requests from a workload. Deterministic: within one time unit, events
# are handled in this order, each group in the order it was produced:
#   1. critical-section exits due now (then a request deferred to that exit),
#   2. frames arriving now (sent one unit ago, in sending order: token and request
#      frames, then the protocol layer's message frames),
#   3. open-loop requests due now,
#   4. if the ring is quiescent, the closed-loop workload's next request.
#
# Messages of the protocol layer (SEND_MSG: to a node by index, or BROADCAST) travel hop
# by hop as the node loop carries them (docs/frames.md): one time unit and one hop frame
# per hop; the nodes in between pass them on without waking their protocol; a broadcast
# is passed on, then delivered, at every other node, and taken off back at its sender
# (n hop frames). Each message sent is one logical message however many hops it takes.
#
# Clocked protocols (protocol.py: the wandering token): before each of its handlers a node's
# `now` is set to the simulated time, and a node's wake-up (`wake_at`) is an event of its own,
# handled after the exits and before the frames of its time unit (step 1b).
#
# This file runs under MicroPython too (no deque, no dataclasses), so the tests
# can run the very same loop and protocol code on the real `micropython`
# binary and compare traces with CPython.

try:
    from picoring.firmware.protocol import SEND_TOKEN, SEND_REQUEST, ENTER_CS, SEND_MSG, BROADCAST, REGENERATED, DISCARDED, sends
except ImportError:  # MicroPython test runner: files side by side
    from protocol import SEND_TOKEN, SEND_REQUEST, ENTER_CS, SEND_MSG, BROADCAST, REGENERATED, DISCARDED, sends
from heapq import heappush, heappop

_MSG = 7  # the message frame's kind (firmware/frame.py MSG): a delivered buffer starts as the frame


class BusyNodeError(ValueError):
    """An exact (file) workload asked a node that already has a request outstanding."""


def first_word(payload):
    """A message payload's first 4 bytes as the trace's "seq" (a token header's: u32 little-endian,
    30 bits kept as a board keeps them; 0 for a shorter payload)."""
    p = payload
    return p[0] | p[1] << 8 | p[2] << 16 | (p[3] & 0x3F) << 24 if len(p) >= 4 else 0


# The fast path's hop loops (run's step 2a): a lone frame carried from node to node while
# each node only passes it on. A for loop over a slice of the ring costs about 30 ns a hop
# less than indexing node by node (103 against 134 ns a token hop, 30 against 65 a request
# hop: CPython 3.11, Q on a ring of 10,000, tests of this file's history); a slice is at
# most _CHUNK nodes, so that a frame that stops after a few hops does not copy the ring.
# The chunk's end is two comparisons, not min() (a builtin call), and the node a frame
# stops at is found by its index (nodes[j].index == j: make_nodes' ring), not by list.index,
# which compares every node passed on the way (about 30 ns each: as much as the slice saves).
# The action each hop compares with is a default argument, a local of the loop's frame, not a
# global: one global lookup a hop fewer (callgrind, Q n = 64 sequential: 900 instructions a
# request, 0.7%). Not for callers to pass.
_CHUNK = 256


def carry_token(ring, i, c, s, q, e, calls, SEND_TOKEN=SEND_TOKEN):
    """The token (fields c, s, q, e) arrives at node i; each node's on_token is called in
    turn, one time unit apart, while it returns SEND_TOKEN, at most `calls` times.
    Returns (k, a, c, s, q, e): k handlers called (the last at node (i + k - 1) % n),
    the last one's action a (SEND_TOKEN: the token is still travelling, with these fields)."""
    if calls < 1:
        return 0, SEND_TOKEN, c, s, q, e
    prev = ring[i]
    a = prev.on_token(c, s, q, e)
    if a != SEND_TOKEN:
        return 1, a, c, s, q, e
    # From the second hop on, a node is given the fields its predecessor sent, read straight
    # into the call, not copied into locals first (8 bytecodes a hop fewer: D on a ring of 64,
    # 1.5% of a request's instructions)
    n = len(ring)
    k = 1
    i = i + 1 if i + 1 < n else 0
    while k < calls:
        end = i + calls - k
        if end > i + _CHUNK:
            end = i + _CHUNK
        if end > n:
            end = n
        for node in ring[i:end]:
            a = node.on_token(prev.count, prev.state, prev.seq, prev.epoch)
            if a != SEND_TOKEN:
                j = node.index
                if not (i <= j < end and ring[j] is node):  # (a ring not built by make_nodes)
                    j = ring.index(node, i, end)
                return k + j - i + 1, a, prev.count, prev.state, prev.seq, prev.epoch
            prev = node
        k += end - i
        i = end if end < n else 0
    return k, SEND_TOKEN, prev.count, prev.state, prev.seq, prev.epoch


def carry_request(ring, i, calls, SEND_REQUEST=SEND_REQUEST):
    """A request frame arrives at node i: carry_token's loop for on_request and SEND_REQUEST.
    Returns (k, a)."""
    n = len(ring)
    k = 0
    while True:
        end = i + calls - k
        if end > i + _CHUNK:
            end = i + _CHUNK
        if end > n:
            end = n
        for node in ring[i:end]:
            a = node.on_request()
            if a != SEND_REQUEST:
                j = node.index
                if not (i <= j < end and ring[j] is node):  # (a ring not built by make_nodes)
                    j = ring.index(node, i, end)
                return k + j - i + 1, a
        k += end - i
        if k >= calls:
            return k, SEND_REQUEST
        i = end if end < n else 0


_NEVER = 1 << 62  # a time no run reaches


def run(nodes, workload, cs_time, observer, tracer=None, idle_horizon=0, quiesce_horizon=None,
        starve_horizon=None, progress=None, holder=0, complete=False, until=None, drop=None, stop_when=None):
    """Run until the ring is quiescent (or cannot become so). Returns a dict.

    complete: the network of Englert, Rudolph and Shvartsman's simulations (a complete
    graph): a message to one node arrives there one time unit after it is sent, as one
    hop frame, whatever its distance on the ring (broadcasts and frames still go round).

    observer: count_to(token_msgs, request_msgs, msg_frames, msg_logical), request(t, node),
              enter(t, node), exit(t, node)   (the Checker); count_to comes before each of
              the others whose counts differ from the last it was given
    until:    stop at this time (a protocol whose token never rests, under a workload that never ends)
    drop:     optional drop(t, node, dst, mkind): True loses the message frame node puts on its wire
              now (counted as sent, never delivered): the wandering token's injected losses
    stop_when: optional callable, asked every few thousand steps: True ends the run ("stopped")
    The observer may also have tokens(t, node, a): a handler returned REGENERATED or DISCARDED.
    tracer:   optional; frame(t, ev, node, is_token, payload) for every token and
              request send and recv, message(t, ev, node, (mkind, src, dst, payload,
              hop, fwd)) for every message frame's, event(t, ev, node) for req/enter/exit

    Long by measurement. The per-event steps (send, enter, leave, make_request, arrive,
    done_by) are closures over the run's counters; the lone frame's hop loops are functions
    of their own (carry_token, carry_request: called once a trip, they save more than the
    call costs). The time loop stays one function: step 2's frame loop as a closure called
    once a time unit made S on n = 1000 (poisson, every unit through step 2) 6% slower
    (27.1 -> 28.8 ms, best of 7 interleaved; the sequential cases unchanged), and the other
    steps are smaller still (docs/performance.md, "The simulator's loop").
    """
    n = len(nodes)
    # A frame addresses nodes 0..254 (u8, BROADCAST = 0xFF): rings beyond 255 nodes exist only
    # here (the paper's figures), where 0xFF is node 255 and nothing can be broadcast.
    bcast = BROADCAST if n <= BROADCAST else -1
    if quiesce_horizon is None:
        quiesce_horizon = 4 * n + 4 * cs_time + 8
    if starve_horizon is None:
        starve_horizon = 8 * n * (cs_time + 1) + 16
    tok = 0  # token frames sent
    req = 0  # request frames sent
    mf = 0  # message hop frames sent (every hop of every message)
    ml = 0  # messages sent (logical: each once)
    counted = 0  # tok + req + mf when the observer was last given the counts (each only grows)
    mnxt = []  # message frames due next unit: (at node, src, dst, mkind, payload, hop)
    mcur = []  # message frames arriving now
    nxt = []  # frames due next unit: (dest << 1) | is_token
    tokq = []  # payloads of the tokens in flight, in sending order
    exits = []  # (t, node), in time order since cs_time is fixed
    deferred = [0] * n  # poisson/burst requests waiting for the node's exit
    n_deferred = 0  # deferred requests, waiting or ready
    ready = []  # nodes whose deferred request is due now (step 3)
    pending = 0  # requests made and not yet through their critical section
    schedule = []  # realized requests (t, node), in order: replays the run as file:PATH
    t_quiet = 0  # last time the ring had nothing left to serve
    msgs_quiet = 0  # messages sent by then
    # Starvation is measured by how long the oldest request not yet in its
    # critical section has waited, not by the time since the last entry: a
    # quiet gap between requests is not starvation, and entries at other
    # nodes do not hide a request passed over.
    unserved = [-1] * n  # per node: index in schedule of its request not yet entered, or -1
    oldest = 0  # schedule index from which the oldest unserved request is searched
    t_oldest = None  # time of the oldest request not yet entered, or None
    closed = workload.closed_loop
    rests = nodes[0].about.get("rests", True)  # the descriptor: S's token never rests
    fast = rests and tracer is None  # the lone frame's fast path (step 2a) may run
    steps = 0
    counting = progress is not None or stop_when is not None
    t_until = _NEVER if until is None else until
    defer_busy = workload.defer_busy
    renew = getattr(workload, "renew", None)  # renew(i): node i asks again as its critical section ends
    clocked = getattr(nodes[0], "clocked", False)  # (protocol.py's header: Time)
    wakes = []  # heap of (time, node): clocked nodes' wake-ups (stale ones skipped)
    armed = [-1] * n if clocked else None  # the wake_at each node was last pushed with
    on_tokens = getattr(observer, "tokens", None)
    # observer.message_sent(src, mkind, first_word) for each new message, when it asks (the
    # Checker: a protocol whose searches it counts, BinarySearch's gimme)
    on_message = observer.message_sent if getattr(observer, "wants_messages", False) else None

    def arm(i):
        w = nodes[i].wake_at
        if w != armed[i]:
            armed[i] = w
            if w >= 0:
                heappush(wakes, (w, i))

    def next_wake():
        while wakes and armed[wakes[0][1]] != wakes[0][0]:
            heappop(wakes)
        return wakes[0][0] if wakes else None

    def done_by(i, a, t):
        # After a clocked node's handler: its wake-up, the recovery actions, then what the
        # action bits say (protocol.ACTIONS): the frames in its order, then the entry.
        arm(i)
        if a & (REGENERATED | DISCARDED) and on_tokens is not None:
            on_tokens(t, i, a)
        for b in sends(a):
            send(i, b, t)
        if a & ENTER_CS:
            enter(i, t)

    def post(i, m, t, fwd):
        # Node i puts message frame m = (.., src, dst, mkind, payload, hop) on its wire.
        nonlocal mf
        j = i + 1
        if complete and m[2] != bcast:
            j = m[2]  # straight to its destination (the complete graph)
        mf += 1
        if drop is not None and drop(t, i, m[2], m[3]):
            if tracer:
                tracer.message(t, "send", i, (m[3], m[1], m[2], m[4], m[5], fwd))
            return
        mnxt.append((0 if j == n else j, m[1], m[2], m[3], m[4], m[5]))
        if tracer:
            tracer.message(t, "send", i, (m[3], m[1], m[2], m[4], m[5], fwd))

    def arrive(m, t):
        # Message frame m reaches node m[0] (docs/frames.md, NodeLoop._on_msg).
        nonlocal holder
        j, src, dst, kind, payload, hop = m
        if tracer:
            tracer.message(t, "recv", j, (kind, src, dst, payload, hop, None))
        if dst == bcast:
            if j == src:
                return  # once round: taken off
            post(j, (j, src, dst, kind, payload, hop + 1), t, True)
        elif j != dst:
            post(j, (j, src, dst, kind, payload, hop + 1), t, True)
            return
        node = nodes[j]
        buf = bytearray((_MSG, 0, kind, src & 0xFF, dst & 0xFF)) + payload  # a frame's u8 (n > 255: sim only)
        if clocked:
            node.now = t
            a = node.on_message(kind, src, buf)
            if node.has_token:
                holder = j
            done_by(j, a, t)
            return
        a = node.on_message(kind, src, buf)
        if node.has_token:
            holder = j
        if a & ENTER_CS:
            enter(j, t)
        elif a:
            send(j, a, t)

    def send(i, a, t):
        # Carry out SEND_* bits of action mask a produced by node i at time t.
        nonlocal tok, req, ml
        if a & SEND_MSG:
            node = nodes[i]
            ml += 1
            payload = bytes(node.out[:node.out_len])
            if on_message is not None:
                on_message(i, node.out_kind, first_word(payload))
            post(i, (i, i, node.out_dst, node.out_kind, payload, 1), t, False)
        j = i + 1
        if j == n:
            j = 0
        if a & SEND_REQUEST:
            nxt.append(j << 1)
            req += 1
            if tracer:
                tracer.frame(t, "send", i, 0, None)
        if a & SEND_TOKEN:
            node = nodes[i]
            p = (node.count, node.state, node.seq, node.epoch)
            nxt.append((j << 1) | 1)
            tokq.append(p)
            tok += 1
            if tracer:
                tracer.frame(t, "send", i, 1, p)

    def enter(i, t):
        nonlocal oldest, t_oldest, counted
        if tok + req + mf != counted:
            counted = tok + req + mf
            observer.count_to(tok, req, mf, ml)
        observer.enter(t, i)
        if tracer:
            tracer.event(t, "enter", i)
        unserved[i] = -1
        # requests are made in time order: skip the entered ones (amortized O(1))
        made = len(schedule)
        while oldest < made and unserved[schedule[oldest][1]] != oldest:
            oldest += 1
        t_oldest = schedule[oldest][0] if oldest < made else None
        if cs_time == 0:
            leave(i, t)
        else:
            exits.append((t + cs_time, i))

    def leave(i, t):
        nonlocal pending, n_deferred, t_quiet, msgs_quiet, counted
        if tok + req + mf != counted:
            counted = tok + req + mf
            observer.count_to(tok, req, mf, ml)
        observer.exit(t, i)
        if tracer:
            tracer.event(t, "exit", i)
        pending -= 1
        if clocked:
            nodes[i].now = t
            done_by(i, nodes[i].exit_cs(), t)
        else:
            a = nodes[i].exit_cs()
            if a:
                send(i, a, t)
        if deferred[i]:
            # made in step 3 of this unit, like any request, so that the
            # realized schedule replays the run exactly as a file workload
            deferred[i] -= 1
            n_deferred -= 1
            ready.append(i)
        elif renew is not None and renew(i):
            ready.append(i)
        if pending == 0:
            t_quiet = t
            msgs_quiet = tok + req + mf

    def make_request(i, t):
        nonlocal pending, t_oldest, counted
        pending += 1
        unserved[i] = len(schedule)
        if t_oldest is None:
            t_oldest = t
        schedule.append((t, i))
        if tok + req + mf != counted:
            counted = tok + req + mf
            observer.count_to(tok, req, mf, ml)
        observer.request(t, i)
        if tracer:
            tracer.event(t, "req", i)
        if clocked:
            nodes[i].now = t
            done_by(i, nodes[i].request(), t)
            return
        a = nodes[i].request()
        if a & ENTER_CS:
            enter(i, t)
        elif a:
            send(i, a, t)

    nt = workload.next_time()
    if clocked:
        for node in nodes:
            node.now = 0
        for i in range(n):
            arm(i)
        done_by(holder, nodes[holder].give_token(), 0)
    else:
        a = nodes[holder].give_token()
        if a:
            send(holder, a, 0)
    t = 0
    quiescent = None
    reason = "done"
    cur = []  # frames arriving now
    while True:
        if t >= t_until:
            t = t_until  # a jump over it (nothing was due in between) ends the run at it
            reason = "time limit"
            break
        # 1. critical-section exits
        while exits and exits[0][0] <= t:
            leave(exits.pop(0)[1], t)
        # 1b. wake-ups of clocked nodes
        if clocked:
            while True:
                w = next_wake()
                if w is None or w > t:
                    break
                i = heappop(wakes)[1]
                armed[i] = -1
                nodes[i].now = t
                done_by(i, nodes[i].on_wake(), t)
        if cur:
            if fast and len(cur) == 1 and not (nxt or mcur or mnxt or ready):
                # 2a. fast path: a lone frame, and nothing else can happen while it travels:
                # carry it hop by hop, without the per-time-unit steps, until the last time
                # `stop` before anything else is due.
                stop = _NEVER if nt is None else nt
                if exits and exits[0][0] - 1 < stop:
                    stop = exits[0][0] - 1
                if pending:
                    if t_oldest is not None and t_oldest + starve_horizon + 1 < stop:
                        stop = t_oldest + starve_horizon + 1
                elif n_deferred == 0 and nt is None and (not closed or workload.exhausted):
                    if t_quiet + quiesce_horizon + 1 < stop:
                        stop = t_quiet + quiesce_horizon + 1
                f = cur[0]
                cur = ()
                i = f >> 1
                t0 = t
                if not f & 1:
                    k, a = carry_request(nodes, i, stop - t + 1)  # handlers called at t .. t + k - 1
                    t += k - 1
                    i += k - 1
                    if i >= n:
                        i %= n
                    if a == SEND_REQUEST:  # still travelling at stop: on its wire to the next node
                        req += k
                        nxt.append((0 if i + 1 == n else i + 1) << 1)
                        a = 0
                    else:
                        req += k - 1
                        if a == SEND_TOKEN and t < stop:
                            # the request reached the resting token, which is passed on at once
                            # (its fields straight to carry_token, not through tokq)
                            node = nodes[i]
                            c, s, q, e = node.count, node.state, node.seq, node.epoch
                            tok += 1
                            f = -1  # a token frame (odd), its fields in hand
                            i = 0 if i + 1 == n else i + 1
                            t += 1
                if f & 1:
                    if f != -1:
                        c, s, q, e = tokq.pop()
                    k, a, c, s, q, e = carry_token(nodes, i, c, s, q, e, stop - t + 1)
                    t += k - 1
                    i += k - 1
                    if i >= n:
                        i %= n
                    holder = i
                    if a == SEND_TOKEN:  # still travelling at stop
                        tok += k
                        nxt.append(((0 if i + 1 == n else i + 1) << 1) | 1)
                        tokq.append((c, s, q, e))
                        a = 0
                    else:
                        tok += k - 1
                steps += t - t0  # hops run here count as steps for progress
                if a & ENTER_CS:
                    enter(i, t)
                    if (exits and t_oldest is None and not (nxt or mnxt or ready or counting or clocked)
                            and (nt is None or nt >= exits[0][0])):
                        # nothing else is due before this critical section ends (a lone request,
                        # every sequential one): straight to the exit's time unit, as the steps
                        # below would come to it, without them
                        t = exits[0][0]
                        continue
                elif a:
                    send(i, a, t)
            else:
                # 2. frames, in sending order
                for f in cur:
                    i = f >> 1
                    node = nodes[i]
                    if f & 1:
                        p = tokq.pop(0)
                        if tracer:
                            tracer.frame(t, "recv", i, 1, p)
                        a = node.on_token(p[0], p[1], p[2], p[3])
                        holder = i
                        if a == SEND_TOKEN and not tracer:
                            # hot path: the token passed straight on
                            j = i + 1
                            nxt.append(((0 if j == n else j) << 1) | 1)
                            tokq.append((node.count, node.state, node.seq, node.epoch))
                            tok += 1
                            continue
                    else:
                        if tracer:
                            tracer.frame(t, "recv", i, 0, None)
                        a = node.on_request()
                        if a == SEND_REQUEST and not tracer:
                            # hot path: a request message passed on
                            j = i + 1
                            nxt.append((0 if j == n else j) << 1)
                            req += 1
                            continue
                    if a & ENTER_CS:
                        enter(i, t)
                    elif a:
                        send(i, a, t)
        if mcur:
            for m in mcur:
                arrive(m, t)
        # 3. open-loop requests: deferred ones that came due at an exit, then the scheduled ones
        while ready:
            make_request(ready.pop(0), t)
        if nt is not None and nt <= t:
            for i, line in workload.due(t):
                node = nodes[i]
                if node.pending or node.in_cs:
                    if not defer_busy:
                        raise BusyNodeError(
                            "line %s: node %d requests at t=%d but its request is still outstanding" % (line, i, t))
                    deferred[i] += 1
                    n_deferred += 1
                else:
                    make_request(i, t)
            nt = workload.next_time()
            while ready:  # a zero-length critical section ended inside this step
                make_request(ready.pop(0), t)
        if pending == 0:
            # 4. closed loop, quiescence, and the end. S never rests: for it, "no
            # request outstanding" is as quiet as the ring gets.
            while pending == 0 and (not (nxt or mnxt) or not rests):
                if closed:
                    i = workload.on_quiescent(t, holder)
                    if i is not None:
                        make_request(i, t)
                        continue
                if rests and nt is None and n_deferred == 0:
                    quiescent = True
                break
            if quiescent:
                break
            if pending == 0 and n_deferred == 0 and nt is None and (not closed or workload.exhausted):
                if not rests:
                    # S never rests: stop a stated idle horizon after the last service.
                    if t >= t_quiet + idle_horizon:
                        reason = "idle horizon"
                        break
                elif t - t_quiet > quiesce_horizon:
                    quiescent = False
                    reason = "every request was served by t=%d but frames were still moving at t=%d" % (t_quiet, t)
                    break
        if t_oldest is not None and t - t_oldest > starve_horizon:
            quiescent = False
            reason = _starved(schedule[oldest], pending, t, starve_horizon)
            break
        if counting:
            steps += 1
            if steps >= 4096:  # loop steps, or hops of the fast path: a few milliseconds
                steps = 0
                if progress is not None:
                    progress(t, workload.issued, pending, tok + req + mf)
                if stop_when is not None and stop_when():
                    reason = "stopped"
                    break
        # next time: frames sent during this unit arrive in the next one
        if nxt or mnxt:
            t += 1
            cur = nxt
            nxt = []
            mcur = mnxt
            mnxt = []
        else:
            cur = ()
            mcur = ()
            w = next_wake() if clocked else None
            t_next = _NEVER if w is None else w
            if exits and exits[0][0] < t_next:
                t_next = exits[0][0]
            if nt is not None and nt < t_next:
                t_next = nt
            if t_next == _NEVER:  # the run ends at the last time something happened, not at _NEVER
                quiescent = False
                reason = "%d request(s) pending, nothing in flight and nothing scheduled (deadlock)" % pending
                break
            t = t_next
    observer.count_to(tok, req, mf, ml)
    return {
        "end_time": t,
        "quiescent": quiescent,
        "reason": reason,
        "token_msgs": tok,
        "request_msgs": req,
        "msg_frames": mf,
        "msg_logical": ml,
        "schedule": schedule,
        "holder": holder,
        "idle_since": t_quiet,
        "messages_when_idle": msgs_quiet,
        "in_flight": len(nxt) + len(mnxt),
    }


def _starved(first, pending, t, horizon):
    return ("%d request(s) pending; the oldest (node %d, made at t=%d) is still waiting at t=%d, "
            "past the starvation horizon of %d time units" % (pending, first[1], first[0], t, horizon))
