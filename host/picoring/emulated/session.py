"""A ring of emulated Picos for one command (`run`, `compare`, `dash` --emulated N): started,
flashed with `picoring flash`'s own path (mpremote over each board's USB serial), and stopped
by the caller (and with the command, whatever ends it)."""

import sys

from .supervisor import EmulatedRing


def _say(text):
    print("picoring: %s" % text, file=sys.stderr)


def start_flashed(n, protocol, baud=None, cs_us=0, regen_ms=None, firmware=None, bootrom=None, log=None):
    """(ring, ports, resetter): n emulated Picos running the firmware for protocol."""
    from ..ring.ports import resetter_for, targets_from_args

    from ..ring.flash import FlashError

    log = log or _say
    ring = EmulatedRing(n, firmware, bootrom, say=log)
    try:
        reflash(ring, protocol, baud, cs_us, regen_ms, log)
        targets, _ = targets_from_args(",".join(ring.ports))
        return ring, ring.ports, resetter_for(targets)
    except FlashError as e:
        stopped = ring.stopped_boards()
        ring.stop()
        if stopped:  # the cause first: a board that stopped does not answer mpremote
            raise FlashError("; ".join(stopped + [str(e)])) from None
        raise
    except BaseException:
        ring.stop()
        raise


def reflash(ring, protocol, baud=None, cs_us=0, regen_ms=None, log=None):
    """Put every board of ring on protocol (only what changed is copied)."""
    from ..ring.flash import flash
    from ..ring.ports import targets_from_args
    from .supervisor import chip_rate_for_ports

    targets, _ = targets_from_args(",".join(ring.ports))
    log = log or _say
    log("flashing %d emulated Picos: protocol %s..." % (len(targets), protocol))
    return flash(targets, protocol, baud=baud, cs_us=cs_us, regen_ms=regen_ms, log=log,
                 clock_rate=chip_rate_for_ports(ring.ports))
