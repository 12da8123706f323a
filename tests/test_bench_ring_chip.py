"""`picoring bench ring --emulated` (picoring.bench.ring_chip): the figures of a recorded window
of chip time, the relay following the firmware's token frame length, the command's path; and,
marked slow (it starts node), the minimal relay on two emulated Picos. The deadlines of a run
on emulated Picos scale by the ring's own count of chip time (RingRun.measure_slowness)."""

import json

import pytest

from picoring.bench import ring_chip
from picoring.cli.main import main
from picoring.emulated import supervisor
from picoring.firmware import frame
from test_emulated import BOOTROM, UF2, needs_files


def _window(wires, start_ns=1_000_000, end_ns=2_000_000, usb=((0, 0, 0), (100, 200, 300)),
            cycles=((0, 0, 0), (125_000, 62_500, 0))):
    return {"start_ns": start_ns, "end_ns": end_ns, "baud": [1_000_000] * len(wires), "stopped": [None] * len(wires),
            "start": {"chip_ns": start_ns, "usb_bytes": list(usb[0]), "cycles": list(cycles[0])},
            "end": {"chip_ns": end_ns, "usb_bytes": list(usb[1]), "cycles": list(cycles[1])},
            "wires": wires}


def test_figures_of_a_recorded_window():
    """3 boards, 1 ms of chip time: hops are the frames whose last byte landed inside the window;
    a board's turnaround runs from a frame landing in it to the next frame it sends."""
    us = 1000
    wires = [
        # board 0 -> 1: one frame before the window (not counted), two inside
        [[500 * us, 600 * us, 16], [1100 * us, 1260 * us, 16], [1500 * us, 1660 * us, 16]],
        # board 1 -> 2: sends 100 us and 40 us after board 0's frames land
        [[1360 * us, 1520 * us, 16], [1700 * us, 1860 * us, 12]],
        # board 2 -> 0: lands in board 0 at 1400 us; board 0 sends at 1500 us; nothing after
        [[1300 * us, 1400 * us, 10]],
    ]
    m = ring_chip.measure(_window(wires))
    assert m["chip_s"] == 0.001
    assert m["hops"] == 5  # 2 + 2 + 1 inside [1000, 2000) us
    assert m["hops_per_chip_s"] == 5000.0
    assert m["frame_bytes"] == {"median": 16, "min": 10, "max": 16}
    boards = {b["board"]: b for b in m["turnaround_us"]["boards"]}
    assert boards[0] == {"board": 0, "median_us": 100.0, "p99_us": 100.0, "n": 1}  # 1400 -> 1500
    assert boards[1] == {"board": 1, "median_us": 40.0, "p99_us": 100.0, "n": 2}  # 1260 -> 1360, 1660 -> 1700
    assert ring_chip.turnarounds_us(wires[0][1:], wires[1]) == [100.0, 40.0]
    assert boards[2] == {"board": 2, "median_us": None, "p99_us": None, "n": 0}  # board 2 sent nothing after
    assert m["turnaround_us"]["median"] == 100.0 and m["turnaround_us"]["n"] == 3
    assert m["usb_bytes_per_hop"] == 120.0  # 600 bytes over 5 hops
    assert m["cpu_load_pct"] == [100.0, 50.0, 0.0]


def test_percentile_is_the_nearest_rank():
    xs = list(range(1, 101))
    assert ring_chip.percentile(xs, 50) == 50
    assert ring_chip.percentile(xs, 99) == 99
    assert ring_chip.percentile([7], 99) == 7
    assert ring_chip.percentile([], 50) is None


def test_the_relay_takes_the_firmwares_token_frame_length(monkeypatch):
    """The bench's relay waits for frames of firmware/frame.py's TOKEN_WIRE bytes (whatever the
    firmware's token frame is), and the result compares the two rings."""
    calls = {}

    def firmware_window(n, protocol, baud, warm_s, window_s, regen_ms, firmware, bootrom, log):
        calls["firmware"] = (n, protocol, baud, warm_s, window_s)
        return _window([[[1_100_000, 1_260_000, 16]], [[1_300_000, 1_460_000, 16]], []])

    def relay_window(n, baud, frame_bytes, warm_s, window_s, firmware, bootrom, log):
        calls["relay"] = (n, baud, frame_bytes)
        return _window([[[1_100_000, 1_260_000, frame_bytes]], [[1_300_000, 1_460_000, frame_bytes]],
                        [[1_500_000, 1_660_000, frame_bytes]]], usb=((0, 0, 0), (0, 0, 0)))

    monkeypatch.setattr(ring_chip, "firmware_window", firmware_window)
    monkeypatch.setattr(ring_chip, "relay_window", relay_window)
    result = ring_chip.run(quick=True)
    assert calls == {"firmware": (3, "s", 1_000_000, 0.1, 0.2), "relay": (3, 1_000_000, frame.TOKEN_WIRE)}
    assert result["token_frame_bytes"] == frame.TOKEN_WIRE
    assert result["firmware"]["hops_per_chip_s"] == 2000.0 and result["relay"]["hops_per_chip_s"] == 3000.0
    assert result["firmware_over_relay"] == 0.667
    assert result["wire_limit_hops_per_s"] == round(1_000_000 / (10 * frame.TOKEN_WIRE), 1)
    assert "FRAME = %d\n" % frame.TOKEN_WIRE in ring_chip.relay_script(1_000_000, frame.TOKEN_WIRE, False)
    assert "FIRST = 1\n" in ring_chip.relay_script(1_000_000, frame.TOKEN_WIRE, True)


