# What an attribute lookup costs by how full the object's map is (docs/performance.md, "instance
# maps that are full"). MicroPython keeps an instance's attributes in a hash map that grows only
# when it is full (py/map.c: 29, 37, 47, 59, 73 ... slots); a name looked up through an instance
# that does not hold it (a method, a class constant) probes to the first empty slot first.
#   PATH=$PWD/.venv/bin:$PATH ../shared/rp2040/exec tests/mp_map_bench.py    (chip time)
# (the firmware's own objects, their maps and what a miss costs them: python tests/map_model.py)
import time

import micropython

MAP_SIZES = (0, 2, 4, 6, 8, 10, 12, 17, 23, 29, 37, 47, 59, 73, 97, 127, 167)  # py/map.c


def map_slots(k):
    """The slots of an instance map holding k attributes (grown from empty)."""
    for s in MAP_SIZES:
        if s >= k:
            return s


class Probe:
    K = 1


def with_attributes(k):
    o = Probe()
    for i in range(k):
        setattr(o, "attr%d" % i, i)
    return o


# Three loops alike but for what they read: an attribute named in the code is the lookup
# measured (getattr with a name would measure getattr).
@micropython.native
def read_class_constant(o, k):
    x = 0
    for _ in range(k):
        x = o.K
    return x


@micropython.native
def read_own(o, k):
    x = 0
    for _ in range(k):
        x = o.attr3
    return x


@micropython.native
def read_nothing(o, k):
    x = 0
    for _ in range(k):
        x = 1
    return x


def us_a_read(f, o, k, base):
    t0 = time.ticks_us()
    f(o, k)
    return (time.ticks_diff(time.ticks_us(), t0) - base) / k


def costs(k=500):
    for n in (28, 30, 32, 35, 36, 37, 38, 40, 44, 46, 47, 48, 52, 58, 59, 60):
        o = with_attributes(n)
        base = us_a_read(read_nothing, o, k, 0) * k
        print("attributes %2d (map of %2d): class constant through the instance %5.2f us, own attribute %5.2f us"
              % (n, map_slots(n), us_a_read(read_class_constant, o, k, base), us_a_read(read_own, o, k, base)))


costs()
