# Shared by the MicroPython test drivers (mp_codec_driver.py, mp_fuzz_driver.py): feed
# bytes to firmware/frame.py's Decoder as uart.readinto would, and name each result.
# Runs under CPython and MicroPython; the drivers put the firmware folder on sys.path.
import frame


def feed(dec, buf, data, emit):
    """data into dec through the reused buffer buf, len(buf) bytes at a time;
    emit(describe(dec, kind)) for every frame result."""
    i = 0
    while i < len(data):
        n = min(len(buf), len(data) - i)
        for j in range(n):
            buf[j] = data[i + j]
        i += n
        dec.feed(buf, n)
        while True:
            k = dec.next()
            if not k:
                break
            emit(describe(dec, k))


def describe(dec, k):
    if k == frame.TOKEN:
        return "token %d %d %d %d %d" % (dec.count, dec.state, dec.seq, dec.epoch, dec.lseq)
    if k == frame.REQUEST:
        return "request %d" % dec.lseq
    if k == frame.PROBE:
        return "probe %d %d" % (dec.probe, dec.lseq)
    if k == frame.CLAIM:
        return "claim %d %d %d %d %d %d" % (dec.epoch, dec.origin, dec.join, dec.seq, dec.nonce, dec.lseq)
    if k == frame.AGAIN:
        return "again %d %d" % (dec.origin, dec.lseq)
    return "bad %s" % frame.BAD_REASONS[dec.last_bad]
