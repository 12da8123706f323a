# Link frame codec for the UART between two boards (docs/hostlink.md, "Link frames").
#
# On the wire a frame is   00 | COBS(kind, lseq, payload..., crc_hi, crc_lo) | 00
#   kind     TOKEN (1), REQUEST (2), PROBE (4: discovery, never given to the protocol),
#            CLAIM (5: token recovery, docs/recovery.md), AGAIN (6: a re-announced request)
#            or MSG (7: a message of the protocol layer, docs/frames.md)
#   lseq     link sequence byte (per sender, wraps at 256; receivers keep the last one)
#   payload  TOKEN: count u8, state u8, seq u16, epoch u8: the low bits of the token's seq
#            and epoch (little-endian; "The token frame" below); REQUEST: none;
#            PROBE: probe id u16; CLAIM: epoch u16, origin u16, join u8, seq u32, nonce u16;
#            AGAIN: origin u16
#            MSG: mkind u8, src u8, dst u8 (BROADCAST: every node), then the payload whose
#            size the protocol declares for mkind (0..MSG_MAX_PAYLOAD bytes)
#            A CLAIM's seq is an entry number of 30 bits (SEQ_MASK): the top two bits of
#            its field are sent as 0 and ignored on receipt, so that no board ever holds
#            a number that needs a long int (30-bit small ints on the rp2 port).
#   crc      CRC-16/CCITT-FALSE over kind..payload, big-endian
# The leading 00 costs one byte and means a frame that follows line garbage is still
# received: the garbage ends in its own (bad, counted) frame instead of swallowing it.
#
# The token frame (docs/frames.md, "The token frame"): TOKEN_WIRE = 12 bytes, a multiple of
# the RP2040 UART's 4-byte receive interrupt threshold (16 bytes before: 160 us of wire a hop
# at 1 Mbaud, now 120). It carries count and state in a byte each (count saturates at 255,
# state is a ring position or a flag) and the low bits of seq (16) and epoch (8). The
# decoder puts them back whole against a reference: the last token it decoded, or what its
# node learnt from a claim (S_REF_SEQ, S_REF_EPOCH, set by the node loop). seq is read in
# [ref - SEQ_BACK, ref + 2**16 - SEQ_BACK), epoch within +-128 of its reference, both
# modulo their width (30 and 16 bits). Wrong only when the token moved further than that
# between two of its frames on one link: a node entering 64,511 times in a row while the
# token rests with it, or 128 epochs (claims) in one hop.
#
# Runs on MicroPython and CPython. Every frame but MSG has a fixed size; a MSG frame's size
# is declared per message kind by its protocol (one size, or least..most: protocol.py), and
# the encoder writes every one into one preallocated buffer of the largest, so nothing is
# allocated per frame.
#
# Speed (docs/performance.md): on a Pico every bytecode costs about a microsecond, so
# the per-byte work (CRC, COBS both ways, field packing) is done by @micropython.viper
# functions where the port has the viper emitter. Each one has a pure-Python twin
# (the *_py functions) that CPython and the simulator use; tests/test_frame_twins.py
# checks that both give identical bytes and results over random input, under the real
# micropython binary and under CPython. The decoder's state, counters and the fields of
# the last frame live in one int array (Decoder.st) that both twins read and write.

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
MSG = const(7)  # a protocol layer message: to the next node, to a node by index, or to all
BROADCAST = const(0xFF)  # a MSG frame's destination meaning every node (the sender takes it off)

SEQ_MASK = const(0x3FFFFFFF)  # entry numbers wrap at 2**30 (see the header)

_TOKEN_RAW = const(9)  # kind, lseq, count, state, seq low u16, epoch low u8, 2 crc bytes
_REQUEST_RAW = const(4)  # kind, lseq, 2 crc bytes
_PROBE_RAW = const(6)  # kind, lseq, probe id u16, 2 crc bytes
_AGAIN_RAW = const(6)  # kind, lseq, origin u16, 2 crc bytes
_CLAIM_RAW = const(15)  # kind, lseq, epoch u16, origin u16, join, seq u32, nonce u16, 2 crc bytes
TOKEN_WIRE = const(12)  # 00 + COBS(9 bytes: one code byte more) + 00: the token frame's length
SEQ_BACK = const(1024)  # a token frame's seq may be this much behind its reference (a new token's)
REQUEST_WIRE = const(7)
PROBE_WIRE = const(9)
CLAIM_WIRE = const(18)
AGAIN_WIRE = const(9)
_MAX_FIXED = const(16)  # longer frames of the fixed-size kinds are bad (bad length) before they end
_MAX_RAW = const(253)  # MSG frames: so long that COBS never needs a block of 254 (wire = raw + 3)
MSG_HEAD = const(5)  # kind, lseq, mkind, src, dst: the payload starts at raw[MSG_HEAD]
MSG_MAX_PAYLOAD = const(246)  # _MAX_RAW - MSG_HEAD - 2 crc bytes
MSG_WIRE_EXTRA = const(10)  # wire length of a MSG frame = payload + MSG_WIRE_EXTRA
_LSEQ_AT = const(256)  # the encoder's next link sequence byte, kept after the raw frame
LSEQ_AT = const(256)  # the same, public (MicroPython keeps no module attribute for a _const)
_RAW_SIZE = const(257)

