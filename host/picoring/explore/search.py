"""The fault-free explorer's analysis: explore() builds the state graph of a small ring
(model.Explorer) and measures it (safety, liveness, quiescence, exact worst cases, each
with a schedule); replay() re-runs a schedule on fresh node objects; format_report()
prints the result. The model and its measures are described in model.py."""

import time
from collections import deque
from fractions import Fraction

from ..firmware.protocol import BROADCAST, ENTER_CS, REGISTRY, SEND_MSG, SEND_REQUEST, load, sends
from .graph import DELIVERED, ENTERED, FORWARDS, HOP_FRAMES, INF, LOGICAL, _schedule_lines
from .model import Explorer, Msg, StateBudgetExceeded, _protocol_class, message_buffer
from .states import why_not_rotated

# -- the whole analysis ------------------------------------------------------

def _fmt_schedule(labels, n):
    out = []
    for lb in labels:
        if lb[0] != "deliver":
            out.append("%s %d" % (lb[0], lb[1]))
        elif isinstance(lb[2], Msg):
            out.append("deliver " + lb[2].text(lb[1], n))  # "msg i->j kind=K from=S to=D"
        else:
            out.append("deliver %s %d->%d" % (lb[2], lb[1], (lb[1] + 1) % n))
    return out


def _base_protocol(cls):
    """The registered protocol cls is or derives from (a planted bug is held to its
    base's bounds)."""
    for c in cls.__mro__:
        for name in REGISTRY:
            if c is load(name):
                return name
    return ""


def _per_request(ex, longest, paper, checked, sched):
    """The worst of a count per request over the complete runs (quiescent end states):
    longest is ex.longest(weight)."""
    M, pred = longest
    d = {"paper_bound": paper, "checked_bound": checked}
    if ex.cycle_states:
        d["worst"] = None
        d["unbounded"] = True
        d["why"] = "a reachable cycle: the token (or a message) moves forever with finitely many requests"
    best = None
    for v in ex.quiescent:
        k = ex.requests_made(v)
        if k == 0 or M[v] >= INF:
            continue
        r = Fraction(M[v], k)
        if best is None or r > best[0]:
            best = (r, v)
    if not ex.cycle_states:
        d["unbounded"] = False
        if best is not None:
            r, v = best
            d["worst"] = float(r)
            d["worst_exact"] = "%d/%d" % (M[v], ex.requests_made(v))
            d["worst_over_n"] = round(float(r) / ex.n, 4)
            d["schedule"] = sched(ex.path_longest(pred, v))
    elif best is not None:
        r, v = best
        d["worst_over_quiet_runs"] = float(r)
        d["worst_over_quiet_runs_exact"] = "%d/%d" % (M[v], ex.requests_made(v))
    if d.get("worst") is not None and checked is not None:
        d["within_checked"] = d["worst"] <= checked
    if d.get("worst") is not None and paper is not None:
        d["within_paper"] = d["worst"] <= paper
    return d


