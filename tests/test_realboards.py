"""Real boards, tested with virtual ones standing in: board files, wiring, port
names (paths, id:SERIAL, URLs), flash, discover, the rp2 hardware layer, the
pytest plugin, and the error paths a user meets with real hardware.

Waits are for conditions, with generous timeouts for a loaded 2-core machine."""

import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import xml.dom.minidom
from types import SimpleNamespace

import pytest
import serial
import serial.rfc2217

from conftest import FIRMWARE, ROOT, run_micropython, wait_for
from picoring.ring import boarddefs
from picoring.ring import deploy
from picoring.ring import discover
from picoring.ring import flash
from picoring.ring import ports
from picoring.ring import wiring
from picoring.virtual import supervisor
from picoring.cli.main import main
from picoring.ring.harness import RingRun
from picoring.virtual.boards import VirtualRing
from picoring.sim.workload import make_workload

pytest_plugins = ["pytester"]
TIMEOUT = 30.0
sys.path.insert(0, str(FIRMWARE))
import frame  # noqa: E402  (the firmware's own codec)


# -- board files ---------------------------------------------------------------

def test_board_files_name_uart0_on_gp0_gp1_and_micropythons_usb_id():
    assert boarddefs.names() == ["pico", "pico2", "picow"]
    leds = {}
    for name in boarddefs.names():
        b = boarddefs.load(name)
        assert (b["uart"]["id"], b["uart"]["tx"], b["uart"]["rx"]) == (0, 0, 1)
        assert boarddefs.vid_pid(b) == (0x2E8A, 0x0005)
        assert b["baud"] == 115200
        # rp2 machine_uart.c takes 32..32766; a burst of 64 request frames and a token must fit
        assert 64 * frame.REQUEST_WIRE + frame.TOKEN_WIRE <= b["uart"]["rxbuf"] <= 32766
        assert 32 <= b["uart"]["txbuf"] <= 32766
        leds[name] = b["led"]
    assert leds == {"pico": 25, "picow": "LED", "pico2": 25}
    assert boarddefs.config_for(boarddefs.load("picow")) == {
        "board": "picow", "led": "LED", "uart": {"id": 0, "tx": 0, "rx": 1, "rxbuf": 1024, "txbuf": 1024}}
    with pytest.raises(boarddefs.BoardDefError, match="unknown board 'esp32'.*pico, pico2, picow"):
        boarddefs.load("esp32")


# -- the rp2 hardware layer, on the unix port with a stand-in machine module ----

HAL_RP2_SCRIPT = r'''
import sys
sys.path.insert(0, %(fw)r)
sys.path.insert(0, %(tests)r)
import json
import fake_machine
sys.modules["machine"] = fake_machine
import hal
cfg = json.loads(%(cfg)r)
b = hal.open_board(cfg)                 # no "virtual" key: the Pico path, hal_rp2
u = b.uart                              # machine.UART itself: its C any() and readinto(buf, n)
print("uart", type(u).__name__)
import time, protocol, node


class Host:
    def read_byte(self):
        return -1

    def write(self, data):
        pass


lp = node.NodeLoop(protocol.make_node("q", 1, 2), u, Host(), time.ticks_us, time.ticks_diff, rxbuf=4)
lp.step()                               # nothing there: readinto is not called
print("empty", lp.rx_bytes)
u.rx_pending += b"\x00\x05\x02\x01\x6b\x4c\x00"   # a request frame
lp.step()                               # only what any() says, at most len(rx)
lp.step()
print("got", lp.rx_bytes, lp.dec.frames)
if b.led is not None:
    b.led.value(1)
print("name", b.name, "led", b.led)
for c in fake_machine.calls:
    print("call", repr(c))
'''


@pytest.mark.slow
@pytest.mark.parametrize("board", ["pico", "picow", "pico2"])
def test_hal_rp2_opens_uart0_and_the_led_as_the_board_file_says(micropython, tmp_path, board):
    cfg = {"position": 0, "size": 2, "protocol": "q", "baud": 115200}
    cfg.update(boarddefs.config_for(boarddefs.load(board)))
    script = tmp_path / "t.py"
    script.write_text(HAL_RP2_SCRIPT % {"fw": str(FIRMWARE), "tests": str(ROOT / "tests"), "cfg": json.dumps(cfg)})
    out = run_micropython(micropython, str(script))
    lines = out.splitlines()
    assert "uart UART" in lines and "empty 0" in lines
    assert "got 7 1" in lines  # the request frame, read in two pieces, decoded and passed on
    led = boarddefs.load(board)["led"]
    assert "name rp2 led Pin(%r)" % (led,) in lines
    calls = [ln[5:] for ln in lines if ln.startswith("call ")]
    assert calls[:3] == ["('Pin', 0, -1)", "('Pin', 1, -1)", "('UART', 0, 115200, 0, 1, 1024, 1024, 0)"]
    assert "('Pin', %r, 1)" % (led,) in calls
    assert "('UART.write', %r)" % bytes(frame.Encoder().request()) in calls  # passed on, its own link seq 0
    assert "('Pin.value', %r, 1)" % (led,) in calls
    assert calls.count("('UART.readinto', 4)") == 1 and calls.count("('UART.readinto', 3)") == 1
    assert not [c for c in calls if c.startswith("('UART.readinto'")][2:]


