"""The explorer on a protocol of the layer's messages (firmware/proto_toy.py: requests
broadcast, the token sent straight to a requester by index): routed and broadcast frames
hop by hop on the per-wire FIFOs, the protocol's own state (rn, ln) in the abstract state,
both counts (logical messages and hop frames) with schedules that replay, and planted bugs
found with a schedule. No host module names the toy."""

import random

import pytest

from picoring.check.checker import Checker
from picoring.explore.model import HOP_FRAMES, LOGICAL, Explorer
from picoring.explore.search import explore, replay
from picoring.firmware import protocol
from picoring.firmware.proto_toy import REQUEST, NodeToy
from picoring.sim.simulate import simulate
from picoring.sim.workload import Schedule

_cache = {}


def explored(n, R, **kw):
    key = (n, R, tuple(sorted(kw.items())))
    if key not in _cache:
        _cache[key] = explore("toy", n, R, **kw)
    return _cache[key]


# (n, R): worst service traffic (hop frames sent, frames delivered, logical messages
# sent), exact over every asynchronous schedule (regression values of the explorer).
EXACT_SERVICE = {
    (2, 1): (4, 5, 3),
    (2, 2): (4, 5, 3),
    (3, 1): (13, 14, 6),
    (3, 2): (18, 20, 8),
}


@pytest.mark.parametrize("n,R", sorted(EXACT_SERVICE))
def test_toy_explored_complete_within_what_its_rules_imply(n, R):
    rep = explored(n, R)
    assert rep["complete"] and rep["ok"], rep["failures"]
    assert rep["layer_messages"] and {"rn", "ln"} <= set(rep["state_attributes"])
    for k in ("safety", "token_integrity", "served", "deadlock", "starvation", "livelock"):
        assert rep[k]["ok"], k
    assert "note" not in rep["token_integrity"]  # about["messages"]["token"]: tokens in flight are counted
    # The rules: a request is one broadcast (n hop frames, once round the ring) and at most
    # one token message (at most n - 1 hops ahead): at most 2 logical messages and 2n - 1
    # hop frames per request. Both are reached: node n-1's request with the token resting
    # at node 0 (the token goes n - 1 hops).
    logical, hops = rep["logical_per_request"], rep["messages_per_request"]
    assert logical["worst_exact"] == "2/1" and logical["checked_bound"] == 2 and logical["within_checked"]
    assert hops["worst_exact"] == "%d/1" % (2 * n - 1) and hops["checked_bound"] == 2 * n - 1 and hops["within_checked"]
    sent, delivered, logical_service = EXACT_SERVICE[(n, R)]
    assert rep["service_traffic_sent"]["worst"] == sent
    assert rep["service_traffic_delivered"]["worst"] == delivered
    assert rep["service_traffic_logical"]["worst"] == logical_service
    # a request waits at most for its own two messages and two of every other node's
    # requests it can be behind (R of each): logical service <= 2 + 2 R (n - 1)
    assert logical_service <= 2 + 2 * R * (n - 1)


@pytest.mark.parametrize("n,R", sorted(EXACT_SERVICE))
def test_toy_witnesses_replay_and_the_checker_counts_the_same(n, R):
    rep = explored(n, R)
    # every worst case comes with a schedule that reproduces it on fresh node objects
    for key, idx in (("service_traffic_sent", 1), ("service_traffic_delivered", 2), ("service_traffic_logical", 3)):
        d = rep[key]
        r = replay("toy", n, d["schedule"])
        assert r["safety"] and max(s[idx] for s in r["services"] if s[0] == d["node"]) == d["worst"], key
    for key, count in (("messages_per_request", "sent"), ("logical_per_request", "logical")):
        m = rep[key]
        checker = Checker("toy", n)
        r = replay("toy", n, m["schedule"], checker=checker)
        assert "%d/%d" % (r[count], r["requests"]) == m["worst_exact"]
        assert r["in_flight"] == 0 and not r["pending"] and len(r["holders"]) == 1
        # the checker (simulator, traces) counts the run as the explorer does
        out = checker.finish()
        assert (out["hop_frames"], out["logical_messages"]) == (r["sent"], r["logical"])
        assert not out["violations"]
    # the service witnesses, through the checker: its maxima are the explorer's
    checker = Checker("toy", n)
    replay("toy", n, rep["service_traffic_sent"]["schedule"], checker=checker)
    assert checker.finish()["max_service_traffic"] == rep["service_traffic_sent"]["worst"]
    checker = Checker("toy", n)
    replay("toy", n, rep["service_traffic_logical"]["schedule"], checker=checker)
    assert checker.finish()["max_service_logical"] == rep["service_traffic_logical"]["worst"]


