"""pytest plugin: the ring of boards the tests run on, as fixtures.

Registered through the `pytest11` entry point, so any test suite in an
environment with picoring installed gets:

  options (group "picoring"):
    --ring-ports P1,P2,...  real boards in ring order: paths, id:SERIAL, serial numbers, pyserial URLs
    --ring-file FILE        real boards in the order `picoring discover` saved
    --ring-labgrid PLACE    the boards of a labgrid place (PLACE@HOST:PORT: that coordinator; else
                            LG_COORDINATOR), acquired for the session unless you hold it (docs/labgrid.md)
    --ring-virtual N        N virtual boards (the default, N = 4, so the suite runs anywhere)
    --ring-board NAME       board type for flash (boards/*.toml; default pico)
    --ring-baud B           UART baud of the ring (default: the board file's)
    --ring-flashed PROTO    the boards already run the firmware for PROTO (`picoring flash` with the
                            same --ring-board and --ring-baud): the first flash for it is skipped
    --ring-log-dir DIR      where each test's serial traffic is saved (default .pytest_cache/d/picoring-serial)

  fixtures (session scope: boards are flashed once per protocol, not per test):
    boards  the boards as ports.Target objects, in ring order
    ring    a Ring: flash(protocol), run(protocol, workload, requests, ...), make_run(ports, ...)

Every byte a test exchanges with each board over its USB serial is recorded;
it is saved per test and, when the test fails, shown in the report as one
section per board (as labgrid and pytest-embedded do).
"""

import os
import re
import time

import pytest

from .ttystall import for_ports

DEFAULT_VIRTUAL = 4
_SHOW_LINES = 60  # lines of traffic per board in a failure report
_KEEP_BYTES = 1 << 20  # per board per test


def pytest_addoption(parser):
    g = parser.getgroup("picoring", "picoring: the ring of boards the tests run on")
    g.addoption("--ring-ports", metavar="P1,P2,...",
                help="real boards in ring order: device paths, id:SERIAL, USB serial numbers or pyserial URLs")
    g.addoption("--ring-file", metavar="FILE", help="real boards in the order saved by `picoring discover`")
    g.addoption("--ring-labgrid", metavar="PLACE",
                help="the boards of a labgrid place, in ring order (PLACE@HOST:PORT: that coordinator, else "
                     "LG_COORDINATOR); acquired for the session unless you hold it, released at its end")
    g.addoption("--ring-virtual", type=int, metavar="N",
                help="N virtual boards (MicroPython unix-port processes); the default, with N=%d" % DEFAULT_VIRTUAL)
    g.addoption("--ring-board", default="pico", metavar="NAME", help="board type for flashing (default pico)")
    g.addoption("--ring-baud", type=int, metavar="B", help="UART baud of the ring (default: the board file's)")
    g.addoption("--ring-unpaced", action="store_true",
                help="virtual boards: wires without wire time, as fast as the processes go (faults still apply)")
    g.addoption("--ring-log-dir", metavar="DIR", help="save each test's serial traffic here")
    g.addoption("--ring-flashed", metavar="PROTOCOL",
                help="the boards given by --ring-ports/--ring-file already run the firmware for PROTOCOL, flashed "
                     "by `picoring flash` with the same board and baud: tests that need it do not flash again "
                     "(each run still checks every board's !hello)")


def pytest_configure(config):
    o = config.option
    given = [x for x in (o.ring_ports, o.ring_file, o.ring_virtual, o.ring_labgrid) if x]
    if len(given) > 1:
        raise pytest.UsageError("give one of --ring-ports, --ring-file, --ring-virtual, --ring-labgrid")
    if o.ring_flashed and not (o.ring_ports or o.ring_file or o.ring_labgrid):
        raise pytest.UsageError("--ring-flashed is for boards given by --ring-ports, --ring-file or --ring-labgrid")
    config._picoring_traffic = Traffic()


# -- serial traffic ----------------------------------------------------------

