# The shared resource the token guards on a ring of real boards (docs/fram.md): a 4-byte
# counter in one I2C FRAM (Fujitsu MB85RC256V, 32 KB, address 0x50, 2-byte memory address,
# no write delay) on one bus with every board, through adafruit_bus_device's I2CDevice
# over i2cbus.I2CBus. The node loop calls enter() as a critical section starts and leave()
# as it ends (node.NodeLoop's audit), and logs what they return.
#
# Read at entry, written at exit. The counter's read-modify-write spans the whole critical
# section, so any two critical sections that overlap in time lose an increment, however
# short the overlap. Each half is one I2C transaction (the read: the memory address
# written, a repeated START, 4 bytes read; the write: address and 4 bytes): arbitration
# serialises transactions on the bus, never the pair, which is why the pair detects an
# overlap. hold_us (--cs-hold-us) waits after the read, the board doing nothing else, as
# a driver busy with its device: it widens the window where the critical section would
# otherwise end within microseconds (cs_us 0).
#
# An OSError (EIO: a NACK or lost arbitration; ETIMEDOUT: the bus held) is returned as
# -errno and logged by the node loop: reported, never retried. After a failed read
# nothing is written (the value is unknown), so that update is not made.

import time

try:
    from micropython import const
except ImportError:  # CPython

    def const(value):
        return value


ADDRESS = const(0x50)  # MB85RC256V with A2..A0 low (their internal pull-downs)
_EIO = const(5)
_MASK = const(0xFFFFFFFF)


def errno_of(e):
    """The errno of an OSError as a positive int (EIO when it carries none)."""
    code = e.args[0] if e.args else None
    return code if isinstance(code, int) and 0 < code < 0x10000 else _EIO


class FramCounter:
    def __init__(self, i2c, address=ADDRESS, cell=0, hold_us=0, sleep_us=None):
        from adafruit_bus_device.i2c_device import I2CDevice
        from i2cbus import I2CBus

        # probe=False: the probe is a zero-length write, which the rp2 port bit-bangs without
        # arbitration (i2cbus.I2CBus.writeto refuses it).
        self.device = I2CDevice(I2CBus(i2c), address, probe=False)
        self.address = address
        self.hold_us = hold_us
        self._sleep_us = sleep_us or getattr(time, "sleep_us", None) or (lambda us: time.sleep(us / 1e6))
        self._at = bytearray((cell >> 8 & 0x7F, cell & 0xFF))  # 15-bit memory address, big-endian
        self._in = bytearray(4)
        self._out = bytearray(6)
        self._out[0] = self._at[0]
        self._out[1] = self._at[1]
        self._read = -1  # the value this critical section read; -1: none (not in one, or the read failed)

    # -- the critical section's edges (node.NodeLoop) --

    def enter(self):
        """Read the counter; then hold. Returns the value, or -errno."""
        v = self.read()
        self._read = v
        if self.hold_us:
            self._sleep_us(self.hold_us)
        return v

    def leave(self):
        """Write what enter() read plus one. Returns the value written, -errno, or None when
        nothing was written (enter's read failed)."""
        v = self._read
        self._read = -1
        if v < 0:
            return None
        return self.write((v + 1) & _MASK)

    # -- one transaction each (also the host's !res command) --

    def read(self):
        """The counter (a value >= 0), or -errno."""
        b = self._in
        try:
            with self.device as d:
                d.write_then_readinto(self._at, b)
        except OSError as e:
            return -errno_of(e)
        return (b[0] << 24) | (b[1] << 16) | (b[2] << 8) | b[3]

    def write(self, v):
        """Set the counter to v; returns v, or -errno."""
        o = self._out
        o[2] = (v >> 24) & 0xFF
        o[3] = (v >> 16) & 0xFF
        o[4] = (v >> 8) & 0xFF
        o[5] = v & 0xFF
        try:
            with self.device as d:
                d.write(o)
        except OSError as e:
            return -errno_of(e)
        return v
