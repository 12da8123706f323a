"""`picoring boards | flash | discover | wiring`: real boards (and virtual ones) by port,
serial number or URL. Thin handlers over ports, flash, discover and wiring."""

import json
import os
import sys
import time

from ..ttystall import for_ports
from ..ring import boarddefs
from .common import add_labgrid_args, add_protocol_arg, add_resource_args, resource_args, user_errors


def _common(p, ring_file=True):
    p.add_argument("--ports", help="boards, comma separated: device paths, id:SERIAL, serial numbers, "
                                   "rfc2217:// or socket:// URLs, virtual:I")
    if ring_file:
        p.add_argument("--ring-file", metavar="FILE", help="ring order from `picoring discover` (default ./ring.json if it exists)")
    p.add_argument("--virtual-dir", metavar="D", help="state directory of `picoring virtual up` (default: its default)")
    add_labgrid_args(p)


def argparse_boards(sub):
    p = sub.add_parser("boards", help="list attached MicroPython boards (port, USB serial number, VID:PID) and virtual boards")
    p.add_argument("--all-ports", action="store_true", help="every USB serial port, not only MicroPython's VID:PID")
    p.add_argument("--virtual-dir", metavar="D", help="state directory of `picoring virtual up` (default: its default)")
    p.add_argument("--json", action="store_true", help="print the boards as one JSON list")


def do_boards(args, out=None):
    from ..ring.ports import list_usb, virtual_targets

    out = out or sys.stdout
    rows = [{"port": t.port, "serial": t.serial_number, "vid_pid": t.vid_pid, "description": t.description,
             "virtual": False} for t in list_usb(all_ports=args.all_ports)]
    # a virtual board whose USB cable is pulled (`virtual unplug`) has no port, as a real one
    rows += [{"port": t.port, "serial": None, "vid_pid": None, "description": t.description, "virtual": True,
              "uart": t.virtual_uart} for t in virtual_targets(args.virtual_dir) if os.path.exists(t.port)]
    if args.json:
        print(json.dumps(rows, sort_keys=True), file=out)
        return 0
    if not rows:
        if args.all_ports:  # no VID:PID filter: say so, not the filter the flag turned off
            print("no USB serial port found (of any kind) and no virtual ring up", file=sys.stderr)
        else:
            print("no MicroPython board found (USB VID:PID %s; --all-ports: every USB serial port) and no "
                  "virtual ring up" % ", ".join(sorted("%04x:%04x" % v for v in boarddefs.micropython_ids())),
                  file=sys.stderr)
        return 0
    w = max(len(r["port"]) for r in rows)
    print("%-*s  %-18s  %-9s  %s" % (w, "port", "serial number", "VID:PID", "description"), file=out)
    for r in rows:
        print("%-*s  %-18s  %-9s  %s" % (w, r["port"], r["serial"] or "-", r["vid_pid"] or "-", r["description"]), file=out)
    return 0


def argparse_flash(sub):
    p = sub.add_parser("flash", help="copy the firmware and each board's config with mpremote, restart, confirm")
    _common(p)
    p.add_argument("--all", action="store_true", help="every attached MicroPython board and virtual board, in the order listed")
    add_protocol_arg(p, required=True, what="the protocol to flash (each board gets only its module)")
    p.add_argument("--baud", type=int, help="UART baud of the ring (default: the board file's, 115200)")
    p.add_argument("--board", default=boarddefs.DEFAULT_BOARD, choices=boarddefs.names(), help="board type (boards/*.toml)")
    p.add_argument("--cs-us", type=int, default=0, help="critical-section length on the boards, in us")
    add_resource_args(p, "the boards get its I2C pins from --board's file and adafruit_bus_device in their lib/")
    p.add_argument("--regen-ms", type=int, help="base token-regeneration timeout on the boards (default 500; "
                                                "docs/recovery.md): above the longest legitimate wait for the token")
    p.add_argument("--drop-rx", type=float, metavar="P",
                   help="the fault drop_rx: each board loses each frame it receives with probability P, seeded "
                        "(docs/faults.md; for Picos, whose wires lose nothing on purpose); flash again without it "
                        "to end it")
    p.add_argument("--drop-seed", type=int, default=1, metavar="S", help="the seed of --drop-rx (default 1)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per board for the copy (default 60)")
    p.add_argument("--no-mpy", action="store_true", help="copy the .py sources even where a board loads .mpy files "
                                                         "compiled by mpy-cross (they boot ~1 s slower on a Pico)")
    p.add_argument("--no-ring-check", action="store_true",
                   help="do not check afterwards that each board's TX reaches the next position's RX "
                        "(boards not wired yet)")
    p.add_argument("--json", action="store_true", help="print what each board got and said as one JSON object")


