"""deploy's mpremote runs: how long a copy may take."""

import sys
import time

import pytest

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


class _FakeRing:
    """What deploy_virtual asks of a ring, recorded."""

    def __init__(self, n):
        from types import SimpleNamespace

        self.n, self.baud, self.fram_image, self.ring_clock_file, self.clock = n, 115200, None, None, None
        self.said = []
        self.boards = [SimpleNamespace(index=i, uart="u%d" % i, usb_path="usb%d" % i,
                                       wait_output=lambda text, timeout, i=i: self.said.append(("waited", i, text)))
                       for i in range(n)]

    def reset(self, index, run_main=True):
        self.said.append(("reset", index, run_main))


def test_deploy_virtual_copies_to_every_board_at_once_then_starts_them_in_order(monkeypatch):
    # One board after the other, the copies were most of each `run --virtual` (6 to 20 s of
    # a 36 s test on a ring of 3). Each copy here waits until all three have begun.
    import threading

    ring = _FakeRing(3)
    all_begun = threading.Barrier(3, timeout=10)
    copied = []

    def deploy_board(port, config, files, timeout, clock=None):
        all_begun.wait()  # (broken, and the test fails, if the copies ran one at a time)
        copied.append((port, config["position"], config["virtual"]))

    monkeypatch.setattr(deploy, "deploy_board", deploy_board)
    deploy.deploy_virtual(ring, {"protocol": "q", "cs_us": 0})
    assert sorted(copied) == [("usb%d" % i, i, {"uart": "u%d" % i}) for i in range(3)]
    assert ring.said == ([("reset", i, False) for i in range(3)] + [("waited", i, b">>> ") for i in range(3)]
                         + [("reset", 1, True), ("waited", 1, b"!hello"), ("reset", 2, True), ("waited", 2, b"!hello"),
                            ("reset", 0, True), ("waited", 0, b"!hello")])


def test_deploy_virtual_reports_the_first_failed_copy_once_every_copy_has_ended(monkeypatch):
    ring = _FakeRing(3)
    copied = []

    def deploy_board(port, config, files, timeout, clock=None):
        if port != "usb0":
            time.sleep(0.2)  # (still copying when board 1's copy fails)
            copied.append(port)
        if port in ("usb1", "usb2"):
            raise deploy.DeployError("copy to %s failed" % port)

    monkeypatch.setattr(deploy, "deploy_board", deploy_board)
    with pytest.raises(deploy.DeployError, match="^copy to usb1 failed$"):
        deploy.deploy_virtual(ring, {"protocol": "q", "cs_us": 0})
    assert sorted(copied) == ["usb1", "usb2"]  # board 2's copy ended too
    assert not any(what == "reset" and run_main for what, _, run_main in ring.said)  # no board started
