"""`picoring bench ring --emulated` (picoring.bench.ring_chip): the figures of a recorded window
of chip time, the relay following the firmware's token frame length, the command's path; and,
marked slow (it starts node), the minimal relay on two emulated Picos. The deadlines of a run
on emulated Picos scale by the ring's own count of chip time (RingRun.measure_slowness)."""

import json
import os
import select

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


def _frame(data, start_us, us=1000):
    """A recorded frame of these bytes starting at start_us, 10 us a byte (1 Mbaud), in ns."""
    return [start_us * us, (start_us + 10 * len(data)) * us, len(data), bytes(data).hex()]


def test_the_token_hops_are_told_from_the_frames_bytes():
    """A window's frames keep their bytes: the bench decodes them, and a board's token hop is a
    token frame landing followed by a token frame sent, the protocol's token: S's token frame, or
    a token message, taken in and sent on (relay) or passed on for another board (passed on)."""
    enc = [frame.Encoder() for _ in range(3)]
    tok = [enc[b].token(0, 0, 5, 1) for b in range(3)]
    assert ring_chip.frames_of([_frame(tok[0], 0), _frame(enc[0].request(), 200), [0, 1, 4, "00ff0000"], [0, 1, 3]]) == [
        (frame.TOKEN, None, None), (frame.REQUEST, None, None), (0, None, None), (0, None, None)]
    assert ring_chip.token_of("s") == ring_chip.token_of("q") == (frame.TOKEN, None)
    assert ring_chip.token_of("sk") == (frame.MSG, 1) and ring_chip.token_of("wt:skip=0") == (frame.MSG, 0)
    # S on 2 boards: board 1 sends each token on 100 us after it landed (relay), board 0 the first
    # that board 1 sent 260 us after (the second lands after the window); a request frame between
    # is no hop
    w0 = [_frame(tok[0], 1100), _frame(enc[0].request(), 1400), _frame(tok[0], 1700)]
    w1 = [_frame(tok[1], 1320), _frame(tok[1], 1920)]
    m = ring_chip.measure(_window([w0, w1], usb=((0, 0), (0, 0)), cycles=((0, 0), (0, 0))), ring_chip.token_of("s"))
    assert m["token_hop"]["relay"] == {"median_us": 100.0, "p99_us": 260.0, "n": 3}
    assert m["token_hop"]["passed_on"]["n"] == 0 and m["token_hop"]["boards"] == [0, 1]
    # sk on 3 boards, measured at board 2: a token message for board 0 passed on 60 us after it
    # landed, one for board 2 taken in and sent on 150 us after, one followed by a request frame
    # (not a hop); a request message is no token
    tk = ring_chip.token_of("sk")
    payload = bytes(8)
    size = len(enc[0].message(1, 1, 0, payload))  # bytes on the wire, 10 us each
    w1 = [_frame(enc[1].message(1, 1, 0, payload), 1100), _frame(enc[1].message(1, 1, 2, payload), 1400),
          _frame(enc[1].message(1, 1, 0, payload), 1700), _frame(enc[1].message(0, 1, 0, b"ab"), 1850)]
    w2 = [_frame(enc[2].message(1, 1, 0, payload), 1100 + 10 * size + 60),
          _frame(enc[2].message(1, 2, 0, payload), 1400 + 10 * size + 150),
          _frame(enc[2].request(), 1700 + 10 * size + 40), _frame(enc[2].message(0, 1, 0, b"ab"), 1980)]
    m = ring_chip.measure(_window([[], w1, w2]), tk, [2])
    assert m["token_hop"] == {"boards": [2], "relay": {"median_us": 150.0, "p99_us": 150.0, "n": 1},
                              "passed_on": {"median_us": 60.0, "p99_us": 60.0, "n": 1}}
    # D on 3 boards, measured at board 2: a token passed straight on 110 us after it landed (a
    # hop), then one that rested there until a request message landed and woke it (no hop:
    # 450 us from the token's last byte, 100 us from the request's)
    w1 = [_frame(tok[1], 1000), _frame(tok[1], 1300), _frame(enc[1].request(), 1700)]
    req_end = 1700 + 10 * len(enc[1].request())
    w2 = [_frame(tok[2], 1000 + 10 * len(tok[1]) + 110), _frame(tok[2], req_end + 100)]
    m = ring_chip.measure(_window([[], w1, w2]), ring_chip.token_of("d"), [2])
    assert m["token_hop"]["relay"] == {"median_us": 110.0, "p99_us": 110.0, "n": 1}


def test_every_protocol_but_s_runs_with_requests_and_is_measured_at_the_board_that_never_asks(monkeypatch):
    """The others' tokens rest (or adapt) without requests: boards 0 to n - 2 are asked all along
    and the token hop is board n - 1's; a list of protocols sets each one's hop against the first's."""
    enc = frame.Encoder()
    tok = enc.token(0, 0, 5, 1)
    seen = []

    def firmware_window(n, protocol, baud, warm_s, window_s, regen_ms, firmware, bootrom, log, requests):
        seen.append((protocol, requests))
        late = 100 if protocol == "s" else 120  # board 2 sends each token on this long after
        w1 = [_frame(tok, 1100)]
        w2 = [_frame(tok, 1220 + late)]
        return _window([[], w1, w2])

    monkeypatch.setattr(ring_chip, "firmware_window", firmware_window)
    monkeypatch.setattr(ring_chip, "token_of", lambda p: (frame.TOKEN, None))
    result = ring_chip.run_protocols(["s", "q"], quick=True)
    assert seen == [("s", False), ("q", True)]
    assert [r["firmware"]["token_hop"]["boards"] for r in result["runs"]] == [[0, 1, 2], [2]]
    assert [(r["protocol"], r["hop"], r["median_us"], r["vs_first"]) for r in result["token_hops"]] == [
        ("s", "relay", 100.0, 1.0), ("q", "relay", 120.0, 1.2)]
    assert "requests" not in result["runs"][0] or result["runs"][0]["requests"] is None
    assert result["runs"][1]["requests"].startswith("boards 0 to 1")


