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
_SEND_MSG = const(128)  # protocol.SEND_MSG
_REQUEST = const(0)
_TOKEN = const(1)
if (protocol.PAYLOAD_AT, protocol.TOKEN_HEADER, protocol.SEQ_MASK, protocol.DISCARDED,
        protocol.SEND_MSG, REQUEST, TOKEN) != (
        _AT, _TOKEN_HEADER, _SEQ_MASK, _DISCARDED, _SEND_MSG, _REQUEST, _TOKEN):
    raise ImportError("%s: constants disagree with protocol.py" % __name__)


# The token's memory in and out, and rule 5's search: a viper function each, with a pure-Python
# twin (tests/test_proto_twins.py checks that both give the same results and buffers). In native
# code every subscript and every operation on an int is a call into the runtime (about 0.6 us on
# a Pico: a 30-bit number from 4 bytes about 9 us, a put30 call 20 us); in viper they are machine
# instructions (issue 41: the delivered token's hop cost 1.15 times S's token hop). Here, not in
# protocol.py, which every board loads (its names there made S's hop slower; docs/performance.md).


def take_stamps_py(buf, at, n, lv):
    """A delivered token's LV[0..n-1] (u32, 30 bits each) from buf[at:] into lv."""
    for j in range(n):
        lv[j] = buf[at] | (buf[at + 1] << 8) | (buf[at + 2] << 16) | ((buf[at + 3] & 0x3F) << 24)  # get30
        at += 4


def oldest_waiting_py(rq, lv, i, n):
    """Rule 5's choice at holder i: the process whose request is younger than its last visit
    (rq[j] != lv[j]: an equality test, see the header) with the oldest stamp (seq_later), ties to
    the first in ring order after i; -1 when none waits."""
    best = -1
    oldest = 0
    j = i
    for _ in range(n - 1):
        j += 1
        if j == n:
            j = 0
        ts = rq[j]
        if ts != lv[j] and (best < 0 or 0 < (oldest - ts) & _SEQ_MASK < 0x20000000):
            best = j
            oldest = ts
    return best


def give_stamps_py(out, at, n, lv):
    """The token's LV into out[at:] as take_stamps reads it, and cleared here (the token's
    memory leaves with it)."""
    for k in range(n):
        v = lv[k]
        out[at] = v & 0xFF  # put30
        out[at + 1] = (v >> 8) & 0xFF
        out[at + 2] = (v >> 16) & 0xFF
        out[at + 3] = (v >> 24) & 0x3F
        lv[k] = 0
        at += 4


take_stamps = take_stamps_py
oldest_waiting = oldest_waiting_py
give_stamps = give_stamps_py
try:
    @micropython.viper
    def take_stamps_viper(buf, at: int, n: int, lv):
        b = ptr8(buf)
        w = ptr32(lv)
        j = 0
        while j < n:
            w[j] = b[at] | (b[at + 1] << 8) | (b[at + 2] << 16) | ((b[at + 3] & 0x3F) << 24)
            at += 4
            j += 1

    @micropython.viper
    def oldest_waiting_viper(rq, lv, i: int, n: int) -> int:
        r = ptr32(rq)
        w = ptr32(lv)
        best = -1
        oldest = 0
        j = i
        k = 1
        while k < n:
            k += 1
            j += 1
            if j == n:
                j = 0
            ts = r[j]
            if ts != w[j]:
                d = (oldest - ts) & _SEQ_MASK
                if best < 0 or (d > 0 and d < 0x20000000):
                    best = j
                    oldest = ts
        return best

    @micropython.viper
    def give_stamps_viper(out, at: int, n: int, lv):
        o = ptr8(out)
        w = ptr32(lv)
        k = 0
        while k < n:
            v = w[k]
            o[at] = v & 0xFF
            o[at + 1] = (v >> 8) & 0xFF
            o[at + 2] = (v >> 16) & 0xFF
            o[at + 3] = (v >> 24) & 0x3F
            w[k] = 0
            at += 4
            k += 1

    take_stamps = take_stamps_viper
    oldest_waiting = oldest_waiting_viper
    give_stamps = give_stamps_viper
except (AttributeError, NameError, SyntaxError, ValueError):
    pass  # CPython, or a port without the viper emitter: the Python twins


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
        if kind == _REQUEST:
            ts = buf[_AT] | (buf[_AT + 1] << 8) | (buf[_AT + 2] << 16) | ((buf[_AT + 3] & 0x3F) << 24)  # get30
            # Rule 4: "every process registers the requests of all others". On the FIFO ring
            # S_src's requests arrive in the order it made them: the latest is the one to keep.
            self.rq[src] = ts
            # Lamport's clock: registering a stamp moves the clock up to it.
            clock = self.clock
            if clock < 0 or 0 < (ts - clock) & _SEQ_MASK < 0x20000000:  # seq_later(ts, clock)
                self.clock = ts
            if self.has_token and not self.in_cs:
                return self._pass_on()  # the idle holder serves it at once (header)
            return 0  # in the critical section: rule 5 at its end finds it
        # The TOKEN, addressed to this node: its delivered hop written out here, the helpers' code
        # inline, each named (a method call costs about 11 us on a Pico, get30's 20 us: issue
        # 41), the token's memory taken in by take_stamps (viper).
        # Recovery (protocol.Node, docs/recovery.md): the epoch gate drops a token of an old
        # epoch (Node.token_gate).
        epoch = buf[_AT + 4] | (buf[_AT + 5] << 8)
        if epoch != self.open_epoch:
            epoch = self._gate(epoch)
            if epoch < 0:
                return _DISCARDED
        if self.has_token:
            self.errors = (self.errors + 1) & _SEQ_MASK  # a second token: dropped
            return 0
        take_stamps(buf, _AT + _TOKEN_HEADER, self.n, self.lv)
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
        rq = self.rq
        lv = self.lv
        # Rule 3: the token's memory, "timestamp of the last visit": the stamp of the request
        # this visit served.
        lv[i] = rq[i]
        # Rule 5, as _pass_on (its code here: a call less at every exit and delivered token).
        best = oldest_waiting(rq, lv, i, self.n)
        if best < 0:
            return 0
        return self._give(best)

    @micropython.native
    def _pass_on(self):
        """Rule 5: "after leaving the critical section the token is sent to the process that
        has waited longest (its request must be younger than the timestamp of the last visit
        at that process)": oldest_waiting. None waits: the token stays here, unused."""
        best = oldest_waiting(self.rq, self.lv, self.index, self.n)
        if best < 0:
            return 0
        return self._give(best)

    @micropython.native
    def _give(self, j):
        """The token (seq, epoch, LV) to node j; its memory leaves this node with it. The
        helpers' code inline, each named (put_token_header, put30 by give_stamps, send)."""
        self.has_token = False
        out = self.out
        seq = self.seq  # put_token_header
        out[0] = seq & 0xFF
        out[1] = (seq >> 8) & 0xFF
        out[2] = (seq >> 16) & 0xFF
        out[3] = (seq >> 24) & 0x3F
        epoch = self.epoch
        out[4] = epoch & 0xFF
        out[5] = (epoch >> 8) & 0xFF
        give_stamps(out, _TOKEN_HEADER, self.n, self.lv)
        self.out_kind = _TOKEN  # send
        self.out_dst = j
        self.out_len = self.msg_sizes[_TOKEN]
        return _SEND_MSG

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
