"""`picoring explore`: every reachable state of a small ring, exhaustively.

Two modes. Fault-free (below): safety, liveness and exact worst cases of any
registered protocol (firmware/protocol.py REGISTRY), S, Q and D's token and request
frames and the layer's messages alike. Lossy (`--faults drop=D,timeout=T,restart=B
[--boot]`, explore_faults, described at LossyExplorer): the token recovery's SAFETY --
mutual exclusion, strictly increasing entry numbers, at most one live token -- over
every schedule with at most D lost frames, T timeouts (at any moment) and B board
restarts, each violation with a shortest schedule that replay_faults re-runs on fresh
node objects. The lossy mode covers token, request, again and claim frames only: it
refuses a protocol that declares messages (message_sizes). Example:
    picoring explore --faults drop=1,timeout=2 -p q -n 3 -R 1   (~1e5 states, seconds)

The explorer drives the firmware's own node objects (firmware/protocol.py): it
loads a node's attributes from an abstract state, calls the real handler
(request, on_request, on_token, on_message, exit_cs), carries out the returned
action bits the way the node loop (firmware/node.py) does, and reads the
attributes back. The rules are not re-modelled here.

Model: the fully asynchronous ring. One FIFO queue per link i -> i+1. A
transition is one of
  deliver i   the frame at the head of link i reaches node j = i+1
  exit i      node i leaves its critical section
  request i   node i makes a request (only when it has none outstanding: not
              pending and not in its critical section; at most R per node)
in any order. This contains every schedule of the simulator (which fixes hop
times and an order within a time unit), for any critical-section length.

Frames on a link: a request frame (REQ), a token frame (its fields), or a message
of the protocol layer (SEND_MSG: a Msg (kind, src, dst, payload), the same at every
hop). Delivering a message at j is what NodeLoop._on_msg does, in one transition:
  dst == j                  on_message(kind, src, buf) at j (the addressee)
  dst another node          passed on to link j: a transition of its own, no
                            protocol call (a routed message d hops away takes d
                            deliveries)
  BROADCAST, src != j       passed on to link j first, then on_message at j
  BROADCAST, src == j       taken off (once round the ring): no protocol call
buf is the decoder's buffer as the node loop hands it over: the message header,
then the payload at protocol.PAYLOAD_AT. A handler's frames go onto its link in the
node loop's order: the message, then the token (or the request frame).

Initial state: the token at rest at node 0 (give_token), nothing in flight.
For S, Q and D every rule is the same at every node (a node's index is never read
by the rules), for the toy every rule is the same up to a rotation of the indices
(ring order counted from the node itself), and every node has the same request
budget, so rotating a reachable state by k gives a reachable state of the ring
started at node k, with the same measures: node 0 suffices. Where a rule reads no
index at all (S, Q, D: about["positions"] is False) the explorer also keeps one state
per rotation class (Explorer(rotations=True), states.py), each edge carrying the
rotation so that every measure and schedule stays in the ring's own numbering. A
protocol whose rules are not rotation-symmetric (a fixed tree) must be explored from
every start (`picoring explore --start K`, Explorer(start=k)).

Abstract state: per node a tuple of attributes, the link queues, the per-node
remaining request budget. The node's attributes kept:
  FIELDS        protocol.Node's control state: pending, in_cs, has_token, count,
                state, flag, and the error counters errors, stale_counts (read by
                the token-integrity check);
  its own       every attribute the protocol's __init__ makes beyond protocol.Node's
                (the toy's rn and ln), found by comparing a node of the protocol
                with a plain protocol.Node: nothing to declare. Buffers (bytearray,
                array, list) are kept as their contents and copied back in place
                when the node is loaded; a memoryview is a view of state kept
                elsewhere and is skipped. A handler that makes a new attribute is an
                error (the state would miss it).
Left out (exact=True keeps every attribute but the constants index, n, msg_sizes, msg_least):
  - seq and epoch, in the node and in a token message's payload (its first 6 bytes
    by the layer's convention, docs/adding-a-protocol.md, for the kind the
    descriptor names in about["messages"]["token"]). No handler branches on them: seq is
    only incremented at an entry and copied, epoch only copied and, fault-free,
    always 0. They are observers, not control state (and seq alone would make S's
    graph a counter of entries).
  - protocol.Node's recovery state (known_epoch, known_owner, fresh, starting,
    nonce) and the counters discarded, regenerated: constant without faults.
  - outputs, read by the caller right after the handler returns them: out,
    out_kind, out_dst, out_len, claim_*, again_origin.
  - count and state of a node that does not hold the token are reset to 0.
    They are the token's fields (protocol.Node), dead there: on_token overwrites
    them before any read, exit_cs (the only other reader) runs only in a critical
    section, which implies has_token. The token's own fields travel in the frame.
These reductions are checked against the full state by `exact=True`
(tests/test_explore.py for S, Q and D, tests/test_explore_messages.py for the toy): a
protocol's tests should do the same.

Measures per transition (bits of the edge): hop frames sent (every frame put on a
wire: a token or request frame, a message's first hop, each pass of a message), logical
messages sent (a token or request frame, a new message: each once, however many
hops; for S, Q and D the same number, as the checker counts them), one frame
delivered (a deliver transition).
  messages per request  max over complete runs (initial state to a quiescent
                        state: no frame in flight, no critical section, nothing
                        pending) of hop frames sent / requests made; logical
                        messages per request the same with logical messages. The
                        requests made are a function of the state (the spent
                        budget), so this is a longest-path problem on the graph.
                        A routed message to a node d ahead is 1 logical message and
                        d hop frames, a broadcast 1 and n (the last one back to its
                        sender), as sim/simcore.py and the checker count them.
  service traffic (a)   hop frames SENT from the moment a request is made (its own
                        request message included) until the requester enters its
                        critical section (picoring's checker's measure)
  service traffic (b)   frames DELIVERED in the same interval, the delivery of
                        the token to the requester included
  service traffic (c)   logical messages sent in the same interval (the checker's
                        max_service_logical)
All by a forward longest-path DP over the graph in topological order of its
strongly connected components, with a value per (state, pending node): exact.

A cycle in the state graph never contains a request (the budget only
decreases), so along a cycle the set of pending nodes is constant (a node
leaves "pending" only by entering, and needs a request to become pending
again). Hence: a reachable cycle with a pending node is starvation, a cycle
without one is a livelock (the token, or a message, moves forever after
requests stop) -- for S that is the design. With no cycle, every execution is
finite and ends in a state without transitions; a "quiet" state (nothing in
flight, no critical section) that still has a pending request is a deadlock
(stuck once requests stop).

Token integrity: exactly one token in every state (held, or a token frame or a
message of the kind about["messages"]["token"] names in flight) and no handler
counted an error; for a protocol with messages whose descriptor names no token kind
only "at most one holder" can be checked (the report says so).

This module: the fault-free state graph (Explorer); states.py how its states are kept;
graph.py its schedules, cycles and worst cases.
search.py runs the analysis over it (explore, replay, format_report); lossy_model.py
and lossy.py are the lossy mode.
"""

