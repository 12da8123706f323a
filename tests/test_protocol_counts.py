"""Exact message counts the paper's analysis determines, on the real protocol code."""

import pytest

from conftest import why_not_ok
from picoring.firmware.protocol import ENTER_CS, SEND_REQUEST, SEND_TOKEN, make_node
from picoring.sim.simulate import simulate


def per_request_messages(protocol, n, workload, requests, seed, cs_time=1):
    """Messages sent from each request to the next one (closed-loop workloads
    issue a request only when the ring is quiescent), and whether the
    requester held the token when it asked."""
    events = []
    report = simulate(protocol, n, workload, requests=requests, seed=seed, cs_time=cs_time, listener=events.append)
    assert report["ok"], why_not_ok(report)
    out = []
    holder = 0
    for e in events:
        if e.ev == "req":
            out.append([e.node == holder, 0])
        elif e.ev == "send" and out:
            out[-1][1] += 1
        elif e.ev == "recv" and e.kind == "token":
            holder = e.node
    assert len(out) == requests
    return out


@pytest.mark.parametrize("workload", ["sequential", "adversarial"])
@pytest.mark.parametrize("n", [2, 3, 5, 8, 13])
@pytest.mark.parametrize("cs_time", [0, 1, 3])
def test_q_uses_exactly_n_messages_per_request(workload, n, cs_time):
    counts = per_request_messages("q", n, workload, 40, seed=n, cs_time=cs_time)
    for held, msgs in counts:
        assert msgs == (0 if held else n)
    if workload == "adversarial":
        assert not any(held for held, _ in counts)


@pytest.mark.parametrize("workload", ["sequential", "adversarial"])
@pytest.mark.parametrize("n", [2, 3, 5, 8, 13])
@pytest.mark.parametrize("cs_time", [0, 1, 3])
def test_d_uses_exactly_2n_minus_1_messages_per_request(workload, n, cs_time):
    counts = per_request_messages("d", n, workload, 40, seed=n, cs_time=cs_time)
    for held, msgs in counts:
        assert msgs == (0 if held else 2 * n - 1)


def test_sequential_hits_the_holder_sometimes():
    # the "0 when the requester holds the token" case is really exercised
    counts = per_request_messages("q", 3, "sequential", 60, seed=1)
    assert any(held for held, _ in counts) and any(not held for held, _ in counts)


def test_q_handlers_step_by_step():
    # Q on 3 nodes, token resting at node 0; node 1 asks.
    a, b, c = (make_node("q", i, 3) for i in range(3))
    a.give_token()
    assert b.request() == SEND_REQUEST
    assert c.on_request() == SEND_REQUEST  # rule 2: not the holder, pass it on
    assert a.on_request() == SEND_TOKEN  # rule 2: holder counts it, passes T
    assert a.count == 1 and not a.has_token
    assert b.on_token(a.count, a.state, a.seq, a.epoch) == ENTER_CS  # rule 3
    assert b.count == 0 and b.seq == 1 and b.in_cs
    assert b.exit_cs() == 0  # counter 0: T rests at node 1
    assert b.has_token and not b.in_cs
    assert b.request() == ENTER_CS  # rule 1: the holder enters directly


def test_request_during_critical_section_is_passed_at_exit():
    for protocol in ("q", "d"):
        a = make_node(protocol, 0, 3)
        a.give_token()
        assert a.request() == ENTER_CS
        assert a.on_request() == 0  # never passes T out of a critical section
        assert a.has_token
        assert a.exit_cs() == SEND_TOKEN


def test_second_token_is_dropped_and_counted():
    for protocol in ("s", "q", "d", "d-literal"):
        node = make_node(protocol, 1, 3)
        node.request()
        first = node.on_token(1, 1, 0, 0)
        assert first == ENTER_CS
        assert node.on_token(1, 1, 0, 0) == 0
        assert node.errors == 1


def test_unknown_protocol_and_bad_ring():
    with pytest.raises(ValueError, match="unknown protocol"):
        make_node("x", 0, 3)
    with pytest.raises(ValueError):
        make_node("q", 0, 1)
    with pytest.raises(ValueError):
        make_node("q", 3, 3)


@pytest.mark.parametrize("horizon", [10, 40, 160])
def test_s_never_rests_and_its_idle_traffic_grows_with_idle_time(horizon):
    report = simulate("s", 5, "sequential", requests=10, seed=1, idle_horizon=horizon)
    assert report["ok"] and report["served"] == 10
    assert report["quiescent"] is None
    assert report["bounds"]["messages_per_request"] is None
    # one token hop per time unit, forever: exactly the idle horizon
    assert report["idle_messages"] == horizon
