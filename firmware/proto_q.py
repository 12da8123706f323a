# Protocol Q of Feuerstein et al. (1997), section 3: anonymous request messages
# travel the ring to the token, which counts them (rules 1-3 of the seed text,
# marked in the code). Messages: the token frame (frame.TOKEN) and the request frame
# (frame.REQUEST), both to the next node. Token payload: count (requests registered),
# state (deviation, recovery: hops since the token was last held), seq, epoch.
# Deviations, marked in the code: the hop rule (recovery, docs/recovery.md) and the
# shared recovery rules of protocol.Node.

try:
    from micropython import const
    import micropython
except ImportError:  # CPython

    def const(value):
        return value

    class micropython:
        """@micropython.native is MicroPython's compiler's; a no-op on CPython."""

        @staticmethod
        def native(f):
            return f


try:
    from . import protocol  # the host: picoring.firmware.proto_*
except ImportError:
    import protocol  # a board: firmware modules side by side
Node = protocol.Node

# protocol.py's constants, copied: a const() is inlined only in the module that
# defines it (an imported name is a dictionary lookup at every use, on every hop).
_SEND_TOKEN = const(1)  # protocol.SEND_TOKEN
_SEND_REQUEST = const(2)  # protocol.SEND_REQUEST
_DISCARDED = const(64)  # protocol.DISCARDED
_SEQ_MASK = const(0x3FFFFFFF)  # protocol.SEQ_MASK
if (protocol.SEND_TOKEN, protocol.SEND_REQUEST, protocol.DISCARDED, protocol.SEQ_MASK) != (
        _SEND_TOKEN, _SEND_REQUEST, _DISCARDED, _SEQ_MASK):
    raise ImportError("%s: constants disagree with protocol.py" % __name__)

CITATION = ("Feuerstein, Leonardi, Marchetti-Spaccamela, Santoro: Efficient Token-Based Control in Rings "
            "(1997); seeds/feuerstein-1997-efficient-token-control-in-rings.md")


class NodeQ(Node):
    """Q: request messages travel the ring; T counts them (section 3)."""

    name = "q"
    about = {
        "name": "q",
        "title": "Q: request messages counted by the token",
        "citation": CITATION + ", section 3",
        "exclusion": "hard",
        "rests": True,  # at rest at the last holder when no request is pending
        "positions": False,  # no rule reads a node's index: a ring's rotation is a symmetry (the explorer)
        # The dashboard (host): the token frame's fields to show, request frames, a per-node flag.
        "view": {"token_count": "counter", "requests": True},
        "messages": {"token": "frame.TOKEN to the next node", "request": "frame.REQUEST to the next node"},
        "bounds": {
            # Thm 3.1 holds: at most n messages per request (amortized).
            "messages_per_request": {"paper": "n", "checked": "n", "where": "Thm 3.1"},
            # Printed 3/2 n^2 - 5/2 n + 1 (section 3), exceeded at n = 2..5; the checked
            # bound is the corrected one of docs/bounds.md (worst found: (2n-1)(n-1)).
            "service_traffic": {"paper": "(3*n*n - 5*n + 2)//2", "checked": "(5*n*n - 5*n + 2)//2",
                                "where": "Thm 3.1 / section 3; corrected: docs/bounds.md",
                                # why the checked bound is not the printed one (`report` says it)
                                "why": "the proof misses requests made while T is on the wire, requests "
                                       "made again, and stale request messages (docs/bounds.md, finding 2)"},
        },
    }

    def request(self):
        # Rule 1.
        if self.has_token:
            return self._enter()
        self.pending = True
        return _SEND_REQUEST

    @micropython.native
    def on_request(self):
        # Rule 2.
        if self.has_token:
            self.count += 1
            if self.in_cs:
                return 0  # passed at exit_cs: count > 0 now
            return self._pass()
        return _SEND_REQUEST

    @micropython.native
    def on_token(self, count, state, seq, epoch):
        # Rule 3.
        if epoch != self.open_epoch:
            epoch = self._gate(epoch)  # else _gate would change nothing: not called (hot path)
            if epoch < 0:
                return _DISCARDED
        if self.has_token:
            self.errors = (self.errors + 1) & _SEQ_MASK  # a second token: dropped, never acted on
            return 0
        self.seq = seq
        self.epoch = epoch
        if self.pending:
            self.has_token = True
            self.count = count - 1 if count > 0 else 0
            self.state = 0
            return self._enter()
        # Passed straight on: has_token never becomes true, the fields are
        # only kept for the caller to send.
        # Deviation (recovery, docs/recovery.md): state counts the nodes T has
        # passed since it was last held. With count > 0 some processor is
        # pending and T reaches it within n hops, so on a fault-free ring this
        # never reaches n; after a lost token or a re-announced request the
        # counter can be stale, and T would circle forever: it rests instead.
        state += 1
        if state >= self.n:
            self.stale_counts = (self.stale_counts + 1) & _SEQ_MASK  # never on a fault-free ring (explore checks it)
            self.has_token = True
            self.count = 0
            self.state = 0
            return 0
        self.count = count
        self.state = state
        return _SEND_TOKEN

    @micropython.native
    def exit_cs(self):
        # Rule 3, end: pass T if the counter is greater than 0; else T rests here.
        self.in_cs = False
        if self.count > 0:
            return self._pass()
        return 0

    def _regenerate(self):
        # A new token cannot know the lost one's counter: it sweeps the ring
        # once (count n, passed on by every processor that is not pending,
        # decremented by those that are) and rests by the hop rule above.
        # Requests it misses are re-announced by their own timeouts.
        self._new_token()
        self.count = self.n
        if self.pending:
            self.count -= 1
            return self._enter()
        return self._pass()
