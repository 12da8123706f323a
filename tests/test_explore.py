"""The exhaustive explorer (picoring.explore): planted bugs are found with a
schedule, exact worst cases for n = 2, 3, the simulator stays within them."""

import json
import random

import pytest

from picoring.explore.model import Explorer
from picoring.explore.search import explore, replay
from picoring.firmware.protocol import NodeD, NodeQ, SEND_TOKEN
from picoring.sim.simulate import simulate
from picoring.sim.workload import Schedule


# -- planted bugs ---------------------------------------------------------------

class QNoDecrement(NodeQ):
    """Q that forgets to decrement the counter when it serves a request."""

    name = "q-no-decrement"

    def on_token(self, count, state, seq, epoch):
        a = NodeQ.on_token(self, count, state, seq, epoch)
        if self.in_cs:
            self.count += 1  # undo rule 3's decrement
        return a


class QNoDecrementNoHopRule(QNoDecrement):
    """The same bug with Q's stale-counter hop rule (recovery) switched off too."""

    name = "q-no-decrement-no-hop-rule"

    def on_token(self, count, state, seq, epoch):
        a = QNoDecrement.on_token(self, count, state, seq, epoch)
        self.state = 0  # the hop count never grows: T circles forever
        return a


class DNeverResetsFlag(NodeD):
    """D whose token never resets M_p (rules 2, 4, 5 forget M_p = 0)."""

    name = "d-no-reset"

    def on_token(self, count, state, seq, epoch):
        flag = self.flag
        a = NodeD.on_token(self, count, state, seq, epoch)
        self.flag = flag
        return a


class QPassesDuringCS(NodeQ):
    """Q that passes the token on a request message even inside its critical section."""

    name = "q-pass-in-cs"

    def on_request(self):
        if self.has_token and self.in_cs:
            self.count += 1
            self.has_token = False
            return SEND_TOKEN
        return NodeQ.on_request(self)


def test_planted_missing_decrement_trips_the_hop_rule_which_never_fires_without_faults():
    # Q's recovery rule (a token that passed n idle nodes rests) stops the
    # livelock, but it fires, and firing is an error on a fault-free ring.
    rep = explore(QNoDecrement, 2, 1)
    assert rep["safety"]["ok"] and rep["livelock"]["ok"]
    assert rep["token_integrity"]["ok"] is False
    r = replay(QNoDecrement, 2, rep["token_integrity"]["schedule"])
    assert r["in_flight"] == 0 and r["pending"] == []
    for proto in ("q", "d", "s"):
        assert explore(proto, 3, 2)["token_integrity"]["ok"]


def test_planted_missing_decrement_is_a_livelock_with_its_schedule():
    rep = explore(QNoDecrementNoHopRule, 2, 1)
    assert rep["safety"]["ok"] and rep["served"]["ok"]
    assert rep["livelock"]["ok"] is False and "quiescence" in rep["failures"]
    assert rep["livelock"]["prefix"] == [
        "request 1", "deliver request 1->0", "deliver token 0->1", "exit 1",
    ]
    assert rep["livelock"]["cycle"] == ["deliver token 1->0", "deliver token 0->1"]
    assert rep["messages_per_request"]["unbounded"]
    # the schedule is real: replayed on fresh nodes, the token is still on the move
    r = replay(QNoDecrementNoHopRule, 2, rep["livelock"]["prefix"] + rep["livelock"]["cycle"] * 3)
    assert r["in_flight"] == 1 and r["pending"] == []


def test_planted_flag_never_reset_is_a_deadlock_with_its_schedule():
    rep = explore(DNeverResetsFlag, 2, 2)
    assert rep["deadlock"]["ok"] is False and "liveness" in rep["failures"]
    sched = rep["deadlock"]["schedule"]
    r = replay(DNeverResetsFlag, 2, sched)
    assert sched == [
        "request 1", "deliver request 1->0", "deliver token 0->1", "exit 1", "deliver token 1->0", "request 1",
    ]  # T rests at node 0, M_1 is still 1: node 1's second request sends nothing
    assert r["pending"] == rep["deadlock"]["pending"] == [1] and r["in_flight"] == 0
    # the real D sends a request message on the same schedule
    assert replay("d", 2, sched)["in_flight"] == 1


def test_planted_safety_bug_shortest_schedule():
    rep = explore(QPassesDuringCS, 2, 1)
    assert rep["safety"]["ok"] is False
    sched = rep["safety"]["schedule"]
    assert sched == ["request 0", "request 1", "deliver request 1->0", "deliver token 0->1"]
    assert replay(QPassesDuringCS, 2, sched)["safety"] is False


# -- the real protocols ---------------------------------------------------------

