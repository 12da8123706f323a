"""How long this machine's serial ports delivered nothing: waits on a board that do not count it.

Every serial port of a Linux host (a Pico's USB serial, /dev/ttyACM*, and a virtual board's
pty alike) hands what arrives to its reader through the kernel's tty buffers, pushed by a
shared kernel worker. On a loaded machine that worker can stand still for seconds (measured
on the 2-core test machine beside two busy loops: a pty took up to 7.7 s to deliver one byte,
while processes sleeping 10 ms never woke more than 0.3 s late; the kernel logged workqueue
lockups of up to 141 s). A board that answers within a second then looks dead to a host that
waits for it by the wall clock, and a timeout of 30 s failed runs and tests that were fine.

So the host keeps a canary: a pty pair of its own, a byte through it every PROBE_EVERY_S.
Whatever the canary waits beyond LATE_S for its byte counts as stalled: no port delivered
meanwhile, and a wait on a board by StallClock (picoring.clock: passed in) does not count it. The
canary runs in a daemon thread, started at the first question; where there are no ptys,
nothing counts as stalled and waits are by the wall clock.

The canary's sleep between two bytes counts too, beyond PROBE_EVERY_S + LATE_S: the same
machine once stood still for the processes themselves (a supervisor did not stop on SIGABRT
for 30 s), and a stall that begins while the canary sleeps would otherwise not count at all,
as most do (a byte takes microseconds, the sleep 50 ms). A loaded suite run gave up on a
virtual board's reset that way: the waiter woke first after such a stall, the thread it
waited for still in the select it was frozen in.
"""

import os
import threading
import time
from urllib.parse import urlsplit

from . import fdwait
from .clock import WALL, WallClock

PROBE_EVERY_S = 0.05
LATE_S = 0.25  # a byte this late through the canary: the ports stand still from here on


class TtyStallClock:
    """Seconds the canary pty stood still (stalled()), counted since it started."""

    def __init__(self, probe_every=PROBE_EVERY_S, late=LATE_S, fds=None, sleep=time.sleep):
        """fds: (write end, read end) of the canary's path (tests); default a pty pair of its own.
        sleep: how the canary waits between bytes (tests)."""
        self.probe_every = probe_every
        self.late = late
        self._sleep = sleep
        self._lock = threading.Lock()
        self._done = 0.0  # stalled seconds of the probes and sleeps that are over
        self._waiting_since = None  # monotonic time the probe or sleep in hand began, if any
        self._allowed = 0.0  # how long that one may take before `late` starts counting
        self._stop = False
        self.pid = os.getpid()
        self.works = False
        if fds is None:
            try:
                fds = os.openpty()
            except (AttributeError, OSError):
                return
            try:
                import tty

                tty.setraw(fds[1])  # the byte as it is: no line discipline waiting for a newline
            except (ImportError, OSError):
                pass
        self._master, self._slave = fds
        self.works = True
        self._thread = threading.Thread(target=self._run, name="tty stall canary", daemon=True)
        self._thread.start()

    def stalled(self):
        """Seconds so far, the probe or sleep in hand included: it never goes down."""
        now = time.monotonic()
        with self._lock:
            return self._done + self._overdue(now)

    def _overdue(self, now):
        """(Under the lock.) How far the probe or sleep in hand is past its allowance and `late`."""
        if self._waiting_since is None:
            return 0.0
        return max(0.0, now - self._waiting_since - self._allowed - self.late)

    def _begin(self, allowed):
        """A probe (allowed 0) or a sleep (allowed its length) starts now."""
        now = time.monotonic()
        with self._lock:
            self._waiting_since, self._allowed = now, allowed

    def _end(self):
        now = time.monotonic()
        with self._lock:
            self._done += self._overdue(now)
            self._waiting_since = None

    def _run(self):
        while not self._stop:
            self._begin(0.0)
            try:
                os.write(self._master, b"x")
                while not fdwait.wait([self._slave], (), 1.0)[0]:
                    if self._stop:
                        return
                os.read(self._slave, 64)
            except OSError:
                with self._lock:
                    self._waiting_since = None
                return  # (closed): nothing more is counted
            self._end()
            self._begin(self.probe_every)
            self._sleep(self.probe_every)
            self._end()

    def close(self):
        self._stop = True


_clock = None
_clock_lock = threading.Lock()


def clock():
    """The process's canary, started at the first call (and again in a forked child, which has
    the parent's clock but not its thread)."""
    global _clock
    with _clock_lock:
        if _clock is None or _clock.pid != os.getpid():
            _clock = TtyStallClock()
        return _clock


class StallClock(WallClock):
    """The clock of virtual and emulated rings (picoring.clock): wall time less the seconds
    this machine's serial ports stood still (the process's canary)."""

    stall_aware = True

    def stalled(self):
        return clock().stalled()


STALL = StallClock()


def for_ports(ports):
    """The clock for a ring on these ports (paths or URLs): the stall-aware one when one of them
    is a pty of this machine (a virtual board, an emulated Pico: whose bytes wait for this
    machine's tty worker, which stands still when it is loaded), or a URL served by this machine
    (an RFC 2217 server such as labgrid's ser2net in front of such a pty: the same worker moves
    its bytes); else wall time (real boards on USB serial, or reached over the network)."""
    return STALL if any(_is_pty(p) or _is_local_url(p) for p in ports) else WALL


def _is_pty(port):
    port = getattr(port, "port", port)  # (a ports.Target)
    return isinstance(port, str) and port.startswith("/") and os.path.realpath(port).startswith("/dev/pts/")


def _is_local_url(port):
    port = getattr(port, "port", port)
    if not isinstance(port, str) or "://" not in port:
        return False
    host = urlsplit(port).hostname or ""
    return host == "localhost" or host == "::1" or host.startswith("127.")
