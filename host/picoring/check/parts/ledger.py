"""What the checker's parts share: the run's frame counts, its requests, the node in its critical
section, when recovery first acted, and the violations found so far (one list, in the order found)."""


class Ledger:
    def __init__(self, protocol, n, soft, max_violations=100):
        self.protocol = protocol
        self.n = n
        self.soft = soft  # soft mutual exclusion: several nodes may be in at once
        self.token_msgs = 0
        self.request_msgs = 0
        self.msg_frames = 0  # hop frames of protocol-layer messages (kind msg)
        self.msg_logical = 0  # of which new messages (fwd false): the logical count
        self.recv_msgs = 0
        self.requests = 0
        self.served = 0
        self.entries = 0  # critical-section entries so far
        self.pending = {}  # node -> (request id, t, hop frames, logical messages and entries at request)
        self.in_cs = None  # node in its critical section (hard exclusion; the safety part keeps it)
        self.last_exit = None  # ... and when the last one left it
        self.faults_at = None  # time of the first recovery action: the fault-free bounds stop applying
        self.over_paper = {}  # a per-request paper bound of the descriptor -> requests over it
        self.last_t = 0
        self.quiescent = None
        self.stop_reason = None
        self.ended = False  # an end record was read: the run that wrote the trace finished
        self.safety_violations = 0
        self.violations = []
        self.max_violations = max_violations
        self.over_bound_after_faults = 0

    @property
    def total(self):
        """Hop frames: every frame on a wire (token, request, each hop of a message)."""
        return self.token_msgs + self.request_msgs + self.msg_frames

    @property
    def logical(self):
        """Logical messages: token and request frames, and each message once."""
        return self.token_msgs + self.request_msgs + self.msg_logical

    def count_to(self, token_msgs, request_msgs, msg_frames=0, msg_logical=0):
        """Set the cumulative frame counts (the simulator's bulk path)."""
        self.token_msgs = token_msgs
        self.request_msgs = request_msgs
        self.msg_frames = msg_frames
        self.msg_logical = msg_logical

    def faults(self, t):
        """Recovery acted at t: from the first time on, the bounds are reported, not checked."""
        if self.faults_at is None:
            self.faults_at = t

    def over(self, bound):
        """One more request over the descriptor's printed per-request bound of that name."""
        self.over_paper[bound] = self.over_paper.get(bound, 0) + 1

    def violate(self, kind, rid, node, t, message):
        if kind == "bound" and self.faults_at is not None:
            self.over_bound_after_faults += 1  # the fault-free bounds no longer apply
            return
        if len(self.violations) < self.max_violations:
            self.violations.append({"kind": kind, "request": rid, "node": node, "t": t, "message": message})

    def unsafe(self, node, t, message):
        """A safety violation."""
        self.safety_violations += 1
        self.violate("safety", None, node, t, message)

    def report(self):
        requests = self.requests
        return {
            "protocol": self.protocol,
            "n": self.n,
            "requests": requests,
            "served": self.served,
            "messages": dict({"total": self.total, "token": self.token_msgs, "request": self.request_msgs},
                             **({"msg": self.msg_frames} if self.msg_frames else {})),  # msg: hop frames of messages
            "logical_messages": self.logical,  # the textbook's count (S, Q, D: = hop_frames)
            "hop_frames": self.total,  # every frame on a wire (= messages.total)
            "messages_per_request": (self.total / requests) if requests else 0.0,
            "logical_per_request": (self.logical / requests) if requests else 0.0,
            "safety_violations": self.safety_violations,
            "recovery": {"faults_at": self.faults_at, "over_bound_after_faults": self.over_bound_after_faults},
            "quiescent": self.quiescent,
            "violations": list(self.violations),
            "ok": not self.violations,
        }
