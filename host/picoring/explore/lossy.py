"""The explorer's lossy mode, its search: explore_faults() checks the token recovery's
SAFETY over every schedule within the fault budgets (lossy_model.LossyExplorer), each
violation with a shortest schedule; replay_faults() re-runs one on fresh node objects;
format_faults_report() prints the result."""

import time
from collections import deque

from ..firmware.protocol import DISCARDED, ENTER_CS
from .lossy_model import (_DIAGNOSTICS, _INVARIANTS, F_TOKEN, LossyExplorer, _deliver, _frames_of, _kind_name,
                          fmt_lossy_label, frame_text)
from .graph import _schedule_lines
from .model import StateBudgetExceeded, _protocol_class

def explore_faults(protocol, n, requests_per_node=1, drops=0, timeouts=0, restarts=0, boot=False,
                   max_states=2_000_000, exact=False, drop_anywhere=False, stop_on_violation=False,
                   can_form=False, progress=None):
    """Lossy mode: every reachable state under the fault budgets; safety only.
    can_form: also decide, for every reachable state, whether a formed ring is
    still reachable from it (keeps the graph: more memory).
    progress(expanded, found): as the state graph grows.
    Returns a JSON-able report dict (see the comment above LossyExplorer)."""
    t0 = time.perf_counter()
    ex = LossyExplorer(protocol, n, requests_per_node, drops, timeouts, restarts, boot=boot,
                       max_states=max_states, exact=exact, drop_anywhere=drop_anywhere)
    rep = {
        "protocol": ex.protocol,
        "n": n,
        "requests_per_node": requests_per_node,
        "faults": {"drops": drops, "timeouts": timeouts, "restarts": restarts},
        "start": "boot" if boot else "token",
        "model": ("asynchronous, FIFO links, bounded faults (frame lost, timeout at any moment, restart); "
                  + ("every node boots, its join in flight; node 0 is the starter" if boot
                     else "the token at rest at node 0 (give_token)")),
        "abstraction": "full attributes" if exact else
        "observer counters and claim outputs dropped, dead count/state/epoch of non-holders zeroed",
        "drops": "any frame" if drop_anywhere else "head of a link (equivalent)",
    }
    try:
        ex.build(stop_on_violation=stop_on_violation, keep_edges=can_form, progress=progress)
    except StateBudgetExceeded as e:
        # what was found so far is still reported (each schedule is real; "ok"
        # only means "not found among the states explored")
        rep["error"] = str(e)
        ex.complete = False
    first = ex.first
    rep["complete"] = ex.complete
    rep["budget_hit"] = ex.budget_hit
    rep["states"] = len(ex.states)
    rep["transitions"] = ex.transitions
    rep["max_depth"] = max(ex.depth)
    fails = []
    for key, what in _INVARIANTS:
        d = {"ok": key not in first, "what": what}
        if key in first:
            labels = ex.schedule_of(first[key])
            d["schedule"] = ex.fmt(labels)
            d["steps"] = len(labels)
            fails.append(key)
        rep[key] = d
    for key, what in _DIAGNOSTICS:
        d = {"ok": key not in first, "what": what}
        if key in first:
            labels = ex.schedule_of(first[key])
            d["schedule"] = ex.fmt(labels)
            d["steps"] = len(labels)
        rep[key] = d
    d = {"ok": "one_live_token_now" not in first, "states": ex.counts["two_live_now"]}
    if not d["ok"]:
        d["schedule"] = ex.fmt(ex.schedule_of(first["one_live_token_now"]))
    rep["live_tokens_now"] = d
    rep["max_tokens"] = ex.max_tokens
    rep["max_live_tokens"] = ex.max_live
    for key in ("impossible_frame", "token_and_request"):
        if key in first:
            rep[key] = {"schedule": ex.fmt(ex.schedule_of(first[key]))}
    if "formed" in first:
        labels = ex.schedule_of(first["formed"])
        rep["formed"] = {"reachable": True, "steps": len(labels), "schedule": ex.fmt(labels)}
    else:
        rep["formed"] = {"reachable": False}
    if can_form and ex.complete:
        ok, bad = ex.can_form()
        d = {"states_that_can": sum(ok), "states": len(ok), "all": bad is None}
        if bad is not None:
            d["schedule"] = ex.fmt(ex.path_to(bad))
        rep["formed"]["from_every_state"] = d
    rep["counts"] = dict(ex.counts)
    if ex.budget_hit:
        fails.append("incomplete")
    rep["failures"] = fails
    rep["ok"] = not fails
    rep["seconds"] = round(time.perf_counter() - t0, 3)
    return rep


