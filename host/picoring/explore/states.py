"""How the fault-free explorer (model.py) keeps its states: a node's attributes as a tuple
(node_attributes), the rotation symmetry of a ring whose rules name no position
(rotation_symmetric, canonical), and the compact store of the reachable states (StateStore).

A state is (nodes, links, budget): per node the tuple of its kept attributes, per link
i -> i+1 the tuple of frames in flight (REQ, a token frame's fields, a model.Msg), per node
the requests it may still make.
"""

import struct
from array import array

from ..firmware import protocol as _fw
from ..firmware.protocol import BROADCAST, NO_SIZE

REQ = -1  # a request frame in a link queue; a token frame is a tuple of its fields

FIELDS = ("pending", "in_cs", "has_token", "count", "state", "flag", "errors", "stale_counts")
EXACT_FIELDS = FIELDS + ("seq", "epoch")
P_PENDING, P_IN_CS, P_HAS_TOKEN, P_COUNT, P_STATE, P_FLAG, P_ERRORS, P_STALE = range(8)
CONSTANTS = ("index", "n", "msg_sizes", "msg_least")  # never state, not even with exact=True


class Msg(tuple):
    """A message frame in a link queue: (kind, src, dst, payload bytes). It is the same
    frame at every hop (the node loop passes the bytes on unchanged)."""

    __slots__ = ()

    def text(self, i, n):
        """As a schedule shows its delivery over link i -> i+1."""
        kind, src, dst, _ = self
        return "msg %d->%d kind=%d from=%d to=%s" % (i, (i + 1) % n, kind, src, "all" if dst == BROADCAST else dst)


def has_messages(cls, n):
    """True when the protocol declares messages of the layer (message_sizes)."""
    return any(size != NO_SIZE for size in cls(0, n).msg_sizes)


def node_attributes(cls, n, exact=False):
    """(plain, buffers): the attribute names the explorer keeps of a node of cls (see
    model.py's docstring), plain ones (immutable values) and buffers (bytearray, array,
    list: kept as their contents). Raises ValueError for a value it cannot keep."""
    node = cls(0, n)
    base = set(_fw.Node(0, n).__dict__)
    plain = list(EXACT_FIELDS if exact else FIELDS)
    buffers = []
    for k in sorted(node.__dict__):
        if k in plain or k in CONSTANTS or (k in base and not exact):
            continue
        v = node.__dict__[k]
        if isinstance(v, memoryview):
            continue  # a view of a buffer kept elsewhere
        if isinstance(v, (bytearray, array, list)):
            buffers.append(k)
        elif v is None or isinstance(v, (bool, int, float, str, bytes, tuple)):
            plain.append(k)
        else:
            raise ValueError("%s.%s is a %s: the explorer keeps ints, bools, strings, bytes, tuples and "
                             "bytearray/array/list buffers" % (cls.__name__, k, type(v).__name__))
    return tuple(plain), tuple(buffers)


def _snapshot(v):
    return bytes(v) if isinstance(v, bytearray) else tuple(v)


def _restore(cur, v):
    """Copy a buffer's kept contents back into the node's own buffer object."""
    if isinstance(cur, array):
        cur[:] = array(cur.typecode, v)
    else:
        cur[:] = v


def canonical(st, n):
    """(rep, r): the representative of st's rotation class, st rotated by r (rep's node j
    is st's node j + r, its link j st's link j + r). With exactly one token (held, or a
    token frame on a link) the token's place goes to 0: one look, no comparisons; any
    other state (a planted bug's second token) takes the rotation with the least repr."""
    nodes, links, budget = st
    at = -1
    tokens = 0
    for i in range(n):
        if nodes[i][P_HAS_TOKEN]:
            tokens += 1
            at = i
        q = links[i]
        if q:
            k = len(q) - q.count(REQ)
            if k:
                tokens += k
                at = i
    if tokens == 1:
        r = at
    else:
        r = min(range(n), key=lambda k: repr(_rotated(st, k)))
    if r == 0:
        return st, 0
    return _rotated(st, r), r


def _rotated(st, r):
    """State st renumbered so that its node and link r become 0 (a rotation of the ring)."""
    nodes, links, budget = st
    return (nodes[r:] + nodes[:r], links[r:] + links[:r], budget[r:] + budget[:r])


def rotation_symmetric(cls, n):
    """True when rotating a state of a ring of cls gives a state of the same ring with the same
    transitions (why_not_rotated: when not)."""
    return why_not_rotated(cls, n) is None


def why_not_rotated(cls, n):
    """None when rotating a state of a ring of cls gives a state of the same ring with the same
    transitions: its descriptor says its rules never name an absolute position
    (about["positions"] is False), it sends no messages of the layer (theirs carry node
    numbers), and no subclass below the descriptor's class changes a handler (a planted bug
    inherits its base's descriptor, not its symmetry). Else why not, in words."""
    if cls.about.get("positions", True) is not False:
        return "its descriptor does not say that its rules name no position (about['positions'])"
    if has_messages(cls, n):
        return "its messages carry node numbers"
    for c in cls.__mro__:
        if "about" in c.__dict__:
            return None
        if any(callable(v) or isinstance(v, (staticmethod, classmethod)) for v in c.__dict__.values()):
            return "a subclass of the described protocol changes its handlers"
    return "no class of it carries a descriptor"


