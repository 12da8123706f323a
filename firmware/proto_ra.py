# Ricart and Agrawala's token algorithm (1983), as the slides give it
# (seeds/token-request-algorithms-slides-de.md, "Ricart / Agrawala 1983", rules 1-5, quoted
# in English where they happen), on the ring's message layer (protocol.py): a timestamped
# request goes to all (one broadcast frame once round the ring), the token, with its memory
# of each process's last visit, goes straight to one node (a routed frame).
#
# What the slides leave open, chosen here:
# - The clock: Lamport's scalar clock. A process stamps its request with clock + 1 and every
#   process that registers a request moves its clock up to the request's stamp, so a request
#   made after another was registered carries a later stamp.
# - The "timestamp of the last visit" is the stamp of the request the visit served: on
#   leaving its critical section S_i writes its request's stamp into the token.
# - "Waited longest": the oldest stamp among the outstanding requests the holder has
#   registered. Tie-break (equal stamps are concurrent requests, neither waited longer in the
#   clock's order): the first in ring order after the holder, the order of Ricart and
#   Agrawala's own search (i+1, ..., n, 1, ..., i-1).
# - The idle holder (rule 5 speaks only of leaving the critical section): a request that
#   reaches the holder of the unused token is served at once, as if the holder had just left
#   (the slides' "0, if nobody else wanted it meanwhile" and n messages per CS need this).
#
# Messages (docs/frames.md): REQUEST, kind 0, to all: stamp u32 (30 bits). TOKEN, kind 1, to
# one node: seq u32 (30 bits), epoch u16 (the layer's token header), LV[0..n-1] u32 (30 bits)
# each, the stamps of the last visits: 6 + 4n bytes, 134 at n = 32 (at most 246 up to n = 60).
#
# Stamps wrap at 2**30 (no int on a Pico exceeds a small int). Why wrapping cannot confuse an
# outdated request: on this ring a request reaches every node before the token reaches its
# sender for it (the broadcast is passed on the moment it lands, the holder sends the token
# only after registering the request, and from there both travel the same FIFO wires, the
# broadcast ahead). So the holder's register RQ[j] holds either the stamp of S_j's last
# served request, which is LV[j], or the stamp of S_j's outstanding request, which S_j makes
# differ from its previous one even modulo 2**30 (request()). "Younger than the last visit"
# is then RQ[j] != LV[j], an equality test that no wrap can fool, however long S_j was idle.
# (A serial-number comparison would be wrong there: an idle process's LV[j] falls arbitrarily
# far behind the clock.) Serial comparisons (protocol.seq_later) remain only between stamps
# that are close: an arriving stamp against the clock (at most the requests still in flight
# apart) and the outstanding requests against each other (at most the requests made while
# one waits: O(n), far below 2**29). Frames lost on a faulty ring break the FIFO argument; the
# recovery then restores liveness and the checker stops holding the run to the bounds.

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
from array import array

Node = protocol.Node
BROADCAST = protocol.BROADCAST
AT = protocol.PAYLOAD_AT
SEQ_MASK = protocol.SEQ_MASK
seq_later = protocol.seq_later
get30 = protocol.get30
put30 = protocol.put30
next30 = protocol.next30

REQUEST = 0
TOKEN = 1
_HEADER = protocol.TOKEN_HEADER  # seq u32, epoch u16
# protocol.py's constants copied for the token's delivered hop: a const() is inlined only in the
# module that defines it (an imported name is a dictionary lookup at every use).
_AT = const(5)  # protocol.PAYLOAD_AT
_TOKEN_HEADER = const(6)  # protocol.TOKEN_HEADER
_SEQ_MASK = const(0x3FFFFFFF)  # protocol.SEQ_MASK
_DISCARDED = const(64)  # protocol.DISCARDED
_OWNER_TOKEN = const(0xFFFF)  # protocol.OWNER_TOKEN
if (protocol.PAYLOAD_AT, protocol.TOKEN_HEADER, protocol.SEQ_MASK, protocol.DISCARDED, protocol.OWNER_TOKEN) != (
        _AT, _TOKEN_HEADER, _SEQ_MASK, _DISCARDED, _OWNER_TOKEN):
    raise ImportError("%s: constants disagree with protocol.py" % __name__)


