"""`picoring emulated up|status|down` (also `picoring virtual up --chip rp2040`): emulated Picos,
upstream MicroPython for the Pico on rp2040js, UART0 in a ring (picoring.emulated)."""

import json
import sys
from pathlib import Path


def add_file_args(p):
    """--firmware and --bootrom: the two files an emulated Pico needs from the user."""
    p.add_argument("--firmware", metavar="UF2", help="MicroPython for the Raspberry Pi Pico, a .uf2 (default "
                                                     "$PICORING_PICO_UF2, or \"firmware\" in ~/.config/picoring/"
                                                     "emulated.json; docs/emulated.md)")
    p.add_argument("--bootrom", metavar="FILE", help="the RP2040 boot ROM image, 16 KB or rp2040js's bootrom.ts "
                                                     "(default $PICORING_RP2040_BOOTROM, or \"bootrom\" in the same "
                                                     "config file)")


def argparse_emulated(sub):
    # description and examples: cli/helptext.py, as for every command
    p = sub.add_parser("emulated", help="a ring of emulated Picos (MicroPython for the Pico on rp2040js): up, status, "
                                        "down, cost")
    common = __import__("argparse").ArgumentParser(add_help=False)
    common.add_argument("--dir", metavar="D", help="state directory (default $XDG_RUNTIME_DIR/picoring/emulated or "
                                                   "~/.cache/picoring/emulated-ring)")
    esub = p.add_subparsers(dest="emulated_command", metavar="ACTION")
    esub.required = True
    up = esub.add_parser("up", parents=[common], help="start N emulated Picos in a ring; prints their USB serial ports")
    up.add_argument("-n", type=int, required=True, help="number of boards")
    add_file_args(up)
    st = esub.add_parser("status", parents=[common], help="the boards' ports, chip time against wall time, CPU load")
    st.add_argument("--json", action="store_true", help="one JSON object")
    st.add_argument("--ports", action="store_true", help="only the ports, comma separated (for --ports)")
    esub.add_parser("down", parents=[common], help="stop every emulated Pico (safe to call twice)")
    cost = esub.add_parser("cost", help="what busy emulated Picos cost this machine: starts N boards, makes 0, 1, ... N "
                                        "of them busy (a `while True: pass` loop) and prints chip-seconds per "
                                        "wall-second and node's CPU for each; stops them")
    cost.add_argument("-n", type=int, default=3, help="number of boards (default 3)")
    cost.add_argument("--seconds", type=float, default=10.0, help="wall seconds measured per step (default 10)")
    add_file_args(cost)


def _say(text):
    print("picoring: %s" % text, file=sys.stderr)


def emulated_up(state_dir, n, firmware=None, bootrom=None, out=None, err=None):
    from ..emulated import supervisor

    out, err = out or sys.stdout, err or sys.stderr
    state = supervisor.start(state_dir, n, firmware, bootrom, say=_say)
    for b in state["boards"]:
        print(b["usb"], file=out)
    print("%d emulated Picos up in %.1f s (supervisor pid %d, state %s); stop: picoring emulated down"
          % (n, state.get("boot_s", 0), state["supervisor_pid"], state_dir), file=err)
    return 0


def do_emulated(args, out=None, err=None):
    from ..emulated import supervisor

    out, err = out or sys.stdout, err or sys.stderr
    action = args.emulated_command
    if action == "cost":
        return emulated_cost(args.n, args.seconds, args.firmware, args.bootrom, out)
    state_dir = Path(args.dir) if args.dir else supervisor.default_state_dir()
    if action == "up":
        if args.n < 2:
            raise ValueError("-n must be at least 2: a ring of boards (the firmware takes size >= 2)")
        return emulated_up(state_dir, args.n, args.firmware, args.bootrom, out, err)
    if action == "down":
        if supervisor.stop(state_dir):
            print("emulated Picos in %s are down" % state_dir, file=err)
        else:
            print("picoring: no emulated Picos were up in %s (nothing to do)" % state_dir, file=err)
        return 0
    state = supervisor.read_state(state_dir)
    if not state or not supervisor._alive(state["supervisor_pid"]):
        print("picoring: no emulated Picos are up in %s" % state_dir, file=err)
        return 1
    clock = supervisor.read_clock(state_dir) or {}
    if args.ports:
        print(",".join(b["usb"] for b in state["boards"]), file=out)
    elif args.json:
        print(json.dumps(dict(state, clock=clock), sort_keys=True), file=out)
    else:
        print(clock_text(state, clock), file=out)
    return 0


def clock_text(state, clock):
    lines = ["emulated Picos: %d board(s), supervisor pid %d, node pid %d, dir %s"
             % (state["n"], state["supervisor_pid"], state["node_pid"], state["dir"])]
    if clock.get("chip_per_wall"):
        lines.append("chip time %.2f s in %.1f s of wall time since power-on; now %.3f chip-seconds per wall-second"
                     % (clock["chip_s"], clock["wall_s"], clock["chip_per_wall"]))
    if clock.get("hops_per_chip_s") is not None:
        lines.append("wires: %.1f frames per chip-second (last 0.5 s)" % clock["hops_per_chip_s"])
    loads = clock.get("load") or [None] * state["n"]
    turn = clock.get("turnaround_us") or [None] * state["n"]
    stopped = clock.get("stopped") or [None] * state["n"]
    for b, load, us, why in zip(state["boards"], loads, turn, stopped):
        lines.append("board %d  %s  CPU %s%s%s" % (
            b["index"], b["usb"], "-" if load is None else "%3.0f%% of chip time (last 0.5 s)" % (100 * load),
            "" if us is None else ", turnaround %.1f us" % us, "  STOPPED: %s" % why if why else ""))
    return "\n".join(lines)


def emulated_cost(n, seconds, firmware=None, bootrom=None, out=None):
    """Busy chips against wall time and node's CPU, on this machine as it is now."""
    import os
    import time

    import serial

    from ..emulated.supervisor import EmulatedRing, clock_over

    out = out or sys.stdout
    ring = EmulatedRing(n, firmware, bootrom, say=_say)
    tick = os.sysconf("SC_CLK_TCK")

    def node_cpu_s():
        fields = Path("/proc/%d/stat" % ring.state["node_pid"]).read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    print("%d emulated Picos on %d host cores (load average %s)"
          % (n, os.cpu_count() or 0, " ".join(Path("/proc/loadavg").read_text().split()[:3])), file=out)
    print("%-6s %16s %22s %10s" % ("busy", "chip s / wall s", "wall s per chip s", "node CPU"), file=out)
    try:
        for busy in range(n + 1):
            if busy:
                with serial.Serial(ring.ports[busy - 1], timeout=1) as port:
                    port.write(b"\x05while True:\r\n    pass\r\n\x04")  # paste mode: a busy loop
            time.sleep(1.5)
            c0, k0, t0 = ring.clock(), node_cpu_s(), time.monotonic()
            time.sleep(seconds)
            c1, k1, t1 = ring.clock(), node_cpu_s(), time.monotonic()
            rate = clock_over(c0, c1)["chip_per_wall"] or 0.0
            print("%-6d %16.3f %22s %9.0f%%" % (busy, rate, "%.1f" % (1 / rate) if rate else "-",
                                                100 * (k1 - k0) / (t1 - t0)), file=out, flush=True)
    finally:
        ring.stop()
    print("one node process runs every chip of a ring, on one core: a ring's busy chips share it", file=out)
    return 0