class Traffic:
    """Per-test copies of every board's USB serial traffic (BoardLink.tap)."""

    def __init__(self):
        self.t0 = time.monotonic()
        self.ports = {}  # index -> port name
        self.chunks = {}  # port -> [(t, "rx"/"tx", bytes)]
        self.sizes = {}

    def begin(self):
        self.chunks = {}
        self.sizes = {}
        self.t0 = time.monotonic()

    def tap_for(self, ports):
        """A tap for links whose index i is ports[i]."""
        def tap(index, direction, data):
            port = ports[index] if 0 <= index < len(ports) else str(index)
            if self.sizes.get(port, 0) > _KEEP_BYTES:
                return
            self.sizes[port] = self.sizes.get(port, 0) + len(data)
            self.chunks.setdefault(port, []).append((time.monotonic() - self.t0, direction, bytes(data)))
        return tap

    def lines(self, port):
        """Whole lines per direction, each stamped with the time its last byte came or went;
        control bytes shown as \\xNN (a Ctrl-C is \\x03)."""
        out = []
        partial = {"rx": b"", "tx": b""}
        for t, d, data in self.chunks.get(port, []):
            buf = partial[d] + data
            *done, partial[d] = buf.split(b"\n")
            for line in done:
                out.append("%9.3f %s %s" % (t, "<-" if d == "rx" else "->", _show(line)))
        for d, rest in partial.items():
            if rest:
                out.append("%9s %s %s" % ("", "<-" if d == "rx" else "->", _show(rest)))
        return out


def _show(line):
    return "".join(chr(b) if 32 <= b < 127 else "\\x%02x" % b for b in line.rstrip(b"\r"))


def _safe(nodeid):
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", nodeid)[-150:]


def _log_dir(config):
    d = config.option.ring_log_dir
    if d:
        os.makedirs(d, exist_ok=True)
        return d
    cache = getattr(config, "cache", None)
    if cache is not None:
        return str(cache.mkdir("picoring-serial"))
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.config._picoring_traffic.begin()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_teardown(item, nextitem):
    ring = getattr(item, "funcargs", {}).get("ring")
    if isinstance(ring, Ring):
        ring.rest()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed setup or call shows every board's traffic; teardown saves it to files."""
    outcome = yield
    report = outcome.get_result()
    traffic = item.config._picoring_traffic
    if not traffic.chunks:
        return
    if report.when == "teardown":
        d = _log_dir(item.config)
        if d is not None:
            for port in sorted(traffic.chunks):
                path = os.path.join(d, "%s.%s.log" % (_safe(item.nodeid), _safe(port)))
                with open(path, "w") as f:
                    f.write("\n".join(traffic.lines(port)) + "\n")
        return
    if report.failed:
        d = _log_dir(item.config)
        for port in sorted(traffic.chunks):
            lines = traffic.lines(port)
            shown = lines[-_SHOW_LINES:]
            head = ""
            if len(lines) > len(shown):
                head = "(last %d of %d lines; all saved in %s)\n" % (len(shown), len(lines), d or "no log dir")
            report.sections.append(("picoring serial %s (seconds, <- from the board, -> to it)" % port,
                                    head + "\n".join(shown)))
        vring = getattr(item.config, "_picoring_virtual", None)
        if vring is not None:  # boards that fell silent together: was it the relay?
            report.sections.append(("picoring virtual ring at the failure", vring.snapshot_text()))


# -- the ring ----------------------------------------------------------------

