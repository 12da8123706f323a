# Decoder fuzz driver: feeds the chunks in a file (one hex string per line, as they would come
# from uart.readinto) through firmware/frame.py's Decoder and prints every result and the
# counters. tests/test_fuzz.py runs it under CPython and MicroPython and compares the output.
# Usage: <python> mp_fuzz_driver.py FIRMWARE_DIR CHUNKS_FILE
import sys

sys.path.insert(0, sys.argv[1])
import binascii

import frame


def main():
    dec = frame.Decoder()
    buf = bytearray(64)
    out = []
    with open(sys.argv[2]) as f:
        for line in f:
            data = binascii.unhexlify(line.strip())
            n = len(data)
            for j in range(n):
                buf[j] = data[j]
            dec.feed(buf, n)
            while True:
                k = dec.next()
                if not k:
                    break
                if k == frame.TOKEN:
                    out.append("token %d %d %d %d %d" % (dec.count, dec.state, dec.seq, dec.epoch, dec.lseq))
                elif k == frame.REQUEST:
                    out.append("request %d" % dec.lseq)
                elif k == frame.PROBE:
                    out.append("probe %d %d" % (dec.probe, dec.lseq))
                elif k == frame.CLAIM:
                    out.append("claim %d %d %d %d %d %d" % (dec.epoch, dec.origin, dec.join, dec.seq, dec.nonce, dec.lseq))
                elif k == frame.AGAIN:
                    out.append("again %d %d" % (dec.origin, dec.lseq))
                else:
                    out.append("bad %s %d" % (frame.BAD_REASONS[dec.last_bad], dec.bad))
    for ln in out:
        print(ln)
    print("counts %d %d %s" % (dec.frames, dec.bad, " ".join(str(c) for c in dec.bad_counts)))


main()
