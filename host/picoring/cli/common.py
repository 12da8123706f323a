"""What the command modules share: the error a user can fix, the protocol choices,
printing a report, and the boards a ring command runs on."""

import json

from ..check import registry


class CommandError(Exception):
    """A problem the user can fix; printed without a traceback."""


PROTOCOLS = registry.names()  # every registered protocol (firmware/protocol.py REGISTRY)


def print_report(report, as_json):
    if as_json:
        print(json.dumps(report, sort_keys=True))
        return
    from ..check.report import print_report as show

    show(report)


def run_ports(args):
    """For `picoring run`: (ports, resetter) from --ports or the ring file; virtual boards of
    `picoring virtual up` get their ring's reset, others a soft reset over USB."""
    from ..ring.ports import resetter_for, targets_from_args

    targets, _ = targets_from_args(args.ports, getattr(args, "ring_file", None), getattr(args, "virtual_dir", None))
    return [t.port for t in targets], resetter_for(targets)
