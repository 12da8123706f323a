# Raymond's tree algorithm (van de Snepscheut 1987, Raymond 1989), as the slides sketch it
# (seeds/token-request-algorithms-slides-de.md, "Der O(log n)-Algorithmus" and "Skizze des
# Algorithmus" (1) and (2); the rules quoted in English where they happen), on the ring's
# message layer (protocol.py): the logical tree is an option, the ring is fixed. A message
# along the tree edge i -> j is routed over the ring: (j - i) mod n hop frames, one logical
# message. Up and back along one edge is therefore n hop frames, whatever the edge.
#
# Messages: REQUEST, kind 0, no payload (the sender, a neighbour, is the frame's src).
# TOKEN, kind 1: seq u32 (30 bits), epoch u16 (the layer's token header), more u8: 1 when a
# REQUEST from the sender follows it (the slides' "Optimierung: Token und request
# zusammenfassen": the layer sends one message per handler call, and this combination is
# the slides' own way to send both).
#
# State of P_i, as the slides name it:
#   HOLDER     self.holder: this node's index ('self') or the neighbour towards the token
#   ASKED      self.asked: a REQUEST has been sent towards HOLDER
#   REQ_QUEUE  self.queue[0:qlen]: FIFO of neighbours' indices or this node's ('self'),
#              0xFF beyond qlen (a neighbour is at most once in it: it asks again only
#              after the token came from here)
#
# "Einige Details müssten in naheliegender Weise ergänzt werden" (some details must be
# filled in the obvious way). Filled here, each marked "Gap:" where it happens:
#   - the idle holder that receives a REQUEST gives the token away at once ("P_j hat Token
#     und möchte es loswerden"), as at the end of its critical section;
#   - ASKED := false when the token arrives (it answers this node's REQUEST), and when it
#     is passed on with REQ_QUEUE empty; without it a node that forwarded the token for
#     another keeps ASKED = true and never asks again (its later requests wait forever).
#   - the holder at rest that wants the critical section enters it (0 messages).
# The slides' fairness question ("Garantiert 'FIFO'-Eigenschaft der Warteschlange
# Fairness?"): the token goes where REQ_QUEUE's head says, strictly FIFO, never "first
# used here" (the lift algorithm the slides mention is not taken).
# "request überholt Token": a TOKEN and a REQUEST from the same node to the same neighbour
# travel the same wires in order (the ring is FIFO per wire), and the combined TOKEN above
# carries its REQUEST; requests from other neighbours may reach a node before the token
# does, which the rules handle (they are queued, ASKED is true). The explorer covers every
# interleaving (tests/test_tree_protocols.py).

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
    from . import graphs
except ImportError:
    import protocol  # a board: firmware modules side by side
    import graphs

Node = protocol.Node
AT = protocol.PAYLOAD_AT
SEQ_MASK = protocol.SEQ_MASK
get30 = protocol.get30

REQUEST = 0
TOKEN = 1
_HEADER = protocol.TOKEN_HEADER  # seq u32, epoch u16
# protocol.py's constants, and the names above, copied for the code below: a const() is inlined
# only in the module that defines it (an imported name is a dictionary lookup at every use).
_REQUEST = const(0)
_TOKEN = const(1)
_AT = const(5)  # protocol.PAYLOAD_AT
_TOKEN_HEADER = const(6)  # protocol.TOKEN_HEADER
_SEQ_MASK = const(0x3FFFFFFF)  # protocol.SEQ_MASK
_DISCARDED = const(64)  # protocol.DISCARDED
_SEND_MSG = const(128)  # protocol.SEND_MSG
_QUEUE_EMPTY = const(0xFF)  # protocol.QUEUE_EMPTY
if (REQUEST, TOKEN, protocol.PAYLOAD_AT, protocol.TOKEN_HEADER, protocol.SEQ_MASK, protocol.DISCARDED,
        protocol.SEND_MSG, protocol.QUEUE_EMPTY) != (
        _REQUEST, _TOKEN, _AT, _TOKEN_HEADER, _SEQ_MASK, _DISCARDED, _SEND_MSG, _QUEUE_EMPTY):
    raise ImportError("%s: constants disagree with protocol.py" % __name__)


def pass_header_py(buf, at, out, epoch):
    """A token passed on: its header as it came (seq, 30 bits, in buf[at:at + 4]) with the epoch
    it goes on with, into out[0:6] (put_token_header's layout). Returns seq (get30's)."""
    s0 = buf[at]
    s1 = buf[at + 1]
    s2 = buf[at + 2]
    s3 = buf[at + 3] & 0x3F
    out[0] = s0
    out[1] = s1
    out[2] = s2
    out[3] = s3
    out[4] = epoch & 0xFF
    out[5] = (epoch >> 8) & 0xFF
    return s0 | (s1 << 8) | (s2 << 16) | (s3 << 24)