def test_routed_and_broadcast_frames_hop_by_hop():
    # node 2's request at n = 3, the token resting at node 0: the broadcast is delivered
    # at 0 and 1 (each passing it on first) and taken off back at 2 (3 hop frames); the
    # token goes 0 -> 1 -> 2, passed on at 1 without waking its protocol (2 hop frames)
    rep = explored(3, 1)
    assert rep["messages_per_request"]["schedule"] == [
        "request 2",
        "deliver msg 2->0 kind=0 from=2 to=all",
        "deliver msg 0->1 kind=0 from=2 to=all",
        "deliver msg 1->2 kind=0 from=2 to=all",
        "deliver msg 0->1 kind=1 from=0 to=2",
        "deliver msg 1->2 kind=1 from=0 to=2",
        "exit 2",
    ]
    # the simulator counts the same run alike: 5 hop frames, 2 logical messages
    out = simulate("toy", 3, Schedule(3, [(0, 2)]), cs_time=1)
    assert (out["hop_frames"], out["logical_messages"]) == (5, 2)
    # the edges carry both counts (hop frames, logical messages): the request (1, 1); the
    # broadcast at node 0, passed on and answered with the token (2, 1), passed on at node
    # 1 (1, 0), taken off at node 2 (0, 0); the token passed on at node 1 (1, 0), delivered
    # at node 2 (0, 0); the exit (0, 0)
    ex = Explorer("toy", 3, 1).build()
    st, weights = 0, []
    for label in rep["messages_per_request"]["schedule"]:
        succ = ex.successors(ex.states[st])
        t = next(k for k, x in enumerate(succ) if _fmt(x[0], 3) == label)
        w = succ[t][2]
        weights.append(((w >> HOP_FRAMES[0]) & HOP_FRAMES[1], (w >> LOGICAL[0]) & LOGICAL[1]))
        st = ex.index[succ[t][1]]
    assert weights == [(1, 1), (2, 1), (1, 0), (0, 0), (1, 0), (0, 0), (0, 0)]


def _fmt(label, n):
    from picoring.explore.search import _fmt_schedule

    return _fmt_schedule([label], n)[0]


def test_toy_reductions_are_exact():
    # seq/epoch dropped (also from the token message's payload, about["messages"]["token"]),
    # recovery state and outputs left out: no verdict and no worst case changes
    for n, R in ((2, 2), (3, 1), (3, 2)):
        a = explored(n, R)
        b = explored(n, R, exact=True)
        assert b["states"] >= a["states"] and "out" in b["state_attributes"]
        for k in ("safety", "token_integrity", "served", "livelock"):
            assert a[k]["ok"] == b[k]["ok"]
        for k in ("messages_per_request", "logical_per_request", "service_traffic_sent",
                  "service_traffic_delivered", "service_traffic_logical"):
            assert a[k].get("worst") == b[k].get("worst"), k


@pytest.mark.parametrize("start", [1, 2])
def test_toy_symmetry_any_start_is_a_rotation(start):
    # the toy's rules count ring order from the node itself: any start gives the same graph
    a = explored(3, 2)
    b = explore("toy", 3, 2, start=start)
    assert (a["states"], a["transitions"]) == (b["states"], b["transitions"])
    for k in ("messages_per_request", "logical_per_request", "service_traffic_sent", "service_traffic_logical"):
        assert a[k].get("worst") == b[k].get("worst")


@pytest.mark.parametrize("n,R", [(2, 2), (3, 1), (3, 2)])
def test_simulator_never_exceeds_the_explorer(n, R):
    rep = explored(n, R)
    rng = random.Random(7000 + 10 * n + R)
    seen = 0
    for _ in range(40):
        items = [(rng.randint(0, 3 * n), node) for node in range(n) for _ in range(rng.randint(0, R))]
        items = items or [(0, rng.randrange(n))]
        out = simulate("toy", n, Schedule(n, items, defer_busy=True), cs_time=rng.randint(0, 2))
        assert out["ok"] and out["quiescent"] and out["served"] == len(items)
        assert out["max_service_traffic"] <= rep["service_traffic_sent"]["worst"]
        assert out["max_service_logical"] <= rep["service_traffic_logical"]["worst"]
        assert out["messages_per_request"] <= rep["messages_per_request"]["worst"] + 1e-9
        assert out["logical_per_request"] <= rep["logical_per_request"]["worst"] + 1e-9
        seen = max(seen, out["max_service_traffic"])
    assert seen >= n


# -- planted bugs ---------------------------------------------------------------

