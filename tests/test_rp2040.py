"""The firmware on one emulated Pico (upstream MicroPython v1.28.0, rp2 port), through
../shared/rp2040/exec: a script runs in the raw REPL with the firmware's .py files on
the board's filesystem (--upload firmware). Marker `rp2040`; skipped, with the reason,
where that folder is not (it sits beside the repository in CI: .ci/run runs these with
the board tests, `pytest -m rp2040` runs them by hand).

What the unix port hides and a Pico does not: 30-bit small ints (a 32-bit mask is a heap
long int), a small heap, and Python 100 to 200 times slower. Add tests that need the
chip here; run_on_pico() is the one way in.
"""

import subprocess
import sys
import time

import pytest

from conftest import FIRMWARE, ROOT

pytestmark = pytest.mark.rp2040

RP2040 = ROOT.parent / "shared" / "rp2040"
EXEC = RP2040 / "exec"


def run_on_pico(tmp_path, script, upload=True, chip_timeout_s=60, wall_timeout_s=300):
    """Run `script` (text) on a freshly booted emulated Pico; returns (exit status, stdout,
    stderr). Status 0, 1 if the script raised (traceback on stderr), 124 past chip_timeout_s
    of chip time. The wall timeout only guards against a hung emulator: chip time runs
    5-20x slower than wall time on a busy machine."""
    if not EXEC.exists():
        pytest.skip("needs an emulated Pico: %s is not here (the rp2040 folder beside the repository, "
                    "as in CI)" % EXEC)
    path = tmp_path / "pico_script.py"
    path.write_text(script)
    cmd = [str(EXEC), str(path), "--timeout", str(chip_timeout_s)] + (["--upload", str(FIRMWARE)] if upload else [])
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=wall_timeout_s, stdin=subprocess.DEVNULL)
    sys.stderr.write("exec %s: %.1f s wall\n%s" % (path.name, time.monotonic() - t0, proc.stderr))
    return proc.returncode, proc.stdout, proc.stderr


def node_bench_script(*args):
    """tests/mp_node_bench.py as one exec script: its command line set in sys.argv (the raw
    REPL has none), the firmware imported from the board's filesystem."""
    return ("import sys\nsys.argv.clear()\nsys.argv.extend(%r)\n" % (["mp_node_bench.py", ""] + list(args))
            + (ROOT / "tests" / "mp_node_bench.py").read_text())


class AllocatedUnderHeapLock(Exception):
    """The script died of MemoryError under micropython.heap_lock(): the code allocated."""


@pytest.mark.xfail(strict=True, raises=AllocatedUnderHeapLock, reason="firmware allocates per hop; issue 11")
def test_node_loop_allocates_nothing_on_a_pico(tmp_path):
    """The steady-state node loop of a ring of 3 (in-memory wires; protocol S; events
    recorded and flushed to a null host link, as a board does) runs 300 rounds under
    micropython.heap_lock() on the rp2 port: any allocation raises MemoryError. The unix
    port passes the same check (mp_node_bench.py ... lock), its 62-bit small ints hiding
    `seq & 0xFFFFFFFF` and the like. Only a MemoryError is the expected failure: anything
    else (the emulator, an import error, a timeout) fails the test."""
    status, out, err = run_on_pico(tmp_path, node_bench_script("s", "3", "300", "1", "1", "lock"))
    if status == 1 and "MemoryError" in err:
        raise AllocatedUnderHeapLock(err[-1000:])
    assert status == 0 and out.strip() == "no allocation in 300 rounds", (status, out, err[-2000:])