# Its viper twin (tests/test_proto_twins.py): in native code each subscript and int operation is a
# call into the runtime (1 to 2 us on a Pico: this header took about 30 us of a tree hop that cost
# 1.28 times S's token hop, issue 41). Here, not in protocol.py, which every board loads.
pass_header = pass_header_py
try:
    @micropython.viper
    def pass_header_viper(buf, at: int, out, epoch: int) -> int:
        b = ptr8(buf)
        o = ptr8(out)
        s0 = b[at]
        s1 = b[at + 1]
        s2 = b[at + 2]
        s3 = b[at + 3] & 0x3F
        o[0] = s0
        o[1] = s1
        o[2] = s2
        o[3] = s3
        o[4] = epoch & 0xFF
        o[5] = (epoch >> 8) & 0xFF
        return s0 | (s1 << 8) | (s2 << 16) | (s3 << 24)

    pass_header = pass_header_viper
except (AttributeError, NameError, SyntaxError, ValueError):
    pass  # CPython, or a port without the viper emitter: the Python twin


class NodeRaymond(protocol.QueueNode):
    """Raymond's tree: requests up the tree towards HOLDER, the token down, edges reversed."""

    name = "raymond"
    uses_requests = False  # no again frames: a lost request is not re-announced (no recovery here)
    about = {
        "name": "raymond",
        "title": "Raymond's tree: _REQUEST towards HOLDER, REQ_QUEUE per node, the token down the tree",
        "citation": ("van de Snepscheut 1987, Raymond 1989, as sketched by the slides "
                     "seeds/token-request-algorithms-slides-de.md, 'Skizze des Algorithmus' (1), (2)"),
        "exclusion": "hard",
        "rests": True,
        # The most hop times one request takes on a quiet ring (the simulator's horizons): requests up at most D edges and the token down: D*n hop times.
        "horizon": "D*n",  # the unused token stays at the last holder
        "view": {"requests": True},
        "options": {"tree": "the logical tree: binary | path | star | random:SEED (default binary)"},
        "messages": {"request": {"kind": _REQUEST, "to": "HOLDER (a tree neighbour)", "payload": "none"},
                     "token": {"kind": _TOKEN, "to": "the head of REQ_QUEUE (a tree neighbour)",
                               "payload": "seq u32, epoch u16, more u8 (a _REQUEST follows)"}},
        "bounds": {
            # "typischerweise O(log n) Einzelnachrichten, um den Tokenbesitzer zu erreichen";
            # requests up a path of at most D edges, the token down it (D = the tree's diameter).
            "logical_per_request": {"paper": "2*D", "checked": "2*D",
                                    "where": "requests up the tree path, the token down it (Raymond 1989); "
                                             "docs/bounds.md"},
            # Each tree edge up and back is n hop frames on the ring: at most D*n per request.
            "messages_per_request": {"paper": None, "checked": "D*n",
                                     "where": "an edge there and back is n hop frames on the ring (docs/bounds.md)"},
            "service_traffic": {"paper": None, "checked": None, "where": "not bounded by the slides"},
        },
    }

    @classmethod
    def bound_names(cls, n):
        return {"D": graphs.diameter(graphs.tree(cls.opts.get("tree", "binary"), n))}

    def message_sizes(self, n):
        return {_REQUEST: 0, _TOKEN: _TOKEN_HEADER + 1}

    def __init__(self, index, n):
        protocol.QueueNode.__init__(self, index, n)  # REQ_QUEUE: self.queue[0:qlen]
        adj = graphs.tree(self.opts.get("tree", "binary"), n)
        # Initially every HOLDER points along the tree towards the first holder (self there).
        self.holder = graphs.bfs(adj, self.first)[1][index]
        self.asked = False

    # -- the rules ----------------------------------------------------------------

    def give_token(self):
        Node.give_token(self)
        self.holder = self.index
        return 0

    def request(self):
        if self.has_token:
            return self._enter()  # Gap: the holder at rest enters at once, 0 messages
        self.pending = True
        # "P_j möchte Token, hat es jedoch nicht: Füge 'self' an REQ_QUEUE an;
        #  if not ASKED then send _REQUEST to HOLDER; ASKED := true"
        self._enqueue(self.index)
        if not self.asked:
            self.asked = True
            return self.send(_REQUEST, self.holder)
        return 0

    @micropython.native
    def on_message(self, kind, src, buf):
        if kind == _REQUEST:
            # "P_j empfängt _REQUEST von P_i: Füge 'P_i' an REQ_QUEUE an;
            #  if not ASKED and HOLDER != self then send _REQUEST to HOLDER; ASKED := true"
            self._enqueue(src)
            if self.holder == self.index:
                if self.in_cs or not self.has_token:
                    return 0
                return self._release()  # Gap: the idle holder gives the token away at once
            if not self.asked:
                self.asked = True
                return self.send(_REQUEST, self.holder)
            return 0
        # _TOKEN: its hop through a tree node written out here, the helpers' code inline (a
        # method call costs about 11 us on a Pico, get30's 20 us; issue 41: this hop cost 1.64
        # times S's; on a board on_message_viper, below, takes that hop and hands the rest
        # here). Each inlined piece names its helper: Node.token_gate, get30,
        # QueueNode._enqueue and _dequeue, _give's QueueNode.send_token, put_token_header, send.
        epoch = buf[_AT + 4] | (buf[_AT + 5] << 8)  # token_gate: recovery's epoch gate
        if epoch != self.open_epoch:
            epoch = self._gate(epoch)
            if epoch < 0:
                return _DISCARDED
        if self.has_token:
            self.errors = (self.errors + 1) & _SEQ_MASK  # a second token: dropped
            return 0
        self.epoch = epoch
        # (seq, has_token := true and ASKED := false, Gap: the token answers this node's
        # _REQUEST, are set below where the token stays here: a token passed on sets seq with its
        # header, has_token stays false and ASKED follows the flag.)
        q = self.queue
        qlen = self.qlen
        if buf[_AT + _TOKEN_HEADER]:
            # The _REQUEST combined with the token: queued behind what this node already has
            # (it cannot be REQ_QUEUE's head: this node asked, so its queue is not empty).
            if qlen == self.n:  # _enqueue
                self.errors = (self.errors + 1) & _SEQ_MASK  # cannot happen: each node at most once
            else:
                q[qlen] = src
                qlen += 1  # (self.qlen is written by the dequeue below: qlen > 0 now)
        if qlen == 0:
            # Not in a fault-free ring (the token comes only where it was asked for).
            self.seq = buf[_AT] | (buf[_AT + 1] << 8) | (buf[_AT + 2] << 16) | ((buf[_AT + 3] & 0x3F) << 24)  # get30
            self.has_token = True
            self.asked = False
            self.holder = self.index
            return 0
        # "P_j empfängt Token von P_k: HOLDER := dequeue(REQ_QUEUE);
        #  if HOLDER = self then <kritischer Abschnitt>
        #  else send _TOKEN to HOLDER; if |REQ_QUEUE| > 0 then send _REQUEST to HOLDER; ASKED := true"
        h = q[0]  # _dequeue
        k = 1
        while k < qlen:
            q[k - 1] = q[k]
            k += 1
        qlen -= 1
        q[qlen] = _QUEUE_EMPTY
        self.qlen = qlen
        self.holder = h
        if h == self.index:
            self.seq = buf[_AT] | (buf[_AT + 1] << 8) | (buf[_AT + 2] << 16) | ((buf[_AT + 3] & 0x3F) << 24)  # get30
            self.has_token = True
            self.asked = False
            return self._enter()
        # _give: send_token, the _REQUEST combined when REQ_QUEUE is not empty (ASKED := true
        # with it; Gap: false without it). (has_token is still false: it was, see above.)
        out = self.out
        self.seq = pass_header(buf, _AT, out, epoch)  # get30 and put_token_header
        if qlen:
            out[_TOKEN_HEADER] = 1
            self.asked = True
        else:
            out[_TOKEN_HEADER] = 0
            self.asked = False
        self.out_kind = _TOKEN  # send
        self.out_dst = h
        self.out_len = _TOKEN_HEADER + 1  # msg_sizes[_TOKEN] (message_sizes: fixed)
        return _SEND_MSG

    @micropython.native
    def exit_cs(self):
        self.in_cs = False
        return self._release()

    @micropython.native
    def _release(self):
        # "P_j hat Token und möchte es loswerden: if |REQ_QUEUE| > 0 then
        #  HOLDER := dequeue(REQ_QUEUE); send _TOKEN to HOLDER;
        #  if |REQ_QUEUE| > 0 then send _REQUEST to HOLDER else ASKED := false"
        if self.qlen == 0:
            return 0  # the token rests here
        h = self._dequeue()
        self.holder = h
        return self._give(h)

    @micropython.native
    def _give(self, h):
        """_TOKEN to neighbour h, with the _REQUEST combined when REQ_QUEUE is not empty
        (ASKED := true with the _REQUEST; Gap: false without it)."""
        return self.send_token(_TOKEN, h)

    # -- recovery (protocol.Node) -------------------------------------------------

    def _regenerate(self):
        # Deviation: the tree's pointers cannot be rebuilt from one node. A token made here
        # is right for the ring's first token (the first holder's claim, every HOLDER
        # pointing here); after a lost token the others still point to where it was lost,
        # and their requests wait there: the recovery's liveness is not given for this
        # protocol (its safety is: one token, by epochs).
        self._new_token()
        self.holder = self.index
        self.asked = False
        if self.qlen == 0:
            return 0
        return self._serve()

    def _serve(self):
        h = self._dequeue()
        self.holder = h
        if h == self.index:
            return self._enter()
        return self._give(h)

    def on_request_again(self, origin=-1):
        return 0  # no again frames (uses_requests is False): nothing to forward


