"""The runs whose full reports test_checker_golden.py holds the checker to (tests/data/
checker_golden.jsonl.gz, written by this file from the checker before it was split into parts).

Every registered protocol on the simulator, fault-free and, where it has a message layer, with
lost frames (the sim path: bulk counts, the tokens and lost calls) and the trace of each run read
back (the trace path: Checker.feed). Then seeded random event streams that no ring would write
but every branch of the checker reads: recovery events, restarts, events lost, wrapped entry
numbers, BinarySearch's searches, the FRAM's res events, soft exclusion's lost tokens, a trace
cut short; and the same through the method API (the simulator's and explorer's calls). Last, the
wandering token's figures (figures_wt: Figure 4's losses measured by a listener of their own).

    python tests/checker_cases.py | gzip -n -9 > tests/data/checker_golden.jsonl.gz   # regenerate: review why
"""

import json
import os
import random
import sys
import tempfile

from picoring.check import registry
from picoring.check.checker import Checker, check_trace, finish_trace
from picoring.check.trace import Event
from picoring.sim import figures_wt
from picoring.sim.simulate import simulate

SEQ_PERIOD = 1 << 30


def sim_cases(folder):
    """(name, report) of each protocol's simulator run and of its trace read back."""
    for protocol in registry.names():
        roles = registry.message_roles(registry.about(protocol))
        runs = [("sim", {"workload": "poisson", "requests": 40, "seed": 3, "cs_time": 2})]
        runs.append(("burst", {"workload": "burst", "requests": 30, "seed": 5, "period": 7}))
        if roles:
            runs.append(("drop", {"workload": "poisson", "requests": 40, "seed": 4, "drop": 0.05}))
        for label, kw in runs:
            path = os.path.join(folder, "%s-%s.jsonl" % (protocol, label))
            report = simulate(protocol, 5, trace=path, **kw)
            yield "%s:%s" % (label, protocol), report
            yield "%s-trace:%s" % (label, protocol), check_trace(path)[1]


def _payload_msg(rng, protocol, n, pending=(), asked=None):
    """A new message's payload; BinarySearch's searches: a pending request's, sent by its
    requester or forwarded by another node (the first word: requester, request number)."""
    search = registry.search_of(registry.about(protocol))
    mkind = search[0] if search is not None and rng.random() < 0.7 else rng.randrange(4)
    z = rng.choice(sorted(pending)) if pending and rng.random() < 0.8 else rng.randrange(n)
    src = z if rng.random() < 0.4 else rng.randrange(n)
    number = asked.get(z, 0) if asked is not None and rng.random() < 0.9 else rng.randrange(2)
    return {"mkind": mkind, "src": src, "dst": rng.randrange(n), "hop": 0, "seq": (number << 16) | z,
            "fwd": rng.random() < 0.3}


