# Suzuki and Kasami's broadcast algorithm (seeds/suzuki-kasami-broadcast-slides.md) on the
# ring's message layer (protocol.py): REQUEST(j, n) goes to all (one broadcast frame once
# round the ring), the token with LN[1..N] and the queue Q goes straight to one node (a
# routed frame: the nodes between pass it on without waking their protocol). The slides'
# rules (a) to (f) are quoted where they happen.
#
# Messages (docs/frames.md): REQUEST, kind 0, to all: sn u32 (30 bits). TOKEN, kind 1, to
# one node: seq u32 (30 bits), epoch u16 (the layer's token header), LN[0..n-1] u32 (30
# bits) each, |Q| u8, Q[0..n-2] u8 (node ids, the head first; Q never holds the holder, so
# n - 1 places do): 6 + 5n bytes, 166 at n = 32, and at most 246 (a message's payload) up to
# n = 48. RN_i[1..N] is an array of n ints at every node (its own RN_i[i] included).
#
# Sequence numbers wrap at 2**30 (no int on a Pico exceeds a small int): RN_i[j] := max(RN_i[j],
# n) compares 30-bit serial numbers (protocol.seq_later: right while the two differ by less
# than 2**29), and "S_i is requesting" is RN_i[j] = LN[j] + 1, an equality mod 2**30. Why
# wrapping cannot confuse an outdated request: on this ring a REQUEST of S_j reaches every
# node before the token reaches S_j for it. The broadcast is passed on by every node the
# moment it lands (before its protocol sees it), the holder sends the token only after the
# broadcast reached it (RN = LN + 1), and from there token and broadcast travel the same
# FIFO wires, the broadcast ahead: so the token cannot overtake it. Hence a REQUEST(j, sn)
# always arrives with sn = RN_i[j] + 1 (S_j asks again only after its previous request was
# served, by which time everyone had it), and at the holder RN_i[j] is LN[j] or LN[j] + 1.
# Every comparison is between numbers at most 1 apart, 2**29 away from where a serial
# comparison or an equality mod 2**30 could mistake one for another. (Frames lost on a
# faulty ring break this; the recovery below then restores liveness, and the checker
# stops holding the run to the bounds, docs/recovery.md.)
#
# Deviations and interpretations, marked where they happen: the order of step (e), what a
# token does at a node that did not ask for it (only after recovery), and the recovery
# hooks of protocol.Node (not in the slides).

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


# The token's arrays in and out, and step (e)'s scan: a viper function each, with a pure-Python
# twin (tests/test_proto_twins.py checks that both give the same results and buffers). In native
# code every subscript and every operation on an int is a call into the runtime (about 0.6 us on
# a Pico: a 30-bit number from 4 bytes about 9 us, a put30 call 20 us); in viper they are machine
# instructions (issue 41: the delivered token's hop cost 1.28 times S's token hop). Here, not in
# protocol.py, which every board loads (its names there made S's hop slower; docs/performance.md).
# Viper has no bounds checks: the guards below keep a corrupt token (frames are CRC-checked: it
# cannot come from the wire) inside the arrays; both twins have them.


def take_arrays_py(buf, at, n, ln, q, inq):
    """A delivered token's LN[0..n-1] (u32, 30 bits each) and Q (|Q| u8, then the ids) from
    buf[at:] into ln and q[0:|Q|], inq[j] = 1 for each j in Q. Returns |Q| (at most n - 1: a
    corrupt |Q| cannot overrun; an id outside the ring is not marked in inq)."""
    for j in range(n):
        ln[j] = buf[at] | (buf[at + 1] << 8) | (buf[at + 2] << 16) | ((buf[at + 3] & 0x3F) << 24)  # get30
        at += 4
    qlen = buf[at]
    if qlen > n - 1:
        qlen = n - 1
    at += 1
    for k in range(qlen):
        j = buf[at + k]
        q[k] = j
        if j < n:
            inq[j] = 1
    return qlen


def queue_waiting_py(rn, ln, q, inq, i, n, qlen):
    """Step (e) at site i: every S_j not in Q (inq[j] == 0) whose RN_i[j] = LN[j] + 1 (mod 2**30)
    appended to Q, in ring order after i (the interpretation at NodeSK._release). Returns |Q|
    (never more than n: q's size)."""
    j = i
    for _ in range(n - 1):
        j += 1
        if j == n:
            j = 0
        if qlen < n and not inq[j] and (rn[j] - ln[j]) & _SEQ_MASK == 1:
            q[qlen] = j
            inq[j] = 1
            qlen += 1
    return qlen


