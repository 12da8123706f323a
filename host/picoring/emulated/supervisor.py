"""The process behind `picoring emulated up|status|down` (and `run --emulated N`): one node
process running N emulated Picos (js/emulator.mjs), and a pty per board for its USB serial.

`up` starts `python -m picoring.emulated.supervisor` in a session of its own; it starts node
with pipes, relays each board's USB bytes between node's frames and the board's pty, and
writes into the state directory:

  state.json   supervisor and node pids, the boards' port paths, the files used
  clock.json   every 0.5 s: chip time against wall time, each board's CPU load, stopped boards
  ttyE<i>      board i's USB serial port: a symlink to its pty (stable while the ring is up)
  window.json  a command's request to record a window of chip time (record_window), passed to node
  supervisor.log

Node exits when its stdin closes, so it dies with the supervisor whatever kills it; a
supervisor started for one command (--parent-pid) dies with that command (PR_SET_PDEATHSIG).
`down` (SIGTERM) removes the ports and the state files; a state directory it created goes too.
"""

import argparse
import errno
import json
import os
import re
import selectors
import signal
import struct
import subprocess
import sys
import termios
import time
import tty
from pathlib import Path

from ..clock import WallClock
from ..virtual.supervisor import _alive, _die_with
from . import assets
from .assets import EmulatedError

STATE = "state.json"
CLOCK = "clock.json"
LOG = "supervisor.log"
WINDOW = "window.json"
JS = Path(__file__).resolve().parent / "js" / "emulator.mjs"
MAX_BOARDS = 32
CHIP_HZ = 125_000_000
_RETRY_S = 0.05  # how often a port nobody has open is looked at again


def default_state_dir():
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "picoring" / "emulated"
    return Path.home() / ".cache" / "picoring" / "emulated-ring"


def port_path(state_dir, i):
    return Path(state_dir) / ("ttyE%d" % i)


class _Port:
    """Board i's USB serial as a pty that stays while programs open and close it. What the board
    sends while no program has it open is dropped, as a Pico with no host reading drops it."""

    def __init__(self, index, link):
        self.index, self.link = index, Path(link)
        self.master, slave = os.openpty()
        tty.setraw(slave)
        attrs = termios.tcgetattr(slave)
        attrs[3] &= ~(termios.ECHO | termios.ICANON | termios.ISIG | termios.IEXTEN)
        termios.tcsetattr(slave, termios.TCSANOW, attrs)
        self.name = os.ttyname(slave)
        os.close(slave)  # from now on the master reads EIO while no program has the pty open
        os.set_blocking(self.master, False)
        tmp = self.link.with_name(self.link.name + ".tmp")
        tmp.unlink(missing_ok=True)
        os.symlink(self.name, tmp)
        os.replace(tmp, self.link)
        self.open_by_client = False
        self.pending = bytearray()

    def read(self):
        """Bytes a program wrote, b"" if none; None when no program has the port open."""
        try:
            return os.read(self.master, 65536)
        except BlockingIOError:
            return b""
        except OSError as e:
            if e.errno == errno.EIO:
                return None
            raise

    def write(self, data):
        if not self.open_by_client:
            return
        if len(self.pending) < (1 << 20):
            self.pending += data
        self.flush()

    def flush(self):
        try:
            while self.pending:
                del self.pending[:os.write(self.master, self.pending)]
        except BlockingIOError:
            pass
        except OSError as e:
            if e.errno != errno.EIO:
                raise
            self.open_by_client = False
            self.pending.clear()

    def close(self):
        try:
            if os.readlink(self.link) == self.name:
                self.link.unlink()
        except OSError:
            pass
        os.close(self.master)


def _frame(kind, board, payload=b""):
    return struct.pack("<cBH", kind, board, len(payload)) + payload


