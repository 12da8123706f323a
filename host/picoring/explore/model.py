"""`picoring explore`: every reachable state of a small ring, exhaustively.

Two modes. Fault-free (below): safety, liveness and exact worst cases of the
paper's protocols. Lossy (`--faults drop=D,timeout=T,restart=B [--boot]`,
explore_faults, described at LossyExplorer): the token recovery's SAFETY --
mutual exclusion, strictly increasing entry numbers, at most one live token --
over every schedule with at most D lost frames, T timeouts (at any moment) and
B board restarts, each violation with a shortest schedule that replay_faults
re-runs on fresh node objects. Example:
    picoring explore --faults drop=1,timeout=2 -p q -n 3 -R 1   (~1e5 states, seconds)

The explorer drives the firmware's own node objects (firmware/protocol.py): it
loads a node's attributes from an abstract state, calls the real handler
(request, on_request, on_token, exit_cs), carries out the returned action bits
the way simcore does, and reads the attributes back. The rules are not
re-modelled here.

Model: the fully asynchronous ring. One FIFO queue per link i -> i+1. A
transition is one of
  deliver i   the frame at the head of link i reaches node i+1
  exit i      node i leaves its critical section
  request i   node i makes a request (only when it has none outstanding: not
              pending and not in its critical section; at most R per node)
in any order. This contains every schedule of the simulator (which fixes hop
times and an order within a time unit), for any critical-section length.

Initial state: the token at rest at node 0 (give_token), nothing in flight.
Every rule is the same at every node (a node's index is never read by the
rules) and every node has the same request budget, so rotating a reachable
state by k gives a reachable state of the ring started at node k, with the
same measures: node 0 suffices.

Abstract state: per node (pending, in_cs, has_token, count, state, flag,
errors), the link queues (a request frame is REQ, a token frame is its
(count, state)), the per-node remaining request budget. Two reductions, both
checked against the full attribute state by `exact=True` (tests/test_explore.py):
  - seq and epoch are dropped. No handler branches on them: seq is only
    incremented at an entry and copied from the token, epoch only copied. They
    are observers, not control state (and seq alone would make S's graph a
    counter of entries).
  - count and state of a node that does not hold the token are reset to 0.
    They are dead there: on_token overwrites them before any read, exit_cs
    (the only other reader) runs only in a critical section, which implies
    has_token. The token's own fields travel in the frame.

Measures per transition: frames sent (token or request), frames delivered.
  messages per request  max over complete runs (initial state to a quiescent
                        state: no frame in flight, no critical section, nothing
                        pending) of messages sent / requests made. The requests
                        made are a function of the state (the spent budget), so
                        this is a longest-path problem on the state graph.
  service traffic (a)   frames SENT from the moment a request is made (its own
                        request message included) until the requester receives
                        the token (picoring's checker's measure)
  service traffic (b)   frames DELIVERED in the same interval, the delivery of
                        the token to the requester included
Both by a forward longest-path DP over the graph in topological order of its
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

This module: the fault-free state graph (Explorer). search.py runs the analysis over
it (explore, replay, format_report); lossy_model.py and lossy.py are the lossy mode.
"""

import time
from array import array
from collections import deque

from ..firmware.protocol import ENTER_CS, PROTOCOLS, SEND_REQUEST, SEND_TOKEN

REQ = -1  # a request frame in a link queue; a token frame is a tuple

FIELDS = ("pending", "in_cs", "has_token", "count", "state", "flag", "errors", "stale_counts")
EXACT_FIELDS = FIELDS + ("seq", "epoch")
P_PENDING, P_IN_CS, P_HAS_TOKEN, P_COUNT, P_STATE, P_FLAG, P_ERRORS, P_STALE = range(8)

# edge encoding (one int per edge in a flat array)
_SENDS = 0x3  # bits 0-1: frames sent
_DELIV = 0x4  # bit 2: a frame was delivered
_ENT_SHIFT = 3  # bits 3-8: node that entered its critical section + 1
_REQ_SHIFT = 9  # bits 9-14: node that made a request + 1
_T_SHIFT = 15  # bits 15-22: transition index within the state
_SUCC_SHIFT = 23

INF = 1 << 60