# Why a frame was dropped (the order is the index into Decoder.bad_counts).
BAD_CRC = const(0)
BAD_LEN = const(1)
BAD_COBS = const(2)
BAD_KIND = const(3)
BAD_REASONS = ("crc", "len", "cobs", "kind")

# Decoder.st: the decoder's state, counters and the last frame's fields, in one
# array of ints (array('i') on MicroPython, where viper reads it as ptr32).
S_POS = const(0)  # next byte of the fed buffer
S_END = const(1)  # end of the fed buffer
S_LEN = const(2)  # decoded bytes of the frame under way
_LEFT = const(3)  # data bytes left in the current COBS block
S_CODE = const(4)  # code of the current block (0xFF: no implied zero)
_JUNK = const(5)  # 1: the frame under way is already bad (too long)
S_FRAMES = const(6)  # valid frames (wraps at 2**30)
S_BAD = const(7)  # dropped frames (wraps at 2**30)
S_BAD_REASON = const(8)  # 8..11: dropped frames by reason BAD_CRC..BAD_KIND
S_LAST_BAD = const(12)  # reason of the last dropped frame
# The fields of the last valid frame. F_STATE, F_COUNT, F_SEQ, F_EPOCH are in the
# order of an event record's aux, count, seq, epoch (hostlink.record_fields).
F_STATE = const(13)
F_COUNT = const(14)
F_SEQ = const(15)  # token and claim
F_EPOCH = const(16)  # token and claim
F_ORIGIN = const(17)  # claim and again
F_JOIN = const(18)
F_NONCE = const(19)
F_PROBE = const(20)
F_LSEQ = const(21)
_CRC = const(22)  # CRC-16 of the bytes decoded so far (over a whole frame with its CRC: 0)
# A MSG frame's fields: F_STATE holds its mkind, F_COUNT src | dst << 8, F_SEQ and F_EPOCH
# the first six payload bytes read as a token's seq u32 and epoch u16 (0 where the payload
# is shorter), so that an event record takes them from F_STATE..F_EPOCH as for a token.
F_SRC = const(23)
F_DST = const(24)
F_MLEN = const(25)  # payload bytes
# Lost frames: every frame on a link carries its sender's next link sequence byte (a
# message passed on gets the forwarder's, Encoder.forward), so the receiver counts the
# frames that never reached it, bad ones included: the gap before a valid frame.
S_NEXT_LSEQ = const(26)  # 0x100 | the lseq the next frame should carry; 0: none seen yet
S_GAP = const(27)  # frames lost just before the last valid frame (when scan() flagged GAP; 0 for
# the first frame since the decoder started: how many were lost before it is not known here)
S_LOST = const(28)  # frames lost in all (the gaps' sum; wraps at 2**30; zeroed with the counters)
# What a token frame's low bits of seq and epoch are read against (the header): the last
# token decoded, or what the node learnt from a claim (written by the node loop).
S_REF_SEQ = const(29)
S_REF_EPOCH = const(30)
# A copy of the CRC table (Decoder): scan_viper reads it through st's pointer, which it has; the
# module's global cost it a lookup and a pointer, 2.3 us a call on a Pico (issue 41: a landing
# frame is scanned in chunks, two to five a hop).
_CRC_AT = const(31)
_ST_SIZE = const(_CRC_AT + 256)
GAP = const(8)  # or-ed into the kind scan() returns: frames were lost before this one
_COUNT_MASK = const(0x3FFFFFFF)


def _make_crc_table():
    table = []
    for i in range(256):
        c = i << 8
        for _ in range(8):
            c = ((c << 1) ^ 0x1021) if c & 0x8000 else (c << 1)
        table.append(c & 0xFFFF)
    return table


try:
    from array import array

    _CRC_TABLE = array("H", _make_crc_table())  # viper reads it as ptr16

    def _int_array(n):
        return array("i", bytes(4 * n))

except ImportError:  # pragma: no cover (every port we use has array)
    _CRC_TABLE = tuple(_make_crc_table())

    def _int_array(n):
        return [0] * n


def crc16_py(buf, n):
    """CRC-16/CCITT-FALSE (poly 0x1021, init 0xFFFF) of buf[0:n]."""
    t = _CRC_TABLE
    c = 0xFFFF
    for i in range(n):
        c = ((c << 8) & 0xFFFF) ^ t[(c >> 8) ^ buf[i]]
    return c


def crc16_bitwise(buf, n):
    """Same CRC without the table (an independent cross-check for the tests)."""
    c = 0xFFFF
    for i in range(n):
        c ^= buf[i] << 8
        for _ in range(8):
            c = ((c << 1) ^ 0x1021) if c & 0x8000 else (c << 1)
        c &= 0xFFFF
    return c


def seal_py(raw, n, out):
    """The CRC of raw[0:n] into raw[n:n + 2], then the whole COBS-framed into out:
    out[0] = 00, the encoding, a trailing 00. Returns the wire length (n + 5)."""
    c = crc16_py(raw, n)
    raw[n] = c >> 8
    raw[n + 1] = c & 0xFF
    return cobs_py(raw, n + 2, out)


def cobs_py(raw, n, out):
    """raw[0:n] (n <= 253, a whole frame with its CRC) COBS-framed into out: 00, the
    encoding, 00. Returns the wire length (n + 3)."""
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