# (protocol, n, R): (messages per request, service traffic sent, delivered),
# exact over every schedule of the asynchronous model.
EXACT = {
    ("q", 2, 1): ("2/1", 3, 3),
    ("q", 2, 2): ("2/1", 3, 3),
    ("q", 3, 1): ("3/1", 8, 8),
    ("q", 3, 2): ("3/1", 10, 10),
    ("d", 2, 1): ("3/1", 3, 3),
    ("d", 2, 2): ("3/1", 4, 4),
    ("d", 3, 1): ("11/2", 6, 6),
    ("d", 3, 2): ("11/2", 7, 8),
    ("d-literal", 2, 1): (None, 3, 3),
    ("d-literal", 2, 2): (None, 4, 4),
    ("d-literal", 3, 1): (None, 6, 6),
    ("d-literal", 3, 2): (None, 7, 8),
    ("s", 2, 1): (None, 1, 2),
    ("s", 3, 2): (None, 2, 3),
}

_cache = {}


def explored(protocol, n, R):
    key = (protocol, n, R)
    if key not in _cache:
        _cache[key] = explore(protocol, n, R)
    return _cache[key]


@pytest.mark.parametrize("key", sorted(EXACT))
def test_exact_worst_cases(key):
    protocol, n, R = key
    mpr, sent, delivered = EXACT[key]
    rep = explored(protocol, n, R)
    assert rep["complete"] and rep["safety"]["ok"] and rep["served"]["ok"]
    assert rep["messages_per_request"].get("worst_exact") == mpr
    assert rep["service_traffic_sent"]["worst"] == sent
    assert rep["service_traffic_delivered"]["worst"] == delivered
    if protocol in ("q", "d"):
        assert rep["ok"] and rep["livelock"]["ok"]
    if protocol == "s":
        assert rep["livelock"].get("by_design") and rep["ok"]
    # every witness is a real schedule: replay it on fresh node objects
    for key2, idx in (("service_traffic_sent", 1), ("service_traffic_delivered", 2)):
        d = rep[key2]
        r = replay(protocol, n, d["schedule"])
        assert max(s[idx] for s in r["services"] if s[0] == d["node"]) == d["worst"]
    m = rep["messages_per_request"]
    if m.get("schedule"):
        r = replay(protocol, n, m["schedule"])
        assert "%d/%d" % (r["sent"], r["requests"]) == mpr and r["in_flight"] == 0 and not r["pending"]


def test_corrected_bounds_hold_exactly_at_small_n():
    # n = 2: D reaches its corrected service bound 3n - 2 = 4; Q stays below (5n^2 - 5n + 2)/2 = 6
    assert explored("d", 2, 2)["service_traffic_sent"]["worst"] == 4
    assert explored("d", 3, 2)["service_traffic_sent"]["worst"] == 7
    for key in EXACT:
        rep = explored(*key)
        for k in ("service_traffic_sent",):
            if rep[k]["checked_bound"] is not None:
                assert rep[k]["within_checked"], key


def test_d_literal_livelock_shortest_schedule_at_n2():
    rep = explored("d-literal", 2, 1)
    lv = rep["livelock"]
    assert lv["ok"] is False and not lv.get("by_design")
    assert rep["failures"] == ["quiescence"]
    assert lv["prefix"] == [
        "request 1", "deliver request 1->0", "deliver token 0->1", "exit 1",
        "request 0", "deliver request 0->1", "deliver token 1->0", "deliver request 1->0",
        "exit 0", "deliver token 0->1",
    ]
    assert lv["cycle"] == ["deliver token 1->0", "deliver token 0->1"]
    # and the corrected D has no cycle at all
    assert explored("d", 2, 1)["livelock"]["ok"]


def test_reductions_are_exact():
    # dropping seq/epoch and zeroing the dead count/state of non-holders changes
    # no verdict and no worst case (it only merges states)
    for protocol in ("q", "d", "d-literal", "s"):
        a = explore(protocol, 3, 1)
        b = explore(protocol, 3, 1, exact=True)
        assert b["states"] >= a["states"]
        for k in ("safety", "served", "livelock"):
            assert a[k]["ok"] == b[k]["ok"]
        for k in ("messages_per_request", "service_traffic_sent", "service_traffic_delivered"):
            assert a[k].get("worst") == b[k].get("worst")


def test_state_budget_stops_cleanly():
    rep = explore("d", 3, 2, max_states=100)
    assert rep["complete"] is False and "state budget" in rep["error"] and not rep["ok"]


