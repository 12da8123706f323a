"""Virtual boards: MicroPython unix-port processes wired into a UART ring.

A virtual board is one `micropython` process whose working directory is the
board's filesystem (fs_dir) and whose stdin/stdout/stderr is a pty standing in
for the Pico's USB serial. It behaves like a Pico at power-on: it runs main.py
if there is one (`micropython -i main.py`: -i drops to the REPL when main.py
returns or raises, KeyboardInterrupt included), else it sits in the REPL.

Each board has, held by the ring:

  the board's side of USB (its stdin, stdout, stderr: pipes)
      <-- relay thread, USB thread -->  host side of USB (a raw pty: usb_path, what users open)
  UART: a pipe (RX, in timed records: feed_rx) and a socket pair (TX), the board's fds 3 and 4

board.py says why only the host's side is a pty. That pty is handled by a
thread of its own, the USB thread (usb.py), which alone reads and closes its master: on
a loaded machine a read or poll there can wait seconds for the kernel's tty
worker, and the relay thread, which carries the wires, must never wait with it.
What the host writes goes from the USB thread to the relay as events; what the
board writes the relay writes to the pty (a write never waits for the worker:
what the pty does not take is queued, and a board whose queue is full waits in
its own write, _HOST_BACKLOG).
With a relay, the ring keeps the board's end open for the board's whole life,
the host side can come and go (board output is dropped while nothing has it
open, as a Pico drops USB output with no host), and usb_path stays the same
across resets.

usb_path is a symlink (<workdir>/usb<i>) to the host side's pty, as
/dev/serial/by-id/... is to a Pico's /dev/ttyACM*: unplugging the USB link
(`unplug`, or a power cycle) closes that pty, so a host that has it open gets a
hang-up, and removes the symlink, so opening it fails; plugging it back makes a
new pty under the same usb_path. Nothing else can take a pty away from a host
that has it open without privileges (TIOCVHANGUP needs CAP_SYS_ADMIN), and a new
pty gets whatever /dev/pts number is free.

Why raw: the firmware reads single bytes from its host link (canonical mode
would hold them until a newline), echo would reflect everything mpremote sends
back into it, and 0x03 must reach the firmware as a byte (it raises
KeyboardInterrupt itself) rather than become SIGINT. The REPL echoes by itself. Difference from a Pico: `print` writes "\\n",
where a Pico's USB writes "\\r\\n"; the REPL's own lines end in "\\r\\n" on both.

Lifecycle: the ring owns its processes. Every board is started by the ring's
relay thread with PR_SET_PDEATHSIG=SIGKILL (it dies when that thread or the
owning process dies, even by SIGKILL), in its own process group; stop() kills
them, an atexit hook stops any ring still running, and boards that exit on
their own (Ctrl-D in the REPL, sys.exit) are restarted like a Pico's soft reset.

Faults (docs/faults.md): the wires carry out a FaultPlan's wire faults; the ring
carries out its board faults at their times (power_cycle, unplug), and the same
calls are public.
"""

import atexit
import contextlib
import json
import math
import os
import queue
import shutil
import sys
import tempfile
import threading
import time
import traceback
import weakref
from pathlib import Path

from .. import fdwait, ttystall
from .ringclock import RingStoodStill, stood_still_file
from .board import RX_LEAD_S, VirtualBoard, VirtualBoardError, WakePipe, find_micropython, read_all, read_some
from .usb import UsbSide
from .wire import FaultPlan, Wire

_HOUSEKEEPING_S = 0.02      # how often to look for exited boards and timed-out hosts
_WIRE_BACKLOG = 4096        # stop reading a board's TX while this much is on its wire
_RESTART_MIN_S = 1.0        # a board that keeps exiting is restarted at most once a second
_POWER_ON_HOLD_S = 2.0      # a power-cycled board's first USB output waits this long for a host
# A call the relay has begun (a reset forks and execs a board: in a loaded suite run that took
# longer than the caller's 10 s) is waited for this long more, then said to be stuck.
_CALL_IN_HAND_S = 60.0
_CALL_SLOW_S = 2.0  # a call that takes the relay longer is said on stderr (the supervisor's log)
# A board's output the host's pty has not taken yet is queued, up to this much; beyond it the
# relay stops reading the board's USB pipe, and the board waits in its write (a Pico's USB
# write waits for a host that does not read, too). Under load the kernel's tty worker, which
# moves bytes from a pty's master to its slave, did not run for 5 to 140 s (the kernel said
# "workqueue lockup"); a full pty then dropped 3,022 events of an S run: a wrong verdict
# from a machine that was only slow.
_HOST_BACKLOG = 1 << 20
# The ring's one I2C FRAM (--resource fram, docs/fram.md): an image of its 32 KB in the work
# directory, which every board's stand-in for machine.I2C opens (firmware/hal_unix.py).
FRAM_IMAGE = "fram.img"
FRAM_SIZE = 32768


