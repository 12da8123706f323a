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
from ..firmware import frame
from ..firmware.frame import TOKEN_WIRE

N_BOARDS = 3
BAUD = 1_000_000
CHIP_HZ = 125_000_000
BITS_PER_BYTE = 10
# (quick, full): chip time before the window, and the window
WARM_MS = (100, 200)
WINDOW_MS = (200, 500)
TAIL_S = 0.05  # chip time recorded after the window: the frames that answer its last ones
FEED_PERIOD_S = 0.002  # chip time: a request to a board this often, for a protocol whose token rests
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


def _answers(incoming, sent):
    """For each frame that reached a board (incoming: [start, end, ...], in order), in order: its
    index and the index in sent (the board's frames, in order) of the first frame the board sent
    after its last byte landed; it ends at the first incoming frame with nothing sent after it."""
    j = 0
    for i, f in enumerate(incoming):
        while j < len(sent) and sent[j][0] < f[1]:
            j += 1
        if j == len(sent):
            return
        yield i, j


def turnarounds_us(incoming, sent):
    """For each frame that reached a board (incoming: [start, end, bytes, ...], in order), the chip
    microseconds from its last byte landing (end) to the first byte of the next frame the
    board sent (sent, in order); none for a frame with nothing sent after it."""
    return [(sent[j][0] - incoming[i][1]) / 1e3 for i, j in _answers(incoming, sent)]


def token_of(protocol):
    """What the protocol's token travels as, (frame kind, message kind): S's, Q's and D's token
    frame (kind 1, no message kind); every other protocol's token message (kind 7 and the kind its
    descriptor gives the role "token": registry.message_roles, as the dashboard and the explorer
    read it; docs/frames.md)."""
    from ..check import registry

    kinds = [k for k, role in registry.message_roles(registry.about(protocol)).items() if role == "token"]
    return (frame.MSG, kinds[0]) if kinds else (frame.TOKEN, None)


def frames_of(wire):
    """What each recorded frame of a wire is, decoded from its bytes (record_window keeps them in
    hex): (kind, message kind, destination) of its first valid frame, (0, None, None) for none
    (bytes cut or garbled, or a window recorded without bytes). One decoder along the wire, as the
    receiving board's (a token frame's seq is put back from the one before)."""
    dec = frame.Decoder()
    out = []
    for f in wire:
        data = bytes.fromhex(f[3]) if len(f) > 3 else b""
        dec.feed(data, len(data))
        what = (0, None, None)
        k = dec.next()
        while k:
            if what[0] == 0 and k != frame.BAD:
                what = (k, dec.mkind, dec.dst) if k == frame.MSG else (k, None, None)
            k = dec.next()
        out.append(what)
    return out


def token_hops_us(incoming, kinds_in, sent, kinds_sent, board, token):
    """A board's token hops, like S's: a token frame landed (incoming, kinds_in: frames_of) and the
    next frame the board sent was a token frame; chip us from the one's last byte to the other's
    first, as {"relay": [...], "passed_on": [...]}: relay, the protocol took the token and sent it
    on (a token frame, or a token message for this board); passed_on, a token message for another
    board that the node loop passed on without waking the protocol. Not a hop: a token that another
    frame reached the board after, before the board sent it on (Q's and D's token rests where
    nobody asks, and a request message wakes it: the wait is no hop's)."""
    hops = {"relay": [], "passed_on": []}
    for i, j in _answers(incoming, sent):
        kind, mkind, dst = kinds_in[i]
        if i + 1 < len(incoming) and incoming[i + 1][1] <= sent[j][0]:
            continue  # the next frame landed whole before the send: the token waited for it
        if (kind, mkind) == token and kinds_sent[j][:2] == token:
            hops["relay" if mkind is None or dst == board else "passed_on"].append((sent[j][0] - incoming[i][1]) / 1e3)
    return hops


def _spread(times):
    times = sorted(times)
    return {"median_us": _r1(percentile(times, 50)), "p99_us": _r1(percentile(times, 99)), "n": len(times)}