class Ring:
    """A ring of boards for tests: flashes through picoring.ring.flash (the `picoring flash` path,
    mpremote included) once per configuration, and runs workloads through the harness."""

    def __init__(self, targets, board="pico", baud=None, traffic=None, virtual=None, flashed=None):
        self.targets = targets
        self.ports = [t.port for t in targets]
        self.n = len(targets)
        self.board = board
        self.baud = baud
        self.virtual = virtual  # the RemoteRing, if the boards are virtual
        self.traffic = traffic
        self.flashed = flashed  # (protocol, cs_us, drop_rx) the boards run, if known
        self.flash_results = None
        # what the waits on the boards count: wall time for real boards, the stall-aware clock
        # for virtual boards and emulated Picos (ptys of this machine)
        self.clock = virtual.clock if virtual is not None else for_ports(self.ports)

    def tap(self, ports=None):
        return self.traffic.tap_for(list(ports or self.ports)) if self.traffic is not None else None

    def flash(self, protocol, cs_us=0, force=False, drop_rx=None):
        """Flash every board for `protocol` unless that is what they already run. drop_rx
        (probability, seed): the boards lose received frames (the fault drop_rx, docs/faults.md)."""
        from .ring import flash
        from .ringrate import clock_rate_for_ports

        want = (protocol, cs_us, drop_rx)
        if force or self.flashed != want:
            self.flashed = None
            self.flash_results = flash.flash(self.targets, protocol, baud=self.baud, board=self.board, cs_us=cs_us,
                                             tap=self.tap(), drop_rx=drop_rx, clock=self.clock,
                                             clock_rate=clock_rate_for_ports(self.targets))
            self.flashed = want
        return self.flash_results

    def rest(self):
        """Stop the boards' firmware when its token never rests (S, BinarySearch, the wandering
        token): left running, it keeps the boards busy for the rest of the session, and a virtual
        ring's relay with them (a BinarySearch ring flashed by one test moved its token through
        every later test of a suite run, 13% of a core at 115200 baud). Each board waits at its
        REPL; the next run restarts it (RingRun.restart_ring)."""
        from .check import registry
        from .ring import flash
        from .ring.link import HarnessError, stop_firmware
        from .ring.ports import PortError

        if self.flashed is None or registry.rests(self.flashed[0]):
            return
        links = []
        try:
            for i, target in enumerate(self.targets):
                try:
                    links.append(flash.open_link(i, target, clock=self.clock))
                except PortError:
                    continue  # a board whose port is gone: the next test that needs it says so
            try:
                stop_firmware(links)
            except HarnessError:
                pass  # one still running: the next run stops it (restart_ring) all the same
        finally:
            for link in links:
                link.close()

    def resetter_for(self, ports):
        by_port = {t.port: t for t in self.targets}
        ts = [by_port.get(p) for p in ports]
        if all(t is not None and t.resetter is not None for t in ts):
            return lambda i: ts[i].reset()
        return None

    def make_run(self, ports, protocol, workload, **kw):
        """A harness RingRun over `ports` (not yet connected)."""
        from .ring.harness import RingRun
        from .ringrate import clock_rate_for_ports

        kw.setdefault("resetter", self.resetter_for(ports))
        kw.setdefault("clock_rate", clock_rate_for_ports(ports))  # the ring's own count of its boards' time
        kw.setdefault("tap", self.tap(ports))
        kw.setdefault("clock", self.clock)
        return RingRun(list(ports), protocol, workload, **kw)

    def run(self, protocol, workload, requests, seed=0, cs_us=0, **kw):
        """Flash if needed, run a workload (a name or a workload object), return the checked report."""
        from .sim.workload import make_workload

        self.flash(protocol, cs_us)
        if isinstance(workload, str):
            workload = make_workload(workload, self.n, requests, seed=seed, **kw)
        run = self.make_run(self.ports, protocol, workload, seed=seed)
        try:
            run.connect()
            return run.run()
        finally:
            run.close()


@pytest.fixture(scope="session")
def boards(request):
    """The boards, in ring order (ports.Target objects). Virtual ones are started here and
    stopped at the end of the session."""
    from .ring import ports

    o = request.config.option
    if o.ring_ports or o.ring_file or o.ring_labgrid:
        try:
            if o.ring_ports:
                targets = ports.resolve_many(ports.split_ports(o.ring_ports))
            elif o.ring_labgrid:
                targets = ports.resolve_many(["labgrid:" + o.ring_labgrid])
            else:
                targets = ports.ring_file_targets(o.ring_file)
        except ports.PortError as e:
            _release_places()
            raise pytest.UsageError("picoring: %s" % e)
        request.config._picoring_virtual = None
        try:
            yield targets
        finally:
            _release_places()
        return
    from .virtual.remote import RemoteRing

    n = o.ring_virtual or DEFAULT_VIRTUAL
    baud = o.ring_baud or 115200
    # In a process of its own, as the commands' rings (virtual/remote.py): in the tests' process,
    # the relay waited for the interpreter lock behind the harness's link readers and checker,
    # and came back seconds late under a loaded suite run (issue 36)
    with RemoteRing(n, baud=baud, paced=not o.ring_unpaced) as vring:
        request.config._picoring_virtual = vring
        yield ports.ring_targets(vring)


def _release_places():
    """The labgrid places the session acquired (by --ring-labgrid, or a ring file of a place)."""
    from .cli.common import release_places

    release_places()


@pytest.fixture(scope="session")
def ring(request, boards):
    """A Ring over `boards`: call ring.flash(protocol) or ring.run(protocol, workload, requests)."""
    o = request.config.option
    return Ring(boards, board=o.ring_board, baud=o.ring_baud, traffic=request.config._picoring_traffic,
                virtual=getattr(request.config, "_picoring_virtual", None),
                flashed=(o.ring_flashed, 0, None) if o.ring_flashed else None)
