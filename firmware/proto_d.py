# Protocol D of Feuerstein et al. (1997), section 4: per-node flags M_p, a token
# that is active or in check state, a check tour after each service (rules 1-5 of
# the seed text, marked in the code). Messages: the token frame (frame.TOKEN) and
# the request frame (frame.REQUEST), both to the next node. Token payload: count
# (check-tour hops left; corrected D: also the active token's hop budget), state
# (CHECK or ACTIVE), seq, epoch.
# Deviations: NodeD corrects rules 2 and 4 (docs/bounds.md); NodeDLiteral is D as
# printed; both have the shared recovery rules of protocol.Node (docs/recovery.md).

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
_SEND_AGAIN = const(16)  # protocol.SEND_AGAIN
_SEQ_MASK = const(0x3FFFFFFF)  # protocol.SEQ_MASK
_CHECK = const(0)  # protocol.CHECK
_ACTIVE = const(1)  # protocol.ACTIVE
if (protocol.SEND_TOKEN, protocol.SEND_REQUEST, protocol.DISCARDED, protocol.SEND_AGAIN, protocol.SEQ_MASK, protocol.CHECK, protocol.ACTIVE) != (
        _SEND_TOKEN, _SEND_REQUEST, _DISCARDED, _SEND_AGAIN, _SEQ_MASK, _CHECK, _ACTIVE):
    raise ImportError("%s: constants disagree with protocol.py" % __name__)

CITATION = ("Feuerstein, Leonardi, Marchetti-Spaccamela, Santoro: Efficient Token-Based Control in Rings "
            "(1997); seeds/feuerstein-1997-efficient-token-control-in-rings.md")