def explore(protocol, n, requests_per_node=1, max_states=2_000_000, exact=False, start=None, progress=None,
            symmetry=None):
    """Explore and analyse; returns a JSON-able report dict. progress(expanded, found): as the
    state graph grows (model.Explorer.build). symmetry: store one state per rotation class
    (model.rotation_symmetric); None: whenever the protocol allows it."""
    t0 = time.perf_counter()
    refused = why_not_rotated(_protocol_class(protocol, start)[0], n)
    if symmetry is None:
        symmetry = refused is None
    ex = Explorer(protocol, n, requests_per_node, max_states=max_states, exact=exact, start=start,
                  rotations=symmetry)
    rep = {
        "protocol": ex.protocol,
        "n": n,
        "requests_per_node": requests_per_node,
        "model": ("asynchronous, FIFO links; token starts at rest at node %d (rules the same at every node up "
                  "to a rotation: any start is a rotation of this one)" % ex.start_node),
        "abstraction": "full attributes" if exact else "seq/epoch dropped, dead count/state of non-holders zeroed",
        "symmetry": ("rotation: one state per rotation class (states, transitions and state counts are of "
                     "classes)" if symmetry else None),
        "symmetry_refused": refused,  # why the protocol does not take the rotation (None: it does)
        "state_attributes": list(ex.fields + ex.buffers),
        "layer_messages": ex.messages,  # the protocol sends messages of the layer: counts can differ
    }
    try:
        ex.build(progress)
    except StateBudgetExceeded as e:
        rep.update(complete=False, error=str(e), states=len(ex.states) if hasattr(ex, "states") else None,
                   seconds=round(time.perf_counter() - t0, 3), ok=False)
        return rep
    ex.sccs()
    N = len(ex.states)
    if symmetry:
        rep["full_states"] = ex.full_states()  # the states the classes stand for (graph.full_states)
    sched = lambda labels: _fmt_schedule(labels, n)  # noqa: E731
    rep["complete"] = True
    rep["states"] = N
    rep["transitions"] = len(ex.edges)
    rep["max_depth"] = max(ex.depth)
    # safety
    if ex.first_safety is not None:
        rep["safety"] = {"ok": False, "schedule": sched(ex.path_to(ex.first_safety))}
    else:
        rep["safety"] = {"ok": True}
    if ex.first_token_error is not None:
        rep["token_integrity"] = {"ok": False, "schedule": sched(ex.path_to(ex.first_token_error))}
    else:
        rep["token_integrity"] = {"ok": True}
    if ex.token_kinds is None:
        rep["token_integrity"]["note"] = ("at most one holder only: the descriptor names no token message "
                                          "(about['messages']['token']['kind']), so tokens in flight "
                                          "cannot be counted")
    # deadlock
    if ex.stuck:
        s = min(ex.stuck, key=lambda v: ex.depth[v])
        rep["deadlock"] = {"ok": False, "states": len(ex.stuck), "schedule": sched(ex.path_to(s)),
                           "pending": ex.pending_at(s)}
    else:
        rep["deadlock"] = {"ok": True}
    # cycles
    starving = [v for v in ex.cycle_states if ex._pending_of(v)]
    live = [v for v in ex.cycle_states if not ex._pending_of(v)]
    if starving:
        s = min(starving, key=lambda v: ex.depth[v])
        rep["starvation"] = {"ok": False, "states": len(starving), "prefix": sched(ex.path_to(s)),
                             "cycle": sched(ex.cycle_from(s)), "pending": ex.pending_at(s)}
    else:
        rep["starvation"] = {"ok": True}
    served_ok = not starving and not ex.stuck
    rep["served"] = {"ok": served_ok}
    if live:
        s = min(live, key=lambda v: ex.depth[v])
        lv = {"ok": False, "states": len(live), "prefix": sched(ex.path_to(s)), "cycle": sched(ex.cycle_from(s))}
        if not ex.uses_requests:
            lv["by_design"] = True
            lv["note"] = "never quiescent by design (the token circulates forever)"
        rep["livelock"] = lv
    else:
        rep["livelock"] = {"ok": True}
    rep["quiescent_states"] = len(ex.quiescent)
    _worst_cases(ex, rep, sched)
    rep["seconds"] = round(time.perf_counter() - t0, 3)
    rep["failures"] = _failures(rep, served_ok, live and ex.uses_requests)
    rep["ok"] = not rep["failures"]
    return rep


