# System BinarySearch of Englert, Rudolph and Shvartsman (2001), "Developing and Refining
# an Adaptive Token-Passing Strategy", Figure 7 (rules 0-8), Figure 8, section 4.4
# (seeds/englert-rudolph-shvartsman-2001-adaptive-token-passing.md): the token rotates round
# the ring; a node that wants it sends a "gimme" across the ring, which lays traps and
# binary-searches for the token; a trap holder that gets the token lends it to the requester,
# which returns it after use. The rules are quoted where they happen.
#
# On the ring's message layer (protocol.py): the rotating token is a TOKEN message to the
# next node (one hop); a gimme to u = x^{+d} is a routed message d hops forward, and one to
# u = x^{-d} ("counter-clockwise by d") the same message n - d hops forward: one logical
# message either way, d or n - d hop frames (the simulator and the checker count both).
#
# Histories (section 4.4: "For the ring protocols the histories can be bounded by
# introducing the notion of a round and using round counters"). Rule 6 compares histories
# only "projected onto the circular token ring rotation events" (Figure 7's caption), and by
# the prefix property (Theorem 1) every local history is a prefix of one global history: the
# projection is known by its length, the number of rule-4 passes it holds. The token carries
# that count R (30 bits, wrapping: the round number and the position in one counter, since
# the rotation passes are in ring order, R mod n is the node the rotation is at); a node's
# history h is the R of the last token it held (rule 3, rule 8), R + 1 after its own rule-4
# pass. "H subset_C H_z" is then "h_x is not later than h_z" (serial comparison mod 2**30).
# Histories are compared only while they are recent (a node's h is refreshed every round), so
# the wrap never reaches a comparison that matters.
#
# Initial state (rule 0: every P(x) empty, T = the first holder). With every history empty,
# rule 6's two cases both apply (empty is a prefix of empty) and the rules allow either
# direction. We start every history as if the token had gone once round before it came to
# rest at node 0 (node i passed it at count i + 1 - n): the first searches then turn the way
# the token is.
#
# Trap garbage collection (section 4.4, "Token-rotation clean up. Here the token itself is
# used to remove old traps during subsequent token rotation rounds. The token can carry enough
# information, e.g., round number, information about the satisfaction of a search request, to
# enable the nodes to clean up."): the one chosen here, with both kinds of information:
#   - round number: a trap laid for a request whose history was h_z is dropped when the token
#     reaches the trap holder with R - h_z >= n: since h_z the rotation has passed the requester
#     (every node once in n passes), which used the token then (rule 4);
#   - satisfaction: the token carries the last SERVED_SLOTS requests it served, (node, request
#     number); a trap of one of them is dropped when the token meets it.
# A trap that escapes both (more than SERVED_SLOTS services within a round) costs a lend and a
# return (rules 7 and 8 with d_y empty) and is gone: never unsafe, only late.
#
# The served list expires (not in the paper: bytes, issue 41): it goes with the token only while
# the round number could not drop the traps it names. The token carries its age, the rule-4
# passes since its newest entry was added, counted modulo _hmask + 1 as histories are, and the
# pass that makes the age reach n drops the whole list, as _stale's round rule would drop a trap
# laid with the newest entry's count R_s: n <= age < _hhalf. Sound: an entry (z, sn) recorded at
# count R_s names a request that z made with history h_z <= R_s (z's history is the count of
# the token it last held, and the count only grows; the entries before the newest were recorded
# at counts <= the newest's), so when the token reaches a trap of it at count R,
# R - h_z >= R - R_s = age >= n, and the round rule drops the trap anyway as long as
# R - h_z < _hhalf: the premise under which it is exact at all (histories compared only while
# recent, above). tests/test_bs.py checks it in the simulator: every run is the same, lend for
# lend, as with lists that never expire. Where the round rule drops nothing (n >= _hhalf: the
# explorer's histories modulo 16 at n >= 8), n <= age < _hhalf never holds and the list never
# expires. On a ring with the full counters the age never reaches n, so it fits its u16.
# (The other clean-up of 4.4, "inverse token", would send the found token back along the
# search's trail: on this ring each step back is n - d hops forward.)
#
# Traps are kept one per requester (a node has at most one request outstanding, section 4.4:
# "bound the size of the sets by throttling the requests"), in the order they were laid:
# "token traps are locally stored and processed in FIFO order" (Theorem 2). A newer trap of the
# same requester replaces the older one in its place.
#
# Messages (docs/frames.md; indices u16, so the simulator's rings may exceed 255 nodes):
#   GIMME, kind 0, routed: requester u16, its request number u8, its history h_z u32 (30 bits),
#          lo u16, hi u16 (the positions, counted from the requester, that can still hold the
#          token: the search interval, halved at each step; the paper's n, see rule 5)
#   TOKEN, kind 1, to the next node (rule 4) or to a requester and back (rules 7, 8), of
#          variable length (the layer's least..most, protocol.py): seq u32 (30 bits), epoch u16
#          (the layer's token header), R u32 (30 bits), flags u8 (bit 0, lend: 1 is "y-hat, to
#          be returned upon use"; bits 1-7: k, the served entries it carries, 0..SERVED_SLOTS),
#          then only if k > 0: the list's age u16 (above) and served[k] (node u16, request u8),
#          oldest first. 11 bytes with no entry (the idle rotation's), 13 + 3k with k.

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
AT = protocol.PAYLOAD_AT
SEQ_MASK = protocol.SEQ_MASK
get30 = protocol.get30
put30 = protocol.put30


