# The wandering token's, BinarySearch's and Raymond's token handlers on a board
# (proto_wt.on_message_viper, proto_bs.on_message_viper, proto_raymond.on_message_viper) against
# their twin, the native method (on_message_native, which CPython and the simulator run): the same
# random run of a ring of protocol nodes (no node loop: messages delivered in order, requests,
# critical sections' ends, wake-ups, and now and then a token's top bits set, a newer epoch, a
# token duplicated or delivered to a node still joining, BS's with too long a served list) with each, and every node's state and
# outgoing bytes after every handler compared. Runs under MicroPython (both twins) and CPython
# (the native twin only); prints one JSON line, which tests/test_hop_twins.py compares.
# Usage: <python> mp_hop_twin_driver.py FIRMWARE_DIR SPEC SEED[,SEED...] EVENTS (a result per seed)
# Run under another __name__ (exec'd on an emulated Pico, whose firmware is on its filesystem:
# tests/test_rp2040.py), it only defines its functions.
import sys

if __name__ == "__main__":
    sys.path.insert(0, sys.argv[1])
import json

import protocol


class Rng:
    """The run's own generator (the same numbers under MicroPython and CPython)."""

    def __init__(self, seed):
        self.x = seed * 7919 + 13

    def below(self, k):
        self.x = (self.x * 1103515245 + 12345) & 0x7FFFFFFF
        return (self.x >> 8) % k


def snapshot(nd):
    out = []
    d = nd.__dict__
    for k in sorted(d):
        v = d[k]
        if isinstance(v, (bytes, bytearray)) or (not isinstance(v, (int, bool, str)) and v is not None
                                                  and not isinstance(v, dict)):
            v = list(v)
        elif isinstance(v, dict):
            continue
        out.append([k, v])
    return out


def fold(h, text):
    """FNV-1a over text's characters, 30 bits (a small int on every port)."""
    for ch in text:
        h = ((h ^ ord(ch)) * 16777619) & 0x3FFFFFFF
    return h


def run(spec, seed, events, on_message, module, counts):
    cls = protocol.load(spec)
    base = getattr(module, protocol.REGISTRY[protocol.parse_spec(spec)[0]][1])
    base.on_message = on_message
    rng = Rng(seed)
    n = 2 + rng.below(4)
    nodes = [cls(i, n) for i in range(n)]
    clocked = getattr(nodes[0], "clocked", False)
    queue = []
    now = 0
    trace_len = 0
    digest = [0]  # a fold of every handler's action and the node's state after it

    def act(nd, a, why):
        digest[0] = fold(digest[0], why + repr(a) + json.dumps(snapshot(nd)))
        if a & protocol.SEND_MSG:
            buf = bytearray(5) + bytes(nd.out[:nd.out_len])
            buf[0] = 7
            buf[2] = nd.out_kind
            buf[3] = nd.index
            buf[4] = nd.out_dst & 0xFF
            queue.append([nd.out_dst, nd.out_kind, nd.index, buf])

    act(nodes[0], nodes[0].give_token(), "give")
    for _ in range(events):
        now += rng.below(4)
        if clocked:
            for nd in nodes:
                nd.now = now & 0x3FFFFFFF
        r = rng.below(100)
        if r < 8:
            nd = nodes[rng.below(n)]
            if not nd.busy():
                act(nd, nd.request(), "req")
        elif r < 20:
            for nd in nodes:
                if nd.in_cs:
                    act(nd, nd.exit_cs(), "exit")
                    break
        elif r < 30 and clocked:
            for nd in nodes:
                w = nd.wake_at
                if w >= 0 and ((nd.now - w) & 0x3FFFFFFF) < 0x20000000:
                    act(nd, nd.on_wake(), "wake")
        elif r < 30:
            pass  # time passes
        elif queue:
            dst, kind, src, buf = queue.pop(0)
            q = rng.below(100) if kind == module.TOKEN else 99  # (a gimme is left as it is)
            if q < 4:
                buf[8] |= 0xC0  # seq's top bits: never sent, ignored on receipt
                if len(buf) > 14:
                    buf[14] |= 0xC0  # ts's (WT) or R's (BS); Raymond's token has 7 payload bytes
            elif q < 7:
                buf[9] = (buf[9] + 1) & 0xFF  # a newer epoch: the gate's call
            elif q < 10:
                queue.append([dst, kind, src, bytearray(buf)])  # a second token
            elif q == 11 and hasattr(module, "SERVED_SLOTS"):
                buf[15] |= 0x80  # BS: a served list longer than the node keeps (the native path drops it)
            nd = nodes[dst]
            counts[0] += 1
            if q == 10:
                nd.fresh = True  # the gate's other case: a node still joining drops the token
                nd.sync_gate()
                act(nd, nd.on_message(kind, src, buf), "msg fresh")
                nd.fresh = False
                nd.sync_gate()
            else:
                act(nd, nd.on_message(kind, src, buf), "msg")
        trace_len += 1
    return [digest[0], trace_len]


