"""Workloads: when and where requests are made.

A workload is driven by whoever runs the ring (the simulator in hop times, the
board harness in real time scaled to the same units):

  next_time()              time of the next open-loop request, or None
  due(t)                   the open-loop requests at time <= t, as (node, line)
  on_quiescent(t, holder)  closed loop: the node to request now, or None
  issued / total           how many requests were handed out / will be

Open-loop workloads (poisson, burst, file) fix their times in advance. When a
poisson or burst request falls on a node whose previous request is still
outstanding, the runner defers it to that node's critical-section exit (at most
one outstanding request per node, as the paper assumes). A file workload is
exact instead: such a request is an error naming its line.
"""

import json
import math

try:
    import random
    _Random = random.Random
except (ImportError, AttributeError):  # MicroPython (equivalence tests): no Random class
    _Random = None


class WorkloadError(ValueError):
    """A workload that cannot be run; the message says where and why."""


class Workload:
    name = ""
    closed_loop = False
    defer_busy = True  # poisson/burst: defer a request that hits a busy node

    def __init__(self, n, total, seed=0):
        if n < 2:
            raise WorkloadError("a ring needs at least 2 nodes")
        if total < 0:
            raise WorkloadError("the number of requests cannot be negative")
        self.n = n
        self.total = total
        self.issued = 0
        self.rng = _Random(seed) if _Random is not None else None

    @property
    def exhausted(self):
        return self.issued >= self.total

    def next_time(self):
        return None

    def due(self, t):
        return ()

    def on_quiescent(self, t, holder):
        return None

    def describe(self):
        return self.name


class _OpenLoop(Workload):
    """Requests at times fixed in advance: a sorted list of (t, node, line)."""

    def __init__(self, n, total, seed=0):
        Workload.__init__(self, n, total, seed)
        self._items = []
        self._pos = 0

    def next_time(self):
        if self._pos < len(self._items):
            return self._items[self._pos][0]
        return None

    def due(self, t):
        out = []
        items = self._items
        while self._pos < len(items) and items[self._pos][0] <= t:
            _, node, line = items[self._pos]
            out.append((node, line))
            self._pos += 1
        self.issued += len(out)
        return out


class Poisson(_OpenLoop):
    """Ring-wide Poisson arrivals at `rate` requests per time unit, each at a
    uniformly random node (so each node is a Poisson source of rate/n).
    Times are rounded up to whole time units."""

    name = "poisson"

    def __init__(self, n, total, seed=0, rate=None):
        _OpenLoop.__init__(self, n, total, seed)
        self.rate = rate if rate is not None else 1.0 / n
        if not self.rate > 0:
            raise WorkloadError("poisson rate must be > 0")
        t = 0.0
        rng = self.rng
        for _ in range(total):
            t += rng.expovariate(self.rate)
            self._items.append((math.ceil(t), rng.randrange(n), None))

    def describe(self):
        return "poisson(rate=%g)" % self.rate


class Burst(_OpenLoop):
    """All nodes request at once, every `period` time units; the last burst
    holds the remaining requests at randomly chosen nodes."""

    name = "burst"

    def __init__(self, n, total, seed=0, period=None, cs_time=1):
        _OpenLoop.__init__(self, n, total, seed)
        # Long enough for the ring to serve a whole burst and go quiet again.
        self.period = period if period is not None else n * (cs_time + 1) + 3 * n
        if self.period < 1:
            raise WorkloadError("burst period must be >= 1")
        t = 0
        left = total
        while left > 0:
            nodes = range(n) if left >= n else sorted(self.rng.sample(range(n), left))
            for node in nodes:
                self._items.append((t, node, None))
            left -= len(nodes)
            t += self.period

    def describe(self):
        return "burst(period=%d)" % self.period


class Schedule(_OpenLoop):
    """A fixed list of (t, node) requests. Exact by default: a request at a
    busy node is an error; with defer_busy it waits for the node's exit."""

    name = "schedule"
    defer_busy = False

    def __init__(self, n, items, defer_busy=False):
        _OpenLoop.__init__(self, n, len(items))
        self.defer_busy = defer_busy
        for t, node in items:
            if not 0 <= node < n:
                raise WorkloadError("node %r is not in 0..%d" % (node, n - 1))
        # sorted by time, stable within a time; the "line" is the 1-based index
        self._items = sorted(((t, node, i + 1) for i, (t, node) in enumerate(items)), key=lambda item: item[0])

    def describe(self):
        return "schedule(%d requests)" % self.total


