# The protocol layer: what every token protocol of picoring stands on, and the
# registry of the protocols (docs/adding-a-protocol.md).
#
# Each protocol is one module of the firmware (proto_s.py, proto_q.py, proto_d.py,
# ...): a subclass of Node below, a pure state machine, with a descriptor (its
# `about` dict: name, citation, hard or soft mutual exclusion, the bounds its
# source proves). A board imports only its own protocol's module (REGISTRY, load).
# These files run on a Pico (rp2 port), on a virtual board (unix port) and on the
# host (simulator, explorer, checker tests). They do no I/O, read no clock and
# allocate nothing per event: every handler only assigns small ints and bools
# (and bytes of preallocated buffers) and returns a bit mask of actions for the
# caller (the node loop, firmware/node.py, or the simulator) to carry out.
#
# Three ways to send over the unidirectional ring:
#   to the next node    S, Q and D's own token and request frames (SEND_TOKEN,
#                       SEND_REQUEST), or a message with send(kind, next_index)
#   to a node by index  send(kind, dst): the frame travels (dst - index) mod n hops;
#                       the nodes in between pass it on without waking their protocol
#   to all nodes        send(kind, BROADCAST): one frame goes once round the ring;
#                       every other node delivers it to its protocol (on_message)
#                       and passes it on; back at the sender it is taken off
# A message is a kind (0..MSG_KINDS - 1), a source, a destination and a payload
# whose size the protocol declares per kind (message_sizes(n)): one size, or for a
# kind of variable length the least and the most bytes (its payload then says its
# own length: the receiver is not told it); the frame format is in docs/frames.md.
#
# Events in:  request()        the local application needs the resource
#             on_request()     a request message arrived from the previous node
#             on_token(...)    the token arrived from the previous node
#             on_message(kind, src, buf)  a message for this node arrived (or a
#                              broadcast of another node); its payload is
#                              buf[PAYLOAD_AT:PAYLOAD_AT + its size] (a variable
#                              kind's: within its declared least..most)
#             exit_cs()        the local critical section has finished
#             on_wake()        a clocked protocol's wake-up time (wake_at) has come
#           Recovery on a lossy ring (docs/recovery.md; not in the paper):
#             boot()           the board has just started and knows nothing
#             on_timeout()     no token seen for the regeneration timeout
#             on_claim(...)    a claim or join frame arrived
#             on_request_again()  a re-announced request message arrived
# Actions out (bit mask returned by every handler):
#             SEND_TOKEN       send the token to the next node; its fields are
#                              this node's count/state/seq/epoch attributes
#             SEND_REQUEST     send one (anonymous) request message to the next node
#             ENTER_CS         the critical section starts now; call exit_cs() at its end
#             SEND_CLAIM       send a claim/join frame: fields claim_epoch,
#                              claim_origin, claim_join, claim_seq, claim_nonce
#             SEND_AGAIN       send a re-announced request message
#             REGENERATED      (for the log) a new token was made here
#             DISCARDED        (for the log) a token of an old epoch was dropped here
#             SEND_MSG         send the message in out_kind, out_dst, out[0:out_len]
#                              (set by send(); one message per handler call)
#
# Time (clocked protocols: the wandering token). A protocol whose class sets clocked = True
# reads the time from self.now, which the caller (node loop, simulator) sets before every
# handler call (the run's unit: hop times in the simulator, milliseconds on a board; 30 bits,
# wrapping at SEQ_MASK), and wants on_wake() called once now reaches self.wake_at (-1: never).
# The protocol itself reads no clock: the same code then runs in simulated and in real time.
# Callers ask getattr(node, "clocked", False): Node itself has none of these names (each name
# in its class dictionary is in the way of the lookups of a board's every hop).
#
# "p has T" in the paper means the token is at p: resting there or held in p's
# critical section. A token that only passes through p is never "had" between
# two events.
#
# Interpretation shared by Q and D (not spelled out in the paper): a request
# message that reaches p while p is inside its critical section updates the
# token as the rule says, but T is passed on when the critical section ends,
# never during it (passing it would break mutual exclusion).

