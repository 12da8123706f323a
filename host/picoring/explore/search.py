"""The fault-free explorer's analysis: explore() builds the state graph of a small ring
(model.Explorer) and measures it (safety, liveness, quiescence, exact worst cases, each
with a schedule); replay() re-runs a schedule on fresh node objects; format_report()
prints the result. The model and its measures are described in model.py."""

import time
from collections import deque
from fractions import Fraction

from ..firmware.protocol import ENTER_CS, PROTOCOLS, SEND_REQUEST, SEND_TOKEN
from .model import INF, Explorer, StateBudgetExceeded, _schedule_lines

# -- the whole analysis ------------------------------------------------------

def _fmt_schedule(labels, n):
    out = []
    for lb in labels:
        if lb[0] == "deliver":
            out.append("deliver %s %d->%d" % (lb[2], lb[1], (lb[1] + 1) % n))
        else:
            out.append("%s %d" % (lb[0], lb[1]))
    return out


def _base_protocol(cls):
    for c in cls.__mro__:
        for name, k in PROTOCOLS.items():
            if c is k:
                return name
    return ""


def explore(protocol, n, requests_per_node=1, max_states=2_000_000, exact=False, start=0, progress=None):
    """Explore and analyse; returns a JSON-able report dict. progress(expanded, found): as the
    state graph grows (model.Explorer.build)."""
    from ..check.checker import bounds_for, paper_bounds_for

    t0 = time.perf_counter()
    ex = Explorer(protocol, n, requests_per_node, max_states=max_states, exact=exact, start=start)
    name = ex.protocol
    rep = {
        "protocol": name,
        "n": n,
        "requests_per_node": requests_per_node,
        "model": "asynchronous, FIFO links; token starts at rest at node %d (ring symmetry: any start is a rotation)" % start,
        "abstraction": "full attributes" if exact else "seq/epoch dropped, dead count/state of non-holders zeroed",
    }
    try:
        ex.build(progress)
    except StateBudgetExceeded as e:
        rep.update(complete=False, error=str(e), states=len(ex.states) if hasattr(ex, "states") else None,
                   seconds=round(time.perf_counter() - t0, 3), ok=False)
        return rep
    ex.sccs()
    N = len(ex.states)
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
    # deadlock
    if ex.stuck:
        s = min(ex.stuck, key=lambda v: ex.depth[v])
        rep["deadlock"] = {"ok": False, "states": len(ex.stuck), "schedule": sched(ex.path_to(s)),
                           "pending": ex._pending_of(s)}
    else:
        rep["deadlock"] = {"ok": True}
    # cycles
    starving = [v for v in ex.cycle_states if ex._pending_of(v)]
    live = [v for v in ex.cycle_states if not ex._pending_of(v)]
    if starving:
        s = min(starving, key=lambda v: ex.depth[v])
        rep["starvation"] = {"ok": False, "states": len(starving), "prefix": sched(ex.path_to(s)),
                             "cycle": sched(ex.cycle_from(s)), "pending": ex._pending_of(s)}
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
    # worst cases
    M = ex.longest_messages()
    base = _base_protocol(ex.cls)  # a variant (a planted bug) is held to its base's bounds
    bm, bs = bounds_for(base, n)
    pm, ps = paper_bounds_for(base, n)
    mpr = {"paper_bound": pm, "checked_bound": bm}
    if ex.cycle_states:
        mpr["worst"] = None
        mpr["unbounded"] = True
        mpr["why"] = "a reachable cycle: the token (or a message) moves forever with finitely many requests"
    best = None
    finite_best = None
    for v in ex.quiescent:
        k = ex.requests_made(v)
        if k == 0:
            continue
        if M[v] >= INF:
            continue
        r = Fraction(M[v], k)
        if finite_best is None or r > finite_best[0]:
            finite_best = (r, v)
    if not ex.cycle_states:
        best = finite_best
        mpr["unbounded"] = False
        if best is not None:
            r, v = best
            mpr["worst"] = float(r)
            mpr["worst_exact"] = "%d/%d" % (M[v], ex.requests_made(v))
            mpr["worst_over_n"] = round(float(r) / n, 4)
            mpr["schedule"] = sched(ex.path_longest(v))
    elif finite_best is not None:
        r, v = finite_best
        mpr["worst_over_quiet_runs"] = float(r)
        mpr["worst_over_quiet_runs_exact"] = "%d/%d" % (M[v], ex.requests_made(v))
    if mpr.get("worst") is not None and bm is not None:
        mpr["within_checked"] = mpr["worst"] <= bm
    if mpr.get("worst") is not None and pm is not None:
        mpr["within_paper"] = mpr["worst"] <= pm
    rep["messages_per_request"] = mpr
    st = ex.service_traffic()
    for reading, key in (("a", "service_traffic_sent"), ("b", "service_traffic_delivered")):
        val, w = st[reading]
        d = {"paper_bound": ps, "checked_bound": bs}
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
            if bs is not None and d["worst"] is not None:
                d["within_checked"] = d["worst"] <= bs
            if ps is not None and d["worst"] is not None:
                d["within_paper"] = d["worst"] <= ps
        rep[key] = d
    rep["seconds"] = round(time.perf_counter() - t0, 3)
    fails = []
    if not rep["safety"]["ok"]:
        fails.append("safety")
    if not rep["token_integrity"]["ok"]:
        fails.append("token")
    if not served_ok:
        fails.append("liveness")
    if live and ex.uses_requests:
        fails.append("quiescence")
    for key in ("service_traffic_sent",):
        if rep[key].get("within_checked") is False:
            fails.append("checked service-traffic bound")
    if rep["messages_per_request"].get("within_checked") is False:
        fails.append("checked messages-per-request bound")
    rep["failures"] = fails
    rep["ok"] = not fails
    return rep


