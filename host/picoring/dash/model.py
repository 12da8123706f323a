"""What the ring looks like, derived from its trace Events: the dashboard's model.

Applying an event is cheap (a Checker.feed and a few list updates); nothing is
formatted here, so the model keeps up with a fast ring and the dashboard
renders it only at its refresh rate. The figures (messages, served, service
traffic, bounds) are the Checker's own, so the dashboard shows exactly what
`picoring check` reports for the same events.

What the events tell, and what they do not:
  node state    idle / requesting / in critical section: exact (req, enter, exit)
  token         at a node (received, or resting) or on a link (sent, not yet
                received), with the payload it last carried: exact. A protocol
                whose token travels as a layer message (the toy) names that
                message's kind in its descriptor (about["messages"]["token"]
                ["kind"]): its hop frames place the token as token frames do,
                with their destination; a frame passing through a node puts the
                token at that node until it is passed on.
  requests      request and re-announced request frames, and the hop frames of
                the descriptor's request message (about["messages"]["request"]),
                per link
  M_p (D)       1 when p has sent a request message since T last reached p. A
                node sets its flag exactly when it sends a request message and
                T clears it, so this is exact for a complete trace; with lost
                events (a board's log overflowed) it can be wrong.
  stopped       a request message received by a node without T whose M_p is 1
                is stopped there (D rule 3); one received by T's node is consumed.
"""

from collections import deque

from ..check import registry
from ..check.checker import Checker
from ..check.quantile import nearest_rank

IDLE, REQUESTING, IN_CS = 0, 1, 2
NODE_STATE_NAMES = ("idle", "requesting", "in CS")

# What a frame of each kind is to the dashboard (a layer message's role comes from the descriptor).
FRAME_ROLES = {"token": "token", "request": "request", "again": "request"}


message_roles = registry.message_roles  # {message kind: role} from the descriptor (the explorer reads it too)


# Events kept for the scrolling log: enough that a filter on one node of a
# 64-node ring still finds a screenful.
LOG_KEEP = 5000


