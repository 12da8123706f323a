"""Liveness and latency: every request is served, or reported failed with a reason the harness
knows; the time from each request to its entry. The keeper of the ledger's requests: the Checker
adds each request and takes, at each entry, the request it serves."""

from array import array

from ..quantile import nearest_rank


class Liveness:
    def __init__(self, ledger):
        self.ledger = ledger
        self.latency_sum = 0
        self.latency_max = 0
        self.latencies = array("d")  # one per service, in service order (p50, p99)
        self.failed = {}  # reason -> requests reported failed

    def add(self, t, node):
        """A request at node: its number."""
        led = self.ledger
        led.requests += 1
        rid = led.requests
        if node in led.pending or led.in_cs == node:
            led.violate("workload", rid, node, t, "node %d requested again before its request was served" % node)
        sent = led.token_msgs + led.request_msgs  # (total and logical inline: a request is the simulator's hot path)
        led.pending[node] = (rid, t, sent + led.msg_frames, sent + led.msg_logical, led.entries)
        return rid

    def take(self, t, node):
        """An entry at node, once every part has seen it: the pending request it serves, taken
        off the pending ones, and its latency; none: a violation."""
        led = self.ledger
        led.entries += 1
        req = led.pending.pop(node, None)
        if req is None:
            led.unsafe(node, t, "node %d entered the critical section with no pending request" % node)
            return
        led.served += 1
        latency = t - req[1]
        self.latency_sum += latency
        self.latencies.append(latency)
        if latency > self.latency_max:
            self.latency_max = latency

    def fail(self, t, node, reason):
        """The request pending at node will never be served, for a reason the harness knows (the
        board restarted): reported, not a liveness violation."""
        if self.ledger.pending.pop(node, None) is not None:
            self.failed[reason] = self.failed.get(reason, 0) + 1

    def finish(self):
        for node, (rid, t_req, *_) in sorted(self.ledger.pending.items(), key=lambda kv: kv[1][0]):
            self.ledger.violate("liveness", rid, node, t_req, "request #%d (node %d, t=%s) was never served"
                                % (rid, node, t_req))

    def quantiles(self):
        """{"p50", "p99"} of the latencies so far (nearest rank), None before any service."""
        if not self.latencies:
            return {"p50": None, "p99": None}
        s = sorted(self.latencies)
        q = {"p50": nearest_rank(s, 0.5), "p99": nearest_rank(s, 0.99)}
        return {k: int(v) if v == int(v) else v for k, v in q.items()}

    def report(self):
        served = self.ledger.served
        return {"latency": {"mean": (self.latency_sum / served) if served else 0.0, "max": self.latency_max},
                "latency_quantiles": self.quantiles(), "failed": dict(self.failed)}
