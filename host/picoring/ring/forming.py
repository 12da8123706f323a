"""Waiting for a ring of boards to form after they were started (RingRun.restart_ring).

The boards form the ring by themselves (docs/recovery.md: join rounds, then position 0's claim
makes the first token). The host only asks each board its state until the ring has formed and,
for a protocol whose token rests, until nothing moves any more: what still moves when a run
zeroes the counters would be counted as the run's traffic; for one whose token never rests,
until the token has reached every board: a board that has not seen it yet makes one of its own
when its wait runs out (the wandering token's Delta_gen), and under load the first token's
first round took longer than that.
"""

import time

from ..check import registry
from ..clock import WALL
from .link import HarnessError
from .runreport import PING_GRACE_S

LATE_EXTENDS = 3  # the deadline grows by the time the boards' answers were late, up to this many times


def _late(seconds):
    return " (and %.0f s more in which the boards' answers were late)" % seconds if seconds >= 0.5 else ""


def _token_seen_everywhere(statuses):
    """Every board has seen a token of the ring's newest epoch: its `epoch` (the token's it last
    saw) is the highest `known_epoch` (the claim it adopted) of the ring. True when the boards
    do not say (a firmware without the fields: the rule is not known to it)."""
    if any(not isinstance(f.get("epoch"), int) or not isinstance(f.get("known_epoch"), int) for f in statuses):
        return True
    newest = max(f["known_epoch"] for f in statuses)
    return all(f["epoch"] == newest for f in statuses)


def wait_formed(links, protocol, settle_us, slowness, timeout=15.0, clock=WALL):
    """Until no board is fresh, position 0 has seen or made the token, and, for a protocol
    whose token never rests, every board has seen it (_token_seen_everywhere); for one whose
    token rests, until the ring is quiet: one board holds the token (none for a protocol
    without one) and no frame has moved
    for settle_us (board time). A busy machine can make the start-up take more rounds than
    one (a claim retried while the first was still going round: a newer epoch): what is
    still moving when the run zeroes the counters would be counted as the run's traffic.
    clock: what the deadline counts (picoring.clock)."""
    deadline = clock.now() + timeout
    settle_s = settle_us * slowness / 1e6
    prompt_s = PING_GRACE_S * slowness
    rests = registry.rests(protocol)
    tokens_at_rest = registry.tokens_at_start(protocol)
    counters, quiet_since = None, None
    late_s = 0.0  # time the boards took beyond prompt_s to answer: it does not count against them
    while True:
        statuses = []
        for link in links:
            # (by the same clock as the deadline: a stall of the serial ports is in neither)
            asked = clock.now()
            statuses.append(link.command("status")[1].fields)
            late_s += max(0.0, clock.now() - asked - prompt_s)
        waiting = [(link, f) for link, f in zip(links, statuses) if f.get("fresh") or f.get("starting")]
        if not waiting and not rests and _token_seen_everywhere(statuses):
            return
        now = clock.now()
        holders = sum(1 for f in statuses if f.get("tok"))
        if not waiting and rests:
            seen = [(f.get("tok"), f.get("rx_frames"), f.get("tx_frames")) for f in statuses]
            if seen != counters or holders != tokens_at_rest:
                counters, quiet_since = seen, now
            elif now - quiet_since >= settle_s:
                return
        extension = min(late_s, LATE_EXTENDS * timeout)
        if now > deadline + extension:
            # A virtual board's USB link is a pty, and on a loaded machine a pty's bytes can
            # take seconds (virtual/board.py): the time a state query waited for its answer
            # says nothing about the ring, so it extends the deadline.
            if waiting:
                link, f = waiting[0]
                what = ("is still joining: its join round never came back" if f.get("fresh")
                        else "has not made the first token: its claim never came back")
                raise HarnessError("the ring did not form in %.0f s%s: %s (position %s) %s; is every TX wired to "
                                   "the next board's RX, and are all the boards running?"
                                   % (timeout, _late(extension), link.port, f.get("pos"), what))
            if not rests:
                raise HarnessError("the ring formed but its token did not reach every board in %.0f s%s: the "
                                   "ring's newest epoch %d, the epoch of the token each board last saw %s" % (
                                       timeout, _late(extension), max(f["known_epoch"] for f in statuses),
                                       " ".join(str(f["epoch"]) for f in statuses)))
            raise HarnessError("the ring formed but did not come to rest in %.0f s%s: %d board(s) hold the token, "
                               "frames received/sent per board %s" % (
                                   timeout, _late(extension), holders,
                                   " ".join("%s/%s" % (f.get("rx_frames"), f.get("tx_frames")) for f in statuses)))
        time.sleep(0.02)