import time
from array import array

from ..check.registry import evaluate, message_roles, search_of, with_options
from ..firmware import protocol as _fw
from ..firmware.frame import MSG, MSG_HEAD
from ..firmware.protocol import BROADCAST, ENTER_CS, NO_SIZE, PAYLOAD_AT, SEND_MSG, SEND_REQUEST, SEND_TOKEN, sends
from ..sim.simcore import first_word
from .graph import _DELIV, _ENT_SHIFT, _FWD_SHIFT, _LOG_SHIFT, _REQ_SHIFT, _ROT_SHIFT, _SUCC_SHIFT, _T_SHIFT, StateGraph
from .graph import HOP_FRAMES, LOGICAL  # noqa: F401 (the edge weights, for the tests' imports)
from .states import (NB_ERRORS, NB_IN_CS, NB_PENDING, NB_TOKEN, P_COUNT, P_FLAG, P_HAS_TOKEN, REQ, IndexView,
                     Msg, StatesView, StateStore, Widen, _restore, _snapshot, canonical, has_messages,
                     node_attributes, rotation_symmetric)

_OBSERVER_BYTES = bytes(6)  # seq u32, epoch u16 at the head of a token message's payload


def message_buffer(kind, src, dst, payload):
    """The buffer on_message gets (the decoder's: the frame's head -- kind, link sequence
    byte, message kind, src, dst -- then the payload at protocol.PAYLOAD_AT), as
    sim/simcore.py builds it."""
    return bytearray((MSG, 0, kind, src, dst)) + payload