def replay(protocol, n, labels, start=0, checker=None):
    """Run a schedule (explorer labels or "kind i" strings) on fresh node objects
    with real FIFO queues, independently of the explorer's state encoding.
    Returns per-request service traffic (sent, delivered) and the totals.
    checker: a picoring.check.checker.Checker fed the run (step k is time k)."""
    cls = PROTOCOLS[protocol] if isinstance(protocol, str) else protocol
    nodes = [cls(i, n) for i in range(n)]
    links = [deque() for _ in range(n)]
    sent = delivered = 0
    in_cs = set()
    waiting = {}  # node -> (sent, delivered) at its request
    services = []
    safety = True
    requests = 0

    def act(i, a):
        nonlocal sent, tokens
        j = i
        if a & SEND_REQUEST:
            links[j].append(None)
            sent += 1
        if a & SEND_TOKEN:
            nd = nodes[i]
            links[j].append((nd.count, nd.state, nd.seq, nd.epoch))
            sent += 1
            tokens += 1
        if a & ENTER_CS:
            return True
        return False

    def entered(i, dsent, ddeliv):
        nonlocal safety
        if in_cs:
            safety = False
        in_cs.add(i)
        s0, d0 = waiting.pop(i)
        services.append((i, sent - s0, delivered - d0))
        if checker is not None:
            checker.count_to(tokens, sent - tokens)
            checker.enter(step, i)

    tokens = 0
    step = 0

    act(start, nodes[start].give_token())
    for step, lb in enumerate(labels, 1):
        if isinstance(lb, str):
            parts = lb.split()
            lb = (parts[0], int(parts[2].split("->")[0]) if parts[0] == "deliver" else int(parts[1]))
        kind, i = lb[0], lb[1]
        if kind == "request":
            requests += 1
            waiting[i] = (sent, delivered)
            if checker is not None:
                checker.count_to(tokens, sent - tokens)
                checker.request(step, i)
            if act(i, nodes[i].request()):
                entered(i, 0, 0)
        elif kind == "exit":
            in_cs.discard(i)
            if checker is not None:
                checker.count_to(tokens, sent - tokens)
                checker.exit(step, i)
            act(i, nodes[i].exit_cs())
        else:
            f = links[i].popleft()
            delivered += 1
            j = (i + 1) % n
            a = nodes[j].on_request() if f is None else nodes[j].on_token(*f)
            if act(j, a):
                entered(j, 0, 0)
    if checker is not None:
        checker.count_to(tokens, sent - tokens)
    return {"sent": sent, "delivered": delivered, "requests": requests, "services": services,
            "safety": safety, "in_flight": sum(len(q) for q in links),
            "pending": [i for i, x in enumerate(nodes) if x.pending]}


# -- text report ---------------------------------------------------------------

def format_report(rep):
    lines = []
    head = "explore %s  n=%d  R=%d per node" % (rep["protocol"], rep["n"], rep["requests_per_node"])
    lines.append(head)
    lines.append("  model: " + rep["model"])
    lines.append("  abstraction: " + rep["abstraction"])
    if not rep.get("complete"):
        lines.append("  INCOMPLETE: " + rep.get("error", ""))
        lines.append("  states explored before stopping: %s, %.1f s" % (rep.get("states"), rep["seconds"]))
        return "\n".join(lines)
    lines.append("  states %d, transitions %d, longest shortest-schedule %d steps, %.2f s"
                 % (rep["states"], rep["transitions"], rep["max_depth"], rep["seconds"]))

    def sched(label, s, indent="      "):
        _schedule_lines(lines, label, s, indent)

    ok = lambda b: "ok" if b else "FAIL"  # noqa: E731
    lines.append("  safety (at most one node in its critical section): %s" % ok(rep["safety"]["ok"]))
    if not rep["safety"]["ok"]:
        sched("shortest schedule to two nodes in the critical section", rep["safety"]["schedule"])
    if not rep["token_integrity"]["ok"]:
        lines.append("  token integrity (exactly one token, no impossible frame): FAIL")
        sched("shortest schedule", rep["token_integrity"]["schedule"])
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
    m = rep["messages_per_request"]
    if m.get("unbounded"):
        extra = ""
        if m.get("worst_over_quiet_runs") is not None:
            extra = " (over the runs that do go quiet: %s = %.3f)" % (m["worst_over_quiet_runs_exact"], m["worst_over_quiet_runs"])
        lines.append("  messages per request: unbounded%s" % extra)
    elif m.get("worst") is not None:
        lines.append("  messages per request: worst %s = %.3f  (paper %s, checked %s)"
                     % (m["worst_exact"], m["worst"], m["paper_bound"], m["checked_bound"]))
        sched("a complete run reaching it", m["schedule"])
    for key, what in (("service_traffic_sent", "service traffic (a) frames sent"),
                      ("service_traffic_delivered", "service traffic (b) frames delivered")):
        d = rep[key]
        if d.get("unbounded"):
            lines.append("  %s: unbounded" % what)
            continue
        lines.append("  %s: worst %s  (paper %s, checked %s)" % (what, d["worst"], d["paper_bound"], d["checked_bound"]))
        if d.get("schedule"):
            sched("reached by node %d, request at step %d" % (d["node"], d["request_step"]), d["schedule"])
    lines.append("  verdict: %s" % ("ok" if rep["ok"] else "FAIL: " + ", ".join(rep["failures"])))
    return "\n".join(lines)
