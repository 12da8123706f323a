# Board hardware behind one interface, chosen by the config:
#   "virtual" in the config -> hal_unix (MicroPython unix port, ptys)
#   otherwise               -> hal_rp2 (a Pico: machine.UART, USB CDC, LED pin)
#
# open_board(cfg) returns a Board with:
#   uart.readinto(buf) -> bytes read now (0 when none; never blocks), or, where
#     uart.any() exists (a Pico's machine.UART), readinto(buf, n) of n <= any() bytes
#   uart.write(buf)
#   host.read_byte()   -> 0..255, -1 when nothing is waiting, -2 when the host is gone
#   host.write(buf)
#   led                -> object with value(0/1), or None
#   ticks_us, ticks_diff: the clock (time.ticks_us / time.ticks_diff)
#   idle               -> callable or None: wait briefly for input when idle
#   i2c                -> the I2C bus of the shared resource (machine.I2C on a Pico, a stand-in
#                         on a virtual board), or None when the config names no resource;
#   i2c_clocks         -> the clocks sent at boot to free that bus (hal_rp2.recover_bus)
# Nothing here touches hardware at import time; the node loop gets these passed in.

import sys
import select
import time

try:
    import micropython
except ImportError:  # CPython

    class micropython:
        """@micropython.native is the compiler's on MicroPython; a no-op here."""

        @staticmethod
        def native(f):
            return f



class Board:
    def __init__(self, uart, host, led=None, name="", idle=None):
        self.uart = uart
        self.i2c = None
        self.i2c_clocks = 0
        self.host = host
        self.led = led
        self.name = name
        self.idle = idle  # called by the node loop when it has nothing to do, or None
        self.ticks_us = time.ticks_us
        self.ticks_diff = time.ticks_diff


class StreamHost:
    """The host link over a pair of byte streams (stdin/stdout of the board).

    Polls before each 1-byte read: a stream's readinto() blocks until the whole
    buffer is filled, and commands are short and rare, so byte-at-a-time is fine.
    """

    def __init__(self, rx, tx):
        self._rx = rx
        self._tx = tx
        self._b = bytearray(1)
        self._poll = select.poll()
        self._poll.register(rx, select.POLLIN)
        self.write = tx.write

    @micropython.native
    def read_byte(self):
        # ipoll(0) instead of poll(0): poll() allocates its result list every call.
        for _obj, ev in self._poll.ipoll(0):
            if ev & select.POLLIN:
                try:
                    n = self._rx.readinto(self._b)
                except OSError:
                    return -2  # the pty's other end closed (EIO)
                if not n:
                    return -2  # end of file: the host is gone
                return self._b[0]
            if ev & (select.POLLHUP | select.POLLERR):
                return -2
        return -1


class LossyUart:
    """A UART that loses received frames at random: the fault drop_rx (docs/faults.md), for
    boards whose wires lose nothing on purpose (Picos, emulated or real). A frame is 00 | COBS
    | 00 (docs/frames.md): a lost one's bytes vanish and its 00 delimiters stay, so the board
    sees an idle line, as on a virtual ring's drop=P, and the next frame's link sequence byte
    shows the gap. Each frame is lost with probability ppm / 10**6, seeded; the node loop reads
    through readinto as from the UART (any() and write are the UART's own). A pass through
    Python for every byte received: the ring runs slower with it.

    Nothing is lost until arm(): the node loop arms it at the host's "zero", the start of a
    run, as a virtual ring arms its wires' faults once the ring has formed. A loss during the
    ring's forming would make the run start with no token or two (the starter's claim lost, a
    token generated meanwhile), where the checker counts from one."""

    def __init__(self, uart, ppm, seed):
        import protocol

        self._uart = uart
        self._rand = protocol.rand_next
        self._x = seed % (protocol.RAND_M - 1) + 1
        self.ppm = ppm  # a frame is lost when the draw's last six digits are below this
        self._in = 0  # 0: between frames, 1: in a kept frame, 2: in a lost one
        self.lost = 0
        self.armed = False
        any_ = getattr(uart, "any", None)
        if any_ is not None:
            self.any = any_
        self.write = uart.write

    def arm(self):
        """Lose frames from the next one on (a frame begun before is kept whole)."""
        self.armed = True

    def readinto(self, buf, n=-1):
        got = self._uart.readinto(buf) if n < 0 else self._uart.readinto(buf, n)
        if not got:
            return got
        if not self.armed:  # kept; where the last frame stands is all that is noted
            self._in = 0 if buf[got - 1] == 0 else 1
            return got
        state = self._in
        kept = 0
        for i in range(got):
            b = buf[i]
            if b == 0:
                state = 0
            elif state == 0:  # a frame's first byte: is it lost?
                self._x = x = self._rand(self._x)
                if x % 1000000 < self.ppm:
                    state = 2
                    self.lost += 1
                else:
                    state = 1
            if state != 2:
                buf[kept] = b
                kept += 1
        self._in = state
        return kept


def open_board(cfg):
    if "virtual" in cfg:
        import hal_unix

        return hal_unix.open_board(cfg)
    import hal_rp2

    return hal_rp2.open_board(cfg)


def stdio_streams():
    """sys.stdin/stdout as byte streams (.buffer where the port has it)."""
    rx = getattr(sys.stdin, "buffer", sys.stdin)
    tx = getattr(sys.stdout, "buffer", sys.stdout)
    return rx, tx
