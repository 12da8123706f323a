"""`picoring bench sim | dash | ring | soak | chip | labgrid`: each a module of picoring.bench."""

import argparse

from .common import PROTOCOLS, CommandError
from .emulated import add_file_args

BENCHES = {  # what each measures, for --help (each is picoring.bench.<name>, its doc says how)
    "sim": "simulated messages per second against an equivalent SimPy model of the same protocol code (target: "
           "20x SimPy's process-based model and 8x its bare callbacks in every case, CPU time; missed: \"not met\", "
           "exit status 1)",
    "ring": "token hops per second on a virtual ring of 5 running the real firmware (event logging on and off) "
            "against a minimal pty relay, and the node loop's time and allocation per message under MicroPython; "
            "with --emulated, on a ring of 3 of picoring's own emulated Picos (chip time): ring hops per "
            "chip-second, each board's turnaround (median, p99), the token's hop and the USB bytes per hop of the "
            "firmware flashed as `picoring flash` does, against a minimal MicroPython relay on the same wires; "
            "with -p P;Q;...: each protocol's token hop against the first's",
    "dash": "the dashboard's event and refresh rates: can it keep up with a fast ring",
    "soak": "10,000 requests (--quick: 1,000) on a virtual ring of 5 with 1% of frames corrupted, 0.5% dropped "
            "and one board power-cycled: overlapping critical sections, requests served / failed / lost, token "
            "regenerations against the timeout plus a ring round trip",
    "chip": "the node loop on an emulated RP2040 (../shared/rp2040): for every protocol with a token (or -p P or a list P,Q, "
            "on -n N node loops) the chip time of its token hop and its ratio to S's, per frame, and no allocation "
            "under heap_lock; for a protocol whose token is a message sent to a node (sk, ra, raymond, nt, dag) the "
            "chip time of a hop that passes the token on and of the hop that delivers it; --memory: a board's heap "
            "after start for rings of 16 and 32",
    "labgrid": "the same virtual ring (-n boards, default 4) through its local ports and through a labgrid place "
               "(a loopback farm: coordinator, two exporters, ser2net): link round trip, request latency, hop rate "
               "(docs/labgrid.md; needs labgrid and ser2net)",
}


def _description():
    import textwrap

    lines = ["Measurements, not tests: each prints its figures (--json: one JSON object).", ""]
    for name, text in BENCHES.items():
        lines += textwrap.wrap(text + ".", 78, initial_indent="  %-6s " % name, subsequent_indent=" " * 9)
    return "\n".join(lines)


def argparse_bench(sub):
    p = sub.add_parser("bench", help="measure: sim (simulator vs SimPy), ring (firmware hop rate), dash, "
                                     "soak (recovery under faults), chip (the node loop on an emulated RP2040)",
                       description=_description(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=tuple(BENCHES), metavar="WHAT",
                   help="%s: what to measure (above)" % ", ".join(BENCHES))
    p.add_argument("--quick", action="store_true", help="smaller runs (sim: about 40 s of CPU, SimPy's slowest model left "
                                                   "out; the others: seconds, not minutes)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    p.add_argument("--rp2040", metavar="DIR", help="chip only: the rp2040 tools (default $PICORING_RP2040 or "
                                                   "../shared/rp2040 beside the source tree)")
    p.add_argument("--emulated", action="store_true",
                   help="chip: on picoring's own emulated Pico rather than the rp2040 tools; ring: on a ring of "
                        "picoring's own emulated Picos (-n, default 3) rather than virtual boards (both: "
                        "docs/emulated.md, the firmware and boot ROM from PICORING_PICO_UF2 and "
                        "PICORING_RP2040_BOOTROM)")
    p.add_argument("--baud", type=int, help="ring --emulated only: the UART baud (default 1000000)")
    files = p.add_argument_group("ring --emulated: the emulated Picos' two files (bench chip --emulated takes them "
                                 "from PICORING_PICO_UF2 and PICORING_RP2040_BOOTROM or the config file)")
    add_file_args(files)
    p.add_argument("--memory", action="store_true",
                   help="chip only: also a board's heap after start (main.py's build) for rings of 16 and 32")
    soak = p.add_argument_group("soak (docs/recovery.md), chip and ring --emulated")
    soak.add_argument("--protocol", "-p", metavar="P",
                      help="the protocol (soak: default d; chip: one or a list, e.g. s,wt to set a hop beside S's "
                           "in one run, default every one with a token; "
                           "ring --emulated: default s, the one that moves its token without requests; a list, "
                           "e.g. s;sk;wt: each one's token hop against the first's, the others with requests); `picoring "
                           "protocols` (or -p help) lists them")
    # -p checked by common.apply_options (one line if unknown): a list, which only chip takes
    p.set_defaults(protocol_choices=PROTOCOLS, protocol_list=True)
    soak.add_argument("-n", type=int, help="soak: virtual boards (default 5); chip: node loops in the chip (default 3); "
                                           "labgrid: virtual boards (default 4); ring --emulated: emulated Picos "
                                           "(default 3)")
    soak.add_argument("--requests", "-k", type=int, help="default 10000 (--quick: 1000)")
    soak.add_argument("--faults", metavar="SPEC", help="default corruptframe=0.01,drop=0.005,seed=1")
    soak.add_argument("--restart", type=int, metavar="BOARD",
                      help="board power-cycled when half the requests are served (default 2; -1: none)")
    soak.add_argument("--regen-ms", type=int, help="base regeneration timeout (soak: default 200; ring --emulated: "
                                                  "as picoring flash --regen-ms, default the firmware's)")
    soak.add_argument("--seed", type=int, help="workload seed (default 1)")
    soak.add_argument("--trace", metavar="FILE", help="keep the run's trace")


def do_bench(args):
    """Each `bench X` is picoring.bench.X's main, imported only when chosen."""
    if (args.what != "chip" and not (args.what == "ring" and args.emulated)
            and ";" in (getattr(args, "protocol", None) or "")):
        raise CommandError("bench %s: -p takes one protocol (a list is for bench chip and bench ring --emulated)"
                           % args.what)
    if args.what == "dash":
        from ..bench import dash as bench
    elif args.what == "ring" and args.emulated:
        from ..bench import ring_chip as bench
    elif args.what == "ring":
        from ..bench import ring as bench
    elif args.what == "soak":
        from ..bench import soak as bench
    elif args.what == "chip":
        from ..bench import chip as bench
    elif args.what == "labgrid":
        from ..bench import labgrid as bench
    else:
        _need("simpy", "bench sim measures against SimPy")
        from ..bench import sim as bench
    return bench.main(args)


def _need(module, why):
    """A missing optional dependency: one line and exit 2, before anything runs."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise CommandError("%s, which is not installed: pip install -e '.[bench]'" % why)
