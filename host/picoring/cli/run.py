"""`picoring run` and `picoring demo`: a workload on a ring of boards, real or virtual."""

import argparse
import json
import time

from . import progress as progress_line
from ..ttystall import for_ports
from .common import (CommandError, add_labgrid_args, add_protocol_arg, add_resource_args, add_workload_args, check_boards,
                     print_report, resource_args, run_ports, workload_args)


def argparse_run(sub):
    p = sub.add_parser("run", help="run a workload on a ring of boards (real or virtual) and check it")
    where = p.add_mutually_exclusive_group()  # none given: ./ring.json (picoring discover)
    where.add_argument("--ports", help="USB ports in ring order, comma separated (paths, id:SERIAL, pyserial URLs)")
    where.add_argument("--ring-file", metavar="FILE", help="ring order from picoring discover (default ./ring.json)")
    where.add_argument("--virtual", type=int, metavar="N", help="start N virtual boards, deploy, run, tear down")
    where.add_argument("--emulated", type=int, metavar="N", help="start N emulated Picos (the Pico's firmware on "
                                                                 "rp2040js, chip time), flash, run, tear down "
                                                                 "(docs/emulated.md; --firmware, --bootrom)")
    add_labgrid_args(p, where)
    add_protocol_arg(p, what="the protocol the boards run (flashed by `picoring flash`; a virtual ring is deployed "
                             "with it)")
    add_workload_args(p, 100)
    p.add_argument("--seed", type=int, default=0, help="workload seed (default 0): the same seed makes the same requests")
    p.add_argument("--baud", type=int, default=115200, help="UART baud of a virtual ring (default 115200)")
    p.add_argument("--unit-ms", type=float, default=2.0,
                   help="real time of one workload time unit (default 2 ms, about one hop at 115200 baud)")
    p.add_argument("--cs-us", type=int, default=0, help="critical-section length on the boards, in us (virtual ring)")
    add_resource_args(p, "a virtual ring is deployed with it; boards given by their ports must have been flashed "
                         "with it (picoring flash --resource fram), and board 0 sets and reads the counter")
    p.add_argument("--rate", type=float, help="poisson: ring-wide requests per time unit (default 1/n)")
    p.add_argument("--period", type=int, help="burst: time units between bursts; periodic: between a node's "
                                                "requests (default 1.5 * n)")
    p.add_argument("--trace", metavar="FILE",
                   help="write every event the boards report as a JSON-lines trace to FILE (docs/trace-format.md)")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object instead of the table")
    progress_line.add_progress_args(p)
    p.add_argument("--faults", metavar="SPEC",
                   help="virtual ring: inject faults on every wire, e.g. corrupt=0.01,drop=0.005,seed=7 (docs/faults.md)")
    p.add_argument("--stall-timeout", type=float, default=5.0, metavar="S",
                   help="end the run when requests are outstanding and nothing was served for S seconds (default 5)")
    p.add_argument("--regen-ms", type=int, default=500, metavar="MS",
                   help="virtual ring: the boards' base token-regeneration timeout (default 500; docs/recovery.md)")
    from .emulated import add_file_args

    add_file_args(p)


def _run_ring(ports, protocol, workload, args, resetter=None, progress=None, connected=None):
    """connected: called once the ring has formed, just before the run (arms faults, ...)."""
    from ..ring.harness import RingRun
    from ..ringrate import clock_rate_for_ports

    run = RingRun(ports, protocol, workload, unit_us=int(args.unit_ms * 1000), trace=args.trace,
                  resetter=resetter, seed=args.seed, progress=progress,
                  stall_timeout_s=getattr(args, "stall_timeout", 5.0), resource=getattr(args, "resource", None),
                  clock=for_ports(ports), clock_rate=clock_rate_for_ports(ports))
    try:
        run.connect()
        if connected is not None:
            connected()
        return run.run()
    finally:
        run.close()


