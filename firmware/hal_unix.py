# Virtual board (MicroPython unix port). The UART is named by the config:
# "virtual": {"uart": [3, 4]}: two inherited fds, RX (non-blocking) and TX, the
# pipe and socket of a virtual ring (host/picoring/virtual/board.py), whose relay moves
# the bytes between boards, and times their arrival (PipeUart); or "virtual": {"uart": "/dev/ttyUSB0"}: a serial device
# (or pty) path, TX and RX. The USB serial is this process's stdin/stdout (a pty
# made by the virtual ring, or pipes). "virtual": {"i2c": PATH} gives the board an I2C bus
# with one FRAM on it (FramImageI2C), backed by the image file that every board of the
# ring shares (--resource fram, docs/fram.md).

import select
import termios
import time

import hal

# A pass of the node loop reads the UART at least this often (Idle polls 1 ms at most), and a gap
# between two reads longer than _GAP_US is time in which the board's process did not run.
_PASS_US = 1_000
_GAP_US = 50_000
_TICKS_MASK = time.ticks_add(0, -1)  # ticks_us() wraps past it: 2**62 - 1 on a 64-bit unix port

# termios.tcgetattr()[6] indexes on Linux.
_VTIME = 5
_VMIN = 6


class PtyUart:
    """A pty slave in raw mode with VMIN=0, VTIME=0: read() returns what is there
    (0 bytes when nothing is), so readinto(buf) never blocks and needs no poll.
    Tested: a plain blocking open() + readinto(buf) waits until buf is full."""

    def __init__(self, path):
        self.path = path
        self._f = open(path, "r+b")
        fd = self._f.fileno()
        termios.setraw(fd)
        attr = termios.tcgetattr(fd)
        attr[6][_VMIN] = 0
        attr[6][_VTIME] = 0
        termios.tcsetattr(fd, termios.TCSANOW, attr)
        self.readinto = self._f.readinto  # returns 0 or None when nothing is there
        self.write = self._f.write
        self.fileno = self._f.fileno

    def close(self):
        self._f.close()


class PipeUart:
    """RX and TX on two fds this process inherited: a virtual ring's wire (host/picoring/virtual).
    The fds belong to the process, as a board's pins do: close() leaves them open.

    The relay writes the RX pipe in records, each in one write (so whole, never split):
        length (2 bytes), due (4 bytes): CLOCK_MONOTONIC in us, mod 2**32, little-endian
        the record's bytes, all of which have fully arrived on the wire at `due`
    and may write one before it is due (up to virtual.board.RX_LEAD_S), so that this process,
    woken by it, is ready when the bytes arrive instead of waking only then (a wake-up on a
    shared host takes tens of microseconds; a token frame's wire time at 1 Mbaud is 160).
    readinto() gives no byte before its due time: it reads the header, and leaves the bytes in
    the pipe until then (the pipe stays readable, so the idle poll returns at once: the board
    waits by spinning the node loop, at most the lead). time.ticks_us is CLOCK_MONOTONIC on the
    unix port, the clock the relay reads (time.monotonic on Linux).

    The RX fd is non-blocking (its owner made it so): readinto() returns what is there, 0 or
    None when nothing is. It allocates nothing: the views of the caller's buffer are cut once."""

    def __init__(self, rx_fd, tx_fd):
        self._rx = open(rx_fd, "rb")
        self._tx = open(tx_fd, "wb")
        self.write = self._tx.write
        self.fileno = self._rx.fileno
        self._read = self._rx.readinto
        self._head = bytearray(6)
        head = memoryview(self._head)
        self._head_views = [head[k:] for k in range(6)]  # where the next header byte goes
        self._have = 0   # header bytes read
        self._left = 0   # the record's bytes still in the pipe (its header read)
        self._due = 0
        self._buf = None  # the caller's buffer, and its views by length
        self._views = None
        self.clock = None  # the board's RingStoodStill.ticks_us, read at every pass (its gaps)

    def readinto(self, buf):
        # The node loop reads its UART at every pass, and a pass never waits more than Idle's 1 ms:
        # a longer gap between two reads of the board's clock is time this process was not run
        # (RingStoodStill.ticks_us). Read here too, so that every pass reads it.
        if self.clock is not None:
            self.clock()
        if not self._left:
            n = self._read(self._head_views[self._have])
            if not n:
                return n
            self._have += n
            if self._have < 6:
                return 0  # (a record is written whole: not seen, kept for safety)
            self._have = 0
            h = self._head
            self._left = h[0] | h[1] << 8
            self._due = h[2] | h[3] << 8 | h[4] << 16 | h[5] << 24
            if not self._left:
                return 0
        if (time.ticks_us() - self._due) & 0xFFFFFFFF >= 0x80000000:
            return 0  # not arrived yet
        if buf is not self._buf:
            mv = memoryview(buf)
            self._views = [mv[:k] for k in range(len(buf) + 1)]
            self._buf = buf
        k = self._left if self._left < len(buf) else len(buf)
        n = self._read(self._views[k])
        if n:
            self._left -= n
        return n

    def close(self):
        pass