class NodeDLiteral(Node):
    """D exactly as printed (section 4, rules 1-5).

    Kept selectable as "d-literal": it is not quiescent. A request message
    whose request was served before the message reached T (T overtook the
    requester) still turns T active by rule 2, and an active T that finds no
    pending request is passed on by rule 4 forever. See docs/bounds.md and
    tests/test_bounds_findings.py for the smallest schedule.
    """

    name = "d-literal"
    about = {
        "name": "d-literal",
        "title": "D as printed (not quiescent: docs/bounds.md, finding 1)",
        "citation": CITATION + ", section 4",
        "exclusion": "hard",
        "rests": True,  # at rest in state check when no request is pending
        "positions": False,  # no rule reads a node's index: a ring's rotation is a symmetry (the explorer)
        # What a run may show that the project has found and documented (a violation's kind ->
        # where and why): `compare` reports it as expected, not as a failure.
        "findings": {"quiescence": "docs/bounds.md, finding 1: a stale request message wakes the resting "
                                   "token, and rule 4 passes it on for ever"},
        # The dashboard (host): the token frame's fields to show, request frames, a per-node flag.
        "view": {"token_state": ("check", "ACTIVE"), "token_count": "count", "requests": True, "flags": "M_p"},
        "messages": {"token": "frame.TOKEN to the next node", "request": "frame.REQUEST to the next node"},
        "bounds": {
            # Printed 2n (Thm 4.1), exceeded; the checked bound is empirical (docs/bounds.md).
            "messages_per_request": {"paper": "2*n", "checked": "3*n", "where": "Thm 4.1; docs/bounds.md",
                                     "why": "a request message that follows T crosses up to 2n - 2 edges; the "
                                            "checked 3n is empirical (docs/bounds.md, finding 4)"},
            # Printed 3n - 3 (Thm 4.1), exceeded at n = 3; corrected 3n - 2.
            "service_traffic": {"paper": "3*n - 3", "checked": "3*n - 2", "where": "Thm 4.1; docs/bounds.md",
                                "why": "T resets the flags it passes, so an edge carries more than one "
                                       "request message (docs/bounds.md, finding 3)"},
        },
    }
    active_budget = False  # rule 4 passes an active T on, whatever happens
    hot_constants = ("active_budget",)  # on_token reads it on every active hop

    def request(self):
        # Rule 1.
        if self.has_token:
            return self._enter()
        self.pending = True
        if self.flag == 0:
            self.flag = 1
            return _SEND_REQUEST
        return 0

    def _activate(self):
        self.state = _ACTIVE

    @micropython.native
    def on_request(self):
        if self.has_token:
            # Rule 2.
            self.flag = 0
            self._activate()
            if self.in_cs:
                return 0  # passed at exit_cs: the state is active
            return self._pass()
        # Rule 3.
        if self.flag == 0:
            self.flag = 1
            return _SEND_REQUEST
        return 0  # the request message is stopped here

    @micropython.native
    def on_token(self, count, state, seq, epoch):
        if epoch != self.open_epoch:
            epoch = self._gate(epoch)  # else _gate would change nothing: not called (hot path)
            if epoch < 0:
                return _DISCARDED
        if self.has_token:
            self.errors = (self.errors + 1) & _SEQ_MASK  # a second token: dropped, never acted on
            return 0
        self.seq = seq
        self.epoch = epoch
        # Rules 4 and 5, written out here rather than in a method of their own: a
        # call costs tens of microseconds on a Pico, and every hop of D runs this.
        self.flag = 0
        if state == _ACTIVE:
            # Rule 4.
            if self.pending:
                self.has_token = True
                self.count = self.n - 1
                self.state = _CHECK
                return self._enter()  # T is passed at the end of the CS
            # Rule 4, no pending request: T is passed to the next processor.
            self.state = _ACTIVE
            if self.active_budget:
                # Corrected D (NodeD): the hop budget, inline (a call costs
                # microseconds on a Pico).
                count -= 1
                if count <= 0:
                    self.count = 0
                    self.has_token = True  # nothing left to search for: T rests here
                    self.state = _CHECK
                    return 0
            self.count = count
            return _SEND_TOKEN
        # Rule 5.
        count -= 1
        self.count = count
        self.state = _CHECK
        if self.pending:
            self.has_token = True
            return self._enter()
        if count > 0:
            return _SEND_TOKEN  # passed straight on
        self.has_token = True  # the check tour is over: T rests here
        return 0

    @micropython.native
    def exit_cs(self):
        self.in_cs = False
        if self.state == _ACTIVE or self.count > 0:
            return self._pass()
        return 0

    def _regenerate(self):
        # A new token makes a check tour of the whole ring, as if it had just
        # arrived here with counter n (rule 5): it clears every M_p flag left
        # by request messages that were lost, and serves whoever is pending.
        # (on_token's gate lets it through: the claim has just made this epoch ours)
        self.has_token = False
        return self.on_token(self.n, _CHECK, self.seq, self.epoch)

    def on_request_again(self, origin=-1):
        # A re-announced request message is not stopped by M_p (rule 3): the
        # flag that would stop it may belong to a request message that was
        # lost; this one must reach T. It stays a re-announced message.
        a = Node.on_request_again(self, origin)
        if a & _SEND_AGAIN:
            self.flag = 1
        return a

    def _again(self):
        self.flag = 1
        return Node._again(self)


class NodeD(NodeDLiteral):
    """D, corrected (the default "d").

    Deviation from the paper, rules 2 and 4: an active T carries a hop budget.
    Rule 2 sets the counter to n - 1 along with the state active; rule 4 for a
    processor without a pending request decrements it and passes T only while
    it is greater than 0, else T rests there in state check. An active T that
    has visited every other processor without finding a pending request has
    nothing to search for: every request it did not find was issued after T
    passed its processor, so that request's message (or the message that
    stopped it) is still chasing T and will wake it again.
    Argument and counterexample: docs/bounds.md.
    """

    name = "d"
    about = dict(NodeDLiteral.about, name="d", title="D, corrected (rules 2 and 4: a hop budget)", findings=None)
    active_budget = True  # rule 4: see NodeDLiteral.on_token

    def _activate(self):
        self.state = _ACTIVE
        self.count = self.n - 1