try:
    from micropython import const
    import micropython
except ImportError:  # CPython

    def const(value):
        return value

    class micropython:
        """@micropython.native is MicroPython's compiler's (machine code, call
        state on the C stack); on CPython the handlers run as they are."""

        @staticmethod
        def native(f):
            return f


# Action bits. Public because the node loop and the simulator dispatch on them.
SEND_TOKEN = const(1)
SEND_REQUEST = const(2)
ENTER_CS = const(4)
SEND_CLAIM = const(8)
SEND_AGAIN = const(16)
REGENERATED = const(32)
DISCARDED = const(64)
SEND_MSG = const(128)

# What an action bit does: one table, read by the node loop's slow path (firmware/node.py,
# NodeLoop._act), the simulator (sim/simcore.py) and both explorers (explore/model.py,
# explore/lossy_model.py). A row: (bit, the kind of the frame it sends (frame.py), 0: none).
# The frames go on the wire in the rows' order, and then the critical section starts; a token
# frame goes instead of a request frame (a handler returning both sends the token only). The
# node loop's hot path (a token or a request frame passed straight on: a mask of that one bit)
# keeps its inline copy of those two rows (tests/test_node_loop.py checks that they agree).
ACTIONS = (
    (SEND_MSG, 7),  # frame.MSG: out_kind to out_dst (a node or BROADCAST), payload out[0:out_len]
    (SEND_TOKEN, 1),  # frame.TOKEN to the next node: count, state, seq, epoch
    (SEND_REQUEST, 2),  # frame.REQUEST to the next node, unless SEND_TOKEN
    (SEND_AGAIN, 6),  # frame.AGAIN to the next node: again_origin
    (SEND_CLAIM, 5),  # frame.CLAIM to the next node: claim_epoch, _origin, _join, _seq, _nonce
    (ENTER_CS, 0),  # the critical section starts (after the frames); exit_cs() at its end
    (REGENERATED, 0),  # for the log: a new token was made here
    (DISCARDED, 0),  # for the log: a token of an old epoch was dropped here
)
SENDS = const(0x9B)  # SEND_MSG | SEND_TOKEN | SEND_REQUEST | SEND_AGAIN | SEND_CLAIM: the bits that send a frame


def _wire_order(a):
    if a & SEND_TOKEN:
        a &= ~SEND_REQUEST
    return tuple([row[0] for row in ACTIONS if a & row[0] & SENDS])


# sends(a)'s answers, made once (32 masks): the node loop allocates nothing per action
_SENDS_OF = {}
for _a in range(SENDS + 1):
    if not _a & ~SENDS:
        _SENDS_OF[_a] = _wire_order(_a)


def sends(a):
    """The SEND_* bits of action mask a, one per frame sent, in the order the frames go on
    the wire (ACTIONS)."""
    return _SENDS_OF[a & SENDS]

# Messages of the layer (frame.MSG frames, docs/frames.md).
BROADCAST = const(0xFF)  # destination: every node (frame.BROADCAST)
PAYLOAD_AT = const(5)  # a delivered message's payload starts at buf[PAYLOAD_AT] (frame.MSG_HEAD)
TOKEN_HEADER = const(6)  # a token message's payload starts with seq u32 (30 bits), epoch u16 (put_token_header)
MSG_KINDS = const(16)  # message kinds 0..15
MSG_MAX_PAYLOAD = const(246)  # frame.MSG_MAX_PAYLOAD
NO_SIZE = const(255)  # msg_sizes[kind] (and msg_least[kind]) of a kind the protocol does not declare

# claim key owner meaning "a token of this epoch has been seen here": it outranks
# every claim of the same epoch (claims carry positions 0..65534).
OWNER_TOKEN = const(0xFFFF)

# Token state of protocol D (the "bit" of section 4).
CHECK = const(0)
ACTIVE = const(1)

# Version of the token layout: count, state, seq, epoch.
TOKEN_FIELDS = ("count", "state", "seq", "epoch")


