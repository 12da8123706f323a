# Naimi and Trehel's path reversal (1987), named by the slides
# (seeds/token-request-algorithms-slides-de.md, "Der O(log n)-Algorithmus": "Ähnliches
# Verfahren auch von Naimi / Trehel (1987)") but not spelled out there. The rules are the
# published algorithm's: M. Naimi, M. Trehel, A. Arnold, "A log(N) distributed mutual
# exclusion algorithm based on path reversal", J. Parallel Distrib. Comput. 34(1), 1996,
# doi:10.1006/jpdc.1996.0041, whose abstract says "When a process invokes a critical
# section, it sends a request to the tail of a queue. A dynamical rooted tree gives the path
# to this tail. The algorithm requires only O(Log(n)) messages on average" (abstract as
# indexed at citegraph.io/paper/53e99fc9b7602d97028a6fcd; the paper's body was not read
# here: the rules below are the algorithm as it is commonly stated, with last and next).
#
# State of process i:
#   last  the probable owner (the tree's father): where i sends or forwards a request;
#         NIL (0xFF) at the root, the tail of the queue
#   next  the process to get the token after i (the queue's next link), NIL if none
# Rules:
#   request: if last = NIL: i holds the token: enter. Else send REQUEST(i) to last,
#            last := NIL (i becomes the root, the queue's new tail)
#   REQUEST(j) arrives at i: if last = NIL (i is the root):
#                              if i wants or uses the token: next := j
#                              else: send the token to j
#                            else: forward REQUEST(j) to last
#                            then last := j (path reversal)
#   exit:    if next != NIL: send the token to next, next := NIL
# Initially every last points at the first holder (the holder option, 0 by default).
#
# Messages: REQUEST, kind 0: the requester j u8 (the sender is the frame's src, which may
# be a forwarder). TOKEN, kind 1: seq u32 (30 bits), epoch u16 (the layer's token header).
# On the ring a message from i to last is routed: (last - i) mod n hop frames.

try:
    import micropython
except ImportError:  # CPython

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
AT = protocol.PAYLOAD_AT
SEQ_MASK = protocol.SEQ_MASK
get30 = protocol.get30

REQUEST = 0
TOKEN = 1
_HEADER = protocol.TOKEN_HEADER  # seq u32, epoch u16
NIL = 0xFF


class NodeNT(Node):
    """Naimi-Trehel: requests to the probable owner (last), path reversal, a distributed queue (next)."""

    name = "nt"
    uses_requests = False  # no again frames (no recovery of lost requests here)
    about = {
        "name": "nt",
        "title": "Naimi-Trehel: requests along last to the queue's tail, path reversal, next",
        "citation": ("Naimi, Trehel 1987; Naimi, Trehel, Arnold, J. Parallel Distrib. Comput. 34(1) 1996, "
                     "doi:10.1006/jpdc.1996.0041 (named by seeds/token-request-algorithms-slides-de.md)"),
        "exclusion": "hard",
        "rests": True,
        # The most hop times one request takes on a quiet ring (the simulator's horizons): at most n - 1 forwards and the token, each at most n - 1 hops.
        "horizon": "n*n",
        "view": {"requests": True},
        "messages": {"request": {"kind": REQUEST, "to": "last (forwarded)", "payload": "requester u8"},
                     "token": {"kind": TOKEN, "to": "next", "payload": "seq u32, epoch u16"}},
        "bounds": {
            # A request is forwarded at most n - 1 times, then one token: n logical messages
            # (the O(log n) is an average, docs/bounds.md, not a bound).
            "logical_per_request": {"paper": "n", "checked": "n",
                                    "where": "path of last pointers (at most n - 1 forwards) + 1 token; "
                                             "docs/bounds.md"},
            "messages_per_request": {"paper": None, "checked": "n*(n - 1)",
                                     "where": "each of the n logical messages at most n - 1 hops (docs/bounds.md)"},
            "service_traffic": {"paper": None, "checked": None, "where": "not bounded"},
        },
    }

    def message_sizes(self, n):
        return {REQUEST: 1, TOKEN: _HEADER}

    def __init__(self, index, n):
        Node.__init__(self, index, n)
        self.last = NIL if index == self.first else self.first
        self.next = NIL

    def give_token(self):
        Node.give_token(self)
        self.last = NIL
        return 0

    def request(self):
        if self.last == NIL and self.has_token:
            return self._enter()  # the root holds the unused token: 0 messages
        self.pending = True
        if self.last == NIL:
            return 0  # the root waits for the token already on its way (it asked before)
        # "sends a request to the tail of a queue": to last, which may forward it
        self.out[0] = self.index
        dst = self.last
        self.last = NIL
        return self.send(REQUEST, dst)

    @micropython.native
    def on_message(self, kind, src, buf):
        if kind == REQUEST:
            j = buf[AT]
            if self.last == NIL:
                self.last = j  # path reversal: j is the new root
                if self.pending or self.in_cs:
                    self.next = j  # j is served after this node
                    return 0
                if not self.has_token:
                    self.errors = (self.errors + 1) & SEQ_MASK  # a root neither waiting nor holding
                    return 0
                return self._give(j)  # the idle root sends the token
            dst = self.last
            self.last = j  # path reversal
            self.out[0] = j
            return self.send(REQUEST, dst)
        # TOKEN
        epoch = self.token_gate(buf)  # recovery's epoch gate (protocol.Node)
        if epoch < 0:
            return protocol.DISCARDED
        if self.has_token:
            self.errors = (self.errors + 1) & SEQ_MASK
            return 0
        self.seq = get30(buf, AT)
        self.epoch = epoch
        self.has_token = True
        if self.pending:
            return self._enter()
        # Not in a fault-free ring: the token comes only to a requester. Pass it on if asked.
        return self._release()

    @micropython.native
    def exit_cs(self):
        self.in_cs = False
        return self._release()

    @micropython.native
    def _release(self):
        if self.next == NIL:
            return 0  # the token rests here (this node is the root, or will be asked)
        j = self.next
        self.next = NIL
        return self._give(j)

    @micropython.native
    def _give(self, j):
        self.has_token = False
        self.put_token_header()
        return self.send(TOKEN, j)

    def _regenerate(self):
        # Deviation: a token made here is right for the ring's first token (every last
        # points here); after a lost token the others' last pointers lead to where it was
        # lost: the recovery's liveness is not given for this protocol (its safety is).
        self._new_token()
        self.last = NIL
        if self.pending:
            return self._enter()
        return self._release()

    def on_request_again(self, origin=-1):
        return 0
