"""`picoring explore` and `picoring fidelity`: thin commands over picoring.explore."""

from ..explore import fidelity
from ..explore.lossy import explore_faults, format_faults_report
from ..explore.lossy_model import _INVARIANTS, parse_faults
from ..explore.search import explore, format_report
from ..check.registry import names
from . import progress as progress_line
from .common import add_protocol_arg


def argparse_explore(sub):
    p = sub.add_parser("explore", help="every reachable state of a small ring: safety, liveness, exact worst cases")
    add_protocol_arg(p, choices=names(), what="any registered protocol (--faults takes those without messages "
                                              "of the layer)")
    p.add_argument("-n", type=int, default=3, help="ring size (default 3)")
    p.add_argument("--requests-per-node", "-R", type=int, default=1,
                   help="at most this many requests per node (default 1)")
    p.add_argument("--max-states", type=int, default=2_000_000,
                   help="stop with a message beyond this many states (default 2,000,000)")
    p.add_argument("--start", type=int, default=None, metavar="K",
                   help="the token rests at node K at the start (default 0, or the holder option; any K gives the "
                        "same results for rules that are the same at every node up to a rotation, as S, Q, D and "
                        "the toy's; a protocol with a layout of its own, a tree, is built with its holder at K)")
    p.add_argument("--exact", action="store_true",
                   help="keep every node attribute (seq, epoch, dead counters): slower, same results")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    progress_line.add_progress_args(p)
    p.add_argument("--faults", metavar="SPEC", default=None,
                   help="lossy mode: the recovery's SAFETY under bounded faults (liveness is not checked). "
                        "SPEC: drop=D,timeout=T,restart=B, any subset, missing ones 0 (e.g. drop=1,timeout=2): "
                        "at most D frames lost, T timeouts (at any moment, at a node whose waiting() is true), "
                        "B board restarts in the whole execution. Checks mutual exclusion, strictly increasing "
                        "entry numbers and at most one live token, each with a shortest schedule. The states grow "
                        "fast: drop=1,timeout=2 at -n 3 -R 1 is about 1e5 states (seconds); n=4 or bigger budgets "
                        "reach millions (minutes, GBs)")
    p.add_argument("--boot", action="store_true",
                   help="(with --faults) start from every node booting, boot(starter=(i == 0)), its join in flight, "
                        "instead of the token at rest at node 0")
    p.add_argument("--drop-anywhere", action="store_true",
                   help="(with --faults) let a drop take any frame in flight, not only the next one to arrive "
                        "(equivalent, slower; for cross-checking)")
    p.add_argument("--stop-at-first", nargs="?", const="all", default=None, metavar="KEYS",
                   help="(with --faults) stop at the first safety violation (its schedule is still a shortest "
                        "one); KEYS: only at these, comma-separated from mutual_exclusion, entry_numbers, "
                        "one_live_token (entry_numbers fails whenever restarts are allowed)")
    p.add_argument("--can-form", action="store_true",
                   help="(with --faults) also decide for every reached state whether a formed ring (all joined, "
                        "one live token) is still reachable from it within the budgets left (keeps the graph)")


