# A virtual board's reading of its ring's clock (hal_unix.RingStoodStill), the file written here as
# the relay writes it ("STOOD WRITTEN LATE_AFTER", us: host/picoring/virtual/ringclock.py).
# argv: FIRMWARE, a scratch directory. Prints one JSON object: what the board counted as stood
# still (us) after each of five reads, the least the third should count, and whether the count
# read was current since the tick before the relay's write and since the one after it
# (current_since), at the second read and at the third (the relay overdue: current whatever the
# tick).
import json
import sys
import time

sys.path.insert(0, sys.argv[1])
import hal_unix

path = sys.argv[2] + "/ring-clock"


def relay_wrote(age_us, stood_us, due_us):
    """The relay's write age_us ago, when the ring had stood still stood_us since it started; its
    next was due due_us after it."""
    written = time.ticks_add(time.ticks_us(), -age_us)
    with open(path, "w") as f:
        f.write("%d %d %d" % (stood_us, written, time.ticks_add(written, due_us)))
    return written


stood = hal_unix.RingStoodStill(path)
counted = []
# 1. Read 110 ms into the relay's period (its next write not yet due): nothing stood still.
relay_wrote(110_000, 0, 10_000_000)
counted.append(stood())
# 2. The ring then stood still 200 ms, and the relay wrote it: all 200 count.
written = relay_wrote(5_000, 200_000, 10_000_000)
counted.append(stood())
current = [[stood.current_since(time.ticks_add(written, -1)), stood.current_since(time.ticks_add(written, 1))]]
# 3. The relay stands still itself: its last write 300 ms ago, due 125 ms after it.
written = relay_wrote(300_000, 200_000, 125_000)
counted.append(stood())
current.append([stood.current_since(time.ticks_add(written, -1)), stood.current_since(time.ticks_add(written, 1))])
# 4. The relay writes again: 400 s stood still in all, then 545 s (past 2**29 us: 536.9 s, where
# a Pico's ticks wrap, not this port's).
relay_wrote(0, 400_000_000, 10_000_000)
counted.append(stood())
relay_wrote(0, 545_000_000, 10_000_000)
counted.append(stood())
print(json.dumps({"counted_us": counted, "third_at_least_us": 200_000 + 300_000 - 125_000, "current": current}))
