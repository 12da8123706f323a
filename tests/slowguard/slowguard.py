"""What makes a test slow, seen where processes start: shared by tests/conftest.py (the test
process) and this folder's sitecustomize.py (the Python processes a test starts, such as a
`picoring` command, which may start a ring in turn)."""

import os
import subprocess
from pathlib import Path

SLOW_PROGRAMS = ("micropython", "node")
SLOW_MODULES = ("picoring.virtual.supervisor",)
# the environment variables that hand the guard to child Pythons (tests/conftest.py sets them)
LOG_VAR, TEST_VAR = "PICORING_SLOW_GUARD_LOG", "PICORING_SLOW_GUARD_TEST"


def starts_a_board(argv):
    """What argv starts that makes a test slow (its program or module), or None: a MicroPython
    process, node (an emulated Pico), a ring's supervisor, a script of ../shared/rp2040."""
    if isinstance(argv, (str, bytes, os.PathLike)):
        argv = [argv]
    for arg in argv:
        arg = os.fsdecode(arg) if isinstance(arg, (bytes, os.PathLike)) else str(arg)
        path = Path(arg)
        if path.name in SLOW_PROGRAMS or arg in SLOW_MODULES or path.parent.name == "rp2040":
            return arg
    return None


def watch_popen(on_start):
    """Call on_start(what) for every subprocess.Popen that starts_a_board; returns the undo."""
    popen_init = subprocess.Popen.__init__

    def __init__(self, args, *a, **kw):
        what = starts_a_board(args)
        if what is not None:
            on_start(what)
        popen_init(self, args, *a, **kw)

    subprocess.Popen.__init__ = __init__

    def undo():
        subprocess.Popen.__init__ = popen_init

    return undo


def log_to_file():
    """In a child Python of a test: what it starts goes to the guard's log, one line each."""
    log, test = os.environ.get(LOG_VAR), os.environ.get(TEST_VAR)
    if not (log and test):
        return

    def on_start(what):
        with open(log, "a") as f:
            f.write("%s\t%s\n" % (test, what))

    watch_popen(on_start)
