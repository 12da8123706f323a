"""The clock that waits on boards are measured by, passed in to whatever waits.

Real Picos on a host that keeps up get wall time (WALL). Virtual boards and emulated Picos
run on this machine's own serial ports (ptys), whose kernel worker can stand still for
seconds on a loaded machine: their rings get ttystall.StallClock, which leaves such time
out. The waits themselves are also scaled by the ring's measured slowness (link.slowness),
which the clock does not know.

A clock answers now() (seconds, never going back; the time the serial ports stood still is
not in it), stalled() (seconds so far in which the ports stood still: 0 for wall time), and
makes deadlines; `stall_aware` says whether it expects a host machine that may be loaded
(the waits that cannot tell a slow board from a missing one are then longer: link.py).
A test passes a clock of its own (tests/conftest.py: StalledClock); ttystall.for_ports chooses
the clock for a ring's ports.
"""

import time


class WallClock:
    """Wall time: nothing is left out."""

    stall_aware = False
    # what the time not counted was, for not_counted's message
    not_counted_what = "this machine's serial ports delivered nothing"

    def stalled(self):
        return 0.0

    def monotonic(self):
        """Seconds, never going back, all of them: what a deadline's time is measured by (a test's
        clock moves it itself: tests/conftest.py, FakeClock)."""
        return time.monotonic()

    def now(self):
        """monotonic() less the seconds the serial ports stood still so far."""
        return self.monotonic() - self.stalled()

    def deadline(self, seconds):
        return Deadline(seconds, self)

    def not_counted(self, stalled_s):
        """For a message about a wait: ' (and N s more ...)', or '' when the ports never stood still."""
        if stalled_s < 0.1:
            return ""
        return " (and %.1f s more in which %s: not counted)" % (stalled_s, self.not_counted_what)


WALL = WallClock()


class Deadline:
    """seconds of the clock's time (clock.now()) from now: expired() once they are over, left()
    what remains of them."""

    def __init__(self, seconds, clock=WALL):
        self.seconds = seconds
        self.clock = clock
        self.restart()

    def restart(self):
        """From now again (a quiet timeout: the board said something)."""
        self.start = self.clock.monotonic()
        self._stalled0 = self.clock.stalled()

    def stalled_s(self):
        """The wall time since the start not counted."""
        return self.clock.stalled() - self._stalled0

    def elapsed(self):
        return self.clock.monotonic() - self.start - self.stalled_s()

    def left(self):
        return self.seconds - self.elapsed()

    def expired(self):
        return self.left() <= 0

    def not_counted(self):
        return self.clock.not_counted(self.stalled_s())

