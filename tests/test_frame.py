"""Link frame codec (firmware/frame.py): exact bytes, round trips, resync, bad frames.
The same deterministic run is compared between CPython and the real MicroPython."""

import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from conftest import FIRMWARE, ROOT, run_micropython

sys.path.insert(0, str(FIRMWARE))
import frame  # noqa: E402  (firmware module, on the board's import path)

DRIVER = str(ROOT / "tests" / "mp_codec_driver.py")


def decode_all(dec, data, chunk=None):
    out = []
    chunk = chunk or len(data) or 1
    for i in range(0, len(data), chunk):
        part = bytearray(data[i:i + chunk])
        dec.feed(part, len(part))
        while True:
            k = dec.next()
            if not k:
                break
            if k == frame.TOKEN:
                out.append(("token", dec.count, dec.state, dec.seq, dec.epoch, dec.lseq))
            elif k == frame.REQUEST:
                out.append(("request", dec.lseq))
            else:
                out.append(("bad", frame.BAD_REASONS[dec.last_bad]))
    return out


def test_crc_check_value():
    # CRC-16/CCITT-FALSE check value.
    assert frame.crc16(b"123456789", 9) == 0x29B1
    assert frame.crc16_bitwise(b"123456789", 9) == 0x29B1


def test_exact_bytes_of_known_frames():
    enc = frame.Encoder()
    token = bytes(enc.token(3, 1, 0x01020304, 7))
    # 00 | COBS(01 00 03 01 04 03 07 crc) | 00: count, state, the low 16 bits of seq, the low 8 of epoch
    assert token == bytes.fromhex("00 02 01 08 03 01 04 03 07 28 bd 00") == wire_of(bytes.fromhex("01 00 03 01 04 03 07"))
    assert len(token) == frame.TOKEN_WIRE == 12
    assert bytes(enc.request()) == bytes.fromhex("00 05 02 01 6b 4c 00")
    assert enc.lseq == 2


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(-frame.SEQ_BACK, 0xFFFF - frame.SEQ_BACK),
              st.integers(-128, 127)),
    st.none()), max_size=20), st.integers(1, 40), st.integers(0, frame.SEQ_MASK), st.integers(0, 0xFFFF))
def test_round_trip_any_chunking(frames, chunk, seq, epoch):
    # A token's seq and epoch anywhere within the window of the last token's (the first
    # token's: of what the node knew, here seq and epoch): they arrive whole, across wraps.
    enc = frame.Encoder()
    wire = bytearray()
    want = []
    dec = frame.Decoder()
    dec.st[frame.S_REF_SEQ] = seq
    dec.st[frame.S_REF_EPOCH] = epoch
    for f in frames:
        lseq = enc.lseq
        if f is None:
            wire += enc.request()
            want.append(("request", lseq))
        else:
            count, state, dseq, depoch = f
            seq = (seq + dseq) & frame.SEQ_MASK
            epoch = (epoch + depoch) & 0xFFFF
            wire += enc.token(count, state, seq, epoch)
            want.append(("token", count, state, seq, epoch, lseq))
    assert decode_all(dec, bytes(wire), chunk) == want
    assert dec.bad == 0 and dec.frames == len(frames)


def test_token_fields_beyond_the_frame():
    # count saturates at 255 (as a u16: -1 is 65535, as before); state is sent as its low
    # byte; a seq or epoch outside the window of the last token's is read as the number in
    # the window with the same low bits (the trade-off, docs/frames.md).
    enc = frame.Encoder()
    dec = frame.Decoder()
    got = decode_all(dec, bytes(enc.token(300, 7, 5, 3)) + bytes(enc.token(-1, 0x107, 6, 3)))
    assert got == [("token", 255, 7, 5, 3, 0), ("token", 255, 7, 6, 3, 1)]
    wire = bytes(enc.token(0, 0, 6 + 0x10000 - frame.SEQ_BACK, 3 + 128))  # one past each window
    assert decode_all(dec, wire) == [("token", 0, 0, (6 - frame.SEQ_BACK) & frame.SEQ_MASK, (3 - 128) & 0xFFFF, 2)]
    # The window is the last token's, so a run of steps inside it carries any distance.
    seq = 6 - frame.SEQ_BACK
    epoch = 3 - 128
    for _ in range(40):
        seq += 0xFFFF - frame.SEQ_BACK
        epoch += 127
        got = decode_all(dec, bytes(enc.token(1, 2, seq & frame.SEQ_MASK, epoch & 0xFFFF)))
        assert got[0][3:5] == (seq & frame.SEQ_MASK, epoch & 0xFFFF)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=60), st.integers(1, 17))
