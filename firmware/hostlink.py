# Host link over the board's USB serial (docs/hostlink.md).
#
# The USB serial is also the REPL, so everything the board sends is printable
# ASCII ending in "\n" (a Pico may turn it into "\r\n"):
#   *<base64 of k 16-byte event records>\n   a batch of events
#   !<word> <text>\n                          a reply or a notice
# Commands come in as lines starting with "!". A byte 0x03 raises
# KeyboardInterrupt (a Pico's USB stack does that before we see the byte; the
# unix port hands it to us as data).
#
# Events go into a preallocated ring of fixed-size records (no allocation per
# event) and leave in batches when the loop is idle or the ring is half full.

import struct

try:
    from micropython import const
except ImportError:  # CPython

    def const(value):
        return value


try:
    from binascii import b2a_base64
except ImportError:  # pragma: no cover (every port we use has binascii)
    from ubinascii import b2a_base64

# Event codes (low nibble of the code byte); the frame kind is the high nibble.
EV_REQ = const(1)  # local request taken by the protocol
EV_SEND = const(2)  # frame written to the UART
EV_RECV = const(3)  # valid frame read from the UART
EV_ENTER = const(4)  # critical section starts
EV_EXIT = const(5)  # critical section ends
EV_BAD = const(6)  # bad frame dropped (aux = reason, count = bad frames so far)
EV_DROP = const(7)  # events lost because the ring was full (seq = how many)
EV_REJECT = const(8)  # local request refused: one is pending or in its CS already
EV_BOOT = const(9)  # the node loop started (aux = position, count = ring size)
EV_REGEN = const(10)  # a new token was made here (token fields as for a send)
EV_DISCARD = const(11)  # a received token was dropped: old epoch (aux 0) or fresh board (aux 1)
EV_TIMEOUT = const(12)  # no token for the timeout (aux = what was done, count = the timeout that fired, ms)
EV_HOSTERR = const(13)  # a host line was refused (aux = why, node.HOSTERR_*)

RECORD_SIZE = const(16)
# Record layout, little-endian: event seq u16, tick_us u32 (ticks_us mod 2**30),
# code u8 (ev | kind << 4), aux u8 (token state / bad reason), count u16,
# seq u32, epoch u16.
_RECORD_FMT = "<HIBBHIH"
TICK_MASK = const(0x3FFFFFFF)
BATCH_RECORDS = const(12)  # per line: 192 bytes -> 256 base64 characters

_CTRL_C = const(3)
_NL = const(10)
_CR = const(13)
_BANG = const(33)


