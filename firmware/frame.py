# Link frame codec for the UART between two boards (docs/hostlink.md, "Link frames").
#
# On the wire a frame is   00 | COBS(kind, lseq, payload..., crc_hi, crc_lo) | 00
#   kind     TOKEN (1), REQUEST (2), PROBE (4: discovery, never given to the protocol),
#            CLAIM (5: token recovery, docs/recovery.md) or AGAIN (6: a re-announced request)
#   lseq     link sequence byte (per sender, wraps at 256; receivers keep the last one)
#   payload  TOKEN: count u16, state u8, seq u32, epoch u16 (little-endian); REQUEST: none;
#            PROBE: probe id u16; CLAIM: epoch u16, origin u16, join u8, seq u32, nonce u16;
#            AGAIN: origin u16
#   crc      CRC-16/CCITT-FALSE over kind..payload, big-endian
# The leading 00 costs one byte and means a frame that follows line garbage is still
# received: the garbage ends in its own (bad, counted) frame instead of swallowing it.
#
# Runs on MicroPython and CPython. Every frame has a fixed size, so the encoder keeps
# one preallocated buffer per kind and nothing is allocated per frame.

try:
    from micropython import const
except ImportError:  # CPython

    def const(value):
        return value


TOKEN = const(1)
REQUEST = const(2)
BAD = const(3)  # returned by Decoder.next() for a dropped frame (reason in last_bad)
PROBE = const(4)  # `picoring discover`: which board does my TX reach?
CLAIM = const(5)  # a claim for a new token, or a join round of a board that just started
AGAIN = const(6)  # a request message announced again after a timeout

_TOKEN_RAW = const(13)  # kind, lseq, 9 payload bytes, 2 crc bytes
_REQUEST_RAW = const(4)  # kind, lseq, 2 crc bytes
_PROBE_RAW = const(6)  # kind, lseq, probe id u16, 2 crc bytes
_AGAIN_RAW = const(6)  # kind, lseq, origin u16, 2 crc bytes
_CLAIM_RAW = const(15)  # kind, lseq, epoch u16, origin u16, join, seq u32, nonce u16, 2 crc bytes
TOKEN_WIRE = const(16)  # 00 + COBS(13 bytes: one code byte more) + 00
REQUEST_WIRE = const(7)
PROBE_WIRE = const(9)
CLAIM_WIRE = const(18)
AGAIN_WIRE = const(9)
_MAX_RAW = const(16)  # longer frames are bad (bad length) before they end

# Why a frame was dropped (the order is the index into Decoder.bad_counts).
BAD_CRC = const(0)
BAD_LEN = const(1)
BAD_COBS = const(2)
BAD_KIND = const(3)
BAD_REASONS = ("crc", "len", "cobs", "kind")


def _make_crc_table():
    table = []
    for i in range(256):
        c = i << 8
        for _ in range(8):
            c = ((c << 1) ^ 0x1021) if c & 0x8000 else (c << 1)
        table.append(c & 0xFFFF)
    return tuple(table)


# A tuple of small ints: indexing it is one bytecode and allocates nothing.
# Measured on the unix port: 3x faster than the bitwise loop (tests/test_frame.py).
_CRC_TABLE = _make_crc_table()


def crc16(buf, n):
    """CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF) of buf[0:n]."""
    t = _CRC_TABLE
    c = 0xFFFF
    for i in range(n):
        c = ((c << 8) & 0xFFFF) ^ t[(c >> 8) ^ buf[i]]
    return c


def crc16_bitwise(buf, n):
    """Same CRC without the table (kept for the measurement and as a cross-check)."""
    c = 0xFFFF
    for i in range(n):
        c ^= buf[i] << 8
        for _ in range(8):
            c = ((c << 1) ^ 0x1021) if c & 0x8000 else (c << 1)
        c &= 0xFFFF
    return c


