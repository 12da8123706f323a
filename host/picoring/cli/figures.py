"""`picoring figures SET`: a paper's figures reproduced on the protocols' own code, as PNG plots
and a table. A table of figure sets (ers: Englert, Rudolph and Shvartsman's Figures 9 and 10; wt:
Ciuffoletti's wandering token, Figures 2, 3 and 4)."""

import os
import sys
import time


def _ers(args):
    from ..sim import figures

    def progress(row):
        print("  figure %d  %-36s n=%-5d gap=%-5s responsiveness %.2f" % (
            row["figure"], row["curve"], row["n"], row["gap"], row["responsiveness_mean"]), file=sys.stderr)

    kw = {"rounds": args.rounds, "max_time": args.max_time, "seed": args.seed, "progress": progress}
    rows = []
    if args.figure in (None, 9):
        rows += figures.figure9(**kw)
    if args.figure in (None, 10):
        rows += figures.figure10(**kw)
    figures.write_table(rows, args.out)
    paths = [] if args.no_plots else figures.plot(rows, args.out)
    print(figures.markdown(rows))
    print("\n".join(figures.verdicts(rows)))
    return paths + [os.path.join(args.out, "ers_table.csv"), os.path.join(args.out, "ers_table.md")]


def _wt(args):
    from ..sim import figures_wt

    def progress(row):
        print("  figure %d  %-30s N=%-4d > 1 running %.3f%%" % (row["figure"], row["curve"], row["n"],
                                                               row["over_one_percent"]), file=sys.stderr)

    ns = tuple(args.n) if args.n else figures_wt.NS
    time_units = 1_000_000 if args.full else args.time
    transients = 100 if args.full else args.transients
    rows, data23, data4 = [], {}, {}
    if args.figure in (None, 2, 3):
        r, data23 = figures_wt.figures23(ns, time_units, args.scale, args.seed, progress)
        rows += r
    if args.figure in (None, 4):
        r, data4 = figures_wt.figure4(ns, transients, args.scale, args.seed, progress)
        rows += r
    figures_wt.write_table(rows, args.out)
    paths = [] if args.no_plots else figures_wt.plot(rows, data23, data4, args.out)
    print(figures_wt.markdown(rows))
    return paths + [os.path.join(args.out, "wt_table.csv"), os.path.join(args.out, "wt_table.md")]


_SETS = {"ers": (_ers, "Englert, Rudolph, Shvartsman 2001, Figures 9 and 10: the average responsiveness of the "
                       "ring (S) and of BinarySearch (bs), in the paper's network and on picoring's ring"),
         "wt": (_wt, "Ciuffoletti, the wandering token, Figures 2, 3 and 4: operations running at once and the "
                     "intervals between them, random access (random) against the wandering token (wt), N = 150 "
                     "and 300, and the stabilisation after a token loss")}


def argparse_figures(sub):
    p = sub.add_parser("figures", help="a paper's figures reproduced in the simulator: plots and a table")
    p.add_argument("set", choices=sorted(_SETS), help="; ".join("%s = %s" % (k, v[1]) for k, v in _SETS.items()))
    p.add_argument("--out", "-o", default=".", help="folder for the plots and tables (default: here)")
    p.add_argument("--figure", type=int, default=None, help="only this figure of the set (ers: 9 or 10; wt: 2 or 3 "
                                                            "(one run makes both), or 4)")
    p.add_argument("--rounds", type=int, default=1000, help="rounds of the ring's token per point (default 1000, "
                                                            "the paper's)")
    p.add_argument("--max-time", type=int, default=100_000,
                   help="at most this many time units per point (default 100,000: n = 200, 500 and 1000 then run "
                        "500, 200 and 100 rounds; 0: no cap, the paper's 1000 rounds, several times longer)")
    p.add_argument("--seed", type=int, default=1, help="workload seed (default 1; wt: also the random walk's)")
    p.add_argument("--time", type=int, default=200_000,
                   help="wt: paper time units per run of Figures 2 and 3 (default 200,000; the paper's 10**6 with --full)")
    p.add_argument("--transients", type=int, default=30,
                   help="wt: token losses measured per N for Figure 4 (default 30; the paper's 100 with --full)")
    p.add_argument("--full", action="store_true", help="wt: the paper's length (10**6 time units, 100 transients)")
    p.add_argument("-n", type=int, action="append",
                   help="wt: a membership size N (repeat for several; default the paper's 150 and 300)")
    p.add_argument("--scale", type=int, default=100,
                   help="wt: simulator units per paper time unit (default 100: a token pass, one simulator unit, "
                        "is 1%% of Delta_skip, negligible as in the paper)")
    p.add_argument("--no-plots", action="store_true", help="the table only (no matplotlib needed)")


def do_figures(args):
    if args.rounds < 1:
        raise ValueError("--rounds must be at least 1")
    if args.time < 1 or args.transients < 0 or args.scale < 1 or any(k < 2 for k in args.n or ()):
        raise ValueError("--time and --scale must be at least 1, --transients at least 0, -n at least 2")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    paths = _SETS[args.set][0](args)
    print("wrote %s (%.0f s)" % (", ".join(paths), time.perf_counter() - t0))
    return 0
