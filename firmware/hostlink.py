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

try:
    from micropython import const
    import micropython
except ImportError:  # CPython

    def const(value):
        return value

    class micropython:
        """@micropython.native is the compiler's on MicroPython; a no-op here."""

        @staticmethod
        def native(f):
            return f


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
EV_GAP = const(14)  # frames lost on the link into this board (count = how many, mod 256; aux = lseq of the frame after them)
EV_RES = const(15)  # the shared resource (FRAM counter) accessed: aux = RES_*, count = errno (0: done), seq = value

# aux of an EV_RES event: what was done to the shared counter
RES_READ = const(1)  # read at critical-section entry
RES_WRITE = const(2)  # written at critical-section exit (what was read, plus one)
RES_COUNT = const(3)  # read for the host (!res)
RES_SET = const(4)  # set by the host (!res set V)

RECORD_SIZE = const(16)
# Record layout, little-endian: event seq u16, tick_us u32 (ticks_us mod 2**30),
# code u8 (ev | kind << 4), aux u8 (token state / bad reason), count u16,
# seq u32 (an entry number: 30 bits, frame.SEQ_MASK), epoch u16 (struct "<HIBBHIH";
# written by record_viper / _put_py, read by the host: picoring/hostlink.py).
TICK_MASK = const(0x3FFFFFFF)
BATCH_RECORDS = const(12)  # per line: 192 bytes -> 256 base64 characters

# EventLog.st: the ring's state in an int array that the viper record writer reads
# and writes (array('i') on MicroPython; a list where there is no array module).
_HEAD = const(0)  # next slot to write
L_PENDING = const(1)  # records waiting to be flushed
_ESEQ = const(2)  # sequence number of the next event (also counts dropped ones)
_DROPPED = const(3)  # dropped since the last drop record
L_DROPPED_TOTAL = const(4)  # (wraps at 2**30)
_CAP = const(5)
L_ENABLED = const(6)
_LOG_ST_SIZE = const(7)
_COUNT_MASK = const(0x3FFFFFFF)

_CTRL_C = const(3)
_NL = const(10)
_CR = const(13)
_BANG = const(33)


