# Ciuffoletti's wandering token, "The Wandering Token: Congestion Avoidance of a Shared
# Resource", Figure 1, sections 3, 4, 4.1 and Table 1 (seeds/ciuffoletti-wandering-token.md):
# soft mutual exclusion by one token that walks at random over a full mesh; a component
# performs the protected operation A when the token visits it and its last A was more than
# Delta_min ago; a component that sees no token for Delta_gen makes a new one; of two tokens
# that meet (one enabled a component less than Delta_min ago, the other arrives) the later
# one is removed. The rules are quoted where they happen.
#
# Time and chance come from outside (docs/adding-a-protocol.md: the handlers are pure). The
# caller (the node loop, the simulator) sets self.now, the time in the run's unit (time units
# in the simulator, milliseconds on a board; 30 bits, wrapping), before every handler call, and
# calls on_wake() once now reaches self.wake_at (-1: no wake wanted). The random walk draws
# from a Lehmer generator whose seed is the option `seed` (with the node's index): the same
# seed, the same walk, on a board, a virtual board or the host.
#
# On the ring's message layer: the token is a TOKEN message to a node drawn at random among
# the n - 1 others (the paper's full mesh, section 3); on picoring's ring a message to a node
# d ahead is d hop frames and one logical message (the simulator and the checker count both).
# The protected operation A is the layer's critical section: it lasts what the caller makes
# it last (cs_time, cs_us), which the runs set to Delta_op.
#
# How Figure 1 is read here (the deviations are marked where they happen):
#   lasttoken      the token this component kept last (its identity: generation timestamp and
#                  generator id) and the time this component was last enabled (performed A,
#                  or made a token): "performing the protected operation only in case the
#                  component performed the protected operation more than Delta_min time units
#                  ago" (section 4).
#   Delta_per      Figure 1 compares with Delta_per, which the paper never defines; the text
#                  says Delta_min for both the operation rule and the removal rule ("discards a
#                  token t when it has been enabled from less than Delta_min time units").
#                  Decided: Delta_per = Delta_min (the option `per`, default min, lets a run
#                  widen or narrow the removal window alone; tests/test_wt.py holds the edges).
#
# Message: TOKEN, kind 0, to one node: seq u32 (30 bits), epoch u16 (the layer's token header),
#          ts u32 (30 bits: the generation timestamp), gen u16 (the generator's index).

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
rand_next = protocol.rand_next

TOKEN = 0
# protocol.py's constants and TOKEN, copied for the code below: a const() is inlined only in the
# module that defines it (an imported name is a dictionary lookup at every use, on every hop).
_TOKEN = const(0)
_AT = const(5)  # protocol.PAYLOAD_AT
_SEQ_MASK = const(0x3FFFFFFF)  # protocol.SEQ_MASK
_SEND_MSG = const(128)  # protocol.SEND_MSG
_DISCARDED = const(64)  # protocol.DISCARDED
_RAND_M = const(1073741789)  # protocol.RAND_M and rand_next's multiplier, M // A and M % A
_RAND_A = const(20001)
_RAND_Q = const(53684)
_RAND_R = const(8105)
if (TOKEN, protocol.PAYLOAD_AT, protocol.SEQ_MASK, protocol.SEND_MSG, protocol.DISCARDED,
        protocol.RAND_M, rand_next(1), rand_next(_RAND_Q)) != (
        _TOKEN, _AT, _SEQ_MASK, _SEND_MSG, _DISCARDED, _RAND_M, _RAND_A, _RAND_M - _RAND_R):
    raise ImportError("%s: constants disagree with protocol.py" % __name__)
_HEADER = protocol.TOKEN_HEADER  # seq u32, epoch u16
_T_TS = const(6)
_T_GEN = const(10)
_T_SIZE = const(12)
_HALF = const(0x20000000)  # times are 30-bit serial numbers: a later one is less than half a period on
_NEVER = const(-1)  # last_at before this component was ever enabled (Figure 1: id = NULL)
_HOLD_NONE = const(0)
_HOLD_SKIP = const(1)  # the token stays Delta_skip (no operation)
_HOLD_OP = const(2)  # the token stays while A runs (the critical section)
_GEN_CAP = const(0x8000000)  # Delta_gen stops growing here (2**27 units: 37 hours in ms)