@pytest.mark.slow
def test_hal_rp2_reports_a_wrong_pin_and_survives_a_missing_led(micropython, tmp_path):
    cfg = {"position": 0, "size": 2, "protocol": "q", "uart": {"id": 0, "tx": 4, "rx": 1}, "led": 99}
    script = tmp_path / "t.py"
    script.write_text(HAL_RP2_SCRIPT.replace("b = hal.open_board(cfg)", "try:\n    b = hal.open_board(cfg)\nexcept ValueError as e:\n    print('error', e)\n    raise SystemExit\n")
                      % {"fw": str(FIRMWARE), "tests": str(ROOT / "tests"), "cfg": json.dumps(cfg)})
    assert "error bad TX pin" in run_micropython(micropython, str(script))
    cfg["uart"]["tx"] = 0
    script.write_text(HAL_RP2_SCRIPT % {"fw": str(FIRMWARE), "tests": str(ROOT / "tests"), "cfg": json.dumps(cfg)})
    assert "name rp2 led None" in run_micropython(micropython, str(script))  # Pin(99) fails: no LED, still runs


# -- the probe frame -------------------------------------------------------------

def test_probe_frame_bytes_and_decoding():
    enc, dec = frame.Encoder(), frame.Decoder()
    wire = bytes(enc.probe(0x0102))
    assert len(wire) == frame.PROBE_WIRE == 9
    raw = bytearray([frame.PROBE, 0, 0x02, 0x01, 0, 0])
    c = frame.crc16_bitwise(raw, 4)
    out = bytearray(12)
    n = frame.seal(raw, 4, out)
    assert (raw[4], raw[5]) == (c >> 8, c & 0xFF)
    assert wire == bytes(out[:n])
    dec.feed(wire, len(wire))
    assert dec.next() == frame.PROBE and dec.probe == 0x0102 and dec.bad == 0


# -- wiring ------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3, 7])
def test_wiring_drawing_and_pin_table(n, tmp_path, capsys):
    assert main(["wiring", "-n", str(n), "--svg", str(tmp_path / "ring.svg")]) == 0
    out = capsys.readouterr().out
    for i in range(n):
        assert "board %d GP0 TX (pin 1)     board %d GP1 RX (pin 2)" % (i, (i + 1) % n) in out
        assert "USB   board %d (pico)" % i in out
    assert out.count("|<") == n  # one arrow into every RX
    doc = xml.dom.minidom.parse(str(tmp_path / "ring.svg"))
    drawing = [r for r in doc.getElementsByTagName("rect") if r.parentNode.getAttribute("id") != "legend"]
    assert len(drawing) == n + 1  # the boards and the background (the legend's swatches apart)
    d = wiring.Drawing(n, boarddefs.load("pico"))
    signal_ends = sorted((s[0], s[1]) for s in d.segments if s[4] == "signal")
    assert len(signal_ends) == 2 * n + (n - 1) + 1  # RX and TX stubs, n-1 links down, one wrap


# -- port names ---------------------------------------------------------------------

def fake_port(device, serial_number, vid=0x2E8A, pid=0x0005, product="Board in FS mode"):
    return SimpleNamespace(device=device, serial_number=serial_number, vid=vid, pid=pid,
                           manufacturer="MicroPython", product=product, description=product)


