"""The paper's bounds, as the protocol's descriptor gives them (docs/bounds.md): the checked ones
(messages per request over the run, service traffic per request, logical messages per request)
and the printed ones beside them, with the requests that exceeded those. The descriptor's
per-request bounds of fairness and of BinarySearch's forwards are kept here too, for those parts.

Service traffic: messages anywhere in the ring from the moment a request is made (its request
message, if any, included) to the moment the requester receives the token."""

from .. import registry


def paper_bounds_for(protocol, n):
    """(messages per request, service traffic) as printed in the paper, or None: from the
    protocol's descriptor (firmware, `about["bounds"]`)."""
    return (registry.bound(protocol, "messages_per_request", n, "paper"),
            registry.bound(protocol, "service_traffic", n, "paper"))


def bounds_for(protocol, n):
    """(messages per request, service traffic) the checker holds a run to: the descriptor's
    checked bounds, in hop frames (for S, Q and D every message is one hop)."""
    return (registry.bound(protocol, "messages_per_request", n),
            registry.bound(protocol, "service_traffic", n))


class Bounds:
    def __init__(self, ledger):
        self.ledger = ledger
        protocol, n = ledger.protocol, ledger.n
        self.bound_mpr, self.bound_service = bounds_for(protocol, n)
        self.paper_mpr, self.paper_service = paper_bounds_for(protocol, n)
        self.bound_logical = registry.bound(protocol, "logical_per_request", n)
        self.bound_forwards = registry.bound(protocol, "forwards_per_request", n)
        self.paper_forwards = registry.bound(protocol, "forwards_per_request", n, "paper")
        self.paper_overtaken = registry.bound(protocol, "overtaken", n, "paper")
        self.paper_by_one = registry.bound(protocol, "overtaken_by_one", n, "paper")
        self.max_service = 0
        self.max_service_request = None
        self.max_service_logical = 0
        self.over_paper_service = 0  # requests whose service traffic exceeded the printed bound
        self.over_bound_request = None  # first request after which the total went over

    def request(self, t, node, rid):
        # (check_total and the ledger's total inline, here, in enter and in exit: the simulator's hot path)
        if self.bound_mpr is not None and self.over_bound_request is None:
            led = self.ledger
            if led.token_msgs + led.request_msgs + led.msg_frames > self.bound_mpr * led.requests and led.requests:
                self.over_bound_request = rid

    def enter(self, t, node, seq):
        led = self.ledger
        req = led.pending.get(node)  # the request this entry serves
        if req is None:
            return
        rid, t_req, msgs_at_req, logical_at_req, _ = req
        sent = led.token_msgs + led.request_msgs
        service = sent + led.msg_frames - msgs_at_req
        logical = sent + led.msg_logical - logical_at_req
        if logical > self.max_service_logical:
            self.max_service_logical = logical
        if service > self.max_service:
            self.max_service = service
            self.max_service_request = (rid, node, t_req)
        if led.soft:
            return  # measured, not held to the bounds of hard exclusion
        if self.paper_service is not None and service > self.paper_service:
            self.over_paper_service += 1
        if self.bound_service is not None and service > self.bound_service:
            led.violate("bound", rid, node, t_req, "request #%d (node %d, t=%s): service traffic %d > bound %d"
                        % (rid, node, t_req, service, self.bound_service))

    def exit(self, t, node):
        """After each request and each exit: the first request after which the run's messages
        went over the bound."""
        if self.bound_mpr is not None and self.over_bound_request is None:
            led = self.ledger
            if led.token_msgs + led.request_msgs + led.msg_frames > self.bound_mpr * led.requests and led.requests:
                self.over_bound_request = led.requests

    def finish(self):
        led = self.ledger
        if self.bound_mpr is not None and led.requests and led.total > self.bound_mpr * led.requests:
            rid = self.over_bound_request or led.requests
            led.violate("bound", rid, None, None, "%d messages for %d requests > %d per request (first over after "
                        "request #%d)" % (led.total, led.requests, self.bound_mpr, rid))
        if self.bound_logical is not None and led.requests and led.logical > self.bound_logical * led.requests:
            led.violate("bound", led.requests, None, None, "%d logical messages for %d requests > %d per request"
                        % (led.logical, led.requests, self.bound_logical))

    def report(self):
        led = self.ledger
        return {
            "max_service_traffic": self.max_service,
            "max_service_logical": self.max_service_logical,
            "max_service_request": (None if self.max_service_request is None
                                    else dict(zip(("request", "node", "t"), self.max_service_request))),
            "bounds": {"messages_per_request": self.bound_mpr, "service_traffic": self.bound_service,
                       "logical_per_request": self.bound_logical, "forwards_per_request": self.bound_forwards},
            "paper_bounds": {"messages_per_request": self.paper_mpr, "service_traffic": self.paper_service},
            "over_paper_service_bound": self.over_paper_service,
            "over_paper_total_bound": bool(self.paper_mpr is not None and led.total > self.paper_mpr * led.requests),
        }