def _worst_cases(ex, rep, sched):
    """The exact worst cases into rep: messages per request, fairness, forwards, service traffic."""
    from ..check import registry
    from ..check.checker import bounds_for, paper_bounds_for

    n, requests_per_node = ex.n, ex.R
    # worst cases: hop frames (the checker's messages) and logical messages; for S, Q
    # and D every message is one hop, the two the same
    base = _base_protocol(ex.cls)  # a variant (a planted bug) is held to its base's bounds
    bm, bs = bounds_for(base, n) if base else (None, None)
    pm, ps = paper_bounds_for(base, n) if base else (None, None)
    bl = registry.bound(base, "logical_per_request", n) if base else None
    pl = registry.bound(base, "logical_per_request", n, "paper") if base else None
    hops = ex.longest(HOP_FRAMES)
    logical = ex.longest(LOGICAL) if ex.messages else hops
    rep["messages_per_request"] = _per_request(ex, hops, pm, bm, sched)
    rep["logical_per_request"] = _per_request(ex, logical, pl, bl, sched)
    po = registry.bound(base, "overtaken", n, "paper") if base else None
    if po is not None:
        # Fairness (the descriptor's "overtaken" bound): the most entries by other nodes while
        # one request waits (its own entry ends the wait: counted by ENTERED, taken off).
        worst, w = ex.service_traffic(ENTERED, ENTERED)["a"]
        rep["overtaken"] = {"paper_bound": po, "worst": None if worst >= INF else max(worst - 1, 0),
                            "schedule": sched(w[2]) if w is not None and worst < INF else None}
    if ex.search is not None:
        # Lemma 6 per request (the checker's max_forwards_per_request): how often another node
        # sent a pending request's search message on, up to its entry. With one request per
        # node exact; with more, a gimme of a request already served counts for the next one
        # too (the edge names the requester, not which of its requests): an upper bound.
        worst, w = ex.service_traffic(FORWARDS, FORWARDS)["a"]
        cb = registry.bound(base, "forwards_per_request", n) if base else None
        fw = {"paper_bound": registry.bound(base, "forwards_per_request", n, "paper") if base else None,
              "checked_bound": cb, "exact": requests_per_node <= 1,
              "worst": None if worst >= INF else max(worst, 0)}
        if w is not None and worst < INF:
            fw["node"], fw["schedule"] = w[0], sched(w[2])
        if cb is not None and fw["worst"] is not None:
            fw["within_checked"] = fw["worst"] <= cb
        rep["forwards_per_request"] = fw
    st = ex.service_traffic(HOP_FRAMES, DELIVERED)
    st["c"] = ex.service_traffic(LOGICAL, DELIVERED)["a"] if ex.messages else st["a"]
    for reading, key, (pb, cb) in (("a", "service_traffic_sent", (ps, bs)), ("b", "service_traffic_delivered", (ps, bs)),
                                   ("c", "service_traffic_logical", (None, None))):
        val, w = st[reading]
        d = {"paper_bound": pb, "checked_bound": cb}
        if val >= INF:
            d["worst"] = None
            d["unbounded"] = True
        else:
            d["worst"] = val if val >= 0 else None
            if w is not None:
                node, start_at, labels = w
                d["node"] = node
                d["request_step"] = start_at + 1
                d["schedule"] = sched(labels)
            if cb is not None and d["worst"] is not None:
                d["within_checked"] = d["worst"] <= cb
            if pb is not None and d["worst"] is not None:
                d["within_paper"] = d["worst"] <= pb
        rep[key] = d


def _failures(rep, served_ok, not_quiescent):
    """The report's failed checks, by name."""
    fails = []
    if not rep["safety"]["ok"]:
        fails.append("safety")
    if not rep["token_integrity"]["ok"]:
        fails.append("token")
    if not served_ok:
        fails.append("liveness")
    if not_quiescent:
        fails.append("quiescence")
    for key in ("service_traffic_sent",):
        if rep[key].get("within_checked") is False:
            fails.append("checked service-traffic bound")
    if rep["messages_per_request"].get("within_checked") is False:
        fails.append("checked messages-per-request bound")
    if rep["logical_per_request"].get("within_checked") is False:
        fails.append("checked logical-messages-per-request bound")
    fw = rep.get("forwards_per_request") or {}
    if fw.get("within_checked") is False and fw["exact"]:
        fails.append("checked forwards-per-request bound")
    return fails