GIMME = 0
TOKEN = 1
_HEADER = protocol.TOKEN_HEADER  # seq u32, epoch u16
_T_R = const(6)  # the token's payload offsets (into out, or after AT in a delivered buffer)
_T_FLAGS = const(10)  # lend (bit 0), the served entries carried (bits 1-7)
_T_EMPTY = const(11)  # the payload's size with no served entry
_T_AGE = const(11)  # with entries: the list's age u16, then the entries
_T_SERVED = const(13)
SERVED_SLOTS = 8  # at most 127 (flags' 7 bits); a module global, not a const(): tests/test_figures.py runs BS with a longer list
# protocol.py's constants, and the names above, copied for the code below: a const() is inlined
# only in the module that defines it (an imported name is a dictionary lookup at every use).
_GIMME = const(0)
_TOKEN = const(1)
_AT = const(5)  # protocol.PAYLOAD_AT
_SEQ_MASK = const(0x3FFFFFFF)  # protocol.SEQ_MASK
_DISCARDED = const(64)  # protocol.DISCARDED
_SEND_MSG = const(128)  # protocol.SEND_MSG
if (GIMME, TOKEN, protocol.PAYLOAD_AT, protocol.SEQ_MASK, protocol.DISCARDED, protocol.SEND_MSG) != (
        _GIMME, _TOKEN, _AT, _SEQ_MASK, _DISCARDED, _SEND_MSG):
    raise ImportError("%s: constants disagree with protocol.py" % __name__)
_G_Z = const(0)
_G_SN = const(2)
_G_H = const(3)
_G_LO = const(7)
_G_HI = const(9)
_G_SIZE = const(11)
_NONE = const(0xFFFF)  # an empty slot of the served list
# NodeBS.rot: the node's own state that the rotation's hop reads or writes, and the settings it
# reads, in one int array, not attributes: on a Pico an attribute costs 1 to 2.3 us from viper (a
# map lookup; a class attribute such as _hmask misses the instance's map first), a field of the
# array a few cycles through a pointer (issue 41). Only const() names (the host's code and the
# tests read proto_bs._R_*): each name a module defines is interned on the board, and names move
# every hop's lookups (docs/performance.md, "what a name costs").
_R_H = const(0)  # P(x, H): the length of this node's history projected onto rotation events (header)
_R_RND = const(1)  # R of the token while it is here (0 elsewhere)
_R_VISIT = const(2)  # traps still to serve in this visit (rule order, _have)
_R_USED = const(3)  # 1: this node used the token in this visit
_R_LENT = const(4)  # the requester the token is lent to (rule 7), until it returns; -1: none
_R_SV_NEXT = const(5)  # the served list's next slot (while the token is here; 0 elsewhere)
_R_FIFO_LEN = const(6)  # the traps laid here (fifo's length)
_R_HMASK = const(7)  # _hmask and _hhalf, copied at __init__ (the explorer's small counters: a subclass's)
_R_HHALF = const(8)
_R_N = const(9)  # n and the next node's index (rule 4), copied once
_R_NEXT = const(10)
_R_SIZE = const(11)


def relay_rotation_py(out, buf, epoch, hmask, hhalf, n):
    """The rotation's token message on (NodeBS.on_message's fast path): buf's payload (a delivered
    frame's raw: at _AT) into out as put_token_header, put30, _rotate and _give would write it for
    a token taken in and passed on by rule 4: seq with its top two bits cleared, the epoch it goes
    on with (the gate's), R + 1 (modulo hmask + 1), lend 0, and the served list as it came, one
    pass older, or none once that age reaches n (n <= age < hhalf: expired, header). The caller
    has checked that the list fits out (k <= SERVED_SLOTS). Returns the payload's size (R + 1 is
    in out). No slice (which allocates)."""
    out[0] = buf[_AT]
    out[1] = buf[_AT + 1]
    out[2] = buf[_AT + 2]
    out[3] = buf[_AT + 3] & 0x3F
    out[4] = epoch & 0xFF
    out[5] = (epoch >> 8) & 0xFF
    at = _AT + _T_R
    r = ((buf[at] | (buf[at + 1] << 8) | (buf[at + 2] << 16) | ((buf[at + 3] & 0x3F) << 24)) + 1) & hmask
    out[_T_R] = r & 0xFF
    out[_T_R + 1] = (r >> 8) & 0xFF
    out[_T_R + 2] = (r >> 16) & 0xFF
    out[_T_R + 3] = (r >> 24) & 0x3F
    k = buf[_AT + _T_FLAGS] >> 1
    if k:
        at = _AT + _T_AGE
        age = ((buf[at] | (buf[at + 1] << 8)) + 1) & hmask
        if n <= age < hhalf:
            k = 0
        else:
            out[_T_AGE] = age & 0xFF
            out[_T_AGE + 1] = (age >> 8) & 0xFF
    out[_T_FLAGS] = k << 1
    if not k:
        return _T_EMPTY
    size = _T_SERVED + 3 * k
    for i in range(_T_SERVED, size):
        out[i] = buf[_AT + i]
    return size