assert MSG_HEAD == PAYLOAD_AT == 5  # message_buffer's head


def _protocol_class(protocol, start=None):
    """(node class, name) of a registered protocol's name or spec (firmware.protocol.REGISTRY)
    or of a Node subclass (a planted bug in the tests). start: where the token starts, given
    to the protocol as its holder option (a protocol with a layout, a tree or last pointers,
    builds it towards the holder; S, Q, D and the toy ignore it)."""
    if isinstance(protocol, str):
        cls = _fw.load(protocol)  # ValueError naming the known ones
        if start is not None and start != cls.first:
            protocol = with_options(protocol, {"holder": str(start)})
            cls = _fw.load(protocol)
    else:
        cls, protocol = protocol, getattr(protocol, "name", None) or protocol.__name__
    _check_explorable(cls, protocol)
    return cls, protocol


def _check_explorable(cls, name):
    """The explorer's model is untimed steps under hard mutual exclusion: a protocol moved by
    its clock (its token walks on timers: on_wake) or with soft or no exclusion is refused,
    not given verdicts that mean nothing (the wandering token came out "FAIL: liveness", no
    timer ever firing, and random access "FAIL: safety", held to hard exclusion)."""
    exclusion = cls.about.get("exclusion", "hard")
    why = []
    if getattr(cls, "clocked", False):
        why.append("it is moved by its clock (timers), which the explorer does not model")
    if exclusion != "hard":
        why.append("its mutual exclusion is %s, and the explorer checks hard exclusion" % exclusion)
    if why:
        raise ValueError("the explorer does not cover protocol %s: %s; run it in the simulator "
                         "(picoring sim, compare, figures) or on a ring" % (name, "; ".join(why)))


def _check_size(n, most, what):
    if n < 2:
        raise ValueError("a ring needs at least 2 nodes")
    if n > most:
        raise ValueError("n too large for %s" % what)


class StateBudgetExceeded(Exception):
    pass