def test_resync_after_any_garbage(garbage, chunk):
    enc = frame.Encoder()
    good = bytes(enc.token(5, 1, 77, 2))
    dec = frame.Decoder()
    got = decode_all(dec, garbage + good, chunk)
    # The frame after the garbage always arrives, whatever the garbage was;
    # the garbage itself may look like frames, which are dropped and counted.
    assert got[-1] == ("token", 5, 1, 77, 2, 0)
    assert all(g[0] == "bad" or g in (("token", 5, 1, 77, 2, 0),) or g[0] in ("token", "request") for g in got)
    assert dec.bad == sum(1 for g in got if g[0] == "bad")


def test_bad_frames_counted_never_delivered():
    enc = frame.Encoder()
    t = bytearray(enc.token(3, 1, 0x01020304, 7))
    t[6] ^= 0x40  # a data byte (not a COBS code byte): CRC error
    long_frame = b"\x00" + b"\x11" * 40 + b"\x00"
    cut = b"\x00\x09\x01\x02\x00"  # COBS block announces 8 bytes, frame ends after 2
    dec = frame.Decoder()
    got = decode_all(dec, bytes(t) + long_frame + cut + bytes(enc.request()))
    assert got == [("bad", "crc"), ("bad", "len"), ("bad", "cobs"), ("request", 1)]
    assert dec.bad == 3 and dec.bad_counts == [1, 1, 1, 0] and dec.frames == 1


def test_unknown_kind_and_wrong_length_counted():
    def wire(raw):
        raw = bytearray(raw) + bytearray(2)
        out = bytearray(len(raw) + 3)
        n = frame.seal(raw, len(raw) - 2, out)
        return bytes(out[:n])

    dec = frame.Decoder()
    got = decode_all(dec, wire(b"\x09\x00") + wire(b"\x01\x00\x01\x02") + wire(b"\x02\x00\x05"))
    assert got == [("bad", "kind"), ("bad", "len"), ("bad", "len")]
    assert dec.bad_counts == [0, 2, 0, 1]


def test_idle_delimiters_are_not_bad():
    dec = frame.Decoder()
    assert decode_all(dec, b"\x00" * 10) == []
    assert dec.bad == 0


@pytest.mark.slow
def test_same_output_under_micropython_and_cpython(micropython):
    cpy = subprocess.run([sys.executable, DRIVER, str(FIRMWARE)], capture_output=True, text=True, timeout=60, check=True).stdout
    mpy = run_micropython(micropython, DRIVER, str(FIRMWARE))
    assert mpy == cpy
    lines = cpy.splitlines()
    assert lines[0] == "crc 10673 10673"
    assert "request 000502016b4c00" in lines
    assert lines.count("frame bad crc") == 1
    assert "frame token 9 0 9 9 9" in lines
    # 11 events into a ring of 8: 3 dropped, reported by a drop record.
    assert lines[-1] == "log 13 3 0"


def test_table_crc_agrees_with_the_bitwise_definition():
    # Speed is measured by the benchmarks (docs/performance.md); here only the value.
    for n in range(12):
        buf = bytes(range(7, 7 + n))
        assert frame.crc16(buf, n) == frame.crc16_bitwise(buf, n)


def test_recovery_frames_round_trip_at_their_wire_sizes():
    enc = frame.Encoder()
    dec = frame.Decoder()
    claim = bytes(enc.claim(0xBEEF, 300, 1, 0x01020304, 0xCAFE))
    again = bytes(enc.again(7))
    assert len(claim) == frame.CLAIM_WIRE == 18 and len(again) == frame.AGAIN_WIRE == 9
    buf = bytearray(claim + again)
    dec.feed(buf, len(buf))
    assert dec.next() == frame.CLAIM
    assert (dec.epoch, dec.origin, dec.join, dec.seq, dec.nonce) == (0xBEEF, 300, 1, 0x01020304, 0xCAFE)
    assert dec.next() == frame.AGAIN and dec.origin == 7
    assert dec.next() == 0 and dec.bad == 0