relay_rotation = relay_rotation_py
try:
    # Its viper twin (tests/test_frame_twins.py): the token message is up to 37 payload bytes, a
    # few cycles each here; in native code each byte's subscripts cost microseconds (issue 41).
    # Here, not in protocol.py, which every board loads: its names there made S's hop 15 us slower
    # on the chip (docs/performance.md, "Where the turnaround went").
    @micropython.viper
    def relay_rotation_viper(out, buf, epoch: int, hmask: int, hhalf: int, n: int) -> int:
        o = ptr8(out)
        b = ptr8(buf)
        o[0] = b[_AT]
        o[1] = b[_AT + 1]
        o[2] = b[_AT + 2]
        o[3] = b[_AT + 3] & 0x3F
        o[4] = epoch & 0xFF
        o[5] = (epoch >> 8) & 0xFF
        at = _AT + _T_R
        r = ((b[at] | (b[at + 1] << 8) | (b[at + 2] << 16) | ((b[at + 3] & 0x3F) << 24)) + 1) & hmask
        o[_T_R] = r & 0xFF
        o[_T_R + 1] = (r >> 8) & 0xFF
        o[_T_R + 2] = (r >> 16) & 0xFF
        o[_T_R + 3] = (r >> 24) & 0x3F
        k = b[_AT + _T_FLAGS] >> 1
        if k:
            at = _AT + _T_AGE
            age = ((b[at] | (b[at + 1] << 8)) + 1) & hmask
            if n <= age and age < hhalf:
                k = 0
            else:
                o[_T_AGE] = age & 0xFF
                o[_T_AGE + 1] = (age >> 8) & 0xFF
        o[_T_FLAGS] = k << 1
        if not k:
            return _T_EMPTY
        size = _T_SERVED + 3 * k
        i = _T_SERVED
        while i < size:
            o[i] = b[_AT + i]
            i += 1
        return size

    relay_rotation = relay_rotation_viper
except (AttributeError, NameError, SyntaxError, ValueError):
    pass  # CPython, or a port without the viper emitter: the Python twin