@pytest.mark.parametrize("protocol", ["q", "d", "d-literal"])
def test_symmetry_any_start_is_a_rotation(protocol):
    # the rules never read a node's index: starting the token elsewhere gives
    # the rotated graph, same size, same verdicts and worst cases
    a = explored(protocol, 3, 1)
    b = explore(protocol, 3, 1, start=2)
    assert a["states"] == b["states"] and a["transitions"] == b["transitions"]
    for k in ("messages_per_request", "service_traffic_sent", "service_traffic_delivered"):
        assert a[k].get("worst") == b[k].get("worst")
    assert a["failures"] == b["failures"]
    ex = Explorer(protocol, 3, 1, start=1).build()
    rot = lambda st: tuple(x[1:] + x[:1] for x in st)  # node 1 becomes node 0  # noqa: E731
    assert {rot(s) for s in ex.states} == set(Explorer(protocol, 3, 1).build().states)


# -- the simulator never exceeds the explorer ---------------------------------

def _random_schedule(rng, n, R):
    items = []
    for node in range(n):
        for _ in range(rng.randint(0, R)):
            items.append((rng.randint(0, 3 * n), node))
    if not items:
        items.append((0, rng.randrange(n)))
    return items


@pytest.mark.parametrize("protocol", ["q", "d", "s"])
@pytest.mark.parametrize("n,R", [(2, 2), (3, 1), (3, 2)])
def test_simulator_never_exceeds_the_explorer(protocol, n, R):
    rep = explored(protocol, n, R)
    worst_sent = rep["service_traffic_sent"]["worst"]
    mpr = rep["messages_per_request"].get("worst")
    rng = random.Random(1000 * n + R)
    seen = 0
    for _ in range(60):
        items = _random_schedule(rng, n, R)
        out = simulate(protocol, n, Schedule(n, items, defer_busy=True), cs_time=rng.randint(0, 2))
        assert out["safety_violations"] == 0
        assert out["served"] == out["requests"] == len(items)
        assert out["max_service_traffic"] <= worst_sent
        seen = max(seen, out["max_service_traffic"])
        if mpr is not None:
            assert out["quiescent"] and out["messages_per_request"] <= mpr + 1e-9
    assert seen >= 1


def test_fidelity_smoke(tmp_path):
    from picoring.explore import fidelity

    md = tmp_path / "f.md"
    md.write_text("# kept\n\nhand-written findings\n\n" + fidelity.MARKER + "\nold table\n")
    doc = fidelity.run(max_n=2, sim_runs=3, large=(4,), md=str(md), json_path=str(tmp_path / "f.json"))
    text = md.read_text()
    assert text.startswith("# kept") and "old table" not in text and "| q | 2 | 1 |" in text
    assert not any(r.get("exceeded") for r in doc["simulator"])
    # Q's printed service bound fails at n = 2 (3 > 2), its messages per request holds
    q2 = {c["claim"]: c for c in doc["claims"] if c["protocol"] == "q" and c["n"] == 2}
    assert q2["service traffic <= 3/2n^2-5/2n+1 (sent)"]["holds"] is False
    assert q2["messages per request <= n"]["holds"] is True


def test_cli_explore(capsys):
    from picoring.cli.main import main

    assert main(["explore", "--protocol", "d-literal", "-n", "2", "--requests-per-node", "1"]) == 1
    assert "livelock" in capsys.readouterr().out
    assert main(["explore", "-p", "q", "-n", "2", "-R", "1", "--json"]) == 0
    assert '"worst": 3' in capsys.readouterr().out
    assert main(["explore", "-p", "d", "-n", "3", "-R", "2", "--max-states", "50"]) == 2


def test_the_explorer_refuses_a_protocol_on_timers_or_without_hard_exclusion(capsys):
    # It gave verdicts that meant nothing: the wandering token "FAIL: liveness" (no timer ever
    # fires in its model, so the token never walks) and random access "FAIL: safety" (held to
    # hard exclusion it never claims).
    from picoring.cli.main import main

    assert main(["explore", "-p", "wt", "-n", "3"]) == 2
    err = capsys.readouterr().err
    assert "does not cover protocol wt" in err and "clock" in err and "soft" in err
    assert main(["explore", "-p", "random", "-n", "2"]) == 2
    assert "exclusion is none" in capsys.readouterr().err
    assert main(["explore", "-p", "wt", "-n", "3", "--faults", "drop=1"]) == 2
    assert "does not cover protocol wt" in capsys.readouterr().err
    with pytest.raises(ValueError, match="does not cover"):
        replay("wt", 3, [])


# -- finding: Q's corrected service bound (3n^2 - n)/2 is exceeded at n = 5 --------

