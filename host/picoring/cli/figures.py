"""`picoring figures SET`: a paper's figures reproduced on the protocols' own code, as PNG plots
and a table. A table of figure sets (ers: Englert, Rudolph and Shvartsman's Figures 9 and 10)."""

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
    return paths + [os.path.join(args.out, "ers_table.csv"), os.path.join(args.out, "ers_table.md")]


_SETS = {"ers": (_ers, "Englert, Rudolph, Shvartsman 2001, Figures 9 and 10: the average responsiveness of the "
                       "ring (S) and of BinarySearch (bs), in the paper's network and on picoring's ring")}


def argparse_figures(sub):
    p = sub.add_parser("figures", help="a paper's figures reproduced in the simulator: plots and a table")
    p.add_argument("set", choices=sorted(_SETS), help="; ".join("%s = %s" % (k, v[1]) for k, v in _SETS.items()))
    p.add_argument("--out", "-o", default=".", help="folder for the plots and tables (default: here)")
    p.add_argument("--figure", type=int, default=None, help="only this figure of the set (ers: 9 or 10)")
    p.add_argument("--rounds", type=int, default=1000, help="rounds of the ring's token per point (default 1000, "
                                                            "the paper's)")
    p.add_argument("--max-time", type=int, default=100_000,
                   help="at most this many time units per point (default 100,000: n = 200, 500 and 1000 then run "
                        "500, 200 and 100 rounds; 0: no cap, the paper's 1000 rounds, several times longer)")
    p.add_argument("--seed", type=int, default=1, help="workload seed (default 1)")
    p.add_argument("--no-plots", action="store_true", help="the table only (no matplotlib needed)")


def do_figures(args):
    if args.rounds < 1:
        raise ValueError("--rounds must be at least 1")
    os.makedirs(args.out, exist_ok=True)
    t0 = time.perf_counter()
    paths = _SETS[args.set][0](args)
    print("wrote %s (%.0f s)" % (", ".join(paths), time.perf_counter() - t0))
    return 0