class DashModel:
    """State of the ring from a stream of Events; callable (a listener)."""

    def __init__(self, protocol, n, time_unit="hop", log_keep=LOG_KEEP):
        self.protocol = protocol
        self.n = n
        self.time_unit = time_unit
        self.checker = Checker(protocol, n, time_unit=time_unit)
        self.events = 0
        self.t = None
        self.node_state = [IDLE] * n
        self.requested_at = [None] * n  # t of the node's outstanding request
        self.requests_by_node = [0] * n
        self.served_by_node = [0] * n
        self.flag = [0] * n  # derived M_p (D)
        self.stopped_at = [0] * n  # request messages stopped at the node (D rule 3)
        self.consumed_at = [0] * n  # request messages that reached T at the node
        self.token_sends = [0] * n  # per link i (node i -> i+1)
        self.request_sends = [0] * n
        self.token_recvs = [0] * n
        self.request_recvs = [0] * n
        self.token_lost = [0] * n  # frames sent on link i that never arrived (trace "lost" events)
        self.request_lost = [0] * n
        self.lost_on = None  # the link the token was lost on, while no other token has been seen
        # Every run starts with the token resting at node 0 (sim and ring alike).
        self.token_node = 0
        self.token_link = None  # link it is on while in flight
        self.token_payload = None
        self.token_dst = None  # where a token message is going (None: a token frame, or it has arrived)
        self.latencies = []  # one per service, in service order
        self._latencies_sorted = []
        self.log = deque(maxlen=log_keep)
        self.ended = None  # extra of the end event, if one came
        # What the protocol's descriptor asks the dashboard to show (firmware `about["view"]`):
        # token_state (names of the token's state values), token_count (the label of its
        # counter), requests (it sends request frames), flags (the label of a per-node flag).
        about = registry.about(protocol)
        self.view = about.get("view", {})
        self._uses_flags = bool(self.view.get("flags"))
        self._msg_roles = message_roles(about)

    def role(self, event):
        """What a send or recv event's frame is here: "token", "request", or None (recovery
        claims, messages the descriptor gives no role)."""
        if event.kind == "msg":  # a msg event always has its payload (docs/trace-format.md)
            return self._msg_roles.get(event.payload.get("mkind"))
        return FRAME_ROLES.get(event.kind)

    # -- events -------------------------------------------------------------
    def apply(self, event):
        ev = event.ev
        node = event.node
        checker = self.checker
        if ev == "send":
            link = event.link if event.link is not None else node
            kind = event.kind
            if kind == "token":
                self.token_sends[link] += 1
                self.token_node = None
                self.token_link = link
                self.token_payload = event.payload
            elif kind in ("request", "again"):
                self.request_sends[link] += 1
                self.flag[node] = 1
            elif kind == "msg":
                self._message(event, node, link, True)
            # claims (token recovery) are not the paper's traffic: counted by the checker
        elif ev == "regen":
            self.token_node = node  # a new token, made here (docs/recovery.md)
            self.token_link = None
            self.token_payload = event.payload
            self.token_dst = None
        elif ev == "recv":
            link = event.link if event.link is not None else (node - 1) % self.n
            kind = event.kind
            if kind == "token":
                self.token_recvs[link] += 1
                self.token_node = node
                self.token_link = None
                self.token_payload = event.payload
                self.flag[node] = 0
            elif kind in ("request", "again"):
                self.request_recvs[link] += 1
                if self.token_node == node:
                    self.consumed_at[node] += 1
                elif self._uses_flags and self.flag[node]:
                    self.stopped_at[node] += 1
            elif kind == "msg":
                self._message(event, node, link, False)
        elif ev == "lost":
            self._lost(event, node)
        elif ev == "req":
            self.node_state[node] = REQUESTING
            self.requested_at[node] = event.t
            self.requests_by_node[node] += 1
        elif ev == "enter":
            pending = checker.pending.get(node)
            if pending is not None:
                self.latencies.append(event.t - pending[1])
                self.served_by_node[node] += 1
            self.node_state[node] = IN_CS
            self.requested_at[node] = None
            self.token_node = node
            self.token_link = None
            self.token_dst = None
        elif ev == "exit":
            self.node_state[node] = IDLE
        elif ev == "end":
            self.ended = event.extra or {}
        checker.feed(event)
        self.events += 1
        if event.t is not None:
            self.t = event.t
        self.log.append(event)

    __call__ = apply

    def _message(self, event, node, link, sent):
        """A hop frame of a layer message: the token's or a request's by the descriptor's kinds
        (message_roles), placed and counted as token and request frames are. A token message
        passing through a node stays there until the node passes it on; a request message is
        delivered or passed on, never consumed or stopped."""
        p = event.payload
        role = self._msg_roles.get(p.get("mkind"))
        if role == "token":
            self.token_payload = p
            self.token_dst = p.get("dst")
            if sent:
                self.token_sends[link] += 1
                self.token_node = None
                self.token_link = link
            else:
                self.token_recvs[link] += 1
                self.token_node = node
                self.token_link = None
        elif role == "request":
            if sent:
                self.request_sends[link] += 1
            else:
                self.request_recvs[link] += 1

    def _lost(self, event, node):
        """A frame node sent that never reached the next node (docs/trace-format.md "lost"),
        known when the next frame on that wire showed the gap: no longer in flight. A lost token
        that is still the one shown on that link is gone; one seen since (made again, entered
        with) stays where it is."""
        link = event.link if event.link is not None else node
        role = self.role(event)
        if role == "token":
            self.token_lost[link] += 1
            if self.token_link == link:
                self.token_link = None
                self.token_dst = None
                self.lost_on = link
        elif role == "request":
            self.request_lost[link] += 1

    # -- figures (read at render time) ----------------------------------------
    def report(self):
        """The checker's report so far (no finish: pending requests are not failures yet)."""
        return self.checker.report()

    def latency_percentile(self, q):
        """Latency at quantile q (0..1), nearest rank; None before the first service."""
        lat = self.latencies
        if not lat:
            return None
        if len(self._latencies_sorted) != len(lat):
            # timsort merges the sorted prefix with the new tail in about linear time
            done = self._latencies_sorted
            done.extend(lat[len(done):])
            done.sort()
        return nearest_rank(self._latencies_sorted, q)


    def in_flight(self):
        """(token frames, request frames) sent and not yet received, ring-wide."""
        return (sum(self.token_sends) - sum(self.token_recvs) - sum(self.token_lost),
                sum(self.request_sends) - sum(self.request_recvs) - sum(self.request_lost))

    def requests_in_flight_on(self, link):
        return self.request_sends[link] - self.request_recvs[link] - self.request_lost[link]

    def token_place(self):
        """('node', i) or ('link', i) for the token's place now (token_dst: where a token
        message on a link, or passing through node i, is going); ('lost', i): it was lost on
        link i and no token has been seen since."""
        if self.token_link is not None:
            return "link", self.token_link
        if self.token_node is None and self.lost_on is not None:
            return "lost", self.lost_on  # lost on that link; no token seen since
        return "node", self.token_node