def _cobs_into(raw, n, out):
    """COBS-encode raw[0:n] (n < 254) into out[1:], framed by out[0] = 00 and a
    trailing 00. Returns the wire length (n + 3)."""
    out[0] = 0
    code_at = 1
    code = 1
    j = 2
    for i in range(n):
        b = raw[i]
        if b:
            out[j] = b
            code += 1
        else:
            out[code_at] = code
            code_at = j
            code = 1
        j += 1
    out[code_at] = code
    out[j] = 0
    return j + 1


class Encoder:
    """Builds wire frames in two preallocated buffers (token_out, request_out)."""

    def __init__(self):
        self.lseq = 0
        self._raw = bytearray(_MAX_RAW)
        self.token_out = bytearray(TOKEN_WIRE)
        self.request_out = bytearray(REQUEST_WIRE)
        self.probe_out = bytearray(PROBE_WIRE)
        self.claim_out = bytearray(CLAIM_WIRE)
        self.again_out = bytearray(AGAIN_WIRE)

    def token(self, count, state, seq, epoch):
        """Encode a token frame; returns token_out (write it whole)."""
        r = self._raw
        r[0] = TOKEN
        r[1] = self.lseq
        self.lseq = (self.lseq + 1) & 0xFF
        r[2] = count & 0xFF
        r[3] = (count >> 8) & 0xFF
        r[4] = state & 0xFF
        r[5] = seq & 0xFF
        r[6] = (seq >> 8) & 0xFF
        r[7] = (seq >> 16) & 0xFF
        r[8] = (seq >> 24) & 0xFF
        r[9] = epoch & 0xFF
        r[10] = (epoch >> 8) & 0xFF
        c = crc16(r, 11)
        r[11] = c >> 8
        r[12] = c & 0xFF
        _cobs_into(r, _TOKEN_RAW, self.token_out)
        return self.token_out

    def request(self):
        """Encode a request frame; returns request_out (write it whole)."""
        r = self._raw
        r[0] = REQUEST
        r[1] = self.lseq
        self.lseq = (self.lseq + 1) & 0xFF
        c = crc16(r, 2)
        r[2] = c >> 8
        r[3] = c & 0xFF
        _cobs_into(r, _REQUEST_RAW, self.request_out)
        return self.request_out

    # token() and request() are written out in full: every hop encodes one, and a
    # call costs microseconds on a Pico. The rare frames share the helpers below.

    def again(self, origin):
        """Encode a re-announced request frame from processor origin; returns again_out."""
        r = self._head(AGAIN)
        _put(r, 2, origin, 2)
        return self._seal(4, self.again_out)

    def claim(self, epoch, origin, join, seq, nonce=0):
        """Encode a claim (join=0) or join (join=1) frame; returns claim_out."""
        r = self._head(CLAIM)
        _put(r, 2, epoch, 2)
        _put(r, 4, origin, 2)
        r[6] = join & 0xFF
        _put(r, 7, seq, 4)
        _put(r, 11, nonce, 2)
        return self._seal(13, self.claim_out)

    def probe(self, pid):
        """Encode a probe frame carrying pid (0..65535); returns probe_out."""
        r = self._head(PROBE)
        _put(r, 2, pid, 2)
        return self._seal(4, self.probe_out)

    def _head(self, kind):
        r = self._raw
        r[0] = kind
        r[1] = self.lseq
        self.lseq = (self.lseq + 1) & 0xFF
        return r

    def _seal(self, n, out):
        """The CRC of raw[0:n] after it, the whole COBS-framed into out; returns out."""
        r = self._raw
        c = crc16(r, n)
        r[n] = c >> 8
        r[n + 1] = c & 0xFF
        _cobs_into(r, n + 2, out)
        return out


def _put(buf, i, value, size):
    """value little-endian into buf[i:i + size]."""
    for k in range(size):
        buf[i + k] = (value >> (8 * k)) & 0xFF


