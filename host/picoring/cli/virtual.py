"""`picoring virtual up|status|reset|unplug|plug|deploy|down`: thin handlers over supervisor."""

import argparse
import json
import sys
from pathlib import Path

from .common import CommandError, add_protocol_arg, check_boards


def argparse_virtual(sub):
    p = sub.add_parser("virtual", help="a ring of virtual boards (MicroPython unix-port processes): up, status, reset, "
                                        "unplug, plug, deploy, down")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--dir", metavar="D",
                        help="state directory (default $XDG_RUNTIME_DIR/picoring/virtual or ~/.cache/picoring/virtual)")
    vsub = p.add_subparsers(dest="virtual_command", metavar="ACTION")
    vsub.required = True
    up = vsub.add_parser("up", parents=[common], help="start N boards wired into a ring; prints their USB device paths in ring order")
    up.add_argument("-n", type=int, required=True, help="number of boards")
    up.add_argument("--baud", type=int, default=115200, help="UART speed of every wire (default 115200)")
    up.add_argument("--unpaced", action="store_true",
                    help="wires without wire time: bytes arrive as soon as the relay passes them on (for tests; "
                         "faults still apply)")
    up.add_argument("--heapsize", help="MicroPython heap per board, e.g. 192K (default: the unix port's 2M)")
    up.add_argument("--faults", metavar="SPEC",
                    help="inject faults, e.g. corrupt=0.01,drop=0.005,restart=1@10s,seed=7 (docs/faults.md)")
    st = vsub.add_parser("status", parents=[common], help="boards (pid, alive, paths) and byte counters per wire")
    st.add_argument("--json", action="store_true", help="print the ring's state as one JSON object")
    rs = vsub.add_parser("reset", parents=[common], help="restart board I (it runs main.py again; its USB path stays)")
    rs.add_argument("board", type=int, metavar="I", help="the board's ring position, 0 to N-1")
    rs.add_argument("--repl", action="store_true", help="do not run main.py: straight to the REPL (safe mode)")
    rs.add_argument("--power", action="store_true",
                    help="a power cycle: killed with no clean exit, its UART bytes not yet sent are lost, "
                         "its USB port hangs up and comes back")
    rs.add_argument("--off", type=float, default=0.0, metavar="S", help="--power: stay off S seconds (default 0)")
    un = vsub.add_parser("unplug", parents=[common], help="pull board I's USB cable (the board keeps running)")
    un.add_argument("board", type=int, metavar="I", help="the board's ring position, 0 to N-1")
    un.add_argument("--for", dest="seconds", type=float, metavar="S", help="plug it back after S seconds (default: at `plug I`)")
    pl = vsub.add_parser("plug", parents=[common], help="plug board I's USB cable back in")
    pl.add_argument("board", type=int, metavar="I", help="the board's ring position, 0 to N-1")
    dp = vsub.add_parser("deploy", parents=[common], help="copy the firmware and a config to every board with mpremote, then reset them")
    dp.add_argument("--config", metavar="FILE", help="JSON config for every board (each also gets its virtual UART path)")
    add_protocol_arg(dp, what="the protocol the boards run, unless --config names one")
    vsub.add_parser("down", parents=[common], help="stop every board and the supervisor (safe to call twice)")


