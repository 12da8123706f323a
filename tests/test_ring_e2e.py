"""End to end on virtual boards: the firmware deployed with mpremote, driven
by the harness over the boards' USB ptys, checked like a simulation."""

import json

import pytest

from picoring import deploy
from picoring.cli import main
from picoring.harness import HarnessError, RingRun
from picoring.sim import simulate
from picoring.virtual import VirtualRing
from picoring.workload import make_workload

N = 4


@pytest.fixture(scope="module")
def ring():
    with VirtualRing(N, baud=115200) as r:
        yield r


def run_on(ring, protocol, workload, requests, seed=0, **kw):
    deploy.deploy_virtual(ring, {"protocol": protocol, "cs_us": 0})
    wl = make_workload(workload, N, requests, seed=seed, **kw)
    run = RingRun([b.usb_path for b in ring.boards], protocol, wl, resetter=ring.reset, seed=seed)
    try:
        run.connect()
        return run.run()
    finally:
        run.close()


@pytest.mark.parametrize("protocol", ["q", "d"])
@pytest.mark.parametrize("workload", ["sequential", "adversarial"])
def test_exact_counts_match_the_simulator(ring, protocol, workload):
    report = run_on(ring, protocol, workload, 12, seed=3)
    assert report["ok"], report["violations"]
    assert report["served"] == 12 and report["events_lost"] == 0
    sim = simulate(protocol, N, workload, requests=12, seed=3)
    assert report["messages"] == sim["messages"]
    assert report["max_service_traffic"] == sim["max_service_traffic"]
    if workload == "adversarial":
        per_request = N if protocol == "q" else 2 * N - 1
        assert report["messages"]["total"] == 12 * per_request


@pytest.mark.parametrize("protocol", ["s", "q", "d"])
def test_poisson_all_served_within_bounds(ring, protocol):
    report = run_on(ring, protocol, "poisson", 40, seed=1, rate=0.3)
    assert report["ok"], report["violations"]
    assert report["served"] == report["requests"] == 40
    assert report["safety_violations"] == 0
    if protocol == "s":
        assert report["quiescent"] is None and report["messages"]["request"] == 0
    else:
        assert report["quiescent"] is True


def test_ring_order_is_checked(ring):
    deploy.deploy_virtual(ring, {"protocol": "q"})
    ports = [b.usb_path for b in ring.boards]
    ports[0], ports[1] = ports[1], ports[0]
    run = RingRun(ports, "q", make_workload("sequential", N, 1), resetter=lambda i: ring.reset(ring.boards.index(
        next(b for b in ring.boards if b.usb_path == ports[i]))))
    try:
        with pytest.raises(HarnessError, match="ring position 1 but was given as port #0"):
            run.connect()
    finally:
        run.close()


def test_wrong_protocol_is_a_clear_error(ring):
    deploy.deploy_virtual(ring, {"protocol": "d"})
    run = RingRun([b.usb_path for b in ring.boards], "q", make_workload("sequential", N, 1), resetter=ring.reset)
    try:
        with pytest.raises(HarnessError, match="runs protocol 'd', this run asks for 'q'"):
            run.connect()
    finally:
        run.close()


def test_not_a_port():
    run = RingRun(["/dev/nonexistent-picoring0", "/dev/nonexistent-picoring1"], "q", make_workload("sequential", 2, 1))
    with pytest.raises(HarnessError, match="/dev/nonexistent-picoring0: cannot open"):
        run.connect()
    run.close()


def test_run_command_writes_a_trace_that_check_agrees_with(tmp_path, capsys):
    trace = tmp_path / "ring.jsonl"
    status = main(["run", "--virtual", "3", "-p", "d", "-w", "sequential", "-k", "6", "--seed", "2",
                   "--trace", str(trace), "--json"])
    live = json.loads(capsys.readouterr().out)
    assert status == 0, live["violations"]
    assert live["messages"]["total"] == simulate("d", 3, "sequential", requests=6, seed=2)["messages"]["total"]
    assert main(["check", str(trace), "--json"]) == 0
    offline = json.loads(capsys.readouterr().out)
    for key in ("messages", "served", "max_service_traffic", "safety_violations"):
        assert offline[key] == live[key]
