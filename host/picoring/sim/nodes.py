"""The simulator's nodes: the firmware's protocol classes, their attributes in slots.

CPython (3.11 to 3.13) keeps an object's attributes in a compact table shared by the
instances of its class only while the class has at most 29 of them; from the 30th on,
every instance gets a dictionary of its own, and each attribute read or write in a
protocol's handler becomes a dictionary lookup. Every registered protocol has 30 or more
(protocol.Node alone has 30: the recovery fields and the message layer's), and a hop of
Q's token cost 318 ns with 30 attributes against 156 ns with 25 (`picoring bench sim`'s
regression after the protocol layer: see `sim_class`).

sim_class gives the simulator a subclass of a protocol's class that holds those
attributes in slots: the same code and the same values, read and written at the
compact table's speed. A name the class also has as a class attribute is left out (a
slot would hide the class's value while the instance has none), and anything a handler
adds later goes into the instance's dictionary as before, so a node behaves exactly as
the firmware's class does. The explorer keeps its own nodes (it reads node.__dict__).
"""

from ..firmware.protocol import load

_SLOTTED = {}  # the protocol's class -> its slotted subclass


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
        made = type(cls.__name__, (cls,), {"__slots__": slots, "__doc__": cls.__doc__,
                                           "__module__": cls.__module__})
        _SLOTTED[cls] = made
    return made


def make_nodes(protocol, n):
    """The ring's n nodes of a protocol for the simulator (sim_class)."""
    cls = sim_class(protocol, n)
    return [cls(i, n) for i in range(n)]
