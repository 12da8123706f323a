# Token protocols S, Q and D of Feuerstein, Leonardi, Marchetti-Spaccamela and
# Santoro, "Efficient Token-Based Control in Rings" (1997), as pure state machines.
#
# This one file runs on a Pico (rp2 port), on a virtual board (unix port) and on
# the host (simulator, checker tests). It does no I/O, reads no clock and
# allocates nothing per event: every handler only assigns small ints and bools
# and returns a bit mask of actions for the caller to carry out.
#
# Events in:  request()        the local application needs the resource
#             on_request()     a request message arrived from the previous node
#             on_token(...)    the token arrived from the previous node
#             exit_cs()        the local critical section has finished
# Actions out (bit mask returned by every handler):
#             SEND_TOKEN       send the token to the next node; its fields are
#                              this node's count/state/seq/epoch attributes
#             SEND_REQUEST     send one (anonymous) request message to the next node
#             ENTER_CS         the critical section starts now; call exit_cs() at its end
#
# "p has T" in the paper means the token is at p: resting there or held in p's
# critical section. A token that only passes through p is never "had" between
# two events.
#
# Interpretation shared by Q and D (not spelled out in the paper): a request
# message that reaches p while p is inside its critical section updates the
# token as the rule says, but T is passed on when the critical section ends,
# never during it (passing it would break mutual exclusion).

try:
    from micropython import const
except ImportError:  # CPython

    def const(value):
        return value


# Action bits. Public because the node loop and the simulator dispatch on them.
SEND_TOKEN = const(1)
SEND_REQUEST = const(2)
ENTER_CS = const(4)

# Token state of protocol D (the "bit" of section 4).
CHECK = const(0)
ACTIVE = const(1)

# Version of the token layout: count, state, seq, epoch.
TOKEN_FIELDS = ("count", "state", "seq", "epoch")


class Node:
    """Common part: token custody, the pending request, the critical section.

    Token fields, meaningful while has_token is true (and read by the caller
    right after a SEND_TOKEN action):
      count  protocol counter (Q: registered requests, D: check-tour hops left)
      state  CHECK or ACTIVE (D only; 0 elsewhere)
      seq    number of critical-section entries since the ring started
             (for the link layer and the checker: detects a lost/duplicated token)
      epoch  token generation, kept as is by the protocols (for token regeneration)
    """

    name = ""
    uses_requests = True

    def __init__(self, index, n):
        if n < 2:
            raise ValueError("a ring needs at least 2 nodes")
        if not 0 <= index < n:
            raise ValueError("node index out of range")
        self.index = index
        self.n = n
        self.pending = False
        self.in_cs = False
        self.has_token = False
        self.count = 0
        self.state = CHECK
        self.seq = 0
        self.epoch = 0
        self.flag = 0  # M_p of protocol D
        self.errors = 0  # frames that cannot happen in a fault-free ring

    def give_token(self):
        """Place the single token here when the ring starts."""
        self.has_token = True
        self.count = 0
        self.state = CHECK
        return 0

    def _enter(self):
        self.pending = False
        self.in_cs = True
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        return ENTER_CS

    def _pass(self):
        self.has_token = False
        return SEND_TOKEN

    def busy(self):
        """True while this node holds something that must still happen."""
        return self.pending or self.in_cs


class NodeS(Node):
    """S: the classic circulating token (section 2, "hot potato").

    A processor receiving the token either enters the critical section or
    passes it on; the token never rests, so S sends no request messages.
    """

    name = "s"
    uses_requests = False

    def give_token(self):
        Node.give_token(self)
        return self._pass()

    def request(self):
        self.pending = True
        return 0

    def on_request(self):
        self.errors += 1  # S has no request messages
        return 0

    def on_token(self, count, state, seq, epoch):
        if self.has_token:
            self.errors += 1  # a second token: dropped, never acted on
            return 0
        self.count = count
        self.state = state
        self.seq = seq
        self.epoch = epoch
        if self.pending:
            self.has_token = True
            return self._enter()
        return SEND_TOKEN  # passed straight on

    def exit_cs(self):
        self.in_cs = False
        return self._pass()