# Entry numbers (seq) and every counter wrap at 2**30 (frame.SEQ_MASK): on the rp2 port a
# larger int is a heap object, and seq is updated at every critical-section entry.
SEQ_MASK = const(0x3FFFFFFF)


def newer(a, b):
    """True when epoch a is later than epoch b (16-bit serial numbers, RFC 1982)."""
    d = (a - b) & 0xFFFF
    return 0 < d < 0x8000


def seq_later(a, b):
    """True when entry number a is later than b (30-bit serial numbers, RFC 1982)."""
    d = (a - b) & SEQ_MASK
    return 0 < d < 0x20000000


def next30(v):
    """v + 1 modulo 2**30, never making 2**30 (a heap long int on the rp2 port, whose small
    ints end at 2**30 - 1): for a counter that must not allocate even at its wrap."""
    return 0 if v == SEQ_MASK else v + 1


@micropython.native
def get30(buf, at):
    """A 30-bit number from a message payload: little-endian in 4 bytes, the top two bits
    not read (the layout of the token header's seq, docs/frames.md)."""
    return buf[at] | (buf[at + 1] << 8) | (buf[at + 2] << 16) | ((buf[at + 3] & 0x3F) << 24)


# A random number generator with no big int on a Pico (the rp2 port's small ints have 30 bits):
# Lehmer's x <- A*x mod M, by Schrage's method so that no intermediate passes 2**30. M is the
# largest prime below 2**30, A a primitive root of it with M mod A < M div A. Drawn from by the
# wandering token's walk and by a board's drop_rx fault (hal.LossyUart).
RAND_M = const(1073741789)
_RAND_A = const(20001)
_RAND_Q = const(53684)  # M // A
_RAND_R = const(8105)  # M % A


def rand_mix(seed, index):
    """A run's seed mixed with a node's index: each node's own start for the generator (taken
    modulo RAND_M - 1 by its user), so that nodes seeded alike still draw apart."""
    return seed * 7919 + index * 104729


