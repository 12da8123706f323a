# Where the wandering token's walk hop goes against S's token hop (docs/performance.md, "The
# wandering token's walk hop"): one node loop's step() fed one whole frame a pass by a stand-in
# UART (a token message for it from the node before it, or S's token frame), pieces replaced by
# stubs one at a time, and the pieces called alone; chip microseconds a pass or a call, less a loop
# that only feeds the frame (or calls an empty function). On an emulated Pico, from the project
# root, DIR a folder with node.py, protocol.py, frame.py, hostlink.py, graphs.py, proto_wt.py and
# proto_s.py of the firmware to measure:
#   ../shared/rp2040/exec tests/mp_walk_hop_bench.py --upload DIR
# (runs on any MicroPython; the unix port's figures are not a Pico's).
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
    """A frame handed over whole at each pass; what is written goes nowhere."""

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


# WT (skip=0): node 0's token message to node 1; S: node 0's token frame to node 1.
wl = ring("wt:skip=0")
a = wl[0].node
a.out_kind = 0  # WT sets these once; main set them at each send
a.out_len = 12
a.out_dst = 1
a.out[0] = 77  # seq 77, epoch 0, ts 5, generator 0
a.out[6] = 5
wlseq = wl[0]._eraw[256]
wn = frame.message(wl[0]._eraw, wl[0]._mout, a, wl[0]._mfields)
wframe = bytes(wl[0]._mout[:wn])
sl = ring("s")
sl[0].node.seq = 77
slseq = sl[0]._eraw[256]
sn = frame.token(sl[0]._eraw, sl[0]._tout, sl[0].node)
sframe = bytes(sl[0]._tout[:sn])
W = wl[1]
S = sl[1]


def feeder(lp, data, n, lseq):
    def feed():
        u = lp.uart
        copy(data, n, u.buf)
        u.n = n
        lp._dst[26] = 0x100 | lseq  # frame.S_NEXT_LSEQ: the frame is the one expected
        lp._lst[1] = 0  # hostlink.L_PENDING: the log never fills
        lp._countdown = 100  # no chores in these passes (measured apart below)

    def step():
        feed()
        lp.step()

    return feed, step


feed_w, step_w = feeder(W, wframe, wn, wlseq)
feed_s, step_s = feeder(S, sframe, sn, slseq)
step_w()
assert W.tx_frames == 1 and not W.node.has_token, "the walk's token should have been passed on"
step_s()
assert S.tx_frames == 1, "S's token should have been passed on"
bw = per(feed_w)
bs = per(feed_s)
print("frames: WT %d bytes, S %d" % (wn, sn))
print("step, S's token hop            %6.1f" % (per(step_s) - bs))
print("step, WT's walk hop            %6.1f" % (per(step_w) - bw))
W._clocked = False
print("step, WT, no clock             %6.1f" % (per(step_w) - bw))
W._clocked = True


@micropython.viper
def stub_on_message(self, kind, src, buf) -> int:
    self.out_kind = 0
    self.out_dst = 2
    self.out_len = 12
    return 128  # protocol.SEND_MSG


hot = W._fwd
W._fwd = hot[:7] + (stub_on_message,) + hot[8:]
print("step, WT, handler a stub       %6.1f" % (per(step_w) - bw))
W._fwd = hot


@micropython.viper
def stub_encode(raw, out, sender, fields) -> int:
    return 22


mhot = W._mhot  # (_on_msg takes the encoder from NodeLoop._mhot)
W._mhot = mhot[:7] + (stub_encode,) + mhot[8:]
print("step, WT, encoder a stub       %6.1f" % (per(step_w) - bw))
W._mhot = mhot
encode = node.encode_token


@micropython.viper
def stub_token(raw, out, tok) -> int:
    return 12


node.encode_token = stub_token
print("step, S, encoder a stub        %6.1f" % (per(step_s) - bs))
node.encode_token = encode


def nothing0():
    return 0


def nothing3(a, b, c):
    return 0


def nothing4(a, b, c, d):
    return 0


def nothing5(a, b, c, d, e):
    return 0


wnode = W.node
snode = S.node
raw = W._draw
on_message = node._handler(wnode, "on_message")
on_token = node._handler(snode, "on_token")
fields = W._mfields
print("WT's on_message alone          %6.1f" % (per(lambda: on_message(wnode, 0, 0, raw))
                                                - per(lambda: nothing4(wnode, 0, 0, raw))))
print("S's on_token alone             %6.1f" % (per(lambda: on_token(snode, 0, 0, 77, 0))
                                                - per(lambda: nothing5(snode, 0, 0, 77, 0))))
print("frame.message (WT's) alone     %6.1f" % (per(lambda: frame.message(W._eraw, W._mout, wnode, fields))
                                                - per(lambda: nothing4(W._eraw, W._mout, wnode, fields))))
print("frame.token (S's) alone        %6.1f" % (per(lambda: frame.token(S._eraw, S._tout, snode))
                                                - per(lambda: nothing3(S._eraw, S._tout, snode))))
W._countdown = 0
S._countdown = 0
print("chores, WT's loop              %6.1f" % (per(lambda: W._housekeeping()) - per(lambda: nothing0())))
print("chores, S's loop               %6.1f" % (per(lambda: S._housekeeping()) - per(lambda: nothing0())))