def do_run(args):
    from ..check import audit
    from ..ring import deploy
    from ..ring.link import HarnessError
    from ..virtual.wire import FaultPlan

    resource, hold = resource_args(args)
    if hold and args.virtual is None:
        raise CommandError("--cs-hold-us is in the boards' picoring.json: flash them with picoring flash --resource fram "
                           "--cs-hold-us %d (run --ports only sets and reads the counter)" % hold)
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
    elif args.emulated is not None:
        if args.emulated < 2:
            raise CommandError("--emulated needs at least 2 boards")
        n = args.emulated
    else:
        ports, resetter = run_ports(args)  # --ports, --ring-file or ./ring.json
        n = len(ports)
        if n < 2:
            raise CommandError("--ports needs at least 2 ports, in ring order")
    workload = workload_args(args, n, boards="--virtual" if args.virtual is not None else "--ports")
    shown = progress_line.maybe(args, "run %s on %d boards" % (args.protocol.upper(), n), "served", args.requests)
    progress = None
    if shown is not None:
        def progress(issued, total, served, messages):  # the harness calls it every millisecond
            shown.update(served, text="issued {:,}  msgs {:,}".format(issued, messages))
    try:
        if args.virtual is not None:
            # The shared counter: the ring's FRAM (--resource fram), else a counter file (check/audit.py).
            ring = deploy.start_virtual(n, args.protocol, args.baud, args.cs_us, regen_ms=args.regen_ms,
                                        audit=resource is None, resource=resource, cs_hold_us=hold,
                                        rogue=faults.rogues if faults is not None else ())
            ports = [b.usb_path for b in ring.boards]

            def connected():
                if resource is None:
                    audit.reset(ring)
                if faults is not None:
                    ring.set_faults(faults)  # once the ring has formed: timed faults count from the run's start

            report = _run_ring(ports, args.protocol, workload, args, resetter=ring.reset, progress=progress,
                               connected=connected)
            report["wires"] = [w.counters() for w in ring.wires]
            report["faults"] = faults.describe() if faults is not None else None
            if resource is None:  # (the FRAM's count is the checker's: report["resource"])
                report["audit"] = audit.read(ring, report)
                failed_audit = audit.violation(report["audit"])
                if failed_audit is not None:
                    report["ok"] = False
                    report["violations"].insert(0, failed_audit)
        elif args.emulated is not None:
            from ..emulated.session import start_flashed

            ring, ports, resetter = start_flashed(n, args.protocol, cs_us=args.cs_us, regen_ms=args.regen_ms,
                                                  firmware=args.firmware, bootrom=args.bootrom)
            at_start = []
            report = _run_ring(ports, args.protocol, workload, args, resetter=resetter, progress=progress,
                               connected=lambda: at_start.append(ring.clock()))
            note_chip_time(report, at_start[0] if at_start else None, ring.clock())
        else:
            report = _run_ring(ports, args.protocol, workload, args, resetter=resetter, progress=progress)
    except HarnessError as e:
        stopped = ring.stopped_boards() if hasattr(ring, "stopped_boards") else []
        raise CommandError("; ".join(stopped + [str(e)]))
    finally:
        if shown is not None:
            shown.close()
        if ring is not None:
            ring.stop()
    print_report(report, args.json)
    if report.get("emulated") and not args.json:
        print(chip_time_text(report["emulated"]))
    return 0 if report["ok"] else 1


def note_chip_time(report, before, after):
    """An emulated ring's own count of chip time against wall time over the run (the emulator
    counts every cycle): report["emulated"], and each board's clock_rate where the pings left it
    unknown (their round trips, seconds long on a loaded machine, leave it too unsure)."""
    from ..emulated.supervisor import clock_over

    report["emulated"] = clock_over(before, after)
    rate = report["emulated"]["chip_per_wall"]
    for b in report.get("boards", []):
        b["clock_rate_from"] = "pings" if b.get("clock_rate") is not None else "emulator"
        if b.get("clock_rate") is None:
            b["clock_rate"] = rate


def chip_time_text(clock):
    """One line: an emulated ring's chip time against wall time over the run."""
    if not clock.get("chip_per_wall"):
        return "emulated Picos: chip time not measured (the run was shorter than the emulator's 0.5 s samples)"
    load = " ".join("%.0f%%" % (100 * x) for x in clock["load"] if x is not None)
    return ("emulated Picos: %.2f s of chip time in %.1f s of wall time (%.3f chip-seconds per wall-second); CPU load "
            "per board %s; latencies above are host time" % (clock["chip_s"], clock["wall_s"], clock["chip_per_wall"],
                                                            load))


