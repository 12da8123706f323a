"""The toy protocol of the registry (firmware/proto_toy.py: broadcast requests, the token
sent straight to a requester) on the host, with no host module naming it: the simulator
carries its messages hop by hop, the checker and the trace count logical messages and hop
frames apart, and the counts are the node loop's (tests/test_layer.py: 8 hop frames and 2
logical messages for one request at node 3 of 5, the token at rest at node 0)."""

import json

import pytest

from conftest import why_not_ok
from picoring.check.checker import check_trace
from picoring.sim.simulate import simulate


def _one_request(tmp_path, n, node, trace=None):
    wl = tmp_path / "one.jsonl"
    wl.write_text(json.dumps({"t": 0, "node": node}) + "\n")
    return simulate("toy", n, "file:%s" % wl, trace=trace)


@pytest.mark.parametrize("n", [2, 3, 5, 7])
def test_one_request_costs_a_broadcast_round_and_the_tokens_way(tmp_path, n):
    for r in range(1, n):
        rep = _one_request(tmp_path, n, r)
        assert rep["ok"] and rep["quiescent"], rep["violations"]
        # The broadcast goes once round (n hop frames, back to its sender); the token goes
        # r hops from node 0: n + r hop frames, 2 logical messages.
        assert (rep["hop_frames"], rep["logical_messages"]) == (n + r, 2)
        assert rep["messages"] == {"total": n + r, "token": 0, "request": 0, "msg": n + r}
        # The token leaves node 0 when the broadcast reaches it (r' = n - r hops) and takes r.
        assert rep["latency"]["max"] == n


def test_the_holders_own_request_costs_nothing(tmp_path):
    rep = _one_request(tmp_path, 5, 0)
    assert rep["ok"] and (rep["hop_frames"], rep["logical_messages"]) == (0, 0)


def test_a_trace_of_the_toy_checks_to_the_simulators_counts(tmp_path):
    trace = tmp_path / "toy.jsonl"
    rep = simulate("toy", 6, "poisson", requests=150, seed=3, trace=str(trace))
    meta, checked = check_trace(str(trace))
    assert meta["protocol"] == "toy" and checked["ok"] and rep["ok"]
    for key in ("hop_frames", "logical_messages", "max_service_traffic", "max_service_logical", "served"):
        assert checked[key] == rep[key], key
    # Every frame sent was received: message hops are paired like token hops.
    assert checked["frames_in_flight_at_end"] == 0


@pytest.mark.parametrize("workload", ["poisson", "burst", "sequential", "adversarial"])
def test_the_toy_keeps_its_descriptors_bounds(workload):
    n = 7
    rep = simulate("toy", n, workload, requests=300, seed=5)
    assert rep["ok"] and rep["served"] == 300, rep["violations"]
    # about["bounds"]: 2 logical messages and 2n - 1 hop frames per request, checked.
    assert rep["bounds"]["logical_per_request"] == 2 and rep["bounds"]["messages_per_request"] == 2 * n - 1
    assert rep["logical_messages"] <= 2 * 300 and rep["hop_frames"] <= (2 * n - 1) * 300
    assert rep["hop_frames"] > rep["logical_messages"]


@pytest.mark.slow
@pytest.mark.parametrize("workload", ["sequential", "adversarial"])
def test_on_a_ring_the_toy_counts_as_in_the_simulator(ring, workload):
    """Through the pytest plugin's ring (virtual boards by default): flash picks the toy's
    module from the registry, the harness finds the resting token by asking the boards (it
    travels as a message), and both counts equal the simulator's."""
    n = ring.n
    report = ring.run("toy", workload, 10, seed=3)
    assert report["ok"], why_not_ok(report)
    assert report["served"] == 10 and report["events_lost"] == 0
    sim = simulate("toy", n, workload, requests=10, seed=3)
    for key in ("messages", "hop_frames", "logical_messages", "max_service_traffic", "max_service_logical"):
        assert report[key] == sim[key], key
    if workload == "adversarial":  # behind the token: a broadcast round and n - 1 token hops
        assert (report["hop_frames"], report["logical_messages"]) == (10 * (2 * n - 1), 20)


def test_the_dashboard_replays_a_toy_trace_with_both_counts(tmp_path):
    import io

    from rich.console import Console

    from picoring.check.trace import TraceReader
    from picoring.dash.dashboard import Dashboard

    trace = tmp_path / "toy.jsonl"
    rep = simulate("toy", 5, "sequential", requests=6, seed=1, trace=str(trace))
    with TraceReader(str(trace)) as r:
        meta, events = r.meta, list(r)
    console = Console(file=io.StringIO(), width=100, height=30, record=True)
    Dashboard(console, iter(events), meta, speed=None).run()
    text = console.export_text()
    assert "%d logical, %d hop frames" % (rep["logical_messages"], rep["hop_frames"]) in text
    assert "msg 1 " in text  # the log names a message's kind, source and destination