def test_ports_by_serial_number_url_and_path(monkeypatch, tmp_path):
    fake = [fake_port("/dev/ttyACM1", "E66141040396B42A"), fake_port("/dev/ttyACM0", "E6614C311B2A8F26"),
            fake_port("/dev/ttyUSB0", "A50285BI", vid=0x0403, pid=0x6001, product="FT232R")]
    monkeypatch.setattr(ports, "comports", lambda: fake)
    monkeypatch.setattr(ports, "virtual_targets", lambda state_dir=None: [])
    assert [t.port for t in ports.list_usb()] == ["/dev/ttyACM0", "/dev/ttyACM1"]
    assert len(ports.list_usb(all_ports=True)) == 3
    t = ports.resolve("id:E6614C311B2A8F26")
    assert (t.port, t.serial_number, t.vid_pid) == ("/dev/ttyACM0", "E6614C311B2A8F26", "2e8a:0005")
    assert ports.resolve("E66141040396B42A").port == "/dev/ttyACM1"
    assert ports.resolve("rfc2217://localhost:4000").port == "rfc2217://localhost:4000"
    assert ports.resolve("socket://10.0.0.2:7000").is_url
    with pytest.raises(ports.PortError, match="no board with USB serial number NOPE is plugged in.*E6614C311B2A8F26"):
        ports.resolve("id:NOPE")
    with pytest.raises(ports.PortError, match="port not found: /dev/ttyACM9"):
        ports.resolve("/dev/ttyACM9")
    with pytest.raises(ports.PortError, match="same board"):
        ports.resolve_many(["id:E6614C311B2A8F26", "E6614C311B2A8F26"])
    # a ring file finds boards by serial number wherever they are plugged in now
    rf = tmp_path / "ring.json"
    ports.write_ring_file(rf, [ports.resolve("id:E66141040396B42A"), ports.resolve("id:E6614C311B2A8F26")])
    fake[0].device, fake[1].device = "/dev/ttyACM5", "/dev/ttyACM4"  # re-plugged
    assert [t.port for t in ports.ring_file_targets(rf)] == ["/dev/ttyACM5", "/dev/ttyACM4"]
    doc = json.loads(rf.read_text())
    doc["boards"][1]["position"] = 0
    rf.write_text(json.dumps(doc))
    with pytest.raises(ports.PortError, match="two boards have the same position 0"):
        ports.ring_file_targets(rf)


# -- flash ------------------------------------------------------------------------------

@pytest.fixture
def vring(tmp_path):
    with VirtualRing(3, workdir=tmp_path / "ring") as r:
        yield r


@pytest.mark.slow
def test_flash_deploys_configures_confirms_and_rerun_copies_nothing(vring):
    targets = ports.ring_targets(vring)
    t0 = time.monotonic()
    results = flash.flash(targets, "d", board="pico2", cs_us=50, clock=vring.clock)
    first_s = time.monotonic() - t0
    # Only D's protocol module of the protocol modules (firmware/protocol.py REGISTRY), as .mpy:
    # the unix port loads x64 .mpy files, native code included; main.py stays a source.
    modules = [p.stem for p in deploy.firmware_files(protocol="d") if p.name != "main.py"]
    names = [m + ".mpy" for m in modules] + ["main.py", "picoring.json"]
    assert "proto_d.mpy" in names and "proto_q.mpy" not in names and "protocol.mpy" in names
    fw = flash.firmware_version()
    for i, (r, b) in enumerate(zip(results, vring.boards)):
        assert sorted(r["copied"]) == sorted(names) and r["up_to_date"] == []
        assert sorted(r["compiled"]) == sorted(modules) and r["notes"] == []
        assert r["identity"]["implementation"] == "micropython"
        assert r["ver"]["fw"] == fw and r["ver"]["pos"] == i and r["ver"]["n"] == 3 and r["ver"]["proto"] == "d"
        cfg = json.loads(open(os.path.join(b.fs_dir, "picoring.json")).read())
        assert cfg["virtual"] == {"uart": b.uart, "stood_still": str(vring.ring_clock_file)}  # its ring's clock
        assert (cfg["position"], cfg["size"], cfg["protocol"], cfg["baud"], cfg["cs_us"]) == (i, 3, "d", 115200, 50)
        assert cfg["uart"] == {"id": 0, "tx": 0, "rx": 1, "rxbuf": 1024, "txbuf": 1024} and cfg["led"] == 25
    t0 = time.monotonic()
    again = flash.flash(targets, "d", board="pico2", cs_us=50, clock=vring.clock)
    second_s = time.monotonic() - t0
    assert [r["copied"] for r in again] == [[], [], []]
    assert all(sorted(r["up_to_date"]) == sorted(names) for r in again)
    changed = flash.flash(targets, "q", clock=vring.clock)  # the config changes, and Q's module joins D's
    assert [sorted(r["copied"]) for r in changed] == [["picoring.json", "proto_q.mpy"]] * 3
    print("flash of 3 virtual boards: %.2f s; again, nothing to copy: %.2f s" % (first_s, second_s))


@pytest.mark.slow
def test_flash_refuses_two_boards_at_one_position_before_touching_any(vring):
    targets = ports.ring_targets(vring)
    with pytest.raises(flash.FlashError, match="two boards have the same position 1: %s and %s"
                       % (targets[1].port, targets[2].port)):
        flash.flash(targets, "q", positions=[0, 1, 1], clock=vring.clock)
    with pytest.raises(flash.FlashError, match="given twice"):
        flash.flash([targets[0], targets[1], targets[0]], "q", clock=vring.clock)
    assert all(not os.path.exists(os.path.join(b.fs_dir, "main.py")) for b in vring.boards)