class ToyGivesInCS(NodeToy):
    """The holder sends the token to a requester whose broadcast reaches it inside its
    critical section (the toy waits for exit_cs)."""

    name = "toy-gives-in-cs"

    def on_message(self, kind, src, buf):
        a = NodeToy.on_message(self, kind, src, buf)
        if kind == REQUEST and self.has_token and self.in_cs and self._wants(src):
            return self._give(src)
        return a


class ToyKeepsToken(NodeToy):
    """The holder sends the token and keeps it too."""

    name = "toy-keeps-token"

    def _give(self, j):
        a = NodeToy._give(self, j)
        self.has_token = True
        return a


def test_planted_message_breaking_mutual_exclusion_is_found_with_its_schedule():
    rep = explore(ToyGivesInCS, 2, 1)
    assert rep["safety"]["ok"] is False and "safety" in rep["failures"]
    sched = rep["safety"]["schedule"]
    assert sched == [
        "request 0",  # the holder enters at once
        "request 1",  # node 1 broadcasts its request
        "deliver msg 1->0 kind=0 from=1 to=all",  # passed on, then node 0 sends the token from its CS
        "deliver msg 0->1 kind=0 from=1 to=all",  # back at node 1: taken off
        "deliver msg 0->1 kind=1 from=0 to=1",  # node 1 enters: two nodes in the critical section
    ]
    r = replay(ToyGivesInCS, 2, sched)
    assert r["safety"] is False
    assert replay("toy", 2, sched[:4])["safety"]  # the real toy keeps the token: no token message
    assert explore(ToyGivesInCS, 3, 1)["safety"]["ok"] is False


def test_planted_duplicated_token_message_fails_token_integrity():
    rep = explore(ToyKeepsToken, 2, 1)
    assert rep["token_integrity"]["ok"] is False and "token" in rep["failures"]
    sched = rep["token_integrity"]["schedule"]
    assert sched == ["request 1", "deliver msg 1->0 kind=0 from=1 to=all"]
    r = replay(ToyKeepsToken, 2, sched)
    assert r["holders"] == [0] and r["in_flight"] == 2  # the broadcast passed on, the token on its way


class ToyUnnamedToken(NodeToy):
    """The toy with a descriptor that names no message kind for its token."""

    name = "toy-unnamed-token"
    about = dict(NodeToy.about, messages={"token": "a message", "request": "a broadcast"})


def test_a_token_message_the_descriptor_does_not_name_leaves_only_the_holders_checked():
    rep = explore(ToyUnnamedToken, 3, 1)
    assert rep["ok"] and "at most one holder only" in rep["token_integrity"]["note"]
    # the rest is the toy's: the same graph (seq and epoch then stay in the token's payload,
    # as the node had them when it sent it: loaded as 0, never incremented on the way) and
    # the same worst cases
    toy = explored(3, 1)
    assert rep["states"] == toy["states"]
    for k in ("messages_per_request", "logical_per_request", "service_traffic_sent"):
        assert rep[k]["worst"] == toy[k]["worst"]


class ToyBadAddress(NodeToy):
    name = "toy-bad-address"

    def request(self):
        a = NodeToy.request(self)
        if a & protocol.SEND_MSG:
            self.out_dst = self.index  # to itself: never allowed
        return a


class ToyNewAttribute(NodeToy):
    name = "toy-new-attribute"

    def request(self):
        self.late = 1  # state the explorer would not keep
        return NodeToy.request(self)


@pytest.mark.parametrize("cls,what", [(ToyBadAddress, "sent a message to"), (ToyNewAttribute, "new attribute")])
def test_what_the_explorer_cannot_follow_is_an_error(cls, what):
    with pytest.raises(RuntimeError, match=what):
        explore(cls, 2, 1)


def test_cli_explore_toy(capsys):
    from picoring.cli.main import main

    assert main(["explore", "-p", "toy", "-n", "3", "-R", "2"]) == 0
    out = capsys.readouterr().out
    assert "logical messages per request: worst 2/1 = 2.000  (paper None, checked 2)" in out
    assert "messages per request (hop frames): worst 5/1 = 5.000" in out
    assert "node state kept:" in out and "ln, rn" in out and "verdict: ok" in out
    assert main(["explore", "-p", "toy", "-n", "3", "-R", "1", "--start", "2", "--json"]) == 0
    assert "token starts at rest at node 2" in capsys.readouterr().out
    # the lossy mode does not cover messages: it says so
    assert main(["explore", "-p", "toy", "-n", "2", "--faults", "drop=1"]) == 2
    err = capsys.readouterr().err
    assert "does not cover protocol toy" in err and "messages of the layer" in err