# Found by `picoring explore --protocol q -n 5 --requests-per-node 3` (1.6 M states):
# node 4's request at step 23 waits for 36 messages; docs/bounds.md's corrected bound,
# which picoring's checker enforces, is (3 * 25 - 5) / 2 = 35. At the request, two
# request messages are already on link 4->0 (node 4's previous request and node 3's,
# both already served: stale) and T has just left node 4; the argument of
# docs/bounds.md counts only messages of pending requests. Asynchronous schedule (one
# step = one event); random unit-delay simulator runs have not reproduced it (max 32).
Q5_OVER_CORRECTED_BOUND = [
    "request 2", "deliver request 2->3", "deliver request 3->4",
    "deliver request 4->0", "deliver token 0->1", "deliver token 1->2", "exit 2",
    "request 1", "deliver request 1->2", "request 2", "request 3",
    "deliver token 2->3", "deliver request 2->3", "deliver request 3->4", "exit 3",
    "request 3", "request 4", "deliver token 3->4", "exit 4", "request 4",
    "deliver request 3->4", "exit 4", "request 4", "deliver request 4->0",
    "deliver request 4->0", "request 0", "deliver token 4->0",
    "deliver request 4->0", "exit 0", "deliver request 0->1", "deliver request 1->2",
    "deliver request 2->3", "deliver request 3->4", "deliver request 4->0",
    "deliver request 0->1", "deliver request 1->2", "deliver request 2->3",
    "deliver request 3->4", "deliver request 4->0", "deliver request 0->1",
    "deliver request 1->2", "deliver request 2->3", "deliver request 3->4",
    "deliver request 4->0", "deliver token 0->1", "exit 1", "deliver request 0->1",
    "deliver request 0->1", "deliver request 0->1", "request 0",
    "deliver request 0->1", "deliver token 1->2", "exit 2", "deliver request 1->2",
    "deliver request 1->2", "deliver request 1->2", "request 1",
    "deliver request 1->2", "deliver token 2->3", "deliver request 2->3", "exit 3",
    "deliver request 2->3", "deliver request 2->3", "request 2",
    "deliver request 2->3", "request 3", "deliver token 3->4",
]


def test_finding_q_service_traffic_exceeds_the_first_corrected_bound_at_n5():
    # This schedule broke the first corrected bound, (3n^2 - n)/2 = 35, which left
    # out the stale request messages already in flight at the request; the bound
    # the checker holds Q to now counts them (docs/bounds.md section 2).
    from picoring.check.checker import Checker, bounds_for

    checker = Checker("q", 5)
    r = replay("q", 5, Q5_OVER_CORRECTED_BOUND, checker=checker)
    assert r["safety"] and r["requests"] == 13
    assert max(s[1] for s in r["services"]) == 36 > (3 * 25 - 5) // 2
    assert 36 <= bounds_for("q", 5)[1] == 51
    rep = checker.finish()
    assert not [v for v in rep["violations"] if v["kind"] == "bound"]
    assert rep["max_service_traffic"] == 36


def test_fidelity_writes_where_told_and_checks_it_can_before_computing(tmp_path, monkeypatch, capsys):
    """Outside the project, with no output named: the tables on standard output, no file made;
    an output that cannot be written stops it at once, before the explorer runs."""
    from picoring.cli.main import main
    from picoring.explore import fidelity

    monkeypatch.chdir(tmp_path)
    small = ["fidelity", "--max-n", "2", "--sim-runs", "2", "--sim-n", "4"]
    assert main(small) == 0
    out, err = capsys.readouterr()
    assert out.startswith(fidelity.MARKER) and "| q | 2 | 1 |" in out and "the tables on standard output" in err
    assert list(tmp_path.iterdir()) == []
    assert main(small + ["--md", "f.md", "--json-out", "f.json", "--quiet"]) == 0
    assert "wrote f.md and f.json" in capsys.readouterr().out
    assert json.loads((tmp_path / "f.json").read_text())["meta"]["json"] == "f.json"

    def no_computing(*a, **kw):
        raise AssertionError("computed before checking its outputs")

    monkeypatch.setattr(fidelity, "run_explorer", no_computing)
    for extra, message in ((["--json-out", "docs/fidelity.json"], "--json-out docs/fidelity.json: no folder"),
                           (["--md", str(tmp_path)], "a folder, not a file"),
                           (["--md", "-", "--json-out", "-"], "cannot both go to standard output")):
        assert main(small + extra) == 2
        assert message in capsys.readouterr().err


def test_fidelity_counts_the_messages_of_a_token_that_never_rests():
    """S never goes quiet (its runs end at an idle horizon): its messages per request are counted
    as `picoring sim` counts them, not left at 0."""
    from picoring.explore import fidelity

    lines = []
    rows = fidelity.run_simulator(protocols=("s",), large=(6,), runs=3, log=lines.append)
    (row,) = rows
    assert row["max_messages_per_request"] > 0
    assert "messages/request %.3f (the token never rests" % row["max_messages_per_request"] in lines[0]