def test_the_feeder_asks_each_port_in_turn_for_its_life():
    """bench.feed (the host's feed for ../shared/rp2040/bench) writes the request command to the
    ports in turn, one every period, and stops at the end of its life."""
    from picoring.bench.feed import feed
    from picoring.ring.hostlink import REQUEST

    ptys = [os.openpty() for _ in range(2)]  # two boards' USB ports
    try:
        ticks = iter(range(100))
        sent = feed([os.ttyname(s) for _, s in ptys], 1.0, 5.0, clock=lambda: next(ticks) / 2)
        assert sent >= 3  # a request a period of its clock, which each call moves on by half a period
        want = [REQUEST * ((sent + 1) // 2), REQUEST * (sent // 2)]
        got = [b"", b""]
        for i, (m, _) in enumerate(ptys):  # a pty hands written bytes on to its master in its own time
            while len(got[i]) < len(want[i]) and select.select([m], [], [], 10)[0]:
                got[i] += os.read(m, 100)
        assert got == want
    finally:
        for m, s in ptys:
            os.close(m)
            os.close(s)


def test_a_windows_feed_goes_to_the_emulator_with_the_request(tmp_path):
    """record_window(feed=...) hands the emulator the boards, the period in chip nanoseconds and the
    bytes in hex (js/emulator.mjs writes them, in chip time); a feed the ring cannot take (a board
    it has not, no period, nothing to send) is refused before anything is asked of the emulator."""
    import threading
    import time
    from pathlib import Path

    (tmp_path / supervisor.STATE).write_text(json.dumps({"supervisor_pid": os.getpid(), "n": 3}))
    seen = {}

    def emulator():  # takes the request and answers it, as node does (empty windows)
        for _ in range(500):
            req = tmp_path / supervisor.WINDOW
            if req.exists():
                seen.update(json.loads(req.read_text()))
                req.unlink()  # (as the supervisor passes it on)
                Path(seen["out"]).write_text(json.dumps({"wires": [], "fed": 7}))
                return
            time.sleep(0.01)

    t = threading.Thread(target=emulator)
    t.start()
    window = supervisor.record_window(tmp_path, 0.01, 0.02, feed=(range(2), 0.002, b"!r\n"), timeout_s=30)
    t.join()
    assert window["fed"] == 7
    assert seen["feed"] == {"boards": [0, 1], "period_ns": 2_000_000, "hex": "21720a"}
    assert (seen["warm_ns"], seen["window_ns"]) == (10_000_000, 20_000_000)
    for bad in ((range(4), 0.002, b"!r\n"), ([], 0.002, b"!r\n"), (range(2), 0, b"!r\n"), (range(2), 0.002, b"")):
        with pytest.raises(supervisor.EmulatedError, match="feed needs boards among the ring's 0..2"):
            supervisor.record_window(tmp_path, 0.01, 0.02, feed=bad, timeout_s=1)
    assert not (tmp_path / supervisor.WINDOW).exists()  # nothing asked


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

    def firmware_window(n, protocol, baud, warm_s, window_s, regen_ms, firmware, bootrom, log, requests):
        calls["firmware"] = (n, protocol, baud, warm_s, window_s, requests)
        return _window([[[1_100_000, 1_260_000, 16]], [[1_300_000, 1_460_000, 16]], []])

    def relay_window(n, baud, frame_bytes, warm_s, window_s, firmware, bootrom, log):
        calls["relay"] = (n, baud, frame_bytes)
        return _window([[[1_100_000, 1_260_000, frame_bytes]], [[1_300_000, 1_460_000, frame_bytes]],
                        [[1_500_000, 1_660_000, frame_bytes]]], usb=((0, 0, 0), (0, 0, 0)))

    monkeypatch.setattr(ring_chip, "firmware_window", firmware_window)
    monkeypatch.setattr(ring_chip, "relay_window", relay_window)
    result = ring_chip.run(quick=True)
    assert calls == {"firmware": (3, "s", 1_000_000, 0.1, 0.2, False), "relay": (3, 1_000_000, frame.TOKEN_WIRE)}
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


def test_the_rings_own_clock_is_found_from_its_targets_too(tmp_path):
    """ringrate.clock_rate_for_ports takes ports.Targets as ttystall.for_ports does: flash's callers
    hand it their targets."""
    from picoring.ring.ports import Target
    from picoring.ringrate import clock_rate_for_ports

    (tmp_path / supervisor.STATE).write_text(json.dumps({"supervisor_pid": 1}))
    (tmp_path / supervisor.CLOCK).write_text(json.dumps({"chip_per_wall": 0.25}))
    assert clock_rate_for_ports([Target(str(tmp_path / ("ttyE%d" % i))) for i in range(2)])() == 0.25
    assert clock_rate_for_ports([Target("/dev/ttyACM0")]) is None
