"""The `picoring` command: a table of small command handlers.

Each handler is do_X(args) -> exit status; errors that a user can cause are
raised as CommandError (or ValueError/OSError from the layers below) and
printed as `picoring: message` with exit status 2. A run whose check fails
exits with status 1.
"""

import argparse
import signal
import sys

from .. import __version__, interrupt
from ..emulated.assets import EmulatedError
from . import bench, boards, compare, dash, emulated, explore, figures, helptext, run, sim, virtual
from .common import CommandError, ProtocolsShown, apply_options, labgrid_ports, protocol_table, release_places

_COMMANDS = {
    "sim": (sim.do_sim, sim.argparse_sim),
    "check": (sim.do_check, sim.argparse_check),
    "compare": (compare.do_compare, compare.argparse_compare),
    "bench": (bench.do_bench, bench.argparse_bench),
    "virtual": (virtual.do_virtual, virtual.argparse_virtual),
    "emulated": (emulated.do_emulated, emulated.argparse_emulated),
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
    "figures": (figures.do_figures, figures.argparse_figures),
    "protocols": (lambda args: print(protocol_table()) or 0,  # the one list (-p help prints it too)
                  lambda sub: sub.add_parser("protocols", help="the protocols -p takes, and their options (--opt)")),
}


def build_parser():
    parser = argparse.ArgumentParser(prog="picoring", description="Token protocols (S, Q, D and every registered one) on a ring of MicroPython boards: simulate, run, check, compare.")
    parser.add_argument("--version", action="version", version="picoring " + __version__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for _, (_, add) in _COMMANDS.items():
        add(sub)
    helptext.apply(parser)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM (kill PID): raised like Ctrl-C's KeyboardInterrupt, so the same cleanup runs
    (virtual boards stopped, their temporary folder removed, ports closed)."""


def _on_sigterm(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: let the cleanup finish (kill -9 still works)
    raise Terminated()


def _catch_sigterm():
    """Install _on_sigterm; returns the handler to put back (None where signals cannot be set)."""
    try:
        return signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (main() called from a thread)
        return None


def main(argv=None):
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = _COMMANDS[args.command][0]
    previous = _catch_sigterm()
    previous_int = interrupt.catch()
    try:
        return _main(handler, args)
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
        if previous_int is not None:
            signal.signal(signal.SIGINT, previous_int)


def _main(handler, args):
    try:
        apply_options(args)
        labgrid_ports(args)
        status = handler(args)
        interrupt.check()  # a Ctrl-C that some library swallowed on its way is still a Ctrl-C
        sys.stdout.flush()  # here, so a reader that went away (| head) shows as BrokenPipeError below
        return status
    except ProtocolsShown:  # -p help
        return 0
    except BrokenPipeError as e:
        if not _stdout_gone():  # a serial port or a socket, not our reader
            print("picoring: %s" % e, file=sys.stderr)
            return 2
        return _quiet_exit_on_broken_pipe()
    except (CommandError, EmulatedError, ValueError, OSError) as e:
        print("picoring: %s" % e, file=sys.stderr)
        return 2
    except Terminated:
        print("picoring: terminated", file=sys.stderr)
        return 128 + signal.SIGTERM
    except KeyboardInterrupt:
        print("picoring: interrupted", file=sys.stderr)
        return 130
    finally:
        release_places()



def _stdout_gone():
    """True if stdout is a pipe whose reader has closed it (poll says POLLERR)."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), select.POLLOUT)
        return any(ev & select.POLLERR for _, ev in poller.poll(0))
    except (AttributeError, ValueError, OSError):  # no real stdout (pytest's capture)
        return False


def _quiet_exit_on_broken_pipe():
    """`picoring ... | head`: the reader has all it wanted. As the CPython docs (signal, "Note on
    SIGPIPE") say: point stdout at devnull so the interpreter's last flush does not complain,
    and exit quietly with status 1 (what rich does for the tables it prints, too)."""
    import os

    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (AttributeError, ValueError, OSError):
        pass
    return 1


if __name__ == "__main__":
    sys.exit(main())