# NodeWT.walk: the component's own state and settings in one int array, not attributes: the walk's
# hop reads or writes thirteen of them, and on a Pico an attribute costs about 2.2 us from viper
# (a map lookup and its hash's division), a field of the array a few cycles through a pointer
# (issue 41). The names without the underscore are for the host's code and the tests.
W_SINCE = 0  # the select's start: the last token received, passed or made here
W_TOK_TS = 1  # the token while it is here: its identity (seq and epoch are Node's)
W_TOK_GEN = 2
W_LAST_TS = 3  # Figure 1's lasttoken: the identity of the token kept last (header)
W_LAST_GEN = 4
W_LAST_AT = 5  # when this component was last enabled (_NEVER: never)
W_HOLD = 6  # how the token is held here (_HOLD_*)
W_RNG = 7  # the walk's generator (1..M-1)
W_GEN = 8  # Delta_gen, the generation timeout (adaptive)
W_SKIP = 9  # Delta_skip, Delta_min, Delta_max, Figure 1's Delta_per: the settings
W_MIN = 10
W_MAX = 11
W_PER = 12
W_OTHERS = 13  # n - 1 and the node's index, for the draw (Node's n and index, copied once)
W_INDEX = 14
W_LAST_EPOCH = 15  # lasttoken's epoch (the layer's): the removal rule judges only tokens of one epoch
W_SIZE = 16
_W_SINCE = const(0)
_W_TOK_TS = const(1)
_W_TOK_GEN = const(2)
_W_LAST_TS = const(3)
_W_LAST_GEN = const(4)
_W_LAST_AT = const(5)
_W_HOLD = const(6)
_W_RNG = const(7)
_W_GEN = const(8)
_W_SKIP = const(9)
_W_MIN = const(10)
_W_MAX = const(11)
_W_PER = const(12)
_W_OTHERS = const(13)
_W_INDEX = const(14)
_W_LAST_EPOCH = const(15)
if (W_SINCE, W_TOK_TS, W_TOK_GEN, W_LAST_TS, W_LAST_GEN, W_LAST_AT, W_HOLD, W_RNG, W_GEN, W_SKIP, W_MIN, W_MAX,
        W_PER, W_OTHERS, W_INDEX, W_LAST_EPOCH) != (
        _W_SINCE, _W_TOK_TS, _W_TOK_GEN, _W_LAST_TS, _W_LAST_GEN, _W_LAST_AT, _W_HOLD, _W_RNG, _W_GEN, _W_SKIP,
        _W_MIN, _W_MAX, _W_PER, _W_OTHERS, _W_INDEX, _W_LAST_EPOCH):
    raise ImportError("%s: the walk's indices disagree" % __name__)


def relay_token_py(out, buf, epoch):
    """A token message passed on as it came (the walk's every hop with Delta_skip = 0): its
    payload buf[_AT:_AT + _T_SIZE] into out, seq's and ts's top two bits cleared (as get30 reads
    them and put30 writes them), the epoch the token goes on with (the gate's) in its place: the
    bytes put_token_header, put30 and the generator's two bytes would write. No slice (which
    allocates)."""
    out[0] = buf[_AT]
    out[1] = buf[_AT + 1]
    out[2] = buf[_AT + 2]
    out[3] = buf[_AT + 3] & 0x3F
    out[4] = epoch & 0xFF
    out[5] = (epoch >> 8) & 0xFF
    out[_T_TS] = buf[_AT + _T_TS]
    out[_T_TS + 1] = buf[_AT + _T_TS + 1]
    out[_T_TS + 2] = buf[_AT + _T_TS + 2]
    out[_T_TS + 3] = buf[_AT + _T_TS + 3] & 0x3F
    out[_T_GEN] = buf[_AT + _T_GEN]
    out[_T_GEN + 1] = buf[_AT + _T_GEN + 1]


