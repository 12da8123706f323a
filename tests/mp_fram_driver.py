# The FRAM resource's board code under MicroPython (tests/test_fram.py): the I2C adapter over a
# bus with machine.I2C's calling convention, adafruit_bus_device's I2CDevice over it (from the
# installed PyPI distribution, unchanged), and fram.FramCounter over the virtual boards'
# stand-in (hal_unix.FramImageI2C). Prints one JSON object. argv[1]: a 32 KB FRAM image.
import json
import sys

import fram
import hal_unix
import i2cbus

image = sys.argv[1]
out = {}


class PositionalI2C:
    """machine.I2C's convention: positional arguments only (a keyword raises TypeError, as the
    rp2 port's C methods do); it records each call."""

    def __init__(self):
        self.calls = []

    def writeto(self, *args):
        self.calls.append(["writeto", args[0], list(bytes(args[1])), args[2]])
        return len(args[1])

    def readfrom_into(self, *args):
        buf = args[1]
        for i in range(len(buf)):
            buf[i] = 0xA0 + i
        self.calls.append(["readfrom_into", args[0], len(buf), args[2]])


# 1. the adapter: slices as start/end, a write without STOP then a read, zero-length refused
bus = PositionalI2C()
a = i2cbus.I2CBus(bus)
out["lock"] = [a.try_lock(), a.try_lock()]
a.unlock()
out["relock"] = a.try_lock()
a.unlock()
buf = bytearray(b"\x00\x01\x02\x03\x04\x05")
a.writeto(0x50, buf, start=1, end=4)
a.writeto(0x50, buf)
into = bytearray(6)
a.readfrom_into(0x50, into, start=2, end=5)
out["into"] = list(into)
a.writeto_then_readfrom(0x50, buf, into, out_end=2, in_start=1, in_end=3)
try:
    a.writeto(0x50, buf, start=3, end=3)
    out["empty"] = "written"
except ValueError as e:
    out["empty"] = str(e)
out["calls"] = bus.calls

# 2. through adafruit_bus_device: I2CDevice(probe=False) makes no bus traffic of its own
bus = PositionalI2C()
counter = fram.FramCounter(bus, cell=0x1234)
out["counter_calls_at_init"] = len(bus.calls)
out["read_value"] = counter.read()
out["write_value"] = counter.write(0x01020304)
out["fram_calls"] = bus.calls

# 3. on the stand-in shared by two "boards": in turn no update is lost, overlapping one is
b1 = fram.FramCounter(hal_unix.FramImageI2C(image))
b2 = fram.FramCounter(hal_unix.FramImageI2C(image))
b1.write(0)
seq = []
for board in (b1, b2, b1):
    seq.append([board.enter(), board.leave()])
out["in_turn"] = seq + [b2.read()]
out["overlap"] = [b1.enter(), b2.enter(), b1.leave(), b2.leave(), b1.read()]

# 4. a device nobody answers: -errno, once (not retried), and no write after a failed read
stand_in = hal_unix.FramImageI2C(image)
absent = fram.FramCounter(stand_in, address=0x57)
out["absent"] = [absent.enter(), absent.leave(), absent.read(), absent.write(9)]
out["absent_transactions"] = stand_in.transactions
print(json.dumps(out))
