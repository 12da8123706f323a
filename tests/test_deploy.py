"""deploy's mpremote runs: how long a copy may take."""

import os
import sys
import threading
import time

import pytest

from conftest import FakeClock
from picoring.ring import deploy

# The copy stands in: a Python that prints one progress line for each line the test cues it with
# (through a FIFO), and ends when the test closes it. The silence is measured by the test's own
# clock (FakeClock), which moves only when the test says: a loaded machine that is slow to start
# the Python or to read its lines cannot make a copy look silent (at a load of 20 the wall-clock
# version of these tests, with 0.5 s budgets, was killed as silent).
# (each line in one write: the watcher hears it once; print writes the line's end on its own)
CUED = ("import sys\n"
        "cue = open(sys.argv[1])\n"
        "for line in iter(cue.readline, ''):\n"
        "    sys.stdout.write(line)\n"
        "    sys.stdout.flush()\n")


def _cued_copy(tmp_path, quiet_timeout, clock, cues, end=True):
    """_run_watched on a cued copy: for each (line, seconds, stalled) of cues, the copy prints line
    (and the test waits until the watcher has heard it), then `seconds` go by on clock, `stalled`
    of them with the serial ports standing still. end: the copy is told to end once the cues are
    done; else it is left silent (until the watcher kills it)."""
    fifo = tmp_path / "cue"
    os.mkfifo(fifo)
    result = []
    watcher = threading.Thread(target=lambda: result.append(
        deploy._run_watched([sys.executable, "-c", CUED, str(fifo)], quiet_timeout=quiet_timeout, clock=clock)))
    watcher.start()
    with open(fifo, "w") as cue:  # (waits for the copy to open its end)
        heard = clock.restarts
        for line, seconds, stalled in cues:
            if line is not None:
                cue.write(line + "\n")
                cue.flush()
                heard += 1
                clock.restarted(heard)
            clock.advance(seconds, stalled)
        if not end:
            watcher.join(60)
    watcher.join(60)
    assert not watcher.is_alive()
    return result[0]


def test_a_copy_that_keeps_printing_progress_is_not_cut_off(tmp_path):
    # Ten files through an RFC 2217 server on a loaded machine took longer than the whole copy's
    # budget and were cut off half-copied: the budget is for silence, not for the whole copy.
    clock = FakeClock()
    cues = [("cp f%d.py :f%d.py" % (i, i), 0.5, 0.0) for i in range(6)]  # 3 s in all, 0.5 s at a time
    r = _cued_copy(tmp_path, 0.6, clock, cues)
    assert not r.timed_out and r.returncode == 0
    assert r.stdout.decode().splitlines()[-1] == "cp f5.py :f5.py"


def test_a_copy_that_stops_printing_is_killed_and_says_how_far_it_got(tmp_path):
    clock = FakeClock()
    r = _cued_copy(tmp_path, 0.5, clock, [("cp f0.py :f0.py", 0.5, 0.0)], end=False)
    assert r.timed_out and r.returncode != 0
    assert deploy.copy_progress(r.stdout) == (["f0.py"], [])


def test_a_copy_silent_while_the_serial_ports_stood_still_is_not_cut_off(tmp_path):
    # mpremote went silent for 30 s under two busy loops while a loaded machine's tty worker
    # stood still (a pty took 7.7 s to deliver a byte), and the copy was killed as a board that
    # does not answer. The silence counted is the time in which the serial ports delivered
    # (the stall-aware clock): here 0.9 s of silence, all of it stalled, against a budget of 0.5 s.
    clock = FakeClock()
    r = _cued_copy(tmp_path, 0.5, clock, [(None, 0.9, 0.9), ("cp f0.py :f0.py", 0.0, 0.0)])
    assert not r.timed_out and r.returncode == 0


def test_the_progress_bars_are_taken_out_of_what_mpremote_printed():
    # What mpremote_run prints for a copy of two files, the first one large (a bar redrawn after
    # each chunk, then cleared), one up to date: the caller parses the lines of a pipe's output.
    out = (b"cp a.py :a.py\n\r ... copying   2% [--------------------]\r ... copying  99% [###################-]"
           b"\r" + b" " * 40 + b"\rcp b.py :b.py\nUp to date: c.py\n")
    assert deploy.strip_progress(out) == b"cp a.py :a.py\ncp b.py :b.py\nUp to date: c.py\n"
    assert deploy.copy_progress(deploy.strip_progress(out)) == (["a.py", "b.py"], ["c.py"])
    assert deploy.strip_progress(b"ok\r\n") == b"ok\r\n"  # a board's own line ends stay


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