def token_py(raw, out, tok):
    """A token frame of tok.count, tok.state, tok.seq, tok.epoch (a protocol node's
    token fields) into out (TOKEN_WIRE bytes), with the encoder's next link sequence
    byte (raw[_LSEQ_AT]): count saturated at 255 (as a u16: -1 is 65535), state's
    low byte, seq's low 16 bits, epoch's low 8 (the header). Returns the wire length."""
    count = tok.count & 0xFFFF
    if count > 255:
        count = 255
    state = tok.state
    seq = tok.seq
    epoch = tok.epoch
    lseq = raw[_LSEQ_AT]
    raw[_LSEQ_AT] = (lseq + 1) & 0xFF
    raw[0] = TOKEN
    raw[1] = lseq
    raw[2] = count
    raw[3] = state & 0xFF
    raw[4] = seq & 0xFF
    raw[5] = (seq >> 8) & 0xFF
    raw[6] = epoch & 0xFF
    return seal_py(raw, 7, out)


def request_py(raw, out):
    """A request frame (its kind and the encoder's next link sequence byte, raw[_LSEQ_AT])
    into out (REQUEST_WIRE bytes). Returns the wire length."""
    lseq = raw[_LSEQ_AT]
    raw[_LSEQ_AT] = (lseq + 1) & 0xFF
    raw[0] = REQUEST
    raw[1] = lseq
    return seal_py(raw, 2, out)


def message_py(raw, out, sender, fields):
    """A MSG frame of sender.out_kind from sender.index to sender.out_dst with the
    payload sender.out[0:sender.out_len] (a protocol node's outgoing message) into out,
    with the encoder's next link sequence byte. fields[0:4] get what a receiver's
    decoder reads into F_STATE..F_EPOCH (for the send event's record). Returns the
    wire length (out_len + MSG_WIRE_EXTRA)."""
    mk = sender.out_kind
    src = sender.index
    dst = sender.out_dst
    m = sender.out_len
    p = sender.out
    lseq = raw[_LSEQ_AT]
    raw[_LSEQ_AT] = (lseq + 1) & 0xFF
    raw[0] = MSG
    raw[1] = lseq
    raw[2] = mk
    raw[3] = src
    raw[4] = dst
    for i in range(m):
        raw[MSG_HEAD + i] = p[i]
    fields[0] = mk
    fields[1] = src | (dst << 8)
    fields[2] = raw[5] | (raw[6] << 8) | (raw[7] << 16) | ((raw[8] & 0x3F) << 24) if m >= 4 else 0
    fields[3] = raw[9] | (raw[10] << 8) if m >= 6 else 0
    return seal_py(raw, MSG_HEAD + m, out)


def scan_py(src, raw, st):
    """Decode src[st[S_POS]:st[S_END]] until a frame ends. Returns its kind (its fields
    in st[F_*]), BAD (reason in st[S_LAST_BAD], counted), or 0 when the bytes ran out
    (the frame under way is kept in raw and st for the next feed). A valid frame's kind
    has GAP or-ed in when its link sequence byte shows frames lost before it (how many:
    st[S_GAP], mod 256), and for the first valid frame (st[S_GAP] 0)."""
    i = st[S_POS]
    end = st[S_END]
    ln = st[S_LEN]
    left = st[_LEFT]
    code = st[S_CODE]
    c = st[_CRC]
    t = _CRC_TABLE
    while i < end:
        b = src[i]
        i += 1
        if b:
            if ln >= _MAX_FIXED and (ln >= _MAX_RAW or raw[0] != MSG):
                st[_JUNK] = 1
                continue
            if left:
                raw[ln] = b
                ln += 1
                left -= 1
                c = ((c << 8) & 0xFFFF) ^ t[(c >> 8) ^ b]
            else:
                if code != 0xFF:
                    raw[ln] = 0
                    ln += 1
                    c = ((c << 8) & 0xFFFF) ^ t[c >> 8]
                code = b
                left = b - 1
            continue
        # Delimiter: a frame (maybe empty) ends here.
        st[S_POS] = i
        st[S_LEN] = 0
        st[_LEFT] = 0
        st[S_CODE] = 0xFF
        st[_CRC] = 0xFFFF
        if st[_JUNK]:
            st[_JUNK] = 0
            return _bad_py(st, BAD_LEN)
        if left:
            return _bad_py(st, BAD_COBS)  # the last block is cut short
        if ln == 0 and code == 0xFF:
            c = 0xFFFF
            continue  # back-to-back delimiters: idle line, nothing to count
        # (a lone code byte 01 is the COBS of an empty frame: too short, counted)
        return _check_py(raw, ln, st, c)
    st[S_POS] = i
    st[S_LEN] = ln
    st[_LEFT] = left
    st[S_CODE] = code
    st[_CRC] = c
    return 0