relay_token = relay_token_py
try:
    # Its viper twin (tests/test_frame_twins.py): on a Pico a byte costs a few cycles here, a
    # subscript in native code about 1.7 us (issue 41). Here, not in protocol.py, which every
    # board loads (its names there made S's hop slower: docs/performance.md).
    @micropython.viper
    def relay_token_viper(out, buf, epoch: int):
        o = ptr8(out)
        b = ptr8(buf)
        o[0] = b[_AT]
        o[1] = b[_AT + 1]
        o[2] = b[_AT + 2]
        o[3] = b[_AT + 3] & 0x3F
        o[4] = epoch & 0xFF
        o[5] = (epoch >> 8) & 0xFF
        o[_T_TS] = b[_AT + _T_TS]
        o[_T_TS + 1] = b[_AT + _T_TS + 1]
        o[_T_TS + 2] = b[_AT + _T_TS + 2]
        o[_T_TS + 3] = b[_AT + _T_TS + 3] & 0x3F
        o[_T_GEN] = b[_AT + _T_GEN]
        o[_T_GEN + 1] = b[_AT + _T_GEN + 1]

    relay_token = relay_token_viper
except (AttributeError, NameError, SyntaxError, ValueError):
    pass  # CPython, or a port without the viper emitter: the Python twin


def _int_opt(opts, key, default):
    v = opts.get(key)
    return default if v is None else int(v)


