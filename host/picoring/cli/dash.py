"""`picoring dash` and `picoring report`: thin commands over the dashboard and picoring.check.plots.

dash --replay TRACE      replays a trace file, paced by its times (--speed)
dash --sim ...           runs the simulator in a thread, paced so it is watchable
dash --virtual N ...     runs a workload on a fresh virtual ring (RingRun), live
"""

import threading

from ..ttystall import for_ports
from . import progress as progress_line
from .common import (CommandError, add_labgrid_args, add_protocol_arg, add_resource_args, add_workload_args,
                     resource_args, ring_size, run_ports, workload_args)

# -- dash --------------------------------------------------------------------


def argparse_dash(sub):
    p = sub.add_parser("dash", help="live dashboard of the ring's traffic (virtual ring, simulator, or a trace replay)")
    where = p.add_mutually_exclusive_group(required=True)
    where.add_argument("--replay", metavar="TRACE", help="replay a trace file")
    where.add_argument("--virtual", type=int, metavar="N", help="start N virtual boards and run a workload on them, live")
    where.add_argument("--emulated", type=int, metavar="N", help="start N emulated Picos (the Pico's firmware on "
                                                                 "rp2040js; docs/emulated.md), flash, run a workload, live")
    where.add_argument("--sim", action="store_true", help="run the simulator, paced to --speed")
    where.add_argument("--ports", help="real (or already running) boards, in ring order: run a workload on them, live")
    where.add_argument("--ring-file", metavar="FILE", help="like --ports, the order from picoring discover")
    add_labgrid_args(p, where)
    add_protocol_arg(p, what="--sim, --virtual, --ports: the protocol")
    p.add_argument("-n", type=int, help="--sim: ring size (default 8, or the ring of a trace given as -w file:TRACE)")
    add_workload_args(p, 100)
    p.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    p.add_argument("--cs-time", type=int, default=1, help="--sim: critical section in hop times")
    p.add_argument("--rate", type=float, help="poisson: ring-wide requests per time unit (default 1/n)")
    p.add_argument("--period", type=int, help="burst: time units between bursts; periodic: between a node's "
                                                "requests")
    p.add_argument("--speed", type=float, default=1.0,
                   help="playback speed: 1 = real time for board traces, 10 hops/s for simulator traces; 0 = as fast as possible")
    p.add_argument("--baud", type=int, default=115200, help="--virtual: UART baud")
    p.add_argument("--unit-ms", type=float, default=2.0, help="--virtual: real time of one workload time unit")
    p.add_argument("--cs-us", type=int, default=0, help="--virtual: critical-section length on the boards, in us")
    add_resource_args(p, "--virtual, --ports: the dashboard shows the counter against the entries (a replayed trace "
                         "shows it whenever it has one)")
    p.add_argument("--trace", metavar="FILE", help="--sim/--virtual: also write the trace here")
    p.add_argument("--refresh", type=float, default=12, help="screen refreshes per second (default 12)")
    p.add_argument("--exit", action="store_true", help="quit at the end instead of waiting for q")
    from .emulated import add_file_args

    add_file_args(p)


def do_dash(args):
    from rich.console import Console

    if not args.speed >= 0:
        raise CommandError("--speed must be >= 0 (0: as fast as possible), not %g" % args.speed)
    if not args.refresh > 0:
        raise CommandError("--refresh must be > 0 screens per second, not %g" % args.refresh)
    resource_args(args)
    console = Console()
    speed = args.speed if args.speed > 0 else None
    if args.replay is not None:
        return _dash_replay(args, console, speed)
    if args.sim:
        return _dash_sim(args, console, speed)
    if args.ports is not None or args.ring_file is not None:
        if args.cs_hold_us:
            raise CommandError("--cs-hold-us is in the boards' picoring.json: flash them with picoring flash --resource "
                               "fram --cs-hold-us %d" % args.cs_hold_us)
        ports, resetter = run_ports(args)
        return _dash_ring(args, console, ports, resetter, None, workload_args(args, len(ports), boards="--ports"))
    if args.emulated is not None:
        return _dash_emulated(args, console)
    return _dash_virtual(args, console)