def _check_py(raw, ln, st, crc):
    """A whole frame in raw[0:ln]; crc: the CRC over all of it, its own CRC included,
    which is 0 for an intact frame (CRC-16/CCITT-FALSE has no final XOR)."""
    if ln < 4:
        return _bad_py(st, BAD_LEN)
    if crc:
        return _bad_py(st, BAD_CRC)
    kind = raw[0]
    if kind == TOKEN:
        if ln != _TOKEN_RAW:
            return _bad_py(st, BAD_LEN)
        st[F_COUNT] = raw[2]
        st[F_STATE] = raw[3]
        ref = st[S_REF_SEQ]  # the low 16 bits put back whole (the header)
        seq = (ref + (((raw[4] | (raw[5] << 8)) - ref + SEQ_BACK) & 0xFFFF) - SEQ_BACK) & SEQ_MASK
        st[F_SEQ] = seq
        st[S_REF_SEQ] = seq
        ref = st[S_REF_EPOCH]
        epoch = (ref + ((raw[6] - ref + 128) & 0xFF) - 128) & 0xFFFF
        st[F_EPOCH] = epoch
        st[S_REF_EPOCH] = epoch
    elif kind == REQUEST:
        if ln != _REQUEST_RAW:
            return _bad_py(st, BAD_LEN)
    elif kind == AGAIN:
        if ln != _AGAIN_RAW:
            return _bad_py(st, BAD_LEN)
        st[F_ORIGIN] = raw[2] | (raw[3] << 8)
    elif kind == CLAIM:
        if ln != _CLAIM_RAW:
            return _bad_py(st, BAD_LEN)
        st[F_EPOCH] = raw[2] | (raw[3] << 8)
        st[F_ORIGIN] = raw[4] | (raw[5] << 8)
        st[F_JOIN] = raw[6] & 1
        st[F_SEQ] = raw[7] | (raw[8] << 8) | (raw[9] << 16) | ((raw[10] & 0x3F) << 24)
        st[F_NONCE] = raw[11] | (raw[12] << 8)
    elif kind == PROBE:
        if ln != _PROBE_RAW:
            return _bad_py(st, BAD_LEN)
        st[F_PROBE] = raw[2] | (raw[3] << 8)
    elif kind == MSG:
        if ln < MSG_HEAD + 2:
            return _bad_py(st, BAD_LEN)
        m = ln - MSG_HEAD - 2
        st[F_STATE] = raw[2]
        st[F_COUNT] = raw[3] | (raw[4] << 8)
        st[F_SRC] = raw[3]
        st[F_DST] = raw[4]
        st[F_MLEN] = m
        st[F_SEQ] = raw[5] | (raw[6] << 8) | (raw[7] << 16) | ((raw[8] & 0x3F) << 24) if m >= 4 else 0
        st[F_EPOCH] = raw[9] | (raw[10] << 8) if m >= 6 else 0
    else:
        return _bad_py(st, BAD_KIND)
    lseq = raw[1]
    st[F_LSEQ] = lseq
    st[S_FRAMES] = (st[S_FRAMES] + 1) & _COUNT_MASK
    expected = st[S_NEXT_LSEQ]
    st[S_NEXT_LSEQ] = 0x100 | ((lseq + 1) & 0xFF)
    if not expected:  # the first frame since this board started: flagged, 0 lost (its lseq
        st[S_GAP] = 0  # tells the host which of the sender's frames it is)
        return kind | GAP
    if lseq != expected & 0xFF:
        st[S_GAP] = (lseq - expected) & 0xFF
        st[S_LOST] = (st[S_LOST] + st[S_GAP]) & _COUNT_MASK
        return kind | GAP
    return kind


def _bad_py(st, reason):
    st[S_BAD] = (st[S_BAD] + 1) & _COUNT_MASK
    st[S_BAD_REASON + reason] = (st[S_BAD_REASON + reason] + 1) & _COUNT_MASK
    st[S_LAST_BAD] = reason
    return BAD


