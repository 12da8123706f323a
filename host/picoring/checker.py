"""Hold a run against the paper's proven bounds, safety and liveness.

One Checker consumes a stream of ring events, from a trace file, from the
simulator (which hands over its message counters in bulk between events, so it
need not build an event per hop) or, later, from the board harness.

Measures (section 1 of the paper):
  messages            one frame over one link; token and request frames
  messages/request    total messages / requests
  service traffic     messages anywhere in the ring from the moment a request is
                      made (its request message, if any, included) to the moment
                      the requester receives the token
Bounds checked (docs/bounds.md has the counterexamples and the arguments):
  Q  total <= n * requests              (Thm 3.1, holds)
     service traffic <= (5n^2 - 5n + 2)/2 (corrected; the paper prints
                                         3/2 n^2 - 5/2 n + 1, exceeded at n = 2..5;
                                         worst found by exhaustive search: (2n-1)(n-1))
  D  total <= 3n * requests             (empirical, not proven: the paper prints
                                         2n, exceeded by the corrected D at n = 5)
     service traffic <= 3n - 2          (corrected; the paper prints 3n - 3,
                                         exceeded at n = 3)
  S  unbounded (Thm 2.1): reported, not checked
The paper's printed bounds are reported next to the checked ones, with the
number of requests that exceeded them.
"""


def paper_bounds_for(protocol, n):
    """(messages per request, service traffic) as printed in the paper, or None."""
    if protocol == "q":
        return n, (3 * n * n - 5 * n + 2) // 2
    if protocol in ("d", "d-literal"):
        return 2 * n, 3 * n - 3
    return None, None


def bounds_for(protocol, n):
    """(messages per request, service traffic) the checker holds a run to."""
    if protocol == "q":
        return n, (5 * n * n - 5 * n + 2) // 2
    if protocol in ("d", "d-literal"):
        return 3 * n, 3 * n - 2
    return None, None