def _targets(args):
    from ..ring.ports import targets_from_args

    return targets_from_args(args.ports, getattr(args, "ring_file", None), args.virtual_dir,
                             all_boards=getattr(args, "all", False))


def do_flash(args, out=None):
    from ..ring.flash import flash
    from ..ringrate import clock_rate_for_ports

    out = out or sys.stdout
    if args.drop_rx is not None and not 0 <= args.drop_rx <= 1:
        raise ValueError("--drop-rx is a probability, 0..1 (e.g. 0.002: one frame in 500 lost)")
    if args.drop_seed < 0:
        raise ValueError("--drop-seed must be >= 0")
    drop_rx = (args.drop_rx, args.drop_seed) if args.drop_rx else None
    targets, where = _targets(args)
    if args.baud is not None and args.baud <= 0:
        raise ValueError("--baud must be positive")
    t0 = time.monotonic()
    say = (lambda text: print(text, file=sys.stderr)) if not args.json else None
    if say:
        say("flashing %d board(s) from %s: protocol %s, board %s" % (len(targets), where, args.protocol, args.board))
    if args.regen_ms is not None and args.regen_ms < 0:
        raise ValueError("--regen-ms must be >= 0 (0: no recovery timeouts)")
    resource, hold = resource_args(args)
    clock_rate = clock_rate_for_ports(targets)  # one for the flash and its ring check (a pace needs samples)
    results = flash(targets, args.protocol, baud=args.baud, board=args.board, cs_us=args.cs_us, regen_ms=args.regen_ms,
                    copy_timeout=args.timeout, log=say, mpy=not args.no_mpy, resource=resource, cs_hold_us=hold,
                    drop_rx=drop_rx, clock=for_ports(targets), clock_rate=clock_rate)
    if not args.no_ring_check:
        _check_ring(targets, say, clock_rate)
    elapsed = time.monotonic() - t0
    if args.json:
        print(json.dumps({"boards": results, "seconds": round(elapsed, 2)}, sort_keys=True, default=str), file=out)
    else:
        for r in results:
            print("%-24s position %d  copied %d, up to date %d%s  fw %s%s  (%.1f s)"
                  % (r["port"], r["position"], len(r["copied"]), len(r["up_to_date"]),
                     ", removed %d" % len(r["removed"]) if r["removed"] else "", r["ver"]["fw"],
                     " (.mpy)" if r["compiled"] else "", r["copy_s"] + r["confirm_s"]), file=out)
        print("%d board(s) flashed and confirmed in %.1f s" % (len(results), elapsed), file=sys.stderr)
    return 0


def _check_ring(targets, say, clock_rate):
    """The flash went well board by board; do they form the ring they were configured as?
    (2 of 3 wired boards flash fine and fail only at run.) clock_rate: the ring's own count,
    as the flash had it (discover.successors)."""
    from ..ring.discover import WiringError, check_ring

    if say:
        say("checking the ring: a probe from each board must reach the next position's board...")
    try:
        seconds = check_ring(targets, clock=for_ports(targets), clock_rate=clock_rate)
    except WiringError as e:
        raise WiringError("%d board(s) flashed and confirmed, but %s" % (len(targets), e)) from None
    if say:
        say("the %d boards form the ring, in the order given (%.1f s)" % (len(targets), seconds))


