"""`picoring compare`: the registered protocols side by side on one workload, ring size and
seed, in the simulator, on a ring of virtual boards, or on boards given by their ports
(flashed for each protocol in turn); check/compare.py: the table, check/plots.py: the plot."""

import json
import shutil
import sys
import textwrap

from ..check import compare, registry
from .common import PROTOCOLS, CommandError, add_labgrid_args, add_opt_arg, add_workload_args, ring_size, user_errors, workload_args


def argparse_compare(sub):
    p = sub.add_parser("compare", help="run protocols on the same workload and compare them in one table")
    p.add_argument("--protocols", "-p", default=",".join(PROTOCOLS),
                   help="comma-separated, of: %s (default: all registered); each a name or a spec with options, "
                        "e.g. raymond:tree=path,holder=2 (or separate by ';')" % ", ".join(PROTOCOLS))
    add_opt_arg(p)
    p.add_argument("-n", type=int, help="simulator: ring size (default 5, or the ring of a trace given as -w file:TRACE; "
                                        "a ring of boards has its own)")
    add_workload_args(p, 200)
    p.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    p.add_argument("--cs-time", type=int, default=1, help="simulator: critical section in hop times (default 1)")
    p.add_argument("--rate", type=float, help="poisson: ring-wide requests per time unit (default 1/n)")
    p.add_argument("--period", type=int, help="burst: time units between bursts")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--virtual", type=int, metavar="N", help="run on N virtual boards instead of the simulator")
    where.add_argument("--emulated", type=int, metavar="N", help="run on N emulated Picos (the Pico's firmware on "
                                                                 "rp2040js; docs/emulated.md), flashed for each protocol")
    where.add_argument("--ports", metavar="P1,P2,...",
                       help="run on these boards, in ring order (paths, id:SERIAL, pyserial URLs, virtual:I), "
                            "flashed for each protocol in turn as `picoring flash` does")
    where.add_argument("--ring-file", metavar="FILE", help="the boards in the order `picoring discover` saved, as --ports")
    add_labgrid_args(p, where)
    p.add_argument("--virtual-dir", metavar="D", help="state directory of `picoring virtual up` (for virtual:I ports)")
    from .emulated import add_file_args

    add_file_args(p)
    p.add_argument("--baud", type=int, help="boards: UART baud of the ring (default: the board file's, 115200)")
    p.add_argument("--board", help="boards given by --ports: board type (boards/*.toml; default pico)")
    p.add_argument("--unit-ms", type=float,
                   help="boards: real time of one workload time unit (default 2 ms, about one hop at 115200 baud)")
    p.add_argument("--no-mpy", action="store_true", help="boards given by --ports: flash .py sources, not .mpy")
    p.add_argument("--plot", metavar="FILE",
                   help="also draw the rows (messages and hop frames per request, latency p50 and p99) to "
                        "FILE, .png or .svg")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the rows (and the runs' reports) as one JSON object")
    out.add_argument("--csv", action="store_true", help="print the rows as CSV")


def _protocols(text):
    names = registry.split_specs(text)
    unknown = [p for p in names if p.partition(":")[0] not in PROTOCOLS]
    if unknown or not names:
        raise CommandError("unknown protocol(s) %s (known: %s)" % (", ".join(unknown) or "none given", ", ".join(PROTOCOLS)))
    try:
        return [registry.spec(p) for p in names]
    except ValueError as e:
        raise CommandError(str(e)) from None


def run_sim(protocols, n, workload, requests, seed, cs_time=1, rate=None, period=None):
    """The simulator's report of each protocol on the same workload (rebuilt per run from the seed)."""
    from ..sim.simulate import simulate

    return [simulate(p, n, workload, requests=requests, seed=seed, cs_time=cs_time, rate=rate, period=period)
            for p in protocols]


def _check_args(args):
    """Everything that can be wrong with the command line, before a board is touched:
    returns (protocols, targets or None, n)."""
    from ..ring import boarddefs
    from ..ring.ports import targets_from_args

    protocols = _protocols(args.protocols)
    on_boards = args.ports is not None or args.ring_file is not None
    on_ring = on_boards or args.virtual is not None or args.emulated is not None
    given = [flag for flag, value in (("--baud", args.baud), ("--unit-ms", args.unit_ms)) if value is not None]
    if given and not on_ring:
        raise CommandError("%s is for a ring of boards (--ports, --ring-file or --virtual N)" % given[0])
    given = [flag for flag, value in (("--board", args.board), ("--no-mpy", args.no_mpy)) if value]
    if given and not on_boards:
        raise CommandError("%s is for boards given by --ports or --ring-file" % given[0])
    if args.baud is not None and args.baud <= 0:
        raise CommandError("--baud must be positive")
    if args.unit_ms is not None and args.unit_ms <= 0:
        raise CommandError("--unit-ms must be positive")
    if args.board is not None and args.board not in boarddefs.names():
        raise CommandError("--board %s: known boards are %s" % (args.board, ", ".join(boarddefs.names())))
    targets = None
    if on_boards:
        targets, _ = targets_from_args(args.ports, args.ring_file, args.virtual_dir)  # PortError: a ValueError
        n = len(targets)
    elif args.virtual is not None:
        n = args.virtual
    elif args.emulated is not None:
        n = args.emulated
    else:
        n = ring_size(args, 5)
    if on_ring and args.n is not None and args.n != n:
        raise CommandError("-n %d is the simulator's ring size; this ring has %d boards" % (args.n, n))
    if n < 2:
        raise CommandError("a ring needs at least 2 nodes, got %d" % n)
    workload_args(args, n, args.cs_time)  # a bad -w, -k, --rate or --period stops here
    if args.plot:
        from ..check.plots import check_plot_path

        check_plot_path(args.plot)
    return protocols, targets, n


@user_errors
def do_compare(args):
    protocols, targets, n = _check_args(args)

    def say(text):  # progress of runs on boards, and notes that must not mix with --csv
        print(text, file=sys.stderr, flush=True)

    if targets is not None:
        from .run import run_flashed

        reports = run_flashed(protocols, targets, args.workload, args.requests, args.seed, args.rate, args.period,
                              baud=args.baud, board=args.board, unit_ms=args.unit_ms or 2.0, mpy=not args.no_mpy, say=say)
        where = "%d boards" % n + (" at %d baud" % args.baud if args.baud else "")
    elif args.emulated is not None:
        from ..emulated.supervisor import EmulatedRing
        from ..ring.ports import targets_from_args
        from .run import run_flashed

        ring = EmulatedRing(n, args.firmware, args.bootrom, say=say)
        try:
            targets, _ = targets_from_args(",".join(ring.ports))
            reports = run_flashed(protocols, targets, args.workload, args.requests, args.seed, args.rate, args.period,
                                  baud=args.baud, unit_ms=args.unit_ms or 2.0, say=say)
        finally:
            ring.stop()
        where = "%d emulated Picos" % n
    elif args.virtual is not None:
        from .run import run_virtual

        reports = run_virtual(protocols, n, args.workload, args.requests, args.seed, rate=args.rate, period=args.period,
                              baud=args.baud or 115200, unit_ms=args.unit_ms or 2.0)
        where = "%d virtual boards" % n
    else:
        reports = run_sim(protocols, n, args.workload, args.requests, args.seed, args.cs_time, args.rate, args.period)
        where = "simulator, n=%d" % n
    rows = [compare.row(r) for r in reports]
    unit = "µs" if reports[0].get("source") == "ring" else "hop times"
    title = "%s, %s, %d requests, seed %d" % (where, reports[0].get("workload") or args.workload, args.requests, args.seed)
    if args.plot:
        from ..check.plots import write_compare

        write_compare(rows, args.plot, title, unit)
    if args.json:
        print(json.dumps({"rows": rows, "runs": reports, "where": where, "latency_unit": unit, "plot": args.plot},
                         sort_keys=True, default=str))
    elif args.csv:
        print(compare.to_csv(rows), end="")
        if args.plot:
            say("plot written to %s" % args.plot)
    else:
        compare.print_table(rows, title, unit=unit)
        lines = ["%s: %s" % (p, registry.about(p).get("citation", "")) for p in protocols] + compare.notes(rows)
        for r, row in zip(reports, rows):
            lines += ["%s not OK: %s" % (r["protocol"], line)
                      for line in (compare.not_ok_lines(r)[:5] if row["verdict"] == "failed" else ())]
        width = max(40, shutil.get_terminal_size().columns - 1)  # readable at 80 columns: wrapped, indented
        for line in lines:
            print(textwrap.fill(line, width, initial_indent="  ", subsequent_indent="      ", break_on_hyphens=False))
        if args.plot:
            print("plot written to %s" % args.plot)
    # a documented finding (the descriptor's) is what the user compares, not a failure
    return 0 if all(r["verdict"] != "failed" for r in rows) else 1
