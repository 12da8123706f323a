"""Which board is where: USB serial ports, virtual boards, ring files.

A *target* is one board as the host reaches it: the port pyserial and mpremote
open (a device path or a pyserial URL), its USB serial number when it has one,
and for a virtual board its UART pty and a way to reset it. Boards can be named

  /dev/ttyACM0, /dev/serial/by-id/...   a device path
  id:E6614C311B2A8F26                   a USB serial number (as mpremote's `connect id:...`)
  E6614C311B2A8F26                      the same, bare, when no such path exists
  rfc2217://host:port, socket://h:p     a pyserial URL (remote serial port)
  virtual:I                             board I of the ring `picoring virtual up` started
  labgrid:PLACE[@HOST:PORT]             every serial port of a labgrid place (ring/labgrid.py)

A ring file (ring.json, written by `picoring discover`) lists the boards in ring
order by serial number (virtual boards by their USB path), so the order
survives re-plugging: /dev/ttyACM* names change, serial numbers do not.
"""

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

DEFAULT_RING_FILE = "ring.json"
RING_FORMAT = 1


class PortError(ValueError):
    """A board that cannot be found or named; the message says which and why."""


@dataclass
class Target:
    """One board as the host reaches it."""

    port: str                                  # what pyserial / mpremote open
    serial_number: Optional[str] = None        # USB iSerial (a Pico's flash unique id)
    vid_pid: Optional[str] = None              # "2e8a:0005"
    description: str = ""
    virtual_uart: Optional[list] = None        # a virtual board's UART: its fds [RX, TX] (virtual/board.py)
    resetter: Optional[Callable] = field(default=None, repr=False)  # resetter(run_main=True)
    spec: str = ""                             # what the user wrote
    virtual_i2c: Optional[str] = None          # a virtual board's ring's FRAM image (--resource fram)
    labgrid: Optional[dict] = None             # a labgrid place's port: {place, resource, name} (ring/labgrid.py)
    virtual_stood_still: Optional[str] = None  # a virtual board's ring's clock file (virtual/ringclock.py, RingStoodStill)

    @property
    def virtual(self):
        return self.virtual_uart is not None

    @property
    def key(self):
        """Identity in a ring file: the serial number, else the port."""
        return self.serial_number or self.port

    @property
    def is_url(self):
        return "://" in self.port

    def label(self):
        if self.serial_number:
            return "%s (serial %s)" % (self.port, self.serial_number)
        return self.port

    def reset(self, run_main=True):
        if self.resetter is None:
            raise PortError("%s: no reset line; restart it through its REPL (Ctrl-D)" % self.port)
        self.resetter(run_main=run_main)


# -- USB ---------------------------------------------------------------------

def comports():
    """pyserial's list of serial ports (a function so tests can stand in for it)."""
    from serial.tools import list_ports

    return list(list_ports.comports())


def _vid_pid(p):
    if isinstance(p.vid, int) and isinstance(p.pid, int):
        return "%04x:%04x" % (p.vid, p.pid)
    return None


def usb_target(p):
    desc = " ".join(x for x in (p.manufacturer, p.product) if x) or (p.description or "")
    return Target(p.device, p.serial_number or None, _vid_pid(p), desc, spec=p.device)


def micropython_vid_pids():
    from . import boarddefs

    return {"%04x:%04x" % vp for vp in boarddefs.micropython_ids()}


def list_usb(all_ports=False, ports=None):
    """USB serial ports that look like MicroPython boards (all_ports: every port with a USB id)."""
    ids = micropython_vid_pids()
    out = []
    for p in sorted(ports if ports is not None else comports(), key=lambda p: p.device):
        vp = _vid_pid(p)
        if vp is None:
            continue
        if all_ports or vp in ids:
            out.append(usb_target(p))
    return out


# -- who holds a port ----------------------------------------------------------