class Checker:
    def __init__(self, protocol, n, max_violations=100):
        self.protocol = protocol
        self.n = n
        self.bound_mpr, self.bound_service = bounds_for(protocol, n)
        self.paper_mpr, self.paper_service = paper_bounds_for(protocol, n)
        self.over_paper_service = 0  # requests whose service traffic exceeded the printed bound
        self.token_msgs = 0
        self.request_msgs = 0
        self.recv_msgs = 0
        self.requests = 0
        self.served = 0
        self.in_cs = None  # node in its critical section
        self.pending = {}  # node -> (request id, t, messages at request)
        self.max_service = 0
        self.max_service_request = None
        self.latency_sum = 0
        self.latency_max = 0
        self.over_bound_request = None  # first request after which the total went over
        self.safety_violations = 0
        self.violations = []
        self._max_violations = max_violations
        self.last_t = 0
        self.quiescent = None
        self.stop_reason = None

    # -- counters ---------------------------------------------------------
    @property
    def total(self):
        return self.token_msgs + self.request_msgs

    def count_to(self, token_msgs, request_msgs):
        """Set the cumulative frame counts (the simulator's bulk path)."""
        self.token_msgs = token_msgs
        self.request_msgs = request_msgs

    # -- events -----------------------------------------------------------
    def feed(self, event):
        """Consume one trace Event."""
        ev = event.ev
        if ev == "send":
            if event.kind == "token":
                self.token_msgs += 1
            else:
                self.request_msgs += 1
        elif ev == "recv":
            self.recv_msgs += 1
        elif ev == "req":
            self.request(event.t, event.node)
        elif ev == "enter":
            self.enter(event.t, event.node)
        elif ev == "exit":
            self.exit(event.t, event.node)
        elif ev == "end":
            extra = event.extra or {}
            if "quiescent" in extra:
                self.quiescent = bool(extra["quiescent"])
            self.stop_reason = extra.get("reason", self.stop_reason)
        if event.t is not None:
            self.last_t = event.t

    __call__ = feed

    def request(self, t, node):
        self.requests += 1
        rid = self.requests
        if node in self.pending or self.in_cs == node:
            self._violate("workload", rid, node, t, "node %d requested again before its request was served" % node)
        self.pending[node] = (rid, t, self.total)
        self._check_total(rid)

    def enter(self, t, node):
        if self.in_cs is not None:
            self.safety_violations += 1
            self._violate("safety", None, node, t, "node %d entered the critical section while node %d was in it" % (node, self.in_cs))
        self.in_cs = node
        req = self.pending.pop(node, None)
        if req is None:
            self.safety_violations += 1
            self._violate("safety", None, node, t, "node %d entered the critical section with no pending request" % node)
            return
        rid, t_req, msgs_at_req = req
        self.served += 1
        service = self.total - msgs_at_req
        if service > self.max_service:
            self.max_service = service
            self.max_service_request = (rid, node, t_req)
        if self.paper_service is not None and service > self.paper_service:
            self.over_paper_service += 1
        if self.bound_service is not None and service > self.bound_service:
            self._violate(
                "bound", rid, node, t_req,
                "request #%d (node %d, t=%s): service traffic %d > bound %d" % (rid, node, t_req, service, self.bound_service),
            )
        latency = t - t_req
        self.latency_sum += latency
        if latency > self.latency_max:
            self.latency_max = latency

    def exit(self, t, node):
        if self.in_cs != node:
            self.safety_violations += 1
            self._violate("safety", None, node, t, "node %d left a critical section it was not in" % node)
        self.in_cs = None
        self._check_total(self.requests)

    def _check_total(self, rid):
        if self.bound_mpr is None or self.over_bound_request is not None:
            return
        if self.total > self.bound_mpr * self.requests and self.requests:
            self.over_bound_request = rid

    def _violate(self, kind, rid, node, t, message):
        if len(self.violations) < self._max_violations:
            self.violations.append({"kind": kind, "request": rid, "node": node, "t": t, "message": message})

    # -- result -----------------------------------------------------------
    def finish(self, quiescent=None, reason=None):
        """Close the run: unserved requests and the total bound. Returns the report."""
        if quiescent is not None:
            self.quiescent = quiescent
        if reason is not None:
            self.stop_reason = reason
        for node, (rid, t_req, _) in sorted(self.pending.items(), key=lambda kv: kv[1][0]):
            self._violate("liveness", rid, node, t_req, "request #%d (node %d, t=%s) was never served" % (rid, node, t_req))
        if self.bound_mpr is not None and self.requests and self.total > self.bound_mpr * self.requests:
            rid = self.over_bound_request or self.requests
            self._violate(
                "bound", rid, None, None,
                "%d messages for %d requests > %d per request (first over after request #%d)"
                % (self.total, self.requests, self.bound_mpr, rid),
            )
        if self.quiescent is False:
            self._violate("quiescence", None, None, self.last_t, "the ring did not become quiescent: %s" % (self.stop_reason or "token still moving"))
        return self.report()

    def report(self):
        served = self.served
        return {
            "protocol": self.protocol,
            "n": self.n,
            "requests": self.requests,
            "served": served,
            "messages": {"total": self.total, "token": self.token_msgs, "request": self.request_msgs},
            "messages_per_request": (self.total / self.requests) if self.requests else 0.0,
            "max_service_traffic": self.max_service,
            "max_service_request": (
                None if self.max_service_request is None
                else dict(zip(("request", "node", "t"), self.max_service_request))
            ),
            "latency": {"mean": (self.latency_sum / served) if served else 0.0, "max": self.latency_max},
            "bounds": {"messages_per_request": self.bound_mpr, "service_traffic": self.bound_service},
            "paper_bounds": {"messages_per_request": self.paper_mpr, "service_traffic": self.paper_service},
            "over_paper_service_bound": self.over_paper_service,
            "over_paper_total_bound": bool(self.paper_mpr is not None and self.total > self.paper_mpr * self.requests),
            "safety_violations": self.safety_violations,
            "quiescent": self.quiescent,
            "violations": list(self.violations),
            "ok": not self.violations,
        }


def check_trace(path):
    """Run the checker over a trace file. Returns (meta, report)."""
    from .trace import TraceReader

    with TraceReader(path) as reader:
        meta = reader.meta
        checker = Checker(meta["protocol"], meta["n"])
        for event in reader:
            checker.feed(event)
    report = checker.finish()
    report["frames_in_flight_at_end"] = checker.total - checker.recv_msgs
    return meta, report