def do_explore(args):
    import json
    import sys

    if args.n < 2:
        raise ValueError("-n must be at least 2")
    if args.requests_per_node < 0:
        raise ValueError("--requests-per-node cannot be negative")
    shown = progress_line.maybe(args, "explore %s n=%d R=%d" % (args.protocol.upper(), args.n, args.requests_per_node),
                                "states expanded")
    try:
        rep, fmt = _explore(args, None if shown is None else lambda k, found: shown.update(
            k, text="found {:,}".format(found)))
    finally:
        if shown is not None:
            shown.close()
    if args.json:
        json.dump(rep, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(fmt(rep))
    if args.faults is not None:
        # 1: a violation (found, even in an incomplete search); 2: incomplete, none found
        if any(f != "incomplete" for f in rep["failures"]):
            return 1
        return 0 if rep.get("complete") else 2
    if not rep.get("complete"):
        return 2
    return 0 if rep["ok"] else 1


def _explore(args, progress):
    """(report, its formatter) of the search args ask for; progress(expanded, found) or None."""
    if args.faults is not None:
        if args.start is not None:
            raise ValueError("--start is for the fault-free mode (--faults starts at node 0, or with --boot)")
        budgets = parse_faults(args.faults)
        stop = False
        if args.stop_at_first == "all":
            stop = True
        elif args.stop_at_first:
            stop = [k.strip() for k in args.stop_at_first.split(",") if k.strip()]
            known = [k for k, _ in _INVARIANTS]
            for k in stop:
                if k not in known:
                    raise ValueError("--stop-at-first: unknown invariant %r (known: %s)" % (k, ", ".join(known)))
        return explore_faults(args.protocol, args.n, args.requests_per_node, boot=args.boot,
                              max_states=args.max_states, exact=args.exact, drop_anywhere=args.drop_anywhere,
                              stop_on_violation=stop, can_form=args.can_form, progress=progress,
                              **budgets), format_faults_report
    if args.boot or args.drop_anywhere or args.stop_at_first or args.can_form:
        raise ValueError("--boot, --drop-anywhere, --stop-at-first and --can-form need --faults")
    if args.start is not None and not 0 <= args.start < args.n:
        raise ValueError("--start must be a node of the ring, 0..%d" % (args.n - 1))
    return explore(args.protocol, args.n, args.requests_per_node, max_states=args.max_states, exact=args.exact,
                   start=args.start, progress=progress), format_report


def argparse_fidelity(sub):
    p = sub.add_parser("fidelity", help="the paper's claims against exact worst cases (explorer) and the simulator")
    p.add_argument("--max-n", type=int, default=5, help="largest ring the explorer tries (default 5)")
    p.add_argument("--seconds", type=float, default=600.0, help="time budget for the explorer runs (default 600)")
    p.add_argument("--per-run", type=float, default=60.0,
                   help="once a run for some n takes longer than this, larger R for that n is skipped (default 60)")
    p.add_argument("--sim-runs", type=int, default=40, help="random simulator runs per row (default 40)")
    p.add_argument("--sim-n", default="6,8,12,16,32", help="ring sizes for the simulator-only rows")
    p.add_argument("--md", default="-", metavar="FILE",
                   help="the tables as Markdown to FILE (default -: standard output); a file with the generated "
                        "part's marker line keeps what is above it (the project's: --md docs/fidelity.md "
                        "--json-out docs/fidelity.json)")
    p.add_argument("--json-out", default=None, metavar="FILE",
                   help="the figures as JSON to FILE (- : standard output; default: not written)")
    p.add_argument("--quiet", action="store_true", help="no progress lines on stderr, only the summary")


def do_fidelity(args):
    import sys

    log = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    large = tuple(int(x) for x in args.sim_n.split(",") if x.strip())
    cmd = "picoring fidelity --max-n %d --seconds %g --per-run %g --sim-runs %d --sim-n %s" % (
        args.max_n, args.seconds, args.per_run, args.sim_runs, args.sim_n)
    # run() checks its outputs before the minutes of computing (a ValueError: exit 2)
    doc = fidelity.run(max_n=args.max_n, seconds=args.seconds, per_run=args.per_run, sim_runs=args.sim_runs, large=large,
                       md=args.md, json_path=args.json_out, log=log, command=cmd)
    bad = [c for c in doc["claims"] if c["holds"] is False]
    over = [r for r in doc["simulator"] if r.get("exceeded")]
    wrote = [p for p in (args.md, args.json_out) if p not in (None, "-")]
    # the summary goes where it does not mix with a table written to standard output
    print("%d claims checked, %d refuted; simulator above the explorer: %s; %s (%.0f s)" % (
        len(doc["claims"]), len(bad), "never" if not over else "%d rows" % len(over),
        "wrote " + " and ".join(wrote) if wrote else "the tables on standard output", doc["meta"]["seconds"]),
        file=sys.stderr if "-" in (args.md, args.json_out) else sys.stdout)
    return 1 if over else 0
