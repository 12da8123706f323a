# Virtual board (MicroPython unix port). The UART is one pty slave path from the
# config ("virtual": {"uart": "/dev/pts/N"}): TX bytes are written to it, RX bytes
# read from it; a host-side relay moves them between boards. The USB serial is
# this process's stdin/stdout (a pty made by the virtual ring, or pipes).

import select
import termios

import hal

# termios.tcgetattr()[6] indexes on Linux.
_VTIME = 5
_VMIN = 6


class PtyUart:
    """A pty slave in raw mode with VMIN=0, VTIME=0: read() returns what is there
    (0 bytes when nothing is), so readinto(buf) never blocks and needs no poll.
    Tested: a plain blocking open() + readinto(buf) waits until buf is full."""

    def __init__(self, path):
        self.path = path
        self._f = open(path, "r+b")
        fd = self._f.fileno()
        termios.setraw(fd)
        attr = termios.tcgetattr(fd)
        attr[6][_VMIN] = 0
        attr[6][_VTIME] = 0
        termios.tcsetattr(fd, termios.TCSANOW, attr)
        self.readinto = self._f.readinto  # returns 0 or None when nothing is there
        self.write = self._f.write
        self.fileno = self._f.fileno

    def close(self):
        self._f.close()


class Idle:
    """Sleep in poll() until the UART or the host link has input, at most 1 ms.

    A Pico has a core of its own to spin on; a virtual board shares the host's
    few cores with its neighbours and the wire relay, and spinning there cost
    about a fifth of a core per idle board. Input ends the wait at once, so
    frames see no added delay; only a running critical-section timer does
    (1 ms resolution)."""

    def __init__(self, uart, rx):
        self._poll = select.poll()
        self._poll.register(uart.fileno(), select.POLLIN)
        self._poll.register(rx, select.POLLIN)

    def __call__(self):
        for _ in self._poll.ipoll(1):  # ipoll: no result list allocated
            break


def open_board(cfg):
    v = cfg["virtual"]
    if not isinstance(v, dict) or not isinstance(v.get("uart"), str):
        raise ValueError('"virtual" must be {"uart": "/dev/pts/N"}')
    uart = PtyUart(v["uart"])
    rx, tx = hal.stdio_streams()
    return hal.Board(uart, hal.StreamHost(rx, tx), None, "unix", Idle(uart, rx))