def supervise(state_dir, n, firmware, bootrom, modules, node, parent_pid=None, remove_dir=False):
    state_dir = Path(state_dir)
    if parent_pid:
        _die_with(parent_pid)
    stopping = []
    signal.signal(signal.SIGTERM, lambda *a: stopping.append("SIGTERM"))
    signal.signal(signal.SIGINT, lambda *a: stopping.append("SIGINT"))
    signal.signal(signal.SIGHUP, lambda *a: stopping.append("SIGHUP"))
    ports = [_Port(i, port_path(state_dir, i)) for i in range(n)]
    config = {"n": n, "firmware": firmware, "bootrom": bootrom, "modules": modules}
    proc = subprocess.Popen([node, str(JS), json.dumps(config)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    os.set_blocking(proc.stdout.fileno(), False)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    booted = [False] * n
    stopped = [None] * n
    started = time.time()
    state = {"supervisor_pid": os.getpid(), "node_pid": proc.pid, "n": n, "started": started, "ready": False,
             "firmware": firmware, "bootrom": bootrom, "dir": str(state_dir),
             "boards": [{"index": p.index, "usb": str(p.link), "pty": p.name} for p in ports]}
    _write_json(state_dir / STATE, state)
    buf = b""
    clock = None
    last_retry = 0.0
    why = "node exited"
    try:
        while not stopping:
            now = time.monotonic()
            if now - last_retry >= _RETRY_S:  # has a program opened a port nobody had open?
                last_retry = now
                _pass_window_request(state_dir, proc)
                for p in ports:
                    if not p.open_by_client:
                        data = p.read()
                        if data is not None:
                            p.open_by_client = True
                            sel.register(p.master, selectors.EVENT_READ, p)
                            if data:
                                proc.stdin.write(_frame(b"U", p.index, data))
                                proc.stdin.flush()
                    elif p.pending:
                        p.flush()
            for key, _ in sel.select(_RETRY_S):
                if key.data is None:
                    chunk = proc.stdout.read()
                    if chunk == b"":
                        stopping.append(why)
                        break
                    buf += chunk or b""
                    while len(buf) >= 4:
                        kind, board, size = struct.unpack_from("<cBH", buf)
                        if len(buf) < 4 + size:
                            break
                        payload, buf = buf[4:4 + size], buf[4 + size:]
                        if kind == b"U":
                            ports[board].write(payload)
                        elif kind == b"B":
                            booted[board] = True
                            if all(booted) and not state["ready"]:
                                state["ready"] = True
                                state["boot_s"] = round(time.time() - started, 2)
                                _write_json(state_dir / STATE, state)
                        elif kind == b"F":
                            stopped[board] = payload.decode("utf-8", "replace")
                            print("board %d stopped: %s" % (board, stopped[board]), flush=True)
                        elif kind == b"S":
                            clock = _clock(json.loads(payload), stopped, clock)
                            _write_json(state_dir / CLOCK, clock)
                else:
                    p = key.data
                    data = p.read()
                    if data is None:
                        p.open_by_client = False
                        p.pending.clear()
                        sel.unregister(p.master)
                    elif data:
                        proc.stdin.write(_frame(b"U", p.index, data))
                        proc.stdin.flush()
    except BrokenPipeError:
        why = "node exited"
    finally:
        if proc.poll() is None:
            try:
                proc.stdin.close()
            except OSError:
                pass
            try:
                proc.wait(2)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        print("stopped (%s; node exit status %s)" % (stopping[0] if stopping else why, proc.returncode), flush=True)
        for p in ports:
            p.close()
        for name in (STATE, CLOCK, WINDOW):
            (state_dir / name).unlink(missing_ok=True)
        if remove_dir:
            (state_dir / LOG).unlink(missing_ok=True)
            try:
                state_dir.rmdir()
            except OSError:
                pass


def _pass_window_request(state_dir, proc):
    """A command asked for a window of chip time (record_window): node records it."""
    try:
        request = (state_dir / WINDOW).read_bytes()
    except OSError:
        return
    (state_dir / WINDOW).unlink(missing_ok=True)
    proc.stdin.write(_frame(b"W", 255, request))
    proc.stdin.flush()


def _clock(stats, stopped, last):
    """clock.json: chip time and wall time since power-on, cycles per board, stopped boards, and
    over the last sample's interval: chip-seconds per wall-second and each board's CPU load."""
    clock = {k: stats[k] for k in ("chip_s", "wall_s", "cycles", "frames", "wire_bytes", "turnaround_ns", "turnarounds")}
    clock.update(stopped=[s or b for s, b in zip(stats.get("stopped") or stopped, stopped)], at=time.time())
    recent = clock_over(last, clock)
    clock.update(chip_per_wall=recent["chip_per_wall"], load=recent["load"],
                 hops_per_chip_s=recent["hops_per_chip_s"], turnaround_us=recent["turnaround_us"])
    return clock


def clock_over(before, after):
    """Chip time against wall time between two clock.json samples (before None: since power-on):
    chip_s, wall_s, chip_per_wall, each board's CPU load (share of chip time busy), stopped boards."""
    after = after or {}
    if not after.get("wall_s"):
        return {"chip_s": None, "wall_s": None, "chip_per_wall": None, "load": [], "hops_per_chip_s": None,
                "turnaround_us": [], "stopped": after.get("stopped", [])}
    zeros = [0] * len(after["cycles"])
    before = before or {"chip_s": 0.0, "wall_s": 0.0}
    chip_s, wall_s = after["chip_s"] - before["chip_s"], after["wall_s"] - before["wall_s"]

    def delta(key):
        return [a - b for a, b in zip(after.get(key, zeros), before.get(key, zeros))]

    frames, t_ns, t_n = delta("frames"), delta("turnaround_ns"), delta("turnarounds")
    return {"chip_s": round(chip_s, 4), "wall_s": round(wall_s, 3),
            "chip_per_wall": chip_s / wall_s if wall_s > 0 else None,
            "load": [round(c / (chip_s * CHIP_HZ), 4) if chip_s > 0 else None for c in delta("cycles")],
            # every frame on a wire is a hop (the boards' own frames: tokens, requests, probes)
            "hops_per_chip_s": round(sum(frames) / chip_s, 1) if chip_s > 0 else None,
            "turnaround_us": [round(ns / k / 1000, 1) if k else None for ns, k in zip(t_ns, t_n)],
            "stopped": after.get("stopped", [])}


def _write_json(path, obj):
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)


# -- the commands' side --------------------------------------------------------

def read_state(state_dir):
    try:
        return json.loads((Path(state_dir) / STATE).read_text())
    except (OSError, ValueError):
        return None


def read_clock(state_dir):
    try:
        return json.loads((Path(state_dir) / CLOCK).read_text())
    except (OSError, ValueError):
        return None


def record_window(state_dir, warm_s, window_s, tail_s=0.05, timeout_s=600.0, feed=None):
    """The frames on every wire and each board's counters over a window of chip time: from the
    chip time at which node gets the request plus warm_s, window_s long, with tail_s more of
    frames (those that answer the window's last ones). A dict (js/emulator.mjs, windowTick):
    start_ns, end_ns, start and end ({chip_ns, usb_bytes, cycles} per board), baud, stopped,
    wires (wires[i]: the frames board i sent, [start ns, end ns, bytes, its first 64 bytes in hex],
    end: when the last byte landed in board i + 1's UART), fed. EmulatedError if the ring is down or the window does not end
    within timeout_s of wall time (chip time runs 5-50 times slower than wall time when busy).

    feed (boards, period_s, data): the emulator writes data to those boards' USB serial in turn,
    one every period_s of chip time from the request to the window's end (fed: how many); the
    figures are then the firmware's whatever pace this machine runs the chips at."""
    state_dir = Path(state_dir)
    state = read_state(state_dir)
    if not state or not _alive(state["supervisor_pid"]):
        raise EmulatedError("no emulated Picos are up in %s" % state_dir)
    out = state_dir / ("window-%d.json" % os.getpid())
    out.unlink(missing_ok=True)
    request = {"warm_ns": int(warm_s * 1e9), "window_ns": int(window_s * 1e9), "tail_ns": int(tail_s * 1e9),
               "out": str(out)}
    if feed is not None:
        boards, period_s, data = feed
        boards, n = list(boards), state["n"]
        if not boards or any(not 0 <= b < n for b in boards) or not period_s > 0 or not data:
            raise EmulatedError("a window's feed needs boards among the ring's 0..%d, a period above 0 and bytes to "
                                "send: got boards %s, period %r s, %d bytes" % (n - 1, boards, period_s, len(data)))
        request["feed"] = {"boards": boards, "period_ns": int(period_s * 1e9), "hex": bytes(data).hex()}
    _write_json(state_dir / WINDOW, request)
    deadline = time.monotonic() + timeout_s
    while not out.exists():
        if not _alive(state["supervisor_pid"]) or time.monotonic() > deadline:
            (state_dir / WINDOW).unlink(missing_ok=True)
            raise EmulatedError("the emulated Picos in %s recorded no window of %.3f s of chip time within %d s"
                                % (state_dir, warm_s + window_s, timeout_s))
        time.sleep(0.05)
    try:
        return json.loads(out.read_text())
    finally:
        out.unlink(missing_ok=True)


class ChipClock(WallClock):
    """The chip time of the emulated Picos in state_dir, as a clock for the waits on them
    (picoring.clock): stalled() is the wall time since the clock was made in which the chips did
    not run (the emulator's wall time less its chip time, from its 0.5 s samples). A loaded
    machine runs the emulator at a few percent of real time (13.2 s of chip time in 624.5 s of
    wall time, a loaded suite run), so a wait sized for a chip counts chip time. The emulator
    never runs the chips ahead of wall time, so a hung chip still runs out a deadline; one whose
    emulator stopped sampling does too (the wall time since its last sample counts)."""

    stall_aware = True
    not_counted_what = "the emulated chip did not run"
    READ_EVERY_S = 0.1  # the emulator samples every 0.5 s: a deadline's restart at every line of output need not read it

    def __init__(self, state_dir):
        self.state_dir = Path(state_dir)
        self._base = None  # the emulator's wall less chip time at the clock's first sample
        self._stalled = 0.0
        self._read_at = None  # (monotonic s) the last read of the emulator's sample
        self.stalled()

    def stalled(self):
        now = self.monotonic()
        if self._read_at is not None and now - self._read_at < self.READ_EVERY_S:
            return self._stalled
        self._read_at = now
        sample = read_clock(self.state_dir)
        if sample and sample.get("wall_s") is not None and sample.get("chip_s") is not None:
            behind = sample["wall_s"] - sample["chip_s"]
            if self._base is None:
                self._base = behind
            self._stalled = max(self._stalled, behind - self._base)
        return self._stalled


def state_dir_for_ports(ports):
    """The state folder of the ring of emulated Picos that is up with these ports (DIR/ttyE<i>),
    or None for any other ports."""
    dirs = {Path(p).parent for p in ports if isinstance(p, str) and re.fullmatch(r"ttyE\d+", Path(p).name)}
    if len(dirs) != 1 or len(ports) == 0 or read_state(next(iter(dirs))) is None:
        return None
    return dirs.pop()


def chip_rate_for_ports(ports):
    """For the ports of a ring of emulated Picos that is up: a function giving its chip-seconds
    per wall-second over the emulator's last sample (0.5 s; None before the first), for the
    harness's deadlines (RingRun clock_rate). None for any other ports."""
    state_dir = state_dir_for_ports(ports)
    if state_dir is None:
        return None
    return lambda: (read_clock(state_dir) or {}).get("chip_per_wall")


def prepare(firmware=None, bootrom=None, say=None):
    """The checked files, node and rp2040js: (files, node, modules); EmulatedError otherwise."""
    files = assets.resolve_files(firmware, bootrom)
    node = assets.node_command()
    modules = assets.rp2040js_modules(say)
    for note in files["notes"]:
        if say:
            say(note)
    return files, node, modules


def start(state_dir, n, firmware=None, bootrom=None, attached=False, timeout=120.0, say=None, remove_dir=None):
    """Start the supervisor and wait until every board shows its REPL prompt; its state.
    attached: it dies with this process (for one command); else it outlives it (`up`).
    remove_dir: the supervisor removes state_dir when it stops (default: if it creates it)."""
    if not 1 <= n <= MAX_BOARDS:  # (1: a board on its own, its UART0 wired to itself; the commands ask for 2)
        raise EmulatedError("emulated Picos: -n must be 2 to %d (a ring; each busy chip takes a core)" % MAX_BOARDS)
    files, node, modules = prepare(firmware, bootrom, say)
    state_dir = Path(state_dir)
    old = read_state(state_dir)
    if old and _alive(old["supervisor_pid"]):
        raise EmulatedError("emulated Picos are already up in %s (supervisor pid %d): picoring emulated down first"
                            % (state_dir, old["supervisor_pid"]))
    created = not state_dir.exists()
    state_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "picoring.emulated.supervisor", str(state_dir), "-n", str(n),
           "--firmware", files["firmware"], "--bootrom", files["bootrom"], "--modules", str(modules), "--node", node]
    if attached:
        cmd += ["--parent-pid", str(os.getpid())]
    if created if remove_dir is None else remove_dir:
        cmd.append("--remove-dir")
    log = open(state_dir / LOG, "w")
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True, cwd="/")
    log.close()
    deadline = time.monotonic() + timeout
    try:
        while True:
            state = read_state(state_dir)
            if state and state.get("supervisor_pid") == proc.pid and state.get("ready"):
                return state
            if proc.poll() is not None or time.monotonic() > deadline:
                tail = _log_tail(state_dir)
                raise EmulatedError("emulated Picos did not come up%s: %s" % (
                    "" if proc.returncode is not None else " in %d s" % timeout, tail or "no output"))
            time.sleep(0.05)
    except BaseException:  # (Ctrl-C while they boot too: nothing is left running)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if created:  # killed before it could clean up after itself
            for name in [STATE, CLOCK, LOG] + ["ttyE%d" % i for i in range(n)]:
                (state_dir / name).unlink(missing_ok=True)
            try:
                state_dir.rmdir()
            except OSError:
                pass
        raise