try:
    import micropython

    HEAP_LOCK = (micropython.heap_lock, micropython.heap_unlock)
except (ImportError, AttributeError):  # CPython
    HEAP_LOCK = (None, None)


def bs_trap_cases(module, on_message, lock=None, unlock=None):
    """BS: the rotation's token reaching node 2 of 4 with one trap laid there (by a gimme of
    requester 1), at each distance d of the token's R from the trap's history around the round
    rule's bounds (n and _hhalf), with the trap's request in the served list, another request of
    the same requester there, or neither: what a random run seldom meets. Each case's action,
    state and bytes, folded. The token handled under lock() (MicroPython's heap_lock: a hop
    allocates nothing)."""
    cls = protocol.load("bs")
    cls.on_message = on_message
    out = []
    hhalf = cls._hhalf
    n = 4
    for d in (0, 1, n - 2, n - 1, n, n + 1, hhalf - 1, hhalf, hhalf + 1):
        for served in ((), ((1, 5),), ((1, 6),), ((0, 5), (3, 9), (1, 5))):
            nd = cls(2, n)
            h = 1000
            gimme = bytearray(5 + 11)
            gimme[5:7] = bytes((1, 0))  # requester 1
            gimme[7] = 5  # its request number
            for k in range(4):
                gimme[8 + k] = (h >> (8 * k)) & 0xFF  # its history
            gimme[12:16] = bytes((1, 0, 3, 0))  # lo 1, hi 3
            nd.on_message(module.GIMME, 1, gimme)
            r = (h + d) & 0x3FFFFFFF
            tok = bytearray(5) + bytearray((7, 0, 0, 0, nd.open_epoch & 0xFF, nd.open_epoch >> 8))
            tok += bytearray(((r >> (8 * k)) & 0xFF for k in range(4)))
            tok.append(len(served) << 1)
            if served:
                tok += bytearray((2, 0))  # the list's age
                for z, sn in served:
                    tok += bytearray((z, 0, sn))
            if lock is not None:
                lock()
            try:
                a = on_message(nd, module.TOKEN, 1, tok)
            finally:
                if unlock is not None:
                    unlock()
            out.append(fold(0, repr(a) + json.dumps(snapshot(nd)) + repr(list(nd.out[:nd.out_len]))))
    return out


def main():
    # every seed in one process: the interpreter's start and the firmware's import (viper
    # compiled) were most of a run's time, 60 processes for Raymond's 30 seeds
    spec, events = sys.argv[2], int(sys.argv[4])
    seeds = [int(s) for s in sys.argv[3].split(",")]
    name = protocol.parse_spec(spec)[0]
    module = __import__(protocol.module_name(name))
    native = module.on_message_native
    out = {"impl": sys.implementation.name, "results": {}}
    counts = [0]
    out["results"]["native"] = [run(spec, seed, events, native, module, counts) for seed in seeds]
    if name == "bs":
        out["results"]["native"].append(bs_trap_cases(module, native, *HEAP_LOCK))
    out["delivered"] = counts[0]
    viper = getattr(module, "on_message_viper", None)
    if viper is not None:
        general = [0]

        def counting(self, kind, src, buf):
            general[0] += 1
            return native(self, kind, src, buf)

        # BS's tokens taken whole by viper where traps were laid (trap_h: -1 where none), all
        # stale (a live one is a lend, the native method's)
        with_traps = [0]

        def viper_counting(self, kind, src, buf):
            before = general[0]
            traps = any(h >= 0 for h in getattr(self, "trap_h", ()))
            a = viper(self, kind, src, buf)
            if traps and general[0] == before:
                with_traps[0] += 1
            return a

        module.on_message_native = counting  # what the viper twin calls for the other cases
        delivered = [0]
        try:
            out["results"]["viper"] = [run(spec, seed, events, viper_counting, module, delivered) for seed in seeds]
        finally:
            module.on_message_native = native
        out["taken_by_viper"] = delivered[0] - general[0]
        if name == "bs":  # (the viper twin handing its other cases to the native method itself)
            out["results"]["viper"].append(bs_trap_cases(module, viper, *HEAP_LOCK))
        out["taken_by_viper_with_traps"] = with_traps[0]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
