# Chip time from a frame's last byte landing to the write of the frame passed on, for S's
# token hop and for a message routed through a node (the toy protocol's token, 0 -> 3 past
# node 1): docs/performance.md. The UART is a stand-in that lets one more byte land at each
# any() call, as a Pico's does at 1 Mbaud, so the node loop finishes each frame as it lands
# (NodeLoop._finish_frame). Its any() and readinto() are Python: the figures include them,
# and are for comparing hops and firmware versions, not a ring's turnaround
# (../shared/rp2040/bench measures that). Usage, from the project root:
#   ../shared/rp2040/exec tests/mp_turnaround_bench.py --upload firmware
# (Its UART and host stand-ins are its own: exec uploads firmware/ only, not tests/mp_links.py.)
import time
import protocol, node, frame

ticks_us = time.ticks_us


class Trickle:
    def __init__(self):
        self.buf = b""
        self.landed = 0
        self.t_last = 0
        self.t_write = 0

    def any(self):
        if self.landed < len(self.buf):
            self.landed += 1
            if self.landed == len(self.buf):
                self.t_last = ticks_us()
        return self.landed

    def readinto(self, b, n):
        m = min(n, self.landed)
        for i in range(m):
            b[i] = self.buf[i]
        self.buf = self.buf[m:]
        self.landed -= m
        return m

    def write(self, data):
        if not self.t_write:
            self.t_write = ticks_us()
        return len(data)


class Host:
    def read_byte(self):
        return -1

    def write(self, b):
        return len(b)


def measure(proto, n, make_frame, rounds=40):
    u = Trickle()
    lp = node.NodeLoop(protocol.make_node(proto, 1, n), u, Host(), ticks_us, time.ticks_diff)
    lp.node.fresh = False
    lp.node.sync_gate()
    enc = frame.Encoder()
    out = []
    for r in range(rounds):
        u.buf = bytes(make_frame(enc))
        u.landed = 1
        u.t_write = 0
        k = 0
        while not u.t_write and k < 50:
            lp.step()
            k += 1
        if r >= 5:
            out.append(time.ticks_diff(u.t_write, u.t_last))
    out.sort()
    return out[len(out) // 2], out[0], out[-1]


print("s token hop        median/min/max us", measure("s", 3, lambda e: e.token(0, 0, 7, 0)))
print("toy routed 0->3    median/min/max us", measure("toy", 4, lambda e: e.message(1, 0, 3, b"\x00" * 10)))