@micropython.native
def rand_next(x):
    """The generator's number after x; x and the result are in 1..RAND_M - 1."""
    x = _RAND_A * (x % _RAND_Q) - _RAND_R * (x // _RAND_Q)
    return x + RAND_M if x <= 0 else x


@micropython.native
def put30(buf, at, v):
    """Write a 30-bit number into a payload as get30 reads it."""
    buf[at] = v & 0xFF
    buf[at + 1] = (v >> 8) & 0xFF
    buf[at + 2] = (v >> 16) & 0xFF
    buf[at + 3] = (v >> 24) & 0x3F


class Node:
    """Common part: token custody, the pending request, the critical section,
    and the recovery rules that keep one token on a lossy ring.

    Token fields, meaningful while has_token is true (and read by the caller
    right after a SEND_TOKEN action):
      count  protocol counter (Q: registered requests, D: check-tour hops left)
      state  D: CHECK or ACTIVE; Q: hops since the token was last held (recovery)
      seq    number of critical-section entries since the ring started
             (for the link layer and the checker: detects a lost/duplicated token)
      epoch  token generation: a regenerated token has a later epoch, and a
             token of an epoch older than this node knows is discarded

    Recovery state (docs/recovery.md): known_epoch/known_owner, the highest
    claim key (epoch, originator) this node has adopted, with owner OWNER_TOKEN
    once a token of that epoch has been seen; fresh, true from boot() until the
    node's join round has told it the ring's epoch (a fresh node drops every
    token: it cannot tell a live one from an old one). open_epoch folds the
    three into the one comparison a token hop makes (sync_gate).
    """

    name = ""
    uses_requests = True
    # The descriptor the host reads (docs/adding-a-protocol.md): each protocol sets
    # its own. Bounds are expressions in n (protocol.bound(expr, n)); None: none proven.
    about = {}
    # Options (a protocol spec "name:key=value,key=value", load()): a class made by load()
    # for a spec carries them here, as strings. "holder" is the layer's, taken by every
    # protocol: the node where the ring's first token starts (first); the others are the
    # protocol's own, declared in about["options"] (a logical tree, a graph).
    opts = {}
    first = 0
    # The class constants a frame handler reads (on_token, on_request, on_message): a board's
    # node loop copies each onto the node. On a Pico a class attribute read through a node costs
    # about 11 us (a miss in the node's map of some thirty attributes, then the class's), its
    # own attribute about 2 (issue 41); the simulator gives them slots (host sim/nodes.py).
    hot_constants = ()

    @classmethod
    def bound_names(cls, n):
        """Names a bound expression may use besides n (protocol.bound): a protocol whose
        bounds depend on its options (a tree's diameter D) returns them."""
        return {}

    def message_sizes(self, n):
        """{message kind: payload bytes} of the messages this protocol sends with
        send() (sizes may depend on the ring size n; at most MSG_MAX_PAYLOAD). S, Q
        and D send none: their token and request frames are their own. A kind of
        variable length has a pair (least, most) instead: its sender sets out_len
        after send(), and its payload must say its own length (on_message is given
        the frame, not its length; the node loop drops a frame outside least..most)."""
        return {}

    def __init__(self, index, n):
        if n < 2:
            raise ValueError("a ring needs at least 2 nodes")
        if not 0 <= index < n:
            raise ValueError("node index out of range")
        if not 0 <= self.first < n:
            raise ValueError("holder=%d: the first token's node must be one of the ring's, 0..%d" % (self.first, n - 1))
        self.index = index
        self.n = n
        self.pending = False
        self.in_cs = False
        self.has_token = False
        self.count = 0
        self.state = CHECK
        self.seq = 0
        self.epoch = 0
        self.flag = 0  # M_p of protocol D
        self.errors = 0  # frames that cannot happen in a fault-free ring
        self.known_epoch = 0
        self.known_owner = OWNER_TOKEN
        self.fresh = False
        self.open_epoch = 0  # (sync_gate)
        self.starting = False  # must make the ring's first token (boot(starter=True))
        self.claim_epoch = 0
        self.claim_origin = 0
        self.claim_join = 0
        self.claim_seq = 0
        self.claim_nonce = 0
        self.nonce = 0  # this incarnation's number (boot): frames of an earlier one are not ours
        self.again_origin = 0  # of the re-announced request message to send
        self.discarded = 0  # tokens of an old epoch (or reaching a fresh node) dropped here
        self.regenerated = 0
        self.stale_counts = 0  # Q: counters found stale and cleared (only after faults)
        # Messages (send): the declared payload size per kind (of a variable kind, its
        # most) and the least (a fixed kind's: the same), NO_SIZE where none is declared
        # (the node loop drops such frames as bad), and one outgoing message. Two
        # tables, so that a fixed kind's frame is checked as before, by one compare
        # (msg_sizes); only a length other than that looks at msg_least.
        sizes = bytearray(MSG_KINDS)
        least = bytearray(MSG_KINDS)
        for k in range(MSG_KINDS):
            sizes[k] = NO_SIZE
            least[k] = NO_SIZE
        big = 0
        for k, size in self.message_sizes(n).items():
            lo, hi = size if isinstance(size, tuple) else (size, size)
            if not 0 <= k < MSG_KINDS or not 0 <= lo <= hi <= MSG_MAX_PAYLOAD:
                raise ValueError("message kind %r of %r bytes: kinds 0..%d, at most %d bytes (least <= most)"
                                 % (k, size, MSG_KINDS - 1, MSG_MAX_PAYLOAD))
            sizes[k] = hi
            least[k] = lo
            big = max(big, hi)
        self.msg_sizes = bytes(sizes)
        self.msg_least = bytes(least)
        self.out = bytearray(big)
        self.out_kind = 0
        self.out_dst = 0
        self.out_len = 0

    def give_token(self):
        """Place the single token here when the ring starts."""
        self.has_token = True
        self.count = 0
        self.state = CHECK
        return 0

    @micropython.native
    def _enter(self):
        self.pending = False
        self.in_cs = True
        s = self.seq
        # Not (s + 1) & SEQ_MASK: 2**30 is a heap long int on the rp2 port (found by
        # tests/test_rp2040.py with the entry numbers set 3 below the wrap, under heap_lock).
        self.seq = 0 if s == SEQ_MASK else s + 1
        return ENTER_CS

    @micropython.native
    def _pass(self):
        self.has_token = False
        return SEND_TOKEN

    @micropython.native
    def send(self, kind, dst):
        """The message of this kind in self.out (its declared size; of a variable
        kind, its most: the handler then sets out_len), to node dst (an index, or
        BROADCAST). Returns SEND_MSG for the handler to return."""
        self.out_kind = kind
        self.out_dst = dst
        self.out_len = self.msg_sizes[kind]
        return SEND_MSG

    @micropython.native
    def put_token_header(self):
        """A token message's payload starts as the token frame's fields do (docs/frames.md):
        seq u32 (30 bits) and epoch u16, into self.out[0:TOKEN_HEADER]."""
        out = self.out
        put30(out, 0, self.seq)
        out[4] = self.epoch & 0xFF
        out[5] = (self.epoch >> 8) & 0xFF

    @micropython.native
    def token_gate(self, buf):
        """The epoch gate (recovery) for a token message delivered in buf: the epoch the token
        goes on with, or -1 (drop it: return DISCARDED). Like the token frame's on_token, it
        calls _gate only when that can change something."""
        epoch = buf[PAYLOAD_AT + 4] | (buf[PAYLOAD_AT + 5] << 8)
        if epoch != self.open_epoch:
            return self._gate(epoch)
        return epoch

    def on_message(self, kind, src, buf):
        """A message arrived for this node (see the header); a protocol that sends
        messages overrides it."""
        self.errors = (self.errors + 1) & SEQ_MASK
        return 0

    def busy(self):
        """True while this node holds something that must still happen."""
        return self.pending or self.in_cs

    def waiting(self):
        """True while a timeout should run here (see on_timeout)."""
        return self.fresh or self.starting or (self.pending and not self.has_token)

    # -- recovery (docs/recovery.md) -------------------------------------

    def sync_gate(self):
        """Set open_epoch from fresh, known_epoch and known_owner; whatever changes one of
        them calls it (the handlers below; a test or tool that sets them directly).

        open_epoch is the epoch a token goes past the gate with unchanged: known_epoch
        while the node is not fresh and has seen a token of its highest key (known_owner
        OWNER_TOKEN), else -1, which no token's epoch (16 bits) equals. Every on_token
        tests `epoch != self.open_epoch` before calling _gate: one attribute and one
        comparison where the three fields took three and three (S's hop on an emulated Pico
        108.1 -> 103.6 us; a simulated request at n = 64, Q 5% and D 7% fewer instructions:
        docs/performance.md)."""
        self.open_epoch = -1 if self.fresh or self.known_owner != OWNER_TOKEN else self.known_epoch

    def _gate(self, epoch):
        """The epoch gate every on_token passes first. Returns the epoch the
        token goes on with, or -1: drop it. The protocols call it only when it
        can change something: a fresh node, another epoch, or a key that is not
        yet (known_epoch, OWNER_TOKEN) (a node that is starting has its own
        claim's key). A call costs microseconds on a Pico. Node loop under the
        unix MicroPython (tests/mp_node_bench.py, S, best of 15 alternated runs):
        26.2 us a frame calling it on every token, 21.3 us with this check,
        20.9 us before the recovery existed."""
        if self.fresh:
            self.discarded = (self.discarded + 1) & SEQ_MASK
            return -1
        known = self.known_epoch
        if epoch != known and not newer(epoch, known):
            if self.known_owner == self.index and epoch == (known - 1) & 0xFFFF:
                # Our own claim is out and no later claim has passed here: this
                # token is the live one (this node accepted its epoch before it
                # claimed), arriving before the claim came back. Keep it as a
                # holder would: it takes the claim's epoch and the claim ends.
                self.known_owner = OWNER_TOKEN
                self.starting = False
                self.sync_gate()
                return known
            self.discarded = (self.discarded + 1) & SEQ_MASK
            return -1
        self.known_epoch = epoch
        self.known_owner = OWNER_TOKEN
        self.starting = False
        self.sync_gate()
        return epoch

    def boot(self, starter=False, nonce=0):
        """The board has just started: it knows neither the ring's epoch nor
        whether a token exists. It asks (a join round) before trusting any
        token; the starter (position 0) then makes the first token by a claim
        if the ring has never had one.

        nonce (0..65535) tells this incarnation apart from the board's earlier
        ones (the node loop draws it at random): a join or claim an earlier
        incarnation sent may still be on its way round, and taking it for its
        own would let this one reuse a claim key that is still out (found by
        `picoring explore --faults restart=2`; docs/recovery.md)."""
        self.fresh = True
        self.sync_gate()
        self.starting = starter
        self.nonce = nonce & 0xFFFF
        return self._join()

    def _join(self):
        self.claim_epoch = 0
        self.claim_origin = self.index
        self.claim_join = 1
        self.claim_seq = 0
        self.claim_nonce = self.nonce
        return SEND_CLAIM

    def _claim(self):
        e = (self.known_epoch + 1) & 0xFFFF
        self.known_epoch = e
        self.known_owner = self.index
        self.sync_gate()
        self.claim_epoch = e
        self.claim_origin = self.index
        self.claim_join = 0
        self.claim_seq = self.seq
        self.claim_nonce = self.nonce
        return SEND_CLAIM

    def on_timeout(self):
        """No token seen for the regeneration timeout while waiting(): a fresh
        node asks again for the ring's epoch; a node that needs the token
        re-announces its request (it may have been lost) and claims a new
        token (the token may have been lost)."""
        if self.fresh:
            return self._join()
        if self.has_token or not (self.pending or self.starting):
            return 0
        a = self._claim()
        if self.pending and self.uses_requests:
            a |= self._again()
        return a

    def _again(self):
        self.again_origin = self.index
        return SEND_AGAIN

    def on_claim(self, epoch, origin, join, seq, nonce=0):
        """A claim (join=0) or join (join=1) frame arrived.

        A claim (epoch, origin) travels the ring once. A node forwards it only
        if its key beats every key the node has adopted, and adopts it (so
        from then on it drops tokens of older epochs); a node that has the
        token stops it and gives its token the claim's epoch. On a FIFO ring
        a claim cannot pass the token, so a claim that comes back to its
        originator still being its highest key has met no token: the
        originator makes a new one. A join only collects the highest epoch
        and sequence number round the ring, for a fresh node."""
        if origin == self.index:
            if nonce != self.nonce:
                return 0  # sent by an earlier incarnation of this board: stopped
            if join:
                if not self.fresh:
                    return 0  # the answer to an earlier join; this one is already known
                self.fresh = False
                self.known_epoch = epoch
                self.known_owner = OWNER_TOKEN
                self.sync_gate()
                self.seq = seq  # the highest round the ring (a fresh node's own is meaningless)
                if self.starting and epoch == 0:
                    return self._claim()  # no token has ever existed: make the first
                self.starting = False
                return 0
            if self.fresh or epoch != self.known_epoch or self.known_owner != origin:
                return 0  # overtaken by a later claim, or a token was seen meanwhile
            # Our claim went round without meeting the token: make a new one.
            if seq_later(seq, self.seq):
                self.seq = seq
            self.known_owner = OWNER_TOKEN
            self.sync_gate()
            self.epoch = epoch
            self.regenerated = (self.regenerated + 1) & SEQ_MASK
            if self.starting and not self.pending:
                # The ring's first token starts as the paper's does: at rest here.
                self.starting = False
                return self.give_token() | REGENERATED
            self.starting = False
            return self._regenerate() | REGENERATED
        if not self.fresh and seq_later(self.seq, seq):
            seq = self.seq
        if join:
            if not self.fresh and newer(self.known_epoch, epoch):
                epoch = self.known_epoch
            return self._forward_claim(epoch, origin, 1, seq, nonce)
        if self.fresh:
            return 0  # cannot judge a claim yet: stopping it is always safe
        if not (newer(epoch, self.known_epoch) or (epoch == self.known_epoch and origin > self.known_owner)):
            return 0  # a stale claim: stopped here
        self.known_epoch = epoch
        if self.has_token:
            # The token is alive here: the claim ends, the token takes its epoch.
            self.known_owner = OWNER_TOKEN
            self.sync_gate()
            self.epoch = epoch
            return 0
        self.known_owner = origin
        self.sync_gate()
        return self._forward_claim(epoch, origin, 0, seq, nonce)

    def _forward_claim(self, epoch, origin, join, seq, nonce):
        self.claim_epoch = epoch
        self.claim_origin = origin
        self.claim_join = join
        self.claim_seq = seq
        self.claim_nonce = nonce
        return SEND_CLAIM

    def _new_token(self):
        self.has_token = True
        self.count = 0
        self.state = CHECK

    def _regenerate(self):
        """Put a new token here (the protocols override what it does next)."""
        self._new_token()
        if self.pending:
            return self._enter()
        return 0

    def on_request_again(self, origin=-1):
        """A re-announced request message from processor origin. It travels like a
        request message to the token, but at most once round the ring: back at its
        origin, there was no token at rest to find (the claim sent with it deals
        with that). Q has no M_p flags, so its plain request messages have no such
        limit (docs/recovery.md, known costs)."""
        if origin == self.index:
            return 0
        if self.has_token:
            return self.on_request()
        self.again_origin = origin
        return SEND_AGAIN


QUEUE_EMPTY = const(0xFF)  # an unused slot of a QueueNode's queue


class QueueNode(Node):
    """A Node with a FIFO of node indices (Raymond's REQ_QUEUE, the DAG's): self.queue[0:qlen],
    in a bytearray made once (no allocation per request), unused slots QUEUE_EMPTY. Plain
    attributes, so the explorer sees them as the protocol's state."""

    def __init__(self, index, n):
        Node.__init__(self, index, n)
        self.queue = bytearray(n)
        for k in range(n):
            self.queue[k] = QUEUE_EMPTY
        self.qlen = 0

    @micropython.native
    def _enqueue(self, j):
        if self.qlen == self.n:
            self.errors = (self.errors + 1) & SEQ_MASK  # cannot happen: each node at most once
            return
        self.queue[self.qlen] = j
        self.qlen += 1

    @micropython.native
    def send_token(self, kind, h):
        """The token as message `kind` to neighbour h, its flag byte after the header saying
        whether a request rides with it (the queue is not empty: Raymond's combined TOKEN,
        the DAG's); ASKED follows that flag."""
        self.has_token = False
        self.put_token_header()
        more = 1 if self.qlen else 0
        self.out[TOKEN_HEADER] = more
        self.asked = more == 1
        return self.send(kind, h)

    @micropython.native
    def _dequeue(self):
        q = self.queue
        h = q[0]
        k = 1
        while k < self.qlen:
            q[k - 1] = q[k]
            k += 1
        self.qlen -= 1
        q[self.qlen] = QUEUE_EMPTY
        return h


# The registry: protocol name -> (module, class), imported only when chosen, so a
# board holds and loads only its own protocol's module (`picoring flash` copies
# only that one: deploy.firmware_files). Adding a protocol is a module and a row.
REGISTRY = {
    "s": ("proto_s", "NodeS"),
    "q": ("proto_q", "NodeQ"),
    "d": ("proto_d", "NodeD"),
    "d-literal": ("proto_d", "NodeDLiteral"),
    "toy": ("proto_toy", "NodeToy"),
    "sk": ("proto_sk", "NodeSK"),
    "ra": ("proto_ra", "NodeRA"),
    "raymond": ("proto_raymond", "NodeRaymond"),
    "nt": ("proto_nt", "NodeNT"),
    "dag": ("proto_dag", "NodeDAG"),
    "bs": ("proto_bs", "NodeBS"),
    "wt": ("proto_wt", "NodeWT"),
    "random": ("proto_random", "NodeRandom"),
}
# The paper's protocols (the host's commands offer these; the rest are in REGISTRY).
PAPER = ("s", "q", "d", "d-literal")


def parse_spec(spec):
    """(name, {option: value}) of a protocol spec: a registered name, or the name, a colon and
    its options as key=value pairs separated by commas ("raymond:tree=path,holder=2"; a value
    may contain colons: "dag:graph=random:0.5")."""
    name, _, rest = spec.partition(":")
    opts = {}
    if rest:
        for item in rest.split(","):
            k, eq, v = item.partition("=")
            if not eq or not k or not v:
                raise ValueError("protocol %r: options are key=value, separated by commas" % spec)
            opts[k] = v
    return name, opts


def make_spec(name, opts):
    """The spec of a protocol name with options (keys sorted: one spec per configuration)."""
    if not opts:
        return name
    return name + ":" + ",".join("%s=%s" % (k, opts[k]) for k in sorted(opts))


def module_name(protocol):
    """The firmware module (file stem) of a registered protocol (a name or a spec)."""
    name = parse_spec(protocol)[0]
    try:
        return REGISTRY[name][0]
    except KeyError:
        raise ValueError("unknown protocol %r (known: %s)" % (name, ", ".join(REGISTRY)))


_CONFIGURED = {}  # spec -> the class made for it (one per spec: the host compares classes)


def load(protocol):
    """The Node class of a registered protocol; its module is imported on first use. For a
    spec with options, a subclass carrying them (opts, first); ValueError for an option the
    protocol does not declare (about["options"]) or a holder that is not a number."""
    name, opts = parse_spec(protocol)
    mod = module_name(name)
    pkg = __name__.rpartition(".")[0]
    if pkg:  # the host: picoring.firmware.protocol
        mod = pkg + "." + mod
    __import__(mod)
    import sys

    cls = getattr(sys.modules[mod], REGISTRY[name][1])
    if not opts:
        return cls
    spec = make_spec(name, opts)
    made = _CONFIGURED.get(spec)
    if made is None:
        declared = cls.about.get("options") or {}
        for k in opts:
            if k != "holder" and k not in declared:
                raise ValueError("protocol %s has no option %r (options: %s)"
                                 % (name, k, ", ".join(["holder"] + sorted(declared))))
        try:
            first = int(opts.get("holder", 0))
        except ValueError:
            raise ValueError("protocol %r: holder must be a node's index, not %r" % (spec, opts["holder"]))
        # name: the spec, as the board's hello says it and the host compares it
        made = type(cls.__name__, (cls,), {"opts": opts, "first": first, "name": spec})
        _CONFIGURED[spec] = made
    return made


def make_node(protocol, index, n):
    return load(protocol)(index, n)


def bound(expr, n, names=None):
    """The value of a descriptor's bound (an expression in n, e.g. "3*n - 2", and in the
    names a configured protocol gives, Node.bound_names: "2*D"), or None."""
    if expr is None:
        return None
    env = {"n": n}
    if names:
        env.update(names)
    return eval(expr, {"__builtins__": {}}, env)


def _host_names(name):
    # The host's names from before the registry (CPython: PEP 562): PROTOCOLS, the
    # paper's protocols by name; NodeS, NodeQ, NodeD, NodeDLiteral, their classes.
    if name == "PROTOCOLS":
        return {p: load(p) for p in PAPER}
    for p, (_mod, cls) in REGISTRY.items():
        if cls == name:
            return load(p)
    raise AttributeError(name)


import sys as _sys

# CPython only: a board's module has no __getattr__ (measured: a module that has one costs a
# Pico's ring ~2% of its hop rate). Told by the implementation, not by whether a module named
# micropython imports: Adafruit Blinka (which adafruit-circuitpython-busdevice requires, for
# --resource fram) installs one on CPython, with const() and native() as no-ops.
if _sys.implementation.name != "micropython":
    __getattr__ = _host_names
