# Runs the firmware's twin functions (frame.py, hostlink.py, proto_bs.py, proto_wt.py: *_py and *_viper) on the
# cases in a JSON file and prints one JSON line: {"impl": ..., "results": {twin: [...]}}.
# Under MicroPython both twins run; under CPython only the *_py ones exist.
# Usage: <python> mp_twin_driver.py FIRMWARE_DIR CASES.json
import sys

sys.path.insert(0, sys.argv[1])
import json

import frame
import hostlink
import proto_bs
import proto_wt


def unhex(s):
    return bytearray(bytes.fromhex(s))


def hexof(b):
    return "".join("%02x" % x for x in b)


class Tok:
    def __init__(self, state, count, seq, epoch):
        self.state = state
        self.count = count
        self.seq = seq
        self.epoch = epoch


class Out:
    """A protocol node's outgoing message fields, as frame.message() reads them."""

    def __init__(self, kind, index, dst, payload):
        self.out_kind = kind
        self.index = index
        self.out_dst = dst
        self.out_len = len(payload)
        self.out = payload


def run(case, f):
    op = case[0]
    if op == "crc":
        data = unhex(case[1])
        return f["crc16"](data, len(data))
    if op == "seal":
        raw = unhex(case[1]) + bytearray(2)
        out = bytearray(len(raw) + 3)
        n = f["seal"](raw, len(raw) - 2, out)
        return [n, hexof(raw), hexof(out)]
    if op == "token":
        raw = bytearray(len(frame.Encoder()._raw))
        raw[-1] = case[5]  # the encoder's next link sequence byte
        out = bytearray(frame.TOKEN_WIRE)
        n = f["token"](raw, out, Tok(case[2], case[1], case[3], case[4]))
        return [n, hexof(raw), hexof(out)]
    if op == "request":
        raw = bytearray(len(frame.Encoder()._raw))
        raw[-1] = case[1]  # the encoder's next link sequence byte
        out = bytearray(frame.REQUEST_WIRE)
        n = f["request"](raw, out)
        return [n, hexof(raw[:4]), raw[-1], hexof(out)]  # (the rest of raw is not written)
    if op == "cobs":
        raw = unhex(case[1])
        out = bytearray(len(raw) + 3)
        n = f["cobs"](raw, len(raw), out)
        return [n, hexof(out)]
    if op == "message":
        # case: ["message", mkind, src, dst, payload hex, lseq]
        raw = bytearray(len(frame.Encoder()._raw))
        raw[-1] = case[5]
        out = bytearray(len(raw))
        fields = frame.Decoder().st
        n = f["message"](raw, out, Out(case[1], case[2], case[3], unhex(case[4])), fields)
        return [n, hexof(raw), hexof(out), list(fields[:4])]
    if op == "scan":
        dec = frame.Decoder()
        got = []
        for chunk in case[1]:
            buf = unhex(chunk)
            dec.feed(buf, len(buf))
            while True:
                k = f["scan"](buf, dec.raw, dec.st)
                # state after the call (not the fed position; not the CRC table's copy after it, which
                # made each case's answer nine times as long: MemoryError on the unix port's heap)
                got.append([k] + list(dec.st[2:frame.S_REF_EPOCH + 1]))
                if not k:
                    break
        return got
    if op == "log":
        # case: ["log", capacity, [[how, code, aux, count, seq, epoch, tick], ...]]
        log = hostlink.EventLog(lambda: 0, case[1])
        fields = frame.Decoder().st
        lines = []
        for how, code, aux, count, seq, epoch, tick in case[2]:
            if how == "record":
                k = f["record"](log.buf, log.st, code, aux, count, seq, epoch, tick)
            elif how == "fields":
                fields[frame.F_STATE] = aux
                fields[frame.F_COUNT] = count
                fields[frame.F_SEQ] = seq
                fields[frame.F_EPOCH] = epoch
                k = f["record_fields"](log.buf, log.st, code, fields, frame.F_STATE, tick)
            elif how == "token":
                k = f["record_token"](log.buf, log.st, code, Tok(aux, count, seq, epoch), tick)
            else:  # flush: what one call writes, however many writes it takes
                written = []
                k = log.flush_one(lambda b: written.append(hexof(b)), 1 + count % hostlink.BATCH_RECORDS)
                lines.append("".join(written))
            lines.append(k)
        return [hexof(log.buf), list(log.st), lines]
    if op == "rotation":
        # case: ["rotation", out hex, buf hex (a delivered frame's raw: the payload at 5), epoch, hmask, hhalf, n]
        out = unhex(case[1])
        r = f["relay_rotation"](out, unhex(case[2]), case[3], case[4], case[5], case[6])
        return [r, hexof(out)]
    if op == "relay":
        # case: ["relay", out hex, buf hex (a delivered frame's raw: the payload at 5), epoch]
        out = unhex(case[1])
        f["relay_token"](out, unhex(case[2]), case[3])
        return hexof(out)
    raise ValueError("unknown case %r" % op)


TWINS = ("crc16", "seal", "cobs", "token", "request", "message", "scan", "record", "record_fields", "record_token",
         "relay_rotation", "relay_token")
MODULE = {"crc16": frame, "seal": frame, "cobs": frame, "token": frame, "request": frame, "message": frame, "scan": frame, "record": hostlink,
          "record_fields": hostlink, "record_token": hostlink, "relay_rotation": proto_bs,
          "relay_token": proto_wt}


def twin_set(suffix):
    out = {}
    for name in TWINS:
        fn = getattr(MODULE[name], name + suffix, None)
        if fn is None:
            return None
        out[name] = fn
    return out


def main():
    with open(sys.argv[2]) as fh:
        cases = json.load(fh)
    results = {}
    for suffix in ("_py", "_viper"):
        f = twin_set(suffix)
        if f is None:
            continue
        results[suffix[1:]] = [run(c, f) for c in cases]
    print(json.dumps({"impl": sys.implementation.name, "results": results}))


main()