def _dashboard(args, console, source, meta, speed, stats=None):
    from ..dash.dashboard import Dashboard, TerminalKeys

    return Dashboard(console, source, meta, keys=TerminalKeys(), speed=speed, refresh_hz=args.refresh, stats=stats,
                     wait_at_end=not args.exit)


def _dash_replay(args, console, speed):
    from ..check.checker import finish_trace
    from ..check.report import print_report
    from ..check.trace import TraceReader

    with TraceReader(args.replay) as reader:
        dash = _dashboard(args, console, reader, reader.meta, speed)
        model = dash.run()
        meta = reader.meta
    if not dash.finished:
        console.print("stopped at t=%s after %d events" % (model.t, model.events))
        return 0
    report = finish_trace(model.checker)  # the whole file was replayed: a missing end record shows
    report.update(source=meta.get("source"), workload=meta.get("workload"))
    print_report(report, console)
    return 0 if report["ok"] else 1


class _Stop(Exception):
    """Raised in the simulator's listener when the dashboard has quit."""


def _dash_sim(args, console, speed):
    from ..check.report import print_report
    from ..check.trace import header
    from ..dash.dashboard import FeedSource
    from ..sim.simulate import simulate

    args.n = ring_size(args, 8)
    if args.n < 2:
        raise CommandError("-n must be at least 2")
    workload = workload_args(args, args.n, cs_time=args.cs_time)
    # bounded: the simulator runs ahead of the paced screen by at most this many events
    feed = FeedSource(max_buffered=50_000)
    result = {}

    def listener(event):
        if feed.closed:
            raise _Stop()
        feed(event)

    def work():
        try:
            result["report"] = simulate(args.protocol, args.n, workload, seed=args.seed, cs_time=args.cs_time,
                                        trace=args.trace, listener=listener)
        except _Stop:
            pass
        except Exception as e:  # shown after the screen closes
            result["error"] = e
        finally:
            feed.finish()

    meta = header(args.protocol, args.n, "sim", "hop", seed=args.seed, workload=workload.describe(), cs_time=args.cs_time)
    thread = threading.Thread(target=work, name="dash-sim", daemon=True)
    thread.start()
    dash = _dashboard(args, console, feed, meta, speed)
    try:
        dash.run()
    finally:
        feed.close()
    thread.join(5)
    if "error" in result:
        raise result["error"]
    if "report" in result and dash.finished:
        print_report(result["report"], console)
        return 0 if result["report"]["ok"] else 1
    console.print("stopped at t=%s after %d events" % (dash.model.t, dash.model.events))
    return 0


def _dash_virtual(args, console):
    from ..ring.deploy import start_virtual

    n = args.virtual
    if n < 2:
        raise CommandError("--virtual needs at least 2 boards")
    workload = workload_args(args, n, boards="--virtual")  # before any board starts
    ring = start_virtual(n, args.protocol, args.baud, args.cs_us, console, resource=args.resource,
                         cs_hold_us=args.cs_hold_us)
    return _dash_ring(args, console, [b.usb_path for b in ring.boards], ring.reset, ring, workload)


def _dash_emulated(args, console):
    from ..emulated.session import start_flashed

    if args.emulated < 2:
        raise CommandError("--emulated needs at least 2 boards")
    workload = workload_args(args, args.emulated)  # before any board starts
    ring, ports, resetter = start_flashed(args.emulated, args.protocol, cs_us=args.cs_us, firmware=args.firmware,
                                          bootrom=args.bootrom, log=console.print)
    return _dash_ring(args, console, ports, resetter, ring, workload)


