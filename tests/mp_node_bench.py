# Node loops of a ring in one process, wired by in-memory stand-ins; runs under
# MicroPython (unix port) and CPython. Prints one JSON line of measurements.
# Usage: <python> mp_node_bench.py FIRMWARE_DIR [protocol] [n] [rounds] [log 0|1] [flush 0|1] [lock|total|x] [gcon]
# Protocol "s" (the default) keeps the token moving without requests: one hop per
# board per round. With "q", "d" or "d-literal" the bench makes the adversarial
# workload: whenever the ring is quiet, a request at the node just behind the token,
# so the request message and then the token travel n - 1 hops. With "toy" (the layer's
# test protocol, firmware/proto_toy.py) the same workload broadcasts the request (n hop
# frames) and routes the token to the requester (n - 1 hop frames); fwd_us is then the
# chip time of a pass that only passed a routed frame on (no protocol woken); so for
# "sk" and "ra" (firmware/proto_sk.py, proto_ra.py). With "P-route" (P a protocol whose
# token is a message and whose node sends it to node j with _give(j): toy, sk, ra) the
# resting token is sent, whenever the ring is quiet, straight to the node behind it (n - 1
# hops, nothing else on the wires): every pass between is a routed frame passed on alone
# (fwd_us), the figure to hold against S's token hop, and the last one delivers the token
# to a node that did not ask for it (deliver_us: receive it, then the protocol's token
# handling: it takes the token's arrays in and finds nobody waiting). "lock" runs the
# rounds under micropython.heap_lock() instead; "total" counts every heap byte they ask for,
# freed or not (micropython.mem_total, the unix port's). "wrap:NAME,NAME,..." sets those counters of
# every node (ints, or every item of an int array: e.g. seq, and Suzuki-Kasami's rn, ln) 3
# below 2**30 once the warm-up is over and the ring is quiet, so the rounds measured (or
# locked) cross the wrap: on the rp2 port, whose small ints end at 2**30 - 1. "batch4": any()
# reports at most 4 bytes, as a Pico's UART does (its receive interrupt comes at 4 bytes in
# the FIFO), so step() finishes each frame in NodeLoop._finish_frame as on a ring of Picos.
# "served:K" (BS): the token starts with K entries in its served list, which then never expire
# (every node's _hhalf, rot[_R_HHALF], is 0, which no list's age is below; the round rule is off with it, and the
# bench lays no trap): the rotation's hop with a full list (K = SERVED_SLOTS) instead of an empty one.
import sys

try:
    ARGV = BENCH_ARGV  # set by a line put before this file (an emulated Pico has no argv)
except NameError:
    ARGV = sys.argv
sys.path.insert(0, ARGV[1])
import gc
import json
import time

import frame
import protocol
import node

try:
    ticks_us = time.ticks_us
    ticks_diff = time.ticks_diff
except AttributeError:  # CPython
    def ticks_us():
        return int(time.perf_counter() * 1e6) & 0x3FFFFFFF

    def ticks_diff(a, b):
        return ((a - b + 0x20000000) & 0x3FFFFFFF) - 0x20000000


def _copy_py(src, at, n, dst, to):
    for i in range(n):
        dst[to + i] = src[at + i]


_copy = _copy_py
try:
    import micropython

    @micropython.viper
    def _copy_viper(src, at: int, n: int, dst, to: int):
        s = ptr8(src)
        d = ptr8(dst)
        i = 0
        while i < n:
            d[to + i] = s[at + i]
            i += 1

    _copy = _copy_viper
except (ImportError, AttributeError, NameError, SyntaxError, ValueError):
    pass


class MemUart:
    """One direction of a link: writes land in the next board's buffer. Has any()
    and readinto(buf, n) as a Pico's machine.UART does. No allocation."""

    batch = 1 << 20  # any() reports at most this many bytes ("batch4": 4)

    def __init__(self, size=512):
        self.buf = bytearray(size)
        self.n = 0
        self.peer = None  # MemUart of the next board (its receive side)
        self.sent_at = 0  # the tick at which the last write was done (a hop's time to its send)

    def any(self):
        return self.n if self.n < self.batch else self.batch

    def write(self, data):
        p = self.peer
        k = len(data)
        _copy(data, 0, k, p.buf, p.n)
        p.n += k
        self.sent_at = ticks_us()
        return k

    def readinto(self, buf, n):
        if n > self.n:
            n = self.n
        _copy(self.buf, 0, n, buf, 0)
        self.n -= n
        if self.n:
            _copy(self.buf, n, self.n, self.buf, 0)
        return n


class NullHost:
    def __init__(self):
        self.out_bytes = 0
        self.lines = 0

    def read_byte(self):
        return -1

    def write(self, data):
        self.out_bytes += len(data)
        self.lines += 1


