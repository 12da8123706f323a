# A toy protocol of the layer, for its tests (not from a seed): requests are broadcast,
# the token is sent straight to a requester by index. It exercises the three ways to
# send (protocol.py): a broadcast goes once round the ring and is delivered to every
# other node; the token travels d hops and wakes only its addressee.
#
# After Suzuki and Kasami's broadcast algorithm (seeds/suzuki-kasami-broadcast-slides.md):
#   RN[j]  at every node, the highest request number heard from node j
#   LN[j]  in the token, the request number of node j's last critical section
#   request: RN[i] += 1, broadcast REQUEST(i, RN[i]); the holder at rest sends the token
#            to i when RN[i] = LN[i] + 1
#   exit:    LN[i] = RN[i]; the token goes to the next node j with RN[j] = LN[j] + 1
# Deviation (a toy): the next requester is the first in ring order after the holder, not
# the head of the token's queue, so the token carries LN but no queue; request numbers
# are 8-bit serial numbers (a node has at most one request outstanding).
# Messages: REQUEST (kind 0): sn u8, to all. TOKEN (kind 1): seq u32 (30 bits), epoch u16
# (the layer's token header: event records and the recovery gate read them), LN[n] u8,
# to one node. Recovery: protocol.Node's (claims; an again frame reaches the holder,
# which sends the token to its origin).

try:
    from . import protocol  # the host: picoring.firmware.proto_*
except ImportError:
    import protocol  # a board: firmware modules side by side
Node = protocol.Node
BROADCAST = protocol.BROADCAST
AT = protocol.PAYLOAD_AT

REQUEST = 0
TOKEN = 1
_HEADER = protocol.TOKEN_HEADER  # seq u32, epoch u16


class NodeToy(Node):
    """Broadcast requests, the token sent straight to a requester (a test protocol)."""

    name = "toy"
    about = {
        "name": "toy",
        "title": "toy: broadcast requests, the token sent to a requester by index",
        "citation": ("picoring's layer test protocol, not from a seed; after Suzuki and Kasami's broadcast "
                     "algorithm (seeds/suzuki-kasami-broadcast-slides.md), the next requester in ring order"),
        "exclusion": "hard",
        "rests": True,  # at rest at the last holder when nobody waits
        # The dashboard (host): a req→ row (its request messages' hop frames per link), no flag.
        "view": {"requests": True},
        # Its token and requests are messages of the layer: their kinds tell the host (the
        # dashboard) which message frames carry the token and which the requests.
        "messages": {"request": {"kind": REQUEST, "to": "all", "payload": "sn u8"},
                     "token": {"kind": TOKEN, "to": "a requester", "payload": "seq u32, epoch u16, LN[n] u8"}},
        "bounds": {
            # One broadcast and at most one token message per request: 2 logical messages;
            # on the ring n hop frames for the broadcast and at most n - 1 for the token.
            "logical_per_request": {"paper": None, "checked": "2", "where": "rules above (toy)"},
            "messages_per_request": {"paper": None, "checked": "2*n - 1", "where": "rules above (toy)"},
            "service_traffic": {"paper": None, "checked": None, "where": "not bounded here"},
        },
    }

    def message_sizes(self, n):
        return {REQUEST: 1, TOKEN: _HEADER + n}

    def __init__(self, index, n):
        Node.__init__(self, index, n)
        self.rn = bytearray(n)
        self.ln = bytearray(n)  # the token's LN while it is here (a copy kept after it left)

    def request(self):
        if self.has_token:
            return self._enter()
        self.pending = True
        i = self.index
        self.rn[i] = (self.rn[i] + 1) & 0xFF
        self.out[0] = self.rn[i]
        return self.send(REQUEST, BROADCAST)

    def on_message(self, kind, src, buf):
        if kind == REQUEST:
            sn = buf[AT]
            d = (sn - self.rn[src]) & 0xFF
            if 0 < d < 0x80:
                self.rn[src] = sn
            if self.has_token and not self.in_cs and self._wants(src):
                return self._give(src)
            return 0
        # TOKEN, addressed to this node.
        epoch = self.token_gate(buf)  # the recovery's epoch gate (docs/adding-a-protocol.md, section 4)
        if epoch < 0:
            return protocol.DISCARDED
        if self.has_token:
            self.errors = (self.errors + 1) & protocol.SEQ_MASK  # a second token: dropped
            return 0
        ln = self.ln
        for j in range(self.n):
            ln[j] = buf[AT + _HEADER + j]
        self.seq = protocol.get30(buf, AT)
        self.epoch = epoch
        self.has_token = True
        if self.pending:
            return self._enter()
        return self._serve_next()

    def exit_cs(self):
        self.in_cs = False
        self.ln[self.index] = self.rn[self.index]
        return self._serve_next()

    def _wants(self, j):
        return self.rn[j] == (self.ln[j] + 1) & 0xFF

    def _serve_next(self):
        """The token to the first node after this one, in ring order, that waits;
        none waits: it rests here."""
        n = self.n
        j = self.index
        for _ in range(n - 1):
            j += 1
            if j == n:
                j = 0
            if self._wants(j):
                return self._give(j)
        return 0

    def _give(self, j):
        self.has_token = False
        self.put_token_header()
        out = self.out
        ln = self.ln
        for k in range(self.n):
            out[_HEADER + k] = ln[k]
        return self.send(TOKEN, j)

    def _regenerate(self):
        # The lost token's LN is unknowable: the new one takes this node's last copy
        # (requests it shows as waiting that were served get a token they pass on).
        self._new_token()
        if self.pending:
            return self._enter()
        return self._serve_next()

    def on_request_again(self, origin=-1):
        # A re-announced request (its broadcast may have been lost): the holder serves it.
        if origin == self.index:
            return 0
        if self.has_token:
            self.rn[origin] = (self.ln[origin] + 1) & 0xFF
            if self.in_cs:
                return 0
            return self._give(origin)
        self.again_origin = origin
        return protocol.SEND_AGAIN