class NodeQ(Node):
    """Q: request messages travel the ring; T counts them (section 3)."""

    name = "q"

    def request(self):
        # Rule 1.
        if self.has_token:
            return self._enter()
        self.pending = True
        return SEND_REQUEST

    def on_request(self):
        # Rule 2.
        if self.has_token:
            self.count += 1
            if self.in_cs:
                return 0  # passed at exit_cs: count > 0 now
            return self._pass()
        return SEND_REQUEST

    def on_token(self, count, state, seq, epoch):
        # Rule 3.
        if self.has_token:
            self.errors += 1  # a second token: dropped, never acted on
            return 0
        if self.pending:
            self.has_token = True
            self.count = count - 1
            self.state = state
            self.seq = seq
            self.epoch = epoch
            return self._enter()
        # Passed straight on: has_token never becomes true, the fields are
        # only kept for the caller to send.
        self.count = count
        self.state = state
        self.seq = seq
        self.epoch = epoch
        return SEND_TOKEN

    def exit_cs(self):
        # Rule 3, end: pass T if the counter is greater than 0; else T rests here.
        self.in_cs = False
        if self.count > 0:
            return self._pass()
        return 0


class NodeDLiteral(Node):
    """D exactly as printed (section 4, rules 1-5).

    Kept selectable as "d-literal": it is not quiescent. A request message
    whose request was served before the message reached T (T overtook the
    requester) still turns T active by rule 2, and an active T that finds no
    pending request is passed on by rule 4 forever. See docs/bounds.md and
    tests/test_bounds_findings.py for the smallest schedule.
    """

    name = "d-literal"
    active_budget = False  # rule 4 passes an active T on, whatever happens

    def request(self):
        # Rule 1.
        if self.has_token:
            return self._enter()
        self.pending = True
        if self.flag == 0:
            self.flag = 1
            return SEND_REQUEST
        return 0

    def _activate(self):
        self.state = ACTIVE

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
            return SEND_REQUEST
        return 0  # the request message is stopped here

    def on_token(self, count, state, seq, epoch):
        if self.has_token:
            self.errors += 1  # a second token: dropped, never acted on
            return 0
        self.flag = 0
        self.seq = seq
        self.epoch = epoch
        if state == ACTIVE:
            # Rule 4.
            if self.pending:
                self.has_token = True
                self.count = self.n - 1
                self.state = CHECK
                return self._enter()  # T is passed at the end of the CS
            # Rule 4, no pending request: T is passed to the next processor.
            self.state = ACTIVE
            if self.active_budget:
                # Corrected D (NodeD): the hop budget, inline (a call costs
                # microseconds on a Pico).
                count -= 1
                if count <= 0:
                    self.count = 0
                    self.has_token = True  # nothing left to search for: T rests here
                    self.state = CHECK
                    return 0
            self.count = count
            return SEND_TOKEN
        # Rule 5.
        self.count = count - 1
        self.state = CHECK
        if self.pending:
            self.has_token = True
            return self._enter()
        if self.count > 0:
            return SEND_TOKEN  # passed straight on
        self.has_token = True  # the check tour is over: T rests here
        return 0

    def exit_cs(self):
        self.in_cs = False
        if self.state == ACTIVE or self.count > 0:
            return self._pass()
        return 0


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
    active_budget = True  # rule 4: see NodeDLiteral.on_token

    def _activate(self):
        self.state = ACTIVE
        self.count = self.n - 1


PROTOCOLS = {
    "s": NodeS,
    "q": NodeQ,
    "d": NodeD,
    "d-literal": NodeDLiteral,
}


def make_node(protocol, index, n):
    try:
        cls = PROTOCOLS[protocol]
    except KeyError:
        raise ValueError("unknown protocol %r (known: s, q, d, d-literal)" % (protocol,))
    return cls(index, n)