@pytest.mark.slow
def test_flash_a_port_that_is_not_a_micropython_board(vring, tmp_path):
    good = ports.ring_targets(vring)[0]
    # 1. a pty with nothing on the other end
    master, slave = os.openpty()
    silent = ports.Target(os.ttyname(slave))
    # 2. a program on the other end that answers everything with garbage
    m2, s2 = os.openpty()
    garbage = subprocess.Popen([sys.executable, "-c", (
        "import os, sys, time\nfd = int(sys.argv[1])\nos.set_blocking(fd, False)\n"
        "while True:\n    try:\n        os.read(fd, 1024)\n    except BlockingIOError:\n        pass\n"
        "    os.write(fd, b'\\x8f garbage \\xff\\r\\n')\n    time.sleep(0.01)\n"), str(m2)], pass_fds=[m2])
    noisy = ports.Target(os.ttyname(s2))
    try:
        for bad in (silent, noisy):
            t0 = time.monotonic()
            with pytest.raises(flash.FlashError) as e:
                flash.flash([good, bad], "q", copy_timeout=8, clock=vring.clock)
            msg = str(e.value)
            assert msg.startswith("%s: copy failed" % bad.port), msg
            assert "did not answer as a MicroPython REPL" in msg or "no answer within" in msg
            assert "State of the boards: %s: files copied" % good.port in msg
            assert "%s: not changed (the copy did not start)" % bad.port in msg
            print("%s found not to be MicroPython in %.1f s" % ("silent pty" if bad is silent else "garbage", time.monotonic() - t0))
    finally:
        garbage.kill()
        garbage.wait()
        for fd in (master, slave, m2, s2):
            os.close(fd)


@pytest.mark.slow
def test_a_copy_prints_a_sign_of_life_after_every_chunk(tmp_path):
    # deploy's quiet timeout takes mpremote's output as the board's sign of life. mpremote draws
    # its progress bar only on a terminal, and on a pipe a large file was one long silence: beside
    # three busy loops node.py (213 chunks) took 14 s to copy to a virtual board that answered every
    # chunk, and test_flash_a_port_that_is_not_a_micropython_board (budget 8 s) gave the good board
    # up. Through picoring.ring.mpremote_run every chunk is heard; deploy hands on mpremote's own lines.
    big = tmp_path / "big.py"
    big.write_bytes(b"# filler\n" * 1200)  # 10,800 bytes: 43 chunks of 256
    with VirtualRing(1, workdir=tmp_path / "ring") as ring:
        port = os.path.realpath(ring.boards[0].usb_path)
        proc = deploy._run_watched([sys.executable, "-m", "picoring.ring.mpremote_run", "connect", port, "resume",
                                    "fs", "cp", str(big), ":big.py"], 60, clock=ring.clock)
        assert proc.returncode == 0 and not proc.timed_out, proc.stderr
        assert proc.stdout.count(b"\r ... copying") == 42, proc.stdout  # each chunk but the last (its end clears the bar)
        assert deploy.strip_progress(proc.stdout).decode().splitlines() == ["cp %s :big.py" % big]
        assert os.path.getsize(os.path.join(ring.boards[0].fs_dir, "big.py")) == 10800


class WhenAFileLands(threading.Thread):
    """Calls action() once `name` appears in board's filesystem (the copy has reached it), unless
    stop is set first. done: action() has returned; error: what went wrong (a thread's exception
    is no test failure, so the test asks)."""

    def __init__(self, board, name, action):
        super().__init__(daemon=True)
        self.board, self.name, self.action = board, name, action
        self.done, self.stop, self.error = threading.Event(), threading.Event(), None
        self.start()

    def run(self):
        try:
            # (flash's own timeouts end it sooner: stop is set once flash returns)
            wait_for(lambda: self.stop.is_set() or os.path.exists(os.path.join(self.board.fs_dir, self.name)),
                     timeout=300, what="%s to land on board %d" % (self.name, self.board.index))
            if not self.stop.is_set():
                self.action()
                self.done.set()
        except BaseException as e:  # noqa: BLE001 - handed to the test
            self.error = e