def random_events(protocol, n, seed, length=300, resource=False):
    """A seeded stream of every kind of event, mostly in a plausible order (requests served by
    entries with increasing numbers, one critical section at a time), with faults, repeats and
    nonsense mixed in."""
    rng = random.Random("%s-%d-%s" % (protocol, seed, resource))
    t = 0
    seq = rng.choice([0, 5, SEQ_PERIOD - 30])  # (the last wraps within the run)
    pending, inside = set(), set()
    asked = {}  # node -> its requests so far (BinarySearch's request number)
    events = []
    if resource:
        events.append(Event(0, "res", 0, extra={"op": "set", "value": 10, "errno": rng.choice([None, None, 5])}))
    counter = 10
    for _ in range(length):
        t += rng.choice((0, 1, 1, 2, 3, 8))
        node = rng.randrange(n)
        r = rng.random()
        if inside and r >= 0.38 and rng.random() < 0.6:
            r = 0.6  # mostly one critical section at a time: its exit
        elif 0.38 <= r < 0.52 and len(pending) < 2 and rng.random() < 0.7:
            r = 0.25  # requests wait a while: messages go round meanwhile
        elif 0.52 <= r < 0.66 and not inside and rng.random() < 0.9:
            continue
        if r < 0.14:
            if node in pending and rng.random() < 0.8:
                continue
            events.append(Event(t, "req", node))
            pending.add(node)
            asked[node] = asked.get(node, 0) + 1
        elif r < 0.30:
            kind = rng.choice(("token", "token", "request", "msg", "msg", "msg", "claim", "again"))
            payload = _payload_msg(rng, protocol, n, pending, asked) if kind == "msg" else None
            events.append(Event(t, "send", node, node, kind, payload))
        elif r < 0.38:
            events.append(Event(t, "recv", node, (node - 1) % n, rng.choice(("token", "request", "msg", "claim"))))
        elif r < 0.52:
            if pending and rng.random() < 0.9:
                node = rng.choice(sorted(pending))
            pending.discard(node)
            inside.add(node)
            step = rng.choice((1, 1, 1, 1, 1, 1, 2, 0, -1))
            seq = (seq + step) % SEQ_PERIOD
            payload = {"seq": seq} if rng.random() < 0.95 else None
            events.append(Event(t, "enter", node, payload=payload))
            if resource:
                errno = 5 if rng.random() < 0.05 else None
                value = counter if rng.random() < 0.9 else counter - 1
                events.append(Event(t, "res", node, extra={"op": "read", "value": value, "errno": errno}))
        elif r < 0.66:
            if inside and rng.random() < 0.9:
                node = rng.choice(sorted(inside))
            if resource and node in inside:
                counter += 1
                errno = 5 if rng.random() < 0.04 else None
                events.append(Event(t, "res", node, extra={"op": "write", "value": counter, "errno": errno}))
            inside.discard(node)
            events.append(Event(t, "exit", node))
        elif r < 0.70:
            events.append(Event(t, "regen", node, payload={"epoch": rng.randrange(5)}))
        elif r < 0.73:
            events.append(Event(t, "discard", node))
        elif r < 0.77:
            why = rng.choice(("again", "regen", None))
            extra = {"why": why, "gen_ms": rng.choice((50, 100))} if why else None
            events.append(Event(t, "timeout", node, extra=extra))
        elif r < 0.80:
            reason = rng.choice(("restarted", None))
            events.append(Event(t, "fail", node, extra={"reason": reason} if reason else None))
            pending.discard(node)
        elif r < 0.85:
            kind = rng.choice(("token", "msg", "request"))
            payload = {"mkind": rng.randrange(3)} if kind == "msg" else None
            sent_t = max(0, t - rng.choice((0, 1, 5, 30)))
            events.append(Event(t, "lost", node, node, kind, payload, extra={"sent_t": sent_t}))
        elif r < 0.90:
            what = rng.choice(("restarted", "restarted", "events lost", "something else"))
            if inside and rng.random() < 0.5:
                node = rng.choice(sorted(inside))
            events.append(Event(t, "notice", node, extra={"what": what}))
            if what == "restarted":
                inside.discard(node)
                pending.discard(node)
        elif r < 0.93 and resource:
            events.append(Event(t, "res", node, extra={"op": rng.choice(("read", "write")), "value": counter,
                                                       "errno": rng.choice((None, 5))}))
        elif r >= 0.93:
            events.append(Event(t, "req", rng.choice(sorted(pending)) if pending else node))  # (again)
            pending.add(node)
    if resource:
        final = counter + rng.choice((0, 0, -2, 3))
        events.append(Event(t, "res", 0, extra={"op": "count", "value": final, "errno": rng.choice((None, None, 5))}))
    return events


def fuzz_cases():
    """(name, report) of random event streams through Checker.feed (the trace path)."""
    for protocol, time_unit in (("q", "hop"), ("d", "hop"), ("s", "hop"), ("sk", "hop"), ("bs", "hop"),
                                ("wt", "hop"), ("wt", "us"), ("random", "hop")):
        for seed in range(3):
            for resource in (False, True):
                checker = Checker(protocol, 4, max_violations=40 if seed == 2 else 100, time_unit=time_unit)
                events = random_events(protocol, 4, seed, resource=resource)
                half = len(events) // 2
                name = "fuzz:%s:%s:%d:%s" % (protocol, time_unit, seed, "fram" if resource else "-")
                for event in events[:half]:
                    checker.feed(event)
                yield name + ":midway", checker.report()
                for event in events[half:]:
                    checker.feed(event)
                if seed != 1:  # seed 1: a trace cut short (no end record)
                    extra = {"quiescent": [True, False, None][seed % 3], "reason": "done"}
                    if protocol == "wt":
                        extra["clock_rates"] = [1.0, 0.5, 0.8, 1.2]
                    checker.feed(Event(events[-1].t, "end", extra=extra))
                yield name, finish_trace(checker)


