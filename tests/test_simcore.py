"""The simulator loop: its fast path, and replaying a realized schedule."""

import pytest

from picoring.sim import simcore
from picoring.check.checker import Checker
from picoring.firmware.protocol import SEND_TOKEN, NodeS
from picoring.sim.simulate import simulate
from picoring.sim.workload import Schedule

CASES = [(p, n, w, cs, seed) for p in ("q", "d", "d-literal", "s") for n in (2, 3, 7) for w in
         ("sequential", "adversarial", "poisson", "burst") for cs in (0, 2) for seed in (0, 1)]


@pytest.mark.parametrize("protocol,n,workload,cs_time,seed", CASES)
def test_fast_path_changes_nothing(protocol, n, workload, cs_time, seed):
    # A listener turns the lone-frame fast path off: both runs must agree exactly.
    fast = simulate(protocol, n, workload, requests=25, seed=seed, cs_time=cs_time, rate=0.5)
    slow = simulate(protocol, n, workload, requests=25, seed=seed, cs_time=cs_time, rate=0.5, listener=lambda e: None)
    assert fast == slow


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("cs_time", [0, 1, 3])
def test_realized_schedule_replays_the_run(seed, cs_time):
    # poisson at a high rate defers many requests; the realized schedule, run as
    # an exact (file) workload, must give the same run.
    reqs = []
    first = simulate("d", 5, "poisson", requests=40, seed=seed, cs_time=cs_time, rate=0.8,
                     listener=lambda e: reqs.append((e.t, e.node)) if e.ev == "req" else None)
    again = simulate("d", 5, Schedule(5, reqs), cs_time=cs_time)
    for key in ("messages", "max_service_traffic", "latency", "served", "end_time"):
        assert again[key] == first[key]


# -- starvation: how long the oldest pending request has waited ---------------------------

@pytest.mark.parametrize("protocol", ["q", "d", "s"])
def test_requests_far_apart_in_time_are_all_served(protocol):
    # A quiet ring between two requests is not starving: the second request,
    # made long after the last entry, must be served and the run reported OK.
    report = simulate(protocol, 6, Schedule(6, [(10, 0), (5000, 2)]))
    assert report["served"] == 2 and report["ok"] is True, report.get("stop_reason")


@pytest.mark.parametrize("protocol", ["q", "d"])
def test_a_sparse_poisson_run_is_served_to_the_end(protocol):
    report = simulate(protocol, 6, "poisson", requests=50, seed=0, rate=0.001)
    assert report["served"] == 50 and report["quiescent"] is True


class SPassesNodeOneOver(NodeS):
    """S whose node 1 never takes the token for its own request (a planted starvation)."""

    def on_token(self, count, state, seq, epoch):
        if self.index == 1:
            self.count, self.state, self.seq, self.epoch = count, state, seq, epoch
            return SEND_TOKEN
        return NodeS.on_token(self, count, state, seq, epoch)


def test_a_request_passed_over_while_others_are_served_is_starvation():
    # Node 1 asks at t=0 and is passed over forever while the other nodes keep
    # entering: the run must stop one starvation horizon after node 1's request,
    # naming it, however recently somebody else entered.
    n, cs_time, horizon = 4, 1, 100
    others = [(t, node) for t in range(5, 2000, 20) for node in (0, 2, 3)]
    nodes = [SPassesNodeOneOver(i, n) for i in range(n)]
    out = simcore.run(nodes, Schedule(n, [(0, 1)] + others), cs_time, Checker("s", n), starve_horizon=horizon)
    assert out["quiescent"] is False
    assert out["end_time"] == horizon + 1
    assert "the oldest (node 1, made at t=0)" in out["reason"]


# -- the simulator's nodes (sim/nodes.py) ----------------------------------------------------

def test_sim_nodes_are_the_protocols_classes_with_their_attributes_in_slots():
    from picoring.firmware.protocol import REGISTRY, load
    from picoring.sim.nodes import make_nodes, node_bytes

    for name in REGISTRY:
        n = 12 if name in ("sk", "ra") else 64
        nodes = make_nodes(name, n)
        plain = load(name)(3, n)
        node = nodes[3]
        assert type(node).__mro__[1] is load(name) and isinstance(node, load(name))
        assert vars(node) == {}  # every attribute __init__ makes is a slot: no dictionary to look in
        assert {k: getattr(node, k) for k in vars(plain)} == vars(plain)
        assert all(x.msg_sizes is nodes[0].msg_sizes and x.msg_least is nodes[0].msg_least for x in nodes)  # one object each
        if len(plain.out) == 0:  # no message declared: one empty buffer, which no handler can write into
            assert all(x.out is nodes[0].out for x in nodes) and nodes[0].out == b""
        else:  # a buffer of its own each
            assert len({id(x.out) for x in nodes}) == n and isinstance(node.out, bytearray)
        assert 300 < node_bytes(name, n) < 2000


def test_class_constants_the_frame_handlers_read_are_slots_with_the_classs_values():
    # D's on_token reads active_budget, a class attribute (sim/nodes.py: read through a slot,
    # not the generic lookup); its value is each class's own, and a node of another protocol
    # gets no such slot
    from picoring.firmware.proto_d import NodeD, NodeDLiteral
    from picoring.sim.nodes import make_nodes, sim_class

    for name, cls in (("d", NodeD), ("d-literal", NodeDLiteral)):
        made = sim_class(name, 8)
        assert "active_budget" in made.__slots__
        assert all(node.active_budget is cls.active_budget for node in make_nodes(name, 8))
    assert "active_budget" not in sim_class("q", 8).__slots__
    assert sim_class("d", 8).__slots__[-1:] == ("active_budget",)  # not the module's constants it reads too


@pytest.mark.parametrize("n", [2, 64, 100, 10000])
def test_sequential_draws_the_nodes_randrange_gives(n):
    # The workload draws with getrandbits as randrange does (workload.py): the nodes randrange(n) gives,
    # so a seed names the same run as before
    import random

    from picoring.sim.workload import Sequential

    wl = Sequential(n, 2000, seed=7)
    rng = random.Random(7)
    assert [wl.on_quiescent(0, 0) for _ in range(2001)] == [rng.randrange(n) for _ in range(2000)] + [None]


def test_hop_loops_on_a_ring_not_built_by_make_nodes():
    # carry_token/carry_request find the node a frame stopped at by its index, checked: on a
    # ring whose nodes' indices are not their places (here rotated) a trip counts its hops
    from picoring.firmware.proto_q import NodeQ

    ring = [NodeQ(i, 5) for i in range(5)]
    for node in ring:
        node.has_token = False
    ring[3].has_token = True  # the request stops there: place 1 of the rotated ring
    rotated = ring[2:] + ring[:2]
    assert simcore.carry_request(rotated, 0, 10) == (2, SEND_TOKEN)
    ring[3].has_token = False  # (it passed the token on)
    ring[3].pending = True  # the token stops there: it enters
    k, a = simcore.carry_token(rotated, 0, 0, 0, 0, 0, 10)[:2]
    assert k == 2 and a != SEND_TOKEN