def replay(protocol, n, labels, start=None, checker=None):
    """Run a schedule (explorer labels or "kind i" strings) on fresh node objects
    with real FIFO queues, independently of the explorer's state encoding; message
    frames are passed on and delivered as NodeLoop._on_msg does.
    Returns per-request service traffic (node, hop frames sent, frames delivered,
    logical messages sent) and the totals ("sent": hop frames, "logical").
    checker: a picoring.check.checker.Checker fed the run (step k is time k)."""
    cls = _protocol_class(protocol, start)[0]
    if start is None:
        start = cls.first
    nodes = [cls(i, n) for i in range(n)]
    links = [deque() for _ in range(n)]
    delivered = 0
    tok = req = mf = ml = 0  # token and request frames, message hop frames, messages (as simcore counts)
    in_cs = set()
    waiting = {}  # node -> (sent, delivered, logical) at its request
    services = []
    safety = True
    requests = 0

    def counts():
        return tok + req + mf, tok + req + ml

    def act(i, a):
        # the frames in the node loop's order (protocol.ACTIONS): the message, then the
        # token (or the request frame)
        nonlocal tok, req, mf, ml
        nd = nodes[i]
        for b in sends(a):
            if b == SEND_MSG:
                links[i].append(("msg", nd.out_kind, i, nd.out_dst, bytes(nd.out[:nd.out_len])))
                mf += 1
                ml += 1
            elif b == SEND_REQUEST:
                links[i].append(None)
                req += 1
            else:
                links[i].append((nd.count, nd.state, nd.seq, nd.epoch))
                tok += 1
        return bool(a & ENTER_CS)

    def entered(i):
        nonlocal safety
        if in_cs:
            safety = False
        in_cs.add(i)
        s0, d0, l0 = waiting.pop(i)
        sent, logical = counts()
        services.append((i, sent - s0, delivered - d0, logical - l0))
        if checker is not None:
            checker.count_to(tok, req, mf, ml)
            checker.enter(step, i)

    step = 0
    act(start, nodes[start].give_token())
    for step, lb in enumerate(labels, 1):
        if isinstance(lb, str):
            parts = lb.split()
            lb = (parts[0], int(parts[2].split("->")[0]) if parts[0] == "deliver" else int(parts[1]))
        kind, i = lb[0], lb[1]
        if kind == "request":
            requests += 1
            sent, logical = counts()
            waiting[i] = (sent, delivered, logical)
            if checker is not None:
                checker.count_to(tok, req, mf, ml)
                checker.request(step, i)
            if act(i, nodes[i].request()):
                entered(i)
        elif kind == "exit":
            in_cs.discard(i)
            if checker is not None:
                checker.count_to(tok, req, mf, ml)
                checker.exit(step, i)
            act(i, nodes[i].exit_cs())
        else:
            f = links[i].popleft()
            delivered += 1
            j = (i + 1) % n
            if f is None:
                a = nodes[j].on_request()
            elif f[0] != "msg":
                a = nodes[j].on_token(*f)
            else:
                _, mk, src, dst, payload = f
                buf = message_buffer(mk, src, dst, payload)
                a = 0
                if dst == j:
                    a = nodes[j].on_message(mk, src, buf)
                elif src != j:  # back at its sender, a broadcast is taken off
                    links[j].append(f)  # passed on first, then a broadcast is delivered here too
                    mf += 1
                    if dst == BROADCAST:
                        a = nodes[j].on_message(mk, src, buf)
            if act(j, a):
                entered(j)
    if checker is not None:
        checker.count_to(tok, req, mf, ml)
    sent, logical = counts()
    return {"sent": sent, "logical": logical, "delivered": delivered, "requests": requests, "services": services,
            "safety": safety, "in_flight": sum(len(q) for q in links),
            "pending": [i for i, x in enumerate(nodes) if x.pending],
            "holders": [i for i, x in enumerate(nodes) if x.has_token]}


# -- text report ---------------------------------------------------------------