class NodeBS(Node):
    """System BinarySearch: a rotating token found by a binary search of gimme messages."""

    name = "bs"
    about = {
        "name": "bs",
        "title": "BinarySearch: a rotating token, found by a binary search of gimme messages and traps",
        "citation": ("Englert, Rudolph, Shvartsman: Developing and Refining an Adaptive Token-Passing Strategy "
                     "(2001), Figure 7 (System BinarySearch), section 4.4; "
                     "seeds/englert-rudolph-shvartsman-2001-adaptive-token-passing.md"),
        "exclusion": "hard",
        "rests": False,  # rule 4 rotates the token for ever: runs stop at an idle horizon
        "view": {"requests": True},
        # The explorer (host/picoring/explore/model.py): histories modulo 16, so that the state
        # graph is finite. A wrapped comparison can only turn a search the wrong way or keep or
        # drop a trap early (a late or a wasted lend): never two tokens, never a request left
        # unserved (the rotation serves it). Its safety and liveness results hold for the full
        # counters; its worst counts are those of the small ones (docs/bounds.md).
        "explore": {"attrs": {"_hmask": 15, "_hhalf": 8}},
        # The simulator's starvation horizon (sim/simulate.py): on the ring a lend (rules 7, 8)
        # is a full circuit, d hops there and n - d back, plus the critical section; a visit
        # lends to at most n - 1 traps, and a request is reached by the rotation within n visits.
        "starve_horizon": "n * (n * (n + cs + 1) + cs + 1) + 16",
        "messages": {"request": {"kind": _GIMME, "to": "across the ring, then +-d/2 (binary search)",
                                 "payload": "z u16, sn u8, h_z u32, lo u16, hi u16",
                                 # the checker counts each request's forwards (Lemma 6): z and sn
                                 # from the payload's first word w (little-endian)
                                 "search": {"requester": "w & 0xFFFF", "number": "(w >> 16) & 0xFF"}},
                     "token": {"kind": _TOKEN, "to": "the next node, or lent to a trapped requester",
                               "payload": "seq u32, epoch u16, R u32, flags u8 (lend, k), "
                                          "if k > 0: age u16, served[k] (u16, u8)"}},
        "bounds": {
            # The token rotates for ever (rule 4), as S's: the messages per request are not bounded.
            "messages_per_request": {"paper": None, "checked": None, "where": "rule 4: the token never rests"},
            "service_traffic": {"paper": None, "checked": None, "where": "rule 4: the token never rests"},
            # Lemma 6: "each token request is forwarded O(log N) times"; the proof: "within log N
            # message cycles". With the search interval of rule 5's deviation: at most
            # ceil(log2 n) - 1 forwards by rule 6 after rule 5's gimme (tests/test_bs.py, every
            # holder and requester). Bounds here are expressions in n: ceil(log2 n) is
            # (n - 1).bit_length().
            "forwards_per_request": {"paper": "(n - 1).bit_length()", "checked": "(n - 1).bit_length() - 1",
                                     "where": "Lemma 6 (O(log N)); tests/test_bs.py"},
            # Theorem 2: responsiveness O(log N) with FIFO traps: no constant, in the paper's time
            # (a complete graph, one unit per message); on the ring a gimme d ahead takes d hop times.
            "responsiveness": {"paper": None, "checked": None,
                               "where": "Thm 2: O(log N), no constant (docs/bounds.md)"},
            # Theorem 3: while x waits, "no one node gets the token more than log N times, and there
            # are no more than N possessions of the token by other nodes" (possessions read as
            # entries; log N as ceil(log2 n)). Reported by the checker per request (over_paper_fairness).
            "overtaken": {"paper": "n", "checked": None, "where": "Thm 3; docs/bounds.md"},
            "overtaken_by_one": {"paper": "(n - 1).bit_length()", "checked": None, "where": "Thm 3; docs/bounds.md"},
        },
    }
    uses_requests = False  # the rotation reaches every node: a lost gimme only costs time
    _hmask = _SEQ_MASK  # histories are counted modulo _hmask + 1 (a test makes it small); __init__ copies
    # both into rot: set them on the class (the explorer's subclass), or in rot after
    _hhalf = 0x20000000

    def message_sizes(self, n):
        # the token: of variable length, its live served entries only (header)
        return {_GIMME: _G_SIZE, _TOKEN: (_T_EMPTY, _T_SERVED + 3 * SERVED_SLOTS)}

    def __init__(self, index, n):
        Node.__init__(self, index, n)
        rot = array("i", bytes(4 * _R_SIZE))
        self.rot = rot  # (_R_*: h, the token's R, the visit, the lend, the list's next slot, the FIFO's length)
        rot[_R_HMASK] = self._hmask
        rot[_R_HHALF] = self._hhalf
        rot[_R_N] = n
        rot[_R_NEXT] = index + 1 if index + 1 < n else 0
        # P(x, H): the length of this node's history projected onto rotation events (header).
        rot[_R_H] = (index + 1 - n) & self._hmask if index else 0
        self.sn = 0  # this node's request number (u8): names its traps
        # W(x, tau_z): the traps laid here, one per requester: its history h_z, its request
        # number, and the order they were laid (a FIFO of requesters).
        self.trap_h = array("i", [-1] * n)
        self.trap_sn = bytearray(n)
        self.fifo = array("H", [0] * n)
        self.fifo_head = 0  # (its length: rot[_R_FIFO_LEN])
        # The token while it is here (cleared as it leaves): R (rot), the lender to return it to
        # (-1: none, it came by rotation or back from a lend), the served list: a ring of
        # SERVED_SLOTS slots, sv_len live entries before rot[_R_SV_NEXT], the others _NONE, and its age.
        self.lender = -1
        self.sv_node = array("H", [_NONE] * SERVED_SLOTS)
        self.sv_sn = bytearray(SERVED_SLOTS)
        self.sv_len = 0
        self.sv_age = 0
        rot[_R_LENT] = -1

    # -- histories --------------------------------------------------------------

    @micropython.native
    def _later(self, a, b):
        """History a is strictly longer than b (both 30-bit counts, serial order)."""
        rot = self.rot
        d = (a - b) & rot[_R_HMASK]
        return 0 < d < rot[_R_HHALF]

    # -- rules 0, 3, 4: the rotating token --------------------------------------

    def give_token(self):
        # Rule 0: T = the first holder. It starts rotating at once (rule 4).
        self.has_token = True
        rot = self.rot
        rot[_R_RND] = rot[_R_H]
        rot[_R_VISIT] = rot[_R_FIFO_LEN]
        return self._have()

    def request(self):
        # Rule 1: "(Q | (x, d_x)) -> (Q | (x, d_x + new_x))": x now wants the token.
        self.pending = True
        self.sn = (self.sn + 1) & 0xFF
        if self.has_token:
            return 0  # in a lend's return trip or its own critical section: never here (see _have)
        # Rule 5: "(-, P(x, H), -, -, O, W) -> (-, P(x, H), -, -, O | (x, (y, N, H, tau_x)), W | (x, tau_x))":
        # a gimme to y, "the node directly across the (logical) ring", with x's history and its
        # trap; the trap tau_x at x itself is x's own pending request (rule 4 uses it).
        # Deviation: the paper's gimme carries N, and rule 6 forwards it n/2 from where it
        # arrives: read literally, the node across would send it N/2 on, back to x or to its own
        # position. Halving steps (N/2, N/4, ..., rounded either way) also miss nodes when N is
        # not a power of two (n = 9, 17, 33: tests/test_bs.py). The gimme carries instead the
        # positions, counted from the requester, that can still hold the token, lo..hi (first
        # 1..N-1), and goes to their middle: the same binary search, "directly across" first,
        # then half the remaining distance either way, exact for every N.
        put30(self.out, _G_H, self.rot[_R_H])
        self.out[_G_SN] = self.sn
        return self._search(self.index, 1, self.n - 1)

    def _search(self, z, lo, hi):
        """The gimme of requester z to the middle of lo..hi (positions counted from z)."""
        out = self.out
        out[_G_Z] = z & 0xFF
        out[_G_Z + 1] = z >> 8
        out[_G_LO] = lo & 0xFF
        out[_G_LO + 1] = lo >> 8
        out[_G_HI] = hi & 0xFF
        out[_G_HI + 1] = hi >> 8
        u = z + ((lo + hi) >> 1)
        return self.send(_GIMME, u - self.n if u >= self.n else u)

    @micropython.native
    def on_message(self, kind, src, buf):
        if kind == _GIMME:
            return self._gimme(buf)
        # _TOKEN. Recovery (protocol.Node, docs/recovery.md): the epoch gate (token_gate, inline:
        # a method call costs about 11 us on a Pico, get30's 20 us; issue 41).
        epoch = buf[_AT + 4] | (buf[_AT + 5] << 8)
        if epoch != self.open_epoch:
            epoch = self._gate(epoch)
            if epoch < 0:
                return _DISCARDED
        if self.has_token:
            self.errors = (self.errors + 1) & _SEQ_MASK  # a second token: dropped
            return 0
        self.seq = buf[_AT] | (buf[_AT + 1] << 8) | (buf[_AT + 2] << 16) | ((buf[_AT + 3] & 0x3F) << 24)  # get30
        self.epoch = epoch
        flags = buf[_AT + _T_FLAGS]
        rot = self.rot
        lent = rot[_R_LENT]
        if (not flags & 1 and (flags >> 1) <= SERVED_SLOTS and not rot[_R_FIFO_LEN] and not self.pending
                and (lent < 0 or src != lent)):
            # The rotation's every hop (rule 3, then rule 4 at once): no trap to serve, no
            # request here. What the general path below does for it (take the served list in,
            # _have, _rotate, _give: write it out again, oldest first, and clear it), without
            # its calls and its passes over the slots: the list goes on byte for byte, one pass
            # older or expired (taken in with nothing served, _rotate ages it and _give writes
            # the same bytes), and the arrays, empty while the token is elsewhere, stay empty as
            # _give leaves them. The payload (put_token_header, R + 1: rule 4's rotation event,
            # in x's history and the token's, lend 0, the list) is written by one viper call
            # (relay_rotation).
            out = self.out
            size = relay_rotation(out, buf, epoch, rot[_R_HMASK], rot[_R_HHALF], rot[_R_N])
            r = out[_T_R] | (out[_T_R + 1] << 8) | (out[_T_R + 2] << 16) | (out[_T_R + 3] << 24)
            rot[_R_H] = r
            rot[_R_VISIT] = 0
            rot[_R_USED] = 0
            rot[_R_LENT] = -1
            rot[_R_SV_NEXT] = 0
            rot[_R_RND] = 0
            self.out_kind = _TOKEN  # send
            self.out_dst = rot[_R_NEXT]
            self.out_len = size
            return _SEND_MSG
        at = _AT + _T_R
        r = buf[at] | (buf[at + 1] << 8) | (buf[at + 2] << 16) | ((buf[at + 3] & 0x3F) << 24)  # get30
        rot[_R_RND] = r
        k = flags >> 1
        if k > SERVED_SLOTS:
            # More entries than this node keeps (another build's list, never this ring's): the
            # list is dropped, as a regenerated token's is (a trap it then meets costs a lend).
            self.errors = (self.errors + 1) & _SEQ_MASK
            k = 0
        if k:
            self.sv_age = buf[_AT + _T_AGE] | (buf[_AT + _T_AGE + 1] << 8)
        at = _AT + _T_SERVED
        sv_node = self.sv_node
        sv_sn = self.sv_sn
        for i in range(k):  # into slots 0..k-1, oldest first; the others are empty (_give)
            sv_node[i] = buf[at] | (buf[at + 1] << 8)
            sv_sn[i] = buf[at + 2]
            at += 3
        self.sv_len = k
        rot[_R_SV_NEXT] = k if k < SERVED_SLOTS else 0
        self.has_token = True
        if flags & 1:
            # Rule 8: "(Q | (x, d_x), P(x, -), bot, I | (x, (y-hat, H)), O, -) ->
            # (Q, P(x, H + d_x), bot, I, O | (x, (y, H + d_x)), -)": lent by y; x takes y's history,
            # uses the token and returns it to y.
            rot[_R_H] = r
            self.lender = src
            if self.pending:
                return self._enter()
            # Rule 8 with d_x empty (a trap this node's request no longer needs): straight back.
            return self._give_back()
        # Rule 3: "(-, P(x, -), bot, I | (x, (y, H)), -, -) -> (-, P(x, H), x, I, -, -)": the token
        # arrives (by rotation, or back from a lend) and x takes its history.
        rot[_R_H] = r
        if lent < 0 or src != lent:
            rot[_R_VISIT] = rot[_R_FIFO_LEN]  # a new visit: the traps laid so far (rule order, below)
            rot[_R_USED] = 0
        rot[_R_LENT] = -1
        return self._have()

    @micropython.native
    def _have(self):
        """x holds the token, not lent to it: rule 7 for each live trap in FIFO order, then rule 4.

        Rule order (the TRS leaves it open: rules 4 and 7 both apply while x holds the token and
        a trap): a visit lends the token to the traps laid before it arrived, in FIFO order, then
        x uses it (rule 4), then lends it to the traps laid during that critical section (they
        found the token not moving), then passes it on (rule 4). A trap laid during a lend waits
        for the token's next visit. Lending to every trap as it comes kept the token at trap holders
        while their requesters asked again (the burst workload at n = 8: a request waited while 127
        others entered, 19 with this order)."""
        rot = self.rot
        while rot[_R_VISIT]:
            rot[_R_VISIT] -= 1
            z = self.fifo[self.fifo_head]
            self.fifo_head += 1
            if self.fifo_head == self.n:
                self.fifo_head = 0
            rot[_R_FIFO_LEN] -= 1
            hz = self.trap_h[z]
            self.trap_h[z] = -1
            if self._stale(z, hz):
                continue  # garbage-collected (header)
            # Rule 7: "(-, P(x, H), x, -, O, W | (x, tau_y)) -> (-, P(x, H), bot, -, O | (x, (y-hat, H)), W)":
            # the token to the trapped requester, "to be returned upon use"; the trap is removed.
            rot[_R_LENT] = z
            return self._give(z, 1)
        # Rule 4: "(Q | (x, d_x), P(x, H), x, -, O, -) -> (Q, P(x, H + d_x), bot, -, O | (x, (x+1, H + d_x)), -)":
        # x appends its data (uses the token, if it wants it: once a visit) and passes the token to x+1.
        if self.pending and not rot[_R_USED]:
            return self._enter()
        return self._rotate()

    @micropython.native
    def _stale(self, z, hz):
        """The trap of requester z (laid with history hz) is obsolete: z was served since."""
        sn = self.trap_sn[z]
        for k in range(SERVED_SLOTS):
            if self.sv_node[k] == z and self.sv_sn[k] == sn:
                return True
        rot = self.rot
        d = (rot[_R_RND] - hz) & rot[_R_HMASK]
        return self.n <= d < rot[_R_HHALF]

    @micropython.native
    def exit_cs(self):
        self.in_cs = False
        # The use is over: it goes into the token's list of served requests (garbage collection),
        # the newest entry: the list's age starts again (header).
        rot = self.rot
        k = rot[_R_SV_NEXT]
        self.sv_node[k] = self.index
        self.sv_sn[k] = self.sn
        rot[_R_SV_NEXT] = k + 1 if k + 1 < SERVED_SLOTS else 0
        if self.sv_len < SERVED_SLOTS:
            self.sv_len += 1
        self.sv_age = 0
        if self.lender >= 0:
            return self._give_back()  # rule 8: back to the lender
        if rot[_R_FIFO_LEN]:
            rot[_R_VISIT] = rot[_R_FIFO_LEN]  # traps laid during the critical section (rule order, _have)
            rot[_R_USED] = 1
            return self._have()
        return self._rotate()  # rule 4: on to x+1

    @micropython.native
    def _give_back(self):
        y = self.lender
        self.lender = -1
        return self._give(y, 0)

    @micropython.native
    def _rotate(self):
        # Rule 4's pass: a rotation event, appended to x's history and counted in the token's.
        rot = self.rot
        rot[_R_VISIT] = 0
        rot[_R_USED] = 0
        r = (rot[_R_RND] + 1) & rot[_R_HMASK]
        rot[_R_RND] = r
        rot[_R_H] = r
        if self.sv_len:
            # The served list one pass older; at n passes the round rule does its work (header).
            age = (self.sv_age + 1) & rot[_R_HMASK]
            self.sv_age = age
            if self.n <= age < rot[_R_HHALF]:
                self.sv_len = 0
        return self._give(rot[_R_NEXT], 0)

    @micropython.native
    def _give(self, j, lend):
        self.has_token = False
        self.put_token_header()
        out = self.out
        rot = self.rot
        put30(out, _T_R, rot[_R_RND])
        k = self.sv_len
        out[_T_FLAGS] = lend | (k << 1)
        # The served list's live entries, oldest first (the k slots before sv_next), with its
        # age; then every slot cleared here.
        at = _T_SERVED
        sv_node = self.sv_node
        sv_sn = self.sv_sn
        if k:
            age = self.sv_age
            out[_T_AGE] = age & 0xFF
            out[_T_AGE + 1] = age >> 8
            i = rot[_R_SV_NEXT] - k
            if i < 0:
                i += SERVED_SLOTS
            for _ in range(k):
                z = sv_node[i]
                out[at] = z & 0xFF
                out[at + 1] = z >> 8
                out[at + 2] = sv_sn[i]
                at += 3
                i = i + 1 if i + 1 < SERVED_SLOTS else 0
        for i in range(SERVED_SLOTS):
            sv_node[i] = _NONE
            sv_sn[i] = 0
        rot[_R_SV_NEXT] = 0
        self.sv_len = 0
        self.sv_age = 0
        rot[_R_RND] = 0
        a = self.send(_TOKEN, j)
        self.out_len = at if k else _T_EMPTY  # (send: the most)
        return a

    # -- rules 5, 6: the search ---------------------------------------------------

    def _gimme(self, buf):
        z = buf[_AT + _G_Z] | (buf[_AT + _G_Z + 1] << 8)
        sn = buf[_AT + _G_SN]
        hz = get30(buf, _AT + _G_H)
        lo = buf[_AT + _G_LO] | (buf[_AT + _G_LO + 1] << 8)
        hi = buf[_AT + _G_HI] | (buf[_AT + _G_HI + 1] << 8)
        if z >= self.n:
            self.errors = (self.errors + 1) & _SEQ_MASK
            return 0
        if z != self.index:
            # Rule 6's W | (x, tau_z): a trap here (one per requester, in FIFO order; header).
            if self.trap_h[z] < 0:
                rot = self.rot
                t = self.fifo_head + rot[_R_FIFO_LEN]
                self.fifo[t - self.n if t >= self.n else t] = z
                rot[_R_FIFO_LEN] += 1
            self.trap_h[z] = hz
            self.trap_sn[z] = sn
        if self.has_token:
            # "A node receiving a special message either returns the token, if it has it, or it
            # lays a local trap and sends a gimme message halfway around" (4.2): the holder is
            # in its critical section (it holds the token nowhere else); the trap is served
            # by rule 7 as the critical section ends. No forward.
            return 0
        # Rule 6: "(-, P(x, H), -, I | (x, (y, n, H_z, tau_z)), O, W) ->
        # (-, P(x, H), -, I, O | (x, (u, n/2, H_z, tau_z)), W | (x, tau_z)) where u = x^{-n/2} if
        # H subset_C H_z, and u = x^{+n/2} if H_z subset_C H" (Figure 8). This node is at position
        # r = (lo + hi) / 2 from the requester; the other half of lo..hi is searched next (rule 5's
        # deviation). Equal histories (both cases apply): the first case.
        r = (lo + hi) >> 1
        if self._later(self.rot[_R_H], hz):
            lo = r + 1  # H_z subset_C H: the token has passed here since z saw it: ahead, clockwise
        else:
            hi = r - 1  # H subset_C H_z: it has not been here since: behind, counter-clockwise
        if lo > hi:
            return 0  # the search ends with this trap (the token moved, or a history misled it)
        for k in range(_G_LO):
            self.out[k] = buf[_AT + k]
        return self._search(z, lo, hi)

    # -- recovery (protocol.Node; docs/adding-a-protocol.md section 4) -------------

    def _regenerate(self):
        # The lost token's count and served list are unknowable: the new one starts from this
        # node's history, with an empty list (a trap it then meets costs a lend at worst).
        self._new_token()
        rot = self.rot
        rot[_R_RND] = rot[_R_H]
        self.lender = -1
        rot[_R_LENT] = -1
        rot[_R_VISIT] = rot[_R_FIFO_LEN]
        rot[_R_USED] = 0
        return self._have()


