# Protocol S of Feuerstein et al. (1997), section 2: the circulating token.
# Rule from the seed text (section 2): "a processor receiving the token either enters
# the critical section or passes it on". Messages: the token frame (frame.TOKEN:
# count, state, seq, epoch) to the next node; no request messages. Token payload:
# count and state unused, seq the entry number, epoch the recovery generation.
# Deviation: the recovery rules of protocol.Node (docs/recovery.md), not in the paper.

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
_DISCARDED = const(64)  # protocol.DISCARDED
_SEQ_MASK = const(0x3FFFFFFF)  # protocol.SEQ_MASK
if (protocol.SEND_TOKEN, protocol.DISCARDED, protocol.SEQ_MASK) != (
        _SEND_TOKEN, _DISCARDED, _SEQ_MASK):
    raise ImportError("%s: constants disagree with protocol.py" % __name__)

CITATION = ("Feuerstein, Leonardi, Marchetti-Spaccamela, Santoro: Efficient Token-Based Control in Rings "
            "(1997); seeds/feuerstein-1997-efficient-token-control-in-rings.md")


class NodeS(Node):
    """S: the classic circulating token (section 2, "hot potato").

    A processor receiving the token either enters the critical section or
    passes it on; the token never rests, so S sends no request messages.
    """

    name = "s"
    about = {
        "name": "s",
        "title": "S: the circulating token",
        "citation": CITATION + ", section 2",
        "exclusion": "hard",
        "rests": False,  # S's token never rests (Thm 2.1): runs stop at an idle horizon
        "positions": False,  # no rule reads a node's index: a ring's rotation is a symmetry (the explorer)
        # The dashboard (host): the token frame's fields to show, request frames, a per-node flag.
        "view": {},
        "messages": {"token": "frame.TOKEN to the next node"},
        "bounds": {  # Thm 2.1: unbounded; reported, never checked
            "messages_per_request": {"paper": None, "checked": None, "where": "Thm 2.1 (unbounded)"},
            "service_traffic": {"paper": None, "checked": None, "where": "Thm 2.1 (unbounded)"},
        },
    }
    uses_requests = False

    def give_token(self):
        Node.give_token(self)
        return self._pass()

    def request(self):
        self.pending = True
        return 0

    @micropython.native
    def on_request(self):
        self.errors = (self.errors + 1) & _SEQ_MASK  # S has no request messages
        return 0

    @micropython.native
    def on_token(self, count, state, seq, epoch):
        if epoch != self.open_epoch:
            epoch = self._gate(epoch)  # else _gate would change nothing: not called (hot path)
            if epoch < 0:
                return _DISCARDED
        if self.has_token:
            self.errors = (self.errors + 1) & _SEQ_MASK  # a second token: dropped, never acted on
            return 0
        self.count = count
        self.state = state
        self.seq = seq
        self.epoch = epoch
        if self.pending:
            self.has_token = True
            return self._enter()
        return _SEND_TOKEN  # passed straight on

    @micropython.native
    def exit_cs(self):
        self.in_cs = False
        return self._pass()

    def _regenerate(self):
        self._new_token()
        if self.pending:
            return self._enter()
        return self._pass()  # S's token never rests