def argparse_discover(sub):
    p = sub.add_parser("discover", help="find each board's ring position by probing the UART wires; write a ring file")
    p.add_argument("--ports", help="the boards, in any order (default: every attached MicroPython board and virtual board)")
    p.add_argument("--virtual-dir", metavar="D", help="state directory of `picoring virtual up` (default: its default)")
    p.add_argument("--ring-file", metavar="FILE", default="ring.json", help="where to save the order (default ./ring.json)")
    add_labgrid_args(p)
    p.add_argument("--first", metavar="PORT", help="the board to call position 0 (default: the first one given)")
    p.add_argument("--board", default=boarddefs.DEFAULT_BOARD, choices=boarddefs.names(),
                   help="board type (boards/*.toml; default %s): its UART pins go into the provisional config"
                        % boarddefs.DEFAULT_BOARD)
    p.add_argument("--baud", type=int, help="UART baud of the probes (default: the board file's, 115200)")
    p.add_argument("--reflash", action="store_true", help="always flash the provisional config first")
    p.add_argument("--timeout", type=float, default=6.0, metavar="S",
                   help="seconds to wait for the boards' answers to a restart and to the probes (default 6; "
                        "a port where nothing answers fails after S + 10)")
    p.add_argument("--json", action="store_true", help="print the order found (and what each probe reached) as JSON")


def do_discover(args, out=None):
    from ..ring.discover import discover, save
    from ..ringrate import clock_rate_for_ports
    from ..ring.ports import resolve_many, split_ports, targets_from_args

    out = out or sys.stdout
    if not args.timeout > 0:
        raise ValueError("--timeout must be > 0 seconds")
    if args.ports:
        targets = resolve_many(split_ports(args.ports), args.virtual_dir)
    else:
        targets, _ = targets_from_args(None, None, args.virtual_dir, all_boards=True)
    first = 0
    if args.first:
        first_t = resolve_many([args.first], args.virtual_dir)[0]
        keys = [t.key for t in targets]
        if first_t.key not in keys:
            raise ValueError("--first %s is not one of the boards given" % args.first)
        first = keys.index(first_t.key)
    say = (lambda text: print(text, file=sys.stderr)) if not args.json else None
    ordered, info = discover(targets, board=args.board, baud=args.baud, first=first,
                             reflash=True if args.reflash else "auto", log=say,
                             hello_timeout=args.timeout, probe_timeout=args.timeout, clock=for_ports(targets),
                             clock_rate=clock_rate_for_ports(targets))
    doc = save(args.ring_file, ordered, args.board)
    if args.json:
        print(json.dumps({"ring_file": args.ring_file, "ring": doc, "info": info}, sort_keys=True), file=out)
    else:
        for pos, t in enumerate(ordered):
            print("%d  %s" % (pos, t.label()), file=out)
        print("ring of %d found in %.1f s, saved to %s; next: picoring flash --protocol d"
              % (len(ordered), info["seconds"], args.ring_file), file=sys.stderr)
    return 0


def argparse_wiring(sub):
    p = sub.add_parser("wiring", help="how to wire N boards into a ring: a text drawing, a pin table, an SVG")
    p.add_argument("-n", type=int, required=True, help="number of boards")
    p.add_argument("--board", default=boarddefs.DEFAULT_BOARD, choices=boarddefs.names(),
                   help="board type, for its pin numbers (boards/*.toml; default %s)" % boarddefs.DEFAULT_BOARD)
    p.add_argument("--svg", metavar="FILE", help="also write the drawing as SVG to FILE")
    p.add_argument("--fram", action="store_true",
                   help="also the I2C bus of --resource fram: every board's SDA and SCL to one FRAM breakout, its "
                        "power, the pull-ups (docs/fram.md)")


def do_wiring(args, out=None):
    from ..ring import wiring

    out = out or sys.stdout
    if args.n < 2:
        raise ValueError("-n must be at least 2")
    out.write(wiring.render(args.n, args.board, fram=args.fram))
    if args.svg:
        with open(args.svg, "w") as f:
            f.write(wiring.svg(args.n, boarddefs.load(args.board), fram=args.fram))
        print("SVG written to %s" % args.svg, file=sys.stderr)
    return 0


do_flash = user_errors(do_flash)
do_discover = user_errors(do_discover)
