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
SEQ_MASK = protocol.SEQ_MASK

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
_FLIP = const(2)
_REQUEST = const(0)
_SEND_MSG = const(128)  # protocol.SEND_MSG
if (protocol.PAYLOAD_AT, protocol.TOKEN_HEADER, protocol.SEQ_MASK, protocol.DISCARDED,
        FLIP, REQUEST, protocol.SEND_MSG) != (_AT, _TOKEN_HEADER, _SEQ_MASK, _DISCARDED, _FLIP, _REQUEST,
                                              _SEND_MSG):
    raise ImportError("%s: constants disagree with protocol.py" % __name__)


def flip_marks_py(sign, out, i, n, src):
    """The token's receiver i reverses its out-edges: every signpost sign[x] cleared, and each
    neighbour at the other end of one, but the token's sender src (which reversed its own as it
    sent), marked in the FLIP's list (out[1 + x] = 1: still to visit; 0 elsewhere), except the
    first of them clockwise after i, which is returned (the FLIP goes there first) unmarked; -1
    when there is none. One pass round the ring from i (a pass over the signposts, then a search
    for the first mark as pass_flip's, did it in two)."""
    first = -1
    x = i
    for _ in range(n):
        out[1 + x] = 0
        if sign[x]:
            sign[x] = 0
            if x != src:
                if first < 0 and x != i:
                    first = x
                else:
                    out[1 + x] = 1
        x += 1
        if x == n:
            x = 0
    return first


def pass_flip_py(buf, at, out, i, n):
    """A FLIP passed on at node i: its list (buf[at + 1:at + 1 + n], the payload after the origin)
    into out[1:1 + n], and the first node clockwise after i still marked in it unmarked and
    returned (the FLIP's next stop); -1 when none is left."""
    for x in range(n):
        out[1 + x] = buf[at + 1 + x]
    x = i
    for _ in range(n - 1):
        x += 1
        if x == n:
            x = 0
        if out[1 + x]:
            out[1 + x] = 0
            return x
    return -1


# Their viper twins (tests/test_proto_twins.py): every subscript and int operation of native code
# is a call into the runtime (about 0.6 us each on a Pico), a machine instruction in viper (issue
# 41: the delivered hops, the token's and the FLIP's, cost 1.26 times S's token hop). Here, not in
# protocol.py, which every board loads.
flip_marks = flip_marks_py
pass_flip = pass_flip_py
try:
    @micropython.viper
    def flip_marks_viper(sign, out, i: int, n: int, src: int) -> int:
        s = ptr8(sign)
        o = ptr8(out)
        first = -1
        x = i
        k = 0
        while k < n:
            o[1 + x] = 0
            if s[x]:
                s[x] = 0
                if x != src:
                    if first < 0 and x != i:
                        first = x
                    else:
                        o[1 + x] = 1
            x += 1
            if x == n:
                x = 0
            k += 1
        return first

    @micropython.viper
    def pass_flip_viper(buf, at: int, out, i: int, n: int) -> int:
        b = ptr8(buf)
        o = ptr8(out)
        x = 0
        while x < n:
            o[1 + x] = b[at + 1 + x]
            x += 1
        x = i
        k = 1
        while k < n:
            k += 1
            x += 1
            if x == n:
                x = 0
            if o[1 + x]:
                o[1 + x] = 0
                return x
        return -1

    flip_marks = flip_marks_viper
    pass_flip = pass_flip_viper
except (AttributeError, NameError, SyntaxError, ValueError):
    pass  # CPython, or a port without the viper emitter: the Python twin


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
        if kind == _REQUEST:
            self._enqueue(src)
            if self.has_token:
                if self.in_cs or self.flipping:
                    return 0
                return self._release()
            if not self.asked:
                return self._ask()
            return 0
        if kind == _FLIP:
            # A FLIP (was _on_flip: a call less on its hop).
            origin = buf[_AT]
            if origin == self.index:
                # The FLIP is back: every former out-neighbour has set its signpost to here.
                self.flipping = False
                if self.qlen == 0:
                    return 0  # (_proceed's first test: nobody waits, the token rests here)
                return self._proceed()
            self.sign[origin] = 1  # the edge index -> origin now
            out = self.out
            out[0] = origin
            nxt = pass_flip(buf, _AT, out, self.index, self.n)
            self.out_kind = _FLIP  # send
            self.out_dst = origin if nxt < 0 else nxt
            self.out_len = self.msg_sizes[_FLIP]
            return _SEND_MSG
        # The TOKEN: its delivered hop written out here, the helpers' code inline, each named (a
        # method call costs about 11 us on a Pico, get30's 20 us: issue 41). Node.token_gate,
        # recovery's epoch gate:
        epoch = buf[_AT + 4] | (buf[_AT + 5] << 8)
        if epoch != self.open_epoch:
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
        # sender, which reversed its own as it sent (flip_marks: the FLIP's list, its first stop).
        out = self.out
        first = flip_marks(self.sign, out, self.index, self.n, src)
        if first < 0:
            return self._proceed()
        self.flipping = True
        out[0] = self.index
        self.out_kind = _FLIP  # send
        self.out_dst = first
        self.out_len = self.msg_sizes[_FLIP]
        return _SEND_MSG

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
