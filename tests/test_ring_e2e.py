"""End to end on a ring of boards, through the picoring pytest plugin's `ring`
fixture: virtual boards by default (--ring-virtual N), real ones with
--ring-ports P1,P2,... or --ring-file ring.json, and the tests do not change.
The firmware is flashed with mpremote (picoring flash's path), the boards are
driven by the harness over their USB serial, and every run is checked like a
simulation. Each board's serial traffic is in the report of a failed test."""

import json

import pytest

from picoring.cli import main
from picoring.harness import HarnessError, RingRun
from picoring.sim import simulate
from picoring.workload import make_workload


@pytest.mark.parametrize("protocol", ["q", "d"])
@pytest.mark.parametrize("workload", ["sequential", "adversarial"])
def test_exact_counts_match_the_simulator(ring, protocol, workload):
    n = ring.n
    report = ring.run(protocol, workload, 12, seed=3)
    assert report["ok"], report["violations"]
    assert report["served"] == 12 and report["events_lost"] == 0
    sim = simulate(protocol, n, workload, requests=12, seed=3)
    assert report["messages"] == sim["messages"]
    assert report["max_service_traffic"] == sim["max_service_traffic"]
    if workload == "adversarial":
        per_request = n if protocol == "q" else 2 * n - 1
        assert report["messages"]["total"] == 12 * per_request


@pytest.mark.parametrize("protocol", ["s", "q", "d"])
def test_poisson_all_served_within_bounds(ring, protocol):
    report = ring.run(protocol, "poisson", 40, seed=1, rate=0.3)
    assert report["ok"], report["violations"]
    assert report["served"] == report["requests"] == 40
    assert report["safety_violations"] == 0
    if protocol == "s":
        assert report["quiescent"] is None and report["messages"]["request"] == 0
    else:
        assert report["quiescent"] is True


def test_ring_order_is_checked(ring):
    ring.flash("q")
    ports = list(ring.ports)
    ports[0], ports[1] = ports[1], ports[0]
    run = ring.make_run(ports, "q", make_workload("sequential", ring.n, 1))
    try:
        with pytest.raises(HarnessError, match="ring position 1 but was given as port #0"):
            run.connect()
    finally:
        run.close()


def test_wrong_protocol_is_a_clear_error(ring):
    ring.flash("d")
    run = ring.make_run(ring.ports, "q", make_workload("sequential", ring.n, 1))
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


def test_run_command_writes_a_trace_that_check_agrees_with(ring, tmp_path, capsys):
    # `picoring run --ports` restarts the boards as it would real ones: Ctrl-C, Ctrl-D over USB.
    ring.flash("d")
    trace = tmp_path / "ring.jsonl"
    status = main(["run", "--ports", ",".join(ring.ports), "-p", "d", "-w", "sequential", "-k", "6", "--seed", "2",
                   "--trace", str(trace), "--json"])
    live = json.loads(capsys.readouterr().out)
    assert status == 0, live["violations"]
    assert live["messages"]["total"] == simulate("d", ring.n, "sequential", requests=6, seed=2)["messages"]["total"]
    assert main(["check", str(trace), "--json"]) == 0
    offline = json.loads(capsys.readouterr().out)
    for key in ("messages", "served", "max_service_traffic", "safety_violations"):
        assert offline[key] == live[key]


def test_run_command_with_a_fresh_virtual_ring(tmp_path, capsys):
    status = main(["run", "--virtual", "3", "-p", "q", "-w", "sequential", "-k", "4", "--json"])
    live = json.loads(capsys.readouterr().out)
    assert status == 0, live["violations"]
    assert live["served"] == 4