class Decoder:
    """Incremental receiver: feed(buf, n) then call next() until it returns 0.

    next() returns the kind of each complete valid frame and leaves its fields
    in count/state/seq/epoch/lseq (a claim's in epoch/origin/join/seq, a probe's
    in probe); for a dropped frame it returns BAD
    (counted in bad and bad_counts[reason], reason in last_bad) so the caller can
    log it, but a bad frame's content is never exposed.
    """

    def __init__(self):
        self._raw = bytearray(_MAX_RAW + 2)
        self._src = None
        self._pos = 0
        self._end = 0
        self._len = 0  # decoded bytes of the frame under way
        self._left = 0  # data bytes left in the current COBS block
        self._code = 0xFF  # code of the current block (0xFF: no implied zero)
        self._junk = False  # frame under way is already bad (too long)
        self.count = 0
        self.state = 0
        self.seq = 0
        self.epoch = 0
        self.probe = 0
        self.origin = 0
        self.join = 0
        self.nonce = 0
        self.lseq = 0
        self.frames = 0
        self.bad = 0
        self.bad_counts = [0, 0, 0, 0]
        self.last_bad = 0

    def reset_counters(self):
        self.frames = 0
        self.bad = 0
        for i in range(4):
            self.bad_counts[i] = 0

    def feed(self, buf, n):
        """Queue buf[0:n] for next(). buf must stay unchanged until next() returns 0."""
        self._src = buf
        self._pos = 0
        self._end = n

    def next(self):
        src = self._src
        i = self._pos
        end = self._end
        raw = self._raw
        ln = self._len
        left = self._left
        while i < end:
            b = src[i]
            i += 1
            if b:
                if ln >= _MAX_RAW:
                    self._junk = True
                    continue
                if left:
                    raw[ln] = b
                    ln += 1
                    left -= 1
                else:
                    if self._code != 0xFF:
                        raw[ln] = 0
                        ln += 1
                    self._code = b
                    left = b - 1
                continue
            # Delimiter: a frame (maybe empty) ends here.
            self._len = 0
            self._left = 0
            self._code = 0xFF
            if self._junk:
                self._junk = False
                kind = self._bad(BAD_LEN)
            elif left:
                kind = self._bad(BAD_COBS)  # the last block is cut short
            elif ln == 0:
                continue  # back-to-back delimiters: idle line, nothing to count
            else:
                kind = self._check(ln)
            self._pos = i
            return kind
        self._pos = i
        self._len = ln
        self._left = left
        return 0

    def _check(self, ln):
        raw = self._raw
        if ln < 4:
            return self._bad(BAD_LEN)
        if crc16(raw, ln - 2) != (raw[ln - 2] << 8) | raw[ln - 1]:
            return self._bad(BAD_CRC)
        kind = raw[0]
        if kind == TOKEN:
            if ln != _TOKEN_RAW:
                return self._bad(BAD_LEN)
            self.count = raw[2] | (raw[3] << 8)
            self.state = raw[4]
            self.seq = raw[5] | (raw[6] << 8) | (raw[7] << 16) | (raw[8] << 24)
            self.epoch = raw[9] | (raw[10] << 8)
        elif kind == REQUEST:
            if ln != _REQUEST_RAW:
                return self._bad(BAD_LEN)
        elif kind == AGAIN:
            if ln != _AGAIN_RAW:
                return self._bad(BAD_LEN)
            self.origin = raw[2] | (raw[3] << 8)
        elif kind == CLAIM:
            if ln != _CLAIM_RAW:
                return self._bad(BAD_LEN)
            self.epoch = raw[2] | (raw[3] << 8)
            self.origin = raw[4] | (raw[5] << 8)
            self.join = raw[6] & 1
            self.seq = raw[7] | (raw[8] << 8) | (raw[9] << 16) | (raw[10] << 24)
            self.nonce = raw[11] | (raw[12] << 8)
        elif kind == PROBE:
            if ln != _PROBE_RAW:
                return self._bad(BAD_LEN)
            self.probe = raw[2] | (raw[3] << 8)
        else:
            return self._bad(BAD_KIND)
        self.lseq = raw[1]
        self.frames += 1
        return kind

    def _bad(self, reason):
        self.bad += 1
        self.bad_counts[reason] += 1
        self.last_bad = reason
        return BAD