class NodeRA(Node):
    """Ricart-Agrawala's token: timestamped requests to all, a token remembering each visit."""

    name = "ra"
    about = {
        "name": "ra",
        "title": "Ricart-Agrawala's token: timestamped broadcast requests, the token to the longest waiting",
        "citation": ("Ricart, Agrawala 1983 (letter on Carvalho and Roucairol), as given by the slides "
                     "seeds/token-request-algorithms-slides-de.md, 'Ricart / Agrawala 1983', rules 1-5"),
        "exclusion": "hard",
        "rests": True,  # the unused token stays at the last holder
        # The dashboard (host): a req→ row (its request messages' hop frames per link), no flag.
        "view": {"requests": True},
        # Token and requests are messages of the layer: their kinds tell the host (dashboard,
        # explorer) which message frames carry the token and which the requests.
        "messages": {"request": {"kind": REQUEST, "to": "all", "payload": "stamp u32 (30 bits, Lamport clock)"},
                     "token": {"kind": TOKEN, "to": "the longest waiting", "payload": "seq u32, epoch u16, LV[n] u32"}},
        "bounds": {
            # "Nachrichtenkomplexität: n (n-1 für request, + 1 Token) (bzw. 0, wenn inzwischen
            # kein anderer wollte)". On the ring the n - 1 requests are one broadcast, delivered
            # to the n - 1 others: 2 logical messages (docs/bounds.md).
            "logical_per_request": {"paper": "n", "checked": "2",
                                    "where": "slides, message complexity; a broadcast is one logical message "
                                             "(docs/bounds.md)"},
            # Hop frames: the broadcast goes once round (n), the token at most n - 1 hops.
            "messages_per_request": {"paper": None, "checked": "2*n - 1",
                                     "where": "n + d per request, d the token's distance (docs/bounds.md)"},
            "service_traffic": {"paper": None, "checked": None,
                                "where": "not bounded by the slides (their open question: how long must a "
                                         "process wait?)"},
            # The RA slides claim no synchronisation delay; Suzuki-Kasami's slides' "0 or T" holds
            # here too: 0 at the idle holder, else one message delay, d hop times on the ring
            # (d <= n - 1). In hop times, so only the simulator's runs can hold it:
            # tests/test_sk_ra.py does, exactly; the checker does not.
            "sync_delay": {"paper": None, "checked": None, "where": "as Suzuki-Kasami's: 0 or T; T = d hop times "
                                                                      "here (tests/test_sk_ra.py)"},
        },
    }

    def message_sizes(self, n):
        return {REQUEST: 4, TOKEN: _HEADER + 4 * n}

    def __init__(self, index, n):
        Node.__init__(self, index, n)
        self.clock = 0  # Lamport's clock; -1 after a restart: unknown until a stamp is registered
        self.rq = array("i", [0] * n)  # rule 4: the stamp of each process's latest request registered here
        # The token's memory while it is here, all zero elsewhere (cleared as it leaves: the
        # token's contents are where the token is, and a node's state is what it acts on).
        self.lv = array("i", [0] * n)

    def boot(self, starter=False, nonce=0):
        self.clock = -1  # a restarted node adopts the first stamp it registers, however far on
        return Node.boot(self, starter, nonce)

    # -- requesting ---------------------------------------------------------

    def request(self):
        if self.has_token:
            # Rule 1: "only the owner may enter the critical section"; it holds the unused token:
            # 0 messages ("bzw. 0, wenn inzwischen kein anderer wollte").
            return self._enter()
        self.pending = True
        i = self.index
        # Rule 2: "send a request message (with timestamp) to all".
        ts = next30(self.clock)
        if ts == self.rq[i]:
            # Wrap guard, not in the slides: a stamp equal, modulo 2**30, to this process's
            # previous request (its last visit's stamp, LV[i]) would look served. Skip it.
            ts = next30(ts)
        self.clock = ts
        self.rq[i] = ts
        put30(self.out, 0, ts)
        return self.send(REQUEST, BROADCAST)

    @micropython.native
    def on_message(self, kind, src, buf):
        if kind == REQUEST:
            ts = get30(buf, AT)
            # Rule 4: "every process registers the requests of all others". On the FIFO ring
            # S_src's requests arrive in the order it made them: the latest is the one to keep.
            self.rq[src] = ts
            # Lamport's clock: registering a stamp moves the clock up to it.
            if self.clock < 0 or seq_later(ts, self.clock):
                self.clock = ts
            if self.has_token and not self.in_cs:
                return self._pass_on()  # the idle holder serves it at once (header)
            return 0  # in the critical section: rule 5 at its end finds it
        return self._take_token(buf)

    @micropython.native
    def _take_token(self, buf):
        """The TOKEN, addressed to this node. The helpers' code inline, each named (a method
        call costs about 11 us on a Pico, get30's 20 us: issue 41)."""
        # Recovery (protocol.Node, docs/recovery.md): the epoch gate drops a token of an old
        # epoch (Node.token_gate).
        epoch = buf[_AT + 4] | (buf[_AT + 5] << 8)
        if self.fresh or epoch != self.known_epoch or self.known_owner != _OWNER_TOKEN:
            epoch = self._gate(epoch)
            if epoch < 0:
                return _DISCARDED
        if self.has_token:
            self.errors = (self.errors + 1) & _SEQ_MASK  # a second token: dropped
            return 0
        lv = self.lv
        at = _AT + _TOKEN_HEADER
        for j in range(self.n):
            lv[j] = buf[at] | (buf[at + 1] << 8) | (buf[at + 2] << 16) | ((buf[at + 3] & 0x3F) << 24)  # get30
            at += 4
        self.seq = buf[_AT] | (buf[_AT + 1] << 8) | (buf[_AT + 2] << 16) | ((buf[_AT + 3] & 0x3F) << 24)  # get30
        self.epoch = epoch
        self.has_token = True
        if self.pending:
            return self._enter()  # rule 1: the owner enters
        # Deviation (recovery only: in a fault-free ring the token goes only to a process whose
        # request is outstanding): a token this node did not ask for is passed on as at the end
        # of a critical section. (_leave stays a call: a test's planted bug overrides it.)
        return self._leave()

    # -- releasing ----------------------------------------------------------

    def exit_cs(self):
        self.in_cs = False
        return self._leave()

    @micropython.native
    def _leave(self):
        i = self.index
        # Rule 3: the token's memory, "timestamp of the last visit": the stamp of the request
        # this visit served.
        self.lv[i] = self.rq[i]
        return self._pass_on()

    @micropython.native
    def _pass_on(self):
        """Rule 5: "after leaving the critical section the token is sent to the process that
        has waited longest (its request must be younger than the timestamp of the last visit
        at that process)". None waits: the token stays here, unused."""
        n = self.n
        rq = self.rq
        lv = self.lv
        best = -1
        oldest = 0
        j = self.index
        for _ in range(n - 1):
            j += 1
            if j == n:
                j = 0
            ts = rq[j]
            # "younger than the last visit": != on this ring (header); strictly older stamps
            # win, so ties go to the first in ring order after the holder.
            if ts != lv[j] and (best < 0 or seq_later(oldest, ts)):
                best = j
                oldest = ts
        if best < 0:
            return 0
        return self._give(best)

    @micropython.native
    def _give(self, j):
        self.has_token = False
        self.put_token_header()
        out = self.out
        lv = self.lv
        at = _HEADER
        for k in range(self.n):
            put30(out, at, lv[k])
            lv[k] = 0
            at += 4
        return self.send(TOKEN, j)

    # -- recovery (protocol.Node; docs/adding-a-protocol.md section 4) -------

    def _regenerate(self):
        # The lost token's memory is unknowable. The new one takes every request this node
        # has registered as waiting (a last visit other than its stamp): rule 5 serves them
        # oldest first, and a process that was in fact served passes the token on as it
        # arrives, setting its LV right. A request this node has not registered is
        # re-announced by its process's timeout (on_request_again).
        self._new_token()
        rq = self.rq
        lv = self.lv
        for j in range(self.n):
            lv[j] = rq[j] - 1 if rq[j] else 0
        if self.pending:
            return self._enter()
        return self._leave()

    def on_request_again(self, origin=-1):
        # A re-announced request (its broadcast, or the token, may have been lost): the holder
        # registers origin as waiting (a stamp other than its last visit's, rule 5's test) and
        # serves it now, or at the end of its critical section.
        if origin == self.index:
            return 0
        if self.has_token:
            if self.rq[origin] == self.lv[origin]:
                self.rq[origin] = next30(self.lv[origin])
            if self.in_cs:
                return 0
            return self._give(origin)
        self.again_origin = origin
        return protocol.SEND_AGAIN
