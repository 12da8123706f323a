"""End to end on Pico firmware: real Raspberry Pi Picos, or emulated ones.

These tests run only on boards given by --ring-ports or --ring-file (marker
`boards`). CI (.ci/run) gives them 3 emulated Picos running upstream MicroPython
for the rp2 port (../shared/rp2040/ring 3, flashed by `picoring flash --baud
1000000`) when that folder is there; by hand:

    P=$(../shared/rp2040/ring 3 --detach | head -n 1)
    picoring flash --ports $P --protocol q --baud 1000000
    pytest -m boards --ring-ports $P --ring-baud 1000000 --ring-flashed q

Virtual boards (the unix port, the default ring of the other tests) would pass
them too, and would hide what they are here for: the rp2 port's 30-bit small
ints and small heap, its UART driver, and a chip 100 to 200 times slower than
the unix port on x86. So without boards they are skipped, with a reason.
"""

import pytest

from conftest import ROOT, why_not_ok
from picoring.sim.simulate import simulate

pytestmark = [pytest.mark.boards, pytest.mark.slow]

RP2040 = ROOT.parent / "shared" / "rp2040"


@pytest.fixture
def board_ring(request):
    """The `ring` fixture, only over real (or emulated) boards."""
    o = request.config.option
    if not (o.ring_ports or o.ring_file or o.ring_labgrid):
        where = ("it is at %s: run .ci/run, or see this module's doc" % RP2040 if RP2040.is_dir()
                 else "there is no %s here" % RP2040)
        pytest.skip("needs Picos: real boards (--ring-ports, --ring-file or --ring-labgrid) or emulated ones (.ci/run starts "
                    "../shared/rp2040/ring 3 when that folder exists; %s); virtual boards run the unix port, "
                    "which hides the rp2 port's 30-bit ints, heap and speed" % where)
    return request.getfixturevalue("ring")


def test_requests_paced_in_chip_time_by_the_emulator(board_ring):
    """`picoring bench ring --emulated`'s requests: the emulator writes the request command to
    boards 0 to n - 2 in turn, one every 10 ms of chip time from the window's request to its end,
    however fast this machine runs the chips; the firmware serves them, and the token's hops at
    the board that never asks are measured. (First in this file: the ring is still flashed for Q.)"""
    from picoring.bench import ring_chip
    from picoring.ring.hostlink import REQUEST
    from picoring.emulated import supervisor

    ring, n = board_ring, board_ring.n
    state_dir = supervisor.state_dir_for_ports(ring.ports)
    if state_dir is None:
        pytest.skip("real boards: no chip time to pace requests in (the bench is for emulated Picos)")
    protocol = ring.flashed[0] if ring.flashed and ring.flashed[0] in ("q", "d") else "q"
    ring.flash(protocol)
    window = supervisor.record_window(state_dir, 0.02, 0.1, feed=(range(n - 1), 0.01, REQUEST))
    assert window["fed"] == 12  # at 0, 10, ..., 110 ms of chip time: the window ends at 120
    m = ring_chip.measure(window, ring_chip.token_of(protocol), [n - 1])
    assert not m["stopped"]
    hops = m["token_hop"]["relay"]["n"] + m["token_hop"]["passed_on"]["n"]
    assert hops >= 3, m["token_hop"]  # a token round per request served, each through board n - 1


@pytest.mark.parametrize("protocol", ["q", "d"])
def test_adversarial_exact_message_counts(board_ring, protocol):
    """The lower-bound construction (a request at the node just behind the resting token):
    Q takes exactly n messages per request, corrected D exactly 2n - 1, as in the
    simulator, on the boards' own firmware."""
    ring, n, k = board_ring, board_ring.n, 12
    report = ring.run(protocol, "adversarial", k, seed=3)
    assert report["ok"], why_not_ok(report)
    assert report["served"] == k and report["events_lost"] == 0 and report["safety_violations"] == 0
    per_request = n if protocol == "q" else 2 * n - 1
    assert report["messages"]["total"] == k * per_request
    sim = simulate(protocol, n, "adversarial", requests=k, seed=3)
    assert report["messages"] == sim["messages"]
    assert report["max_service_traffic"] == sim["max_service_traffic"]


def test_compare_on_the_boards_flashes_them_for_its_protocol(board_ring, capsys):
    """`picoring compare --ports`: the boards are flashed for the protocol by flash's path (the
    toy's module compiled for the rp2 port), run through the harness, and the row's counts are
    the simulator's, exactly, under the adversarial workload. One protocol, to keep the test
    near a minute on emulated Picos (a flash and a run take about 30 s each on a loaded 2-core
    machine); flashing protocols in turn is tested on virtual boards and with fakes
    (tests/test_compare.py)."""
    import json

    from picoring.cli.main import main

    ring, n, k = board_ring, board_ring.n, 3
    argv = ["compare", "--ports", ",".join(ring.ports), "--board", ring.board, "-p", "toy", "-w", "adversarial",
            "-k", str(k), "--seed", "3", "--json"] + (["--baud", str(ring.baud)] if ring.baud else [])
    ring.flashed = None  # from here on the boards run what compare flashed them with
    status = main(argv)
    out, err = capsys.readouterr()
    ring.flashed = ("toy", 0, None)
    result = json.loads(out) if out.strip() else None
    assert result is not None, err
    (row,), (run,) = result["rows"], result["runs"]
    assert status == 0, err + "\n" + why_not_ok(run)  # (under load once: status 1, and no word why)
    assert row["protocol"] == "toy" and result["latency_unit"] == "µs"
    assert (row["logical_per_request"], row["hop_frames_per_request"]) == (2, 2 * n - 1)
    sim = simulate("toy", n, "adversarial", requests=k, seed=3)
    assert run["served"] == k and run["events_lost"] == 0 and run["safety_violations"] == 0
    assert (run["messages"], run["logical_messages"]) == (sim["messages"], sim["logical_messages"])
    assert "flashing the %d boards for protocol TOY" % n in err