def _line_len(records):
    return 1 + 4 * ((records * RECORD_SIZE + 2) // 3) + 1


_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

# Base64 of src[start:start + n] into line as "*...\n", without allocating:
# binascii.b2a_base64 returns a new bytes object per batch (about 60 bytes per
# hop). Viper exists on the rp2 and unix ports; elsewhere (CPython) the
# binascii path is used.
try:
    import micropython

    @micropython.viper
    def _encode_line(src, start: int, n: int, line) -> int:
        s = ptr8(src)
        d = ptr8(line)
        t = ptr8(_B64)
        d[0] = 42  # "*"
        i = start
        end = start + n
        o = 1
        while end - i >= 3:
            b0 = s[i]
            b1 = s[i + 1]
            b2 = s[i + 2]
            d[o] = t[b0 >> 2]
            d[o + 1] = t[((b0 & 3) << 4) | (b1 >> 4)]
            d[o + 2] = t[((b1 & 15) << 2) | (b2 >> 6)]
            d[o + 3] = t[b2 & 63]
            i += 3
            o += 4
        r = end - i
        if r == 1:
            b0 = s[i]
            d[o] = t[b0 >> 2]
            d[o + 1] = t[(b0 & 3) << 4]
            d[o + 2] = 61  # "="
            d[o + 3] = 61
            o += 4
        elif r == 2:
            b0 = s[i]
            b1 = s[i + 1]
            d[o] = t[b0 >> 2]
            d[o + 1] = t[((b0 & 3) << 4) | (b1 >> 4)]
            d[o + 2] = t[(b1 & 15) << 2]
            d[o + 3] = 61
            o += 4
        d[o] = 10  # "\n"
        return o + 1

except (ImportError, AttributeError, NameError, SyntaxError, ValueError):
    _encode_line = None


class EventLog:
    """Bounded ring of event records; full means dropped and counted, never silent."""

    def __init__(self, ticks_us, capacity=64):
        self._ticks_us = ticks_us
        self.capacity = capacity
        self._buf = bytearray(capacity * RECORD_SIZE)
        self._mv = memoryview(self._buf)
        self._head = 0  # next slot to write
        self.pending = 0  # records waiting to be flushed
        self.eseq = 0  # sequence number of the next event (also counts dropped ones)
        self.dropped = 0  # dropped since the last drop record
        self.dropped_total = 0
        self.enabled = True
        self.half = capacity // 2
        # "*" + base64 + "\n" of up to BATCH_RECORDS records, and one view per
        # record count, so that flushing allocates nothing.
        self._line = bytearray(_line_len(BATCH_RECORDS))
        lv = memoryview(self._line)
        self._line_views = [lv[: _line_len(k)] for k in range(BATCH_RECORDS + 1)]

    def record(self, ev, kind, aux, count, seq, epoch, tick=-1):
        """Append one event; tick = -1 means now. No allocation."""
        if not self.enabled:
            return
        if tick < 0:
            tick = self._ticks_us()
        if self.dropped and self.pending < self.capacity:
            self._put_drop(tick)
        if self.pending >= self.capacity:
            # Lost, but its number is used up so the host sees the gap too.
            self.eseq = (self.eseq + 1) & 0xFFFF
            self.dropped += 1
            self.dropped_total += 1
            return
        es = self.eseq
        self.eseq = (es + 1) & 0xFFFF
        self._put(es, tick, ev | (kind << 4), aux, count, seq, epoch)

    def _put_drop(self, tick):
        es = self.eseq
        self.eseq = (es + 1) & 0xFFFF
        n = self.dropped
        self.dropped = 0
        self._put(es, tick, EV_DROP, 0, 0, n, 0)

    def _put(self, es, tick, code, aux, count, seq, epoch):
        struct.pack_into(_RECORD_FMT, self._buf, self._head * RECORD_SIZE, es, tick & TICK_MASK, code, aux, count & 0xFFFF, seq & 0xFFFFFFFF, epoch & 0xFFFF)
        self._head += 1
        if self._head == self.capacity:
            self._head = 0
        self.pending += 1

    def flush_one(self, write, max_records=BATCH_RECORDS):
        """Write at most one batch line; returns the number of records sent."""
        if self.dropped and self.pending < self.capacity:
            self._put_drop(self._ticks_us())
        n = self.pending
        if not n:
            return 0
        tail = self._head - n
        if tail < 0:
            tail += self.capacity
        if n > self.capacity - tail:
            n = self.capacity - tail  # up to the end of the ring; the rest next time
        if n > max_records:
            n = max_records
        if _encode_line is not None:
            # into the preallocated line, written through a view cut in __init__
            _encode_line(self._buf, tail * RECORD_SIZE, n * RECORD_SIZE, self._line)
            write(self._line_views[n])
        else:
            write(b"*")
            write(b2a_base64(self._mv[tail * RECORD_SIZE : (tail + n) * RECORD_SIZE]))
        self.pending -= n
        return n

    def reset(self):
        """Forget pending records and counters (the host asked for a clean start)."""
        self.pending = 0
        self._head = 0
        self.dropped = 0
        self.dropped_total = 0
        self.eseq = 0


class HostLink:
    """Assembles command lines from the host and writes text lines back.

    io must have read_byte() -> 0..255, or -1 when nothing is waiting, or -2
    when the host side is gone; and write(buf).
    """

    def __init__(self, io, line_max=80):
        self.io = io
        self.write = io.write
        self._read_byte = io.read_byte  # stored once: a bound method made per call allocates
        self.line = bytearray(line_max)
        self._n = 0
        self._overflow = False
        self.bad_lines = 0  # lines not starting with "!" or too long
        self.closed = False

    def poll(self):
        """Returns the length of a complete command line now in self.line, 0 when
        there is none yet, or -1 (not a command: no "!") or -2 (too long) for a
        line that was refused (counted in bad_lines)."""
        read_byte = self._read_byte
        line = self.line
        while True:
            b = read_byte()
            if b < 0:
                if b == -2:
                    self.closed = True
                return 0
            if b == _CTRL_C:
                self._n = 0
                raise KeyboardInterrupt
            if b == _NL or b == _CR:
                n = self._n
                self._n = 0
                if self._overflow:
                    self._overflow = False
                    self.bad_lines += 1
                    return -2
                if n == 0:
                    continue  # blank line or the \n of \r\n
                if line[0] != _BANG:
                    self.bad_lines += 1
                    return -1
                return n
            if self._n < len(line):
                line[self._n] = b
                self._n += 1
            else:
                self._overflow = True

    def reply(self, text):
        """Send one text line (not on the hot path: it allocates)."""
        self.write(("!" + text + "\n").encode())
