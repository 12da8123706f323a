"""deploy's mpremote runs: how long a copy may take."""

import sys
import time

from picoring.ring import deploy

STEADY = "import time\nfor i in range(6):\n    print('cp f%d.py :f%d.py' % (i, i))\n    time.sleep(0.2)\n"
STUCK = "import time\nprint('cp f0.py :f0.py')\ntime.sleep(30)\n"


def test_a_copy_that_keeps_printing_progress_is_not_cut_off():
    # Ten files through an RFC 2217 server on a loaded machine took longer than the whole copy's
    # budget and were cut off half-copied: the budget is for silence, not for the whole copy.
    r = deploy._run_watched([sys.executable, "-c", STEADY], quiet_timeout=0.6)  # 1.2 s in all
    assert not r.timed_out and r.returncode == 0
    assert r.stdout.decode().splitlines()[-1] == "cp f5.py :f5.py"


def test_a_copy_that_stops_printing_is_killed_and_says_how_far_it_got():
    r = deploy._run_watched([sys.executable, "-c", STUCK], quiet_timeout=0.5)
    assert r.timed_out and r.returncode != 0
    assert deploy.copy_progress(r.stdout) == (["f0.py"], [])


def test_a_copy_silent_while_the_serial_ports_stood_still_is_not_cut_off():
    # mpremote went silent for 30 s under two busy loops while a loaded machine's tty worker
    # stood still (a pty took 7.7 s to deliver a byte), and the copy was killed as a board that
    # does not answer. The silence counted is the time in which the serial ports delivered
    # (the stall-aware clock): here 0.9 s of silence (and the start of a Python), all of it
    # stalled, against a budget of 0.5 s.
    from conftest import StalledClock

    t0 = time.monotonic()
    clock = StalledClock(lambda: min(time.monotonic() - t0, 5.0))
    r = deploy._run_watched([sys.executable, "-c", "import time; time.sleep(0.9); print('cp f0.py :f0.py')"],
                            quiet_timeout=0.5, clock=clock)
    assert not r.timed_out and r.returncode == 0