# The viper twins: the same steps as the *_py functions above, line for line where
# the language allows (viper ints are machine words; ptr8/ptr16/ptr32 index buffers).
crc16 = crc16_py
seal = seal_py
cobs = cobs_py
token = token_py
message = message_py
request = request_py
scan = scan_py
try:
    import micropython

    @micropython.viper
    def crc16_viper(buf, n: int) -> int:
        b = ptr8(buf)
        t = ptr16(_CRC_TABLE)
        c = 0xFFFF
        i = 0
        while i < n:
            c = ((c << 8) & 0xFFFF) ^ t[(c >> 8) ^ b[i]]
            i += 1
        return c

    @micropython.viper
    def seal_viper(raw, n: int, out) -> int:
        # The CRC and the COBS in one pass (seal_py makes two): inside the loop each byte goes to
        # out[i + 2] (the leading 00 and the first code byte before it), and a block's code byte is
        # the distance from its place, so no output index or count is kept. Fewer locals, fewer of
        # them on the stack: 37.5 against 50.0 us for a 30-byte frame on a Pico, 21.1 against 26.5
        # for 8 (../shared/rp2040/exec, chip time; issue 41: a message passed on is resealed after
        # its last byte lands).
        r = ptr8(raw)
        o = ptr8(out)
        t = ptr16(_CRC_TABLE)
        c = 0xFFFF
        o[0] = 0
        at = 1
        i = 0
        while i < n:
            b = r[i]
            c = ((c << 8) & 0xFFFF) ^ t[(c >> 8) ^ b]
            if b:
                o[i + 2] = b
            else:
                o[at] = i + 2 - at
                at = i + 2
            i += 1
        b = c >> 8
        r[n] = b
        if b:
            o[n + 2] = b
        else:
            o[at] = n + 2 - at
            at = n + 2
        b = c & 0xFF
        r[n + 1] = b
        if b:
            o[n + 3] = b
        else:
            o[at] = n + 3 - at
            at = n + 3
        o[at] = n + 4 - at
        o[n + 4] = 0
        return n + 5

    @micropython.viper
    def cobs_viper(raw, n: int, out) -> int:
        r = ptr8(raw)
        o = ptr8(out)
        o[0] = 0
        code_at = 1
        code = 1
        j = 2
        i = 0
        while i < n:
            b = r[i]
            if b:
                o[j] = b
                code += 1
            else:
                o[code_at] = code
                code_at = j
                code = 1
            j += 1
            i += 1
        o[code_at] = code
        o[j] = 0
        return j + 1

    @micropython.viper
    def request_viper(raw, out) -> int:
        # request_py and seal_py in one native function, written out byte by byte (Q and D
        # pass request messages on at every hop between the requester and the token; the
        # bytecode Encoder.request and its _head cost a Q hop 13% more than S's, issue 41).
        # The raw frame is REQUEST, lseq, crc hi, crc lo; each byte goes at its COBS place
        # in out (byte i at i + 2), a zero byte becomes the code of the block it ends.
        r = ptr8(raw)
        o = ptr8(out)
        t = ptr16(_CRC_TABLE)
        lseq = r[_LSEQ_AT]
        r[_LSEQ_AT] = (lseq + 1) & 0xFF
        r[0] = REQUEST
        r[1] = lseq
        c = ((0xFFFF << 8) & 0xFFFF) ^ t[0xFF ^ REQUEST]
        c = ((c << 8) & 0xFFFF) ^ t[(c >> 8) ^ lseq]
        hi = c >> 8
        lo = c & 0xFF
        r[2] = hi
        r[3] = lo
        o[0] = 0
        o[2] = REQUEST  # never 0: the first block goes on
        code_at = 1
        code = 2
        if lseq:
            o[3] = lseq
            code += 1
        else:
            o[code_at] = code
            code_at = 3
            code = 1
        if hi:
            o[4] = hi
            code += 1
        else:
            o[code_at] = code
            code_at = 4
            code = 1
        if lo:
            o[5] = lo
            code += 1
        else:
            o[code_at] = code
            code_at = 5
            code = 1
        o[code_at] = code
        o[6] = 0
        return 7

    @micropython.viper
    def message_viper(raw, out, sender, fields) -> int:
        # message_py and seal_py in one pass (issue 41): each byte is written into raw (the CRC's
        # and the frame's copy), stepped through the CRC and put at its COBS place in out (byte i
        # at i + 2; a zero byte ends its block, whose code goes at code_at), as token_viper does.
        # Three loops and a call of cobs_viper cost a delivered message's hop more than its bytes:
        # a loop pass costs about 0.6 us on a Pico, and BS's token message has 35 payload bytes.
        # The head's four bytes after the kind are written out, so that the payload's loop has no
        # test of where it is (a loop over both took 42.3 us a call for 12 payload bytes, this
        # 31.4).
        mk = int(sender.out_kind)
        src = int(sender.index)
        dst = int(sender.out_dst)
        m = int(sender.out_len)
        p = ptr8(sender.out)
        r = ptr8(raw)
        o = ptr8(out)
        f = ptr32(fields)
        t = ptr16(_CRC_TABLE)
        lseq = r[_LSEQ_AT]
        r[_LSEQ_AT] = (lseq + 1) & 0xFF
        r[0] = MSG
        r[1] = lseq
        r[2] = mk
        r[3] = src
        r[4] = dst
        o[0] = 0
        o[2] = MSG  # never 0: the first block goes on
        c = 0xFF00 ^ t[0xFF ^ MSG]  # the CRC after the kind byte
        code_at = 1
        c = ((c << 8) & 0xFFFF) ^ t[(c >> 8) ^ lseq]
        o[3] = lseq
        if not lseq:
            o[code_at] = 3 - code_at
            code_at = 3
        c = ((c << 8) & 0xFFFF) ^ t[(c >> 8) ^ mk]
        o[4] = mk
        if not mk:
            o[code_at] = 4 - code_at
            code_at = 4
        c = ((c << 8) & 0xFFFF) ^ t[(c >> 8) ^ src]
        o[5] = src
        if not src:
            o[code_at] = 5 - code_at
            code_at = 5
        c = ((c << 8) & 0xFFFF) ^ t[(c >> 8) ^ dst]
        o[6] = dst
        if not dst:
            o[code_at] = 6 - code_at
            code_at = 6
        n = MSG_HEAD + m
        i = MSG_HEAD
        while i < n:
            b = p[i - MSG_HEAD]
            r[i] = b
            c = ((c << 8) & 0xFFFF) ^ t[(c >> 8) ^ b]
            j = i + 2
            o[j] = b
            if not b:
                o[code_at] = j - code_at
                code_at = j
            i += 1
        b = c >> 8
        r[n] = b
        j = n + 2
        o[j] = b
        if not b:
            o[code_at] = j - code_at
            code_at = j
        b = c & 0xFF
        r[n + 1] = b
        j = n + 3
        o[j] = b
        if not b:
            o[code_at] = j - code_at
            code_at = j
        j = n + 4
        o[code_at] = j - code_at
        o[j] = 0
        f[0] = mk
        f[1] = src | (dst << 8)
        f[2] = 0
        f[3] = 0
        if m >= 4:
            f[2] = r[5] | (r[6] << 8) | (r[7] << 16) | ((r[8] & 0x3F) << 24)
        if m >= 6:
            f[3] = r[9] | (r[10] << 8)
        return j + 1

    @micropython.viper
    def token_viper(raw, out, tok) -> int:
        # token_py and seal_py in one native function, written out byte by byte: every
        # hop runs it on the chip, where a loop pass costs about 0.6 us (issue 41: the
        # loops took 54 us to 38). Each byte goes into raw (its CRC) and straight into
        # out at its COBS place (byte i at i + 2); a zero byte becomes the code of the
        # block it ends (code_at: where that block's code goes).
        count = int(tok.count) & 0xFFFF
        if count > 255:
            count = 255
        state = int(tok.state)
        seq = int(tok.seq)
        epoch = int(tok.epoch)
        r = ptr8(raw)
        o = ptr8(out)
        t = ptr16(_CRC_TABLE)
        lseq = r[_LSEQ_AT]
        r[_LSEQ_AT] = (lseq + 1) & 0xFF
        r[0] = TOKEN
        o[0] = 0
        o[2] = TOKEN
        c = 0xFF00 ^ t[0xFF ^ TOKEN]  # the CRC after the kind byte
        code_at = 1
        b = lseq
        r[1] = b
        c = ((c << 8) & 0xFFFF) ^ t[(c >> 8) ^ b]
        o[3] = b
        if not b:
            o[code_at] = 3 - code_at
            code_at = 3
        b = count
        r[2] = b
        c = ((c << 8) & 0xFFFF) ^ t[(c >> 8) ^ b]
        o[4] = b
        if not b:
            o[code_at] = 4 - code_at
            code_at = 4
        b = state & 0xFF
        r[3] = b
        c = ((c << 8) & 0xFFFF) ^ t[(c >> 8) ^ b]
        o[5] = b
        if not b:
            o[code_at] = 5 - code_at
            code_at = 5
        b = seq & 0xFF
        r[4] = b
        c = ((c << 8) & 0xFFFF) ^ t[(c >> 8) ^ b]
        o[6] = b
        if not b:
            o[code_at] = 6 - code_at
            code_at = 6
        b = (seq >> 8) & 0xFF
        r[5] = b
        c = ((c << 8) & 0xFFFF) ^ t[(c >> 8) ^ b]
        o[7] = b
        if not b:
            o[code_at] = 7 - code_at
            code_at = 7
        b = epoch & 0xFF
        r[6] = b
        c = ((c << 8) & 0xFFFF) ^ t[(c >> 8) ^ b]
        o[8] = b
        if not b:
            o[code_at] = 8 - code_at
            code_at = 8
        b = c >> 8
        r[7] = b
        o[9] = b
        if not b:
            o[code_at] = 9 - code_at
            code_at = 9
        b = c & 0xFF
        r[8] = b
        o[10] = b
        if not b:
            o[code_at] = 10 - code_at
            code_at = 10
        o[code_at] = 11 - code_at
        o[11] = 0
        return TOKEN_WIRE

    @micropython.viper
    def scan_viper(src, raw, st) -> int:
        s = ptr8(src)
        r = ptr8(raw)
        v = ptr32(st)
        i = v[S_POS]
        end = v[S_END]
        ln = v[S_LEN]
        left = v[_LEFT]
        code = v[S_CODE]
        c = v[_CRC]
        while i < end:
            b = s[i]
            i += 1
            if b:
                if ln >= _MAX_FIXED and (ln >= _MAX_RAW or r[0] != MSG):
                    v[_JUNK] = 1
                    continue
                if left:
                    r[ln] = b
                    ln += 1
                    left -= 1
                    c = ((c << 8) & 0xFFFF) ^ v[_CRC_AT + ((c >> 8) ^ b)]
                else:
                    if code != 0xFF:
                        r[ln] = 0
                        ln += 1
                        c = ((c << 8) & 0xFFFF) ^ v[_CRC_AT + (c >> 8)]
                    code = b
                    left = b - 1
                continue
            v[S_POS] = i
            v[S_LEN] = 0
            v[_LEFT] = 0
            v[S_CODE] = 0xFF
            v[_CRC] = 0xFFFF
            reason = -1
            kind = 0
            if v[_JUNK]:
                v[_JUNK] = 0
                reason = BAD_LEN
            elif left:
                reason = BAD_COBS
            elif ln == 0 and code == 0xFF:
                c = 0xFFFF
                continue
            elif ln < 4:
                reason = BAD_LEN
            else:
                if c:
                    reason = BAD_CRC
                else:
                    kind = r[0]
                    if kind == TOKEN:
                        if ln != _TOKEN_RAW:
                            reason = BAD_LEN
                        else:
                            v[F_COUNT] = r[2]
                            v[F_STATE] = r[3]
                            ref = v[S_REF_SEQ]
                            ref = (ref + (((r[4] | (r[5] << 8)) - ref + SEQ_BACK) & 0xFFFF) - SEQ_BACK) & SEQ_MASK
                            v[F_SEQ] = ref
                            v[S_REF_SEQ] = ref
                            ref = v[S_REF_EPOCH]
                            ref = (ref + ((r[6] - ref + 128) & 0xFF) - 128) & 0xFFFF
                            v[F_EPOCH] = ref
                            v[S_REF_EPOCH] = ref
                    elif kind == REQUEST:
                        if ln != _REQUEST_RAW:
                            reason = BAD_LEN
                    elif kind == AGAIN:
                        if ln != _AGAIN_RAW:
                            reason = BAD_LEN
                        else:
                            v[F_ORIGIN] = r[2] | (r[3] << 8)
                    elif kind == CLAIM:
                        if ln != _CLAIM_RAW:
                            reason = BAD_LEN
                        else:
                            v[F_EPOCH] = r[2] | (r[3] << 8)
                            v[F_ORIGIN] = r[4] | (r[5] << 8)
                            v[F_JOIN] = r[6] & 1
                            v[F_SEQ] = r[7] | (r[8] << 8) | (r[9] << 16) | ((r[10] & 0x3F) << 24)
                            v[F_NONCE] = r[11] | (r[12] << 8)
                    elif kind == PROBE:
                        if ln != _PROBE_RAW:
                            reason = BAD_LEN
                        else:
                            v[F_PROBE] = r[2] | (r[3] << 8)
                    elif kind == MSG:
                        if ln < MSG_HEAD + 2:
                            reason = BAD_LEN
                        else:
                            m = ln - MSG_HEAD - 2
                            v[F_STATE] = r[2]
                            v[F_COUNT] = r[3] | (r[4] << 8)
                            v[F_SRC] = r[3]
                            v[F_DST] = r[4]
                            v[F_MLEN] = m
                            v[F_SEQ] = 0
                            v[F_EPOCH] = 0
                            if m >= 4:
                                v[F_SEQ] = r[5] | (r[6] << 8) | (r[7] << 16) | ((r[8] & 0x3F) << 24)
                            if m >= 6:
                                v[F_EPOCH] = r[9] | (r[10] << 8)
                    else:
                        reason = BAD_KIND
            if reason >= 0:
                v[S_BAD] = (v[S_BAD] + 1) & _COUNT_MASK
                v[S_BAD_REASON + reason] = (v[S_BAD_REASON + reason] + 1) & _COUNT_MASK
                v[S_LAST_BAD] = reason
                return BAD
            lseq = r[1]
            v[F_LSEQ] = lseq
            v[S_FRAMES] = (v[S_FRAMES] + 1) & _COUNT_MASK
            expected = v[S_NEXT_LSEQ]
            v[S_NEXT_LSEQ] = 0x100 | ((lseq + 1) & 0xFF)
            if not expected:
                v[S_GAP] = 0
                return kind | GAP
            if lseq != (expected & 0xFF):
                v[S_GAP] = (lseq - expected) & 0xFF
                v[S_LOST] = (v[S_LOST] + v[S_GAP]) & _COUNT_MASK
                return kind | GAP
            return kind
        v[S_POS] = i
        v[S_LEN] = ln
        v[_LEFT] = left
        v[S_CODE] = code
        v[_CRC] = c
        return 0

    crc16 = crc16_viper
    seal = seal_viper
    cobs = cobs_viper
    token = token_viper
    message = message_viper
    request = request_viper
    scan = scan_viper
