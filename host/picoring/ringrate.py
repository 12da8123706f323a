"""How fast a ring's boards count their time against this machine's wall clock: the rate RingRun's
stall rule runs at (ring/driver.py). Above the folders: it asks the emulated and the virtual ring,
which the ring path itself must not know."""

from .emulated.supervisor import chip_rate_for_ports
from .virtual.ringclock import ring_pace_for_ports


def clock_rate_for_ports(ports):
    """The ring's own count of its boards' time, for RingRun's clock_rate: an emulated ring's chip
    time (emulated.supervisor.chip_rate_for_ports), a virtual ring's clock less what stood still
    (virtual.ringclock.ring_pace_for_ports); None for real boards (their clocks keep time). ports:
    paths or URLs, or ports.Targets (as ttystall.for_ports takes them)."""
    ports = [getattr(p, "port", p) for p in ports]
    return chip_rate_for_ports(ports) or ring_pace_for_ports(ports)
