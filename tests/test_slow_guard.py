"""The fast tier's guard (tests/conftest.py, tests/slowguard): a test that starts MicroPython,
itself or through a Python process it starts, fails without the `slow` mark."""

import shutil

import pytest

from conftest import ROOT

pytest_plugins = ["pytester"]

INNER = '''
import subprocess, sys
import pytest
from conftest import find_micropython

def test_unmarked_direct():
    subprocess.run([find_micropython(), "-c", "pass"], check=True)

def test_unmarked_in_a_child():
    code = "import subprocess, sys; subprocess.run([sys.argv[1], '-c', 'pass'], check=True)"
    subprocess.run([sys.executable, "-c", code, find_micropython()], check=True)

@pytest.mark.slow
def test_marked():
    subprocess.run([find_micropython(), "-c", "pass"], check=True)

def test_starts_nothing():
    subprocess.run([sys.executable, "-c", "pass"], check=True)

@pytest.mark.cpu
def test_marked_cpu_yet_starts_micropython():
    subprocess.run([find_micropython(), "-c", "pass"], check=True)

@pytest.mark.cpu
def test_marked_cpu_and_only_computes():
    assert sum(range(1000)) == 499500
'''


@pytest.mark.slow
def test_a_test_that_starts_micropython_without_the_slow_mark_fails(pytester):
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    shutil.copytree(ROOT / "tests" / "slowguard", pytester.path / "slowguard")
    pytester.makeini("[pytest]\nmarkers =\n    slow: s\n    boards: b\n    rp2040: r\n    cpu: c\n")
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3, failed=3)
    # a `cpu` test runs beside the slow tier's rings (.ci/run): it must start none of its own
    result.stdout.fnmatch_lines(["*::test_marked_cpu_yet_starts_micropython is marked `cpu` but starts *micropython*"])
    # and it is slow: `pytest -m "not slow"` leaves it out
    quick = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-m", "not slow")
    quick.assert_outcomes(passed=1, failed=2, deselected=3)
    result.stdout.fnmatch_lines(["*::test_unmarked_direct starts *micropython without the `slow` mark*"])
    result.stdout.fnmatch_lines(["*::test_unmarked_in_a_child starts *micropython (in a child process)*"])
    assert "test_inner.py::test_unmarked_in_a_child" in result.stdout.str()
    # once per unmarked test in the failures (the short summary repeats the message, in full
    # where CI is set: pytest cuts it to the terminal's width elsewhere)
    said = [line for line in result.stdout.lines if line.startswith("test_inner.py::") and "without the `slow` mark" in line]
    assert len(said) == 2, said