class Idle:
    """Sleep in poll() until the UART or the host link has input, at most 1 ms.

    A Pico has a core of its own to spin on; a virtual board shares the host's
    few cores with its neighbours and the wire relay, and spinning there cost
    about a fifth of a core per idle board. Input ends the wait at once, so
    frames see no added delay; only a running critical-section timer does
    (1 ms resolution)."""

    def __init__(self, uart, rx):
        self._poll = select.poll()
        self._poll.register(uart.fileno(), select.POLLIN)
        self._poll.register(rx, select.POLLIN)

    def __call__(self):
        for _ in self._poll.ipoll(1):  # ipoll: no result list allocated
            break


class FramImageI2C:
    """A stand-in for machine.I2C with one FRAM on the bus (MB85RC256V, 32 KB): the memory
    is an image file that every board of the ring opens, as every Pico shares one chip.

    As machine.I2C: positional arguments only, a stop flag, writeto returns the ACKs
    received, an address nobody answers raises OSError(EIO) (the rp2 port's NACK). As the
    chip: a write's first two bytes set the memory address (15 bits, big-endian), the rest
    are written there; a read reads from the address, which moves on by what was read or
    written. The address is this board's alone: on the real bus a write without a STOP
    followed by a read after a repeated START keeps the bus, so nobody moves it in between.

    One file read or write per transaction, and no lock across transactions: a read and a
    later write by one board leave a gap in which another board's transactions run, so two
    critical sections that overlap really lose an update, as on the chip."""

    SIZE = 32768

    def __init__(self, path, address=0x50):
        self.path = path
        self.address = address
        self._f = open(path, "r+b")  # MicroPython's files are unbuffered: each call is one syscall
        self._at = 0
        self.transactions = 0

    def _nack(self, address):
        if address != self.address:
            raise OSError(5)  # EIO: no device answers at that address

    def writeto(self, address, buf, stop=True):
        self.transactions += 1  # (attempts: a NACKed one counts)
        self._nack(address)
        n = len(buf)
        if n >= 2:
            self._at = ((buf[0] << 8) | buf[1]) & (self.SIZE - 1)
        if n > 2:
            data = buf[2:]
            if self._at + len(data) > self.SIZE:
                raise OSError(5)  # (the chip wraps to 0; the counter never comes near the end)
            self._f.seek(self._at)
            self._f.write(data)
            self._at = (self._at + len(data)) & (self.SIZE - 1)
        return n

    def readfrom_into(self, address, buf, stop=True):
        self.transactions += 1  # (attempts: a NACKed one counts)
        self._nack(address)
        self._f.seek(self._at)
        got = self._f.readinto(buf)
        if got != len(buf):
            raise OSError(5)  # an image shorter than the chip: made wrong
        self._at = (self._at + got) & (self.SIZE - 1)

    def close(self):
        self._f.close()


def open_i2c(cfg):
    """The board's I2C bus for --resource fram: the ring's FRAM image (cfg["virtual"]["i2c"]).
    The board's filesystem is its working directory; a Pico looks for packages in /lib
    (adafruit_bus_device, copied there by the deploy), so lib goes on the path here too."""
    import sys

    if "lib" not in sys.path:
        sys.path.append("lib")
    return FramImageI2C(cfg["virtual"]["i2c"])


