"""The `picoring` command: a table of small command handlers.

Each handler is do_X(args) -> exit status; errors that a user can cause are
raised as CommandError (or ValueError/OSError from the layers below) and
printed as `picoring: message` with exit status 2. A run whose check fails
exits with status 1.
"""

import argparse
import sys

from .. import __version__
from . import bench, boards, compare, dash, explore, run, sim, virtual
from .common import CommandError

_COMMANDS = {
    "sim": (sim.do_sim, sim.argparse_sim),
    "check": (sim.do_check, sim.argparse_check),
    "compare": (compare.do_compare, compare.argparse_compare),
    "bench": (bench.do_bench, bench.argparse_bench),
    "virtual": (virtual.do_virtual, virtual.argparse_virtual),
    "run": (run.do_run, run.argparse_run),
    "demo": (run.do_demo, run.argparse_demo),
    "boards": (boards.do_boards, boards.argparse_boards),
    "flash": (boards.do_flash, boards.argparse_flash),
    "discover": (boards.do_discover, boards.argparse_discover),
    "wiring": (boards.do_wiring, boards.argparse_wiring),
    "dash": (dash.do_dash, dash.argparse_dash),
    "report": (dash.do_report, dash.argparse_report),
    "explore": (explore.do_explore, explore.argparse_explore),
    "fidelity": (explore.do_fidelity, explore.argparse_fidelity),
}


def build_parser():
    parser = argparse.ArgumentParser(prog="picoring", description="Token protocols (S, Q, D and every registered one) on a ring of MicroPython boards: simulate, run, check, compare.")
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