def _dash_ring(args, console, ports, resetter, ring, workload):
    """A workload on boards (ring: the VirtualRing to stop afterwards, or None), live."""
    from ..check.report import print_report
    from ..check.trace import header
    from ..dash.dashboard import FeedSource
    from ..ring.harness import RingRun
    from ..ring.link import HarnessError
    from ..ringrate import clock_rate_for_ports

    n = len(ports)
    feed = FeedSource()  # unbounded: the harness must never wait for the screen
    result = {}
    run = thread = None
    try:
        run = RingRun(ports, args.protocol, workload, unit_us=int(args.unit_ms * 1000), trace=args.trace,
                      listener=feed, resetter=resetter, seed=args.seed, resource=args.resource,
                      clock=for_ports(ports), clock_rate=clock_rate_for_ports(ports))

        def stats():
            return frame_counters([link.parser for link in run.links], run.bad_events)

        def work():
            try:
                run.connect()
                result["report"] = run.run()
            except Exception as e:
                result["error"] = e
            finally:
                run.close()
                feed.finish()

        console.print("connecting to %d boards and restarting them..." % n)
        meta = header(args.protocol, n, "ring", "us", workload=workload.describe(), ports=ports,
                      **({"resource": args.resource} if args.resource else {}))
        thread = threading.Thread(target=work, name="dash-ring", daemon=True)
        thread.start()
        dash = _dashboard(args, console, feed, meta, None, stats=stats)
        dash.run()
        if not dash.finished:
            console.print("stopping the ring (the run was cut short)...")
    finally:
        if ring is not None:
            ring.stop()  # also ends a run cut short: its reads fail and the thread returns
        elif run is not None:
            run.close()  # real boards: closing the ports ends a run cut short
    if thread is None:
        return 1
    thread.join(5)
    error = result.get("error")
    if error is not None and dash.finished:
        if isinstance(error, HarnessError):
            raise CommandError(str(error))
        raise error
    if "report" not in result:
        console.print("stopped at t=%s us after %d events" % (dash.model.t, dash.model.events))
        return 0
    print_report(result["report"], console)
    return 0 if result["report"]["ok"] else 1


def frame_counters(parsers, bad_events):
    """The dashboard's frame counters of a ring run, from its links' LineParsers and the
    harness's bad frame events ({reason: count} per board)."""
    from ..ring.hostlink import REPL_REASONS

    def lines(restart):
        return sum(v for p in parsers for reason, v in p.garbage.items() if (reason in REPL_REASONS) == restart)

    return {
        # frames that failed their check on a board's UART (counted by the harness)
        "corrupt": sum(sum(reasons.values()) for reasons in bad_events),
        "dropped": sum(p.reported_dropped for p in parsers),  # events a board's log had no room for
        "lost": sum(p.missing for p in parsers),  # events missing between a board and the host
        "garbage lines": lines(restart=False),  # lines that are no picoring line and no REPL's
        # what MicroPython prints when the harness restarts a board: main.py's Ctrl-C
        # traceback and the banner; no fault (the dashboard says so, in a row of its own)
        "restart lines": lines(restart=True),
    }


# -- report ------------------------------------------------------------------


def argparse_report(sub):
    p = sub.add_parser("report", help="summary table, PNG plots and CSV tables of a trace, for a lab report")
    p.add_argument("trace", help="JSON-lines trace written by sim or run")
    p.add_argument("--out", metavar="DIR", help="where to write the plots (default: <trace name>-report next to the trace)")
    p.add_argument("--csv", action="store_true",
                   help="also write the figures as CSV: summary.csv (compare --csv's columns), requests.csv (one row per "
                        "request), nodes.csv (one row per node); docs/trace-format.md")
    p.add_argument("--no-plots", action="store_true", help="no PNG plots (no matplotlib needed): summary.json, and the "
                                                           "CSV tables with --csv")
    progress_line.add_progress_args(p)


def do_report(args):
    from pathlib import Path

    from ..check.plots import write_report
    from ..check.report import print_report

    out = args.out or str(Path(args.trace).with_suffix("")) + "-report"
    with progress_line.reading(args, "report", args.trace) as progress:
        report, files = write_report(args.trace, out, plots=not args.no_plots, tables=args.csv, progress=progress)
    print_report(report)
    for path in files:
        print(path)
    return 0 if report["ok"] else 1