def flash_while_a_board_drops_out(vring, held_up=None, hold_s=0.0):
    """flash() with board 1's USB cable pulled once its first firmware file has landed (the ring's
    unplug: its port hangs up, so its copy fails at once, as a Pico's does). held_up: a board
    that stands still for hold_s seconds once its copy has begun, as a loaded machine holds up a
    process: a copy held up like that is slow, not failed. Returns the FlashError's message."""
    targets = ports.ring_targets(vring)
    pull = WhenAFileLands(vring.boards[1], "frame.mpy", lambda: vring.unplug(1))
    threads = [pull]
    if held_up is not None:
        board = vring.boards[held_up]

        def hold():
            os.kill(board.pid, signal.SIGSTOP)
            try:
                time.sleep(hold_s)
            finally:
                os.kill(board.pid, signal.SIGCONT)

        threads.append(WhenAFileLands(board, "fram.mpy", hold))
    try:
        with pytest.raises(flash.FlashError) as e:
            flash.flash(targets, "q", clock=vring.clock)
    finally:
        for th in threads:
            th.stop.set()
            th.join(hold_s + 5)
        vring.plug(1)
    for th in threads:
        assert th.error is None and th.done.is_set(), ("the fault the test sets up did not happen (%r); flash said: %s"
                                                       % (th.error, e.value))
    return str(e.value)


def assert_only_board_1_failed(vring, msg):
    targets = ports.ring_targets(vring)
    victim = vring.boards[1]
    assert msg.startswith("%s: copy failed" % victim.usb_path), msg
    assert "%s: files copied" % targets[0].port in msg, msg                # board 0 done, not restarted
    assert "%s: partly copied: " % victim.usb_path in msg and "flash it again" in msg, msg
    assert "%s: files copied" % targets[2].port in msg, msg                # copied beside it, not restarted
    # and a second flash, with the board back, repairs the ring
    results = flash.flash(targets, "q", clock=vring.clock)
    assert [r["ver"]["pos"] for r in results] == [0, 1, 2]


@pytest.mark.slow
def test_a_board_that_drops_out_mid_flash(vring):
    assert_only_board_1_failed(vring, flash_while_a_board_drops_out(vring))


@pytest.mark.slow
def test_a_board_that_drops_out_mid_flash_fails_only_itself_beside_a_board_held_up(vring):
    """A loaded suite run once failed the test above with board 2 "copy failed" too. The test then
    killed board 1 again and again and flashed with a quiet timeout of 8 s so that board 1's copy
    would give up soon; but that timeout was every board's, and a loaded machine held board 2's
    copy up for longer. (Board 1 was not gone either: the ring restarts a process that exits, so
    it ran whatever firmware had landed, and the kills could come late.) Board 2 held up for 10 s
    here stands for that load: a copy that is slow is not a copy that failed."""
    assert_only_board_1_failed(vring, flash_while_a_board_drops_out(vring, held_up=2, hold_s=10.0))


@pytest.mark.slow
def test_port_busy_is_reported_before_anything_is_touched(vring):
    targets = ports.ring_targets(vring)
    holder = serial.Serial(targets[2].port, exclusive=True)
    try:
        with pytest.raises(ports.PortError, match="port busy: %s is open in another program" % targets[2].port):
            flash.flash(targets, "q", clock=vring.clock)
    finally:
        holder.close()


