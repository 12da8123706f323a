"""The simulator's nodes: the firmware's protocol classes, their attributes in slots.

CPython (3.11 to 3.13) keeps an object's attributes in a compact table shared by the
instances of its class only while the class has at most 29 of them; from the 30th on,
every instance gets a dictionary of its own, and each attribute read or write in a
protocol's handler becomes a dictionary lookup. Every registered protocol has 30 or more
(protocol.Node alone has 32: the recovery fields and the message layer's), and a hop of
Q's token cost 318 ns with 30 attributes against 156 ns with 25 (`picoring bench sim`'s
regression after the protocol layer: see `sim_class`).

sim_class gives the simulator a subclass of a protocol's class that holds those
attributes in slots: the same code and the same values, read and written at the
compact table's speed. A name the class also has as a class attribute is left out (a
slot would hide the class's value while the instance has none), and anything a handler
adds later goes into the instance's dictionary as before, so a node behaves exactly as
the firmware's class does. The explorer keeps its own nodes (it reads node.__dict__).

A class constant that a frame handler reads (D's `active_budget`) is a slot too, given
the class's value by make_nodes, which makes every ring the simulator runs (an __init__ of
the subclass doing it made building a D ring 30% slower): CPython 3.11 does not
specialize reading a class attribute through an instance, so each such read took the
generic lookup (about 200 of the 2,300 instructions of D's active token hop, callgrind).
"""

import sys

from ..firmware.protocol import load

_SLOTTED = {}  # the protocol's class -> its slotted subclass
# The handlers the simulator calls for each frame: the class constants they read become slots.
FRAME_HANDLERS = ("on_token", "on_request", "on_message")
_CONSTANT_TYPES = (bool, int, float, str, bytes, type(None))


def sim_class(protocol, n):
    """The slotted subclass of a protocol's class (a name or a spec, protocol.load)."""
    cls = load(protocol)
    made = _SLOTTED.get(cls)
    if made is None:
        probe = cls(0, n)
        class_names = set()
        for c in cls.__mro__:
            class_names.update(vars(c))
        slots = tuple(k for k in vars(probe) if k not in class_names)
        constants = _handler_constants(cls, set(vars(probe)))
        made = type(cls.__name__, (cls,), {"__slots__": slots + tuple(name for name, _ in constants),
                                           "__doc__": cls.__doc__, "__module__": cls.__module__})
        made.handler_constants = constants  # (make_nodes gives each node their values)
        _SLOTTED[cls] = made
    return made


def _handler_constants(cls, instance_names):
    """(name, value) of the class constants (immutable scalars, never set on an instance) that
    the frame handlers read."""
    read = set()
    for handler in FRAME_HANDLERS:
        code = getattr(getattr(cls, handler, None), "__code__", None)
        if code is not None:
            read.update(code.co_names)
    found = []
    for name in sorted(read - instance_names):  # (co_names also holds the globals a handler reads)
        if any(name in vars(c) for c in cls.__mro__) and not name.startswith("__"):
            value = getattr(cls, name)
            if isinstance(value, _CONSTANT_TYPES):
                found.append((name, value))
    return tuple(found)


SHARED = ("msg_sizes", "msg_least")  # one object for the whole ring (make_nodes)
BUILD_EVERY = 1 << 16  # nodes between two calls of make_nodes' progress
# simcore.run's lists of one entry per node (deferred, unserved), and the ring's own
PER_NODE_ENTRIES = 3


def make_nodes(protocol, n, progress=None):
    """The ring's n nodes of a protocol for the simulator (sim_class); progress(done, n), if
    given, every BUILD_EVERY nodes (a ring of 10 million takes about 20 s to build).

    The declared message sizes (msg_sizes and msg_least, equal bytes in every node of a
    protocol) are one object each for the whole ring: 112 bytes a node less, read exactly as
    before. So is the outgoing message's buffer of a protocol that declares no message (S, Q,
    D: `out` is 0 bytes long, and no handler can write into it): the empty bytes, 64 bytes a
    node less, and a write into it fails as loudly as one past the end of an empty bytearray."""
    cls = sim_class(protocol, n)
    first = cls(0, n)
    sizes, least = first.msg_sizes, first.msg_least
    no_out = len(first.out) == 0
    constants = cls.handler_constants

    def node(i):
        made = cls(i, n)
        made.msg_sizes = sizes  # at once: the next node's own takes the memory just freed
        made.msg_least = least
        if no_out:
            made.out = b""
        for name, value in constants:
            setattr(made, name, value)
        return made

    nodes = []
    for start in range(0, n, BUILD_EVERY):
        nodes += [node(i) for i in range(start, min(n, start + BUILD_EVERY))]
        if progress is not None:
            progress(len(nodes), n)
    return nodes


def _alloc(size):
    return (size + 15) & ~15  # CPython's small-object allocator hands out multiples of 16 bytes


# Resident memory over the objects' own sizes: the allocator's pools and the growth of the
# ring's list. `picoring sim -n 10000000 -k 10` (D): 4.28 GB at most (/usr/bin/time -v), 428
# bytes a node, against 376 bytes of objects a node (4.68 GB, 475 and 424 before the empty
# message buffer was shared).
ALLOCATOR_OVERHEAD = 1.12


def node_bytes(protocol, n):
    """About how many bytes of memory one node of a ring of n costs in the simulator: the
    object, what it alone holds (a large index, its buffers), and its entries in the
    simulator's lists, times ALLOCATOR_OVERHEAD."""
    cls = sim_class(protocol, n)
    a, b = cls(n - 1, n), cls(n - 2, n)
    total = _alloc(sys.getsizeof(a)) + 8 * PER_NODE_ENTRIES
    for name in cls.__slots__:
        v = getattr(a, name, None)
        if name in SHARED or v is None or isinstance(v, bool) or v is getattr(b, name, None):
            continue  # shared by the ring's nodes (make_nodes), or one object for all
        if name == "out" and not v:
            continue  # the empty bytes (make_nodes)
        if isinstance(v, int) and -5 <= v <= 256:
            continue  # CPython's small ints exist once
        total += _alloc(sys.getsizeof(v))
    return int(total * ALLOCATOR_OVERHEAD)
