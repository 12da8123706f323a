"""`picoring bench ring --emulated`: the firmware's hop on a ring of emulated Picos, in chip time,
against a minimal relay on the same wires.

1. the firmware: n (3) of picoring's own emulated Picos (picoring.emulated), flashed as
   `picoring flash --ports P --protocol s --baud B` flashes them (.mpy, event logging on),
   then, after warm_ms of chip time, a window of window_ms of chip time recorded by the
   emulator: every frame on every wire and each board's USB bytes and cycles at the window's
   two ends.
2. the minimal relay: n fresh emulated Picos, the same wires and baud, each running plain
   MicroPython that waits for a whole frame of the firmware's token frame length
   (firmware/frame.py TOKEN_WIRE), checks its delimiters, counts the hop in it and writes it
   on: about the least a Python firmware can do per hop. firmware / relay is the share of
   that budget the firmware keeps.

Frames are found from the bytes' timing alone (js/emulator.mjs: a pause of more than two byte
times on a wire ends one), so any firmware can be measured. From the frames (measure()):

- ring hops per chip-second: frames whose last byte landed inside the window, on all wires,
  over the window's chip seconds;
- turnaround, per board: from the last byte of a frame landing in its UART to the first byte
  of the next frame it sends (median and p99, nearest rank);
- USB bytes per hop: what all boards wrote to their USB serial in the window, per hop;
- CPU load: each board's cycles in the window over its chip time at 125 MHz.

Every figure is chip time, exact whatever this machine's load; the load only changes how long
the command takes (about 30 s of wall time for the two windows on an idle 2-core machine, plus
the flash).
"""

import time

from ..check.quantile import nearest_rank
from ..firmware.frame import TOKEN_WIRE

N_BOARDS = 3
BAUD = 1_000_000
CHIP_HZ = 125_000_000
BITS_PER_BYTE = 10
# (quick, full): chip time before the window, and the window
WARM_MS = (100, 200)
WINDOW_MS = (200, 500)
TAIL_S = 0.05  # chip time recorded after the window: the frames that answer its last ones
REPL_WAIT_S = 60.0  # wall seconds for an idle board's raw REPL to answer (it runs in real time)

# The minimal relay. The host puts BAUD, FRAME (bytes) and FIRST (1: the board that sends the
# first frame, once every other board has said RELAYING; it says so after that frame) in front.
RELAY = r'''
from machine import UART, Pin

uart = UART(0, baudrate=BAUD, tx=Pin(0), rx=Pin(1), rxbuf=512, txbuf=512, timeout=0)
while uart.any():
    uart.read()


def relay(frame, size, waiting, take, put):
    last = size - 1
    while True:
        if waiting() >= size:
            take(frame, size)
            if frame[0] == 0 and frame[last] == 0:  # its delimiters, as the firmware's frames have
                hops = ((frame[2] << 8) | frame[1]) + 1  # the hop count rides in the frame
                frame[1] = hops & 0xFF
                frame[2] = (hops >> 8) & 0xFF
                put(frame)


frame = bytearray(FRAME)
if FIRST:
    import time
    time.sleep_ms(5)
    uart.write(frame)
print('RELAYING')
relay(frame, FRAME, uart.any, uart.readinto, uart.write)
'''


class ChipRingError(RuntimeError):
    pass


def percentile(ordered, p):
    """p% of a sorted list by nearest rank (check.quantile, as every report), None if empty."""
    return nearest_rank(ordered, p / 100) if ordered else None


def _r1(x):
    return None if x is None else round(x, 1)


def turnarounds_us(incoming, sent):
    """For each frame that reached a board (incoming: [start, end, bytes], in order), the chip
    microseconds from its last byte landing (end) to the first byte of the next frame the
    board sent (sent, in order); none for a frame with nothing sent after it."""
    out, j = [], 0
    for _, end, _ in incoming:
        while j < len(sent) and sent[j][0] < end:
            j += 1
        if j == len(sent):
            break
        out.append((sent[j][0] - end) / 1e3)
    return out