def measure(window, token=None, at=None):
    """The figures of one recorded window (emulated.supervisor.record_window's dict). token (token_of):
    also the token hops (token_hops_us) of the boards `at` (default every board), as "token_hop"."""
    t0, t1 = window["start_ns"], window["end_ns"]
    wires = window["wires"]  # wires[i]: what board i sent to board i + 1
    n = len(wires)
    landed = [[t0 <= f[1] < t1 for f in wire] for wire in wires]  # each frame: its last byte in the window
    inside = [[f for f, yes in zip(wire, ok) if yes] for wire, ok in zip(wires, landed)]
    lengths = sorted(f[2] for wire in inside for f in wire)
    hops = len(lengths)
    chip_s = (t1 - t0) / 1e9
    boards, every = [], []
    for b in range(n):
        times = sorted(turnarounds_us(inside[(b - 1) % n], wires[b]))
        every += times
        boards.append({"board": b, **_spread(times)})
    every.sort()
    extra = {}
    if token is not None:
        kinds = [frames_of(wire) for wire in wires]
        tok = {"relay": [], "passed_on": []}
        at = list(range(n)) if at is None else list(at)
        for b in at:
            i = (b - 1) % n
            kinds_in = [k for k, yes in zip(kinds[i], landed[i]) if yes]
            for how, times in token_hops_us(inside[i], kinds_in, wires[b], kinds[b], b, token).items():
                tok[how] += times
        extra["token_hop"] = {"boards": at,
                              "relay": _spread(tok["relay"]), "passed_on": _spread(tok["passed_on"])}
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
        **extra,
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


def firmware_window(n, protocol, baud, warm_s, window_s, regen_ms=None, firmware=None, bootrom=None, log=None,
                    requests=False):
    """requests: boards 0 to n - 2 are asked for the critical section all along (the request
    command, hostlink.REQUEST, written by the emulator to each in turn every FEED_PERIOD_S of
    chip time from the warm-up on; a board that has a request outstanding refuses it), board
    n - 1 never: its token hops are hops alone, no critical section among them. Paced in chip
    time, the requests meet the token where a real host's would on real boards, whatever this
    machine's load."""
    from ..emulated.session import start_flashed
    from ..ring.hostlink import REQUEST

    ring, _, _ = start_flashed(n, protocol, baud=baud, regen_ms=regen_ms, firmware=firmware, bootrom=bootrom,
                               log=log)
    try:
        if log:
            log("bench ring --emulated: recording %g s of chip time after %g s" % (window_s, warm_s))
        feed = (range(n - 1), FEED_PERIOD_S, REQUEST) if requests else None
        return ring.record_window(warm_s, window_s, tail_s=TAIL_S, feed=feed)
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


def needs_requests(protocol):
    """Every protocol but S is measured with requests at all boards but the last (firmware_window):
    their tokens rest, or (BS, the wandering token) adapt, without them; S's ring moves its token
    unasked, and its figures stay comparable with the runs before."""
    from ..firmware import protocol as fw

    return fw.parse_spec(protocol)[0] != "s"


def run(quick=False, log=None, n=N_BOARDS, protocol="s", baud=BAUD, regen_ms=None, firmware=None, bootrom=None,
        relay=True):
    """The firmware for one protocol, and (relay) the minimal relay, each on fresh boards. The token
    hops are measured at every board for S, at the board that never requests for the others."""
    warm_s, window_s = WARM_MS[not quick] / 1e3, WINDOW_MS[not quick] / 1e3
    walls = {}
    t = time.monotonic()
    requests = needs_requests(protocol)
    token = token_of(protocol)
    window = firmware_window(n, protocol, baud, warm_s, window_s, regen_ms, firmware, bootrom, log, requests=requests)
    walls["firmware"] = round(time.monotonic() - t, 1)
    fw = measure(window, token, [n - 1] if requests else None)
    result = {"n": n, "protocol": protocol, "baud": baud, "warm_ms": warm_s * 1e3, "window_ms": window_s * 1e3,
              "deploy": "picoring flash --ports P --protocol %s --baud %d%s" % (
                  protocol, baud, "" if regen_ms is None else " --regen-ms %d" % regen_ms),
              "requests": "boards 0 to %d, each in turn every %g s of chip time" % (n - 2, FEED_PERIOD_S)
              if requests else None,
              "requests_fed": window.get("fed"), "token_frame_bytes": TOKEN_WIRE, "firmware": fw, "wall_s": walls}
    if fw["stopped"]:
        raise ChipRingError("a board stopped: %s" % "; ".join(fw["stopped"]))
    if not fw["hops"]:
        raise ChipRingError("no frames on the wires in the window: protocol %s sends nothing without requests "
                            "(s keeps its token moving)" % protocol)
    if not relay:
        return result
    t = time.monotonic()
    relay = measure(relay_window(n, baud, TOKEN_WIRE, warm_s, window_s, firmware, bootrom, log))
    walls["relay"] = round(time.monotonic() - t, 1)
    if not relay["hops"]:
        raise ChipRingError("the minimal relay sent no frames in the window")
    result.update(relay=relay, firmware_over_relay=round(fw["hops_per_chip_s"] / relay["hops_per_chip_s"], 3),
                  wire_limit_hops_per_s=round(baud / (BITS_PER_BYTE * TOKEN_WIRE), 1))
    return result