def _parse_lossy_label(lb):
    """A label tuple, or its text, -> (kind, i, frame kind or None, position)."""
    if isinstance(lb, tuple):
        if lb[0] in ("deliver", "drop"):
            return lb[0], lb[1], _kind_name(lb[2]), (lb[3] if len(lb) > 3 else 0), lb[2]
        return lb[0], lb[1], None, 0, None
    w = lb.split()
    if w[0] in ("deliver", "drop"):
        pos = int(w[3][1:]) if len(w) > 3 and w[3].startswith("@") else 0
        return w[0], int(w[2].split("->")[0]), w[1], pos, None
    return w[0], int(w[1]), None, 0, None


def replay_faults(protocol, n, labels, boot=False):
    """Run a lossy-mode schedule (labels or their text) on fresh node objects with
    real FIFO queues, independently of the explorer's encoding, checking the
    invariants after every step. Returns {"violations": [(step, invariant)],
    "entries": [(step, node, seq)], "failed": [(step, node, why)] (requests lost
    by a restart), "in_flight" (frames), "tokens" (held or in flight, live or
    not), "holders", "nodes" (the node objects)}.
    A step whose frame does not match the text (kind, fields) raises ValueError."""
    import copy

    cls = _protocol_class(protocol)[0]
    nodes = [cls(i, n) for i in range(n)]
    links = [deque() for _ in range(n)]

    def send(i, a):
        links[i].extend(_frames_of(nodes[i], a))

    if boot:
        for i in range(n):
            send(i, nodes[i].boot(starter=(i == 0)))
    else:
        send(0, nodes[0].give_token())
    violations = []
    entries = []
    failed = []
    restarts = 0  # so far: the incarnation number of the next restart
    last = -1
    last_pair = (-1, -1)
    last_done = -1
    mine = [-1] * n  # per board: the highest number it entered with since its last restart

    def live_tokens():
        live = 0
        for x in nodes:
            if x.has_token and not x.fresh:
                live += 1
        for i in range(n):
            if not any(f[0] == F_TOKEN for f in links[i]):
                continue
            y = copy.copy(nodes[(i + 1) % n])
            for f in links[i]:
                a = _deliver(y, f)
                if f[0] == F_TOKEN and not a & DISCARDED:
                    live += 1
        return live

    for step, lb in enumerate(labels, 1):
        kind, i, fkind, pos, ftuple = _parse_lossy_label(lb)
        a = 0
        j = i
        if kind in ("deliver", "drop"):
            if len(links[i]) <= pos:
                raise ValueError("step %d (%s): link %d has no frame there" % (step, lb, i))
            f = links[i][pos]
            if _kind_name(f) != fkind or (isinstance(lb, str) and fmt_lossy_label(
                    (kind, i, f) + ((pos,) if "@" in lb else ()), n) != lb) or (ftuple is not None and ftuple != f):
                raise ValueError("step %d: expected %s, the link holds %s" % (step, lb, frame_text(f, i, n)))
            del links[i][pos]
            if kind == "deliver":
                j = (i + 1) % n
                a = _deliver(nodes[j], f)
        elif kind == "exit":
            if not nodes[i].in_cs:
                raise ValueError("step %d: node %d is not in its critical section" % (step, i))
            last_done = max(last_done, nodes[i].seq)
            a = nodes[i].exit_cs()
        elif kind == "request":
            if nodes[i].busy():
                raise ValueError("step %d: node %d is busy" % (step, i))
            a = nodes[i].request()
        elif kind == "timeout":
            if not nodes[i].waiting():
                raise ValueError("step %d: node %d is not waiting" % (step, i))
            a = nodes[i].on_timeout()
        elif kind == "restart":
            x = nodes[i]
            if x.in_cs:
                failed.append((step, i, "restarted in its critical section"))
            elif x.pending:
                failed.append((step, i, "restarted with a pending request"))
            nodes[i] = cls(i, n)
            mine[i] = -1
            restarts += 1
            a = nodes[i].boot(starter=(i == 0), nonce=restarts)  # as LossyExplorer numbers them
        else:
            raise ValueError("step %d: unknown step %r" % (step, lb))
        send(j, a)
        if a & ENTER_CS:
            s = nodes[j].seq
            entries.append((step, j, s))
            if s <= last:
                violations.append((step, "entry_numbers"))
            pair = (nodes[j].epoch, s)
            if pair <= last_pair:
                violations.append((step, "entry_epoch_numbers"))
            if s <= last_done:
                violations.append((step, "entry_numbers_completed"))
            if s <= max(mine):
                violations.append((step, "entry_numbers_survivors"))
            mine[j] = s
            last = max(last, s)
            last_pair = max(last_pair, pair)
        if sum(1 for x in nodes if x.in_cs) > 1:
            violations.append((step, "mutual_exclusion"))
        if live_tokens() > 1:
            violations.append((step, "one_live_token"))
    return {"violations": violations, "entries": entries, "failed": failed,
            "in_flight": sum(len(q) for q in links),
            "tokens": sum(1 for x in nodes if x.has_token) + sum(1 for q in links for f in q if f[0] == F_TOKEN),
            "holders": [i for i, x in enumerate(nodes) if x.has_token],
            "nodes": nodes}