@pytest.mark.slow
def test_a_port_in_use_is_refused_naming_who_has_it(vring):
    """Two runs on the same boards read half of each other's lines ("bad base64 length"):
    ports are opened with an exclusive lock, and the second says who holds the port
    (issue 18, item 2)."""
    import queue

    from picoring.ring.link import BoardLink, HarnessError

    port = vring.boards[0].usb_path
    holder = subprocess.Popen([sys.executable, "-c", "import serial, sys\ns = serial.Serial(sys.argv[1], exclusive=True)\n"
                               "print('held', flush=True)\nsys.stdin.read()", port],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        assert ports.port_holders(port)[0][0] == holder.pid
        with pytest.raises(HarnessError, match=r"port busy: %s is open in another program \(pid %d: \S*python"
                           % (port, holder.pid)):
            BoardLink(0, port, queue.Queue()).open()
        with pytest.raises(ports.PortError, match="pid %d" % holder.pid):
            flash.check_port(ports.ring_targets(vring)[0])
    finally:
        holder.stdin.close()
        holder.wait(TIMEOUT)
    # in one process too: a link holds its port until it is closed
    first = BoardLink(0, port, queue.Queue()).open()
    try:
        with pytest.raises(HarnessError, match="port busy: %s" % port):
            BoardLink(1, port, queue.Queue()).open()
    finally:
        first.close()
    BoardLink(0, port, queue.Queue()).open().close()


# -- discover ------------------------------------------------------------------------------

@pytest.mark.slow
def test_discover_finds_a_shuffled_ring(tmp_path):
    with VirtualRing(5, workdir=tmp_path / "ring") as r:
        targets = ports.ring_targets(r)
        shuffled = targets[:]
        random.Random(7).shuffle(shuffled)
        assert shuffled != targets
        first = shuffled.index(targets[0])
        t0 = time.monotonic()
        said = []
        # (blank boards never say hello: every second of hello_timeout is waited out)
        ordered, info = discover.discover(shuffled, first=first, log=said.append, hello_timeout=2.0, clock=r.clock)
        cold = time.monotonic() - t0
        assert [t.port for t in ordered] == [b.usb_path for b in r.boards]
        assert info["reflashed"]  # blank boards got the firmware and a provisional config, and were told so
        assert "%s: no picoring firmware answered within 2s" % targets[0].port in said[0]
        assert "discover flashes picoring firmware %s with a provisional config" % flash.firmware_version() in said[0]
        # boards that run the firmware (any positions) are probed as they are
        t0 = time.monotonic()
        ordered2, info2 = discover.discover(shuffled[::-1], first=shuffled[::-1].index(targets[2]), clock=r.clock)
        warm = time.monotonic() - t0
        assert not info2["reflashed"]
        assert [t.port for t in ordered2] == [b.usb_path for b in r.boards[2:] + r.boards[:2]]
        print("discover, 5 virtual boards: %.1f s blank (flash included), %.2f s with firmware (probe %.2f s)"
              % (cold, warm, info2["probe_s"]))
        # a cut wire is a wiring error that names the board whose TX goes nowhere
        r.cut(3)
        with pytest.raises(discover.WiringError, match="the TX \\(GP0\\) of %s reaches none" % r.boards[3].usb_path):
            discover.discover(targets, clock=r.clock)


@pytest.mark.slow
def test_discover_on_a_port_with_no_board_fails_before_flashing_anything(vring, capsys, monkeypatch):
    """It took 67 s (a 60 s copy attempt) and flashed the other boards first (issue 18, item 2)."""
    # A silent port gets SILENT_GRACE_S (10 s) beyond --timeout before it is judged silent, for a
    # loaded machine's slow ptys; what is tested here is what happens then, not how long it waits.
    monkeypatch.setattr(discover, "SILENT_GRACE_S", 1.0)
    master, slave = os.openpty()  # a port where nothing answers
    try:
        silent = os.ttyname(slave)
        good = [t.port for t in ports.ring_targets(vring)[:2]]
        status = main(["discover", "--ports", ",".join(good + [silent]), "--timeout", "2", "--ring-file", os.devnull])
        err = capsys.readouterr().err
    finally:
        os.close(master)
        os.close(slave)
    assert status == 2
    assert "picoring: %s: no board answered within 3s (nothing at all came back" % silent in err, err
    assert all(not os.path.exists(os.path.join(b.fs_dir, "main.py")) for b in vring.boards)  # nothing flashed
    assert main(["discover", "--ports", ",".join(good), "--timeout", "0"]) == 2
    assert "--timeout must be > 0" in capsys.readouterr().err


def test_ring_order_errors_say_which_wire():
    labels = ["A", "B", "C", "D"]
    assert discover.ring_order(labels, {0: [2], 1: [3], 2: [1], 3: [0]}) == [0, 2, 1, 3]
    with pytest.raises(discover.WiringError, match="more than one ring: A -> B -> A"):
        discover.ring_order(labels, {0: [1], 1: [0], 2: [3], 3: [2]})
    with pytest.raises(discover.WiringError, match="RX \\(GP1\\) of C hears A and B"):
        discover.ring_order(labels, {0: [2], 1: [2], 2: [3], 3: [0]})
    with pytest.raises(discover.WiringError, match="D hears its own TX"):
        discover.ring_order(labels, {0: [1], 1: [2], 2: [0], 3: [3]})


@pytest.mark.slow
def test_cli_discover_then_flash_and_run_from_the_ring_file(tmp_path, capsys, monkeypatch):
    d = tmp_path / "state"
    monkeypatch.chdir(tmp_path)
    try:
        state = supervisor.up(d, 3)
        usb = [b["usb"] for b in state["boards"]]
        shuffled = [usb[2], usb[0], usb[1]]
        status = main(["boards", "--virtual-dir", str(d), "--json"])
        listed = json.loads(capsys.readouterr().out)
        assert status == 0 and [b["port"] for b in listed if b["virtual"]] == usb
        status = main(["discover", "--ports", ",".join(shuffled), "--virtual-dir", str(d), "--first", usb[0],
                       "--timeout", "2"])  # (blank boards: the hello wait is waited out)
        out, err = capsys.readouterr()
        assert status == 0, err
        ring = json.loads((tmp_path / "ring.json").read_text())
        assert [b["port"] for b in ring["boards"]] == usb and all(b["virtual"] for b in ring["boards"])
        assert main(["flash", "-p", "d", "--virtual-dir", str(d), "--json"]) == 0  # ring.json in the cwd
        flashed = json.loads(capsys.readouterr().out)
        assert [b["ver"]["pos"] for b in flashed["boards"]] == [0, 1, 2]
        status = main(["run", "-p", "d", "-w", "sequential", "-k", "5", "--json"])  # ring.json again
        report = json.loads(capsys.readouterr().out)
        assert status == 0 and report["served"] == 5, report["violations"]
        status = main(["flash", "-p", "q", "--ports", "%s,%s" % (usb[0], usb[0]), "--virtual-dir", str(d)])
        assert status == 2 and "same board" in capsys.readouterr().err
    finally:
        supervisor.down(d)


@pytest.mark.slow
def test_cli_flash_checks_that_the_boards_form_the_ring(tmp_path, capsys):
    """2 of 3 wired boards flashed fine and the mistake showed only at run (issue 18, item 2)."""
    d = tmp_path / "state"
    try:
        state = supervisor.up(d, 3)
        usb = [b["usb"] for b in state["boards"]]
        status = main(["flash", "-p", "q", "--ports", "virtual:0,virtual:1", "--virtual-dir", str(d)])
        err = capsys.readouterr().err
        assert status == 2, err
        assert "2 board(s) flashed and confirmed, but the boards as given do not form a ring of 2" in err, err
        assert "the TX of %s (position 1) reaches none of the 2 boards given, not %s (position 0)" % (usb[1], usb[0]) in err, err
        assert "flash them all, in ring order" in err, err
        # all three, in the wrong order: the wires say which
        status = main(["flash", "-p", "q", "--ports", "virtual:0,virtual:2,virtual:1", "--virtual-dir", str(d)])
        err = capsys.readouterr().err
        assert status == 2, err
        assert "the TX of %s (position 0) reaches %s (position 2), not %s (position 1)" % (usb[0], usb[1], usb[2]) in err, err
        assert "flash them all" not in err, err
        status = main(["flash", "-p", "q", "--ports", "virtual:0,virtual:2", "--virtual-dir", str(d), "--no-ring-check"])
        assert status == 0, capsys.readouterr().err
    finally:
        supervisor.down(d)


def test_cli_flash_errors_are_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["flash", "-p", "q", "--ports", "/dev/nonexistent-picoring0,/dev/nonexistent-picoring1"]) == 2
    assert "port not found: /dev/nonexistent-picoring0" in capsys.readouterr().err
    assert main(["flash", "-p", "q"]) == 2
    assert "which boards?" in capsys.readouterr().err
    assert main(["run", "-p", "q"]) == 2
    assert "no ring.json here" in capsys.readouterr().err
    assert main(["flash", "-p", "q", "--ports", "/dev/nonexistent-picoring0,x", "--drop-rx", "5"]) == 2
    assert "--drop-rx is a probability, 0..1" in capsys.readouterr().err


