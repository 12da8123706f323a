# The slides' generalisation of the tree algorithm to graphs
# (seeds/token-request-algorithms-slides-de.md, "Verallgemeinerung auf allg. Graphen",
# "Tokenanforderung", "Aufwand und Varianten"; quoted in English where they happen), on
# the ring's message layer: the graph is an option (complete, ring, random:P[:SEED], or a
# tree), the ring is fixed; a message along the edge i -> j is routed over the ring.
#
# "Directed, acyclic and weakly connected ... every directed path shall end at the (unique)
# token holder." The direction of an edge is "a signpost stored in the node it leaves"
# (self.sign[x] = 1: the edge i -> x). Initially: "start an echo from the token holder ...
# a tree directed towards it; every node gets an order number from its height (distance to
# the root) first and a unique second criterion [its index]; edges flow from the higher to
# the lower order number".
#
# Requests and the token as in the tree algorithm (proto_raymond.py: REQ_QUEUE, ASKED, the
# token down the path the requests came, the request combined with the token), with:
#   "Send the request over any outgoing edge (works with every edge; the path to the token
#    differs in length)": here the outgoing edge whose ring distance is shortest.
#   "Rule: when the token moves, ALL outgoing edges of the receiver are reversed", and
#   "all neighbours of the new token holder must be sent a message so that they set their
#    signpost": a FLIP message. The layer sends one message per handler call, so the FLIP
#   visits the neighbours concerned one after another in ring order (each sets its signpost
#   and passes the FLIP on to the next, with the list of those still to visit), and the last
#   sends it back to the new holder: one logical message per neighbour plus one back, at
#   most n hop frames in all (once round the ring). Sent to each directly it would be the
#   same logical messages and up to n - 1 hop frames each.
#   The edge the token came over needs no FLIP: its sender reverses its own signpost as it
#   sends ("the token travels against the arrows ... and reverses every edge it crosses").
# The slides' exercise "must the receipt of all these messages be awaited (acknowledgements!)
# before the token may travel on?": here yes. The token stays at the new holder (it neither
# enters nor passes it on) until its FLIP has come back, so every signpost is set before the
# token moves again and a FLIP never reaches a node after the token has moved past it.
#
# Messages: REQUEST, kind 0, no payload. TOKEN, kind 1: seq u32, epoch u16, more u8 (a
# REQUEST follows). FLIP, kind 2: origin u8, still-to-visit flags u8[n].

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
FLIP = 2
_HEADER = protocol.TOKEN_HEADER  # seq u32, epoch u16
# protocol.py's constants copied for the token's delivered hop: a const() is inlined only in the
# module that defines it (an imported name is a dictionary lookup at every use).
_AT = const(5)  # protocol.PAYLOAD_AT
_TOKEN_HEADER = const(6)  # protocol.TOKEN_HEADER
_SEQ_MASK = const(0x3FFFFFFF)  # protocol.SEQ_MASK
_DISCARDED = const(64)  # protocol.DISCARDED
_OWNER_TOKEN = const(0xFFFF)  # protocol.OWNER_TOKEN
_FLIP = const(2)
if (protocol.PAYLOAD_AT, protocol.TOKEN_HEADER, protocol.SEQ_MASK, protocol.DISCARDED, protocol.OWNER_TOKEN,
        FLIP) != (_AT, _TOKEN_HEADER, _SEQ_MASK, _DISCARDED, _OWNER_TOKEN, _FLIP):
    raise ImportError("%s: constants disagree with protocol.py" % __name__)