class FileWorkload(_OpenLoop):
    """Requests from a file, either
    - JSON lines {"t": <time>, "node": <index>}, times in time units (hop times in the
      simulator), exact: a request at a node whose request is still outstanding is an error
      naming its line (so a saved schedule replays its run exactly); or
    - a picoring trace (docs/trace-format.md: its first line is {"v": .., "ev": "meta", ..}):
      its `req` events, their times converted with the trace's unit (a ring trace counts us
      and says how many make one time unit, `unit_us`; a simulator trace counts hop times).
      The simulator keeps its own pace, not the ring's, so a request that comes while its
      node is still waiting or in its critical section waits for that node's exit, as a
      poisson request does.
    Times need not be whole: the simulator's clock counts whole time units, so a request is
    made at the first whole unit at or after its time (as poisson rounds its times up)."""

    name = "file"
    defer_busy = False
    DEFAULT_UNIT_US = 2000  # `picoring run --unit-ms` default, for ring traces that do not say theirs

    def __init__(self, n, path, seed=0):
        Workload.__init__(self, n, 0, seed)
        self._items = []
        self._pos = 0
        self.path = path
        self.trace = None  # the trace's header, when the file is a trace
        self.unit = 1  # file times per time unit
        self.notes = []  # what the user should know about the replay (cli/common.py prints them)
        try:
            f = open(path, encoding="utf-8")
        except OSError as e:
            raise WorkloadError("%s: cannot open workload file: %s" % (path, e.strerror or e)) from None
        with f:
            try:
                self._read(f, n)
            except UnicodeDecodeError as e:
                raise WorkloadError("%s: not a text file (byte 0x%02x is not UTF-8)" % (path, e.object[e.start])) from None
        self._items.sort(key=lambda item: item[0])  # stable: file order within a time
        self.total = len(self._items)

    def _read(self, f, n):
        path = self.path
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            if self.trace is not None and '"req"' not in line:
                continue  # a trace's other events (most of it), without parsing them
            where = "%s:%d" % (path, lineno)
            try:
                d = json.loads(line)
            except ValueError as e:
                raise WorkloadError("%s: not JSON: %s" % (where, e)) from None
            if not self._items and self.trace is None and isinstance(d, dict) and d.get("ev") == "meta":
                self._header(d, where, n)
                continue
            if self.trace is not None:
                if not isinstance(d, dict) or d.get("ev") != "req":
                    continue
            elif not isinstance(d, dict) or "t" not in d or "node" not in d:
                raise WorkloadError('%s: expected {"t": <time>, "node": <index>}' % where)
            t, node = d.get("t"), d.get("node")
            if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < math.inf:
                raise WorkloadError("%s: t must be a time >= 0 (in %s), not %r" % (where, self._unit_name(), t))
            if isinstance(node, bool) or not isinstance(node, int) or not 0 <= node < n:
                ring = "" if self.trace is None else " (the trace's ring has %s nodes)" % self.trace.get("n")
                raise WorkloadError("%s: node must be an integer in 0..%d, not %r%s" % (where, n - 1, node, ring))
            units = t / self.unit
            self._items.append((math.ceil(units - 1e-9) if units != int(units) else int(units), node, lineno))

    def _header(self, meta, where, n):
        """The file is a trace: how its times convert to time units."""
        self.trace = meta
        self.defer_busy = True
        unit = meta.get("time_unit")
        if unit == "us":
            per = meta.get("unit_us")
            if per is None:
                per = self.DEFAULT_UNIT_US
                self.notes.append("%s does not say how many us make one time unit (unit_us): taking %d, the "
                                  "default of `picoring run --unit-ms`" % (self.path, per))
            if isinstance(per, bool) or not isinstance(per, (int, float)) or not per > 0:
                raise WorkloadError("%s: unit_us must be a positive number, not %r" % (where, per))
            self.unit = per
        elif unit not in (None, "hop"):
            raise WorkloadError("%s: time_unit %r: a trace counts \"hop\" times or \"us\"" % (where, unit))
        if meta.get("n") not in (None, n):
            self.notes.append("%s is a trace of a ring of %s nodes; its requests are replayed on %d"
                              % (self.path, meta.get("n"), n))

    def _unit_name(self):
        if self.trace is None:
            return "time units"
        return "us" if self.trace.get("time_unit") == "us" else "hop times"

    def describe(self):
        if self.trace is None:
            return "file:%s" % self.path
        what = "%s trace, %s us per time unit" % (self.trace.get("source") or "a", _num(self.unit)) \
            if self.trace.get("time_unit") == "us" else "%s trace" % (self.trace.get("source") or "a")
        return "file:%s (%s)" % (self.path, what)


def _num(x):
    return "%d" % x if x == int(x) else "%g" % x