def _copy_firmware(copy):
    """A stand-in for deploy.copy_firmware that calls copy(port, cfg, files) and answers as a
    MicroPython board would."""
    def copy_firmware(port, cfg, files, compiler, no_compiler, timeout, clock=None, digests=None, expect=None):
        copy(port, cfg, files)
        return {"copied": [], "up_to_date": [], "removed": [], "output": b""}, {"implementation": "micropython"}, {}
    return copy_firmware


@pytest.fixture
def no_compiler(monkeypatch):
    """No mpy-cross and no unix port asked (a fast test starts no MicroPython)."""
    monkeypatch.setattr(deploy, "find_compiler", lambda: (None, "no mpy-cross in this test"))
    monkeypatch.setattr(deploy, "unix_port_tag", lambda: None)


def test_deploy_virtual_copies_to_every_board_at_once_then_starts_them_in_order(monkeypatch, no_compiler):
    # One board after the other, the copies were most of each `run --virtual` (6 to 20 s of
    # a 36 s test on a ring of 3). Each copy here waits until all three have begun.
    import threading

    ring = _FakeRing(3)
    all_begun = threading.Barrier(3, timeout=10)
    copied = []

    def copy(port, config, files):
        all_begun.wait()  # (broken, and the test fails, if the copies ran one at a time)
        copied.append((port, config["position"], config["virtual"]))

    monkeypatch.setattr(deploy, "copy_firmware", _copy_firmware(copy))
    deploy.deploy_virtual(ring, {"protocol": "q", "cs_us": 0})
    assert sorted(copied) == [("usb%d" % i, i, {"uart": "u%d" % i}) for i in range(3)]
    assert ring.said == ([("reset", i, False) for i in range(3)] + [("waited", i, b">>> ") for i in range(3)]
                         + [("reset", 1, True), ("waited", 1, b"!hello"), ("reset", 2, True), ("waited", 2, b"!hello"),
                            ("reset", 0, True), ("waited", 0, b"!hello")])


def test_deploy_virtual_reports_the_first_failed_copy_once_every_copy_has_ended(monkeypatch, no_compiler):
    ring = _FakeRing(3)
    copied = []

    def copy(port, config, files):
        if port != "usb0":
            time.sleep(0.2)  # (still copying when board 1's copy fails)
            copied.append(port)
        if port in ("usb1", "usb2"):
            raise deploy.DeployError("copy to %s failed" % port)

    monkeypatch.setattr(deploy, "copy_firmware", _copy_firmware(copy))
    with pytest.raises(deploy.DeployError, match="^copy to usb1 failed$"):
        deploy.deploy_virtual(ring, {"protocol": "q", "cs_us": 0})
    assert sorted(copied) == ["usb1", "usb2"]  # board 2's copy ended too
    assert not any(what == "reset" and run_main for what, _, run_main in ring.said)  # no board started


def test_a_virtual_board_gets_only_its_protocols_module_as_flash_copies_it(monkeypatch, no_compiler):
    # Every firmware/*.py (every protocol's module, 310 KB) went to each virtual board through
    # mpremote's 256-byte writes: most of a `run --virtual`. The virtual deploy now copies as
    # `picoring flash` does: the firmware files of the config's protocol, in copy_firmware.
    ring = _FakeRing(2)
    got = []
    monkeypatch.setattr(deploy, "copy_firmware", _copy_firmware(lambda port, cfg, files: got.append(files)))
    deploy.deploy_virtual(ring, [{"protocol": "raymond:tree=path"}, {"protocol": "raymond:tree=path", "rogue": True}])
    names = [p.name for p in got[0]]
    assert got == [deploy.firmware_files(protocol="raymond")] * 2
    assert "proto_raymond.py" in names and "node.py" in names and "main.py" in names
    assert not [n for n in names if n.startswith("proto_") and n != "proto_raymond.py"]


def test_an_unknown_protocol_is_refused_before_any_copy(monkeypatch, no_compiler):
    ring = _FakeRing(2)
    got = []
    monkeypatch.setattr(deploy, "copy_firmware", _copy_firmware(lambda port, cfg, files: got.append(port)))
    with pytest.raises(deploy.DeployError, match="unknown protocol 'nope'"):
        deploy.deploy_virtual(ring, {"protocol": "nope"})
    assert got == [] and not any(what == "reset" and run_main for what, _, run_main in ring.said)


# -- mpremote's own waits -------------------------------------------------------------------