def test_the_command_runs_the_emulated_bench(monkeypatch, capsys):
    """`picoring bench ring --emulated` is this bench (not the virtual ring's), with -n, -p,
    --baud, --firmware and --bootrom; --json prints its result; its help names it."""
    seen = {}

    def run(quick, log, n, protocol, baud, regen_ms, firmware, bootrom):
        seen.update(quick=quick, n=n, protocol=protocol, baud=baud, regen_ms=regen_ms, firmware=firmware,
                    bootrom=bootrom)
        return {"ok": True, "n": n}

    monkeypatch.setattr(ring_chip, "run", run)
    assert main(["bench", "ring", "--emulated", "--quick", "--json", "-n", "4", "--baud", "115200"]) == 0
    assert json.loads(capsys.readouterr().out) == {"ok": True, "n": 4}
    assert seen == {"quick": True, "n": 4, "protocol": "s", "baud": 115200, "regen_ms": None, "firmware": None,
                    "bootrom": None}
    assert main(["bench", "ring", "--emulated", "--json", "--firmware", "pico.uf2", "--bootrom", "rom.ts"]) == 0
    capsys.readouterr()
    assert (seen["firmware"], seen["bootrom"]) == ("pico.uf2", "rom.ts")
    with pytest.raises(SystemExit):
        main(["bench", "ring", "--emulated", "--help"])
    out = capsys.readouterr().out
    assert "picoring bench ring --emulated --json" in out and "ring --emulated only: the UART baud" in out


def test_deadlines_scale_by_an_emulated_rings_own_clock_rate(tmp_path, monkeypatch):
    """Pings that leave every board's rate unknown (seconds-long round trips) would leave the
    deadlines at a real Pico's; an emulated ring's own count of chip time scales them."""
    from picoring.ring import harness

    monkeypatch.setattr(harness, "clock_rates", lambda links, clock=None: [None, None])
    run = harness.RingRun(["a", "b"], "s", None)
    assert run.measure_slowness() == 1.0
    run = harness.RingRun(["a", "b"], "s", None, clock_rate=lambda: 0.2)
    assert run.measure_slowness() == 5.0
    monkeypatch.setattr(harness, "clock_rates", lambda links, clock=None: [0.1, 0.5])
    assert run.measure_slowness() == 10.0  # the slower of the pings' and the ring's

    # the ports of a ring that `picoring emulated up` started give its rate; other ports none
    (tmp_path / supervisor.STATE).write_text(json.dumps({"supervisor_pid": 1}))
    ports = [str(tmp_path / "ttyE0"), str(tmp_path / "ttyE1")]
    rate = supervisor.chip_rate_for_ports(ports)
    assert rate() is None  # before the emulator's first sample
    (tmp_path / supervisor.CLOCK).write_text(json.dumps({"chip_per_wall": 0.25}))
    assert rate() == 0.25
    assert supervisor.chip_rate_for_ports(["/dev/ttyACM0", "/dev/ttyACM1"]) is None
    assert supervisor.chip_rate_for_ports([str(tmp_path / "elsewhere" / "ttyE0")]) is None


@pytest.mark.rp2040  # (an emulated Pico: .ci/run runs it beside the slow tier, one busy core at a time)
@needs_files
def test_the_minimal_relay_on_emulated_picos(monkeypatch):
    """The relay on 2 emulated Picos passes token-length frames round the ring, and the emulator
    records a window of chip time with them."""
    monkeypatch.setenv("PICORING_PICO_UF2", str(UF2))
    monkeypatch.setenv("PICORING_RP2040_BOOTROM", str(BOOTROM))
    m = ring_chip.measure(ring_chip.relay_window(2, 1_000_000, frame.TOKEN_WIRE, 0.005, 0.02))
    assert m["hops"] >= 20  # 120 us of wire and about 70 us of turnaround a hop at 12 bytes
    assert m["frame_bytes"] == {"median": frame.TOKEN_WIRE, "min": frame.TOKEN_WIRE, "max": frame.TOKEN_WIRE}
    assert all(b["n"] > 0 and 20 < b["median_us"] < 500 for b in m["turnaround_us"]["boards"])
    assert m["usb_bytes_per_hop"] == 0.0
    assert m["baud"] == [1_000_000, 1_000_000]