class Widen(Exception):
    """A table of StateStore outgrew its number width."""


# a node tuple's flags, kept beside it in the store (StateStore.node_bits) so that the search
# tests them without indexing the tuple
NB_PENDING, NB_IN_CS, NB_TOKEN, NB_ERRORS = 1, 2, 4, 8


def _frames_not_requests(q):
    return len(q) - q.count(REQ)


class StateStore:
    """The reachable states, stored compactly and searched by number. Every distinct node
    tuple and link queue gets a number (tens to thousands of them, against millions of
    states); a state is the 3n numbers of its node tuples, its link queues and its budgets
    (the search works on these: model.Explorer._moves), kept as their bytes: 6n bytes against
    about 50n for the tuples (n = 8: ~400 bytes a state less). Beside each number the store
    keeps what the search asks of it: a node tuple's flags (NB_*) and tokens (0 or 1), a
    queue's head frame (and a number for it), the number of the queue behind it and the
    tokens in it (tokens_of(queue): an int, or None when they cannot be counted). Decoding gives back an equal state of shared objects.
    typecode: "H" (numbers below 65535), else "I" (Widen: build again)."""

    def __init__(self, n, typecode="H", tokens_of=_frames_not_requests):
        self.n = n
        self.typecode = typecode
        self.limit = (1 << (8 * array(typecode).itemsize)) - 1
        packer = struct.Struct("<%d%s" % (3 * n, typecode))  # the bytes of array(typecode, ids), little-endian
        self.pack, self.unpack = packer.pack, packer.unpack
        self.tokens_of = tokens_of
        self.node_ids, self.nodes, self.node_bits, self.node_token = {}, [], [], []
        self.queue_ids, self.queues, self.q_head, self.q_tail, self.q_tokens = {}, [], [], [], []
        self.frame_ids, self.q_head_id = {}, []  # a queue's head frame by number (-1: empty)
        self.keys = []  # state id -> bytes
        self.index = {}  # bytes -> state id
        assert self.queue(()) == 0  # the empty link is 0: "link i is busy" is s[n + i] != 0

    def node(self, v):
        """The number of node tuple v."""
        i = self.node_ids.get(v)
        if i is None:
            i = len(self.nodes)
            if i >= self.limit:
                raise Widen()
            self.node_ids[v] = i
            self.nodes.append(v)
            self.node_bits.append((NB_PENDING if v[P_PENDING] else 0) | (NB_IN_CS if v[P_IN_CS] else 0)
                                  | (NB_TOKEN if v[P_HAS_TOKEN] else 0)
                                  | (NB_ERRORS if v[P_ERRORS] or v[P_STALE] else 0))
            self.node_token.append(1 if v[P_HAS_TOKEN] else 0)
        return i

    def queue(self, q):
        """The number of link queue q (the queues behind its head numbered too)."""
        i = self.queue_ids.get(q)
        if i is None:
            tail = self.queue(q[1:]) if q else 0
            i = len(self.queues)
            if i >= self.limit:
                raise Widen()
            self.queue_ids[q] = i
            self.queues.append(q)
            self.q_head.append(q[0] if q else None)
            self.q_head_id.append(self.frame_ids.setdefault(q[0], len(self.frame_ids)) if q else -1)
            self.q_tail.append(tail)
            t = self.tokens_of(q)
            self.q_tokens.append(-1 if t is None else t)
        return i

    def number(self, st):
        """State st as the list of its numbers (new parts numbered)."""
        nodes, links, budget = st
        return [self.node(v) for v in nodes] + [self.queue(q) for q in links] + list(budget)

    def state(self, ids):
        """The state (nodes, links, budget) of a sequence of numbers."""
        n = self.n
        nv, qv = self.nodes, self.queues
        return tuple([nv[i] for i in ids[:n]]), tuple([qv[i] for i in ids[n:2 * n]]), tuple(ids[2 * n:])

    def encode(self, st):
        """The key of st, None when one of its parts was never numbered (so st was never stored)."""
        nodes, links, budget = st
        g, h = self.node_ids.get, self.queue_ids.get
        ids = [g(v) for v in nodes] + [h(q) for q in links]
        if None in ids:
            return None
        return self.pack(*ids, *budget)

    def decode(self, key):
        return self.state(self.unpack(key))


class StatesView:
    """Explorer.states: the states by id, decoded on demand (a sequence)."""

    def __init__(self, store):
        self._store = store

    def __len__(self):
        return len(self._store.keys)

    def __getitem__(self, sid):
        return self._store.decode(self._store.keys[sid])

    def __iter__(self):
        return map(self._store.decode, self._store.keys)


class IndexView:
    """Explorer.index: a state's id (a mapping from states)."""

    def __init__(self, store):
        self._store = store

    def get(self, st, default=None):
        key = self._store.encode(st)
        return default if key is None else self._store.index.get(key, default)

    def __getitem__(self, st):
        sid = self.get(st)
        if sid is None:
            raise KeyError(st)
        return sid

    def __contains__(self, st):
        return self.get(st) is not None

    def __len__(self):
        return len(self._store.index)
