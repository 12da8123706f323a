"""A virtual ring in a process of its own, driven with VirtualRing's calls.

`picoring run --virtual`, `demo`, `compare --virtual`, `dash --virtual` and `bench ring` start
their ring here: a supervisor (supervisor.py, as `picoring virtual up` starts one) in a
temporary state directory, which stops with the command's process. Why not in the command's
own process: the relay paces every wire byte and wakes every few hundred microseconds at
1 Mbaud, and in-process it shared the interpreter lock with the host's link readers, which parse
the boards' event lines in bursts (issue 18 item 8: `picoring bench ring`). The calls that
deploy, the harness and the benches make of an in-process VirtualRing go to the supervisor
over its socket: reset, power_cycle, unplug, plug, set_faults, status, a board's
wait_output; wire and board counters are read from its status.
"""

import shutil
import tempfile
from pathlib import Path

from . import supervisor
from .board import VirtualBoardError
from .boards import FRAM_IMAGE
from .ringclock import stood_still_file


def _answer_wait(timeout):
    """The wait for the supervisor's answer to a call the ring gets `timeout` to take up."""
    return max(timeout, supervisor.REQUEST_TIMEOUT_S)


class RemoteBoard:
    """One board of a RemoteRing: what a VirtualBoard tells without its process."""

    def __init__(self, ring, state):
        self._ring = ring
        self.index = state["index"]
        self.usb_path = state["usb"]
        self.uart = state["uart"]
        self.fs_dir = state["fs_dir"]

    def info(self):
        return self._ring.status()["boards"][self.index]

    @property
    def pid(self):
        return self.info()["pid"]

    def alive(self):
        return self.info()["alive"]

    def wait_output(self, marker, timeout=10.0):
        """Until the board wrote marker since its last (re)start; returns its output so far."""
        return supervisor.wait_output(self._ring.workdir, self.index, marker, timeout)


class WireCounters(dict):
    """A wire's counters from the supervisor's status, read as a Wire's: w.counters(), w.bytes_out."""

    def counters(self):
        return dict(self)

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class RemoteRing:
    """A ring of n virtual boards in a supervisor process (module doc). start() and stop(), or
    `with`; workdir None: a temporary directory, removed by stop()."""

    def __init__(self, n, baud=115200, workdir=None, heapsize=None, faults=None, paced=True):
        self.n = n
        self.baud = baud
        self.heapsize = heapsize
        self.faults = faults
        self.paced = paced
        self._own_dir = workdir is None
        self.workdir = Path(workdir) if workdir is not None else None
        self.boards = []
        self.supervisor_pid = None
        self.clock = supervisor.CLOCK  # (picoring.clock: what waits on its boards count)

    def start(self, timeout=30.0):
        if self.workdir is None:
            self.workdir = Path(tempfile.mkdtemp(prefix="picoring-virtual-"))
        try:
            state = supervisor.up(self.workdir, self.n, baud=self.baud, heapsize=self.heapsize, timeout=timeout,
                                  faults=self.faults, paced=self.paced, attached=True, temporary=self._own_dir)
        except BaseException:
            self._remove_dir()
            raise
        self.supervisor_pid = state["supervisor_pid"]
        self.boards = [RemoteBoard(self, b) for b in state["boards"]]
        return self

    def stop(self, timeout=10.0):
        """Stop the supervisor (its boards die with it). Safe to call twice."""
        try:
            if self.workdir is not None and supervisor.is_up(self.workdir):
                supervisor.down(self.workdir, timeout)
        finally:
            self._remove_dir()

    def _remove_dir(self):
        if self._own_dir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    @property
    def fram_image(self):
        return self.workdir / FRAM_IMAGE

    @property
    def ring_clock_file(self):
        return stood_still_file(self.workdir)

    def running(self):
        return self.workdir is not None and supervisor.is_up(self.workdir)

    def status(self):
        return supervisor.status(self.workdir)

    def snapshot_text(self):
        """VirtualRing.snapshot_text, from the supervisor; what went wrong if it did not answer."""
        try:
            return supervisor.snapshot(self.workdir)
        except VirtualBoardError as e:
            return "the ring's supervisor gave no snapshot: %s" % e

    @property
    def wires(self):
        return [WireCounters(w) for w in self.status()["wires"]]

    def wire(self, i):
        return self.wires[i]

    def reset(self, i, run_main=True, timeout=10.0):
        supervisor.reset(self.workdir, i, repl=not run_main, timeout=_answer_wait(timeout))

    def power_cycle(self, i, off=0.0, timeout=10.0):
        supervisor.power_cycle(self.workdir, i, off, timeout=_answer_wait(timeout))

    def unplug(self, i, seconds=None, timeout=10.0):
        supervisor.unplug(self.workdir, i, seconds, timeout=_answer_wait(timeout))

    def plug(self, i, timeout=10.0):
        supervisor.plug(self.workdir, i, timeout=_answer_wait(timeout))

    def cut(self, i, is_cut=True, timeout=10.0):
        supervisor.cut(self.workdir, i, is_cut, timeout=_answer_wait(timeout))

    def set_faults(self, faults, timeout=10.0):
        """As VirtualRing.set_faults: a SPEC string, a FaultPlan, or None."""
        from .wire import FaultPlan

        plan = FaultPlan.coerce(faults)
        if plan is not None:
            plan.check(self.n)
        self.faults = plan
        supervisor.set_faults(self.workdir, plan.describe() if plan is not None else None, timeout=_answer_wait(timeout))