except (ImportError, AttributeError, NameError, SyntaxError, ValueError):
    pass  # CPython, or a port without the viper emitter: the *_py twins


class Encoder:
    """Builds wire frames in preallocated buffers, one per kind (write them whole)."""

    def __init__(self):
        self._raw = bytearray(_RAW_SIZE)
        self._fields = _TokenFields()
        self.token_out = bytearray(TOKEN_WIRE)
        self.request_out = bytearray(REQUEST_WIRE)
        self.probe_out = bytearray(PROBE_WIRE)
        self.claim_out = bytearray(CLAIM_WIRE)
        self.again_out = bytearray(AGAIN_WIRE)
        # MSG frames, new or passed on (their length is the payload's + MSG_WIRE_EXTRA)
        self.msg_out = bytearray(_MAX_RAW + 3)
        self.msg_fields = _int_array(4)  # the last new message's record fields (message())

    @property
    def lseq(self):
        """The link sequence byte of the next frame."""
        return self._raw[_LSEQ_AT]

    def token(self, count, state, seq, epoch):
        """Encode a token frame; returns token_out. (The node loop calls the
        module's token() on its protocol node itself: one call less per hop.)"""
        f = self._fields
        f.count = count
        f.state = state
        f.seq = seq & SEQ_MASK
        f.epoch = epoch
        token(self._raw, self.token_out, f)
        return self.token_out

    def request(self):
        """Encode a request frame; returns request_out. (The node loop calls the module's
        request() on the encoder's buffers itself.)"""
        request(self._raw, self.request_out)
        return self.request_out

    def again(self, origin):
        """Encode a re-announced request frame from processor origin; returns again_out."""
        r = self._head(AGAIN)
        _put(r, 2, origin, 2)
        seal(r, 4, self.again_out)
        return self.again_out

    def claim(self, epoch, origin, join, seq, nonce=0):
        """Encode a claim (join=0) or join (join=1) frame; returns claim_out."""
        r = self._head(CLAIM)
        _put(r, 2, epoch, 2)
        _put(r, 4, origin, 2)
        r[6] = join & 0xFF
        _put(r, 7, seq & SEQ_MASK, 4)
        _put(r, 11, nonce, 2)
        seal(r, 13, self.claim_out)
        return self.claim_out

    def message(self, mkind, src, dst, payload=b""):
        """Encode a MSG frame (tests and tools; the node loop calls the module's
        message() on its protocol node itself); returns the bytes on the wire."""
        f = _Outgoing()
        f.out_kind = mkind
        f.index = src
        f.out_dst = dst
        f.out_len = len(payload)
        f.out = bytes(payload)
        if f.out_len > MSG_MAX_PAYLOAD:
            raise ValueError("payload of %d bytes: at most %d" % (f.out_len, MSG_MAX_PAYLOAD))
        k = message(self._raw, self.msg_out, f, self.msg_fields)
        return bytes(self.msg_out[:k])

    def forward(self, raw, n):
        """A received frame raw[0:n] (its CRC included) passed on into msg_out: the same
        bytes with this encoder's link sequence byte, so a new CRC (the node loop does
        the same in _on_msg). Returns the wire length."""
        lseq = self._raw[_LSEQ_AT]
        self._raw[_LSEQ_AT] = (lseq + 1) & 0xFF
        raw[1] = lseq
        return seal(raw, n - 2, self.msg_out)

    def probe(self, pid):
        """Encode a probe frame carrying pid (0..65535); returns probe_out."""
        r = self._head(PROBE)
        _put(r, 2, pid, 2)
        seal(r, 4, self.probe_out)
        return self.probe_out

    def _head(self, kind):
        r = self._raw
        lseq = r[_LSEQ_AT]
        r[_LSEQ_AT] = (lseq + 1) & 0xFF
        r[0] = kind
        r[1] = lseq
        return r


