"""The firmware's viper functions and their pure-Python twins (frame.py: crc16, seal,
cobs, token, request, message, scan; hostlink.py: record, record_fields, record_token;
proto_bs.py: relay_rotation; proto_wt.py: relay_token) give identical bytes
and results over random input: both twins under the real micropython binary, and the
Python twins under CPython, which the simulator and the host use."""

import sys

import pytest
from hypothesis import given, settings, strategies as st

from conftest import FIRMWARE, cases_file, run_twin_driver, twins_agree

DRIVER = "mp_twin_driver.py"

sys.path.insert(0, str(FIRMWARE))
import frame  # noqa: E402

u16 = st.integers(0, 0xFFFF)
u30 = st.integers(0, 0x3FFFFFFF)
u8 = st.integers(0, 255)


def wire_chunks():
    """Byte streams with real frames, garbage and cut frames, split anywhere."""
    enc = frame.Encoder()
    piece = st.one_of(
        st.tuples(u16, u8, u30, u16).map(lambda f: bytes(enc.token(*f))),
        st.just(None).map(lambda _: bytes(enc.request())),
        st.tuples(u16, u16, st.integers(0, 1), u30, u16).map(lambda f: bytes(enc.claim(*f))),
        u16.map(lambda o: bytes(enc.again(o))),
        u16.map(lambda p: bytes(enc.probe(p))),
        st.tuples(u8, u8, u8, st.binary(max_size=60)).map(lambda m: enc.message(*m)),
        st.binary(max_size=40),
    )
    return st.tuples(st.lists(piece, max_size=12), st.lists(st.integers(1, 30), min_size=1, max_size=4)).map(_split)


@st.composite
def rotation_cases(draw):
    """proto_bs.relay_rotation: a delivered token message (any bytes, any top bits, either lend
    bit) on, with an epoch, R + 1 and the list's age + 1 under a mask (the explorer's is 15, its
    half 8), k = 0..8 served entries, on a ring of n (the list expires at age n when n < half)."""
    k = draw(st.integers(0, 8))
    out = draw(st.binary(min_size=37, max_size=45))  # the most: 13 + 3 x SERVED_SLOTS
    buf = bytearray(draw(st.binary(min_size=18 + 3 * k, max_size=30 + 3 * k)))
    buf[15] = (k << 1) | draw(st.integers(0, 1))
    hmask = draw(st.sampled_from([0x3FFFFFFF, 15]))
    return ["rotation", out.hex(), bytes(buf).hex(), draw(u16), hmask, (hmask + 1) >> 1, draw(st.integers(2, 20))]


@st.composite
def relay_cases(draw):
    """proto_wt.relay_token: a delivered token message's 12 payload bytes (any top bits) on, with
    an epoch, over whatever out held."""
    return ["relay", draw(st.binary(min_size=12, max_size=12)).hex(), draw(st.binary(min_size=17, max_size=24)).hex(),
            draw(u16)]


def _split(parts_sizes):
    parts, sizes = parts_sizes
    data = b"".join(parts)
    chunks, i, k = [], 0, 0
    while i < len(data):
        n = sizes[k % len(sizes)]
        chunks.append(data[i:i + n].hex())
        i += n
        k += 1
    return ["scan", chunks]


log_op = st.tuples(st.sampled_from(["record", "fields", "token", "flush"]), u8, u8, u16, u30, u16, u30)

cases = st.lists(st.one_of(
    st.binary(max_size=40).map(lambda b: ["crc", b.hex()]),
    st.binary(min_size=1, max_size=16).map(lambda b: ["seal", b.hex()]),
    st.binary(min_size=1, max_size=253).map(lambda b: ["cobs", b.hex()]),
    st.tuples(u8, u8, u8, st.binary(max_size=246), u8).map(lambda t: ["message", t[0], t[1], t[2], t[3].hex(), t[4]]),
    st.tuples(st.integers(-2, 0xFFFF), u8, u30, u16, u8).map(lambda t: ["token", *t]),  # count saturates (-1: 65535)
    u8.map(lambda lseq: ["request", lseq]),
    wire_chunks(),
    rotation_cases(),
    relay_cases(),
    st.tuples(st.integers(1, 20), st.lists(log_op, max_size=40)).map(lambda t: ["log", t[0], [list(o) for o in t[1]]]),
), min_size=1, max_size=25)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(case_list=cases)
def test_viper_and_python_twins_agree(micropython, tmp_path_factory, case_list):
    twins_agree(micropython, DRIVER, cases_file(tmp_path_factory.mktemp("twins"), case_list))


def test_the_driver_sees_a_difference(micropython, tmp_path):
    # The comparison above can fail: a token encoded with another link sequence
    # byte differs in its bytes.
    a = run_twin_driver(sys.executable, DRIVER, cases_file(tmp_path, [["token", 1, 2, 3, 4, 5]]))["results"]["py"]
    b = run_twin_driver(sys.executable, DRIVER, cases_file(tmp_path, [["token", 1, 2, 3, 4, 6]]))["results"]["py"]
    assert a != b


@pytest.mark.slow
def test_request_frames_of_every_link_sequence_byte_agree(micropython, tmp_path):
    # request_viper is written out byte by byte, each zero byte a COBS code of its own: every
    # one of the 256 link sequence bytes (some make a CRC byte 0) against the Python twin.
    case_list = [["request", lseq] for lseq in range(256)]
    mp = twins_agree(micropython, DRIVER, cases_file(tmp_path, case_list))
    assert any("00" in r[1][2:8] for r in mp["results"]["py"])  # a zero among lseq and the CRC


def test_entry_numbers_wrap_at_30_bits():
    # The top two bits of a frame's seq field are never sent and ignored on receipt:
    # no board ever holds an entry number that needs a long int (rp2: 30-bit small ints).
    wire = bytes(frame.Encoder().token(1, 0, 0xFFFFFFFF, 2))
    assert wire == bytes(frame.Encoder().token(1, 0, 0x3FFFFFFF, 2))
    dec = frame.Decoder()
    dec.feed(bytearray(wire), len(wire))
    assert dec.next() == frame.TOKEN and dec.seq == 0x3FFFFFFF


def _seal_cases():
    """seal cases the random ones rarely give: zero runs at either end, lengths up to 60, and
    for each length a frame whose CRC's high byte is 0 and one whose low byte is (each a COBS
    block of its own after the data)."""
    out = []
    for n in (1, 2, 3, 8, 16, 30, 31, 60):
        for data in (bytes(n), b"\xff" * n, bytes((i % 3 == 0 and 0) or i for i in range(n)),
                     b"\x00" + b"\x05" * (n - 1), b"\x05" * (n - 1) + b"\x00"):
            out.append(["seal", data[:n].hex()])
        for want in (0, 1):  # CRC high byte 0, CRC low byte 0
            for v in range(65536):
                data = bytearray(b"\x11" * n + b"\x00\x00")
                data[n - 1] = v & 0xFF
                if n > 1:
                    data[n - 2] = v >> 8
                c = frame.crc16_py(data, n)
                if (c >> 8 if want == 0 else c & 0xFF) == 0:
                    out.append(["seal", bytes(data[:n]).hex()])
                    break
    return out


@pytest.mark.slow
def test_seal_agrees_on_zero_runs_and_zero_crc_bytes(micropython, tmp_path):
    # seal_viper makes the CRC and the COBS in one pass, each block's code byte from positions
    # (issue 41): against seal_py on the cases that place a code byte at each end.
    case_list = _seal_cases()
    mp = twins_agree(micropython, DRIVER, cases_file(tmp_path, case_list))
    assert len(mp["results"]["py"]) == len(case_list) > 50
