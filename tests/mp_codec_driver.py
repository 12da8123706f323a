# Deterministic run of the firmware codecs (frame + event log); prints one line per
# result. tests/test_frame.py runs it under CPython and MicroPython and compares.
# Usage: <python> mp_codec_driver.py FIRMWARE_DIR
import sys

sys.path.insert(0, sys.argv[1])
import binascii

import frame
import hostlink
import mp_frames


def hx(b):
    return binascii.hexlify(bytes(b)).decode()


def main():
    print("crc", frame.crc16(b"123456789", 9), frame.crc16_bitwise(b"123456789", 9))
    enc = frame.Encoder()
    wire = bytearray()
    cases = [(0, 0, 0, 0), (3, 1, 0x01020304, 7), (0xFFFF, 1, 0x3FFFFFFF, 0xFFFF), (256, 0, 0x100, 0x10)]
    for c in cases:
        t = enc.token(*c)
        print("token", hx(t))
        wire += t
        r = enc.request()
        print("request", hx(r))
        wire += r
    # Garbage, a corrupted token, a too-long frame, an unknown kind, then a good token.
    bad = bytearray(enc.token(3, 1, 0x01020304, 7))
    bad[6] ^= 0x40  # a data byte, not a COBS code byte: a CRC error
    raw_unknown = bytearray(b"\x07\x00")
    c = frame.crc16(raw_unknown, 2)
    raw_unknown += bytes((c >> 8, c & 0xFF))
    # COBS of 07 00 crc_hi crc_lo: 02 07 03 crc_hi crc_lo (crc bytes have no zero here)
    unknown = bytes([0, 2, 7, 3, raw_unknown[2], raw_unknown[3], 0])
    wire += b"garbage\xff\x01" + bad + b"\x00" + b"\x11" * 40 + b"\x00" + unknown + enc.token(9, 0, 9, 9)
    dec = frame.Decoder()
    # Feed in uneven chunks through one reused buffer (as from uart.readinto).
    mp_frames.feed(dec, bytearray(7), wire, lambda text: print("frame", text))
    print("counts", dec.frames, dec.bad, list(dec.bad_counts))

    clock = [1000]

    def ticks():
        clock[0] += 7
        return clock[0]

    log = hostlink.EventLog(ticks, capacity=8)
    lines = []
    for k in range(11):  # 3 more than fit: dropped and counted
        log.record(hostlink.EV_SEND, 1, 1, k, 1000 + k, 2)
    while True:
        out = []
        # copy what is written, as a stream does: the firmware reuses its line buffer
        if not log.flush_one(lambda b: out.append(bytes(b)), 5):
            break
        lines.append(b"".join(out))
    log.record(hostlink.EV_ENTER, 0, 0, 0, 5, 0)
    while True:
        out = []
        if not log.flush_one(lambda b: out.append(bytes(b))):
            break
        lines.append(b"".join(out))
    for ln in lines:
        print("line", ln.decode().strip())
    print("log", log.eseq, log.dropped_total, log.pending)


main()