def _line_len(records):
    return 1 + 4 * ((records * RECORD_SIZE + 2) // 3) + 1


def _int_array(n):
    try:
        from array import array

        return array("i", bytes(4 * n))
    except ImportError:  # pragma: no cover
        return [0] * n


def _put_py(buf, st, code, aux, count, seq, epoch, tick):
    """One record into the slot at st[_HEAD], numbered st[_ESEQ]."""
    o = st[_HEAD] * RECORD_SIZE
    es = st[_ESEQ]
    st[_ESEQ] = (es + 1) & 0xFFFF
    buf[o] = es & 0xFF
    buf[o + 1] = es >> 8
    buf[o + 2] = tick & 0xFF
    buf[o + 3] = (tick >> 8) & 0xFF
    buf[o + 4] = (tick >> 16) & 0xFF
    buf[o + 5] = (tick >> 24) & 0x3F
    buf[o + 6] = code & 0xFF
    buf[o + 7] = aux & 0xFF
    buf[o + 8] = count & 0xFF
    buf[o + 9] = (count >> 8) & 0xFF
    buf[o + 10] = seq & 0xFF
    buf[o + 11] = (seq >> 8) & 0xFF
    buf[o + 12] = (seq >> 16) & 0xFF
    buf[o + 13] = (seq >> 24) & 0x3F
    buf[o + 14] = epoch & 0xFF
    buf[o + 15] = (epoch >> 8) & 0xFF
    h = st[_HEAD] + 1
    st[_HEAD] = 0 if h == st[_CAP] else h
    st[L_PENDING] += 1


def record_py(buf, st, code, aux, count, seq, epoch, tick):
    """Append one event record (code = ev | kind << 4) to the ring buf/st; a full
    ring drops it, counted, and its number is used up so the host sees the gap.
    Returns 1 when the record was kept."""
    if not st[L_ENABLED]:
        return 0
    if st[_DROPPED] and st[L_PENDING] < st[_CAP]:
        drop_record(buf, st, tick)
    if st[L_PENDING] >= st[_CAP]:
        st[_ESEQ] = (st[_ESEQ] + 1) & 0xFFFF
        st[_DROPPED] = (st[_DROPPED] + 1) & _COUNT_MASK
        st[L_DROPPED_TOTAL] = (st[L_DROPPED_TOTAL] + 1) & _COUNT_MASK
        return 0
    _put_py(buf, st, code, aux, count, seq, epoch, tick)
    return 1


def record_fields_py(buf, st, code, src, at, tick):
    """record() with aux, count, seq, epoch taken from src[at:at + 4] (an int array:
    the frame decoder's fields), so that the caller's call frame stays small."""
    return record(buf, st, code, src[at], src[at + 1], src[at + 2], src[at + 3], tick)


def record_token_py(buf, st, code, tok, tick):
    """record() with aux, count, seq, epoch from tok.state, .count, .seq, .epoch
    (a protocol node's token fields)."""
    return record(buf, st, code, tok.state, tok.count, tok.seq, tok.epoch, tick)


def drop_record(buf, st, tick):
    """The EV_DROP record saying how many were lost (rare: not worth a viper twin)."""
    n = st[_DROPPED]
    st[_DROPPED] = 0
    _put_py(buf, st, EV_DROP, 0, 0, n, 0, tick)


_B64 = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

record = record_py
record_fields = record_fields_py
record_token = record_token_py
# Viper twins, on the ports that have the emitter (rp2 and unix). record_viper is
# record_py in native code: an event costs a call, not 40 bytecodes. _encode_line:
# base64 of src[start:start + n] into line as "*...\n", without allocating
# (binascii.b2a_base64 returns a new bytes object per batch); elsewhere (CPython)
# the binascii path is used.
try:
    @micropython.viper  # (the stub of CPython has no viper: AttributeError, below)
    def record_viper(buf, st, code: int, aux: int, count: int, seq: int, epoch: int, tick: int) -> int:
        v = ptr32(st)
        if not v[L_ENABLED]:
            return 0
        if v[_DROPPED] and v[L_PENDING] < v[_CAP]:
            drop_record(buf, st, tick)
        if v[L_PENDING] >= v[_CAP]:
            v[_ESEQ] = (v[_ESEQ] + 1) & 0xFFFF
            v[_DROPPED] = (v[_DROPPED] + 1) & _COUNT_MASK
            v[L_DROPPED_TOTAL] = (v[L_DROPPED_TOTAL] + 1) & _COUNT_MASK
            return 0
        b = ptr8(buf)
        o = v[_HEAD] * RECORD_SIZE
        es = v[_ESEQ]
        v[_ESEQ] = (es + 1) & 0xFFFF
        b[o] = es & 0xFF
        b[o + 1] = es >> 8
        b[o + 2] = tick & 0xFF
        b[o + 3] = (tick >> 8) & 0xFF
        b[o + 4] = (tick >> 16) & 0xFF
        b[o + 5] = (tick >> 24) & 0x3F
        b[o + 6] = code & 0xFF
        b[o + 7] = aux & 0xFF
        b[o + 8] = count & 0xFF
        b[o + 9] = (count >> 8) & 0xFF
        b[o + 10] = seq & 0xFF
        b[o + 11] = (seq >> 8) & 0xFF
        b[o + 12] = (seq >> 16) & 0xFF
        b[o + 13] = (seq >> 24) & 0x3F
        b[o + 14] = epoch & 0xFF
        b[o + 15] = (epoch >> 8) & 0xFF
        h = v[_HEAD] + 1
        v[_HEAD] = 0 if h == v[_CAP] else h
        v[L_PENDING] += 1
        return 1

    @micropython.viper
    def record_fields_viper(buf, st, code: int, src, at: int, tick: int) -> int:
        f = ptr32(src)
        return int(record_viper(buf, st, code, f[at], f[at + 1], f[at + 2], f[at + 3], tick))

    @micropython.viper
    def record_token_viper(buf, st, code: int, tok, tick: int) -> int:
        return int(record_viper(buf, st, code, int(tok.state), int(tok.count), int(tok.seq), int(tok.epoch), tick))

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

    record = record_viper
    record_fields = record_fields_viper
    record_token = record_token_viper
except (ImportError, AttributeError, NameError, SyntaxError, ValueError):
    _encode_line = None


class EventLog:
    """Bounded ring of event records; full means dropped and counted, never silent.

    The node loop writes records with the module's record(log.buf, log.st, ...)
    itself (one call less per event); record() below is the same for the rare paths.
    """

    def __init__(self, ticks_us, capacity=64):
        self._ticks_us = ticks_us
        self.capacity = capacity
        self.buf = bytearray(capacity * RECORD_SIZE)
        self._mv = memoryview(self.buf)
        self.st = _int_array(_LOG_ST_SIZE)
        self.st[_CAP] = capacity
        self.st[L_ENABLED] = 1
        self.half = capacity // 2
        # "*" + base64 + "\n" of up to BATCH_RECORDS records, and one view per
        # record count, so that flushing allocates nothing.
        self._line = bytearray(_line_len(BATCH_RECORDS))
        lv = memoryview(self._line)
        self._line_views = [lv[: _line_len(k)] for k in range(BATCH_RECORDS + 1)]

    pending = property(lambda self: self.st[L_PENDING])
    eseq = property(lambda self: self.st[_ESEQ])

    @property
    def enabled(self):
        return bool(self.st[L_ENABLED])

    @enabled.setter
    def enabled(self, on):
        self.st[L_ENABLED] = 1 if on else 0

    @property
    def dropped_total(self):
        return self.st[L_DROPPED_TOTAL]

    @dropped_total.setter
    def dropped_total(self, value):
        self.st[L_DROPPED_TOTAL] = value

    @micropython.native
    def record(self, ev, kind, aux, count, seq, epoch, tick=-1):
        """Append one event; tick = -1 means now. No allocation."""
        if tick < 0:
            tick = self._ticks_us()
        record(self.buf, self.st, ev | (kind << 4), aux, count, seq, epoch, tick & TICK_MASK)

    @micropython.native
    def flush_one(self, write, max_records=BATCH_RECORDS):
        """Write at most one batch line; returns the number of records sent."""
        st = self.st
        if st[_DROPPED] and st[L_PENDING] < st[_CAP]:
            drop_record(self.buf, st, self._ticks_us() & TICK_MASK)
        n = st[L_PENDING]
        if not n:
            return 0
        tail = st[_HEAD] - n
        if tail < 0:
            tail += self.capacity
        if n > self.capacity - tail:
            n = self.capacity - tail  # up to the end of the ring; the rest next time
        if n > max_records:
            n = max_records
        if _encode_line is not None:
            # into the preallocated line, written through a view cut in __init__
            _encode_line(self.buf, tail * RECORD_SIZE, n * RECORD_SIZE, self._line)
            write(self._line_views[n])
        else:
            write(b"*")
            write(b2a_base64(self._mv[tail * RECORD_SIZE : (tail + n) * RECORD_SIZE]))
        st[L_PENDING] -= n
        return n

    def reset(self):
        """Forget pending records and counters (the host asked for a clean start)."""
        st = self.st
        for i in (_HEAD, L_PENDING, _ESEQ, _DROPPED, L_DROPPED_TOTAL):
            st[i] = 0


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
        self.greet = False  # say hello again before answering the next line (NodeLoop.start)
        self.closed = False

    @micropython.native
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
                    self.bad_lines = (self.bad_lines + 1) & _COUNT_MASK
                    return -2
                if n == 0:
                    continue  # blank line or the \n of \r\n
                if line[0] != _BANG:
                    self.bad_lines = (self.bad_lines + 1) & _COUNT_MASK
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
