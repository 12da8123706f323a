"""`picoring compare`: the registered protocols side by side on one workload, ring size and
seed, in the simulator or on a ring of virtual boards (check/compare.py: the table)."""

import json

from ..check import compare, registry
from .common import PROTOCOLS, CommandError


def argparse_compare(sub):
    p = sub.add_parser("compare", help="run protocols on the same workload and compare them in one table")
    p.add_argument("--protocols", "-p", default=",".join(PROTOCOLS),
                   help="comma-separated, of: %s (default: all registered)" % ", ".join(PROTOCOLS))
    p.add_argument("-n", type=int, default=5, help="ring size (default 5)")
    p.add_argument("--workload", "-w", default="poisson", help="poisson | burst | sequential | adversarial | file:PATH")
    p.add_argument("--requests", "-k", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--cs-time", type=int, default=1, help="simulator: critical section in hop times (default 1)")
    p.add_argument("--rate", type=float, help="poisson: ring-wide requests per time unit (default 1/n)")
    p.add_argument("--period", type=int, help="burst: time units between bursts")
    p.add_argument("--virtual", type=int, metavar="N", help="run on N virtual boards instead of the simulator")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print the rows (and the runs' reports) as one JSON object")
    out.add_argument("--csv", action="store_true", help="print the rows as CSV")


def _protocols(text):
    names = [p.strip() for p in text.split(",") if p.strip()]
    unknown = [p for p in names if p not in PROTOCOLS]
    if unknown or not names:
        raise CommandError("unknown protocol(s) %s (known: %s)" % (", ".join(unknown) or "none given", ", ".join(PROTOCOLS)))
    return names


def run_sim(protocols, n, workload, requests, seed, cs_time=1, rate=None, period=None):
    """The simulator's report of each protocol on the same workload (rebuilt per run from the seed)."""
    from ..sim.simulate import simulate

    return [simulate(p, n, workload, requests=requests, seed=seed, cs_time=cs_time, rate=rate, period=period)
            for p in protocols]


def do_compare(args):
    protocols = _protocols(args.protocols)
    n = args.virtual if args.virtual is not None else args.n
    if n < 2:
        raise CommandError("a ring needs at least 2 nodes")
    if args.virtual is not None:
        from .run import run_virtual

        reports = run_virtual(protocols, n, args.workload, args.requests, args.seed, rate=args.rate, period=args.period)
        where = "%d virtual boards" % n
    else:
        reports = run_sim(protocols, n, args.workload, args.requests, args.seed, args.cs_time, args.rate, args.period)
        where = "simulator, n=%d" % n
    rows = [compare.row(r) for r in reports]
    if args.json:
        print(json.dumps({"rows": rows, "runs": reports, "where": where}, sort_keys=True, default=str))
    elif args.csv:
        print(compare.to_csv(rows), end="")
    else:
        title = "%s, %s, %d requests, seed %d" % (where, reports[0].get("workload") or args.workload,
                                                 args.requests, args.seed)
        compare.print_table(rows, title)
        for p in protocols:
            print("  %s: %s" % (p, registry.about(p).get("citation", "")))
    return 0 if all(r["ok"] for r in rows) else 1
