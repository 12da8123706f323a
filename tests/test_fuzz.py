"""Fuzz tests (hypothesis) of the two parsers that read what others wrote: the link frame
Decoder (firmware/frame.py) and the host-link LineParser (host/picoring/ring/hostlink.py).
No exception escapes, every valid frame after a delimiter is received intact, and every
bad input is counted. The Decoder is also fuzzed under the real MicroPython, against CPython."""

import random
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from picoring.ring import hostlink as hl

from conftest import FIRMWARE, ROOT, run_micropython

sys.path.insert(0, str(FIRMWARE))
import frame  # noqa: E402

FUZZ_DRIVER = str(ROOT / "tests" / "mp_fuzz_driver.py")


def decode(data, chunks):
    """All results of a Decoder fed `data` in pieces of the given sizes (cycled)."""
    dec = frame.Decoder()
    out = []
    i = k = 0
    while i < len(data):
        size = chunks[k % len(chunks)]
        k += 1
        part = bytearray(data[i:i + size])
        i += size
        dec.feed(part, len(part))
        while True:
            kind = dec.next()
            if not kind:
                break
            assert kind in (frame.TOKEN, frame.REQUEST, frame.PROBE, frame.CLAIM, frame.AGAIN, frame.BAD)
            if kind == frame.TOKEN:
                out.append(("token", dec.count, dec.state, dec.seq, dec.epoch, dec.lseq))
            elif kind == frame.REQUEST:
                out.append(("request", dec.lseq))
            elif kind == frame.PROBE:
                out.append(("probe", dec.probe, dec.lseq))
            elif kind == frame.CLAIM:
                out.append(("claim", dec.epoch, dec.origin, dec.join, dec.seq, dec.nonce, dec.lseq))
            elif kind == frame.AGAIN:
                out.append(("again", dec.origin, dec.lseq))
            else:
                out.append(("bad", frame.BAD_REASONS[dec.last_bad]))
    return dec, out


def terminated_segments(data):
    """The non-empty runs of non-zero bytes that a 00 ends: each is exactly one frame, good or bad."""
    return [s for s in bytes(data).split(b"\x00")[:-1] if s]


class Reference:
    """An independent decode of one segment at a time: the frame tuple, or None if it is not a
    valid frame. A token frame carries the low bits of seq (16) and epoch (8), put back whole
    against the last token decoded (frame.py's header), so the reference keeps that too."""

    def __init__(self):
        self.seq = self.epoch = 0

    def __call__(self, segment):
        raw = bytearray()
        i = 0
        while i < len(segment):
            code = segment[i]
            block = segment[i + 1:i + code]
            if len(block) != code - 1:
                return None  # the block runs past the delimiter
            raw += block
            i += code
            if code != 0xFF and i < len(segment):
                raw.append(0)
        if not 4 <= len(raw) <= 16 or frame.crc16_bitwise(raw, len(raw) - 2) != (raw[-2] << 8) | raw[-1]:
            return None
        kind, lseq, body = raw[0], raw[1], raw[2:-2]
        if kind == frame.TOKEN and len(body) == 5:
            self.seq = nearest(self.seq, body[2] | body[3] << 8, 16, frame.SEQ_BACK, frame.SEQ_MASK + 1)
            self.epoch = nearest(self.epoch, body[4], 8, 128, 1 << 16)
            return ("token", body[0], body[1], self.seq, self.epoch, lseq)
        if kind == frame.REQUEST and not body:
            return ("request", lseq)
        if kind == frame.PROBE and len(body) == 2:
            return ("probe", body[0] | body[1] << 8, lseq)
        if kind == frame.AGAIN and len(body) == 2:
            return ("again", body[0] | body[1] << 8, lseq)
        if kind == frame.CLAIM and len(body) == 11:
            return ("claim", body[0] | body[1] << 8, body[2] | body[3] << 8, body[4] & 1,
                    int.from_bytes(body[5:9], "little") & frame.SEQ_MASK, body[9] | body[10] << 8, lseq)
        return None


def nearest(ref, low, bits, back, period):
    """The number whose low `bits` bits are `low`, in [ref - back, ref - back + 2**bits), modulo period."""
    for v in range(ref - back, ref - back + (1 << bits)):
        if v % (1 << bits) == low:
            return v % period
    raise AssertionError("unreachable")