def main():
    proto = ARGV[2] if len(ARGV) > 2 else "s"
    route = proto.endswith("-route")
    if route:
        proto = proto[:-6]
    n = int(ARGV[3]) if len(ARGV) > 3 else 3
    hops = int(ARGV[4]) if len(ARGV) > 4 else 2000
    log_on = (ARGV[5] if len(ARGV) > 5 else "1") == "1"
    flush_on = (ARGV[6] if len(ARGV) > 6 else "1") == "1"
    if "batch4" in ARGV[7:]:
        MemUart.batch = 4
    uarts = [MemUart() for _ in range(n)]
    for i in range(n):
        uarts[i].peer = uarts[(i + 1) % n]
    hosts = [NullHost() for _ in range(n)]
    loops = []
    for i in range(n):
        lp = node.NodeLoop(protocol.make_node(proto, i, n), uarts[i], hosts[i], ticks_us, ticks_diff, log_capacity=64)
        lp.log.enabled = log_on
        if not flush_on:
            lp.log.half = 1 << 30
            lp.log.flush_one = lambda write, max_records=0: 0
        loops.append(lp)
    for a in ARGV[7:]:
        if a.startswith("served:"):
            first = loops[0].node
            k = int(a[7:])
            for j in range(k):
                first.sv_node[j] = j % n
                first.sv_sn[j] = 1 + j
            first.rot[5] = k % len(first.sv_node)  # proto_bs._R_SV_NEXT
            first.sv_len = k
            for lp in loops:
                lp.node.rot[8] = 0  # proto_bs._R_HHALF
    for i in range(n):
        loops[i].start(give_token=(i == 0))

    def frames():
        return sum(lp.tx_frames for lp in loops)

    def feed():
        """Q, D: a request behind the resting token once the ring is quiet (no allocation)."""
        if proto == "s":
            return
        # (the toy's token at rest is the holder's too: has_token)
        holder = -1
        for lp in loops:
            nd = lp.node
            if nd.pending or nd.in_cs or lp.uart.n or lp.uart.peer.n:
                return
            if nd.has_token:
                holder = nd.index
        if holder >= 0 and route:
            lp = loops[holder]
            lp._act(lp.node._give((holder - 1) % n), ticks_us())  # the token straight to the node behind
        elif holder >= 0:
            loops[holder - 1].request()  # index -1: the last node, behind node 0

    wrap = None
    for a in ARGV[7:]:
        if a.startswith("wrap:"):
            wrap = a[5:].split(",")

    def near_wrap():
        """The named counters of every node 3 below 2**30, once the ring is quiet."""
        if wrap is None:
            return
        busy = True
        while busy:
            busy = False
            for lp in loops:
                if lp.node.pending or lp.node.in_cs or lp.uart.n:
                    busy = True
                lp.step()
        v = protocol.SEQ_MASK - 2
        for lp in loops:
            for name in wrap:
                x = getattr(lp.node, name)
                if isinstance(x, int):
                    setattr(lp.node, name, v)
                else:
                    for j in range(len(x)):
                        x[j] = v
            if "seq" in wrap:
                # A token frame carries seq's low 16 bits, read against the decoder's
                # reference (frame.py): set as a claim round would have set it.
                lp._dst[frame.S_REF_SEQ] = v

    if len(ARGV) > 7 and ARGV[7] == "lock":
        # Find the first allocation in the steady state: MemoryError with a traceback.
        for _ in range(200):
            feed()
            for lp in loops:
                lp.step()
        near_wrap()
        import micropython
        micropython.heap_lock()
        try:
            for _ in range(hops):
                feed()
                for lp in loops:
                    lp.step()
        finally:
            micropython.heap_unlock()
        print("no allocation in", hops, "rounds")
        return
    if len(ARGV) > 7 and ARGV[7] == "total":
        # Every heap byte the rounds ask for, freed or not (micropython.mem_total: the unix port's
        # count of all bytes allocated): a bytecode call whose state is over 11 words takes it
        # from the heap and frees it on return, which neither gc.mem_alloc nor heap_lock shows
        # (locked, it falls back to the C stack) but which costs a gc_alloc and a gc_free on
        # every call (issue 41: 100 us a hop on a Pico for the log's batch line).
        import micropython
        # Warm up: 200 rounds after every board has sent a few frames and a clocked protocol's
        # millisecond clock has moved at every node (the wandering token takes 160 bytes once a
        # board, at the first token message it passes on or takes in, then none: a first time,
        # as a first pass's lookups are; what it allocates is not known).
        warm = 0
        while warm < 200:
            feed()
            for lp in loops:
                lp.step()
            if warm or not [lp for lp in loops if lp.tx_frames < 3 or (lp._clocked and not lp.node.now)]:
                warm += 1
        near_wrap()
        mem_total = micropython.mem_total
        total = 0
        for _ in range(hops):
            feed()  # (not counted: the bench's own bytecode function, whose call state is over 11 words)
            a = mem_total()
            for lp in loops:
                lp.step()
            total += mem_total() - a
        print("allocated", total, "bytes in", hops, "rounds")
        return
    # Warm up (first passes allocate: bound methods cached, dict lookups, ...).
    while frames() < 50:
        feed()
        for lp in loops:
            lp.step()
    near_wrap()
    tok_kind = getattr(sys.modules.get(protocol.module_name(proto)), "TOKEN", -1)  # its token message's kind
    gc.collect()
    if "gcon" not in ARGV: gc.disable()
    f0 = frames()
    a0 = gc.mem_alloc() if hasattr(gc, "mem_alloc") else 0
    busy_us = 0
    busy_steps = 0
    pass_us = 0  # passes that only passed one frame on (no critical section began or ended)
    passes = 0
    fwd_us = 0  # passes that passed a routed MSG frame on (the decoder's raw holds it: kind 7)
    fwds = 0
    deliver_us = 0  # passes that delivered a routed MSG frame to this node (to its protocol)
    delivers = 0
    # The token's hop by what it was, for `picoring bench chip`'s per-protocol ratio to S: a
    # pass that took a token frame in and sent one frame on (tok: S, Q, D), a request frame
    # passed on (req: Q, D), a token message delivered here and a token message sent on at
    # once (relay: BS's rotation, the wandering token's walk with skip=0).
    # *_send_us: the same passes up to their frame's send (MemUart.sent_at), the hop's own
    # time: what a pass does after the send (its log records, the chores it may run there) is
    # done while the frame is on the wire and the token elsewhere.
    tok_us = 0
    tok_send_us = 0
    toks = 0
    req_us = 0
    reqs = 0
    relay_us = 0
    relay_send_us = 0
    relays = 0
    fwd_send_us = 0
    t0 = ticks_us()
    rounds = 0
    while rounds < hops:  # about one frame per round (one board is busy each round)
        rounds += 1
        feed()
        i = 0
        while i < n:
            lp = loops[i]
            i += 1
            tx = lp.tx_frames
            cs = lp.node.in_cs or lp.node.pending
            t = ticks_us()
            if lp.step():
                dt = ticks_diff(ticks_us(), t)
                busy_us += dt
                busy_steps += 1
                raw = lp.dec.raw
                if lp.tx_frames <= tx + 1 and raw[0] == 7 and raw[4] == lp.node.index:
                    deliver_us += dt
                    delivers += 1
                if lp.tx_frames == tx + 1 and not cs and not (lp.node.in_cs or lp.node.pending):
                    pass_us += dt
                    passes += 1
                    ds = ticks_diff(lp.uart.sent_at, t)
                    raw = lp.dec.raw
                    if raw[0] == 7 and raw[4] != 255 and raw[4] != lp.node.index:
                        fwd_us += dt
                        fwd_send_us += ds
                        fwds += 1
                    elif raw[0] == 7 and raw[2] == tok_kind and raw[4] == lp.node.index:
                        relay_us += dt
                        relay_send_us += ds
                        relays += 1
                    elif raw[0] == 1:
                        tok_us += dt
                        tok_send_us += ds
                        toks += 1
                    elif raw[0] == 2:
                        req_us += dt
                        reqs += 1
    total_us = ticks_diff(ticks_us(), t0)
    a1 = gc.mem_alloc() if hasattr(gc, "mem_alloc") else 0
    gc.enable()
    sent = frames() - f0
    print(json.dumps({
        "impl": sys.implementation.name, "protocol": proto, "n": n, "frames": sent,
        "alloc_bytes": a1 - a0, "alloc_per_frame": (a1 - a0) / sent,
        "busy_us_per_frame": busy_us / sent, "total_us_per_frame": total_us / sent,
        "pass_us": pass_us / passes if passes else None, "passes": passes,
        "fwd_us": fwd_us / fwds if fwds else None, "fwd_send_us": fwd_send_us / fwds if fwds else None,
        "fwds": fwds,
        "deliver_us": deliver_us / delivers if delivers else None, "delivers": delivers,
        "tok_us": tok_us / toks if toks else None, "tok_send_us": tok_send_us / toks if toks else None,
        "toks": toks,
        "req_us": req_us / reqs if reqs else None, "reqs": reqs,
        "relay_us": relay_us / relays if relays else None,
        "relay_send_us": relay_send_us / relays if relays else None, "relays": relays,
        "host_lines": sum(h.lines for h in hosts), "host_bytes": sum(h.out_bytes for h in hosts),
        "rx_bad": sum(lp.dec.bad for lp in loops), "errors": sum(lp.node.errors for lp in loops),
        "dropped": sum(lp.log.dropped_total for lp in loops),
        "seqs": [lp.node.seq for lp in loops],  # entry numbers (after a wrap: small again)
    }))


main()