def run_protocols(protocols, quick=False, log=None, n=N_BOARDS, baud=BAUD, regen_ms=None, firmware=None,
                  bootrom=None):
    """Each protocol's firmware window (run, no relay), and each token hop's median against the
    first protocol's (S's, by default first): {"runs": [...], "token_hops": [...]}, one row per
    protocol and kind of hop (relay, passed_on) it made."""
    runs = [run(quick, log, n, p, baud, regen_ms, firmware, bootrom, relay=False) for p in protocols]
    first = runs[0]["firmware"]["token_hop"]
    reference = first["relay"]["median_us"] or first["passed_on"]["median_us"]
    rows = []
    for r in runs:
        for how in ("relay", "passed_on"):
            hop = r["firmware"]["token_hop"][how]
            if hop["n"]:
                rows.append({"protocol": r["protocol"], "hop": how, **hop,
                             "vs_first": round(hop["median_us"] / reference, 3) if reference else None})
    return {"n": n, "baud": baud, "first": protocols[0], "runs": runs, "token_hops": rows}


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
            "  CPU load, %% of chip time    %s" % " ".join(str(x) for x in m["cpu_load_pct"])] + _token_lines(m)


def _token_lines(m):
    hop = m.get("token_hop")
    if hop is None:
        return []
    where = "board %d" % hop["boards"][0] if len(hop["boards"]) == 1 else "every board"
    return ["  token hop, chip us (%s)   %s" % (where, "; ".join(
        "%s: median %s, p99 %s (%d)" % (how.replace("_", " "), h["median_us"], h["p99_us"], h["n"])
        for how, h in (("relay", hop["relay"]), ("passed_on", hop["passed_on"])) if h["n"]) or "none")]


def print_table(result, console=None):
    lines = ["%d emulated Picos (RP2040, chip time), UART0 at %d baud, %g ms of chip time after %g ms"
             % (result["n"], result["baud"], result["window_ms"], result["warm_ms"])]
    lines += _block("firmware, protocol %s, flashed as %s" % (result["protocol"], result["deploy"]), result["firmware"])
    if result.get("requests"):
        lines.append("  requests: %s (%s sent by the emulator)" % (result["requests"], result.get("requests_fed")))
    lines += _block("minimal relay: %d-byte frames (the firmware's token frame), fresh boards, the same wires"
                    % result["token_frame_bytes"], result["relay"])
    lines.append("firmware / relay: %s (hops per chip-second)" % result["firmware_over_relay"])
    lines.append("wire limit for %d-byte frames: %s hops per second (baud / (10 x bytes))"
                 % (result["token_frame_bytes"], result["wire_limit_hops_per_s"]))
    lines.append("wall time, s: firmware (start, flash, window) %s, relay %s"
                 % (result["wall_s"]["firmware"], result["wall_s"]["relay"]))
    print("\n".join(lines))


def print_protocols(result, console=None):
    lines = ["%d emulated Picos (RP2040, chip time), UART0 at %d baud: each protocol's token hop (from a token "
             "frame's last byte landing to the first byte of the token frame the board sends on)"
             % (result["n"], result["baud"]),
             "%-28s %-10s %9s %9s %6s  %s" % ("protocol", "hop", "median", "p99", "hops", "vs %s" % result["first"])]
    for r in result["token_hops"]:
        lines.append("%-28s %-10s %9s %9s %6d  %s" % (r["protocol"], r["hop"].replace("_", " "), r["median_us"],
                                                      r["p99_us"], r["n"], r["vs_first"]))
    lines.append("relay: the protocol took the token in and sent it on; passed on: a token message for another "
                 "board, passed on unwoken. S: every board, no requests; the others: board n - 1, which never "
                 "requests, while the rest are asked all along")
    print("\n".join(lines))


def main(args):
    from ..check import registry
    from ..emulated.assets import EmulatedError
    from ..emulated.repl import ReplError
    from ..ring.flash import FlashError
    from .common import run_command

    n = getattr(args, "n", None) or N_BOARDS
    protocol = getattr(args, "protocol", None) or "s"
    baud = getattr(args, "baud", None) or BAUD
    regen_ms = getattr(args, "regen_ms", None)
    firmware, bootrom = getattr(args, "firmware", None), getattr(args, "bootrom", None)
    protocols = registry.split_specs(protocol)
    try:
        if len(protocols) > 1:
            return run_command(args, lambda quick, log: run_protocols(protocols, quick, log, n, baud, regen_ms, firmware,
                                                                      bootrom), print_protocols)
        return run_command(args, lambda quick, log: run(quick, log, n, protocol, baud, regen_ms, firmware, bootrom),
                           print_table)
    except (ChipRingError, EmulatedError, FlashError, ReplError) as e:
        print("picoring bench ring --emulated: %s" % e)
        return 2