def run_protocols(protocols, ports, configure, workload, requests, seed, rate=None, period=None, resetter=None,
                  unit_ms=2.0, say=None):
    """The reports of each protocol in turn on one ring of boards (ports in ring order), each on
    the same workload and seed; configure(protocol) puts the boards on it before its run
    (redeploys virtual boards, flashes real ones)."""
    from ..ring.link import HarnessError
    from ..sim.workload import make_workload

    say = say or (lambda text: None)
    run_args = argparse.Namespace(unit_ms=unit_ms, trace=None, seed=seed)
    reports = []
    for protocol in protocols:
        configure(protocol)
        say("running %s: %d requests, %s workload..." % (protocol.upper(), requests, workload))
        wl = make_workload(workload, len(ports), requests, seed=seed, rate=rate, period=period)
        try:
            reports.append(_run_ring(ports, protocol, wl, run_args, resetter=resetter))
        except HarnessError as e:
            raise CommandError(str(e))
    return reports


def run_virtual(protocols, n, workload, requests, seed, rate=None, period=None, console=None, baud=115200, unit_ms=2.0):
    """The reports of each protocol in turn on one ring of n virtual boards (redeployed between
    protocols), each on the same workload and seed (`demo`, `compare --virtual`)."""
    from ..ring import deploy

    check_boards(n, "--virtual")
    say = console.print if console is not None else None
    ring = deploy.start_virtual(n, protocols[0], baud, 0, console)
    deployed = [protocols[0]]
    try:
        ports = [b.usb_path for b in ring.boards]
        if say:
            say("virtual boards (USB serial): %s" % " ".join(ports))

        def configure(protocol):
            if protocol != deployed[0]:
                if say:
                    say("configuring the boards for protocol %s..." % protocol.upper())
                deploy.deploy_virtual(ring, {"protocol": protocol, "cs_us": 0})
                deployed[0] = protocol

        return run_protocols(protocols, ports, configure, workload, requests, seed, rate, period, resetter=ring.reset,
                             unit_ms=unit_ms, say=say)
    finally:
        ring.stop()


def run_flashed(protocols, targets, workload, requests, seed, rate=None, period=None, baud=None, board=None,
                unit_ms=2.0, mpy=True, say=None):
    """The reports of each protocol in turn on a ring of boards given by their ports (ports.Target,
    in ring order), flashed for each protocol by `picoring flash`'s path (ring/flash.py: only the
    files that changed are copied, each board's config is rewritten, the boards are restarted and
    confirmed) before its run (`compare --ports`)."""
    from ..ring import boarddefs, flash
    from ..ring.ports import resetter_for
    from ..ringrate import clock_rate_for_ports

    say = say or (lambda text: None)

    def configure(protocol):
        t0 = time.monotonic()
        say("flashing the %d boards for protocol %s..." % (len(targets), protocol.upper()))
        flash.flash(targets, protocol, baud=baud, board=board or boarddefs.DEFAULT_BOARD, mpy=mpy,
                    clock=for_ports(targets), clock_rate=clock_rate_for_ports(targets))
        say("  flashed and confirmed in %.1f s" % (time.monotonic() - t0))

    return run_protocols(protocols, [t.port for t in targets], configure, workload, requests, seed, rate, period,
                         resetter=resetter_for(targets), unit_ms=unit_ms, say=say)


def argparse_demo(sub):
    p = sub.add_parser("demo", help="5 virtual boards, firmware deployed with mpremote, D then Q, checked",
                       description="Starts N virtual boards (MicroPython unix-port processes on pseudo-terminals, "
                                   "wired into a ring), deploys the firmware to them with mpremote as to a Pico, "
                                   "runs protocol D and then Q with the same workload over the boards' USB serial, "
                                   "prints both runs checked against the paper's bounds, and tears the ring down "
                                   "(about 15 s). Nothing is left running, nothing is written.")
    p.add_argument("-n", type=int, default=5, help="number of virtual boards (default 5)")
    add_workload_args(p, 200)
    p.add_argument("--seed", type=int, default=0, help="workload seed (default 0)")
    p.add_argument("--json", action="store_true", help="print the runs' reports as one JSON object")


def do_demo(args):
    from rich.console import Console

    from ..check.report import print_summary

    workload_args(args, args.n, boards="-n")  # a bad -n, -k or -w stops here, before any board starts
    console = Console(stderr=args.json)
    start = time.monotonic()
    reports = run_virtual(("d", "q"), args.n, args.workload, args.requests, args.seed, console=console)
    elapsed = time.monotonic() - start
    if args.json:
        print(json.dumps({"runs": reports, "seconds": round(elapsed, 1)}, sort_keys=True))
    else:
        print_summary(reports, console)
        console.print("%d virtual boards, %.1f s in all; ring torn down." % (args.n, elapsed))
    return 0 if all(r["ok"] for r in reports) else 1