def trace_ring_size(spec):
    """The ring size a `file:` workload's trace was recorded on, or None (not a file: spec, not
    a trace, or unreadable: make_workload says why)."""
    if not spec.startswith("file:"):
        return None
    try:
        with open(spec[5:], encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    d = json.loads(line)
                    n = d.get("n") if isinstance(d, dict) and d.get("ev") == "meta" else None
                    return n if isinstance(n, int) and not isinstance(n, bool) else None
    except (OSError, ValueError):
        return None
    return None


class Sequential(Workload):
    """Closed loop: each request only once the ring is quiescent, at a random node."""

    name = "sequential"
    closed_loop = True

    def __init__(self, n, total, seed=0):
        Workload.__init__(self, n, total, seed)
        # randrange(n) for n > 0 draws getrandbits(n.bit_length()) until the draw is below n
        # (CPython's random.py, Random._randbelow, 3.2 on): done here with the public
        # getrandbits, the same nodes for a seed without randrange's checks and its two
        # inner calls (tests/test_simcore.py holds it to randrange)
        # (MicroPython: no Random and no int.bit_length; the equivalence tests draw no nodes here)
        self._bits = self.rng.getrandbits if self.rng is not None else None
        self._width = n.bit_length() if self.rng is not None else 0

    def on_quiescent(self, t, holder):
        if self.issued >= self.total:  # (exhausted)
            return None
        self.issued += 1
        r = self._bits(self._width)
        while r >= self.n:
            r = self._bits(self._width)
        return r


class Adversarial(Workload):
    """Closed loop: quiescent ring, request at the node just behind the token
    (the lower-bound construction of Theorem 2.2)."""

    name = "adversarial"
    closed_loop = True

    def on_quiescent(self, t, holder):
        if self.exhausted:
            return None
        self.issued += 1
        return (holder - 1) % self.n


class Periodic(_OpenLoop):
    """Every node asks periodically: the next request `period` plus a bias drawn uniformly from
    [0, period/2] after its previous one, the first one at a random time in [0, 1.5 * period).
    The benchmark of the wandering token paper, section 2 ("random access"), with period =
    Delta_min. Default period: Table 1's Delta_min, 1.5 * cs_time * n."""

    name = "periodic"

    def __init__(self, n, total, seed=0, period=None, cs_time=1):
        _OpenLoop.__init__(self, n, total, seed)
        self.period = period if period is not None else max(1, (3 * max(cs_time, 1) * n) // 2)
        if self.period < 1:
            raise WorkloadError("periodic: the period must be at least 1 time unit")
        rng = self.rng
        p = self.period
        heap = [(rng.randrange(p + p // 2 + 1), i) for i in range(n)]
        heap.sort()
        import heapq

        for _ in range(total):
            t, i = heapq.heappop(heap)
            self._items.append((t, i, None))
            heapq.heappush(heap, (t + p + rng.randrange(p // 2 + 1), i))

    def describe(self):
        return "periodic(period=%d)" % self.period


class Saturated(Workload):
    """Every node asks at time 0 and again as soon as each of its critical sections ends, until
    `total` requests: the wandering token paper's components, which always want the operation."""

    name = "saturated"

    def __init__(self, n, total, seed=0):
        Workload.__init__(self, n, total, seed)
        self._started = False

    def next_time(self):
        return None if self._started else 0

    def due(self, t):
        self._started = True
        k = min(self.n, self.total)
        self.issued += k
        return [(i, None) for i in range(k)]

    def renew(self, i):
        if self.issued >= self.total:
            return False
        self.issued += 1
        return True


WORKLOADS = ("poisson", "burst", "periodic", "saturated", "sequential", "adversarial", "file:PATH")


def make_workload(spec, n, total, seed=0, cs_time=1, rate=None, period=None):
    """Build a workload from its command-line name."""
    if spec.startswith("file:"):
        path = spec[5:]
        if not path:
            raise WorkloadError("file workload needs a path: file:PATH")
        return FileWorkload(n, path, seed)
    if spec == "poisson":
        return Poisson(n, total, seed, rate=rate)
    if spec == "burst":
        return Burst(n, total, seed, period=period, cs_time=cs_time)
    if spec == "periodic":
        return Periodic(n, total, seed, period=period, cs_time=cs_time)
    if spec == "saturated":
        return Saturated(n, total, seed)
    if spec == "sequential":
        return Sequential(n, total, seed)
    if spec == "adversarial":
        return Adversarial(n, total, seed)
    raise WorkloadError("unknown workload %r (known: %s)" % (spec, ", ".join(WORKLOADS)))