def give_arrays_py(out, at, n, ln, q, inq, qlen):
    """The token's LN and Q into out[at:] as take_arrays reads them (Q's unused places 0), and
    cleared here: ln, q, inq (the token's contents leave with it)."""
    for k in range(n):
        v = ln[k]
        out[at] = v & 0xFF  # put30
        out[at + 1] = (v >> 8) & 0xFF
        out[at + 2] = (v >> 16) & 0xFF
        out[at + 3] = (v >> 24) & 0x3F
        ln[k] = 0
        at += 4
    out[at] = qlen
    at += 1
    for k in range(n - 1):
        if k < qlen:
            j = q[k]
            out[at + k] = j
            if j < n:
                inq[j] = 0
            q[k] = 0
        else:
            out[at + k] = 0


take_arrays = take_arrays_py
queue_waiting = queue_waiting_py
give_arrays = give_arrays_py
try:
    @micropython.viper
    def take_arrays_viper(buf, at: int, n: int, ln, q, inq) -> int:
        b = ptr8(buf)
        w = ptr32(ln)
        qq = ptr8(q)
        iq = ptr8(inq)
        j = 0
        while j < n:
            w[j] = b[at] | (b[at + 1] << 8) | (b[at + 2] << 16) | ((b[at + 3] & 0x3F) << 24)
            at += 4
            j += 1
        qlen = b[at]
        if qlen > n - 1:
            qlen = n - 1
        at += 1
        k = 0
        while k < qlen:
            j = b[at + k]
            qq[k] = j
            if j < n:
                iq[j] = 1
            k += 1
        return qlen

    @micropython.viper
    def queue_waiting_viper(rn, ln, q, inq, i: int, n: int, qlen: int) -> int:
        r = ptr32(rn)
        w = ptr32(ln)
        qq = ptr8(q)
        iq = ptr8(inq)
        j = i
        k = 1
        while k < n:
            k += 1
            j += 1
            if j == n:
                j = 0
            if qlen < n and not iq[j] and ((r[j] - w[j]) & _SEQ_MASK) == 1:
                qq[qlen] = j
                iq[j] = 1
                qlen += 1
        return qlen

    @micropython.viper
    def give_arrays_viper(out, at: int, n: int, ln, q, inq, qlen: int):
        o = ptr8(out)
        w = ptr32(ln)
        qq = ptr8(q)
        iq = ptr8(inq)
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
        o[at] = qlen
        at += 1
        k = 0
        while k < n - 1:
            if k < qlen:
                j = qq[k]
                o[at + k] = j
                if j < n:
                    iq[j] = 0
                qq[k] = 0
            else:
                o[at + k] = 0
            k += 1

    take_arrays = take_arrays_viper
    queue_waiting = queue_waiting_viper
    give_arrays = give_arrays_viper
except (AttributeError, NameError, SyntaxError, ValueError):
    pass  # CPython, or a port without the viper emitter: the Python twins


def token_size(n):
    """The TOKEN payload: seq, epoch, LN[n] (4 bytes each), |Q|, Q[n - 1]."""
    return _HEADER + 4 * n + 1 + (n - 1)


