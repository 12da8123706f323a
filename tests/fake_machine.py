# A stand-in for MicroPython's rp2 `machine` module, run under the unix port:
# records every call hal_rp2 makes, and checks pins the way ports/rp2/machine_uart.c
# does (TX pin % 4 == 0, RX pin % 4 == 1, on the UART's own bank), so a wrong pin in
# a board file or a typo in hal_rp2 fails here instead of on a Pico. The I2C bus of
# --resource fram: its two lines as pins read them (Lines, for hal_rp2.recover_bus) and
# machine.I2C with a FRAM at 0x50, its pins checked as ports/rp2/machine_i2c.c does.

calls = []


class Pin:
    IN = 0
    OUT = 1
    OPEN_DRAIN = 2
    PULL_UP = 1

    def __init__(self, id, mode=-1, pull=-1, value=None):
        if not (isinstance(id, int) and 0 <= id <= 29) and id != "LED":
            raise ValueError("invalid pin")
        self.id = id
        self.mode = mode
        self.v = 0
        calls.append(("Pin", id, mode))
        if mode == Pin.IN and id in (lines.sda, lines.scl):
            lines.drive(id, 1)  # an input lets go of the line
        if value is not None:
            self.value(value)

    def value(self, v=None):
        on_bus = self.id in (lines.sda, lines.scl)
        if v is None:
            return lines.level(self.id) if on_bus else self.v
        self.v = v
        if on_bus and self.mode == Pin.OPEN_DRAIN:
            lines.drive(self.id, v)
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


# -- I2C (--resource fram) --------------------------------------------------------------------

class Lines:
    """SDA and SCL as the pins read them: open drain, pulled up. A slave can be holding SDA low
    for `stuck` more SCL pulses (a transfer a reset cut short), or another master can be
    clocking SCL (`other_master`). Counts the clocks this board gives, and the START and STOP
    conditions it makes (SDA falling or rising while SCL is high)."""

    def __init__(self, sda=4, scl=5):
        self.sda, self.scl = sda, scl
        self.stuck = 0
        self.other_master = False
        self.low = set()  # the lines this board pulls low
        self.clocks = self.starts = self.stops = 0
        self._tick = 0

    def level(self, pin):
        if pin in self.low:
            return 0
        if pin == self.scl:
            if self.other_master:
                self._tick ^= 1
                return self._tick
            return 1
        return 0 if self.stuck else 1

    def drive(self, pin, v):
        sda_before, scl_high = self.level(self.sda), pin != self.scl and self.level(self.scl) == 1
        was_low = pin in self.low
        if v:
            self.low.discard(pin)
        else:
            self.low.add(pin)
        if pin == self.scl and v and was_low:
            self.clocks += 1
            if self.stuck:
                self.stuck -= 1  # the slave shifts out its next bit
        if pin == self.sda and scl_high:
            sda_after = self.level(self.sda)
            if sda_before and not sda_after:
                self.starts += 1
            elif sda_after and not sda_before:
                self.stops += 1


lines = Lines()
FRAM = bytearray(32768)  # the MB85RC256V at 0x50


class I2C:
    """machine.I2C of the rp2 port: SDA an even pin and SCL an odd one with bit 1 the bus id
    ("bad SDA pin" otherwise); transfers take positional arguments only (a keyword raises
    TypeError, as the C methods do); a FRAM answers at 0x50, any other address is EIO."""

    def __init__(self, id, freq=400000, scl=None, sda=None, timeout=50000):
        if id not in (0, 1):
            raise ValueError("I2C(%d) doesn't exist" % id)
        if scl is not None and not (scl.id & 1 == 1 and (scl.id & 2) >> 1 == id):
            raise ValueError("bad SCL pin")
        if sda is not None and not (sda.id & 1 == 0 and (sda.id & 2) >> 1 == id):
            raise ValueError("bad SDA pin")
        self._at = 0
        calls.append(("I2C", id, freq, scl.id, sda.id))

    def writeto(self, *args):
        addr, buf, stop = args[0], args[1], args[2] if len(args) > 2 else True
        calls.append(("I2C.writeto", addr, bytes(buf), stop))
        if addr != 0x50:
            raise OSError(5)
        if len(buf) >= 2:
            self._at = ((buf[0] << 8) | buf[1]) & 0x7FFF
        for b in bytes(buf)[2:]:
            FRAM[self._at] = b
            self._at = (self._at + 1) & 0x7FFF
        return len(buf)

    def readfrom_into(self, *args):
        addr, buf, stop = args[0], args[1], args[2] if len(args) > 2 else True
        calls.append(("I2C.readfrom_into", addr, len(buf), stop))
        if addr != 0x50:
            raise OSError(5)
        for i in range(len(buf)):
            buf[i] = FRAM[self._at]
            self._at = (self._at + 1) & 0x7FFF

