# A stand-in for MicroPython's rp2 `machine` module, run under the unix port:
# records every call hal_rp2 makes, and checks pins the way ports/rp2/machine_uart.c
# does (TX pin % 4 == 0, RX pin % 4 == 1, on the UART's own bank), so a wrong pin in
# a board file or a typo in hal_rp2 fails here instead of on a Pico.

calls = []


class Pin:
    IN = 0
    OUT = 1

    def __init__(self, id, mode=-1):
        if not (isinstance(id, int) and 0 <= id <= 29) and id != "LED":
            raise ValueError("invalid pin")
        self.id = id
        self.mode = mode
        self.v = 0
        calls.append(("Pin", id, mode))

    def value(self, v=None):
        if v is None:
            return self.v
        self.v = v
        calls.append(("Pin.value", self.id, v))

    def __repr__(self):
        return "Pin(%r)" % (self.id,)


def _bank(pin):
    return ((pin + 4) & 8) >> 3


class UART:
    def __init__(self, id, baudrate=115200, tx=None, rx=None, rxbuf=256, txbuf=256, timeout=-1, **kw):
        if id not in (0, 1):
            raise ValueError("UART(%d) doesn't exist" % id)
        if tx is not None and not (tx.id & 3 == 0 and _bank(tx.id) == id):
            raise ValueError("bad TX pin")
        if rx is not None and not (rx.id & 3 == 1 and _bank(rx.id) == id):
            raise ValueError("bad RX pin")
        if kw:
            raise TypeError("unexpected keyword argument %r" % list(kw)[0])
        self.rx_pending = bytearray()
        self.written = bytearray()
        calls.append(("UART", id, baudrate, tx.id, rx.id, rxbuf, txbuf, timeout))

    def any(self):
        return len(self.rx_pending)

    def readinto(self, buf, n=None):
        n = len(buf) if n is None else n
        n = min(n, len(self.rx_pending))
        buf[:n] = self.rx_pending[:n]
        self.rx_pending = self.rx_pending[n:]
        calls.append(("UART.readinto", n))
        return n

    def write(self, data):
        self.written += data
        calls.append(("UART.write", bytes(data)))
        return len(data)
