"""`picoring bench sim | dash | ring | soak | chip`: each a module of picoring.bench."""

from .common import PROTOCOLS


def argparse_bench(sub):
    p = sub.add_parser("bench", help="measure: sim (simulator vs SimPy), ring (firmware hop rate), dash, "
                                     "soak (recovery under faults), chip (the node loop on an emulated RP2040)")
    p.add_argument("what", choices=("sim", "dash", "ring", "soak", "chip"))
    p.add_argument("--quick", action="store_true", help="smaller runs (seconds, not minutes)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--rp2040", metavar="DIR", help="chip only: the rp2040 tools (default $PICORING_RP2040 or "
                                                   "../shared/rp2040 beside the source tree)")
    soak = p.add_argument_group("soak (docs/recovery.md) and chip")
    soak.add_argument("--protocol", "-p", choices=PROTOCOLS, help="soak: default d; chip: one protocol (default s, q, d)")
    soak.add_argument("-n", type=int, help="soak: virtual boards (default 5); chip: node loops in the chip (default 3)")
    soak.add_argument("--requests", "-k", type=int, help="default 10000 (--quick: 1000)")
    soak.add_argument("--faults", metavar="SPEC", help="default corruptframe=0.01,drop=0.005,seed=1")
    soak.add_argument("--restart", type=int, metavar="BOARD",
                      help="board power-cycled when half the requests are served (default 2; -1: none)")
    soak.add_argument("--regen-ms", type=int, help="base regeneration timeout (default 200)")
    soak.add_argument("--seed", type=int, help="workload seed (default 1)")
    soak.add_argument("--trace", metavar="FILE", help="keep the run's trace")


def do_bench(args):
    """Each `bench X` is picoring.bench.X's main, imported only when chosen."""
    if args.what == "dash":
        from ..bench import dash as bench
    elif args.what == "ring":
        from ..bench import ring as bench
    elif args.what == "soak":
        from ..bench import soak as bench
    elif args.what == "chip":
        from ..bench import chip as bench
    else:
        from ..bench import sim as bench
    return bench.main(args)