def api_cases():
    """(name, report) of random calls of the simulator's and explorer's interface."""
    from picoring.firmware.protocol import DISCARDED, REGENERATED

    for protocol in ("q", "d", "bs", "wt", "random"):
        for seed in range(2):
            rng = random.Random("api-%s-%d" % (protocol, seed))
            checker = Checker(protocol, 5)
            if protocol in ("wt", "random") and seed == 0:
                checker.start(0)
            tok = req = mf = ml = 0
            t = 0
            pending, inside = [], []
            for _ in range(400):
                t += rng.choice((0, 1, 2, 4))
                tok += rng.randrange(3)
                req += rng.randrange(2)
                step = rng.randrange(4)
                mf += step
                ml += min(step, rng.randrange(2))
                checker.count_to(tok, req, mf, ml)
                r = rng.random()
                node = rng.randrange(5)
                if r < 0.3:
                    if node in pending and rng.random() < 0.9:
                        continue
                    checker.request(t, node)
                    pending.append(node)
                elif r < 0.6:
                    if inside and rng.random() < 0.8:
                        continue
                    if pending and rng.random() < 0.9:
                        node = pending.pop(rng.randrange(len(pending)))
                    checker.enter(t, node)
                    inside.append(node)
                elif r < 0.85:
                    if inside and rng.random() < 0.9:
                        node = inside.pop(rng.randrange(len(inside)))
                    checker.exit(t, node)
                elif r < 0.9:
                    checker.tokens(t, node, rng.choice((REGENERATED, DISCARDED, REGENERATED | DISCARDED)))
                elif r < 0.94:
                    checker.lost(t, node)
                elif checker.wants_messages:
                    p = _payload_msg(rng, protocol, 5, pending)
                    checker.message_sent(p["src"], p["mkind"], p["seq"])
            checker.last_t = t
            name = "api:%s:%d" % (protocol, seed)
            yield name + ":midway", checker.report()
            if seed:
                checker.clock_rates([1.0, 0.9])
            yield name, checker.finish(quiescent=[True, False][seed], reason=None if seed == 0 else "stalled")


def crafted_cases():
    """(name, report) of a request of BinarySearch's that goes over every per-request bound at
    once: its search forwarded, overtaken by all and by one, its service traffic (the order in
    which the over-bound counts and the violations are found)."""
    checker = Checker("bs", 4)
    checker.request(0, 0)
    checker.message_sent(0, 0, 1 << 16)  # node 0's search for its request (number 1)
    for t, node in enumerate((1, 2, 3), 1):
        checker.message_sent(node, 0, 1 << 16)  # ... forwarded three times
    for t in range(4, 10):
        other = 1 if t % 3 else 2
        checker.request(t, other)
        checker.count_to(40 * t, t)
        checker.enter(t, other)
        checker.exit(t, other)
    checker.count_to(900, 20)
    checker.enter(12, 0)
    checker.exit(13, 0)
    yield "crafted:bs:over-every-bound", checker.finish()


def figure_cases():
    """(name, report or row) of the wandering token's figures, small."""
    rep, c, nodes = figures_wt.run_wt(12, 20_000, scale=10, transients=2)
    yield "figures_wt:losses", rep
    row = figures_wt._row(4, "wandering token, token losses", 12, rep, c, 10, nodes)
    yield "figures_wt:losses:row", dict(row, stabilisation=list(c.stabilisation), warm_until=c.warm_until,
                                        tokens_lost=c.tokens_lost)
    rep, c, nodes = figures_wt.run_wt(12, 5_000, scale=10)
    yield "figures_wt:wt", rep
    yield "figures_wt:wt:row", figures_wt._row(2, "wandering token", 12, rep, c, 10, nodes)
    rep, c, nodes = figures_wt.run_benchmark(12, 5_000, scale=10)
    yield "figures_wt:benchmark", rep
    yield "figures_wt:benchmark:row", figures_wt._row(2, "benchmark", 12, rep, c, 10, nodes)


def all_cases(folder):
    yield from sim_cases(folder)
    yield from fuzz_cases()
    yield from api_cases()
    yield from crafted_cases()
    yield from figure_cases()


def canonical(report):
    """The report as its golden line holds it (JSON: tuples as lists, int keys as strings)."""
    return json.dumps(report, default=repr)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        for name, report in all_cases(folder):
            sys.stdout.write(json.dumps({"case": name, "report": json.loads(canonical(report))}) + "\n")