class RingStoodStill:
    """The microseconds so far in which the virtual ring's processes stood still (the host ran
    others while they were ready to run, or the relay did not run at all), as the relay counts
    it, in a file it replaces whole (cfg["virtual"]["stood_still"]:
    host/picoring/virtual/ringclock.py, RingStoodStill): "STOOD WRITTEN LATE_AFTER", what stood
    still since the relay started, when it wrote that and when its next write is overdue
    (CLOCK_MONOTONIC us, as this board's ticks_us). What stood still
    between two reads is what STOOD grew by, not this board's time less a clock: that held the
    write's age (up to the relay's period), and a board that read late in a period was
    credited that much less for the next stall (a 100 ms timeout fired while the relay stood
    still, issue 36). A relay that stands still now does not write: past LATE_AFTER, the time
    since counts, as the relay will count it at its next write. Never less than said before.
    Read when a recovery timeout is over (node.NodeLoop._stood_still_meanwhile) and, for a
    clocked protocol, at most every 50 ms of housekeeping (NodeLoop._housekeeping_ring_clocked);
    never on the hot path.

    It counts this board's own gaps too (gap(), from ticks_us()): a process that is not run at all
    (stopped, blocked, on a virtual CPU its hypervisor did not run) waits on no run queue, so the
    relay's count missed it, and a ring whose boards stood still 1.5 s made a token at every
    board. Between two reads, what stood still is the longer of the ring's and the board's own
    (both count the same wall time: a stall of the whole machine is in both)."""

    def __init__(self, path):
        self._path = path
        self._ring = 0  # what stood still, as last read (the relay's count, and its lateness)
        self._count = 0  # the relay's count since the first read
        self._count_at = None  # that count as the file said it last
        self._own = 0  # this board's gaps since the last read
        self._last = 0
        self._leave_out = None  # a clocked node loop's: its node.now leaves a gap out at once (bind)
        self._at = None  # the last tick ticks_us() gave (none yet: the boot before it is no gap)
        self._written = None  # the relay's last write as last read (its ticks_us), None: none read
        self._overdue = False  # at that read, the relay's next write was overdue (it stood still)

    def __call__(self):
        ring = self._ring
        try:
            with open(self._path) as f:
                count, written, late_after = f.read().split()
            # The relay's count since it started: what it grew by since the last read (a ring
            # started again counts from its own zero)
            count = int(count)
            if self._count_at is not None and count > self._count_at:
                self._count += count - self._count_at
            self._count_at = count
            still = self._count
            overdue = time.ticks_diff(time.ticks_us(), int(late_after) & _TICKS_MASK)
            self._written = int(written) & _TICKS_MASK
            self._overdue = overdue > 0
            if overdue > 0:
                still += overdue  # the relay stands still now: no write since it was due
            if still > ring:
                self._ring = still
        except (OSError, ValueError):
            pass  # not written yet
        more = self._ring - ring
        if self._own > more:
            more = self._own
        self._own = 0
        self._last += more
        return self._last

    def current_since(self, t):
        """Whether the count last read is the relay's look at the ring at or after tick t (or the
        relay stood still then, which the count goes on growing by). A stall of another board
        reaches the relay's count at its first look after the stall ended (the kernel's schedstat
        says a run-queue wait when the wait is over, and the relay looks every 100 ms), so a
        timeout that fell due at t is acted on only once this is true: before, a stall that had
        already held the token up could still be missing from the count (a wandering-token
        component made a token 62 ms after the board that held the token up ran again, issue 36).
        True with no write read (no relay clock to wait for)."""
        if self._written is None or self._overdue:
            return True
        return time.ticks_diff(self._written, t) >= 0

    def bind(self, leave_out):
        """leave_out(still, t): a clocked node loop's (NodeLoop.leave_out_stillness), to which
        a gap goes at once."""
        self._leave_out = leave_out

    def ticks_us(self):
        """time.ticks_us, as the board's clock (its node loop's and its UART's, every pass): a
        read more than _GAP_US after the one before says that the process was not run meanwhile,
        and the gap goes to gap() before the tick is returned, so that no tick of node.now
        counts it, wherever in the pass the stop fell. (Seen at the UART's next read alone, a
        stop after a pass's read was ticked in by its housekeeping first: a 3 s SIGSTOP of the
        ring's boards made a wandering token at once, in a loaded suite run.)"""
        t = time.ticks_us()
        at = self._at
        self._at = t
        if at is not None:
            gap = time.ticks_diff(t, at)
            if gap > _GAP_US:
                self.gap(gap - _PASS_US)
        return t

    def gap(self, us):
        """The board's process was not run for `us` (ticks_us). A clocked loop's node.now leaves
        it out now, as _housekeeping_ring_clocked would at its next read: a frame or a critical
        section's end ticked first counted the stall on node.now (it never goes back), and the
        read after it then held node.now still for as long, so the token sat on that board while
        the others made theirs."""
        self._own += us
        still = self()  # (read now: its max with the ring's is over this gap's own interval)
        if self._leave_out is not None:
            self._leave_out(still, time.ticks_us())


def open_board(cfg):
    u = cfg["virtual"]["uart"]  # checked by main.load_config
    uart = PtyUart(u) if isinstance(u, str) else PipeUart(u[0], u[1])
    rx, tx = hal.stdio_streams()
    board = hal.Board(uart, hal.StreamHost(rx, tx), None, "unix", Idle(uart, rx))
    if cfg.get("resource"):
        board.i2c = open_i2c(cfg)
    if isinstance(cfg["virtual"].get("stood_still"), str):
        stood = board.ring_stood_still = RingStoodStill(cfg["virtual"]["stood_still"])
        board.ticks_us = stood.ticks_us
        if isinstance(uart, PipeUart):
            uart.clock = stood.ticks_us
    return board