def _protocol_class(protocol):
    """(node class, name) of a protocol name from firmware.protocol.PROTOCOLS or a
    Node subclass (a planted bug in the tests)."""
    if isinstance(protocol, str):
        if protocol not in PROTOCOLS:
            raise ValueError("unknown protocol %r" % (protocol,))
        return PROTOCOLS[protocol], protocol
    return protocol, getattr(protocol, "name", None) or protocol.__name__


def _check_size(n, most, what):
    if n < 2:
        raise ValueError("a ring needs at least 2 nodes")
    if n > most:
        raise ValueError("n too large for %s" % what)


def _walk_back(parent, sid, shift):
    """(state, transition) steps from the initial state to sid, following parent
    (state -> (previous state << shift) | transition index)."""
    mask = (1 << shift) - 1
    steps = []
    while sid:
        p = parent[sid]
        steps.append((p >> shift, p & mask))
        sid = p >> shift
    steps.reverse()
    return steps


def _schedule_lines(lines, label, steps, indent="      "):
    """A schedule as numbered report lines."""
    lines.append("    %s (%d steps):" % (label, len(steps)))
    for k, x in enumerate(steps, 1):
        lines.append("%s%2d. %s" % (indent, k, x))


class StateBudgetExceeded(Exception):
    pass


class Explorer:
    """Build the reachable state graph of (protocol, n, R) and analyse it.

    protocol is a name from firmware.protocol.PROTOCOLS or a Node subclass (a
    planted bug in the tests).
    """

    def __init__(self, protocol, n, requests_per_node=1, max_states=2_000_000, exact=False, start=0):
        self.cls, self.protocol = _protocol_class(protocol)
        _check_size(n, 60, "the explorer")
        if requests_per_node < 0:
            raise ValueError("requests per node cannot be negative")
        self.n = n
        self.R = requests_per_node
        self.max_states = max_states
        self.exact = exact
        self.start_node = start  # where the token rests initially (0 suffices: symmetry)
        self.fields = EXACT_FIELDS if exact else FIELDS
        self._nodes = [self.cls(i, n) for i in range(n)]
        self._intern = {}
        self._memo = {}
        self.uses_requests = self._nodes[0].uses_requests

    # -- nodes <-> tuples ----------------------------------------------------
    def _load(self, i, values):
        node = self._nodes[i]
        d = node.__dict__
        for f, v in zip(self.fields, values):
            d[f] = v
        if not self.exact:
            d["seq"] = 0
            d["epoch"] = 0
        return node

    def _store(self, node):
        d = node.__dict__
        t = tuple([d[f] for f in self.fields])
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

    def initial(self):
        fresh = [self.cls(i, self.n) for i in range(self.n)]
        h = self.start_node
        a = fresh[h].give_token()
        nodes = tuple(self._store(x) for x in fresh)
        links = [()] * self.n
        if a & SEND_TOKEN:
            links[h] = (self._frame(fresh[h]),)
        if a & ~SEND_TOKEN:
            raise RuntimeError("give_token returned %d" % a)
        return (nodes, tuple(links), (self.R,) * self.n)

    # -- transitions -------------------------------------------------------
    def _call(self, i, v, ev):
        """Run one handler of node i, loaded with attribute tuple v, on the real
        node object. ev: REQ (request frame arrives), a token frame, "exit" or
        "request". Returns (new tuple, frames it sends in order, sends, entered).

        The handlers are pure functions of the node's attributes and their
        arguments (firmware/protocol.py: no I/O, no clock, no globals), so a
        call is memoized on (i, v, ev): the same call is never run twice.
        """
        key = (i, v, ev)
        r = self._memo.get(key)
        if r is not None:
            return r
        node = self._load(i, v)
        if ev == "exit":
            a = node.exit_cs()
        elif ev == "request":
            a = node.request()
        elif ev == REQ:
            a = node.on_request()
        elif self.exact:
            a = node.on_token(ev[0], ev[1], ev[2], ev[3])
        else:
            a = node.on_token(ev[0], ev[1], 0, 0)
        if a & ~(SEND_TOKEN | SEND_REQUEST | ENTER_CS):
            raise RuntimeError("node %d returned unknown action bits %d" % (i, a))
        out = ()
        # the order simcore.run sends them in: request frame, then token
        if a & SEND_REQUEST:
            out += (REQ,)
        if a & SEND_TOKEN:
            out += (self._frame(node),)
        if a & ENTER_CS and not node.in_cs:
            raise RuntimeError("node %d returned ENTER_CS but is not in its critical section" % i)
        r = (self._store(node), out, len(out), i if a & ENTER_CS else -1)
        self._memo[key] = r
        return r

    def successors(self, st):
        """[(label, state, sends, delivered, entered, requested)] in a fixed order."""
        nodes, links, budget = st
        n = self.n
        out = []
        call = self._call
        intern = self._intern
        for i in range(n):
            q = links[i]
            if q:
                j = i + 1 if i + 1 < n else 0
                f = q[0]
                v2, fr, sends, ent = call(j, nodes[j], f)
                nl = list(links)
                nl[i] = q[1:]
                if fr:
                    x = nl[j] + fr
                    nl[j] = intern.setdefault(x, x)
                s2 = (nodes[:j] + (v2,) + nodes[j + 1:], tuple(nl), budget)
                out.append((("deliver", i, "request" if f == REQ else "token"), s2, sends, 1, ent, -1))
        for i in range(n):
            if nodes[i][P_IN_CS]:
                v2, fr, sends, ent = call(i, nodes[i], "exit")
                nl = links
                if fr:
                    nl = list(links)
                    x = nl[i] + fr
                    nl[i] = intern.setdefault(x, x)
                    nl = tuple(nl)
                out.append((("exit", i), (nodes[:i] + (v2,) + nodes[i + 1:], nl, budget), sends, 0, ent, -1))
        for i in range(n):
            v = nodes[i]
            if budget[i] and not v[P_PENDING] and not v[P_IN_CS]:
                v2, fr, sends, ent = call(i, v, "request")
                b = budget[:i] + (budget[i] - 1,) + budget[i + 1:]
                nl = links
                if fr:
                    nl = list(links)
                    x = nl[i] + fr
                    nl[i] = intern.setdefault(x, x)
                    nl = tuple(nl)
                out.append((("request", i), (nodes[:i] + (v2,) + nodes[i + 1:], nl, b), sends, 0, ent, i))
        return out

    # -- the graph -----------------------------------------------------------
    def build(self, progress=None):
        """Breadth-first: every reachable state once, parent pointers for shortest schedules.
        progress: called as progress(expanded, found) every 4096 states expanded."""
        t0 = time.perf_counter()
        init = self.initial()
        index = {init: 0}
        states = [init]
        parent = array("q", [-1])  # (parent id << 8) | transition index
        depth = array("l", [0])
        start = array("q", [0])
        edges = array("q")
        self.first_safety = None
        self.first_token_error = None
        self.stuck = []  # quiet states with a pending request
        self.quiescent = []  # quiet states with nothing pending
        self.budget_hit = False
        self._check_state(0, init)
        k = 0
        max_states = self.max_states
        while k < len(states):
            st = states[k]
            for t, (label, s2, sends, deliv, ent, req) in enumerate(self.successors(st)):
                sid = index.get(s2)
                if sid is None:
                    sid = len(states)
                    if sid >= max_states:
                        self.budget_hit = True
                        break
                    index[s2] = sid
                    states.append(s2)
                    parent.append((k << 8) | t)
                    depth.append(depth[k] + 1)
                    self._check_state(sid, s2)
                edges.append(
                    (sid << _SUCC_SHIFT) | (t << _T_SHIFT) | ((req + 1) << _REQ_SHIFT)
                    | ((ent + 1) << _ENT_SHIFT) | (_DELIV if deliv else 0) | sends
                )
            if self.budget_hit:
                break
            start.append(len(edges))
            k += 1
            if progress is not None and not k & 4095:
                progress(k, len(states))
        self.index = index
        self.states = states
        self.parent = parent
        self.depth = depth
        self.start = start
        self.edges = edges
        self.build_time = time.perf_counter() - t0
        if self.budget_hit:
            raise StateBudgetExceeded(
                "state budget exhausted: more than %d reachable states for %s, n=%d, R=%d "
                "(raise --max-states, or lower n or R)" % (max_states, self.protocol, self.n, self.R))
        return self

    def _check_state(self, sid, st):
        nodes, links, budget = st
        in_cs = sum(1 for v in nodes if v[P_IN_CS])
        if in_cs > 1 and self.first_safety is None:
            self.first_safety = sid
        tokens = sum(1 for v in nodes if v[P_HAS_TOKEN]) + sum(1 for q in links for f in q if f != REQ)
        # errors: frames impossible on a fault-free ring; stale counts: Q's recovery
        # hop rule fired, which it never does without faults
        errors = sum(v[P_ERRORS] + v[P_STALE] for v in nodes)
        if (tokens != 1 or errors) and self.first_token_error is None:
            self.first_token_error = sid
        if in_cs == 0 and not any(links):
            if any(v[P_PENDING] for v in nodes):
                self.stuck.append(sid)
            else:
                self.quiescent.append(sid)

    # -- schedules -----------------------------------------------------------
    def label_of(self, sid, t):
        return self.successors(self.states[sid])[t][0]

    def _path(self, pred, sid):
        """Transition labels from the initial state to sid, following pred (state -> (prev << 8) | t)."""
        return [self.label_of(u, t) for u, t in _walk_back(pred, sid, 8)]

    def path_to(self, sid):
        """Shortest schedule from the initial state to sid."""
        return self._path(self.parent, sid)

    def _edges_of(self, v):
        e = self.edges
        for k in range(self.start[v], self.start[v + 1]):
            yield e[k]

    # -- cycles ----------------------------------------------------------------
    def sccs(self):
        """Iterative Tarjan. Sets self.topo (states in topological order of their
        components) and self.cyclic (bytearray: state lies on a cycle)."""
        N = len(self.states)
        start, edges = self.start, self.edges
        idx = array("l", [-1]) * N
        low = array("l", [0]) * N
        onst = bytearray(N)
        cyclic = bytearray(N)
        stack = []
        rev_topo = []
        c = 0
        work = [[0, start[0]]]
        idx[0] = low[0] = 0
        c = 1
        stack.append(0)
        onst[0] = 1
        while work:
            top = work[-1]
            v, p = top
            if p < start[v + 1]:
                top[1] = p + 1
                w = edges[p] >> _SUCC_SHIFT
                if idx[w] == -1:
                    idx[w] = low[w] = c
                    c += 1
                    stack.append(w)
                    onst[w] = 1
                    work.append([w, start[w]])
                elif onst[w]:
                    if idx[w] < low[v]:
                        low[v] = idx[w]
                    if w == v:
                        cyclic[v] = 1  # self-loop
            else:
                work.pop()
                if work:
                    u = work[-1][0]
                    if low[v] < low[u]:
                        low[u] = low[v]
                if low[v] == idx[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        onst[w] = 0
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        for w in comp:
                            cyclic[w] = 1
                    rev_topo.extend(comp)
        rev_topo.reverse()
        self.topo = rev_topo
        self.cyclic = cyclic
        self.cycle_states = [v for v in range(N) if cyclic[v]]
        return self

    def cycle_from(self, root):
        """Shortest cycle through root (breadth-first within cyclic states): labels."""
        prev = {root: None}
        dq = deque([root])
        while dq:
            v = dq.popleft()
            for e in self._edges_of(v):
                w = e >> _SUCC_SHIFT
                t = (e >> _T_SHIFT) & 0xFF
                if w == root:
                    steps = [(v, t)]
                    while prev[v] is not None:
                        u, tu = prev[v]
                        steps.append((u, tu))
                        v = u
                    steps.reverse()
                    return [self.label_of(u, tu) for u, tu in steps]
                if self.cyclic[w] and w not in prev:
                    prev[w] = (v, t)
                    dq.append(w)
        return []

    # -- worst cases -------------------------------------------------------------
    def longest_messages(self):
        """M[v]: the most messages sent on a run from the initial state to v (INF
        if v is on or after a cycle)."""
        N = len(self.states)
        M = array("q", [-1]) * N
        pred = array("q", [-1]) * N
        M[0] = 0
        edges, start, cyclic = self.edges, self.start, self.cyclic
        for v in self.topo:
            m = M[v]
            if cyclic[v]:
                m = M[v] = INF
            for k in range(start[v], start[v + 1]):
                e = edges[k]
                w = e >> _SUCC_SHIFT
                c = INF if m >= INF else m + (e & _SENDS)
                if c > M[w]:
                    M[w] = c
                    pred[w] = (v << 8) | ((e >> _T_SHIFT) & 0xFF)
        self.M = M
        self.M_pred = pred
        return M

    def _pending_of(self, v):
        return [i for i, x in enumerate(self.states[v][0]) if x[P_PENDING]]

    def service_traffic(self):
        """Exact worst service traffic, readings (a) frames sent and (b) frames delivered.

        A forward longest-path DP in topological order over the product
        (state, pending node): L[p][v] is the most traffic since p's current
        request over all runs reaching v. Returns {reading: (value or INF,
        witness)}, the witness (node, index of its request in the schedule,
        schedule)."""
        N = len(self.states)
        n = self.n
        edges, start, cyclic = self.edges, self.start, self.cyclic
        La = [array("l", [-1]) * N for _ in range(n)]
        Lb = [array("l", [-1]) * N for _ in range(n)]
        # predecessors (u << 8 | t); -2 - (u << 8 | t) marks p's request edge
        Pa = [array("q", [-1]) * N for _ in range(n)]
        Pb = [array("q", [-1]) * N for _ in range(n)]
        best = {"a": -1, "b": -1}
        best_w = {"a": None, "b": None}
        unbounded = False
        rng = range(n)
        for v in self.topo:
            pend = [p for p in rng if La[p][v] >= 0]
            if pend and cyclic[v]:
                unbounded = True
            for k in range(start[v], start[v + 1]):
                e = edges[k]
                w = e >> _SUCC_SHIFT
                ut = (v << 8) | ((e >> _T_SHIFT) & 0xFF)
                wa = e & _SENDS
                wb = 1 if e & _DELIV else 0
                ent = ((e >> _ENT_SHIFT) & 0x3F) - 1
                req = ((e >> _REQ_SHIFT) & 0x3F) - 1
                if req >= 0:
                    if ent == req:
                        for r in ("a", "b"):
                            if best[r] < 0:
                                best[r], best_w[r] = 0, (req, ut)
                    else:
                        if wa > La[req][w]:
                            La[req][w] = wa
                            Pa[req][w] = -2 - ut
                        if Lb[req][w] < 0:
                            Lb[req][w] = 0
                            Pb[req][w] = -2 - ut
                for p in pend:
                    ca = La[p][v] + wa
                    cb = Lb[p][v] + wb
                    if ent == p:
                        if ca > best["a"]:
                            best["a"], best_w["a"] = ca, (p, ut)
                        if cb > best["b"]:
                            best["b"], best_w["b"] = cb, (p, ut)
                    else:
                        if ca > La[p][w]:
                            La[p][w] = ca
                            Pa[p][w] = ut
                        if cb > Lb[p][w]:
                            Lb[p][w] = cb
                            Pb[p][w] = ut
        res = {}
        for r, P in (("a", Pa), ("b", Pb)):
            if unbounded:
                res[r] = (INF, None)
                continue
            if best_w[r] is None:
                res[r] = (-1, None)
                continue
            p, ut = best_w[r]
            chain = [ut]
            cur = ut >> 8
            if ((self._edge(cur, ut & 0xFF) >> _REQ_SHIFT) & 0x3F) - 1 != p:
                while True:
                    pr = P[p][cur]
                    if pr <= -2:
                        pr = -2 - pr
                        chain.append(pr)
                        cur = pr >> 8
                        break
                    chain.append(pr)
                    cur = pr >> 8
            chain.reverse()
            prefix = self.path_to(cur)
            res[r] = (best[r], (p, len(prefix), prefix + [self.label_of(x >> 8, x & 0xFF) for x in chain]))
        return res

    def _edge(self, v, t):
        for e in self._edges_of(v):
            if (e >> _T_SHIFT) & 0xFF == t:
                return e
        raise KeyError((v, t))

    def path_longest(self, sid):
        """The schedule to sid with the most messages (the longest-path predecessors)."""
        return self._path(self.M_pred, sid)

    def requests_made(self, sid):
        return sum(self.R - b for b in self.states[sid][2])
