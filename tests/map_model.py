"""A model of MicroPython's instance attribute maps (py/map.c), to say what a lookup costs before
a board runs it (docs/performance.md, "instance maps that are full").

An instance keeps its attributes in a hash map with linear probing, grown (rehashed into the next
of SIZES) only when an insertion finds it full. A name's slot is its qstr hash modulo the map's
size; the hash is djb2 over its bytes, kept to MICROPY_QSTR_BYTES_IN_HASH bytes (1 on the rp2
port: RP2_HASH_MASK; 2 on the unix port, whose hash() of an interned string says it). A lookup the
map lookup cache does not serve probes from that slot: to the name (a hit), or to the first empty
slot (a miss: a method or a class constant read through the instance, looked up in the class
after). On the emulated Pico a miss cost 4.2 us plus 0.36 us a slot probed, within 0.4 us of
every case tests/mp_map_bench.py measures.

    python tests/map_model.py [PROTOCOL ...]   # each protocol's node and node loop: their maps,
                                               # and what each class name costs them as a miss
"""

SIZES = (0, 2, 4, 6, 8, 10, 12, 17, 23, 29, 37, 47, 59, 73, 97, 127, 167, 223, 293, 389)
RP2_HASH_MASK = 0xFF  # ports/rp2/mpconfigport.h: MICROPY_QSTR_BYTES_IN_HASH (1)
UNIX_HASH_MASK = 0xFFFF


def qstr_hash(name, mask=RP2_HASH_MASK):
    """py/qstr.c qstr_compute_hash: djb2 (h * 33 ^ byte), masked; never 0."""
    h = 5381
    for c in name.encode():
        h = (((h << 5) + h) ^ c) & 0xFFFFFFFF
    h &= mask
    return h or 1


class AttrMap:
    """An instance's member map, as py/map.c fills it: names in the order they were first set."""

    def __init__(self, names=(), mask=RP2_HASH_MASK):
        self.mask = mask
        self.table = []
        for name in names:
            self.add(name)

    def add(self, name):
        while True:
            size = len(self.table)
            if size:
                pos = start = qstr_hash(name, self.mask) % size
                while True:
                    if self.table[pos] is None or self.table[pos] == name:
                        self.table[pos] = name
                        return
                    pos = (pos + 1) % size
                    if pos == start:
                        break  # full: grown below, then added again
            self._grow()

    def _grow(self):
        old = self.table
        for size in SIZES:
            if size >= len(old) + 1:
                break
        self.table = [None] * size
        for name in old:  # mp_map_rehash: the old table's names, slot by slot
            if name is not None:
                self.add(name)

    def probes(self, name):
        """Slots a lookup of name looks at, the cache not serving it: up to the name's (a hit) or
        to the first empty one (a miss; every slot when the map is full)."""
        size = len(self.table)
        if not size:
            return 0
        pos = qstr_hash(name, self.mask) % size
        for k in range(1, size + 1):
            if self.table[pos] is None or self.table[pos] == name:
                return k
            pos = (pos + 1) % size
        return size


def miss_us(probes):
    """A miss's chip time (tests/mp_map_bench.py's fit): the lookups around it, and the probes."""
    return 4.2 + 0.36 * probes


def _class_names(cls):
    names = set()
    for c in cls.__mro__[:-1]:
        names.update(k for k in vars(c) if not k.startswith("__"))
    return names


def report(spec):
    """Lines on protocol spec's node and node loop (board 1 of a ring of three, started)."""
    import hot_names

    lp = hot_names.ring_of_loops(spec)[1]
    lines = []
    for what, obj in (("node loop", lp), ("node", lp.node)):
        held = list(vars(obj))
        m = AttrMap(held)
        misses = sorted(((m.probes(k), k) for k in _class_names(type(obj)) if k not in held), reverse=True)
        lines.append("%s %s: %d attributes in %d slots; a miss probes %d-%d slots (%.1f-%.1f us)"
                     % (spec, what, len(held), len(m.table), misses[-1][0], misses[0][0], miss_us(misses[-1][0]),
                        miss_us(misses[0][0])))
        lines.append("  slowest misses: " + ", ".join("%s %d" % (k, p) for p, k in misses[:8]))
        lines.append("  longest hits: " + ", ".join("%s %d" % (k, p) for p, k in
                                                    sorted(((m.probes(k), k) for k in held), reverse=True)[:8]))
    return lines


if __name__ == "__main__":
    import sys

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    import hot_names

    for spec in sys.argv[1:] or sorted(hot_names.protocol.REGISTRY):
        print("\n".join(report(spec)))