# -- pyserial URLs: an RFC 2217 server in front of a virtual board ---------------------------

class PtyPort(serial.Serial):
    """A pty has no modem lines (a USB CDC port has none that matter either): report them idle."""

    cts = dsr = cd = property(lambda self: True)
    ri = property(lambda self: False)

    def _update_dtr_state(self):
        pass

    def _update_rts_state(self):
        pass

    def _update_break_state(self):
        pass


class Rfc2217Server:
    """A one-client-at-a-time RFC 2217 server for a local serial port, after pyserial's
    examples/rfc2217_server.py: serial.rfc2217.PortManager does the telnet side."""

    def __init__(self, port):
        self.port = port
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(1)
        self.url = "rfc2217://127.0.0.1:%d" % self.sock.getsockname()[1]
        self.clients = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.clients += 1
            # as pyserial's example server does: without it each small write waits for the
            # client's delayed ACK (40 ms), and mpremote's copy, a round trip per chunk, took 50 s
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            ser = PtyPort(self.port, timeout=0.05)
            lock = threading.Lock()

            class Conn:
                def write(self, data):
                    with lock:
                        conn.sendall(data)

            pm = serial.rfc2217.PortManager(ser, Conn())
            alive = threading.Event()
            alive.set()

            def to_client():
                while alive.is_set():
                    try:
                        data = ser.read(ser.in_waiting or 1)
                        if data:
                            Conn().write(b"".join(pm.escape(data)))
                    except (OSError, serial.SerialException):
                        return

            t = threading.Thread(target=to_client, daemon=True)
            t.start()
            try:
                while True:
                    data = conn.recv(4096)
                    if not data:
                        break
                    ser.write(b"".join(pm.filter(data)))
            except OSError:
                pass
            alive.clear()
            t.join(2)
            ser.close()
            conn.close()

    def close(self):
        self.sock.close()


