"""A virtual ring's own clock, for its boards' recovery timeouts: wall time less what its
processes stood still (the relay keeps it: RingStoodStill; the boards read it: firmware/hal_unix.py),
and its pace for the harness (RingPace). On its own because it changes for its own reasons: how a
loaded host's stalls are told apart from a ring that stopped (issue 36)."""

import collections
import os
import threading
import time
from pathlib import Path

# The ring's clock for its boards' recovery timeouts (RingStoodStill): a file in the work
# directory, replaced whole at every housekeeping, that every board reads when a timeout is over.
STOOD_STILL = "ring-clock"
# How often the relay updates it (a look at n + 1 schedstat files and a file replaced: 0.8 ms
# for 32 boards here), and by how much later than that it must come to have stood still (it
# looks at a housekeeping, every _HOUSEKEEPING_S).
_RING_CLOCK_EVERY_S = 0.1
_LATE_SLACK_NS = 25_000_000
_GROWTH_KEPT_NS = 50_000_000  # a look at which the ring's clock fell this far behind is kept (RingStoodStill.growths)
# A board given bytes is on the ring's path until it writes, or until it has run this much CPU
# since without writing (it took them in and had nothing to pass on: a request absorbed, a frame
# its drop_rx fault lost). A hop costs it about 0.1 ms here, a pass of its idle loop 0.03.
_ON_PATH_CPU_NS = 5_000_000


def stood_still_file(workdir):
    return Path(workdir) / STOOD_STILL