def test_message_frames_exact_bytes_and_round_trip():
    """A MSG frame (docs/frames.md): kind 7, lseq, mkind, src, dst, the payload, CRC.
    Its wire length is the payload's + 10; the decoder reads the first six payload bytes
    as a token's seq and epoch (for the event record) and keeps the payload in raw."""
    enc = frame.Encoder()
    wire = enc.message(3, 1, frame.BROADCAST, b"")
    assert wire == bytes.fromhex("00 02 07 06 03 01 ff 02 49 00") == wire_of(bytes([frame.MSG, 0, 3, 1, 0xFF]))
    assert len(wire) == frame.MSG_WIRE_EXTRA
    payload = bytes([4, 3, 2, 1, 7, 0]) + bytes(range(1, 41))
    wire2 = enc.message(2, 0, 2, payload)
    assert len(wire2) == len(payload) + frame.MSG_WIRE_EXTRA
    dec = frame.Decoder()
    buf = bytearray(wire + wire2)
    dec.feed(buf, len(buf))
    assert dec.next() == frame.MSG and (dec.mkind, dec.src, dec.dst, dec.payload, dec.lseq) == (3, 1, 255, b"", 0)
    assert dec.next() == frame.MSG and (dec.mkind, dec.src, dec.dst, dec.lseq) == (2, 0, 2, 1)
    assert dec.payload == payload and dec.seq == 0x01020304 and dec.epoch == 7
    assert dec.next() == 0 and dec.bad == 0
    # The longest payload (a token with arrays for 32 boards and more) fits; one more does not.
    big = bytes((i % 255) + 1 for i in range(frame.MSG_MAX_PAYLOAD))
    buf = bytearray(enc.message(9, 31, 0, big))
    dec.feed(buf, len(buf))
    assert dec.next() == frame.MSG and dec.payload == big
    try:
        enc.message(9, 31, 0, big + b"x")
    except ValueError:
        pass
    else:
        raise AssertionError("a payload over MSG_MAX_PAYLOAD was encoded")


def test_message_frame_too_short_or_forwarded_unchanged():
    enc = frame.Encoder()
    dec = frame.Decoder()
    assert decode_all(dec, wire_of(b"\x07\x00\x01\x02")) == [("bad", "len")]  # no room for src, dst
    wire = enc.message(1, 2, 0, b"\x05\x06")
    buf = bytearray(wire)
    dec.feed(buf, len(buf))
    assert dec.next() == frame.MSG
    # Passed on by another node: the same bytes with that node's link sequence byte.
    relay = frame.Encoder()
    relay.request()  # its link has carried one frame already
    n = relay.forward(dec.raw, frame.MSG_HEAD + 2 + 2)
    again = frame.Decoder()
    buf = bytearray(relay.msg_out[:n])
    again.feed(buf, n)
    assert again.next() == frame.MSG and again.lseq == 1
    assert (again.mkind, again.src, again.dst, again.payload) == (1, 2, 0, b"\x05\x06")
    assert len(buf) == len(wire) and again.bad == 0


def test_a_receiver_counts_the_frames_lost_before_a_frame():
    """Every frame carries its link's sequence byte: the frames that went bad or vanished
    before a valid one are counted at it (Decoder.gap; the node loop logs them for the
    host, which pairs each link's receives with its sends by count)."""
    enc = frame.Encoder()
    dec = frame.Decoder()
    frames = [bytes(enc.request()) for _ in range(5)]
    broken = bytearray(frames[2])
    broken[3] ^= 0x10  # a corrupted byte: a CRC error
    line = frames[0] + frames[1] + bytes(broken) + frames[4]  # frames[3] vanished whole
    buf = bytearray(line)
    dec.feed(buf, len(buf))
    got = []
    while True:
        k = dec.next()
        if not k:
            break
        got.append((k, dec.gap))
    assert got == [(frame.REQUEST, 0), (frame.REQUEST, 0), (frame.BAD, 0), (frame.REQUEST, 2)]
    # the count is mod 256: 300 lost frames read as 44
    for _ in range(300):
        enc.request()
    buf = bytearray(enc.request())
    dec.feed(buf, len(buf))
    assert dec.next() == frame.REQUEST and dec.gap == 300 % 256


def wire_of(raw):
    c = frame.crc16_bitwise(raw, len(raw))
    r = bytearray(raw + bytes([c >> 8, c & 0xFF]))
    out = bytearray(len(r) + 3)
    return bytes(out[:frame.cobs_py(r, len(r), out)])


def test_the_message_example_of_docs_frames_md():
    enc = frame.Encoder()
    enc.message(0, 0, 0, b"")  # lseq 0; the example's is 1
    wire = enc.message(1, 0, 3, bytes([4, 3, 2, 1, 7, 0, 0, 0, 0, 0, 0]))
    assert wire.hex(" ") == "00 04 07 01 01 07 03 04 03 02 01 07 01 01 01 01 01 03 aa ef 00"