def _run(args, out=None, err=None):
    from ..virtual import supervisor

    out = out or sys.stdout
    err = err or sys.stderr
    state_dir = Path(args.dir) if args.dir else supervisor.default_state_dir()
    action = args.virtual_command
    if action == "up":
        if args.n < 2:
            raise ValueError("-n must be at least 2: a ring of boards (the firmware takes size >= 2)")
        check_boards(args.n, "-n")
        if args.baud <= 0:
            raise ValueError("--baud must be positive")
        if args.faults:
            from ..virtual.wire import FaultPlan

            if FaultPlan.parse(args.faults).rogues:
                raise ValueError("faults: rogue=B is a firmware setting, made when the boards are deployed: "
                                 "picoring run --virtual N --faults rogue=B")
        state = supervisor.up(state_dir, args.n, args.baud, args.heapsize, faults=args.faults, paced=not args.unpaced)
        for b in state["boards"]:
            print(b["usb"], file=out)
        print("virtual ring of %d board(s) at %s is up (supervisor pid %d, state %s)"
              % (state["n"], "%d baud" % state["baud"] if state.get("paced", True) else "full speed (unpaced)",
                 state["supervisor_pid"], state_dir), file=err)
        return 0
    if action == "status":
        status = supervisor.status(state_dir)
        if args.json:
            print(json.dumps(status, sort_keys=True), file=out)
        else:
            _print_status(status, supervisor.read_state(state_dir) or {}, out)
        return 0
    if action == "reset":
        if args.power:
            if args.repl:
                raise ValueError("--power and --repl do not go together: a power cycle runs main.py")
            info = supervisor.power_cycle(state_dir, args.board, args.off)
            what = "power-cycled" + (" (off %gs)" % args.off if args.off else "")
        else:
            info = supervisor.reset(state_dir, args.board, repl=args.repl)
            what = "restarted"
        # the new process; none yet while the board is off (it starts when the power comes back)
        pid = "pid %d" % info["pid"] if info["pid"] is not None else "off: it starts again in %gs" % args.off
        print("board %d %s (%s, %s)" % (info["index"], what, pid, info["usb"]), file=err)
        return 0
    if action in ("unplug", "plug"):
        if action == "unplug":
            info = supervisor.unplug(state_dir, args.board, args.seconds)
            how = "for %gs" % args.seconds if args.seconds is not None else "until: picoring virtual plug %d" % args.board
            print("board %d: USB unplugged %s (%s)" % (info["index"], how, info["usb"]), file=err)
        else:
            info = supervisor.plug(state_dir, args.board)
            print("board %d: USB plugged in (%s)" % (info["index"], info["usb"]), file=err)
        return 0
    if action == "deploy":
        from ..ring.deploy import deploy_virtual_cli

        config = json.loads(Path(args.config).read_text()) if args.config else {}
        each = config if isinstance(config, list) else [config]  # one for every board, or one per board
        if not all(isinstance(c, dict) for c in each):
            raise ValueError("--config %s: a JSON object as a board's picoring.json, or a list of them" % args.config)
        for c in each:
            c.setdefault("protocol", args.protocol)  # without one, no board would start (firmware/main.py)
        state = deploy_virtual_cli(state_dir, config)
        print("deployed protocol %s to %d board(s) and reset them"
              % (", ".join(sorted({c["protocol"] for c in each})), len(state["boards"])), file=err)
        return 0
    if action == "down":
        if supervisor.down(state_dir):
            print("virtual ring in %s is down" % state_dir, file=err)
        else:
            print("picoring: no virtual ring was up in %s (nothing to do)" % state_dir, file=err)
        return 0
    raise ValueError("unknown action %r" % action)


def do_virtual(args):
    from ..ring.deploy import DeployError
    from ..virtual.boards import VirtualBoardError

    try:
        return _run(args)
    except (VirtualBoardError, DeployError) as e:
        raise CommandError(str(e))


def _uart_text(uart):
    """A board's UART as status shows it: its fds (RX/TX), or a device path."""
    return uart if isinstance(uart, str) else "fd %d/%d" % tuple(uart)


def _lateness_text(sparse):
    from ..virtual.wire import histogram_percentile, histogram_since

    counts = histogram_since(sparse or [], None)
    if not counts:
        return "-"
    return "%d/%d us" % (histogram_percentile(counts, 0.5), histogram_percentile(counts, 0.99))


def _print_status(status, state, out):
    print("virtual ring: %d board(s), %d baud, supervisor pid %s, dir %s"
          % (status["n"], status["baud"], state.get("supervisor_pid", "?"), status["workdir"]), file=out)
    boards = status["boards"]
    usb_w = max([len("usb")] + [len(b["usb"]) for b in boards])  # paths can be long: the columns follow
    uart_w = max([len("uart")] + [len(_uart_text(b["uart"])) for b in boards])
    row = "%%-5s %%-8s %%-6s %%-%ds %%-%ds %%-8s %%-9s %%10s %%10s" % (usb_w, uart_w)
    print(row % ("board", "pid", "alive", "usb", "uart", "restarts", "host", "usb in", "usb out"), file=out)
    for b in boards:
        host = "yes" if b["host_attached"] else "-"
        if not b["usb_present"]:
            host = "UNPLUGGED" if b["powered"] else "OFF"
        print(row % (b["index"], b["pid"] if b["pid"] is not None else "-", "yes" if b["alive"] else "NO", b["usb"],
                     _uart_text(b["uart"]), b["restarts"], host, b["usb_to_board"], b["usb_from_board"]), file=out)
        if b["power_cycles"] or b["unplugs"]:
            print("      %d power cycles (%d UART bytes lost), %d unplugs"
                  % (b["power_cycles"], b["tx_lost"], b["unplugs"]), file=out)
    n = status["n"]
    print("%-8s %-4s %10s %10s %10s %10s %9s %14s" % ("wire", "cut", "sent", "arrived", "dropped", "overrun", "in flight",
                                                       "late p50/p99"), file=out)
    for w in status["wires"]:
        print("%-8s %-4s %10d %10d %10d %10d %9d %14s"
              % ("%d->%d" % (w["wire"], (w["wire"] + 1) % n), "CUT" if w["cut"] else "-", w["bytes_in"], w["bytes_out"],
                 w["bytes_dropped"], w["bytes_overrun"], w["in_flight"], _lateness_text(w.get("lateness_us"))), file=out)
    print("late: from a frame's last bit on the wire to its delivery to the next board (0: delivered ahead, "
          "read by the board at its time)", file=out)
    if status.get("faults"):
        from ..virtual.wire import describe_injected

        print("faults: %s" % status["faults"], file=out)
        for w in status["wires"]:
            if "faults" in w:
                print("  wire %d: %s" % (w["wire"], describe_injected(w["faults"])), file=out)
