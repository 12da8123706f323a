"""The `picoring` command: a table of small command handlers.

Each handler is do_X(args) -> exit status; errors that a user can cause are
raised as CommandError (or ValueError/OSError from the layers below) and
printed as `picoring: message` with exit status 2. A run whose check fails
exits with status 1.
"""

import argparse
import json
import sys
import time

from . import __version__


class CommandError(Exception):
    """A problem the user can fix; printed without a traceback."""


# -- sim ---------------------------------------------------------------------

PROTOCOL_CHOICES = ("s", "q", "d", "d-literal")


def argparse_sim(sub):
    p = sub.add_parser("sim", help="run the protocol code on a simulated ring and check the bounds")
    p.add_argument("--protocol", "-p", choices=PROTOCOL_CHOICES, default="d")
    p.add_argument("-n", type=int, default=8, help="ring size (default 8)")
    p.add_argument("--workload", "-w", default="poisson",
                   help="poisson | burst | sequential | adversarial | file:PATH (default poisson)")
    p.add_argument("--requests", "-k", type=int, default=1000, help="number of requests (default 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cs-time", type=int, default=1, help="critical section length in hop times (default 1)")
    p.add_argument("--rate", type=float, help="poisson: ring-wide requests per hop time (default 1/n)")
    p.add_argument("--period", type=int, help="burst: hop times between bursts")
    p.add_argument("--idle-horizon", type=int,
                   help="S only: keep running this long after the last service (default 4n)")
    p.add_argument("--trace", metavar="FILE", help="write the JSON-lines trace here")
    p.add_argument("--schedule-out", metavar="FILE",
                   help="if the ring does not go quiet, save the schedule here (default ./nonquiescent-<protocol>-n<N>-seed<S>.jsonl)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--progress", action="store_true", help="show progress on stderr")


def do_sim(args):
    from .sim import simulate, write_schedule

    if args.n < 2:
        raise CommandError("-n must be at least 2")
    if args.requests < 0:
        raise CommandError("--requests cannot be negative")
    if args.cs_time < 0:
        raise CommandError("--cs-time cannot be negative")
    progress = None
    if args.progress:
        progress = _progress_printer(args.requests)
    report = simulate(
        args.protocol, args.n, args.workload, requests=args.requests, seed=args.seed, cs_time=args.cs_time,
        trace=args.trace, idle_horizon=args.idle_horizon, rate=args.rate, period=args.period, progress=progress,
    )
    if progress is not None:
        sys.stderr.write("\n")
    if report.get("schedule") is not None:
        path = args.schedule_out or "nonquiescent-%s-n%d-seed%d.jsonl" % (args.protocol, args.n, args.seed)
        write_schedule(report["schedule"], path)
        report["schedule_file"] = path
    _print_report(report, args.json)
    return 0 if report["ok"] else 1


def _progress_printer(total):
    def progress(t, issued, pending, messages):
        sys.stderr.write("\rt=%d  requests %d/%d  outstanding %d  messages %d   " % (t, issued, total, pending, messages))
        sys.stderr.flush()

    return progress


# -- check -------------------------------------------------------------------

def argparse_check(sub):
    p = sub.add_parser("check", help="check a trace against the bounds, safety and liveness")
    p.add_argument("trace", help="JSON-lines trace written by sim or run")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")


def do_check(args):
    from .checker import check_trace

    meta, report = check_trace(args.trace)
    report.setdefault("source", meta.get("source"))
    _print_report(report, args.json)
    return 0 if report["ok"] else 1


# -- bench -------------------------------------------------------------------

def argparse_bench(sub):
    p = sub.add_parser("bench", help="measure: sim (simulator vs SimPy), ring (firmware hop rate), dash, "
                                     "soak (recovery under faults), chip (the node loop on an emulated RP2040)")
    p.add_argument("what", choices=("sim", "dash", "ring", "soak", "chip"))
    p.add_argument("--quick", action="store_true", help="smaller runs (seconds, not minutes)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--rp2040", metavar="DIR", help="chip only: the rp2040 tools (default $PICORING_RP2040 or "
                                                   "../shared/rp2040 beside the source tree)")
    soak = p.add_argument_group("soak only (docs/recovery.md)")
    soak.add_argument("--protocol", "-p", choices=RING_PROTOCOLS, help="default d")
    soak.add_argument("-n", type=int, help="virtual boards (default 5)")
    soak.add_argument("--requests", "-k", type=int, help="default 10000 (--quick: 1000)")
    soak.add_argument("--faults", metavar="SPEC", help="default corruptframe=0.01,drop=0.005,seed=1")
    soak.add_argument("--restart", type=int, metavar="BOARD",
                      help="board power-cycled when half the requests are served (default 2; -1: none)")
    soak.add_argument("--regen-ms", type=int, help="base regeneration timeout (default 200)")
    soak.add_argument("--seed", type=int, help="workload seed (default 1)")
    soak.add_argument("--trace", metavar="FILE", help="keep the run's trace")