chunkings = st.lists(st.integers(1, 40), min_size=1, max_size=5)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=300), chunkings)
def test_decoder_any_bytes(data, chunks):
    dec, out = decode(data, chunks)
    segs = terminated_segments(data)
    # one result per frame the stream contains, each one valid or counted bad
    assert len(out) == len(segs) == dec.frames + dec.bad
    assert dec.bad == sum(dec.bad_counts) == sum(1 for o in out if o[0] == "bad")
    # and the valid ones are exactly what an independent decoder finds
    ref = list(map(Reference(), segs))
    assert [o for o in out if o[0] != "bad"] == [r for r in ref if r is not None]
    assert [o[0] == "bad" for o in out] == [r is None for r in ref]


def _frames(draw_list):
    enc = frame.Encoder()
    wire, want = bytearray(), []
    seq = epoch = 0
    for item in draw_list:
        if isinstance(item, bytes):
            wire += item  # garbage
            continue
        lseq = enc.lseq
        if item is None:
            wire += enc.request()
            want.append(("request", lseq))
        elif isinstance(item, int):
            wire += enc.probe(item)
            want.append(("probe", item, lseq))
        elif item[0] == "again":
            wire += enc.again(item[1])
            want.append(item + (lseq,))
        elif item[0] == "claim":
            wire += enc.claim(*item[1:])
            want.append(item + (lseq,))
        else:
            # A token: count, state, and seq and epoch as steps from the last token's, small
            # enough that a frame or two lost in between still leaves them readable (the
            # decoder reads a token's low bits against the last token it decoded).
            count, state, dseq, depoch = item
            seq = (seq + dseq) & frame.SEQ_MASK
            epoch = (epoch + depoch) & 0xFFFF
            wire += enc.token(count, state, seq, epoch)
            want.append(("token", count, state, seq, epoch, lseq))
    return bytes(wire), want


items = st.lists(st.one_of(
    st.binary(min_size=1, max_size=40),
    st.none(),
    st.integers(0, 0xFFFF),
    st.tuples(st.integers(0, 255), st.integers(0, 255), st.integers(-frame.SEQ_BACK // 3, (0x10000 - frame.SEQ_BACK) // 3 - 1),
              st.integers(-42, 42)),
    st.tuples(st.just("again"), st.integers(0, 0xFFFF)),
    st.tuples(st.just("claim"), st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), st.integers(0, 1),
              st.integers(0, frame.SEQ_MASK), st.integers(0, 0xFFFF)),
), max_size=30)


@settings(max_examples=500, deadline=None)
@given(items, chunkings)
def test_decoder_valid_frames_among_garbage(mix, chunks):
    data, want = _frames(mix)
    dec, out = decode(data, chunks)
    good = [o for o in out if o[0] != "bad"]
    # every valid frame arrives intact and in order (garbage that happens to be a valid frame
    # would show up in between: a subsequence, not equality)
    it = iter(good)
    assert all(any(g == w for g in it) for w in want), (want, good)
    assert len(out) == len(terminated_segments(data)) == dec.frames + dec.bad
    garbage_only = bytes(b"".join(m for m in mix if isinstance(m, bytes)))
    if not any(isinstance(m, bytes) for m in mix):
        assert good == want and dec.bad == 0
    elif 0 not in garbage_only and not any(map(Reference(), terminated_segments(garbage_only))):
        # garbage with no 00 of its own can only spoil itself: one bad frame per garbage run
        assert good == want


@settings(max_examples=300, deadline=None)
@given(items, st.data())
def test_decoder_corrupted_frames_never_delivered_wrong(mix, data):
    """A single flipped bit in a stream of valid frames: every frame other than the hit
    one (and its neighbour, when the flip hits a delimiter) arrives intact; nothing else does."""
    mix = [m for m in mix if not isinstance(m, bytes)]
    wire, want = _frames(mix)
    if not wire:
        return
    pos = data.draw(st.integers(0, len(wire) - 1))
    bit = data.draw(st.integers(0, 7))
    bad = bytearray(wire)
    bad[pos] ^= 1 << bit
    dec, out = decode(bytes(bad) + b"\x00", [7])  # the line then idles (else the last frame waits)
    good = [o for o in out if o[0] != "bad"]
    assert set(good) <= set(want)
    assert len(good) >= len(want) - 2
    assert dec.bad >= 1 or len(good) == len(want)