# The tree hop on a board: NodeRaymond.on_message in viper for the token that a tree node takes in
# and sends down at once, the native method (its twin, which CPython, the simulator and the
# explorer run) for every other case.
on_message_native = NodeRaymond.on_message
try:
    @micropython.viper
    def on_message_viper(self, kind, src, buf) -> int:
        # A TOKEN that keeps the layer's gate quiet (not fresh, the epoch and key known), finds
        # no token here and leaves REQ_QUEUE's head a neighbour: "HOLDER := dequeue(REQ_QUEUE);
        # send TOKEN to HOLDER", taken whole here, where the payload's bytes, the queue's shift
        # and the comparisons are machine words (in native code each subscript, comparison or
        # operator is a runtime call of about a microsecond on a Pico, and pass_header a call of
        # about ten; issue 41: this hop cost 1.12 of S's). The state it leaves and the bytes it
        # writes are on_message_native's (tests/test_hop_twins.py runs both); the attributes are
        # read in another order (reading one has no side effect), and nothing is written before
        # the hop is known to be this case. Everything else goes to the native method.
        b = ptr8(buf)
        if int(kind) == _TOKEN and not self.has_token:
            epoch = b[_AT + 4] | (b[_AT + 5] << 8)
            if epoch == int(self.open_epoch):  # (protocol.sync_gate)
                q = ptr8(self.queue)
                qlen = int(self.qlen)
                index = int(self.index)
                more = b[_AT + _TOKEN_HEADER]
                h = index  # (the token stays here: the native method's case)
                if qlen:
                    h = q[0]
                elif more:
                    h = int(src)  # (cannot happen: a node that asked has a queue)
                if h == index and qlen == 0:
                    # The token taken in where nobody waits (qlen == 0 with no REQUEST combined:
                    # not in a fault-free ring, but the hop the chip bench delivers a token on):
                    # kept here, as the native method does, where handing it over would cost a
                    # call and the checks twice.
                    self.epoch = epoch
                    self.seq = b[_AT] | (b[_AT + 1] << 8) | (b[_AT + 2] << 16) | ((b[_AT + 3] & 0x3F) << 24)
                    self.has_token = True
                    self.asked = False
                    self.holder = index
                    return 0
                if h != index and not (more and qlen == int(self.n)):
                    self.epoch = epoch
                    if more:  # the REQUEST combined with the token (_enqueue)
                        q[qlen] = int(src)
                        qlen += 1
                    k = 1  # _dequeue
                    while k < qlen:
                        q[k - 1] = q[k]
                        k += 1
                    qlen -= 1
                    q[qlen] = _QUEUE_EMPTY
                    self.qlen = qlen
                    self.holder = h
                    o = ptr8(self.out)  # pass_header: seq as it came, the epoch it goes on with
                    s0 = b[_AT]
                    s1 = b[_AT + 1]
                    s2 = b[_AT + 2]
                    s3 = b[_AT + 3] & 0x3F
                    o[0] = s0
                    o[1] = s1
                    o[2] = s2
                    o[3] = s3
                    o[4] = epoch & 0xFF
                    o[5] = (epoch >> 8) & 0xFF
                    self.seq = s0 | (s1 << 8) | (s2 << 16) | (s3 << 24)
                    if qlen:  # the REQUEST combined, ASKED := true (Gap: false without it)
                        o[_TOKEN_HEADER] = 1
                        self.asked = True
                    else:
                        o[_TOKEN_HEADER] = 0
                        self.asked = False
                    self.out_kind = _TOKEN  # send
                    self.out_dst = h
                    self.out_len = _TOKEN_HEADER + 1
                    return _SEND_MSG
        return int(on_message_native(self, kind, src, buf))

    NodeRaymond.on_message = on_message_viper
except (AttributeError, NameError, SyntaxError, ValueError):
    pass  # CPython, or a port without the viper emitter: the native (or plain) method