class Explorer(StateGraph):
    """Build the reachable state graph of (protocol, n, R) and analyse it.

    protocol is a registered protocol's name (firmware.protocol.REGISTRY) or a Node
    subclass (a planted bug in the tests).
    """

    def __init__(self, protocol, n, requests_per_node=1, max_states=2_000_000, exact=False, start=None,
                 rotations=False):
        self.cls, self.protocol = _protocol_class(protocol, start)
        if start is None:
            start = self.cls.first  # the holder option (0 unless given)
        # A protocol whose counters grow for ever (BinarySearch's histories) names, in its
        # descriptor, class attributes that make them wrap soon: about["explore"]["attrs"].
        attrs = (self.cls.about.get("explore") or {}).get("attrs")
        if attrs:
            self.cls = type(self.cls.__name__, (self.cls,), dict(attrs))
        _check_size(n, 60, "the explorer")
        if requests_per_node < 0:
            raise ValueError("requests per node cannot be negative")
        self.n = n
        self.R = requests_per_node
        self.max_states = max_states
        self.exact = exact
        self.start_node = start  # where the token rests initially (0 suffices: symmetry)
        self.fields, self.buffers = node_attributes(self.cls, n, exact)
        self._nodes = [self.cls(i, n) for i in range(n)]
        self._nattrs = len(self._nodes[0].__dict__)
        self._intern = {}
        self._memo = {}
        self.uses_requests = self._nodes[0].uses_requests
        self.messages = has_messages(self.cls, n)
        # the message kinds that carry the token (the descriptor's about["messages"]["token"]
        # ["kind"]); None: the protocol sends messages but does not say which, so tokens
        # in flight cannot be counted
        kinds = frozenset(k for k, role in message_roles(self.cls.about).items() if role == "token")
        self.token_kinds = kinds if kinds or not self.messages else None
        # a protocol whose requests search for the token (BinarySearch): each request's forwards
        self.search = search_of(self.cls.about)
        if rotations and not rotation_symmetric(self.cls, n):
            raise ValueError("protocol %s is not rotation-symmetric (its descriptor's about['positions'] is not "
                             "False, or it sends messages of the layer, or a subclass changes its handlers)"
                             % self.protocol)
        # Rotation symmetry (rotation_symmetric): one state per rotation class (states.canonical).
        self.rotations = bool(rotations)
        self.init_shift = 0  # the initial state is its representative rotated back by this
        self.store = None  # the numbered states (StateStore), made by build

    # -- nodes <-> tuples ----------------------------------------------------
    def _load(self, i, values):
        node = self._nodes[i]
        d = node.__dict__
        for f, v in zip(self.fields, values):
            d[f] = v
        if self.buffers:
            k = len(self.fields)
            for f in self.buffers:
                _restore(d[f], values[k])
                k += 1
        if not self.exact:
            d["seq"] = 0
            d["epoch"] = 0
        return node

    def _store(self, node):
        d = node.__dict__
        t = tuple([d[f] for f in self.fields])
        if self.buffers:
            t += tuple([_snapshot(d[f]) for f in self.buffers])
        if not self.exact and not t[P_HAS_TOKEN]:
            # count/state are dead without the token (see the module docstring)
            t = t[:P_COUNT] + (0, 0) + t[P_FLAG:]
        return self._intern.setdefault(t, t)

    def _frame(self, node):
        d = node.__dict__
        if self.exact:
            t = (d["count"], d["state"], d["seq"], d["epoch"])
        else:
            t = (d["count"], d["state"])
        return self._intern.setdefault(t, t)

    def _message(self, node, i):
        """The message node i sends (SEND_MSG), as a link queue holds it."""
        kind, dst = node.out_kind, node.out_dst
        if not 0 <= kind < len(node.msg_sizes) or node.msg_sizes[kind] == NO_SIZE:
            raise RuntimeError("node %d sent a message of kind %d, which message_sizes(n) does not declare" % (i, kind))
        if not node.msg_least[kind] <= node.out_len <= node.msg_sizes[kind]:
            raise RuntimeError("node %d sent a message of kind %d with %d payload bytes, outside the %d..%d that "
                               "message_sizes(n) declares" % (i, kind, node.out_len, node.msg_least[kind],
                                                                node.msg_sizes[kind]))
        if dst == i or not (0 <= dst < self.n or dst == BROADCAST):
            raise RuntimeError("node %d sent a message to %r (a node other than itself, or BROADCAST)" % (i, dst))
        payload = bytes(node.out[:node.out_len])
        if not self.exact and self.token_kinds and kind in self.token_kinds:
            payload = _OBSERVER_BYTES + payload[len(_OBSERVER_BYTES):]  # seq, epoch: observers
        m = Msg((kind, i, dst, payload))
        return self._intern.setdefault(m, m)

    def initial(self):
        fresh = [self.cls(i, self.n) for i in range(self.n)]
        h = self.start_node
        a = fresh[h].give_token()
        nodes = tuple(self._store(x) for x in fresh)
        links = [()] * self.n
        if a & ~(SEND_TOKEN | SEND_MSG):
            raise RuntimeError("give_token returned %d" % a)
        # a token that starts moving (as a message: BinarySearch's rotation), in protocol.ACTIONS' order
        links[h] = tuple([self._message(fresh[h], h) if b == SEND_MSG else self._frame(fresh[h]) for b in sends(a)])
        return (nodes, tuple(links), (self.R,) * self.n)

    # -- transitions -------------------------------------------------------
    def _call(self, i, v, ev):
        """Run one handler of node i, loaded with attribute tuple v, on the real
        node object. ev: REQ (request frame arrives), a token frame, a Msg, "exit"
        or "request". Returns (new tuple, frames it sends in order, edge weight
        bits: hop frames and logical messages sent, entered).

        The handlers are pure functions of the node's attributes and their
        arguments (firmware/protocol.py: no I/O, no clock, no globals), so a
        call is memoized on (i, v, ev): the same call is never run twice.
        """
        key = (i, v, ev)
        r = self._memo.get(key)
        if r is not None:
            return r
        out = ()
        hops = 0
        if ev == "exit":
            node = self._load(i, v)
            a = node.exit_cs()
        elif ev == "request":
            node = self._load(i, v)
            a = node.request()
        elif ev == REQ:
            node = self._load(i, v)
            a = node.on_request()
        elif ev.__class__ is Msg:
            kind, src, dst, payload = ev
            if dst != i:
                if dst == BROADCAST and src == i:
                    r = self._memo[key] = (v, (), 0, -1)  # once round the ring: taken off
                    return r
                out = (ev,)  # passed on to the next node first (NodeLoop._on_msg)
                hops = 1
                if dst != BROADCAST:
                    r = self._memo[key] = (v, out, hops, -1)  # not for this node: its protocol sleeps
                    return r
            node = self._load(i, v)
            a = node.on_message(kind, src, message_buffer(kind, src, dst, payload))
        elif self.exact:
            node = self._load(i, v)
            a = node.on_token(ev[0], ev[1], ev[2], ev[3])
        else:
            node = self._load(i, v)
            a = node.on_token(ev[0], ev[1], 0, 0)
        if a & ~(SEND_TOKEN | SEND_REQUEST | ENTER_CS | SEND_MSG):
            raise RuntimeError("node %d returned unknown action bits %d" % (i, a))
        if len(node.__dict__) != self._nattrs:
            raise RuntimeError("node %d: a handler made a new attribute (the explorer keeps those __init__ makes)" % i)
        # the frames in the node loop's order (protocol.ACTIONS): the message, then the
        # token (or the request frame)
        sent = tuple([self._message(node, i) if b == SEND_MSG else REQ if b == SEND_REQUEST else self._frame(node)
                      for b in sends(a)])
        if a & ENTER_CS and not node.in_cs:
            raise RuntimeError("node %d returned ENTER_CS but is not in its critical section" % i)
        w = (hops + len(sent)) | (len(sent) << _LOG_SHIFT)
        if self.search is not None and a & SEND_MSG and sent[0][0] == self.search[0]:
            # the payload's first word names the requester (the checker's reading of it)
            z = evaluate(self.search[1], self.n, {"w": first_word(sent[0][3])})
            if z != i and 0 <= z < self.n:  # sent on by another node: a forward (rule 6)
                w |= (z + 1) << _FWD_SHIFT
        r = (self._store(node), out + sent, w, i if a & ENTER_CS else -1)
        self._memo[key] = r
        return r

    def _new_store(self, typecode="H"):
        """A fresh StateStore, and the search's caches of its numbers."""
        self.store = StateStore(self.n, typecode, self._queue_tokens)
        # per link or node i: (node number, frame number or event) -> (node number after, what it
        # sends (a number of _outs), edge bits); keyed on what the handler reads only, so that
        # they stay about as small as _call's memo
        self._delivers = [{} for _ in range(self.n)]
        self._exits = [{} for _ in range(self.n)]
        self._requests = [{} for _ in range(self.n)]
        self._outs, self._out_frames = {}, []  # the frames a move sends, numbered
        self._appends = {}  # (queue number, number of what is sent) -> the queue's number after
        return self.store

    @staticmethod
    def _edge_bits(w, ent, req):
        """An edge's bits but for its successor, rotation and transition index (graph.py)."""
        return w | ((ent + 1) << _ENT_SHIFT) | ((req + 1) << _REQ_SHIFT)

    def _effect(self, i, v, ev, req):
        """(node number after, number of the frames sent or -1, edge bits) of _call(i, v, ev)."""
        v2, fr, w, ent = self._call(i, v, ev)
        out = -1
        if fr:
            out = self._outs.get(fr)
            if out is None:
                out = self._outs[fr] = len(self._out_frames)
                self._out_frames.append(fr)
        return self.store.node(v2), out, self._edge_bits(w, ent, req)

    def _append(self, q, out):
        """The number of queue q with the frames numbered out behind it."""
        key = (q, out)
        r = self._appends.get(key)
        if r is None:
            store = self.store
            r = self._appends[key] = store.queue(store.queues[q] + self._out_frames[out])
        return r

    def _moves(self, s):
        """The transitions of the numbered state s (StateStore: n node tuples', n link queues'
        numbers, n budgets), in a fixed order: [(kind, i, successor's numbers, edge bits
        (_edge_bits))], kind "deliver" (the head of link i to node i + 1), "exit" or
        "request" (node i). A move's effect is cached on the numbers it reads: the search
        runs the handlers (_call) once per distinct move, not once per state."""
        n = self.n
        store = self.store
        bits, head, tail = store.node_bits, store.q_head_id, store.q_tail
        out = []
        for i in range(n):
            qi = s[n + i]
            if qi:
                j = i + 1 if i + 1 < n else 0
                key = (s[j], head[qi])
                r = self._delivers[i].get(key)
                if r is None:
                    r = self._delivers[i][key] = self._effect(j, store.nodes[key[0]], store.q_head[qi], -1)
                s2 = list(s)
                s2[j] = r[0]
                s2[n + i] = tail[qi]
                if r[1] >= 0:
                    s2[n + j] = self._append(s[n + j], r[1])
                out.append(("deliver", i, s2, r[2] | _DELIV))
        for i in range(n):
            if bits[s[i]] & NB_IN_CS:
                out.append(self._own_move(s, i, "exit", self._exits[i]))
        for i in range(n):
            if s[2 * n + i] and not bits[s[i]] & (NB_PENDING | NB_IN_CS):
                out.append(self._own_move(s, i, "request", self._requests[i]))
        return out

    def _own_move(self, s, i, ev, cache):
        """Node i's exit or request (ev) from numbered state s, as _moves lists it."""
        n = self.n
        r = cache.get(s[i])
        if r is None:
            r = cache[s[i]] = self._effect(i, self.store.nodes[s[i]], ev, i if ev == "request" else -1)
        s2 = list(s)
        s2[i] = r[0]
        if r[1] >= 0:
            s2[n + i] = self._append(s[n + i], r[1])
        if ev == "request":
            s2[2 * n + i] -= 1
        return (ev, i, s2, r[2])

    def successors(self, st):
        """[(label, state, edge weight bits, entered, requested)] in a fixed order (_moves'):
        a label is ("deliver", link i, what), ("exit", i) or ("request", i), what a Msg (the
        frame itself: search._fmt_schedule writes it out), "request" or "token"."""
        store = self.store or self._new_store()
        s = store.number(st)
        out = []
        for kind, i, s2, e in self._moves(s):
            w = e & ~((0x3F << _ENT_SHIFT) | (0x3F << _REQ_SHIFT))
            ent, req = ((e >> _ENT_SHIFT) & 0x3F) - 1, ((e >> _REQ_SHIFT) & 0x3F) - 1
            if kind == "deliver":
                f = store.q_head[s[self.n + i]]
                label = (kind, i, f if f.__class__ is Msg else "request" if f == REQ else "token")
            else:
                label = (kind, i)
            out.append((label, store.state(s2), w, ent, req))
        return out

    # -- the graph -----------------------------------------------------------
    def build(self, progress=None):
        """Breadth-first: every reachable state once, parent pointers for shortest schedules.
        progress: called as progress(expanded, found) every 4096 states expanded."""
        try:
            return self._build(progress, "H")
        except Widen:  # more than 65534 distinct node tuples or link queues: again with 4-byte numbers,
            pass  # outside this handler, whose traceback keeps the first search's tables alive
        return self._build(progress, "I")

    def _representative(self, s):
        """(numbers of s's rotation class representative, rotation): states.canonical's, found
        from the numbers' token flags when there is exactly one token (the usual case)."""
        n = self.n
        store = self.store
        held, qtok = store.node_token, store.q_tokens
        tokens = 0
        at = 0
        for i in range(n):
            k = held[s[i]] + qtok[s[n + i]]
            if k:
                tokens += k
                at = i
        if tokens != 1:
            rep, at = canonical(store.state(s), n)  # a planted bug's second token: compare the rotations
            return store.number(rep), at
        if at == 0:
            return s, 0
        return s[at:n] + s[:at] + s[n + at:2 * n] + s[n:n + at] + s[2 * n + at:] + s[2 * n:2 * n + at], at

    def _build(self, progress, typecode):
        t0 = time.perf_counter()
        n = self.n
        store = self._new_store(typecode)
        init = store.number(self.initial())
        rotate = self.rotations
        if rotate:
            init, self.init_shift = self._representative(init)
        pack, unpack = store.pack, store.unpack
        key = pack(*init)
        index = store.index
        index[key] = 0
        states = store.keys
        states.append(key)
        parent = array("q", [-1])  # (parent id << 8) | transition index
        depth = array("i", [0])
        start = array("q", [0])
        edges = array("q")
        self.first_safety = None
        self.first_token_error = None
        self.stuck = []  # quiet states with a pending request
        self.quiescent = []  # quiet states with nothing pending
        self.irregular = []  # states without exactly one token
        self.budget_hit = False
        self._check_numbers(0, init)
        k = 0
        max_states = self.max_states
        moves, representative, check = self._moves, self._representative, self._check_numbers
        while k < len(states):
            for t, (_, _, s2, e) in enumerate(moves(unpack(states[k]))):
                r = 0
                if rotate:
                    s2, r = representative(s2)
                key = pack(*s2)
                sid = index.get(key)
                if sid is None:
                    sid = len(states)
                    if sid >= max_states:
                        self.budget_hit = True
                        break
                    index[key] = sid
                    states.append(key)
                    parent.append((k << 8) | t)
                    depth.append(depth[k] + 1)
                    check(sid, s2)
                edges.append((sid << _SUCC_SHIFT) | (r << _ROT_SHIFT) | (t << _T_SHIFT) | e)
            if self.budget_hit:
                break
            start.append(len(edges))
            k += 1
            if progress is not None and not k & 4095:
                progress(k, len(states))
        self.index = IndexView(store)
        self.states = StatesView(store)
        self.parent = parent
        self.depth = depth
        self.start = start
        self.edges = edges
        self.build_time = time.perf_counter() - t0
        if self.budget_hit:
            raise StateBudgetExceeded(
                "state budget exhausted: more than %d reachable states for %s, n=%d, R=%d "
                "(raise --max-states, or lower n or R)" % (max_states, self.protocol, n, self.R))
        return self

    def _queue_tokens(self, q):
        """Token frames and token messages in link queue q (None: not countable)."""
        if not self.messages:
            return sum(1 for f in q if f != REQ)
        kinds = self.token_kinds
        if kinds is None:
            return None
        return sum(1 for f in q if (f[0] in kinds if f.__class__ is Msg else f != REQ))

    def _check_numbers(self, sid, s):
        """The checks of a new state (numbers): safety, token integrity, quiet with or without a
        pending request."""
        n = self.n
        bits, qtok = self.store.node_bits, self.store.q_tokens
        in_cs = held = errors = pending = 0
        for i in range(n):
            b = bits[s[i]]
            if b:
                in_cs += b & NB_IN_CS
                held += b & NB_TOKEN
                errors |= b & NB_ERRORS  # errors: frames impossible on a fault-free ring; stale
                pending |= b & NB_PENDING  # counts: Q's recovery hop rule fired (never without faults)
        in_cs //= NB_IN_CS
        held //= NB_TOKEN
        if in_cs > 1 and self.first_safety is None:
            self.first_safety = sid
        flying = 0
        for q in s[n:2 * n]:
            flying = -1 if flying < 0 or qtok[q] < 0 else flying + qtok[q]
        bad = held > 1 if flying < 0 else held + flying != 1
        if (bad or errors) and self.first_token_error is None:
            self.first_token_error = sid
        if flying >= 0 and held + flying != 1:
            self.irregular.append(sid)  # not one token: a rotation may fix it (graph.full_states)
        if in_cs == 0 and not any(s[n:2 * n]):
            (self.stuck if pending else self.quiescent).append(sid)