def port_holders(port, proc="/proc"):
    """[(pid, command line)] of the other processes that have `port` open, found through
    /proc/PID/fd links to the same device (best effort: Linux; processes of other users
    are not readable and not listed)."""
    try:
        target = os.stat(os.path.realpath(port))
    except OSError:
        return []
    me = os.getpid()
    out = []
    try:
        pids = [int(d) for d in os.listdir(proc) if d.isdigit()]
    except OSError:
        return []
    for pid in sorted(pids):
        if pid == me:
            continue
        fd_dir = os.path.join(proc, str(pid), "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if (st.st_rdev, st.st_ino, st.st_dev) == (target.st_rdev, target.st_ino, target.st_dev):
                out.append((pid, _cmdline(proc, pid)))
                break
    return out


def _cmdline(proc, pid):
    try:
        with open(os.path.join(proc, str(pid), "cmdline"), "rb") as f:
            args = f.read().split(b"\0")
    except OSError:
        return "?"
    return " ".join(a.decode(errors="replace") for a in args if a)[:120] or "?"


def busy_message(port):
    """What to say when `port` cannot be locked: who holds it, if we can see."""
    held = port_holders(port)
    if held:
        who = "; ".join("pid %d: %s" % (pid, cmd) for pid, cmd in held)
        return "port busy: %s is open in another program (%s); stop it and try again" % (port, who)
    return ("port busy: %s is open in another program (a terminal, mpremote, another picoring run?); "
            "close it and try again" % port)


def is_lock_error(error):
    """True if a pyserial error says the port's exclusive lock is held elsewhere."""
    text = str(error).lower()
    return "exclusive" in text or "resource temporarily unavailable" in text or "busy" in text


# -- virtual boards ----------------------------------------------------------

def virtual_targets(state_dir=None):
    """The boards of the ring `picoring virtual up` keeps in state_dir ([] if none is up)."""
    from ..virtual import supervisor

    state_dir = Path(state_dir) if state_dir else supervisor.default_state_dir()
    state = supervisor.read_state(state_dir)
    if state is None or not supervisor.is_up(state_dir):
        return []
    out = []
    for b in state["boards"]:
        def reset(run_main=True, _i=b["index"]):
            supervisor.reset(state_dir, _i, repl=not run_main)
        out.append(Target(b["usb"], None, None, "virtual board %d (pid %s, %s)" % (b["index"], b["pid"], state_dir),
                          b["uart"], reset, spec=b["usb"], virtual_i2c=str(fram_image(state_dir)),
                          virtual_stood_still=str(stood_still_file(state_dir))))
    return out


def stood_still_file(state_dir):
    """The clock file of the ring `picoring virtual up` keeps in state_dir, for its boards'
    recovery timeouts (virtual/ringclock.py, RingStoodStill)."""
    from ..virtual.ringclock import stood_still_file as in_workdir

    return in_workdir(state_dir)


def fram_image(state_dir):
    """The FRAM image of the ring `picoring virtual up` keeps in state_dir (the ring makes it
    when it starts: virtual/boards.py)."""
    from ..virtual.boards import FRAM_IMAGE

    return Path(state_dir) / FRAM_IMAGE


def ring_targets(ring):
    """Targets for the boards of an in-process VirtualRing, in ring order."""
    out = []
    for b in ring.boards:
        def reset(run_main=True, _i=b.index):
            ring.reset(_i, run_main=run_main)
        out.append(Target(b.usb_path, None, None, "virtual board %d" % b.index, b.uart, reset, spec=b.usb_path,
                          virtual_i2c=str(ring.fram_image), virtual_stood_still=str(ring.ring_clock_file)))
    return out


# -- resolving names ---------------------------------------------------------

def _same_file(a, b):
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return a == b


def resolve(spec, state_dir=None, ports=None, virtual=None):
    """The Target a user's port name means (see the module doc)."""
    spec = spec.strip()
    if not spec:
        raise PortError("empty port name")
    if "://" in spec:
        return Target(spec, spec=spec, description="pyserial URL")
    virtual = virtual_targets(state_dir) if virtual is None else virtual
    if spec.startswith("virtual:"):
        idx = spec[len("virtual:"):]
        if not idx.isdigit():
            raise PortError("%s: write virtual:I with I a board number" % spec)
        if not virtual:
            raise PortError("%s: no virtual ring is up (start one: picoring virtual up -n N)" % spec)
        if int(idx) >= len(virtual):
            raise PortError("%s: the virtual ring has boards 0..%d" % (spec, len(virtual) - 1))
        t = virtual[int(idx)]
        t.spec = spec
        return t
    ports = comports() if ports is None else ports
    if spec.startswith("id:") or not (spec.startswith("/") or os.path.exists(spec)):
        serial = spec[3:] if spec.startswith("id:") else spec
        for p in ports:
            if p.serial_number == serial:
                t = usb_target(p)
                t.spec = spec
                return t
        known = ", ".join("%s %s" % (p.serial_number, p.device) for p in ports if p.serial_number) or "none"
        if spec.startswith("id:"):
            raise PortError("no board with USB serial number %s is plugged in (serial numbers seen: %s)" % (serial, known))
        raise PortError("port not found: %s (not a device path, a pyserial URL, or the serial number of a plugged-in "
                        "board; serial numbers seen: %s)" % (spec, known))
    if not os.path.exists(spec):
        raise PortError("port not found: %s" % spec)
    for t in virtual:
        if _same_file(t.port, spec):
            t.spec = spec
            return t
    for p in ports:
        if _same_file(p.device, spec):
            t = usb_target(p)
            t.port = spec
            t.spec = spec
            return t
    return Target(spec, spec=spec)


def resolve_many(specs, state_dir=None, ports=None):
    """Targets for a list of names (labgrid:PLACE names all of a place's boards); the same
    board named twice is an error."""
    ports = comports() if ports is None else ports
    virtual = virtual_targets(state_dir)
    out, seen = [], {}
    for spec in specs:
        place = spec.strip().startswith("labgrid:")
        for t in _place_targets(spec, state_dir) if place else [resolve(spec, state_dir, ports, virtual)]:
            key = os.path.realpath(t.port) if not t.is_url else t.port
            for k in {key, t.serial_number} - {None}:
                if k in seen:
                    raise PortError("%s and %s are the same board: each board can have only one ring position"
                                    % (seen[k], spec))
                seen[k] = spec
            out.append(t)
    return out


def _place_targets(spec, state_dir, order=None, order_from=DEFAULT_RING_FILE):
    """The boards of a labgrid place (labgrid:PLACE) in ring order: `order` (a ring file's), else
    ./ring.json's if it is about this place, else by name. A board exported from this host for a
    virtual board of `picoring virtual up` (its pty) gets that board's UART and reset."""
    from . import labgrid  # imported only when a place is named: labgrid is an optional extra

    try:
        if order is None and os.path.exists(DEFAULT_RING_FILE):
            spec_order = labgrid.ring_file_order(read_ring_file(DEFAULT_RING_FILE), labgrid.parse_spec(spec)[0])
            order = spec_order[1] if spec_order else None
        found = labgrid.place_ports(spec, order, order_from)
    except labgrid.LabgridError as e:
        raise PortError(str(e)) from None
    local = any(p.on_this_host() for p in found)
    virtual = {os.path.realpath(t.port): t for t in virtual_targets(state_dir)} if local else {}
    out = []
    for p in found:
        t = Target(p.url, description=p.description, spec=p.spec, labgrid=p.entry)
        v = virtual.get(p.path) if p.on_this_host() else None
        if v is not None:
            t.virtual_uart, t.resetter, t.virtual_i2c = v.virtual_uart, v.resetter, v.virtual_i2c
            t.virtual_stood_still = v.virtual_stood_still
            t.description += ", " + v.description
        out.append(t)
    return out


def split_ports(text):
    return [p.strip() for p in (text or "").split(",") if p.strip()]


# -- ring files --------------------------------------------------------------

def write_ring_file(path, targets, extra=None):
    """Save the ring order: one entry per position, by serial number (or path for virtual/unknown)."""
    boards = []
    for pos, t in enumerate(targets):
        e = {"position": pos, "port": t.port}
        if t.serial_number:
            e["serial"] = t.serial_number
        if t.vid_pid:
            e["vid_pid"] = t.vid_pid
        if t.virtual:
            e["virtual"] = True
        if t.labgrid:
            e["labgrid"] = t.labgrid
        boards.append(e)
    doc = {"picoring_ring": RING_FORMAT, "n": len(targets), "saved": time.strftime("%Y-%m-%dT%H:%M:%S"),
           "boards": boards}
    doc.update(extra or {})
    tmp = Path(str(path) + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return doc


def read_ring_file(path):
    """The entries of a ring file, in position order; errors name the file."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise PortError("no ring file %s (write one with: picoring discover --ports ...)" % path) from None
    except ValueError as e:
        raise PortError("%s: not JSON (%s)" % (path, e)) from None
    if not isinstance(doc, dict) or doc.get("picoring_ring") != RING_FORMAT or not isinstance(doc.get("boards"), list):
        raise PortError("%s: not a picoring ring file (version %d)" % (path, RING_FORMAT))
    entries = doc["boards"]
    positions = [e.get("position") for e in entries]
    dup = sorted({p for p in positions if positions.count(p) > 1}, key=str)
    if dup:
        raise PortError("%s: two boards have the same position %s" % (path, ", ".join(map(str, dup))))
    if sorted(positions, key=str) != sorted(range(len(entries)), key=str):
        raise PortError("%s: positions must be 0..%d, got %s" % (path, len(entries) - 1, positions))
    return sorted(entries, key=lambda e: e["position"])


def ring_file_targets(path, state_dir=None, ports=None):
    """Targets in ring order from a ring file: boards found again by serial number
    (wherever they are plugged in now), virtual boards by their path, a labgrid place's
    boards by their resource (ring/labgrid.py)."""
    entries = read_ring_file(path)
    if any("labgrid" in e for e in entries):
        from . import labgrid

        place = labgrid.ring_file_order(entries)
        if place is None:
            raise PortError("%s: its boards are not all of one labgrid place" % path)
        return _place_targets(place[0], state_dir, place[1], str(path))
    specs = []
    for e in entries:
        if e.get("serial"):
            specs.append("id:" + e["serial"])
        else:
            specs.append(e["port"])
    try:
        return resolve_many(specs, state_dir, ports)
    except PortError as e:
        raise PortError("%s (from ring file %s; if the boards changed, run picoring discover again)" % (e, path)) from None


def targets_from_args(ports_text=None, ring_file=None, state_dir=None, all_boards=False):
    """The boards a command means: --ports if given, else the ring file (explicit, or
    ./ring.json if it exists), else with all_boards every attached MicroPython board
    and virtual board. Returns (targets, where) with where saying which source was used."""
    if ports_text:
        return resolve_many(split_ports(ports_text), state_dir), "--ports"
    if ring_file or (not all_boards and os.path.exists(DEFAULT_RING_FILE)):
        path = ring_file or DEFAULT_RING_FILE
        return ring_file_targets(path, state_dir), path
    if all_boards:
        found = list_usb() + virtual_targets(state_dir)
        if not found:
            raise PortError("no board found: no USB serial port with MicroPython's USB id (%s) and no virtual ring "
                            "up (picoring boards lists what is attached)" % ", ".join(sorted(micropython_vid_pids())))
        return found, "all attached boards"
    raise PortError("which boards? give --ports P1,P2,... (paths, id:SERIAL, URLs) or --ring-file FILE; no %s here "
                    "(picoring discover writes one)" % DEFAULT_RING_FILE)


def resetter_for(targets):
    """A RingRun resetter (i -> restart board i) when every board has a reset line, else None
    (the harness then restarts the boards with Ctrl-C, Ctrl-D over their USB serial)."""
    if targets and all(t.resetter is not None for t in targets):
        return lambda i: targets[i].reset()
    return None
