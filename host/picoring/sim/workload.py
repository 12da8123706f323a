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
    """JSON lines {"t": <time>, "node": <index>}, times in hop units."""

    name = "file"
    defer_busy = False

    def __init__(self, n, path, seed=0):
        Workload.__init__(self, n, 0, seed)
        self._items = []
        self._pos = 0
        self.path = path
        try:
            f = open(path, encoding="utf-8")
        except OSError as e:
            raise WorkloadError("%s: cannot open workload file: %s" % (path, e.strerror or e)) from None
        with f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = "%s:%d" % (path, lineno)
                try:
                    d = json.loads(line)
                except ValueError as e:
                    raise WorkloadError("%s: not JSON: %s" % (where, e)) from None
                if not isinstance(d, dict) or "t" not in d or "node" not in d:
                    raise WorkloadError('%s: expected {"t": <time>, "node": <index>}' % where)
                t, node = d["t"], d["node"]
                if isinstance(t, bool) or not isinstance(t, (int, float)) or t < 0 or t != int(t):
                    raise WorkloadError("%s: t must be a whole number of time units >= 0, not %r" % (where, t))
                if isinstance(node, bool) or not isinstance(node, int) or not 0 <= node < n:
                    raise WorkloadError("%s: node must be an integer in 0..%d, not %r" % (where, n - 1, node))
                self._items.append((int(t), node, lineno))
        self._items.sort(key=lambda item: item[0])  # stable: file order within a time
        self.total = len(self._items)

    def describe(self):
        return "file:%s" % self.path


class Sequential(Workload):
    """Closed loop: each request only once the ring is quiescent, at a random node."""

    name = "sequential"
    closed_loop = True

    def on_quiescent(self, t, holder):
        if self.exhausted:
            return None
        self.issued += 1
        return self.rng.randrange(self.n)


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


WORKLOADS = ("poisson", "burst", "sequential", "adversarial", "file:PATH")


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
    if spec == "sequential":
        return Sequential(n, total, seed)
    if spec == "adversarial":
        return Adversarial(n, total, seed)
    raise WorkloadError("unknown workload %r (known: %s)" % (spec, ", ".join(WORKLOADS)))
