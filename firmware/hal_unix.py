# Virtual board (MicroPython unix port). The UART is named by the config:
# "virtual": {"uart": [3, 4]}: two inherited fds, RX (non-blocking) and TX, the
# pipes of a virtual ring (host/picoring/virtual/board.py), whose relay moves the
# bytes between boards; or "virtual": {"uart": "/dev/ttyUSB0"}: a serial device
# (or pty) path, TX and RX. The USB serial is this process's stdin/stdout (a pty
# made by the virtual ring, or pipes).

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


class PipeUart:
    """RX and TX on two fds this process inherited. The RX fd is non-blocking (its
    owner made it so): readinto() returns what is there, None when nothing is. The
    fds belong to the process, as a board's pins do: close() leaves them open."""

    def __init__(self, rx_fd, tx_fd):
        self._rx = open(rx_fd, "rb")
        self._tx = open(tx_fd, "wb")
        self.readinto = self._rx.readinto
        self.write = self._tx.write
        self.fileno = self._rx.fileno

    def close(self):
        pass


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
    u = cfg["virtual"]["uart"]  # checked by main.load_config
    uart = PtyUart(u) if isinstance(u, str) else PipeUart(u[0], u[1])
    rx, tx = hal.stdio_streams()
    return hal.Board(uart, hal.StreamHost(rx, tx), None, "unix", Idle(uart, rx))
