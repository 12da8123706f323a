"""`picoring sim` and `picoring check`: the simulator and the checker, one report each."""

import sys
from pathlib import Path

from . import progress as progress_line
from .common import CommandError, add_protocol_arg, add_workload_args, print_report, ring_size, workload_args


def argparse_sim(sub):
    p = sub.add_parser("sim", help="run the protocol code on a simulated ring and check the bounds",
                       description="Runs the protocols' own code (firmware/proto_*.py) on a ring of N simulated "
                                   "nodes, one time unit per hop, and checks the run against the paper's bounds. "
                                   "Its time follows the messages: about 0.2 us each (docs/performance.md), and "
                                   "the workload decides how many there are: at the default poisson rate 1/n each "
                                   "request mostly has the ring to itself and D sends about n messages for it "
                                   "(n=10000, 800 requests: 8.1 million messages, 1.5 s); at --rate 1 the token "
                                   "serves several per round (about 3 each), and the checker's work per request "
                                   "grows with the requests waiting. A node costs about 430 bytes: 4 GB hold about "
                                   "9.3 million. On a terminal, a run longer than a second shows its progress on "
                                   "stderr, and a ring of 100,000 nodes or more what it costs before it is built.")
    add_protocol_arg(p)
    p.add_argument("-n", type=int, help="ring size (default 8; a trace given as -w file:TRACE: its ring's)")
    add_workload_args(p, 1000)
    p.add_argument("--seed", type=int, default=0,
                   help="workload seed (default 0): the same seed, workload and -n make the same run, event for event")
    p.add_argument("--cs-time", type=int, default=1, help="critical section length in hop times (default 1)")
    p.add_argument("--rate", type=float, help="poisson: ring-wide requests per hop time (default 1/n)")
    p.add_argument("--period", type=int, help="burst: hop times between bursts; periodic: between a node's requests "
                                                "(default 1.5 * cs-time * n)")
    p.add_argument("--idle-horizon", type=int,
                   help="S only: keep running this long after the last service (default 4n)")
    p.add_argument("--drop", type=float, default=0.0, metavar="P",
                   help="lose each hop frame of a message with probability P, seeded by --seed (protocols of the "
                        "message layer: the wandering token recovers by its timers, the others stall, as on a ring "
                        "without recovery; S, Q and D: run --virtual N --faults drop=P)")
    p.add_argument("--trace", metavar="FILE",
                   help="write every event as a JSON-lines trace to FILE (docs/trace-format.md), for check, report, "
                        "dash --replay, pandas, or -w file:FILE")
    p.add_argument("--schedule-out", metavar="FILE",
                   help="if the ring does not go quiet, save the schedule here (default: next to --trace, else in "
                        "$XDG_STATE_HOME/picoring/schedules, as nonquiescent-<protocol>-n<N>-seed<S>[-K].jsonl, "
                        "never over another file)")
    p.add_argument("--json", action="store_true",
                   help="print the report as one JSON object instead of the table (its keys: docs/commands.md)")
    progress_line.add_progress_args(p)


def do_sim(args):
    from ..sim.simulate import save_schedule, schedule_dir, simulate, write_schedule

    args.n = ring_size(args, 8)
    if args.n < 2:
        raise CommandError("-n must be at least 2")
    if args.cs_time < 0:
        raise CommandError("--cs-time cannot be negative")
    if args.idle_horizon is not None and args.idle_horizon < 0:
        raise CommandError("--idle-horizon cannot be negative")
    if not 0.0 <= args.drop <= 1.0:
        raise CommandError("--drop is a probability: between 0 and 1, not %g" % args.drop)
    workload = workload_args(args, args.n, cs_time=args.cs_time)
    what = "sim %s n=%d" % (args.protocol.upper(), args.n)
    building = _ring_memory(args, what)
    shown = progress_line.maybe(args, what, "requests", args.requests)
    progress = None
    if shown is not None:
        def progress(t, issued, pending, messages):
            shown.update(issued, text="msgs {:,}".format(messages))
    try:
        with building or progress_line.Nothing():
            report = simulate(
                args.protocol, args.n, workload, seed=args.seed, cs_time=args.cs_time,
                trace=args.trace, idle_horizon=args.idle_horizon, progress=progress, drop=args.drop,
                building=building and (lambda done, n: building.update(done)),
            )
    except KeyboardInterrupt:
        if shown is not None:
            shown.close(stopped=True)
            shown = None
        raise
    finally:
        if shown is not None:
            shown.close()
    if report.get("schedule") is not None:
        if args.schedule_out:
            path = args.schedule_out
            write_schedule(report["schedule"], path)
        else:
            folder = Path(args.trace).resolve().parent if args.trace else schedule_dir()
            path = str(save_schedule(report["schedule"], folder,
                                     "nonquiescent-%s-n%d-seed%d" % (args.protocol, args.n, args.seed)))
        report["schedule_file"] = path
        if args.json:  # the human report says it too
            print("picoring: the ring did not go quiet; its schedule is in %s (replay: -w file:%s)" % (path, path),
                  file=sys.stderr)
    print_report(report, args.json)
    return 0 if report["ok"] else 1


BIG_RING = 100_000  # nodes: building the ring takes a visible time (about 2 us a node)


def _ring_memory(args, what):
    """For a big ring: say at once what a node costs and what the ring will take, warn (or,
    if it cannot fit in the machine's memory at all, refuse) before building it, and return
    the Progress of its building where progress is wanted (else None)."""
    if args.n < BIG_RING:
        return None
    from ..sim.nodes import node_bytes

    per = node_bytes(args.protocol, args.n)
    need = per * args.n
    text = "building the ring: {:,} nodes of about {:,} bytes, {} in all".format(args.n, per, _gb(need))
    total, available = _memory()
    if total is not None and need > total:
        raise CommandError("%s: %s, more than this machine's %s of memory and swap (the largest ring that fits: "
                           "about {:,} nodes)".format(total // per) % (what, text, _gb(total)))
    if available is not None and need > available:
        print("picoring: %s: %s, more than the %s available now: it may run out of memory"
              % (what, text, _gb(available)), file=sys.stderr)
    else:
        progress_line.say(args, "%s: %s" % (what, text))
    return progress_line.maybe(args, what + ": building the ring", "nodes", args.n)


def _gb(size):
    return "%.1f GB" % (size / 1e9)


def _memory():
    """(memory and swap in all, memory available now) in bytes, from /proc/meminfo; (None,
    None) where there is none."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            info = {line.split(":")[0]: int(line.split()[1]) * 1024 for line in f if line.split()[1:2]}
    except (OSError, ValueError, IndexError):
        return None, None
    total = info.get("MemTotal")
    return (None if total is None else total + info.get("SwapTotal", 0)), info.get("MemAvailable")


# -- check -------------------------------------------------------------------

def argparse_check(sub):
    p = sub.add_parser("check", help="check a trace against the bounds, safety and liveness")
    p.add_argument("trace", help="JSON-lines trace written by sim or run")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    progress_line.add_progress_args(p)


def do_check(args):
    from ..check.checker import check_trace

    with progress_line.reading(args, "check", args.trace) as progress:
        meta, report = check_trace(args.trace, progress)
    report.setdefault("source", meta.get("source"))
    print_report(report, args.json)
    return 0 if report["ok"] else 1