class _Outgoing:
    """The outgoing message fields frame.message() reads, for Encoder.message()."""

    out_kind = index = out_dst = out_len = 0
    out = b""


class _TokenFields:
    """The token fields frame.token() reads, for Encoder.token()."""

    def __init__(self):
        self.count = self.state = self.seq = self.epoch = 0


def _put(buf, i, value, size):
    """value little-endian into buf[i:i + size]."""
    for k in range(size):
        buf[i + k] = (value >> (8 * k)) & 0xFF


class Decoder:
    """Incremental receiver: feed(buf, n) then call next() until it returns 0.

    next() returns the kind of each complete valid frame, its fields in st[F_*]
    (also readable as count/state/seq/epoch/lseq, a claim's as epoch/origin/join/
    seq/nonce, a probe's as probe); for a dropped frame it returns BAD (counted in
    bad and bad_counts[reason], reason in last_bad) so the caller can log it, but
    a bad frame's content is never exposed. The node loop calls scan() on raw and
    st itself (one call less per frame).
    """

    def __init__(self):
        self.raw = bytearray(_MAX_RAW + 2)  # an implied zero may go one past _MAX_RAW
        self.st = _int_array(_ST_SIZE)
        self.st[S_CODE] = 0xFF
        self.st[_CRC] = 0xFFFF
        for i in range(256):
            self.st[_CRC_AT + i] = _CRC_TABLE[i]
        self._src = b""

    def reset_counters(self):
        st = self.st
        for i in range(S_FRAMES, S_LAST_BAD + 1):
            st[i] = 0
        st[S_LOST] = 0

    def feed(self, buf, n):
        """Queue buf[0:n] for next(). buf must stay unchanged until next() returns 0."""
        self._src = buf
        self.st[S_POS] = 0
        self.st[S_END] = n

    def next(self):
        k = scan(self._src, self.raw, self.st)
        self.gap = self.st[S_GAP] if k & GAP else 0
        return k & ~GAP

    gap = 0  # frames lost just before the frame next() returned (its link sequence byte)

    # The fields and counters by name (tests, status replies; not the hot path).
    count = property(lambda self: self.st[F_COUNT])
    state = property(lambda self: self.st[F_STATE])
    seq = property(lambda self: self.st[F_SEQ])
    epoch = property(lambda self: self.st[F_EPOCH])
    origin = property(lambda self: self.st[F_ORIGIN])
    join = property(lambda self: self.st[F_JOIN])
    nonce = property(lambda self: self.st[F_NONCE])
    probe = property(lambda self: self.st[F_PROBE])
    mkind = property(lambda self: self.st[F_STATE])  # of a MSG frame
    src = property(lambda self: self.st[F_SRC])
    dst = property(lambda self: self.st[F_DST])
    payload = property(lambda self: bytes(self.raw[MSG_HEAD:MSG_HEAD + self.st[F_MLEN]]))
    lseq = property(lambda self: self.st[F_LSEQ])
    frames = property(lambda self: self.st[S_FRAMES])
    bad = property(lambda self: self.st[S_BAD])
    last_bad = property(lambda self: self.st[S_LAST_BAD])
    bad_counts = property(lambda self: [self.st[S_BAD_REASON + i] for i in range(4)])
    lost = property(lambda self: self.st[S_LOST])  # frames lost on the link (gaps), since reset_counters
