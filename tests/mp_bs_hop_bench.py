# Where BS's rotation hop goes against S's token hop (docs/performance.md): one node loop's
# step() fed one whole frame a pass by a stand-in UART (BS's idle token message for it from the
# node before it, or S's token frame), pieces replaced by stubs one at a time, and the pieces
# alone; chip microseconds a pass or a call, less a loop that only feeds the frame (or calls an
# empty function). On an emulated Pico, from the project root, DIR a folder with node.py,
# protocol.py, frame.py, hostlink.py, graphs.py, proto_bs.py and proto_s.py of the firmware:
#   ../shared/rp2040/exec tests/mp_bs_hop_bench.py --upload DIR
import gc
import time

import micropython

import frame
import node
import protocol

K = 150


def per(f, k=K):
    gc.collect()
    t0 = time.ticks_us()
    for _ in range(k):
        f()
    return time.ticks_diff(time.ticks_us(), t0) / k


@micropython.viper
def copy(src, n: int, dst):
    s = ptr8(src)
    d = ptr8(dst)
    i = 0
    while i < n:
        d[i] = s[i]
        i += 1


class Uart:
    def __init__(self):
        self.buf = bytearray(64)
        self.n = 0

    def any(self):
        return self.n

    def readinto(self, buf, n):
        copy(self.buf, n, buf)
        self.n = 0
        return n

    def write(self, data):
        return len(data)


class Host:
    def read_byte(self):
        return -1

    def write(self, data):
        pass


def ring(spec):
    loops = [node.NodeLoop(protocol.make_node(spec, i, 3), Uart(), Host(), time.ticks_us, time.ticks_diff,
                           log_capacity=64) for i in range(3)]
    for lp in loops:
        lp.start()
    return loops


bl = ring("bs")
a = bl[0].node
a.out_kind = 1
a.out_len = 11
a.out_dst = 1
for i in range(11):
    a.out[i] = 0
a.out[0] = 77  # seq 77, epoch 0, R 5, flags 0 (no served entry)
a.out[6] = 5
blseq = bl[0]._eraw[256]
bn = frame.message(bl[0]._eraw, bl[0]._mout, a, bl[0]._mfields)
bframe = bytes(bl[0]._mout[:bn])
sl = ring("s")
sl[0].node.seq = 77
slseq = sl[0]._eraw[256]
sn = frame.token(sl[0]._eraw, sl[0]._tout, sl[0].node)
sframe = bytes(sl[0]._tout[:sn])
B = bl[1]
S = sl[1]


def feeder(lp, data, n, lseq):
    def feed():
        u = lp.uart
        copy(data, n, u.buf)
        u.n = n
        lp._dst[26] = 0x100 | lseq  # frame.S_NEXT_LSEQ: the frame is the one expected
        lp._lst[1] = 0  # hostlink.L_PENDING: the log never fills
        lp._countdown = 100  # no chores in these passes
        lp.node.has_token = False

    def step():
        feed()
        lp.step()

    return feed, step


feed_b, step_b = feeder(B, bframe, bn, blseq)
feed_s, step_s = feeder(S, sframe, sn, slseq)
step_b()
assert B.tx_frames == 1 and not B.node.has_token, "BS's token should have been passed on"
step_s()
assert S.tx_frames == 1, "S's token should have been passed on"
fb = per(feed_b)
fs = per(feed_s)
print("frames: BS %d bytes, S %d" % (bn, sn))
print("step, S's token hop            %6.1f" % (per(step_s) - fs))
print("step, BS's rotation hop        %6.1f" % (per(step_b) - fb))


@micropython.viper
def stub_on_message(self, kind, src, buf) -> int:
    self.out_kind = 1
    self.out_dst = 2
    self.out_len = 11
    return 128  # protocol.SEND_MSG


hot = B._fwd
B._fwd = hot[:7] + (stub_on_message,) + hot[8:]
print("step, BS, handler a stub       %6.1f" % (per(step_b) - fb))
B._fwd = hot


def nothing4(a, b, c, d):
    return 0


def nothing5(a, b, c, d, e):
    return 0


bnode = B.node
snode = S.node
raw = B._draw
on_message = node._handler(bnode, "on_message")
on_token = node._handler(snode, "on_token")


def bs_alone():
    bnode.has_token = False
    on_message(bnode, 1, 0, raw)


def bs_none():
    bnode.has_token = False
    nothing4(bnode, 1, 0, raw)


print("BS's on_message alone          %6.1f" % (per(bs_alone) - per(bs_none)))
print("S's on_token alone             %6.1f" % (per(lambda: on_token(snode, 0, 0, 77, 0))
                                                - per(lambda: nothing5(snode, 0, 0, 77, 0))))