# -- the host-link parser ------------------------------------------------------

@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400), chunkings)
def test_line_parser_any_bytes(data, chunks):
    p = hl.LineParser(board=1, size=3)
    items = []
    i = k = 0
    while i < len(data):
        size = chunks[k % len(chunks)]
        k += 1
        items += p.feed(data[i:i + size])
        i += size
    assert all(isinstance(x, (hl.Reply, hl.BoardEvent)) for x in items)
    lines = data.split(b"\n")[:-1]
    replies = sum(1 for x in items if isinstance(x, hl.Reply))
    # every complete line is a reply, a batch of events, counted garbage, or blank
    assert replies + sum(p.garbage.values()) <= len(lines) + len(data) // 1024 + 1
    non_ascii = sum(1 for ln in lines if any(c > 127 for c in ln))
    assert p.garbage.get("not ascii", 0) == non_ascii
    # and the parser still reads a good line afterwards
    after = p.feed(b"\n!pong 7 123\n")
    assert isinstance(after[-1], hl.Reply) and after[-1].word == "pong" and after[-1].text == "7 123"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=60), max_size=20))
def test_line_parser_printable_garbage_is_counted(lines):
    p = hl.LineParser(board=0, size=2)
    items = p.feed("".join(ln + "\n" for ln in lines).encode())
    # each line gives at least one item, exactly one garbage count, or nothing (blank, prompt, empty batch)
    counted = sum(p.garbage.values())
    assert counted <= len(lines)
    assert len([x for x in items if isinstance(x, hl.Reply)]) + counted <= len(lines) + sum(
        1 for x in items if isinstance(x, hl.BoardEvent))


# -- the same Decoder under MicroPython ------------------------------------------

def _fuzz_stream(seed, size=6000):
    """Valid frames, random garbage and corrupted frames, cut into random chunks (1..64 bytes)."""
    rng = random.Random(seed)
    enc = frame.Encoder()
    data = bytearray()
    while len(data) < size:
        r = rng.random()
        if r < 0.35:
            data += enc.token(rng.randrange(1 << 16), rng.randrange(256), rng.randrange(1 << 30), rng.randrange(1 << 16))
        elif r < 0.55:
            data += enc.request()
        elif r < 0.6:
            data += enc.probe(rng.randrange(1 << 16))
        elif r < 0.65:
            data += enc.claim(rng.randrange(1 << 16), rng.randrange(1 << 16), rng.randrange(2), rng.randrange(1 << 30),
                              rng.randrange(1 << 16))
        elif r < 0.7:
            data += enc.again(rng.randrange(1 << 16))
        elif r < 0.8:
            f = bytearray(enc.token(1, 2, 3, 4))
            f[rng.randrange(len(f))] ^= 1 << rng.randrange(8)
            data += f
        elif r < 0.9:
            data += bytes(rng.randrange(256) for _ in range(rng.randrange(1, 40)))
        else:
            data += bytes(rng.choice((0, 0, 1, 2, 0xFF)) for _ in range(rng.randrange(1, 30)))
    chunks = []
    i = 0
    while i < len(data):
        n = rng.randrange(1, 65)
        chunks.append(bytes(data[i:i + n]).hex())
        i += n
    return "\n".join(chunks) + "\n"


@pytest.mark.slow
def test_decoder_fuzz_micropython_matches_cpython(micropython, tmp_path):
    for seed in range(3):
        path = tmp_path / ("chunks%d.txt" % seed)
        path.write_text(_fuzz_stream(seed))
        cpy = subprocess.run([sys.executable, FUZZ_DRIVER, str(FIRMWARE), str(path)], capture_output=True, text=True,
                             timeout=60, check=True).stdout
        mpy = run_micropython(micropython, FUZZ_DRIVER, str(FIRMWARE), str(path))
        assert mpy == cpy
        lines = cpy.splitlines()
        frames, bad = map(int, lines[-1].split()[1:3])
        assert frames > 100 and bad > 50 and len(lines) == frames + bad + 1