def stop(state_dir, timeout=10.0):
    """Stop the supervisor (and so node); False if none was up."""
    state_dir = Path(state_dir)
    state = read_state(state_dir)
    if not state or not _alive(state["supervisor_pid"]):
        for name in (STATE, CLOCK):
            (state_dir / name).unlink(missing_ok=True)
        return False
    pid, node_pid = state["supervisor_pid"], state.get("node_pid")
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (_alive(pid) or (node_pid and _alive(node_pid))):
        time.sleep(0.05)
    for p in (pid, node_pid):
        if p and _alive(p):
            os.kill(p, signal.SIGKILL)
    return True


def _log_tail(state_dir, lines=3):
    try:
        text = (Path(state_dir) / LOG).read_text().strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


class EmulatedRing:
    """A ring of emulated Picos for one command (`run --emulated N`): ports in ring order,
    stopped by stop(), and with this process whatever ends it."""

    def __init__(self, n, firmware=None, bootrom=None, say=None):
        import tempfile

        self.state_dir = Path(tempfile.mkdtemp(prefix="picoring-emulated-"))
        try:
            self.state = start(self.state_dir, n, firmware, bootrom, attached=True, say=say, remove_dir=True)
        except BaseException:
            stop(self.state_dir)
            import shutil

            shutil.rmtree(self.state_dir, ignore_errors=True)
            raise
        self.ports = [b["usb"] for b in self.state["boards"]]

    def clock(self):
        return read_clock(self.state_dir)

    def record_window(self, warm_s, window_s, **kw):
        return record_window(self.state_dir, warm_s, window_s, **kw)

    def stopped_boards(self):
        """One line per board that stopped (HardFault, lockup, emulator error), naming it."""
        clock = self.clock() or {}
        return ["emulated Pico %d (%s) stopped: %s" % (i, self.ports[i], why)
                for i, why in enumerate(clock.get("stopped") or []) if why]

    def stop(self):
        import shutil

        stop(self.state_dir)
        shutil.rmtree(self.state_dir, ignore_errors=True)


def main(argv=None):
    p = argparse.ArgumentParser(prog="picoring.emulated.supervisor")
    p.add_argument("state_dir")
    p.add_argument("-n", type=int, required=True)
    p.add_argument("--firmware", required=True)
    p.add_argument("--bootrom", required=True)
    p.add_argument("--modules", required=True)
    p.add_argument("--node", required=True)
    p.add_argument("--parent-pid", type=int)
    p.add_argument("--remove-dir", action="store_true")
    a = p.parse_args(argv)
    supervise(a.state_dir, a.n, a.firmware, a.bootrom, a.modules, a.node, a.parent_pid, a.remove_dir)


if __name__ == "__main__":
    main()