def do_bench(args):
    from . import bench

    if args.what == "dash":
        from . import dash_bench

        return dash_bench.main(args)
    if args.what == "ring":
        from . import bench_ring

        return bench_ring.main(args)
    if args.what == "soak":
        from . import bench_soak

        return bench_soak.main(args)
    if args.what == "chip":
        from . import bench_chip

        return bench_chip.main(args)
    return bench.main(args)


# -- virtual -----------------------------------------------------------------

def argparse_virtual(sub):
    from .virtual_cmd import add_arguments

    add_arguments(sub)


def do_virtual(args):
    from .deploy import DeployError
    from .virtual import VirtualBoardError
    from .virtual_cmd import run

    try:
        return run(args)
    except (VirtualBoardError, DeployError) as e:
        raise CommandError(str(e))


# -- run / demo ----------------------------------------------------------------

RING_PROTOCOLS = ("s", "q", "d", "d-literal")


def argparse_run(sub):
    p = sub.add_parser("run", help="run a workload on a ring of boards (real or virtual) and check it")
    where = p.add_mutually_exclusive_group()  # none given: ./ring.json (picoring discover)
    where.add_argument("--ports", help="USB ports in ring order, comma separated (paths, id:SERIAL, pyserial URLs)")
    where.add_argument("--ring-file", metavar="FILE", help="ring order from picoring discover (default ./ring.json)")
    where.add_argument("--virtual", type=int, metavar="N", help="start N virtual boards, deploy, run, tear down")
    p.add_argument("--protocol", "-p", choices=RING_PROTOCOLS, default="d")
    p.add_argument("--workload", "-w", default="poisson", help="poisson | burst | sequential | adversarial | file:PATH")
    p.add_argument("--requests", "-k", type=int, default=100)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--baud", type=int, default=115200, help="UART baud of a virtual ring (default 115200)")
    p.add_argument("--unit-ms", type=float, default=2.0,
                   help="real time of one workload time unit (default 2 ms, about one hop at 115200 baud)")
    p.add_argument("--cs-us", type=int, default=0, help="critical-section length on the boards, in us (virtual ring)")
    p.add_argument("--rate", type=float, help="poisson: ring-wide requests per time unit (default 1/n)")
    p.add_argument("--period", type=int, help="burst: time units between bursts")
    p.add_argument("--trace", metavar="FILE")
    p.add_argument("--json", action="store_true")
    p.add_argument("--progress", action="store_true", help="show progress on stderr (default on a terminal)")
    p.add_argument("--faults", metavar="SPEC",
                   help="virtual ring: inject faults on every wire, e.g. corrupt=0.01,drop=0.005,seed=7 (docs/faults.md)")
    p.add_argument("--stall-timeout", type=float, default=5.0, metavar="S",
                   help="end the run when requests are outstanding and nothing was served for S seconds (default 5)")
    p.add_argument("--regen-ms", type=int, default=500, metavar="MS",
                   help="virtual ring: the boards' base token-regeneration timeout (default 500; docs/recovery.md)")


def _run_ring(ports, protocol, workload, args, resetter=None, progress=None, connected=None):
    """connected: called once the ring has formed, just before the run (arms faults, ...)."""
    from .harness import RingRun

    run = RingRun(ports, protocol, workload, unit_us=int(args.unit_ms * 1000), trace=args.trace,
                  resetter=resetter, seed=args.seed, progress=progress,
                  stall_timeout_s=getattr(args, "stall_timeout", 5.0))
    try:
        run.connect()
        if connected is not None:
            connected()
        return run.run()
    finally:
        run.close()


def do_run(args):
    from . import audit, deploy
    from .harness import HarnessError
    from .workload import make_workload

    from .wire import FaultPlan

    if args.requests < 0:
        raise CommandError("--requests cannot be negative")
    faults = None
    if args.faults is not None:
        if args.virtual is None:
            raise CommandError("--faults needs --virtual N: faults are injected on the virtual ring's wires")
        faults = FaultPlan.coerce(args.faults)  # ValueError "faults: ..." before anything starts
        if faults is not None:
            faults.check(args.virtual)
    ring = None
    if args.virtual is not None:
        if args.virtual < 2:
            raise CommandError("--virtual needs at least 2 boards")
        n = args.virtual
    else:
        ports, resetter = boards_cmd.run_ports(args)  # --ports, --ring-file or ./ring.json
        n = len(ports)
        if n < 2:
            raise CommandError("--ports needs at least 2 ports, in ring order")
    workload = make_workload(args.workload, n, args.requests, seed=args.seed, rate=args.rate, period=args.period)
    show = args.progress or (sys.stderr.isatty() and not args.json)  # long runs on a terminal show progress
    progress = _ring_progress if show else None
    try:
        if args.virtual is not None:
            ring = deploy.start_virtual(n, args.protocol, args.baud, args.cs_us, regen_ms=args.regen_ms, audit=True)
            ports = [b.usb_path for b in ring.boards]

            def connected():
                audit.reset(ring)
                if faults is not None:
                    ring.set_faults(faults)  # once the ring has formed: timed faults count from the run's start

            report = _run_ring(ports, args.protocol, workload, args, resetter=ring.reset, progress=progress,
                               connected=connected)
            report["wires"] = [w.counters() for w in ring.wires]
            report["faults"] = faults.describe() if faults is not None else None
            report["audit"] = audit.read(ring, report)
            failed_audit = audit.violation(report["audit"])
            if failed_audit is not None:
                report["ok"] = False
                report["violations"].insert(0, failed_audit)
        else:
            report = _run_ring(ports, args.protocol, workload, args, resetter=resetter, progress=progress)
    except HarnessError as e:
        raise CommandError(str(e))
    finally:
        if ring is not None:
            ring.stop()
    if progress is not None:
        sys.stderr.write("\n")
    _print_report(report, args.json)
    return 0 if report["ok"] else 1