def format_report(rep):
    lines = []
    head = "explore %s  n=%d  R=%d per node" % (rep["protocol"], rep["n"], rep["requests_per_node"])
    lines.append(head)
    lines.append("  model: " + rep["model"])
    lines.append("  abstraction: " + rep["abstraction"])
    if rep.get("symmetry"):
        lines.append("  symmetry: " + rep["symmetry"])
    else:
        lines.append("  symmetry: none (%s)" % (rep.get("symmetry_refused") or "--no-symmetry"))
    lines.append("  node state kept: " + ", ".join(rep["state_attributes"]))
    if not rep.get("complete"):
        lines.append("  INCOMPLETE: " + rep.get("error", ""))
        lines.append("  states explored before stopping: %s, %.1f s" % (rep.get("states"), rep["seconds"]))
        return "\n".join(lines)
    lines.append("  states %d, transitions %d, longest shortest-schedule %d steps, %.2f s"
                 % (rep["states"], rep["transitions"], rep["max_depth"], rep["seconds"]))
    if rep.get("full_states"):
        full, kept = rep["full_states"], rep["states"]
        lines.append("  reduction: %d rotation classes kept for the %d states of the full graph: %d fewer (%.1fx)"
                     % (kept, full, full - kept, full / kept))

    def sched(label, s, indent="      "):
        _schedule_lines(lines, label, s, indent)

    ok = lambda b: "ok" if b else "FAIL"  # noqa: E731
    lines.append("  safety (at most one node in its critical section): %s" % ok(rep["safety"]["ok"]))
    if not rep["safety"]["ok"]:
        sched("shortest schedule to two nodes in the critical section", rep["safety"]["schedule"])
    if not rep["token_integrity"]["ok"]:
        lines.append("  token integrity (exactly one token, no impossible frame): FAIL")
        sched("shortest schedule", rep["token_integrity"]["schedule"])
    if rep["token_integrity"].get("note"):
        lines.append("  token integrity: " + rep["token_integrity"]["note"])
    lines.append("  every pending request can be served: %s" % ok(rep["served"]["ok"]))
    if not rep["deadlock"]["ok"]:
        d = rep["deadlock"]
        lines.append("    deadlock: %d quiet states with a pending request (nodes %s)" % (d["states"], d["pending"]))
        sched("shortest schedule to a deadlock", d["schedule"])
    if not rep["starvation"]["ok"]:
        d = rep["starvation"]
        lines.append("    starvation: a cycle with nodes %s pending" % d["pending"])
        sched("shortest schedule entering it", d["prefix"])
        sched("then forever", d["cycle"])
    lv = rep["livelock"]
    if lv["ok"]:
        lines.append("  quiescence (every execution goes quiet once requests stop): ok (%d quiescent states)"
                     % rep["quiescent_states"])
    elif lv.get("by_design"):
        lines.append("  quiescence: never quiescent by design (S: the token circulates forever); not a failure")
    else:
        lines.append("  quiescence: FAIL: livelock, %d states on cycles with nothing pending" % lv["states"])
        sched("shortest schedule entering it", lv["prefix"])
        sched("then forever", lv["cycle"])
    one_hop = not rep.get("layer_messages")
    for key, what in (("messages_per_request", "messages per request (hop frames)"),
                      ("logical_per_request", "logical messages per request")):
        m = rep[key]
        if one_hop and key == "logical_per_request":
            lines.append("  %s: the same (every message is one hop)" % what)
            continue
        if m.get("unbounded"):
            extra = ""
            if m.get("worst_over_quiet_runs") is not None:
                extra = " (over the runs that do go quiet: %s = %.3f)" % (m["worst_over_quiet_runs_exact"],
                                                                          m["worst_over_quiet_runs"])
            lines.append("  %s: unbounded%s" % (what, extra))
        elif m.get("worst") is not None:
            lines.append("  %s: worst %s = %.3f  (paper %s, checked %s)"
                         % (what, m["worst_exact"], m["worst"], m["paper_bound"], m["checked_bound"]))
            sched("a complete run reaching it", m["schedule"])
    for key, what in (("service_traffic_sent", "service traffic (a) hop frames sent"),
                      ("service_traffic_delivered", "service traffic (b) frames delivered"),
                      ("service_traffic_logical", "service traffic (c) logical messages sent")):
        d = rep[key]
        if one_hop and key == "service_traffic_logical":
            lines.append("  %s: the same as (a)" % what)
            continue
        if d.get("unbounded"):
            lines.append("  %s: unbounded" % what)
            continue
        lines.append("  %s: worst %s  (paper %s, checked %s)" % (what, d["worst"], d["paper_bound"], d["checked_bound"]))
        if d.get("schedule"):
            sched("reached by node %d, request at step %d" % (d["node"], d["request_step"]), d["schedule"])
    if "overtaken" in rep:
        d = rep["overtaken"]
        lines.append("  entries by other nodes while one request waits: worst %s  (paper %s)"
                     % ("unbounded" if d["worst"] is None else d["worst"], d["paper_bound"]))
    if "forwards_per_request" in rep:
        d = rep["forwards_per_request"]
        lines.append("  forwards of one request's search (Lemma 6): worst %s%s  (paper %s, checked %s)"
                     % ("unbounded" if d["worst"] is None else d["worst"], "" if d["exact"] else " (an upper bound)",
                        d["paper_bound"], d["checked_bound"]))
        if d.get("schedule") and d.get("within_checked") is False:
            sched("reached by node %d" % d["node"], d["schedule"])
    lines.append("  verdict: %s" % ("ok" if rep["ok"] else "FAIL: " + ", ".join(rep["failures"])))
    return "\n".join(lines)