@pytest.mark.slow
def test_flash_and_run_through_rfc2217(tmp_path):
    with VirtualRing(2, workdir=tmp_path / "ring") as r:
        local = ports.ring_targets(r)[0]
        r.boards[1].wait_output(b">>> ", TIMEOUT)
        server = Rfc2217Server(r.boards[1].usb_path)
        try:
            remote = ports.resolve(server.url)
            assert remote.is_url and remote.resetter is None
            remote.virtual_uart = r.boards[1].uart  # the far end is a virtual board: its config needs its UART
            # mpremote opens pyserial URLs too, so the copy goes through RFC 2217; the restart is a
            # soft reset (Ctrl-C, Ctrl-B, Ctrl-D) and the !hello/!ver check come back through it
            results = flash.flash([local, remote], "q", clock=r.clock)
            assert results[1]["port"] == server.url and results[1]["ver"]["pos"] == 1
            assert server.clients >= 2
            run = RingRun([local.port, server.url], "q", make_workload("sequential", 2, 4),
                          resetter=None)
            try:
                run.connect()
                report = run.run()
            finally:
                run.close()
            assert report["ok"] and report["served"] == 4, report["violations"]
        finally:
            server.close()


# -- the pytest plugin ------------------------------------------------------------------------

@pytest.mark.slow
def test_plugin_fixtures_and_serial_traffic_on_failure(pytester):
    pytester.makepyfile(test_ring_plugin='''
        def test_ring_fixture(ring, boards):
            assert ring.n == 2 and [t.port for t in boards] == ring.ports
            report = ring.run("q", "sequential", 3)
            assert report["ok"] and report["served"] == 3

        def test_fails_and_shows_traffic(ring):
            ring.run("q", "sequential", 2)
            assert False, "planted failure"
    ''')
    result = pytester.runpytest("--ring-virtual", "2",
                                "--ring-log-dir", str(pytester.path / "serial-logs"))
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*picoring serial /*/usb0 *<- from the board*"])  # a virtual board's USB path
    # and the virtual ring itself, read without asking its relay (the relay may be what is stuck)
    result.stdout.fnmatch_lines(["*picoring virtual ring at the failure*", "relay: *_relay_loop*",
                                 "board 0: pid * alive True restarts *, USB present host *", "board 1: *",
                                 "wire 0: in * out * in flight *", "wire 1: *"])
    assert "-> !r" in result.stdout.str()  # the failing test's requests: the end of its traffic is shown
    logs = sorted(os.listdir(pytester.path / "serial-logs"))
    assert len(logs) == 4 and all("test_ring_plugin.py" in name for name in logs)  # 2 tests x 2 boards
    # All of it is saved: the Ctrl-C, the restart and the requests. (Shown are the last 60 lines
    # a board: on a loaded host the ring's forming polls !status longer, and a loaded suite run
    # pushed the Ctrl-C and the restart out of them, 85 lines in all.)
    failing = "".join((pytester.path / "serial-logs" / name).read_text() for name in logs
                      if "fails_and_shows_traffic" in name)
    assert "-> \\x03" in failing and "!hello fw=" in failing and "-> !r" in failing


def test_plugin_options_are_in_their_own_group(pytester):
    result = pytester.runpytest("--help")
    result.stdout.fnmatch_lines(["picoring: the ring of boards the tests run on:", "*--ring-ports=P1,P2,...*",
                                 "*--ring-virtual=N*"])
    result = pytester.runpytest("--ring-virtual", "2", "--ring-ports", "a,b")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*give one of --ring-ports, --ring-file, --ring-virtual*"])


@pytest.mark.slow
def test_the_plugin_stops_a_token_that_never_rests_when_its_test_ends(pytester):
    # A BinarySearch ring flashed by one test moved its token through every later test of a
    # suite run: 13% of a core at 115200 baud, the virtual ring's relay thread in the tests'
    # own process. The next test finds the ring still, and a run restarts it.
    pytester.makepyfile(test_rest='''
        import time

        def test_runs_s(ring):
            report = ring.run("s", "sequential", 2)
            assert report["ok"] and report["served"] == 2

        def test_the_ring_is_still_afterwards(ring):
            before = [w.bytes_in for w in ring.virtual.wires]
            time.sleep(1.0)
            assert [w.bytes_in for w in ring.virtual.wires] == before
            report = ring.run("s", "sequential", 2)
            assert report["ok"] and report["served"] == 2
    ''')
    result = pytester.runpytest("--ring-virtual", "2")
    result.assert_outcomes(passed=2)