class NodeDAG(protocol.QueueNode):
    """Edges of a directed acyclic graph point towards the holder; the token's receiver reverses its out-edges."""

    name = "dag"
    uses_requests = False
    about = {
        "name": "dag",
        "title": "DAG generalisation: requests over any out-edge, the receiver's out-edges reversed (FLIP)",
        "citation": ("seeds/token-request-algorithms-slides-de.md, 'Verallgemeinerung auf allg. Graphen', "
                     "'Tokenanforderung' (rule and invariants), 'Aufwand und Varianten' (signposts, messages)"),
        "exclusion": "hard",
        "rests": True,
        # The most hop times one request takes on a quiet ring (the simulator's horizons): a request over at most n - 1 edges, the token back, and a FLIP round at each token move.
        "horizon": "n*n + n",
        "view": {"requests": True},
        "options": {"graph": "the logical graph: complete | ring | random:P[:SEED] | a tree: binary | path | star "
                             "| tree:random:SEED (default complete)"},
        "messages": {"request": {"kind": REQUEST, "to": "an out-neighbour", "payload": "none"},
                     "token": {"kind": TOKEN, "to": "the head of REQ_QUEUE (a neighbour)",
                               "payload": "seq u32, epoch u16, more u8"},
                     "flip": {"kind": FLIP, "to": "the new holder's former out-neighbours, in turn, then back",
                              "payload": "origin u8, to-visit u8[n]"}},
        "bounds": {
            # The slides give no figure ("Aufwand?"); the measured ones are in docs/bounds.md.
            "logical_per_request": {"paper": None, "checked": None, "where": "slides: 'Aufwand?' (open); docs/bounds.md"},
            "messages_per_request": {"paper": None, "checked": None, "where": "docs/bounds.md"},
            "service_traffic": {"paper": None, "checked": None, "where": "not bounded"},
        },
    }

    def message_sizes(self, n):
        return {REQUEST: 0, TOKEN: _HEADER + 1, FLIP: 1 + n}

    def __init__(self, index, n):
        protocol.QueueNode.__init__(self, index, n)  # REQ_QUEUE: self.queue[0:qlen]
        adj = graphs.graph(self.opts.get("graph", "complete"), n)
        dist = graphs.bfs(adj, self.first)[0]
        key = dist[index] * 256 + index  # the order number: height, then index
        self.sign = bytearray(n)  # sign[x] = 1: the edge index -> x (a signpost here)
        for x in adj[index]:
            if dist[x] * 256 + x < key:
                self.sign[x] = 1
        self.asked = False
        self.flipping = False  # the token is here, its FLIP still out

    def _ask(self):
        """REQUEST over the outgoing edge nearest along the ring."""
        n = self.n
        i = self.index
        for d in range(1, n):
            x = i + d
            if x >= n:
                x -= n
            if self.sign[x]:
                self.asked = True
                return self.send(REQUEST, x)
        self.errors = (self.errors + 1) & SEQ_MASK  # no outgoing edge: cannot happen off the holder
        return 0

    # -- the rules ----------------------------------------------------------------

    def give_token(self):
        Node.give_token(self)
        return 0

    def request(self):
        if self.has_token and not self.flipping and self.qlen == 0:
            return self._enter()  # the holder at rest: 0 messages
        self.pending = True
        self._enqueue(self.index)
        if not self.has_token and not self.asked:
            return self._ask()
        return 0

    @micropython.native
    def on_message(self, kind, src, buf):
        if kind == REQUEST:
            self._enqueue(src)
            if self.has_token:
                if self.in_cs or self.flipping:
                    return 0
                return self._release()
            if not self.asked:
                return self._ask()
            return 0
        if kind == FLIP:
            return self._on_flip(buf)
        return self._take_token(src, buf)

    @micropython.native
    def _take_token(self, src, buf):
        # The helpers' code inline, each named (a method call costs about 11 us on a Pico,
        # get30's 20 us: issue 41). Node.token_gate, recovery's epoch gate:
        epoch = buf[_AT + 4] | (buf[_AT + 5] << 8)
        if self.fresh or epoch != self.known_epoch or self.known_owner != _OWNER_TOKEN:
            epoch = self._gate(epoch)
            if epoch < 0:
                return _DISCARDED
        if self.has_token:
            self.errors = (self.errors + 1) & _SEQ_MASK
            return 0
        self.seq = buf[_AT] | (buf[_AT + 1] << 8) | (buf[_AT + 2] << 16) | ((buf[_AT + 3] & 0x3F) << 24)  # get30
        self.epoch = epoch
        self.has_token = True
        self.asked = False
        if buf[_AT + _TOKEN_HEADER]:
            self._enqueue(src)
        # "When the token moves, all outgoing edges of the receiver are reversed": every
        # signpost here goes; the neighbours at their other ends get a FLIP, except the
        # sender, which reversed its own as it sent.
        sign = self.sign
        out = self.out
        for x in range(self.n):
            out[1 + x] = 0
            if sign[x]:
                sign[x] = 0
                if x != src:
                    out[1 + x] = 1
        first = self._take_next_marked()
        if first < 0:
            return self._proceed()
        self.flipping = True
        out[0] = self.index
        return self.send(_FLIP, first)

    def _on_flip(self, buf):
        origin = buf[AT]
        i = self.index
        if origin == i:
            # The FLIP is back: every former out-neighbour has set its signpost to here.
            self.flipping = False
            return self._proceed()
        self.sign[origin] = 1  # the edge index -> origin now
        n = self.n
        out = self.out
        out[0] = origin
        for x in range(n):
            out[1 + x] = buf[AT + 1 + x]
        nxt = self._take_next_marked()
        return self.send(FLIP, origin if nxt < 0 else nxt)

    @micropython.native
    def _take_next_marked(self):
        """The first node clockwise after this one still marked in the FLIP's list (self.out),
        unmarked; -1 if none is left."""
        out = self.out
        n = self.n
        i = self.index
        for d in range(1, n):
            x = i + d
            if x >= n:
                x -= n
            if out[1 + x]:
                out[1 + x] = 0
                return x
        return -1

    @micropython.native
    def _proceed(self):
        """The token settled here: to REQ_QUEUE's head (this node: enter)."""
        if self.qlen == 0:
            return 0
        h = self._dequeue()
        if h == self.index:
            return self._enter()
        return self._give(h)

    @micropython.native
    def exit_cs(self):
        self.in_cs = False
        return self._release()

    @micropython.native
    def _release(self):
        if self.qlen == 0:
            return 0
        return self._give(self._dequeue())

    @micropython.native
    def _give(self, h):
        # "The token travels against the arrows to the requester and reverses every edge it
        # crosses": h -> here becomes here -> h.
        self.sign[h] = 1
        return self.send_token(TOKEN, h)

    def _regenerate(self):
        # Deviation: as proto_raymond's: right for the ring's first token only.
        self._new_token()
        self.asked = False
        return self._proceed()

    def on_request_again(self, origin=-1):
        return 0