class NodeWT(Node):
    """The wandering token: a random walk, the generation and removal rules, the adaptive Delta_gen."""

    name = "wt"
    about = {
        "name": "wt",
        "title": "the wandering token: soft mutual exclusion by a token on a random walk (Ciuffoletti)",
        "citation": ("Ciuffoletti: The Wandering Token: Congestion Avoidance of a Shared Resource, "
                     "Figure 1, sections 4 and 4.1, Table 1; seeds/ciuffoletti-wandering-token.md"),
        "exclusion": "soft",  # "with high probability, there is just one component enabled" (Requirement 1)
        "rests": False,  # the token wanders for ever: runs stop at an idle horizon or a time limit
        "clocked": True,  # the caller sets now and calls on_wake (header)
        # Figure 4's transient after a token loss ends once a token has lived Delta_max: a
        # component no token reached for that long would have made one (check/soft.py)
        "settles": "d_max",
        "view": {},
        "options": {
            "skip": "Delta_skip, the least time a token stays (default 1)",
            "op": "Delta_op, the protected operation's length, for the defaults below (default 4)",
            "min": "Delta_min, the least time between two operations of a component "
                   "(default Table 1's 1.5 * op * n)",
            "max": "Delta_max, the base token generation timeout (default Table 1's 3 * min)",
            "per": "Figure 1's Delta_per, the removal window (default min: the text's)",
            "seed": "the random walk's seed (default 1); each node mixes in its index",
        },
        # A visit that finds no operation due still waits Delta_skip units, and a node not visited
        # for Delta_max makes a token: a request can wait that long.
        "starve_horizon": "64 * n * (n + cs + 1) + 16",
        "messages": {"token": {"kind": _TOKEN, "to": "a node drawn at random (a full mesh over the ring)",
                               "payload": "seq u32, epoch u16, ts u32, gen u16"}},
        "bounds": {
            # A random walk: no bound on the messages a request costs (the cover time, [8]).
            "messages_per_request": {"paper": None, "checked": None, "where": "a random walk: unbounded"},
            "service_traffic": {"paper": None, "checked": None, "where": "a random walk: unbounded"},
        },
    }
    clocked = True
    uses_requests = False  # the walk reaches every node: nothing to re-announce

    def message_sizes(self, n):
        return {_TOKEN: _T_SIZE}

    def __init__(self, index, n):
        Node.__init__(self, index, n)
        o = self.opts
        # Table 1 (time units, or milliseconds on a board): Delta_skip 1, Delta_op 4,
        # Delta_min = 1.5 * (Delta_op * N), Delta_max = 3 * Delta_min. A Delta_min or Delta_per of
        # 2**30 - 1 or more acts as 2**30 - 1 (an elapsed time, 30 bits, is never more): kept
        # there, so that it fits the walk's int array.
        self.d_skip = _int_opt(o, "skip", 1)
        op = _int_opt(o, "op", 4)
        self.d_min = min(_int_opt(o, "min", (3 * op * n) // 2), _SEQ_MASK)
        self.d_max = _int_opt(o, "max", 3 * self.d_min)
        self.d_per = min(_int_opt(o, "per", self.d_min), _SEQ_MASK)
        if not (0 <= self.d_skip <= _SEQ_MASK and 0 < self.d_min and 0 < self.d_max <= _GEN_CAP and 0 <= self.d_per):
            raise ValueError("wt: 0 <= skip <= %d, min > 0, 0 < max <= %d, per >= 0" % (_SEQ_MASK, _GEN_CAP))
        w = array("i", bytes(4 * W_SIZE))
        self.walk = w  # (W_*: the component's state, and its settings as the handlers read them)
        # Figure 1: "Delta_gen = Delta_max".
        w[_W_GEN] = self.d_max
        # Figure 1: "lasttoken = {timestamp = 0, id = NULL}" (header: the identity of the token
        # kept last, and when this component was last enabled).
        w[_W_LAST_TS] = 0
        w[_W_LAST_GEN] = -1
        w[_W_LAST_AT] = _NEVER
        # The token while it is here (its identity; seq and epoch are Node's), how it is held.
        w[_W_TOK_TS] = 0
        w[_W_TOK_GEN] = 0
        w[_W_HOLD] = _HOLD_NONE
        w[_W_SINCE] = 0
        w[_W_SKIP] = self.d_skip
        w[_W_MIN] = self.d_min
        w[_W_MAX] = self.d_max
        w[_W_PER] = self.d_per
        w[_W_OTHERS] = n - 1
        w[_W_INDEX] = index
        # WT sends one kind of message, of one size: set here once, not at every hop (send sets
        # them again to the same).
        self.out_kind = _TOKEN
        self.out_len = _T_SIZE
        self.now = 0
        self.wake_at = -1
        self.generated = 0  # tokens made here (the generation rule)
        self.removed = 0  # tokens removed here (the removal rule)
        self.ops = 0  # operations A performed here
        x = (protocol.rand_mix(_int_opt(o, "seed", 1), index) + 1) % (protocol.RAND_M - 1)
        w[_W_RNG] = x + 1  # 1..M-1
        self._arm()  # Figure 1's first select: a token within Delta_gen, or one is made

    # -- chance and time ------------------------------------------------------------

    @micropython.native
    def _draw(self):
        """The next number of the walk's generator (protocol.rand_next: no big int on a Pico)."""
        w = self.walk
        x = rand_next(w[_W_RNG])
        w[_W_RNG] = x
        return x

    @micropython.native
    def _elapsed(self, since):
        return (self.now - since) & _SEQ_MASK

    @micropython.native
    def _arm(self):
        """wake_at: the end of a Delta_skip hold, else the generation timeout (Figure 1's select)."""
        w = self.walk
        hold = w[_W_HOLD]
        if hold == _HOLD_SKIP:
            self.wake_at = (w[_W_SINCE] + w[_W_SKIP]) & _SEQ_MASK
        elif hold == _HOLD_OP:
            self.wake_at = -1  # the critical section's end passes the token (exit_cs)
        else:
            self.wake_at = (w[_W_SINCE] + w[_W_GEN]) & _SEQ_MASK

    @micropython.native
    def _precedes(self, ts, gen, ts2, gen2):
        """Token (ts, gen) precedes token (ts2, gen2): "Precedence is based firstly on the timestamp
        included in the token, and next on the generator identifier" (section 4)."""
        if ts != ts2:
            d = (ts2 - ts) & _SEQ_MASK
            return d < _HALF
        return gen < gen2

    # -- the layer's events ---------------------------------------------------------

    def give_token(self):
        # The ring's first token, made here at the start: as a generated token would be, but
        # without the timeout (it is not a replacement) and with a visit of its own.
        self._make_token()
        return self._visit()

    def waiting(self):
        # The layer's boot runs (a board joins the ring's epoch, position 0 claims the first
        # token), its recovery never does: a token missed is this protocol's generation rule's.
        return self.fresh or self.starting

    def request(self):
        # The application wants A: performed at the token's next visit that finds Delta_min past.
        # In the paper every component always wants it (the runs renew each request at its exit).
        self.pending = True
        return 0

    @micropython.native
    def on_message(self, kind, src, buf):
        # The walk's every hop comes here: written out in one native function, the helpers'
        # code inline (a method call costs about 11 us on a Pico, get30's 20 us; issue 41:
        # this hop cost 2.3 times S's). Each inlined piece names the helper whose code it is
        # (token_gate, get30, _removes, _visit, _arm, _pass, put_token_header, _next, send),
        # which the rarer paths still call.
        if kind != _TOKEN:
            self.errors = (self.errors + 1) & _SEQ_MASK
            return 0
        # The layer's epoch gate (boot on a board): Node.token_gate.
        epoch = buf[_AT + 4] | (buf[_AT + 5] << 8)
        if epoch != self.open_epoch:
            epoch = self._gate(epoch)
            if epoch < 0:
                return _DISCARDED
        # Figure 1: "select(receive(token), Delta_gen); if (defined(token)) then
        # Delta_gen = Delta_gen - K2_loss (Delta_gen - Delta_max)", K2_loss = 0.05.
        # Deviation: in integers, the 5% rounded up, so that Delta_gen reaches Delta_max.
        w = self.walk
        g = w[_W_GEN]
        d = g - w[_W_MAX]
        if d > 0:
            g -= (d + 19) // 20
            w[_W_GEN] = g
        ts = buf[_AT + _T_TS] | (buf[_AT + _T_TS + 1] << 8) | (buf[_AT + _T_TS + 2] << 16) | (
            (buf[_AT + _T_TS + 3] & 0x3F) << 24)  # get30
        gen = buf[_AT + _T_GEN] | (buf[_AT + _T_GEN + 1] << 8)
        if self.has_token:
            # Deviation: Figure 1 receives a second token only after sending the one it holds.
            # Here it is judged at once by the removal rule and, if kept, passed on at once (its
            # Delta_skip is not waited: a visit of a second token during a hold of at most
            # Delta_op is rare, and this node holds one token at a time).
            if self._removes(ts, gen, epoch):
                return self._remove()
            return self._forward(buf)
        now = self.now
        w[_W_SINCE] = now
        self.seq = buf[_AT] | (buf[_AT + 1] << 8) | (buf[_AT + 2] << 16) | ((buf[_AT + 3] & 0x3F) << 24)  # get30
        self.epoch = epoch
        w[_W_TOK_TS] = ts
        w[_W_TOK_GEN] = gen
        # has_token (False here) is set True only where the token stays: a token removed or
        # passed straight on leaves it False, as setting it and clearing it did (two stores a
        # hop; nothing between reads it).
        last_at = w[_W_LAST_AT]
        # _removes, its window (_in_window) tested here: outside it (always, on a ring whose
        # nodes never performed A) no call.
        if last_at != _NEVER and ((now - last_at) & _SEQ_MASK) <= w[_W_PER] and self._removes(ts, gen, epoch):
            return self._remove()
        # _visit: "lasttoken = token", then A if due, else a Delta_skip stay.
        w[_W_LAST_TS] = ts
        w[_W_LAST_GEN] = gen
        w[_W_LAST_EPOCH] = epoch
        if self.pending and not (last_at != _NEVER and ((now - last_at) & _SEQ_MASK) <= w[_W_MIN]):
            self.has_token = True
            return self._visit()  # A is due: _visit performs it (the same test again, then _enter)
        skip = w[_W_SKIP]
        if skip:
            self.has_token = True
            w[_W_HOLD] = _HOLD_SKIP
            self.wake_at = (now + skip) & _SEQ_MASK  # _arm
            return 0
        # Delta_skip = 0: _pass at once. Its state as _visit's hold and _arm, then _pass's,
        # leave it: no hold, the generation timeout armed from now.
        w[_W_HOLD] = _HOLD_NONE
        self.wake_at = (now + g) & _SEQ_MASK  # _arm (g: Delta_gen, as decayed above)
        # put_token_header, put30 and the generator's bytes: the payload as it came, its top bits
        # cleared as get30 and put30 leave them, with the epoch it goes on with (one viper call;
        # twelve subscripts and their shifts in native code cost about 30 us on a Pico).
        relay_token(self.out, buf, epoch)
        # _next, with _draw's protocol.rand_next (Schrage's method) inline.
        x = w[_W_RNG]
        x = _RAND_A * (x % _RAND_Q) - _RAND_R * (x // _RAND_Q)
        if x <= 0:
            x += _RAND_M
        w[_W_RNG] = x
        r = x % w[_W_OTHERS]
        if r >= w[_W_INDEX]:
            r += 1
        # send: the kind and the size are WT's only ones, set once (__init__: out_kind, out_len).
        self.out_dst = r
        return _SEND_MSG

    @micropython.native
    def _in_window(self, width):
        last_at = self.walk[_W_LAST_AT]
        return last_at != _NEVER and self._elapsed(last_at) <= width

    @micropython.native
    def _removes(self, ts, gen, epoch):
        """The token removal rule: "the component discards a token t when it has been enabled from
        less than Delta_min time units by another token preceding t" (section 4; Figure 1's
        "if token.timestamp - lasttoken.timestamp <= Delta_per ... if token.id != lasttoken.id
        then next"), with Delta_per = Delta_min (header). epoch: the token's, as the gate left it."""
        w = self.walk
        if not self._in_window(w[_W_PER]):
            return False
        if epoch != w[_W_LAST_EPOCH]:
            # Deviation: the paper has one kind of token; here the layer's boot makes tokens of
            # new epochs, and its epoch gate keeps the newer epoch's token where this rule keeps
            # the older token. Both judging one pair removed both (a node enabled by X removed
            # a later Y of a newer epoch while another, at Y's epoch, dropped X at its gate: a
            # loaded CI run's forming ended with no token). Tokens of two epochs are the gate's;
            # this rule judges only a token of the epoch of the one that enabled the node.
            return False
        if ts == w[_W_LAST_TS] and gen == w[_W_LAST_GEN]:
            return False  # the same token
        # Deviation from Figure 1, which removes any other token in the window: the text removes
        # only a token that the one it met precedes, so the older of two always survives.
        return self._precedes(w[_W_LAST_TS], w[_W_LAST_GEN], ts, gen)

    def _remove(self):
        self.removed = (self.removed + 1) & _SEQ_MASK
        self._arm()
        return _DISCARDED  # Figure 1's "next": lasttoken stays as it was

    @micropython.native
    def _visit(self):
        """The token is here and kept: A, or a Delta_skip stay."""
        # Figure 1: "lasttoken = token" for a token kept (the identity; the enabling time is
        # last_at, set below when A is performed).
        w = self.walk
        w[_W_LAST_TS] = w[_W_TOK_TS]
        w[_W_LAST_GEN] = w[_W_TOK_GEN]
        w[_W_LAST_EPOCH] = self.epoch
        if self.pending and not self._in_window(w[_W_MIN]):
            # "performing the protected operation only in case the component performed the
            # protected operation more than Delta_min time units ago" (section 4); Figure 1:
            # "execute(A); send(token)": the token stays while A runs.
            w[_W_LAST_AT] = self.now
            self.ops = (self.ops + 1) & _SEQ_MASK
            w[_W_HOLD] = _HOLD_OP
            self._arm()
            return self._enter()
        # Figure 1: "sleep(Delta_skip); send(token)".
        w[_W_HOLD] = _HOLD_SKIP
        self._arm()
        if w[_W_SKIP] == 0:
            return self._pass()
        return 0

    @micropython.native
    def on_wake(self):
        w = self.walk
        if self.fresh or self.starting:
            # A board still joining the ring (the layer's boot): no token to miss yet.
            w[_W_SINCE] = self.now
            self._arm()
            return 0
        if w[_W_HOLD] == _HOLD_SKIP:
            if self._elapsed(w[_W_SINCE]) < w[_W_SKIP]:
                self._arm()
                return 0
            return self._pass()
        if self.has_token or w[_W_HOLD] != _HOLD_NONE or self._elapsed(w[_W_SINCE]) < w[_W_GEN]:
            self._arm()
            return 0
        # The token generation rule: "generating a new token when a component does not receive one
        # within a timeout Delta_max from the last token" (section 4); Figure 1: "Delta_gen =
        # Delta_gen * K1_loss; token = {timestamp = localclock, id = newid()}; send(token)",
        # K1_loss = 1.5 (section 4.1: "incrementing Delta_gen at a constant rate (50%)").
        g = w[_W_GEN] + w[_W_GEN] // 2
        w[_W_GEN] = g if g < _GEN_CAP else _GEN_CAP
        self.generated = (self.generated + 1) & _SEQ_MASK
        self.regenerated = (self.regenerated + 1) & _SEQ_MASK
        self._make_token()
        # Figure 1: "lasttoken = token": the generator counts as enabled by it now.
        w[_W_LAST_TS] = w[_W_TOK_TS]
        w[_W_LAST_GEN] = w[_W_TOK_GEN]
        w[_W_LAST_EPOCH] = self.epoch  # (the epoch _pass sends it with)
        w[_W_LAST_AT] = self.now
        return self._pass() | protocol.REGENERATED

    def exit_cs(self):
        # A is over: "send(token)".
        self.in_cs = False
        if self.walk[_W_HOLD] == _HOLD_OP and self.has_token:
            return self._pass()
        return 0

    def _make_token(self):
        self.has_token = True
        w = self.walk
        w[_W_TOK_TS] = self.now & _SEQ_MASK
        w[_W_TOK_GEN] = self.index
        w[_W_SINCE] = self.now

    @micropython.native
    def _next(self):
        """A random node among the n - 1 others: the random walk over the full mesh (section 3)."""
        r = self._draw() % (self.n - 1)
        return r + 1 if r >= self.index else r

    @micropython.native
    def _pass(self):
        self.has_token = False
        w = self.walk
        w[_W_HOLD] = _HOLD_NONE
        w[_W_SINCE] = self.now
        self._arm()
        self.put_token_header()
        out = self.out
        put30(out, _T_TS, w[_W_TOK_TS])
        gen = w[_W_TOK_GEN]
        out[_T_GEN] = gen & 0xFF
        out[_T_GEN + 1] = gen >> 8
        return self.send(_TOKEN, self._next())

    def _forward(self, buf):
        """A second token, kept: on to a random node as it came (Deviation in on_message)."""
        out = self.out
        for k in range(_T_SIZE):
            out[k] = buf[_AT + k]
        return self.send(_TOKEN, self._next())

    # -- recovery (protocol.Node; docs/adding-a-protocol.md section 4) ---------------

    def _regenerate(self):
        # The layer's first token on a board (boot: a claim round) starts the walk here.
        self._make_token()
        return self._visit()


# The walk's hop on a board: NodeWT.on_message in viper for the visits that need none of its
# rules' calls, the native method (its twin, which CPython and the simulator run) for the rest.
on_message_native = NodeWT.on_message
try:
    @micropython.viper
    def on_message_viper(self, kind, src, buf) -> int:
        # A visit of the token that keeps the layer's gate quiet (not fresh, the epoch and key
        # known), finds no token here, falls outside the removal window and has no operation
        # due: taken whole here, where the payload's bytes and the arithmetic cost cycles (in
        # native code a subscript or an operator costs about a microsecond on a Pico; issue 41).
        # The state it leaves and the bytes it writes are on_message_native's
        # (tests/test_hop_twins.py runs both); the attributes are read in another order, and
        # reading one has no side effect. Everything else goes to the native method.
        b = ptr8(buf)
        if int(kind) == _TOKEN and not self.has_token:
            epoch = b[_AT + 4] | (b[_AT + 5] << 8)
            if epoch == int(self.open_epoch):  # (protocol.sync_gate)
                w = ptr32(self.walk)
                now = int(self.now)
                last_at = w[_W_LAST_AT]
                quiet = 0
                if last_at == _NEVER:
                    if not self.pending:
                        quiet = 1
                else:
                    e = (now - last_at) & _SEQ_MASK
                    if e > w[_W_PER] and (e <= w[_W_MIN] or not self.pending):
                        quiet = 1
                if quiet:
                    g = w[_W_GEN]  # Delta_gen's decay (K2_loss, rounded up)
                    d = g - w[_W_MAX]
                    if d > 0:
                        g -= (d + 19) // 20
                        w[_W_GEN] = g
                    w[_W_SINCE] = now
                    ts = b[_AT + _T_TS] | (b[_AT + _T_TS + 1] << 8) | (b[_AT + _T_TS + 2] << 16) | (
                        (b[_AT + _T_TS + 3] & 0x3F) << 24)  # get30
                    gen = b[_AT + _T_GEN] | (b[_AT + _T_GEN + 1] << 8)
                    self.seq = b[_AT] | (b[_AT + 1] << 8) | (b[_AT + 2] << 16) | ((b[_AT + 3] & 0x3F) << 24)
                    self.epoch = epoch
                    w[_W_TOK_TS] = ts
                    w[_W_TOK_GEN] = gen
                    w[_W_LAST_TS] = ts  # _visit: "lasttoken = token"
                    w[_W_LAST_GEN] = gen
                    w[_W_LAST_EPOCH] = epoch
                    skip = w[_W_SKIP]
                    if skip:  # a Delta_skip stay
                        self.has_token = True
                        w[_W_HOLD] = _HOLD_SKIP
                        self.wake_at = (now + skip) & _SEQ_MASK
                        return 0
                    # Delta_skip = 0: passed on at once (_pass, relay_token, _next, send).
                    w[_W_HOLD] = _HOLD_NONE
                    self.wake_at = (now + g) & _SEQ_MASK
                    o = ptr8(self.out)
                    o[0] = b[_AT]
                    o[1] = b[_AT + 1]
                    o[2] = b[_AT + 2]
                    o[3] = b[_AT + 3] & 0x3F
                    o[4] = epoch & 0xFF
                    o[5] = (epoch >> 8) & 0xFF
                    o[_T_TS] = b[_AT + _T_TS]
                    o[_T_TS + 1] = b[_AT + _T_TS + 1]
                    o[_T_TS + 2] = b[_AT + _T_TS + 2]
                    o[_T_TS + 3] = b[_AT + _T_TS + 3] & 0x3F
                    o[_T_GEN] = b[_AT + _T_GEN]
                    o[_T_GEN + 1] = b[_AT + _T_GEN + 1]
                    x = w[_W_RNG]
                    x = _RAND_A * (x % _RAND_Q) - _RAND_R * (x // _RAND_Q)
                    if x <= 0:
                        x += _RAND_M
                    w[_W_RNG] = x
                    r = x % w[_W_OTHERS]
                    if r >= w[_W_INDEX]:
                        r += 1
                    self.out_dst = r  # (out_kind and out_len: WT's only ones, set once)
                    return _SEND_MSG
        return int(on_message_native(self, kind, src, buf))

    NodeWT.on_message = on_message_viper
except (AttributeError, NameError, SyntaxError, ValueError):
    pass  # CPython, or a port without the viper emitter: the native (or plain) method