class RingStoodStill:
    """How long the ring's processes stood still, for its boards' recovery timeouts.

    A Pico passes a token on in microseconds whatever its host does; a virtual board's hop
    needs its own process, the relay and the next board's process to run, and a loaded host
    (three busy loops on two cores) can leave them ready but not running for hundreds of
    milliseconds (a hop of 335 ms was seen). The boards' timeouts run on wall time
    (CLOCK_MONOTONIC), so such a hop made them regenerate a token that was only late, and
    Q's exact message counts broke.

    So the relay keeps the ring's clock: wall time less what stood still, which is, at each
    housekeeping, the longest of: the time any of the ring's processes (the relay thread,
    each board) waited on the host's run queue since the last (the kernel's
    /proc/PID/schedstat, its second field, and a board's wait still in progress: _wait_grew),
    and how much later than due the relay itself
    came back (held in a long call, stopped); or, if more, the sum of the relay's (its wait or
    lateness) and the waits of the boards on the ring's path (given bytes and not written
    since: a hop needs them in turn), at most the time since the last look. It writes that
    count to a file the boards read when a timeout is over (firmware/hal_unix.py), as
    "STOOD WRITTEN LATE_AFTER", in microseconds: what stood still since the relay started, the
    write's time and when the next write is overdue, both CLOCK_MONOTONIC (a unix-port board's
    ticks_us: on a 64-bit build they wrap at 2**62, not at a Pico's 2**30). A board counts what
    STOOD grew by between its reads and, past LATE_AFTER with no write since, the time since:
    the relay stands still now, and so do the boards' timeouts. (The file held the clock as 30
    bits first, and a board took its own unmasked ticks less it: past 18 minutes of the host's
    uptime, every wrap of the 30 bits credited a board 1,074 s of standing still at once.) Where
    there is no schedstat, nothing counts but the relay's own lateness."""

    def __init__(self, path, every_s=_RING_CLOCK_EVERY_S, read_proc=None, monotonic_ns=time.monotonic_ns):
        """every_s: how often the relay updates it. read_proc(path): the bytes of a /proc file
        (OSError: none), and monotonic_ns: a test's own."""
        self.path = Path(path)
        self._read_proc = read_proc or _read_proc
        self._monotonic_ns = monotonic_ns
        self.every_ns = int(every_s * 1e9)
        self.next_at = 0.0  # (monotonic s) the relay's next update
        self.stood_ns = 0
        self._waited = {}  # schedstat path -> the run-queue wait it last said (ns)
        self._cpu = {}  # schedstat path -> the CPU time it last said (ns)
        self._runnable = set()  # the boards' schedstat paths whose process was runnable at the last look
        # schedstat path -> a wait in progress counted before schedstat said it (ns): taken off
        # what it says once the process has run
        self._ahead = {}
        self._last_ns = None  # time.monotonic_ns() of the last update
        self._relay_held_ns = 0  # the relay's passes held up since the last update (relay_pass)
        # boards on the ring's path (given bytes, not written since: delivered, wrote): board ->
        # its CPU time (ns, schedstat) at the first look after, None before it
        self._on_path = {}
        self._on_path_lately = set()  # the boards on the path at any time since the last update
        self._tmp = self.path.with_name(self.path.name + ".new")
        # the last looks at which the clock fell _GROWTH_KEPT_NS or more behind: (monotonic s,
        # ms, who: "relay late" or the process that waited longest), for a failure's snapshot
        self.growths = collections.deque(maxlen=48)  # (a loaded run's failure needs its whole run's)

    def relay_pass(self, seconds, waited, asked):
        """A pass of the relay's loop took `seconds` (monotonic, from its top to its end), of which
        it waited `waited` for its descriptors, having asked for at most `asked`: the rest is time
        in which it did not move the ring's bytes (held up in a long call, not run at all, or run
        late after its wait). A pass's own work takes microseconds; more than _LATE_SLACK_NS is
        kept for the next update."""
        held = seconds - min(waited, asked)
        if held * 1e9 > _LATE_SLACK_NS:
            self._relay_held_ns += int(held * 1e9)

    def delivered(self, board):
        """The relay gave board `board` bytes: it is on the ring's path until it writes."""
        if board not in self._on_path:
            self._on_path[board] = None
            self._on_path_lately.add(board)

    def wrote(self, board):
        """Board `board` wrote on its UART: what it was given has moved on."""
        self._on_path.pop(board, None)

    def _wait_grew(self, source, said_ns, cpu_ns, since_ns):
        """What a process's run-queue wait grew by since the last look: what schedstat says it
        grew by (said_ns), and a wait still in progress, which schedstat says only once it is
        over. A board runnable at the last look that has had no CPU since has waited all of
        the time between (a board process sleeps in poll() when it has nothing to do): counted
        now, and taken off what schedstat says once the board has run. Without it, a board that
        held the token up and had not yet run again at the relay's look after another board's
        timeout fell due was missing from the count its timeout was acted on by (issue 36)."""
        ahead = self._ahead.pop(source, 0)
        if cpu_ns != self._cpu.get(source):  # it ran: its waits so far are all said
            return max(0, said_ns - ahead)
        if source in self._runnable and since_ns is not None:
            ahead += since_ns
            said_ns += since_ns
        if ahead:
            self._ahead[source] = ahead
        return said_ns

    def _is_runnable(self, schedstat):
        """Whether the process of a /proc/PID/schedstat path is runnable (running, or ready to
        run and waiting for a CPU): its state in /proc/PID/stat, the letter after the command's
        ")"."""
        try:
            stat = self._read_proc(schedstat[: -len("schedstat")] + "stat")
        except OSError:
            return False
        at = stat.rfind(b")") + 2
        return stat[at: at + 1] == b"R"

    def update(self, pids, pass_began=None):
        """At a housekeeping of the relay thread: `pids` the boards' processes, by board (None: one
        not running); pass_began: when (monotonic s) the relay's pass that calls it began."""
        now_ns = self._monotonic_ns()
        self.next_at = now_ns / 1e9 + self.every_ns / 1e9
        # The relay held up since the last update: its passes (relay_pass) and this one so far (a
        # stall taken from its schedule alone was up to every + slack short: issue 36).
        held = self._relay_held_ns
        self._relay_held_ns = 0
        if pass_began is not None:
            this = now_ns - int(pass_began * 1e9)
            if this > _LATE_SLACK_NS:
                held += this
                self._relay_held_ns = -this  # (counted here: its pass's total, at its end, is less this)
        # and at least how late it came back to its schedule (a relay thread not run between its
        # passes: the same stall, seen from the other end)
        late = 0 if self._last_ns is None else max(0, now_ns - self._last_ns - self.every_ns - _LATE_SLACK_NS)
        late = max(late, held)
        since_ns = None if self._last_ns is None else now_ns - self._last_ns
        self._last_ns = now_ns
        sources = [(None, "/proc/self/task/%d/schedstat" % threading.get_native_id())]
        sources += [(board, "/proc/%d/schedstat" % pid) for board, pid in enumerate(pids) if pid is not None]
        grown, waited, who = late, {}, "relay late"
        # A hop needs the sender, the relay and the receiver in turn: the waits of the relay and
        # of the boards on the ring's path add up, where the longest alone fell short under CI
        # load (a token's way through a board that waited, after the relay came 729 ms late:
        # counted 729 of about 1 s, and a wandering-token component made a token, issue 36).
        # Boards that only poll are not on the path: their waits overlap and do not add.
        in_series = late
        cpu, runnable = {}, set()
        for board, source in sources:
            try:
                fields = self._read_proc(source).split()
                cpu_ns, wait_ns = int(fields[0]), int(fields[1])
            except (OSError, ValueError, IndexError):
                continue
            waited[source] = wait_ns
            cpu[source] = cpu_ns
            before = self._waited.get(source)
            if board is not None and self._is_runnable(source):
                runnable.add(source)
            if before is not None:
                grew = self._wait_grew(source, wait_ns - before, cpu_ns, since_ns)
                if grew > grown:
                    grown, who = grew, source.split("/")[-2] + " on the run queue"
                if board is None:
                    in_series = max(late, grew)
                elif board in self._on_path_lately:
                    in_series += grew
            if board in self._on_path:
                since = self._on_path[board]
                if since is None or before is None:  # (before None: a board started again, a new pid)
                    self._on_path[board] = cpu_ns
                elif cpu_ns - since >= _ON_PATH_CPU_NS:
                    del self._on_path[board]  # it ran and wrote nothing: it has passed nothing on
        self._waited = waited  # (a board started again has a new pid: its own count from here)
        self._cpu = cpu
        self._runnable = runnable
        self._on_path_lately = set(self._on_path)
        if since_ns is not None and min(in_series, since_ns) > grown:
            grown, who = min(in_series, since_ns), "in series on the ring's path"
        self.stood_ns += grown
        if grown >= _GROWTH_KEPT_NS:
            self.growths.append((now_ns / 1e9, grown // 1_000_000, who))
        now_us = now_ns // 1000
        # what stood still, with the write's time and when the next is overdue: a board that
        # reads late in the period must not take the write's age for time stood still (it did,
        # and a later stall was credited that much less: a waiting board timed out, issue 36);
        # past the second, the relay stands still, as its next update will count (`late` above)
        late_after = now_us + (self.every_ns + _LATE_SLACK_NS) // 1000
        try:
            self._tmp.write_text("%d %d %d" % (self.stood_ns // 1000, now_us, late_after))
            os.replace(self._tmp, self.path)  # whole: a board never reads half of it
        except OSError:
            pass


def _read_proc(path):
    with open(path, "rb") as f:
        return f.read()


class RingPace:
    """The pace of a virtual ring's clock (RingStoodStill's file): its seconds per wall second
    lately, for the harness (RingRun clock_rate), as an emulated ring's chip time is
    (emulated.supervisor.chip_rate_for_ports). The boards' recovery timeouts run on this clock,
    so the run's stall rule counts it too: on a machine that leaves the ring's processes ready
    but not running most of the time, the ring is slow, not stalled (a saturated wandering-token
    run under a loaded suite: "no critical section for 5.1 s" while its boards' timers counted
    a fraction of that).

    Each write of the file is a sample: what stood still at the write's time (both in it). The
    pace is over the samples of the last span_s, None before two; 0.0 while the relay has
    not written for stale_s (it stands still, and so do the boards' timers). monotonic_ns: a
    test's own."""

    def __init__(self, path, span_s=1.0, stale_s=3 * _RING_CLOCK_EVERY_S, monotonic_ns=time.monotonic_ns):
        self.path = Path(path)
        self.span_us = int(span_s * 1e6)
        self.stale_us = int(stale_s * 1e6)
        self._monotonic_ns = monotonic_ns
        self._samples = []  # (write time, monotonic us; the time stood still so far, us)

    def __call__(self):
        now_us = self._monotonic_ns() // 1000
        try:
            stood_us, written_us = (int(x) for x in self.path.read_text().split()[:2])
        except (OSError, ValueError):
            return None  # not written yet, or being replaced
        samples = self._samples
        if not samples or written_us > samples[-1][0]:
            samples.append((written_us, stood_us))
        while len(samples) > 2 and samples[1][0] <= now_us - self.span_us:
            del samples[0]
        if now_us - samples[-1][0] > self.stale_us:
            return 0.0
        if len(samples) < 2:
            return None
        (w0, s0), (w1, s1) = samples[0], samples[-1]
        stood = s1 - s0
        return max(0.0, 1.0 - stood / (w1 - w0))


def ring_pace_for_ports(ports):
    """For the ports of a virtual ring (DIR/usb<i>, the ring's clock in DIR): its RingPace, for
    RingRun's clock_rate. None for any other ports."""
    dirs = {Path(p).parent for p in ports if isinstance(p, str)}
    if len(dirs) != 1 or not stood_still_file(next(iter(dirs))).exists():
        return None  # (its ports' one folder holds the ring's clock: a virtual ring's workdir)
    return RingPace(stood_still_file(dirs.pop()))
