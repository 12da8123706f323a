# machine.I2C as the bus adafruit_bus_device's I2CDevice expects (CircuitPython's busio.I2C):
# try_lock/unlock, readfrom_into and writeto with start=/end=, writeto_then_readfrom.
#
# machine.I2C's methods take positional arguments only, on every port (extmod/machine_i2c.c:
# readfrom_into(addr, buf, stop), writeto(addr, buf, stop) -> the ACKs received); a keyword
# raises TypeError on a Pico. A part of a buffer goes as a memoryview, made only when the
# part is not the whole buffer. The same class runs over a virtual board's stand-in
# (hal_unix.FramImageI2C), which takes the same positional arguments.


class I2CBus:
    def __init__(self, i2c):
        self.i2c = i2c
        self._locked = False

    def try_lock(self):
        # One program per board and no threads: the lock only keeps I2CDevice's contract
        # (one `with` block at a time). Other boards on the bus are not locked out by it:
        # the I2C hardware's arbitration does that per transaction (docs/fram.md).
        if self._locked:
            return False
        self._locked = True
        return True

    def unlock(self):
        self._locked = False

    def readfrom_into(self, address, buffer, *, start=0, end=None):
        self.i2c.readfrom_into(address, _part(buffer, start, end), True)

    def writeto(self, address, buffer, *, start=0, end=None):
        part = _part(buffer, start, end)
        if not len(part):
            # The rp2 port bit-bangs a zero-length write (its I2C block cannot send one),
            # without arbitration: on a bus shared with other masters it can corrupt their
            # transfer. I2CDevice's probe does this: create it with probe=False.
            raise ValueError("zero-length I2C write: not on a shared bus (I2CDevice(..., probe=False))")
        return self.i2c.writeto(address, part, True)

    def writeto_then_readfrom(self, address, buffer_out, buffer_in, *, out_start=0, out_end=None, in_start=0,
                              in_end=None):
        # The write ends without a STOP and the read follows after a repeated START: the
        # bus stays this master's in between, so no other board's transfer comes between
        # setting the FRAM's address and reading from it.
        self.i2c.writeto(address, _part(buffer_out, out_start, out_end), False)
        self.i2c.readfrom_into(address, _part(buffer_in, in_start, in_end), True)


def _part(buffer, start, end):
    n = len(buffer)
    if end is None:
        end = n
    if start == 0 and end == n:
        return buffer
    return memoryview(buffer)[start:end]
