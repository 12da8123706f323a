# A virtual board's clocked node loop (the wandering token) whose process stands still inside its
# passes, after the pass's UART read, as a SIGSTOP under a loaded host can leave it: its node.now
# must leave every stall out, wherever in the pass it falls. Wired as a virtual board is
# (hal_unix.open_board); the ring's clock file is never written (the relay saw nothing).
# argv: FIRMWARE, a scratch directory, the stall in ms, the number of stalls.
# Prints one JSON object: wall and node.now ms over the run, and the stalls.
import json
import sys
import time

sys.path.insert(0, sys.argv[1])
import hal_unix
import node
import protocol


class Host:  # the host link: quiet
    def read_byte(self):
        return -1

    def write(self, data):
        pass


class StallAfterRead:
    """The board's UART, whose readinto stands still `stall_ms` after reading when asked to."""

    def __init__(self, uart):
        self._uart = uart
        self.write = uart.write
        self.stall_ms = 0

    def readinto(self, buf):
        n = self._uart.readinto(buf)
        if self.stall_ms:
            time.sleep_ms(self.stall_ms)
            self.stall_ms = 0
        return n


stall_ms, stalls = int(sys.argv[3]), int(sys.argv[4])
quiet = open("/dev/null", "rb")
sink = open("/dev/null", "wb")
board = hal_unix.open_board({"virtual": {"uart": [quiet.fileno(), sink.fileno()],
                                         "stood_still": sys.argv[2] + "/ring-clock"}})
uart = StallAfterRead(board.uart)
loop = node.NodeLoop(protocol.make_node("wt:skip=2,op=20,seed=2", 1, 3), uart, Host(), board.ticks_us,
                     board.ticks_diff, ring_stood_still=board.ring_stood_still)
loop.start()
t0 = time.ticks_ms()
passes = 0
# Every 29th pass stands still: 29 is prime to the loop's housekeeping period (8 passes), so the
# stalls fall in every phase of it, the passes whose housekeeping ticks node.now among them.
while passes < 29 * stalls + 20:
    passes += 1
    if passes % 29 == 0:
        uart.stall_ms = stall_ms
    loop.step()
    time.sleep_us(200)
print(json.dumps({"wall_ms": time.ticks_diff(time.ticks_ms(), t0), "now_ms": loop.node.now,
                  "stalled_ms": stall_ms * stalls}))