def format_faults_report(rep):
    f = rep["faults"]
    lines = ["explore %s  n=%d  R=%d per node  faults: drop<=%d timeout<=%d restart<=%d  start: %s"
             % (rep["protocol"], rep["n"], rep["requests_per_node"], f["drops"], f["timeouts"], f["restarts"],
                rep["start"])]
    lines.append("  model: " + rep["model"])
    lines.append("  abstraction: " + rep["abstraction"] + "; drops: " + rep["drops"])
    if rep.get("budget_hit"):
        lines.append("  INCOMPLETE: " + rep.get("error", "") + "; below, what the states explored show")
    lines.append("  states %d, transitions %d, longest shortest-schedule %d steps, %.2f s%s"
                 % (rep["states"], rep["transitions"], rep["max_depth"], rep["seconds"],
                    " (stopped at the first violation)" if not rep["complete"] and not rep.get("budget_hit") else ""))

    def sched(label, s, indent="      "):
        _schedule_lines(lines, label, s, indent)

    for key, what in _INVARIANTS:
        d = rep[key]
        lines.append("  %s: %s" % (what, "ok" if d["ok"] else "FAIL"))
        if not d["ok"]:
            sched("shortest schedule to a violation", d["schedule"])
    for key, what in _DIAGNOSTICS:
        d = rep[key]
        lines.append("  (diagnostic) %s: %s" % (what, "ok" if d["ok"] else "no"))
        if not d["ok"]:
            sched("shortest schedule to a repeat", d["schedule"])
    c = rep["counts"]
    d = rep["live_tokens_now"]
    lines.append("  (diagnostic) at most one live token judged by the destination's state now: %s"
                 % ("ok" if d["ok"] else "no: %d states" % d["states"]))
    lines.append("  tokens in existence at once, live or not: at most %d (live: at most %d)"
                 % (rep["max_tokens"], rep["max_live_tokens"]))
    if "impossible_frame" in rep:
        lines.append("  a handler counted an error (a second token reached its holder):")
        sched("shortest schedule", rep["impossible_frame"]["schedule"])
    if "token_and_request" in rep:
        lines.append("  a handler returned SEND_TOKEN with SEND_REQUEST (node.py sends only the token):")
        sched("shortest schedule", rep["token_and_request"]["schedule"])
    fm = rep["formed"]
    if fm["reachable"]:
        lines.append("  a formed ring (no node fresh or starting, exactly one token, live) is reachable: "
                     "shortest schedule %d steps" % fm["steps"])
    else:
        lines.append("  a formed ring (no node fresh or starting, exactly one token, live) is NOT reachable")
    if "from_every_state" in fm:
        d = fm["from_every_state"]
        lines.append("  ... and still reachable (within the budgets left) from %d of %d states"
                     % (d["states_that_can"], d["states"]))
        if not d["all"]:
            sched("shortest schedule to a state from which it is not", d["schedule"])
    lines.append("  edges: %d regenerations, %d tokens discarded, %d stale-counter rests (Q), %d handler errors"
                 % (c["regenerations"], c["discards"], c["stale"], c["errors"]))
    lines.append("  liveness: not checked (the budgets run out)")
    lines.append("  verdict: %s" % ("ok" if rep["ok"] else "FAIL: " + ", ".join(rep["failures"])))
    return "\n".join(lines)