_last_progress = [0.0]


def _ring_progress(issued, total, served, messages):
    now = time.monotonic()
    if now - _last_progress[0] < 0.2:  # the harness calls this every millisecond
        return
    _last_progress[0] = now
    sys.stderr.write("\rrequests issued %d/%d  served %d  messages %d   " % (issued, total, served, messages))
    sys.stderr.flush()


def argparse_demo(sub):
    p = sub.add_parser("demo", help="5 virtual boards, firmware deployed with mpremote, D then Q, checked")
    p.add_argument("-n", type=int, default=5)
    p.add_argument("--requests", "-k", type=int, default=200)
    p.add_argument("--workload", "-w", default="poisson")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")


def do_demo(args):
    from rich.console import Console

    from . import deploy
    from .harness import HarnessError
    from .report import print_summary
    from .workload import make_workload

    console = Console(stderr=args.json)
    reports = []
    start = time.monotonic()
    ring = deploy.start_virtual(args.n, "d", 115200, 0, console)
    try:
        ports = [b.usb_path for b in ring.boards]
        console.print("virtual boards (USB serial): %s" % " ".join(ports))
        run_args = argparse.Namespace(unit_ms=2.0, trace=None, seed=args.seed)
        for protocol in ("d", "q"):
            if protocol != "d":
                console.print("configuring the boards for protocol %s..." % protocol.upper())
                deploy.deploy_virtual(ring, {"protocol": protocol, "cs_us": 0})
            console.print("running %s: %d requests, %s workload..." % (protocol.upper(), args.requests, args.workload))
            workload = make_workload(args.workload, args.n, args.requests, seed=args.seed)
            try:
                reports.append(_run_ring(ports, protocol, workload, run_args, resetter=ring.reset))
            except HarnessError as e:
                raise CommandError(str(e))
    finally:
        ring.stop()
    elapsed = time.monotonic() - start
    if args.json:
        print(json.dumps({"runs": reports, "seconds": round(elapsed, 1)}, sort_keys=True))
    else:
        print_summary(reports, console)
        console.print("%d virtual boards, %.1f s in all; ring torn down." % (args.n, elapsed))
    return 0 if all(r["ok"] for r in reports) else 1


# -- report printing ---------------------------------------------------------

def _print_report(report, as_json):
    if as_json:
        print(json.dumps(report, sort_keys=True))
        return
    from .report import print_report

    print_report(report)


# -- main --------------------------------------------------------------------

from .dash_cmd import argparse_dash, argparse_report, do_dash, do_report  # noqa: E402

from . import boards_cmd  # noqa: E402 - boards, flash, discover, wiring (real boards)

from . import explore, fidelity  # noqa: E402 - exhaustive exploration, the paper's claims

_COMMANDS = {
    "sim": (do_sim, argparse_sim),
    "check": (do_check, argparse_check),
    "bench": (do_bench, argparse_bench),
    "virtual": (do_virtual, argparse_virtual),
    "run": (do_run, argparse_run),
    "demo": (do_demo, argparse_demo),
    "boards": (boards_cmd.do_boards, boards_cmd.argparse_boards),
    "flash": (boards_cmd.do_flash, boards_cmd.argparse_flash),
    "discover": (boards_cmd.do_discover, boards_cmd.argparse_discover),
    "wiring": (boards_cmd.do_wiring, boards_cmd.argparse_wiring),
    "dash": (do_dash, argparse_dash),
    "report": (do_report, argparse_report),
    "explore": (explore.do_explore, explore.argparse_explore),
    "fidelity": (fidelity.do_fidelity, fidelity.argparse_fidelity),
}


def build_parser():
    parser = argparse.ArgumentParser(prog="picoring", description="Token protocols S, Q and D on a ring of MicroPython boards: simulate, run, check.")
    parser.add_argument("--version", action="version", version="picoring " + __version__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for _, (_, add) in _COMMANDS.items():
        add(sub)
    return parser


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = _COMMANDS[args.command][0]
    try:
        return handler(args)
    except (CommandError, ValueError, OSError) as e:
        print("picoring: %s" % e, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("picoring: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