_live_rings = weakref.WeakSet()


@atexit.register
def _stop_live_rings():
    for ring in list(_live_rings):
        ring.stop()


def _tight_timer_slack():
    """Linux lets a sleeping thread wake up to its timer slack late (50 us by default): for the
    relay thread a frame's delivery, a third of a token frame's wire time at 1 Mbaud. 1 us
    for the calling thread (prctl PR_SET_TIMERSLACK; elsewhere nothing changes)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(29, 1000, 0, 0, 0)
    except (OSError, AttributeError, TypeError):
        pass


class VirtualRing:
    """n virtual boards, board i's UART TX wired to board (i+1) % n's RX at `baud`.

    with VirtualRing(3) as ring:
        ring.boards[0].usb_path   # give this to mpremote or the harness
        ring.reset(0)             # rerun main.py, like pressing reset

    Thread-safe: reset()/stop() may be called from any thread; the processes are
    started by the ring's relay thread, which lives exactly as long as the ring.
    """

    def __init__(self, n, baud=115200, workdir=None, micropython=None, heapsize=None, faults=None, paced=True,
                 clock=ttystall.STALL):
        """clock: what the waits on the relay and the boards count (picoring.clock): the
        stall-aware one, as this machine's ptys may stand still."""
        self.clock = clock
        if n < 1:
            raise ValueError("a ring needs at least one board, got n=%d" % n)
        # Fault injection on every wire (docs/faults.md): a SPEC string or a FaultPlan,
        # armed when the ring starts (timed cuts count from there; set_faults re-arms).
        self.faults = FaultPlan.coerce(faults)
        if self.faults is not None:
            self.faults.check(n)
        self.n = n
        self.baud = baud
        self.paced = paced  # False: wires without wire time (Wire), for tests
        self.micropython = micropython or find_micropython()
        self.heapsize = heapsize
        self._own_workdir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else None
        self.boards = []
        self.wires = [Wire(i, baud, paced) for i in range(n)]
        self._thread = None
        self._stood_still = None  # the ring's clock (RingStoodStill), from start()
        self._calls = queue.Queue()
        self._on_call = None  # what call the relay is running now (its name)
        self._caller = threading.local()  # progress: what a caller does while its call runs
        self._wake_pipe = None  # the relay's (WakePipe)
        # The USB thread (module doc, usb.py): what hosts do with the boards' ports, as events
        # for the relay.
        self.usb = UsbSide(self.boards, self._wake, lambda: self._stopping)
        self._stopping = False
        self._stopped = False
        self._error = None
        self._lock = threading.Lock()
        self._board_faults = []  # the plan's timed board faults not yet due: [(monotonic time, kind, board, s)]

    @property
    def fram_image(self):
        """The path of the ring's FRAM image (the boards' shared I2C FRAM)."""
        return self.workdir / FRAM_IMAGE

    @property
    def ring_clock_file(self):
        """The path of the ring's clock for its boards' timeouts (RingStoodStill)."""
        return stood_still_file(self.workdir)

    # -- lifecycle -----------------------------------------------------------

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def start(self, timeout=15.0):
        """Create the ptys, start the relay thread and every board. Returns self."""
        if self._thread is not None:
            raise VirtualBoardError("ring already started")
        try:
            if self.workdir is None:
                self.workdir = Path(tempfile.mkdtemp(prefix="picoring-virtual-"))
            make_fram_image(self.workdir)
            self._stood_still = RingStoodStill(stood_still_file(self.workdir))
            for i in range(self.n):
                fs_dir = self.workdir / ("board%d" % i)
                fs_dir.mkdir(parents=True, exist_ok=True)
                self.boards.append(VirtualBoard(i, fs_dir, self.micropython, self.heapsize, self.workdir / ("usb%d" % i)))
            self._wake_pipe = WakePipe()
            _live_rings.add(self)
            self._arm_faults(self.faults)
            self._thread = threading.Thread(target=self._relay_main, name="picoring-virtual-ring", daemon=True)
            self._thread.start()
            self.usb.start()
            self._call(lambda: [b._spawn() for b in self.boards], timeout, "start the boards")
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self, timeout=10.0):
        """Kill every board, stop the relay, close the ptys. Safe to call twice."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
        self._stopping = True
        self._wake()
        self.usb.wake()
        for thread in (self._thread, self.usb.thread):
            if thread is not None and thread is not threading.current_thread():
                self._join(thread, timeout)
        errors = []
        for b in self.boards:  # the relay kills them on its way out; make sure
            try:
                b._kill()
            except VirtualBoardError as e:
                errors.append(str(e))
            b._close_fds()
        self.usb.close()
        if self._wake_pipe is not None:
            self._wake_pipe.close()
        _live_rings.discard(self)
        if self._own_workdir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if errors:
            raise VirtualBoardError("; ".join(errors))

    @staticmethod
    def _join(thread, timeout):
        # A signal (SIGTERM, Ctrl-C) can interrupt start() inside Thread.start(), before the new
        # thread said it runs; join() then raises "cannot join thread before it is started"
        # instead of the cleanup going on (seen: a SIGTERM of `run --virtual` under load). Such
        # a thread sees _stopping and ends at once, if it runs at all: a short wait for it.
        deadline = time.monotonic() + 1.0
        while True:
            try:
                thread.join(timeout)
                return
            except RuntimeError:
                if time.monotonic() > deadline:
                    return
                time.sleep(0.01)

    def running(self):
        return self._thread is not None and self._thread.is_alive() and not self._stopping

    def relay_thread_id(self):
        """The relay thread's kernel id (/proc/TID/schedstat: its waits for a CPU), None while no
        relay runs."""
        return self._thread.native_id if self.running() else None

    # -- control -------------------------------------------------------------

    def reset(self, i, run_main=True, timeout=10.0):
        """Restart board i: the process is killed and started again, so it runs main.py
        (run_main=False: straight to the REPL, like a Pico's safe mode). usb_path and
        the UART do not change; bytes in flight to the board are lost."""
        board = self._board(i)
        port = self._call(lambda: self._reset(board, run_main), timeout, "reset board %d" % i)
        # The host may write to the new process as soon as this returns (mpremote's Ctrl-C and
        # Ctrl-A): the USB thread's drain of what came before must be over by then, or it reads
        # those bytes away too and mpremote, whose pty read has no timeout, waits for ever (a
        # loaded suite run: "copy ...: no answer within 30.0s" right after the reset).
        if port is not None:
            deadline = self.clock.deadline(timeout)
            while not port.drained.wait(min(max(deadline.left(), 0.0), 0.1)) and not port.retired:
                if deadline.expired():
                    raise VirtualBoardError("board %d's USB input was not drained after its reset within %.1fs%s; "
                                            "the USB thread was at: %s" % (i, timeout, deadline.not_counted(),
                                                                           self._whereabouts(self.usb.thread)))

    def _reset(self, board, run_main=True):
        """Returns the board's host port whose drain the caller waits for (None: unplugged)."""
        board._kill()
        port = board.host_port
        if board.usb_present():
            # What the host wrote to the old process and the relay has not passed on yet is
            # lost with it, as a Pico's USB input is when it resets. Passed on, a Ctrl-C sent
            # to stop the old firmware stopped the new one at its start (a loaded machine's
            # relay had not read it before the reset). The USB thread reads the pty empty and
            # says so; until then what comes from it is dropped.
            port.drained.clear()
            port.drain = True
            board.discard_host = True
            self.usb.wake()
        board.off_until = None  # a reset while powered off powers it on
        board.run_main = run_main
        board.restarts += 1
        board._spawn()
        board.run_main = True
        self._usb_back_if_due(board, time.monotonic())
        return port

    def power_cycle(self, i, off=0.0, timeout=10.0):
        """Pull board i's power and give it back after `off` seconds: its process is killed
        (SIGKILL, no clean exit), what it had not yet put on its UART line is lost (the bytes
        already on the line still arrive), its USB link goes away (a host that has usb_path open
        gets a hang-up) and comes back under the same usb_path when it powers on, and it runs
        main.py again. With off=0 the path is back at once and the board starts right away."""
        board = self._board(i)
        self._call(lambda: self._power_cycle(board, off, time.monotonic()), timeout, "power-cycle board %d" % i)

    def unplug(self, i, seconds=None, timeout=10.0):
        """Pull board i's USB cable for `seconds` (None: until plug(i)). A host holding usb_path
        gets a hang-up, opening it fails, and what the board writes meanwhile is lost; the
        board keeps running (a Pico powered from VSYS). Then the port is back under usb_path."""
        board = self._board(i)
        if seconds is not None and not seconds >= 0:
            raise ValueError("unplug: seconds must be >= 0, got %r" % (seconds,))
        self._call(lambda: self._unplug(board, seconds, time.monotonic()), timeout, "unplug board %d" % i)

    def plug(self, i, timeout=10.0):
        """Plug board i's USB cable back in now (if it is powered, the port is back)."""
        board = self._board(i)

        def plug():
            board.unplugged_until = None
            self._usb_back_if_due(board, time.monotonic())

        self._call(plug, timeout, "plug board %d" % i)

    def _power_cycle(self, board, off, now):
        board._kill()
        board.drop_held()
        board.power_cycles += 1
        # Its TX FIFO dies with it: what it wrote that had not started on the line by now (what
        # the relay had not read yet goes onto the wire at the time it was written first, to
        # count what of it had started). Its USB output not yet relayed is lost too.
        wire = self.wires[board.index]
        for data, written in board.tx.take(1 << 30):
            wire.send(data, written)
        board.tx_lost += wire.sender_lost(now)
        board.usb_dropped += len(read_all(board.usb_out_fd))
        if off > 0:
            board.off_until = now + off
            if board.usb_present():
                self.usb.retire(board.usb_unplug())
        else:
            if board.usb_present():
                self.usb.retire(board.usb_plug())  # the host sees a hang-up and the port already back
            board._spawn()
            board.hold_until = now + _POWER_ON_HOLD_S

    def _unplug(self, board, seconds, now):
        board.unplugs += 1
        until = math.inf if seconds is None else now + seconds
        board.unplugged_until = max(until, board.unplugged_until or until)
        if board.usb_present():
            self.usb.retire(board.usb_unplug())

    def _usb_back_if_due(self, board, now):
        """Power the board on, and plug its USB link back, once their times have come."""
        if board.off_until is not None and board.off_until <= now:
            board.off_until = None
            board._spawn()
            board.hold_until = now + _POWER_ON_HOLD_S
        if board.unplugged_until is not None and board.unplugged_until <= now:
            board.unplugged_until = None
        if board.off_until is None and board.unplugged_until is None and not board.usb_present():
            self.usb.retire(board.usb_plug())

    def _next_board_timer(self):
        times = [t for b in self.boards for t in (b.off_until, b.unplugged_until) if t is not None]
        if self._board_faults:
            times.append(self._board_faults[0][0])
        return min(times) if times else math.inf

    def _board_timers(self, now):
        # A board that cannot be started or plugged in again must not stop the relay: the
        # rest of the ring keeps running, and status shows that board dead or unplugged.
        while self._board_faults and self._board_faults[0][0] <= now:
            _, kind, i, seconds = self._board_faults.pop(0)
            try:
                if kind == "restart":
                    self._power_cycle(self.boards[i], seconds, now)
                else:
                    self._unplug(self.boards[i], seconds, now)
            except OSError as e:
                print("picoring virtual ring: board %d: %s failed: %s" % (i, kind, e), file=sys.stderr)
        for b in self.boards:
            try:
                self._usb_back_if_due(b, now)
            except OSError as e:
                print("picoring virtual ring: board %d did not come back: %s" % (b.index, e), file=sys.stderr)

    def _board(self, i):
        if not 0 <= i < len(self.boards):
            raise VirtualBoardError("no board %r: the ring has boards 0..%d" % (i, self.n - 1))
        return self.boards[i]

    def wire(self, i):
        """The Wire from board i's TX to board (i+1) % n's RX."""
        if not 0 <= i < self.n:
            raise VirtualBoardError("no wire %r: the ring has wires 0..%d (wire i runs from board i to i+1)" % (i, self.n - 1))
        return self.wires[i]

    def cut(self, i, cut=True):
        """Cut (cut=False: mend) wire i; bytes in flight on it are lost."""
        self.wire(i).set_cut(cut)

    def set_faults(self, faults, timeout=10.0):
        """Replace the faults of every wire and the timed board faults (a SPEC string, a FaultPlan,
        or None for none). The plan's clock (timed cuts, restarts, unplugs) starts now; the
        wires' fault counters start from 0. A board already off or unplugged comes back as planned."""
        plan = FaultPlan.coerce(faults)
        if plan is not None:
            plan.check(self.n)
        self.faults = plan
        if self.running():
            self._call(lambda: self._arm_faults(plan), timeout, "set the faults")  # the relay owns the wires
        elif self._thread is None:
            self._arm_faults(plan)

    def _arm_faults(self, plan):
        now = time.monotonic()
        for i, w in enumerate(self.wires):
            w.faults = plan.for_wire(i, now) if plan is not None else None
        self._board_faults = [(now + at, kind, b, s) for at, kind, b, s in plan.board_events()] if plan else []

    def status(self):
        return {"n": self.n, "baud": self.baud, "paced": self.paced, "workdir": str(self.workdir), "running": self.running(),
                "faults": self.faults.describe() if self.faults is not None else None,
                "boards": [b.info() for b in self.boards],
                "wires": [w.counters() for w in self.wires]}

    def snapshot_text(self):
        """The ring as it is now, read without asking the relay (which may be what is stuck):
        where the relay thread is, each board's process and USB link, each wire's bytes."""
        lines = ["relay: %s" % (self._whereabouts(self._thread) if self.running() else "not running (%s)" % self._error),
                 "usb thread: %s" % self._whereabouts(self.usb.thread)]
        for b in self.boards:
            i = b.info()
            lines.append("board %d: pid %s alive %s restarts %d, USB %s host %s, to board %d from board %d dropped %d "
                         "queued for the host %d"
                         % (i["index"], i["pid"], i["alive"], i["restarts"], "present" if i["usb_present"] else "absent",
                            "attached" if i["host_attached"] else "not attached", i["usb_to_board"],
                            i["usb_from_board"], i["usb_dropped"], b.queued_for_host()))
        if self._stood_still is not None:
            # each look's CLOCK_MONOTONIC time too (a run's trace counts from RingRun.t0, the
            # same clock): a failure's regeneration is then placed among the looks exactly
            now = time.monotonic()
            lines.append("ring clock: %d ms stood still so far; the last looks 50 ms or more behind: %s" % (
                self._stood_still.stood_ns // 1_000_000, ", ".join(
                    "at %.3f (%.1f s ago) +%d ms (%s)" % (at, now - at, ms, who) for at, ms, who in self._stood_still.growths)
                or "none"))
        for w in self.wires:
            c = w.counters()
            lines.append("wire %d: in %d out %d in flight %d dropped %d overrun %d" % (
                c["wire"], c["bytes_in"], c["bytes_out"], c["in_flight"], c["bytes_dropped"], c["bytes_overrun"]))
        return "\n".join(lines)

    def _call(self, fn, timeout, what="a call"):
        """Run fn in the relay thread and wait for it (processes must be its children)."""
        if not self.running():
            raise VirtualBoardError("the virtual ring is not running%s"
                                    % (": %s" % self._error if self._error else ""))
        done = threading.Event()
        box = {}
        self._calls.put((fn, done, box, what))
        self._wake()
        # In time in which the serial ports delivered (ttystall), like every wait on a board: in
        # a loaded suite run the relay sat 15 s in subprocess's fork and exec of a board, and a
        # supervisor starting beside it did not even stop on SIGABRT for 30 s: the kernel stood
        # still, most likely as in its stalls of the serial ports.
        # `timeout` is for the relay to take the call up while it runs no other call. Once it
        # has (box["started"]), or while it runs calls queued before this one, it is at work:
        # that is waited for up to _CALL_IN_HAND_S, and the caller's progress() hears of it. (In
        # loaded suite runs a reset was given up on while the relay was in a board's fork and
        # exec, or in the kill of another board, for more than the caller's 10 s.)
        deadline = self.clock.deadline(timeout)
        at_work = None
        progress = getattr(self._caller, "progress", None)
        while not done.wait(0.1 if at_work else min(max(deadline.left(), 0.0), 0.1)):
            on_call = self._on_call
            if "started" in box or on_call is not None:
                at_work = at_work or self.clock.deadline(_CALL_IN_HAND_S)
                if at_work.expired():
                    raise VirtualBoardError("the virtual ring's relay has been at work on calls for %.1fs%s without "
                                            "getting to this one (%s); it is on: %s, at: %s"
                                            % (_CALL_IN_HAND_S, at_work.not_counted(), what,
                                               on_call or "?", self._whereabouts(self._thread)))
                deadline.restart()  # the relay is not stuck: the time to take this call up starts again
                if progress is not None:
                    progress()
            elif deadline.expired():
                raise VirtualBoardError("the virtual ring's relay did not answer within %.1fs%s (%s); it was at: %s"
                                        % (timeout, deadline.not_counted(), what, self._whereabouts(self._thread)))
        if "error" in box:
            raise box["error"]
        return box.get("result")

    @contextlib.contextmanager
    def reporting_progress(self, progress):
        """Within it, progress() is called about every 0.1 s while a call of this thread runs
        long in the relay (the supervisor tells its client it is still at work)."""
        self._caller.progress = progress
        try:
            yield
        finally:
            self._caller.progress = None

    @staticmethod
    def _whereabouts(thread):
        """Where a thread of the ring is now (its innermost frames): what a stuck one is stuck in."""
        frame = sys._current_frames().get(thread.ident) if thread is not None else None
        if frame is None:
            return "(not running)"
        return " < ".join("%s:%d %s" % (os.path.basename(f.filename), f.lineno, f.name)
                          for f in reversed(traceback.extract_stack(frame)[-7:]))

    def _wake(self):
        if self._wake_pipe is not None:
            self._wake_pipe.poke()

    # -- relay thread --------------------------------------------------------

    def _relay_main(self):
        try:
            _tight_timer_slack()
            self._relay_loop()
        except BaseException as e:  # noqa: BLE001 - recorded, then the boards are killed
            self._error = "%s: %s" % (type(e).__name__, e)
            print("picoring virtual ring: relay failed: %s" % self._error, file=sys.stderr)
        finally:
            self._stopping = True
            for b in self.boards:
                try:
                    b._kill()
                except VirtualBoardError:
                    pass
            while True:  # nobody will run the pending calls: release their waiters
                try:
                    fn, done, box, what = self._calls.get_nowait()
                except queue.Empty:
                    break
                box["error"] = VirtualBoardError("the virtual ring stopped")
                done.set()

    def _relay_loop(self):
        boards, wires, n = self.boards, self.wires, self.n
        next_housekeeping = 0.0
        next_board_timer = 0.0
        stood = self._stood_still
        while not self._stopping:
            top = now = time.monotonic()
            if now >= next_housekeeping:
                self._housekeeping(now)
                next_housekeeping = now + _HOUSEKEEPING_S
            # What to wait for.
            if now >= next_board_timer:
                self._board_timers(now)
                next_board_timer = self._next_board_timer()
            readers = {self._wake_pipe.r: None}
            writers = {}
            for b in boards:
                if b.queued_for_host() < _HOST_BACKLOG:
                    readers[b.usb_out_fd] = ("usb_out", b)
                host_fd = b.host_fd_to_write()
                if host_fd is not None:
                    writers[host_fd] = b
            for i, b in enumerate(boards):
                if wires[i].queued() < _WIRE_BACKLOG:
                    readers[b.tx.fd] = ("tx", i)
            # A frame's bytes go to the receiver up to RX_LEAD_S before they arrive, with their
            # time, and the receiver holds them until then (VirtualBoard.feed_rx): the relay is
            # woken that early, and its own wake-up (on this 2-core VM about 40 us late with a
            # 1 us timer slack) eats into the lead, not into the hop.
            wake_at = min(next_housekeeping, next_board_timer)
            for w in wires:
                due = w.next_due()
                if due is not None and due - RX_LEAD_S < wake_at:
                    wake_at = due - RX_LEAD_S
            t = time.monotonic()
            asked = max(0.0, wake_at - t)
            ready, writable = fdwait.wait(readers, writers, asked)
            now = time.monotonic()
            waited = now - t
            for fd in writable:
                writers[fd].flush_to_host()
            for fd in ready:
                what = readers[fd]
                if what is None:
                    self._wake_pipe.drain()
                    self.usb.take_events()
                    if self._run_calls():
                        next_board_timer = 0.0  # a call may have unplugged or powered off a board
                    continue
                kind, who = what
                if kind == "tx":
                    got = boards[who].take_tx()
                    for data, written in got:
                        wires[who].send(data, written)
                    if got:
                        stood.wrote(who)
                else:
                    who.to_host(read_some(fd))
            for i, w in enumerate(wires):
                if not w.queued():
                    continue  # nothing on its way: no records, and no fault times to look up
                records = w.take_records(now, self._release_until(i, now))
                if records:
                    sent = boards[(i + 1) % n].feed_rx(records, now)
                    w.delivered(sent)
                    if sent:
                        stood.delivered((i + 1) % n)
                    lost = sum(len(data) for data, _, _ in records) - sent
                    if lost:
                        w.overrun(lost)  # the receiver's buffer is full: a UART overrun
            stood.relay_pass(time.monotonic() - top, waited, asked)

    def _release_until(self, i, now):
        """How far ahead wire i's bytes may go to their receiver (feed_rx): RX_LEAD_S, but never
        past a fault that would lose them on the way: the wire's next cut, its sender's next
        power cycle (docs/faults.md). A fault called for by hand (cut, power_cycle) comes when
        the relay carries it out; the bytes already given count as arrived before it."""
        until = now + RX_LEAD_S
        cut = self.wires[i].next_fault_at()
        if cut is not None and cut < until:
            until = cut
        for at, kind, board, _ in self._board_faults:
            if at >= until:
                break
            if kind == "restart" and board == i:
                until = at
                break
        return max(now, until)

    def _housekeeping(self, now):
        if now >= self._stood_still.next_at:
            self._stood_still.update([b.proc.pid if b.proc is not None and b.proc.poll() is None else None
                                      for b in self.boards], pass_began=now)
        for b in self.boards:
            if not b.host_attached and b.hold_until is not None and now >= b.hold_until:
                b.drop_held()  # no host came for it
            if b.awaiting_flush_until is not None and now >= b.awaiting_flush_until:
                b.host_ready()  # a host that does not flush
            # A board that exited by itself (Ctrl-D in the REPL, sys.exit, a crash) restarts,
            # as a Pico soft-resets; at most once a second so a crashing main.py cannot spin.
            if (b.proc is not None and b.off_until is None and b.proc.poll() is not None
                    and now - b.started_at >= _RESTART_MIN_S):
                b.restarts += 1
                try:
                    b._spawn()
                except OSError as e:  # keep the rest of the ring running; status shows it dead
                    b.started_at = now
                    print("picoring virtual ring: board %d did not restart: %s" % (b.index, e), file=sys.stderr)

    def _run_calls(self):
        """Run the calls waiting for the relay thread; True if there were any. _on_call stays set
        from the first call to the last: a caller queued behind them sees the relay at work."""
        ran = False
        try:
            while True:
                try:
                    fn, done, box, what = self._calls.get_nowait()
                except queue.Empty:
                    return ran
                ran = True
                since = time.monotonic()
                self._on_call = what
                box["started"] = True
                try:
                    box["result"] = fn()
                except Exception as e:  # noqa: BLE001 - handed to the caller
                    box["error"] = e
                took = time.monotonic() - since
                if took > _CALL_SLOW_S:
                    print("picoring virtual ring: %s took the relay %.1f s (a loaded machine)" % (what, took),
                          file=sys.stderr)
                done.set()
        finally:
            self._on_call = None


def write_state(path, data):
    """Write JSON atomically (readers never see half a file)."""
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def make_fram_image(workdir):
    """The ring's FRAM image in workdir, zeros, unless it is there: a chip keeps its memory
    (the host sets the counter before each run anyway)."""
    path = Path(workdir) / FRAM_IMAGE
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists() or path.stat().st_size != FRAM_SIZE:
        path.write_bytes(bytes(FRAM_SIZE))
    return path