def measure(window):
    """The figures of one recorded window (emulated.supervisor.record_window's dict)."""
    t0, t1 = window["start_ns"], window["end_ns"]
    wires = window["wires"]  # wires[i]: what board i sent to board i + 1
    n = len(wires)
    inside = [[f for f in wire if t0 <= f[1] < t1] for wire in wires]
    lengths = sorted(f[2] for wire in inside for f in wire)
    hops = len(lengths)
    chip_s = (t1 - t0) / 1e9
    boards, every = [], []
    for b in range(n):
        times = sorted(turnarounds_us(inside[(b - 1) % n], wires[b]))
        every += times
        boards.append({"board": b, "median_us": _r1(percentile(times, 50)), "p99_us": _r1(percentile(times, 99)),
                       "n": len(times)})
    every.sort()
    usb = sum(e - s for s, e in zip(window["start"]["usb_bytes"], window["end"]["usb_bytes"]))
    cycles = [e - s for s, e in zip(window["start"]["cycles"], window["end"]["cycles"])]
    return {
        "chip_s": round(chip_s, 6),
        "hops": hops,
        "hops_per_chip_s": _r1(hops / chip_s) if chip_s > 0 else None,
        "frame_bytes": {"median": percentile(lengths, 50), "min": lengths[0] if lengths else None,
                        "max": lengths[-1] if lengths else None},
        "turnaround_us": {"median": _r1(percentile(every, 50)), "p99": _r1(percentile(every, 99)), "n": len(every),
                          "boards": boards},
        "usb_bytes_per_hop": _r1(usb / hops) if hops else None,
        "cpu_load_pct": [_r1(100 * c / (chip_s * CHIP_HZ)) if chip_s > 0 else None for c in cycles],
        "baud": window["baud"],
        "stopped": [s for s in window.get("stopped", []) if s],
    }


def relay_script(baud, frame_bytes, first):
    return "BAUD = %d\nFRAME = %d\nFIRST = %d\n%s" % (baud, frame_bytes, 1 if first else 0, RELAY)


def start_script(port, text, until=None, timeout_s=REPL_WAIT_S):
    """Run text on the board at port (at its REPL) through its raw REPL, without waiting for it to
    end; with until: wait for that output first (a traceback ends the wait)."""
    from ..emulated.repl import RawRepl

    with RawRepl(port, timeout_s) as repl:
        repl.enter().start(text)
        if until:
            got = repl.read_until((until, b"\x04"), "waiting for %r" % until.decode())
            if until not in got:  # the code ended (its traceback follows)
                raise ChipRingError("%s: the relay failed: %s" % (port, repl.read_until(b"\x04").decode(errors="replace")))


def firmware_window(n, protocol, baud, warm_s, window_s, regen_ms=None, firmware=None, bootrom=None, log=None):
    from ..emulated.session import start_flashed

    ring, _, _ = start_flashed(n, protocol, baud=baud, regen_ms=regen_ms, firmware=firmware, bootrom=bootrom, log=log)
    try:
        if log:
            log("bench ring --emulated: recording %g s of chip time after %g s" % (window_s, warm_s))
        return ring.record_window(warm_s, window_s, tail_s=TAIL_S)
    finally:
        ring.stop()


def relay_window(n, baud, frame_bytes, warm_s, window_s, firmware=None, bootrom=None, log=None):
    from ..emulated.supervisor import EmulatedRing

    ring = EmulatedRing(n, firmware, bootrom, say=log)
    try:
        if log:
            log("bench ring --emulated: the minimal relay, %d-byte frames" % frame_bytes)
        for port in ring.ports[1:]:
            start_script(port, relay_script(baud, frame_bytes, False), until=b"RELAYING")
        start_script(ring.ports[0], relay_script(baud, frame_bytes, True), until=b"RELAYING")  # the window after
        return ring.record_window(warm_s, window_s, tail_s=TAIL_S)
    finally:
        ring.stop()


