# Decoder fuzz driver: feeds the chunks in a file (one hex string per line, as they would come
# from uart.readinto) through firmware/frame.py's Decoder and prints every result and the
# counters. tests/test_fuzz.py runs it under CPython and MicroPython and compares the output.
# Usage: <python> mp_fuzz_driver.py FIRMWARE_DIR CHUNKS_FILE
import sys

sys.path.insert(0, sys.argv[1])
import binascii

import frame
import mp_frames


def main():
    dec = frame.Decoder()
    buf = bytearray(64)
    out = []

    def emit(text):
        out.append(text if not text.startswith("bad") else "%s %d" % (text, dec.bad))

    with open(sys.argv[2]) as f:
        for line in f:
            mp_frames.feed(dec, buf, binascii.unhexlify(line.strip()), emit)
    for ln in out:
        print(ln)
    print("counts %d %d %s" % (dec.frames, dec.bad, " ".join(str(c) for c in dec.bad_counts)))


main()