# The rotation's hop on a board: NodeBS.on_message in viper for the token passed straight on by
# rule 4, the native method (its twin, which CPython, the simulator and the explorer run) for
# the rest.
on_message_native = NodeBS.on_message
try:
    @micropython.viper
    def on_message_viper(self, kind, src, buf) -> int:
        # The token of the rotation arriving where the layer's gate stays quiet (not fresh, the
        # epoch and key known), with no live trap to serve (none, or all stale: below), no
        # request here, not lent and not back from a lend: on_message's fast path, taken whole
        # here, where the payload's bytes and the arithmetic cost cycles (in native code a
        # subscript or an operator costs about a microsecond on a Pico; issue 41). The state it
        # leaves and the bytes it writes are on_message_native's (tests/test_hop_twins.py runs
        # both); the attributes are read in another order, and reading one has no side effect.
        k = int(kind)
        if k == _GIMME:
            return int(self._gimme(buf))  # as on_message_native does
        b = ptr8(buf)
        flags = b[_AT + _T_FLAGS]
        served = flags >> 1  # the list's entries: within the most the token declares (k <= SERVED_SLOTS)
        rot = ptr32(self.rot)
        if k == _TOKEN and not self.has_token and not (flags & 1) \
                and not self.pending and (not served or _T_SERVED + 3 * served <= ptr8(self.msg_sizes)[_TOKEN]):
            epoch = b[_AT + 4] | (b[_AT + 5] << 8)
            # not back from a lend: src != lent_to (-1, none, is no node's index; a ptr32 load of it
            # is 2**32 - 1 on a 64-bit port, which is no index either)
            if epoch == int(self.open_epoch) and int(src) != rot[_R_LENT]:
                n = rot[_R_N]
                hmask = rot[_R_HMASK]
                traps = rot[_R_FIFO_LEN]
                if traps:
                    # Traps laid here: _have's loop takes them in FIFO order, drops each that _stale
                    # finds served (its requester and request number in the token's served list) or
                    # old (the round rule, with the token's R as it came), and lends the token to
                    # the first live one. When every one is stale the visit is the rotation's hop
                    # with the traps gone, the common case under load (a requester served by the
                    # rotation before the token reaches its trap); otherwise the native method,
                    # nothing changed yet.
                    fifo = ptr16(self.fifo)
                    trap_h = ptr32(self.trap_h)
                    trap_sn = ptr8(self.trap_sn)
                    head = int(self.fifo_head)
                    at = _AT + _T_R
                    r = b[at] | (b[at + 1] << 8) | (b[at + 2] << 16) | ((b[at + 3] & 0x3F) << 24)
                    hhalf = rot[_R_HHALF]
                    i = head
                    left = traps
                    while left:
                        z = fifo[i]
                        sn = trap_sn[z]
                        at = _AT + _T_SERVED
                        end = at + 3 * served
                        while at < end:
                            if b[at] == (z & 0xFF) and b[at + 1] == (z >> 8) and b[at + 2] == sn:
                                break
                            at += 3
                        if at == end:  # not served: the round rule
                            d = (r - trap_h[z]) & hmask
                            if d < n or d >= hhalf:
                                return int(on_message_native(self, kind, src, buf))  # a live trap: a lend
                        i += 1
                        if i == n:
                            i = 0
                        left -= 1
                    i = head
                    left = traps
                    while left:
                        trap_h[fifo[i]] = -1
                        i += 1
                        if i == n:
                            i = 0
                        left -= 1
                    self.fifo_head = i
                    rot[_R_FIFO_LEN] = 0
                self.seq = b[_AT] | (b[_AT + 1] << 8) | (b[_AT + 2] << 16) | ((b[_AT + 3] & 0x3F) << 24)
                self.epoch = epoch
                # relay_rotation, inline: the header, R + 1 (rule 4's rotation event), lend 0, the
                # list one pass older (_rotate) or expired
                o = ptr8(self.out)
                o[0] = b[_AT]
                o[1] = b[_AT + 1]
                o[2] = b[_AT + 2]
                o[3] = b[_AT + 3] & 0x3F
                o[4] = epoch & 0xFF
                o[5] = (epoch >> 8) & 0xFF
                at = _AT + _T_R
                r = ((b[at] | (b[at + 1] << 8) | (b[at + 2] << 16) | ((b[at + 3] & 0x3F) << 24)) + 1) & hmask
                o[_T_R] = r & 0xFF
                o[_T_R + 1] = (r >> 8) & 0xFF
                o[_T_R + 2] = (r >> 16) & 0xFF
                o[_T_R + 3] = (r >> 24) & 0x3F
                size = _T_EMPTY
                if served:
                    at = _AT + _T_AGE
                    age = ((b[at] | (b[at + 1] << 8)) + 1) & hmask
                    if n <= age and age < rot[_R_HHALF]:
                        served = 0
                    else:
                        o[_T_AGE] = age & 0xFF
                        o[_T_AGE + 1] = (age >> 8) & 0xFF
                        size = _T_SERVED + 3 * served
                        i = _T_SERVED
                        while i < size:
                            o[i] = b[_AT + i]
                            i += 1
                o[_T_FLAGS] = served << 1
                rot[_R_H] = r
                rot[_R_VISIT] = 0
                rot[_R_USED] = 0
                rot[_R_LENT] = -1
                rot[_R_SV_NEXT] = 0
                rot[_R_RND] = 0
                self.out_kind = _TOKEN
                self.out_dst = rot[_R_NEXT]
                self.out_len = size
                return _SEND_MSG
        return int(on_message_native(self, kind, src, buf))

    NodeBS.on_message = on_message_viper
except (AttributeError, NameError, SyntaxError, ValueError):
    pass  # CPython, or a port without the viper emitter: the native method