class _SlowPasteBoard:
    """A MicroPython raw REPL on a TCP socket (socket://127.0.0.1:PORT, which mpremote opens as
    it opens rfc2217:// URLs: not a pty, so its own 10 s waits apply) that takes `ack_after` s to
    acknowledge a raw paste's end, as a board behind a stalled ser2net once did, then runs
    print(1)."""

    BANNER = b"raw REPL; CTRL-B to exit\r\n>"

    def __init__(self, ack_after):
        import socket

        self.ack_after = ack_after
        self.pasted = bytearray()
        self._server = socket.create_server(("127.0.0.1", 0))
        self.url = "socket://127.0.0.1:%d" % self._server.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        import struct

        conn, _ = self._server.accept()
        with conn:
            state = "repl"
            for byte in iter(lambda: conn.recv(1), b""):
                if state == "paste":
                    if byte != b"\x04":
                        self.pasted += byte
                        continue
                    time.sleep(self.ack_after)
                    conn.sendall(b"\x04" + b"1\r\n\x04\x04>")
                    state = "repl"
                elif state == "ctrl-e":  # \x05 A \x01: raw paste asked for
                    state = "ctrl-e A" if byte == b"A" else "repl"
                elif state == "ctrl-e A" and byte == b"\x01":
                    conn.sendall(b"R\x01" + struct.pack("<H", 4096))  # a window for all of it
                    state = "paste"
                elif byte == b"\x05":
                    state = "ctrl-e"
                elif byte == b"\x01":
                    conn.sendall(self.BANNER)

    def close(self):
        self._server.close()


@pytest.mark.slow
def test_a_board_slow_to_end_a_raw_paste_is_waited_for_by_the_callers_clock():
    # mpremote gave up after 10 s of wall time waiting for a board's Ctrl-D at a raw paste's end
    # ("could not complete raw paste: b''", a labgrid copy through ser2net beside three busy
    # loops). Its waits are now the caller's: 30 s of quiet by the ring's clock.
    board = _SlowPasteBoard(ack_after=11)
    try:
        out = deploy.exec_code(board.url, "print(1)", timeout=30)
    finally:
        board.close()
    assert out.strip() == b"1"
    assert bytes(board.pasted) == b"print(1)"


def test_mpremotes_waits_for_a_boards_bytes_are_left_to_the_caller():
    from picoring.ring.mpremote_run import leave_waits_to_caller

    class Transport:  # mpremote's SerialTransport.read_until, as it is called there
        def read_until(self, min_num_bytes, ending, timeout=10, data_consumer=None, timeout_overall=None):
            self.asked = (ending, timeout, timeout_overall, data_consumer)
            return ending

    leave_waits_to_caller(Transport)
    t = Transport()
    consumer = print
    assert t.read_until(1, b"\x04") == b"\x04" and t.asked == (b"\x04", None, None, None)
    t.read_until(1, b"raw REPL; CTRL-B to exit\r\n", timeout_overall=10)
    assert t.asked == (b"raw REPL; CTRL-B to exit\r\n", None, None, None)
    t.read_until(1, b"\x04", timeout=10, data_consumer=consumer)
    assert t.asked == (b"\x04", None, None, consumer)


def test_the_first_boards_boot_deadline_scales_by_the_rings_own_clock(monkeypatch):
    """flash confirms each board within CONFIRM_TIMEOUT of a Pico's time: the boards started
    before it measure how slow the ring runs (their pings), and for the first, which has none
    before it, the ring's own count of its boards' time (clock_rate: an emulated ring's chip
    time). A loaded machine ran an emulated Pico's boot at a twentieth of a Pico's speed, and its
    "no 'hello' reply within 20.0 s" failed `bench ring --emulated`."""
    from picoring.ring import flash
    from picoring.ring.ports import Target

    waited = []
    monkeypatch.setattr(flash, "check_port", lambda t: None)
    monkeypatch.setattr(flash, "make_config", lambda t, position, *a: {"position": position})
    monkeypatch.setattr(deploy, "copy_firmware", lambda *a, **k: (
        {"copied": [], "up_to_date": [], "removed": []}, {"implementation": "micropython"},
        {"compiled": [], "notes": []}))
    monkeypatch.setattr(flash, "open_link", lambda *a, **k: type("Link", (), {"close": lambda self: None})())
    monkeypatch.setattr(flash, "restart", lambda link, t: None)
    monkeypatch.setattr(flash, "confirm", lambda link, cfg, fw, timeout: waited.append(timeout) or {})
    monkeypatch.setattr(flash, "clock_rates", lambda links, clock=None: [0.5])  # each board's pings
    targets = [Target("/dev/ttyACM%d" % i) for i in range(3)]
    flash.flash(targets, "s", mpy=False, clock_rate=lambda: 0.05)
    assert waited == [flash.CONFIRM_TIMEOUT * 20] * 3  # the slower of the ring's and the pings'
    waited.clear()
    flash.flash(targets, "s", mpy=False)  # real boards: no ring clock
    assert waited == [flash.CONFIRM_TIMEOUT, flash.CONFIRM_TIMEOUT * 2, flash.CONFIRM_TIMEOUT * 2]