class NodeSK(Node):
    """Suzuki-Kasami: broadcast requests RN, a token carrying LN and the queue Q."""

    name = "sk"
    about = {
        "name": "sk",
        "title": "Suzuki-Kasami: broadcast requests, the token (LN, Q) sent to the head of its queue",
        "citation": ("Suzuki, Kasami: A distributed mutual exclusion algorithm (1985), as given by the slides "
                     "seeds/suzuki-kasami-broadcast-slides.md, rules (a)-(f)"),
        "exclusion": "hard",
        "rests": True,  # the idle token stays at the last holder
        # The dashboard (host): a req→ row (its request messages' hop frames per link), no flag.
        "view": {"requests": True},
        # Token and requests are messages of the layer: their kinds tell the host (dashboard,
        # explorer) which message frames carry the token and which the requests.
        "messages": {"request": {"kind": REQUEST, "to": "all", "payload": "sn u32 (30 bits)"},
                     "token": {"kind": TOKEN, "to": "the head of Q",
                               "payload": "seq u32, epoch u16, LN[n] u32, |Q| u8, Q[n-1] u8"}},
        "bounds": {
            # "If a site does not hold the token when it makes a request, the algorithm requires
            # N messages to obtain the token" (N - 1 REQUESTs + 1 token), "no message is needed
            # ... if a site holds the idle token". On the ring the N - 1 REQUESTs are one
            # broadcast, delivered to the n - 1 others: 2 logical messages (docs/bounds.md).
            "logical_per_request": {"paper": "n", "checked": "2",
                                    "where": "slides, Performance; a broadcast is one logical message (docs/bounds.md)"},
            # Hop frames: the broadcast goes once round (n), the token at most n - 1 hops.
            "messages_per_request": {"paper": None, "checked": "2*n - 1",
                                     "where": "n + d per request, d the token's distance (docs/bounds.md)"},
            "service_traffic": {"paper": None, "checked": None,
                                "where": "not bounded by the slides (at most N - 1 requests ahead in Q)"},
            # "Synchronization delay in this algorithm is 0 or T": 0 at the idle holder, else one
            # message delay, d hop times on the ring (d <= n - 1). In hop times, so the simulator's
            # runs alone can hold it: tests/test_sk_ra.py does, exactly; the checker does not.
            "sync_delay": {"paper": None, "checked": None, "where": "slides: 0 or T; T = d hop times here "
                                                                      "(tests/test_sk_ra.py)"},
        },
    }

    def message_sizes(self, n):
        return {REQUEST: 4, TOKEN: token_size(n)}

    def __init__(self, index, n):
        Node.__init__(self, index, n)
        self.rn = array("i", [0] * n)  # RN_i[1..N]: the largest sequence number received from each site
        # The token's LN and Q while it is here, all zero elsewhere (cleared as it leaves: the
        # token's contents are where the token is, and a node's state is what it acts on).
        self.ln = array("i", [0] * n)
        self.q = bytearray(n)  # q[0] the head, qlen entries
        self.qlen = 0
        self.inq = bytearray(n)  # inq[j] = 1 while j is in Q (an index of Q here, never sent)

    # -- requesting ---------------------------------------------------------

    def request(self):
        if self.has_token:
            # "No message is needed and the synchronization delay is zero if a site holds the
            # idle token at the time of its request."
            return self._enter()
        self.pending = True
        i = self.index
        # (a) "If requesting site S_i does not have the token, then it increments its sequence
        # number, RN_i[i], and sends a REQUEST(i, sn) message to all other sites."
        sn = next30(self.rn[i])
        self.rn[i] = sn
        put30(self.out, 0, sn)
        return self.send(REQUEST, BROADCAST)

    @micropython.native
    def on_message(self, kind, src, buf):
        if kind == _REQUEST:
            # (b) "When a site S_j receives this message, it sets RN_j[i] to max(RN_j[i], sn)."
            sn = buf[_AT] | (buf[_AT + 1] << 8) | (buf[_AT + 2] << 16) | ((buf[_AT + 3] & 0x3F) << 24)  # get30
            rn = self.rn
            d = (sn - rn[src]) & _SEQ_MASK  # seq_later(sn, rn[src])
            if 0 < d < 0x20000000:
                rn[src] = sn
            # (b) "If S_j has the idle token, then it sends the token to S_i if RN_j[i] = LN[i] + 1."
            # "If a site receives a REQUEST message when it is executing the CS, it sends the
            # token only after it has completed the execution of the CS" (step (e) then finds it).
            if self.has_token and not self.in_cs and (rn[src] - self.ln[src]) & _SEQ_MASK == 1:
                return self._give(src)
            return 0
        # The TOKEN, addressed to this node: its delivered hop written out here, the helpers' code
        # inline, each named (a method call costs about 11 us on a Pico, get30's and seq_later's
        # 20 us; issue 41), the arrays taken in by take_arrays (viper).
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
        n = self.n
        ln = self.ln
        q = self.q
        inq = self.inq
        qlen = take_arrays(buf, _AT + _TOKEN_HEADER, n, ln, q, inq)
        self.seq = buf[_AT] | (buf[_AT + 1] << 8) | (buf[_AT + 2] << 16) | ((buf[_AT + 3] & 0x3F) << 24)  # get30
        self.epoch = epoch
        self.has_token = True
        i = self.index
        rn = self.rn
        d = (ln[i] - rn[i]) & _SEQ_MASK  # seq_later(ln[i], rn[i])
        if 0 < d < 0x20000000:
            # Recovery, not in the slides: the token knows a later request of this node than
            # the node does (it restarted and counts from 0 again): continue from the token's.
            rn[i] = ln[i]
        if self.pending:
            # (c) "Site S_i executes the CS after it has received the token."
            self.qlen = qlen
            return self._enter()
        # Deviation (recovery only: in a fault-free ring the token goes only to a site whose
        # request is outstanding): a token this node did not ask for is released as at the
        # end of a critical section, steps (d) to (f): _release's code, with what it would
        # look up again already in locals.
        ln[i] = rn[i]  # (d)
        qlen = queue_waiting(rn, ln, q, inq, i, n, qlen)  # (e)
        self.qlen = qlen
        if qlen:
            return self._give_head(qlen)  # (f)
        return 0  # nobody waits: the token stays here, idle

    # -- releasing ----------------------------------------------------------

    def exit_cs(self):
        self.in_cs = False
        return self._release()

    @micropython.native
    def _release(self):
        i = self.index
        rn = self.rn
        ln = self.ln
        # (d) "It sets LN[i] element of the token array equal to RN_i[i]."
        ln[i] = rn[i]
        # (e) "For every site S_j whose id is not in the token queue, it appends its id to the
        # token queue if RN_i[j] = LN[j] + 1."
        # Interpretation: the slides give no order for "every site"; this takes them in ring
        # order after S_i (S_i itself never qualifies after (d)): queue_waiting.
        qlen = queue_waiting(rn, ln, self.q, self.inq, i, self.n, self.qlen)
        self.qlen = qlen
        # (f) "If the token queue is nonempty after the above update, S_i deletes the top site
        # id from the token queue and sends the token to the site indicated by the id."
        if qlen:
            return self._give_head(qlen)
        return 0  # nobody waits: the token stays here, idle

    @micropython.native
    def _give_head(self, qlen):
        """Step (f) for a Q of qlen > 0 sites: its head leaves it, and the token goes there."""
        q = self.q
        head = q[0]
        for k in range(1, qlen):
            q[k - 1] = q[k]
        q[qlen - 1] = 0
        self.qlen = qlen - 1
        self.inq[head] = 0
        return self._give(head)

    @micropython.native
    def _give(self, j):
        """The token (seq, epoch, LN, Q) to node j; it leaves this node with its queue. The
        helpers' code inline, each named (put_token_header, put30 by give_arrays, send)."""
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
        give_arrays(out, _TOKEN_HEADER, self.n, self.ln, self.q, self.inq, self.qlen)
        self.qlen = 0
        self.out_kind = _TOKEN  # send
        self.out_dst = j
        self.out_len = self.msg_sizes[_TOKEN]
        return _SEND_MSG

    # -- recovery (protocol.Node; docs/adding-a-protocol.md section 4) -------

    def give_token(self):
        self.qlen = 0
        for j in range(self.n):
            self.inq[j] = 0
        return Node.give_token(self)

    def _regenerate(self):
        # The lost token's LN and Q are unknowable. The new one takes every request this node
        # has heard of as outstanding (LN[j] = RN_i[j] - 1): step (e) queues them, and a site
        # whose request was in fact served releases the token as it arrives, step (d) setting
        # its LN[j] right. A request this node has not heard of is re-announced by its site's
        # timeout (on_request_again). Q starts empty.
        self._new_token()
        self.qlen = 0
        rn = self.rn
        ln = self.ln
        for j in range(self.n):
            self.inq[j] = 0
            ln[j] = rn[j] - 1 if rn[j] else 0
        if self.pending:
            return self._enter()
        return self._release()

    def on_request_again(self, origin=-1):
        # A re-announced request (its broadcast, or the token, may have been lost): the holder
        # takes it as REQUEST(origin, LN[origin] + 1), rule (b), and step (e) at its exit.
        if origin == self.index:
            return 0
        if self.has_token:
            self.rn[origin] = next30(self.ln[origin])
            if self.in_cs:
                return 0  # step (e) at its exit
            return self._give(origin)
        self.again_origin = origin
        return protocol.SEND_AGAIN
