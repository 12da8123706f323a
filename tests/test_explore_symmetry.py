"""The explorer's rotation symmetry (explore/model.py: rotation_symmetric, Explorer(rotations=True))
is sound: for every protocol that takes it, at every n up to 6, the reduced and the full state
graph give the same verdicts and the same worst cases, and the reduced explorer's witness
schedules replay on fresh nodes to those worst cases."""

import pytest

from picoring.check.registry import names
from picoring.explore.model import Explorer, rotation_symmetric
from picoring.explore.search import explore, format_report, replay
from picoring.firmware.protocol import load

SYMMETRIC = [p for p in names() if rotation_symmetric(load(p), 3)]
VERDICTS = ("safety", "token_integrity", "served", "deadlock", "starvation", "livelock")
WORST = ("messages_per_request", "logical_per_request", "service_traffic_sent", "service_traffic_delivered",
         "service_traffic_logical", "overtaken")
# every n up to 6 with one request per node, and n = 2, 3 with two: about 18 s in all. The n = 6
# cases of D, D-literal and Q take 15 s of it (D-literal 7.7 s): marked `cpu`, they leave the fast
# tier (.ci/run still runs them, beside the slow tier).
LONG = {("d", 6, 1), ("d-literal", 6, 1), ("q", 6, 1)}
CASES = [pytest.param(c, marks=pytest.mark.cpu) if c in LONG else c
         for c in [(p, n, 1) for p in SYMMETRIC for n in range(2, 7)] + [(p, n, 2) for p in SYMMETRIC for n in (2, 3)]]


def test_the_symmetric_protocols_are_the_ones_whose_rules_name_no_position():
    assert SYMMETRIC == ["s", "q", "d", "d-literal"]
    # a protocol with a layout (a tree), messages of the layer, or a planted bug is never reduced
    for p in ("raymond", "toy", "sk"):
        assert not rotation_symmetric(load(p), 3)
    planted = type("QPlanted", (load("q"),), {"on_request": lambda self: 0})
    assert not rotation_symmetric(planted, 3)
    assert rotation_symmetric(load("q:holder=2"), 3)  # a spec's class only carries options
    with pytest.raises(ValueError, match="not rotation-symmetric"):
        Explorer("toy", 3, 1, rotations=True)


def _same(protocol, n, R):
    full = explore(protocol, n, R, symmetry=False)
    reduced = explore(protocol, n, R)
    assert reduced["symmetry"] and not full["symmetry"]
    assert full["complete"] and reduced["complete"]
    assert reduced["states"] < full["states"]
    # the classes stand for exactly the full graph's states (graph.full_states: each class at
    # every offset some schedule reaches it with)
    assert reduced["full_states"] == full["states"]
    assert reduced["failures"] == full["failures"] and reduced["ok"] == full["ok"]
    for k in VERDICTS:
        assert reduced[k]["ok"] == full[k]["ok"], k
    assert (reduced["quiescent_states"] > 0) == (full["quiescent_states"] > 0)
    for k in WORST:
        if k in full:
            for f in ("worst", "unbounded", "worst_exact", "worst_over_quiet_runs"):
                assert reduced[k].get(f) == full[k].get(f), (k, f)
    # the reduced explorer's witnesses are schedules of the ring itself
    for k, idx in (("service_traffic_sent", 1), ("service_traffic_delivered", 2), ("service_traffic_logical", 3)):
        d = reduced[k]
        if d.get("schedule"):
            r = replay(protocol, n, d["schedule"])
            assert max(s[idx] for s in r["services"] if s[0] == d["node"]) == d["worst"], k
    m = reduced["messages_per_request"]
    if m.get("schedule"):
        r = replay(protocol, n, m["schedule"])
        assert "%d/%d" % (r["sent"], r["requests"]) == m["worst_exact"] and r["in_flight"] == 0
    if reduced.get("overtaken", {}).get("schedule"):
        assert replay(protocol, n, reduced["overtaken"]["schedule"])["safety"]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "%s-n%d-R%d" % c)
def test_reduced_and_full_exploration_agree(case):
    _same(*case)


def test_the_token_can_start_anywhere():
    # the holder option moves the initial state, not the classes: the same figures, and the
    # schedules are numbered from the ring's own start
    a = explore("q", 4, 1)
    b = explore("q", 4, 1, start=2)
    assert a["states"] == b["states"] and a["service_traffic_sent"]["worst"] == b["service_traffic_sent"]["worst"]
    d = b["service_traffic_sent"]
    r = replay("q", 4, d["schedule"], start=2)
    assert max(s[1] for s in r["services"] if s[0] == d["node"]) == d["worst"]


def test_the_report_says_which_reduction_was_used_and_what_it_saved():
    # Q at n = 4, R = 1: 1,310 states from node 0 (docs/fidelity.md's table), kept as fewer classes
    reduced = explore("q", 4, 1)
    text = format_report(reduced)
    assert reduced["full_states"] == 1310 and reduced["states"] < 1310
    assert ("  reduction: %d rotation classes kept for the 1310 states of the full graph: %d fewer (%.1fx)"
            % (reduced["states"], 1310 - reduced["states"], 1310 / reduced["states"])) in text.splitlines()
    assert "  symmetry: none (--no-symmetry)" in format_report(explore("q", 3, 1, symmetry=False)).splitlines()
    assert "symmetry: none (its descriptor does not say" in format_report(explore("toy", 3, 1))
    # a descriptor that says "no position" does not reduce a protocol whose messages carry node numbers
    toy = load("toy")
    flat = type("ToyNoPositions", (toy,), {"about": dict(toy.about, positions=False)})
    assert format_report(explore(flat, 3, 1)).splitlines()[3] == "  symmetry: none (its messages carry node numbers)"