def run(quick=False, log=None, n=N_BOARDS, protocol="s", baud=BAUD, regen_ms=None, firmware=None, bootrom=None):
    warm_s, window_s = WARM_MS[not quick] / 1e3, WINDOW_MS[not quick] / 1e3
    walls = {}
    t = time.monotonic()
    window = firmware_window(n, protocol, baud, warm_s, window_s, regen_ms, firmware, bootrom, log)
    walls["firmware"] = round(time.monotonic() - t, 1)
    fw = measure(window)
    result = {"n": n, "protocol": protocol, "baud": baud, "warm_ms": warm_s * 1e3, "window_ms": window_s * 1e3,
              "deploy": "picoring flash --ports P --protocol %s --baud %d%s" % (
                  protocol, baud, "" if regen_ms is None else " --regen-ms %d" % regen_ms),
              "token_frame_bytes": TOKEN_WIRE, "firmware": fw}
    if fw["stopped"]:
        raise ChipRingError("a board stopped: %s" % "; ".join(fw["stopped"]))
    if not fw["hops"]:
        raise ChipRingError("no frames on the wires in the window: protocol %s sends nothing without requests "
                            "(s keeps its token moving)" % protocol)
    t = time.monotonic()
    relay = measure(relay_window(n, baud, TOKEN_WIRE, warm_s, window_s, firmware, bootrom, log))
    walls["relay"] = round(time.monotonic() - t, 1)
    if not relay["hops"]:
        raise ChipRingError("the minimal relay sent no frames in the window")
    result.update(relay=relay, firmware_over_relay=round(fw["hops_per_chip_s"] / relay["hops_per_chip_s"], 3),
                  wire_limit_hops_per_s=round(baud / (BITS_PER_BYTE * TOKEN_WIRE), 1), wall_s=walls)
    return result


def _block(name, m):
    t = m["turnaround_us"]
    per = ", ".join("board %d %s/%s" % (b["board"], b["median_us"], b["p99_us"]) for b in t["boards"])
    f = m["frame_bytes"]
    return ["%s" % name,
            "  ring hops per chip-second   %s  (%d frames in %.1f ms of chip time)" % (m["hops_per_chip_s"], m["hops"],
                                                                                     m["chip_s"] * 1e3),
            "  turnaround, chip us         median %s, p99 %s  (median/p99: %s)" % (t["median"], t["p99"], per),
            "  frame bytes                 median %s, min %s, max %s" % (f["median"], f["min"], f["max"]),
            "  USB bytes per hop           %s" % m["usb_bytes_per_hop"],
            "  CPU load, %% of chip time    %s" % " ".join(str(x) for x in m["cpu_load_pct"])]


def print_table(result, console=None):
    lines = ["%d emulated Picos (RP2040, chip time), UART0 at %d baud, %g ms of chip time after %g ms"
             % (result["n"], result["baud"], result["window_ms"], result["warm_ms"])]
    lines += _block("firmware, protocol %s, flashed as %s" % (result["protocol"], result["deploy"]), result["firmware"])
    lines += _block("minimal relay: %d-byte frames (the firmware's token frame), fresh boards, the same wires"
                    % result["token_frame_bytes"], result["relay"])
    lines.append("firmware / relay: %s (hops per chip-second)" % result["firmware_over_relay"])
    lines.append("wire limit for %d-byte frames: %s hops per second (baud / (10 x bytes))"
                 % (result["token_frame_bytes"], result["wire_limit_hops_per_s"]))
    lines.append("wall time, s: firmware (start, flash, window) %s, relay %s"
                 % (result["wall_s"]["firmware"], result["wall_s"]["relay"]))
    print("\n".join(lines))


def main(args):
    from ..emulated.assets import EmulatedError
    from ..emulated.repl import ReplError
    from ..ring.flash import FlashError
    from .common import run_command

    n = getattr(args, "n", None) or N_BOARDS
    protocol = getattr(args, "protocol", None) or "s"
    baud = getattr(args, "baud", None) or BAUD
    regen_ms = getattr(args, "regen_ms", None)
    try:
        return run_command(args, lambda quick, log: run(quick, log, n, protocol, baud, regen_ms,
                                                        getattr(args, "firmware", None), getattr(args, "bootrom", None)),
                           print_table)
    except (ChipRingError, EmulatedError, FlashError, ReplError) as e:
        print("picoring bench ring --emulated: %s" % e)
        return 2
