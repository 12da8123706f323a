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
"""

import time
from array import array
from collections import deque
from fractions import Fraction

from .firmware.protocol import (DISCARDED, ENTER_CS, PROTOCOLS, REGENERATED, SEND_AGAIN, SEND_CLAIM, SEND_REQUEST,
                                SEND_TOKEN)

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
    def build(self):
        """Breadth-first: every reachable state once, parent pointers for shortest schedules."""
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


# -- the whole analysis ------------------------------------------------------

def _fmt_schedule(labels, n):
    out = []
    for lb in labels:
        if lb[0] == "deliver":
            out.append("deliver %s %d->%d" % (lb[2], lb[1], (lb[1] + 1) % n))
        else:
            out.append("%s %d" % (lb[0], lb[1]))
    return out


def _base_protocol(cls):
    for c in cls.__mro__:
        for name, k in PROTOCOLS.items():
            if c is k:
                return name
    return ""


def explore(protocol, n, requests_per_node=1, max_states=2_000_000, exact=False, start=0):
    """Explore and analyse; returns a JSON-able report dict."""
    from .check.checker import bounds_for, paper_bounds_for

    t0 = time.perf_counter()
    ex = Explorer(protocol, n, requests_per_node, max_states=max_states, exact=exact, start=start)
    name = ex.protocol
    rep = {
        "protocol": name,
        "n": n,
        "requests_per_node": requests_per_node,
        "model": "asynchronous, FIFO links; token starts at rest at node %d (ring symmetry: any start is a rotation)" % start,
        "abstraction": "full attributes" if exact else "seq/epoch dropped, dead count/state of non-holders zeroed",
    }
    try:
        ex.build()
    except StateBudgetExceeded as e:
        rep.update(complete=False, error=str(e), states=len(ex.states) if hasattr(ex, "states") else None,
                   seconds=round(time.perf_counter() - t0, 3), ok=False)
        return rep
    ex.sccs()
    N = len(ex.states)
    sched = lambda labels: _fmt_schedule(labels, n)  # noqa: E731
    rep["complete"] = True
    rep["states"] = N
    rep["transitions"] = len(ex.edges)
    rep["max_depth"] = max(ex.depth)
    # safety
    if ex.first_safety is not None:
        rep["safety"] = {"ok": False, "schedule": sched(ex.path_to(ex.first_safety))}
    else:
        rep["safety"] = {"ok": True}
    if ex.first_token_error is not None:
        rep["token_integrity"] = {"ok": False, "schedule": sched(ex.path_to(ex.first_token_error))}
    else:
        rep["token_integrity"] = {"ok": True}
    # deadlock
    if ex.stuck:
        s = min(ex.stuck, key=lambda v: ex.depth[v])
        rep["deadlock"] = {"ok": False, "states": len(ex.stuck), "schedule": sched(ex.path_to(s)),
                           "pending": ex._pending_of(s)}
    else:
        rep["deadlock"] = {"ok": True}
    # cycles
    starving = [v for v in ex.cycle_states if ex._pending_of(v)]
    live = [v for v in ex.cycle_states if not ex._pending_of(v)]
    if starving:
        s = min(starving, key=lambda v: ex.depth[v])
        rep["starvation"] = {"ok": False, "states": len(starving), "prefix": sched(ex.path_to(s)),
                             "cycle": sched(ex.cycle_from(s)), "pending": ex._pending_of(s)}
    else:
        rep["starvation"] = {"ok": True}
    served_ok = not starving and not ex.stuck
    rep["served"] = {"ok": served_ok}
    if live:
        s = min(live, key=lambda v: ex.depth[v])
        lv = {"ok": False, "states": len(live), "prefix": sched(ex.path_to(s)), "cycle": sched(ex.cycle_from(s))}
        if not ex.uses_requests:
            lv["by_design"] = True
            lv["note"] = "never quiescent by design (the token circulates forever)"
        rep["livelock"] = lv
    else:
        rep["livelock"] = {"ok": True}
    rep["quiescent_states"] = len(ex.quiescent)
    # worst cases
    M = ex.longest_messages()
    base = _base_protocol(ex.cls)  # a variant (a planted bug) is held to its base's bounds
    bm, bs = bounds_for(base, n)
    pm, ps = paper_bounds_for(base, n)
    mpr = {"paper_bound": pm, "checked_bound": bm}
    if ex.cycle_states:
        mpr["worst"] = None
        mpr["unbounded"] = True
        mpr["why"] = "a reachable cycle: the token (or a message) moves forever with finitely many requests"
    best = None
    finite_best = None
    for v in ex.quiescent:
        k = ex.requests_made(v)
        if k == 0:
            continue
        if M[v] >= INF:
            continue
        r = Fraction(M[v], k)
        if finite_best is None or r > finite_best[0]:
            finite_best = (r, v)
    if not ex.cycle_states:
        best = finite_best
        mpr["unbounded"] = False
        if best is not None:
            r, v = best
            mpr["worst"] = float(r)
            mpr["worst_exact"] = "%d/%d" % (M[v], ex.requests_made(v))
            mpr["worst_over_n"] = round(float(r) / n, 4)
            mpr["schedule"] = sched(ex.path_longest(v))
    elif finite_best is not None:
        r, v = finite_best
        mpr["worst_over_quiet_runs"] = float(r)
        mpr["worst_over_quiet_runs_exact"] = "%d/%d" % (M[v], ex.requests_made(v))
    if mpr.get("worst") is not None and bm is not None:
        mpr["within_checked"] = mpr["worst"] <= bm
    if mpr.get("worst") is not None and pm is not None:
        mpr["within_paper"] = mpr["worst"] <= pm
    rep["messages_per_request"] = mpr
    st = ex.service_traffic()
    for reading, key in (("a", "service_traffic_sent"), ("b", "service_traffic_delivered")):
        val, w = st[reading]
        d = {"paper_bound": ps, "checked_bound": bs}
        if val >= INF:
            d["worst"] = None
            d["unbounded"] = True
        else:
            d["worst"] = val if val >= 0 else None
            if w is not None:
                node, start_at, labels = w
                d["node"] = node
                d["request_step"] = start_at + 1
                d["schedule"] = sched(labels)
            if bs is not None and d["worst"] is not None:
                d["within_checked"] = d["worst"] <= bs
            if ps is not None and d["worst"] is not None:
                d["within_paper"] = d["worst"] <= ps
        rep[key] = d
    rep["seconds"] = round(time.perf_counter() - t0, 3)
    fails = []
    if not rep["safety"]["ok"]:
        fails.append("safety")
    if not rep["token_integrity"]["ok"]:
        fails.append("token")
    if not served_ok:
        fails.append("liveness")
    if live and ex.uses_requests:
        fails.append("quiescence")
    for key in ("service_traffic_sent",):
        if rep[key].get("within_checked") is False:
            fails.append("checked service-traffic bound")
    if rep["messages_per_request"].get("within_checked") is False:
        fails.append("checked messages-per-request bound")
    rep["failures"] = fails
    rep["ok"] = not fails
    return rep


def replay(protocol, n, labels, start=0, checker=None):
    """Run a schedule (explorer labels or "kind i" strings) on fresh node objects
    with real FIFO queues, independently of the explorer's state encoding.
    Returns per-request service traffic (sent, delivered) and the totals.
    checker: a picoring.check.checker.Checker fed the run (step k is time k)."""
    cls = PROTOCOLS[protocol] if isinstance(protocol, str) else protocol
    nodes = [cls(i, n) for i in range(n)]
    links = [deque() for _ in range(n)]
    sent = delivered = 0
    in_cs = set()
    waiting = {}  # node -> (sent, delivered) at its request
    services = []
    safety = True
    requests = 0

    def act(i, a):
        nonlocal sent, tokens
        j = i
        if a & SEND_REQUEST:
            links[j].append(None)
            sent += 1
        if a & SEND_TOKEN:
            nd = nodes[i]
            links[j].append((nd.count, nd.state, nd.seq, nd.epoch))
            sent += 1
            tokens += 1
        if a & ENTER_CS:
            return True
        return False

    def entered(i, dsent, ddeliv):
        nonlocal safety
        if in_cs:
            safety = False
        in_cs.add(i)
        s0, d0 = waiting.pop(i)
        services.append((i, sent - s0, delivered - d0))
        if checker is not None:
            checker.count_to(tokens, sent - tokens)
            checker.enter(step, i)

    tokens = 0
    step = 0

    act(start, nodes[start].give_token())
    for step, lb in enumerate(labels, 1):
        if isinstance(lb, str):
            parts = lb.split()
            lb = (parts[0], int(parts[2].split("->")[0]) if parts[0] == "deliver" else int(parts[1]))
        kind, i = lb[0], lb[1]
        if kind == "request":
            requests += 1
            waiting[i] = (sent, delivered)
            if checker is not None:
                checker.count_to(tokens, sent - tokens)
                checker.request(step, i)
            if act(i, nodes[i].request()):
                entered(i, 0, 0)
        elif kind == "exit":
            in_cs.discard(i)
            if checker is not None:
                checker.count_to(tokens, sent - tokens)
                checker.exit(step, i)
            act(i, nodes[i].exit_cs())
        else:
            f = links[i].popleft()
            delivered += 1
            j = (i + 1) % n
            a = nodes[j].on_request() if f is None else nodes[j].on_token(*f)
            if act(j, a):
                entered(j, 0, 0)
    if checker is not None:
        checker.count_to(tokens, sent - tokens)
    return {"sent": sent, "delivered": delivered, "requests": requests, "services": services,
            "safety": safety, "in_flight": sum(len(q) for q in links),
            "pending": [i for i, x in enumerate(nodes) if x.pending]}


# -- text report ---------------------------------------------------------------

def format_report(rep):
    lines = []
    head = "explore %s  n=%d  R=%d per node" % (rep["protocol"], rep["n"], rep["requests_per_node"])
    lines.append(head)
    lines.append("  model: " + rep["model"])
    lines.append("  abstraction: " + rep["abstraction"])
    if not rep.get("complete"):
        lines.append("  INCOMPLETE: " + rep.get("error", ""))
        lines.append("  states explored before stopping: %s, %.1f s" % (rep.get("states"), rep["seconds"]))
        return "\n".join(lines)
    lines.append("  states %d, transitions %d, longest shortest-schedule %d steps, %.2f s"
                 % (rep["states"], rep["transitions"], rep["max_depth"], rep["seconds"]))

    def sched(label, s, indent="      "):
        _schedule_lines(lines, label, s, indent)

    ok = lambda b: "ok" if b else "FAIL"  # noqa: E731
    lines.append("  safety (at most one node in its critical section): %s" % ok(rep["safety"]["ok"]))
    if not rep["safety"]["ok"]:
        sched("shortest schedule to two nodes in the critical section", rep["safety"]["schedule"])
    if not rep["token_integrity"]["ok"]:
        lines.append("  token integrity (exactly one token, no impossible frame): FAIL")
        sched("shortest schedule", rep["token_integrity"]["schedule"])
    lines.append("  every pending request can be served: %s" % ok(rep["served"]["ok"]))
    if not rep["deadlock"]["ok"]:
        d = rep["deadlock"]
        lines.append("    deadlock: %d quiet states with a pending request (nodes %s)" % (d["states"], d["pending"]))
        sched("shortest schedule to a deadlock", d["schedule"])
    if not rep["starvation"]["ok"]:
        d = rep["starvation"]
        lines.append("    starvation: a cycle with nodes %s pending" % d["pending"])
        sched("shortest schedule entering it", d["prefix"])
        sched("then forever", d["cycle"])
    lv = rep["livelock"]
    if lv["ok"]:
        lines.append("  quiescence (every execution goes quiet once requests stop): ok (%d quiescent states)"
                     % rep["quiescent_states"])
    elif lv.get("by_design"):
        lines.append("  quiescence: never quiescent by design (S: the token circulates forever); not a failure")
    else:
        lines.append("  quiescence: FAIL: livelock, %d states on cycles with nothing pending" % lv["states"])
        sched("shortest schedule entering it", lv["prefix"])
        sched("then forever", lv["cycle"])
    m = rep["messages_per_request"]
    if m.get("unbounded"):
        extra = ""
        if m.get("worst_over_quiet_runs") is not None:
            extra = " (over the runs that do go quiet: %s = %.3f)" % (m["worst_over_quiet_runs_exact"], m["worst_over_quiet_runs"])
        lines.append("  messages per request: unbounded%s" % extra)
    elif m.get("worst") is not None:
        lines.append("  messages per request: worst %s = %.3f  (paper %s, checked %s)"
                     % (m["worst_exact"], m["worst"], m["paper_bound"], m["checked_bound"]))
        sched("a complete run reaching it", m["schedule"])
    for key, what in (("service_traffic_sent", "service traffic (a) frames sent"),
                      ("service_traffic_delivered", "service traffic (b) frames delivered")):
        d = rep[key]
        if d.get("unbounded"):
            lines.append("  %s: unbounded" % what)
            continue
        lines.append("  %s: worst %s  (paper %s, checked %s)" % (what, d["worst"], d["paper_bound"], d["checked_bound"]))
        if d.get("schedule"):
            sched("reached by node %d, request at step %d" % (d["node"], d["request_step"]), d["schedule"])
    lines.append("  verdict: %s" % ("ok" if rep["ok"] else "FAIL: " + ", ".join(rep["failures"])))
    return "\n".join(lines)


# -- lossy mode: the recovery's safety under bounded faults ------------------------
#
# `explore --faults drop=D,timeout=T,restart=B [--boot]` (explore_faults below).
#
# The same asynchronous FIFO ring, now with every frame kind of the recovery in
# flight with all its fields (token: count, state, seq, epoch; request; again:
# origin; claim/join: epoch, origin, join, seq), and three fault actions, each with a
# budget for the whole execution:
#   drop i      the frame at the head of link i is lost (a lost frame, or one the
#               CRC rejects on arrival)                               budget D
#   timeout i   node i's regeneration timer expires: node.on_timeout() (only
#               while node.waiting()). Time is abstract: a timeout may fire at any
#               moment, however soon -- stronger than any real timing     budget T
#   restart i   node i power-cycles: a new node object, boot(starter=(i == 0))
#               as firmware/main.py does, its join frame sent; a request it had
#               pending (or its critical section) is lost, which the harness
#               reports as failed; frames already on the wires stay      budget B
# besides deliver / exit / request as in the fault-free mode. Frames a handler
# returns are sent in firmware/node.py's order (_act): the token (else a
# request), then "again", then the claim.
#
# Dropping only the head of a link loses nothing: a frame dropped in the middle
# of a queue is never seen by anyone, so the drop can be postponed to the moment
# it reaches the head; the nodes see the same inputs, and the postponed schedule
# has the same length and at least as many tokens in flight at every step
# (drop_anywhere=True explores the other way, for the tests).
#
# Start: the token at rest at node 0 (give_token, as NodeLoop.start(give_token=
# True)), or (boot=True) every node booting, boot(starter=(i == 0)), with its
# join frame in flight (as firmware/main.py starts a ring). Node 0 is special
# either way (the starter), so there is no symmetry reduction here.
#
# State: per node every attribute a handler reads (pending, in_cs, has_token,
# count, state, seq, epoch, flag, known_epoch, known_owner, fresh, starting), the
# link queues with the frames' exact fields, the request budget left per node, the
# fault budgets left, and the highest entry numbers so far (see below).
# Reductions (exact=True keeps every attribute; tests/test_explore_faults.py
# checks that the verdicts and the shortest schedules agree):
#   - the counters errors, discarded, regenerated, stale_counts are observers (no
#     handler reads them): loaded as 0, an increment is seen on the edge;
#   - claim_epoch/origin/join/seq and again_origin are outputs, read only by the
#     caller right after a SEND_CLAIM / SEND_AGAIN (every handler writes them
#     before returning it);
#   - count, state and epoch of a node without the token are dead, as in the
#     fault-free mode: every path that reads them (exit_cs, a pass with the token,
#     a regeneration) runs with has_token, or writes them first (on_token; the
#     regeneration sets epoch before give_token/_regenerate).
#   seq, known_epoch, known_owner are kept exactly everywhere: they are control
#   state now (claims and joins carry the highest seq, the epoch gate reads
#   known_epoch).
#
# Invariants, checked in every reached state (breadth-first, so each violation
# comes with a shortest schedule); a failure of any is a FAIL verdict:
#   mutual exclusion   at most one node in its critical section;
#   entry numbers      every ENTER_CS has node.seq strictly greater than every
#                      entry before it in the execution (checked on the edge);
#   one live token     at most one live token, where a token is LIVE if
#                        - it is held (has_token) by a node that is not fresh, or
#                        - it is in flight on link i -> j and passes j's epoch gate
#                          (the real on_token does not return DISCARDED: today j is
#                          not fresh and the epoch is not older than j's
#                          known_epoch by protocol.newer, or is the epoch j had
#                          before its own claim still out) when j gets it after
#                          the frames AHEAD of it in that link (j's only input;
#                          each delivered, in order, to a copy of j).
#                      A token that will be discarded on arrival is dead: it can
#                      never serve an entry. Judging a token in flight by j's
#                      state NOW (the literal reading of "in flight towards a node
#                      that would accept it") misjudges a token queued behind a
#                      frame that changes j first: behind a claim that raises j's
#                      epoch it is dead although j would accept it now; behind j's
#                      own join it is live although fresh j would drop it now.
#                      Both readings are computed, the literal one as a diagnostic
#                      ("live_tokens_now"); they can only differ in when a
#                      violation shows, since delivering the frames ahead is a
#                      continuation the search explores too (other events at j,
#                      or a drop of a frame ahead, are other continuations).
#                      Live is per token: each of two live tokens passes its gate
#                      on its own continuation; a token that passes the gate of a
#                      node already holding one (on_token's "second token" branch
#                      drops it) counts as live: the state had two already.
# Diagnostics, reported with a shortest schedule but not failures (weaker
# readings of the entry-number audit, for when restarts are allowed):
#   (epoch, entry number)  the pair (node.epoch, node.seq) grows strictly,
#                      lexicographically (epochs as integers: within the budgets
#                      they never wrap);
#   completed entries  node.seq at an entry is above the number of every critical
#                      section that ended by exit_cs (one cut by its board's
#                      restart is excused);
#   survivors          node.seq at an entry is above every number entered by a
#                      board that has not restarted since (a restart voids the
#                      board's own entry numbers).
#   A restart can take the only copy of the highest entry number with the board
#   (it held the token, in its critical section or at rest); the token made
#   afterwards then repeats the number (tests/test_explore_faults.py). The
#   "survivors" reading is what an audit can check across restarts.
# Also reported: "impossible frames" (a handler counted an error: a second token
# reached a holder), the most tokens in existence at once (live or not), and
# whether a formed ring is reachable: no node fresh or starting, exactly one token
# in existence, and it is live (shortest schedule to one; can_form=True also
# decides for every reached state whether one is still reachable from it).
# Liveness is not checked: the budgets run out, and a request whose frames were
# lost may wait for a timeout that is no longer allowed.

F_TOKEN, F_REQUEST, F_AGAIN, F_CLAIM = 0, 1, 2, 3
FRAME_REQUEST = (F_REQUEST,)

LOSSY_FIELDS = ("pending", "in_cs", "has_token", "count", "state", "seq", "epoch", "flag",
                "known_epoch", "known_owner", "fresh", "starting", "nonce")
LOSSY_OBSERVERS = ("errors", "discarded", "regenerated", "stale_counts")
LOSSY_OUTPUTS = ("claim_epoch", "claim_origin", "claim_join", "claim_seq", "claim_nonce", "again_origin")
LOSSY_EXACT_FIELDS = LOSSY_FIELDS + LOSSY_OBSERVERS + LOSSY_OUTPUTS
(L_PENDING, L_IN_CS, L_HAS_TOKEN, L_COUNT, L_STATE, L_SEQ, L_EPOCH, L_FLAG,
 L_KNOWN_EPOCH, L_KNOWN_OWNER, L_FRESH, L_STARTING) = range(12)

_ALL_BITS = SEND_TOKEN | SEND_REQUEST | ENTER_CS | SEND_CLAIM | SEND_AGAIN | REGENERATED | DISCARDED
# edge observations (bits of the 4th item LossyExplorer._call returns)
OBS_ERROR = 1  # a handler counted an error (a frame impossible on a fault-free ring)
OBS_STALE = 2  # Q's hop rule fired
OBS_BOTH = 4  # SEND_TOKEN and SEND_REQUEST together: node.py would send only the token
# events of LossyExplorer._call besides a frame id (>= 0)
_EV_EXIT, _EV_REQUEST, _EV_TIMEOUT, _EV_WAITING = -1, -2, -3, -4

FAULT_KEYS = {"drop": "drops", "drops": "drops", "d": "drops", "loss": "drops",
              "timeout": "timeouts", "timeouts": "timeouts", "t": "timeouts",
              "restart": "restarts", "restarts": "restarts", "b": "restarts", "reboot": "restarts"}


def parse_faults(spec):
    """"drop=1,timeout=2,restart=0" -> {"drops": 1, "timeouts": 2, "restarts": 0}.
    Keys (aliases): drop (d, drops, loss), timeout (t, timeouts), restart (b,
    restarts, reboot); a missing key is 0; "none" or "" is all 0."""
    out = {"drops": 0, "timeouts": 0, "restarts": 0}
    spec = (spec or "").strip()
    if spec in ("", "none", "0"):
        return out
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, val = part.partition("=")
        key = key.strip().lower()
        if not sep or key not in FAULT_KEYS:
            raise ValueError("bad fault budget %r: expected drop=D,timeout=T,restart=B" % part)
        try:
            v = int(val)
        except ValueError:
            raise ValueError("bad fault budget %r: not an integer" % part)
        if v < 0:
            raise ValueError("fault budget %r is negative" % part)
        out[FAULT_KEYS[key]] = v
    return out


def frame_text(f, i, n):
    """A frame on link i -> i+1 as a schedule shows it."""
    j = (i + 1) % n
    k = f[0]
    if k == F_TOKEN:
        return "token %d->%d [count=%d state=%d seq=%d epoch=%d]" % (i, j, f[1], f[2], f[3], f[4])
    if k == F_REQUEST:
        return "request %d->%d" % (i, j)
    if k == F_AGAIN:
        return "again %d->%d [origin=%d]" % (i, j, f[1])
    text = "%s %d->%d [epoch=%d origin=%d seq=%d" % ("join" if f[3] else "claim", i, j, f[1], f[2], f[4])
    return text + (" nonce=%d]" % f[5] if f[5] else "]")


def _frames_of(node, a):
    """The frames a handler's action bits send, in firmware/node.py's order."""
    out = []
    if a & SEND_TOKEN:
        out.append((F_TOKEN, node.count, node.state, node.seq, node.epoch))
    elif a & SEND_REQUEST:
        out.append(FRAME_REQUEST)
    if a & SEND_AGAIN:
        out.append((F_AGAIN, node.again_origin))
    if a & SEND_CLAIM:
        out.append((F_CLAIM, node.claim_epoch, node.claim_origin, node.claim_join, node.claim_seq, node.claim_nonce))
    return out


def _deliver(node, f):
    k = f[0]
    if k == F_TOKEN:
        return node.on_token(f[1], f[2], f[3], f[4])
    if k == F_REQUEST:
        return node.on_request()
    if k == F_AGAIN:
        return node.on_request_again(f[1])
    return node.on_claim(f[1], f[2], f[3], f[4], f[5])


_KIND_NAMES = {F_TOKEN: "token", F_REQUEST: "request", F_AGAIN: "again"}


def _kind_name(f):
    if f[0] == F_CLAIM:
        return "join" if f[3] else "claim"
    return _KIND_NAMES[f[0]]


class LossyExplorer:
    """The reachable states of (protocol, n, R) under at most D drops, T timeouts
    and B restarts; safety invariants only (see the comment above).

    Encoding: node attribute tuples, frames, link queues (tuples of frame ids)
    and entry-number records are interned to small ints; a state is one flat
    tuple of ints: n node ids, n queue ids (link i -> i+1), n request budgets
    left, the drop/timeout/restart budgets left, the entry record id. decode()
    turns one back into tuples."""

    def __init__(self, protocol, n, requests_per_node=1, drops=0, timeouts=0, restarts=0, boot=False,
                 max_states=2_000_000, exact=False, drop_anywhere=False):
        self.cls, self.protocol = _protocol_class(protocol)
        _check_size(n, 16, "the lossy explorer")
        for what, v in (("requests per node", requests_per_node), ("drops", drops), ("timeouts", timeouts),
                        ("restarts", restarts)):
            if v < 0:
                raise ValueError("%s cannot be negative" % what)
        self.n = n
        self.R = requests_per_node
        self.faults = (drops, timeouts, restarts)
        self.boot = boot
        self.max_states = max_states
        self.exact = exact
        self.drop_anywhere = drop_anywhere
        self.fields = LOSSY_EXACT_FIELDS if exact else LOSSY_FIELDS
        self._nodes = [self.cls(i, n) for i in range(n)]
        self._memo = {}
        self._boot_memo = {}
        # interning tables: value by id, id by value
        self._vals, self._vid = [], {}  # node attribute tuples
        self._vinfo = []  # by node tuple id: see _node_id
        self._live_memo = {}  # (node j, tuple id of j, queue id of link j-1) -> (live, live now)
        self._fr, self._fid = [], {}  # frames
        self._is_token = []  # by frame id
        self._queues, self._qid = [()], {(): 0}  # link queues (tuples of frame ids)
        self._qtail = [0]  # by queue id: the queue without its head
        self._qtokens = [0]  # by queue id: token frames in it
        self._push = {}  # (queue id, frame ids sent) -> queue id
        self._lasts, self._lid = [], {}  # entry records
        self._Q, self._B, self._F = n, 2 * n, 3 * n

    # -- interning -----------------------------------------------------------
    def _node_id(self, t):
        k = self._vid.get(t)
        if k is None:
            k = self._vid[t] = len(self._vals)
            self._vals.append(t)
            # (in its critical section, holds the token, holds a live token, not joined)
            self._vinfo.append((bool(t[L_IN_CS]), bool(t[L_HAS_TOKEN]), bool(t[L_HAS_TOKEN] and not t[L_FRESH]),
                                bool(t[L_FRESH] or t[L_STARTING])))
        return k

    def _frame_id(self, f):
        k = self._fid.get(f)
        if k is None:
            k = self._fid[f] = len(self._fr)
            self._fr.append(f)
            self._is_token.append(f[0] == F_TOKEN)
        return k

    def _queue_id(self, q):
        k = self._qid.get(q)
        if k is None:
            tail = self._queue_id(q[1:])  # first: it may add queues itself
            k = self._qid[q] = len(self._queues)
            self._queues.append(q)
            self._qtail.append(tail)
            self._qtokens.append(sum(1 for f in q if self._is_token[f]))
        return k

    def _pushed(self, qid, out):
        key = (qid, out)
        r = self._push.get(key)
        if r is None:
            r = self._push[key] = self._queue_id(self._queues[qid] + out)
        return r

    def _last_id(self, last):
        k = self._lid.get(last)
        if k is None:
            k = self._lid[last] = len(self._lasts)
            self._lasts.append(last)
        return k

    def decode(self, st):
        """A state as (node attribute tuples, link queues of frame tuples, request
        budgets left, fault budgets left, entry record)."""
        Q, B, F = self._Q, self._B, self._F
        return (tuple(self._vals[v] for v in st[:Q]),
                tuple(tuple(self._fr[f] for f in self._queues[q]) for q in st[Q:B]),
                st[B:F], st[F:F + 3], self._lasts[st[F + 3]])

    # -- nodes <-> tuples ----------------------------------------------------
    def _load(self, i, v):
        node = self._nodes[i]
        d = node.__dict__
        for f, x in zip(self.fields, v):
            d[f] = x
        if not self.exact:
            for f in LOSSY_OBSERVERS:
                d[f] = 0
            for f in LOSSY_OUTPUTS:
                d[f] = 0
        return node

    def _store(self, node):
        d = node.__dict__
        t = tuple([d[f] for f in self.fields])
        if not self.exact and not t[L_HAS_TOKEN]:
            t = t[:L_COUNT] + (0, 0, t[L_SEQ], 0) + t[L_FLAG:]
        return self._node_id(t)

    def _frames(self, node, a):
        return tuple(self._frame_id(f) for f in _frames_of(node, a))

    def _call(self, i, vid, ev):
        """Run one handler of node i (attribute tuple id vid) on the real node
        object; ev: a frame id, or _EV_EXIT, _EV_REQUEST, _EV_TIMEOUT, _EV_WAITING.
        Memoized: the handlers are pure functions of the attributes and the
        arguments. Returns (new tuple id, frame ids sent, action bits,
        observation bits), or for _EV_WAITING node.waiting()."""
        key = (i, vid, ev)
        r = self._memo.get(key)
        if r is not None:
            return r
        node = self._load(i, self._vals[vid])
        if ev == _EV_WAITING:
            r = bool(node.waiting())
            self._memo[key] = r
            return r
        e0, s0 = node.errors, node.stale_counts
        if ev == _EV_EXIT:
            a = node.exit_cs()
        elif ev == _EV_REQUEST:
            a = node.request()
        elif ev == _EV_TIMEOUT:
            a = node.on_timeout()
        else:
            a = _deliver(node, self._fr[ev])
        if a & ~_ALL_BITS:
            raise RuntimeError("node %d returned unknown action bits %d" % (i, a))
        if a & ENTER_CS and not node.in_cs:
            raise RuntimeError("node %d returned ENTER_CS but is not in its critical section" % i)
        obs = (OBS_ERROR if node.errors != e0 else 0) | (OBS_STALE if node.stale_counts != s0 else 0)
        if a & SEND_TOKEN and a & SEND_REQUEST:
            obs |= OBS_BOTH
        r = (self._store(node), self._frames(node, a), a, obs)
        self._memo[key] = r
        return r

    def _booted(self, i, nonce):
        """(tuple id, frame ids) of node i just after a restart: a new object, boot().
        nonce: the incarnation (main.py draws it at random; here every restart has its
        own, so it never repeats one of the same board's earlier incarnations)."""
        r = self._boot_memo.get((i, nonce))
        if r is None:
            node = self.cls(i, self.n)
            a = node.boot(starter=(i == 0), nonce=nonce)
            r = self._boot_memo[(i, nonce)] = (self._store(node), self._frames(node, a))
        return r

    def initial(self):
        n = self.n
        fresh = [self.cls(i, n) for i in range(n)]
        links = [0] * n
        if self.boot:
            for i, x in enumerate(fresh):
                links[i] = self._queue_id(self._frames(x, x.boot(starter=(i == 0))))
        else:
            links[0] = self._queue_id(self._frames(fresh[0], fresh[0].give_token()))
        nodes = [self._store(x) for x in fresh]
        return tuple(nodes + links + [self.R] * n + list(self.faults) + [self._last_id((-1, (-1, -1), -1, (-1,) * n))])

    # -- transitions -------------------------------------------------------
    def _entry(self, a, j, vid, lid):
        """The entry record after an edge with action bits a that leaves node j
        with attribute tuple vid. Record: (highest entry number, highest (epoch,
        entry number), highest number of a critical section that ended by
        exit_cs, per node the highest number it entered with since its last
        restart). Returns (record id, bad bits: 1 the number does not grow, 2 the
        pair does not, 4 not above every completed one, 8 not above every one
        made by a board that has not restarted since)."""
        if not a & ENTER_CS:
            return lid, 0
        v = self._vals[vid]
        last = self._lasts[lid]
        s = v[L_SEQ]
        es = (v[L_EPOCH], s)
        mine = last[3]
        bad = ((1 if s <= last[0] else 0) | (2 if es <= last[1] else 0) | (4 if s <= last[2] else 0)
               | (8 if s <= max(mine) else 0))
        mine = mine[:j] + (s,) + mine[j + 1:]
        return self._last_id((max(s, last[0]), max(es, last[1]), last[2], mine)), bad

    def successors(self, st):
        """[(label, state, edge)] in a fixed order; label: ("deliver"|"drop", link,
        frame id[, position]) or (kind, node); edge: (action bits, observation
        bits, entry-number violation bits)."""
        n, Q, B, F = self.n, self._Q, self._B, self._F
        L = F + 3
        call = self._call
        pushed = self._pushed
        vals = self._vals
        out = []
        for i in range(n):
            qid = st[Q + i]
            if qid:
                j = i + 1 if i + 1 < n else 0
                f = self._queues[qid][0]
                v2, fr, a, obs = call(j, st[j], f)
                s = list(st)
                s[Q + i] = self._qtail[qid]
                if fr:
                    s[Q + j] = pushed(s[Q + j], fr)
                s[j] = v2
                bad = 0
                if a & ENTER_CS:
                    s[L], bad = self._entry(a, j, v2, st[L])
                out.append((("deliver", i, f), tuple(s), (a, obs, bad)))
        if st[F]:
            for i in range(n):
                qid = st[Q + i]
                if not qid:
                    continue
                q = self._queues[qid]
                for pos in range(len(q) if self.drop_anywhere else 1):
                    s = list(st)
                    s[Q + i] = self._queue_id(q[:pos] + q[pos + 1:]) if pos else self._qtail[qid]
                    s[F] -= 1
                    lb = ("drop", i, q[pos], pos) if self.drop_anywhere else ("drop", i, q[pos])
                    out.append((lb, tuple(s), (0, 0, 0)))
        for i in range(n):
            if vals[st[i]][L_IN_CS]:
                v2, fr, a, obs = call(i, st[i], _EV_EXIT)
                s = list(st)
                s[i] = v2
                if fr:
                    s[Q + i] = pushed(s[Q + i], fr)
                last = self._lasts[st[L]]
                s[L] = self._last_id((last[0], last[1], max(last[2], vals[st[i]][L_SEQ]), last[3]))
                out.append((("exit", i), tuple(s), (a, obs, 0)))
        for i in range(n):
            v = vals[st[i]]
            if st[B + i] and not v[L_PENDING] and not v[L_IN_CS]:
                v2, fr, a, obs = call(i, st[i], _EV_REQUEST)
                s = list(st)
                s[i] = v2
                if fr:
                    s[Q + i] = pushed(s[Q + i], fr)
                s[B + i] -= 1
                bad = 0
                if a & ENTER_CS:
                    s[L], bad = self._entry(a, i, v2, st[L])
                out.append((("request", i), tuple(s), (a, obs, bad)))
        if st[F + 1]:
            for i in range(n):
                if call(i, st[i], _EV_WAITING):
                    v2, fr, a, obs = call(i, st[i], _EV_TIMEOUT)
                    s = list(st)
                    s[i] = v2
                    if fr:
                        s[Q + i] = pushed(s[Q + i], fr)
                    s[F + 1] -= 1
                    bad = 0
                    if a & ENTER_CS:
                        s[L], bad = self._entry(a, i, v2, st[L])
                    out.append((("timeout", i), tuple(s), (a, obs, bad)))
        if st[F + 2]:
            for i in range(n):
                v2, fr = self._booted(i, self.faults[2] - st[F + 2] + 1)
                s = list(st)
                s[i] = v2
                if fr:
                    s[Q + i] = pushed(s[Q + i], fr)
                s[F + 2] -= 1
                last = self._lasts[st[L]]
                s[L] = self._last_id(last[:3] + (last[3][:i] + (-1,) + last[3][i + 1:],))
                out.append((("restart", i), tuple(s), (0, 0, 0)))
        return out

    # -- invariants of a state ------------------------------------------------
    def token_count(self, st):
        """Tokens in existence, live or not: held, or in flight."""
        n, Q = self.n, self._Q
        vinfo, qt = self._vinfo, self._qtokens
        return sum(1 for v in st[:Q] if vinfo[v][1]) + sum(qt[q] for q in st[Q:Q + n])

    def _live_in_link(self, j, vid, qid):
        """(live tokens, live tokens judged by j's state now) among the frames of a
        link into node j (attribute tuple id vid)."""
        key = (j, vid, qid)
        r = self._live_memo.get(key)
        if r is not None:
            return r
        call = self._call
        live = live_now = 0
        v = vid
        for f in self._queues[qid]:
            x = call(j, v, f)
            if self._is_token[f]:
                if not x[2] & DISCARDED:
                    live += 1
                if not call(j, vid, f)[2] & DISCARDED:
                    live_now += 1
            v = x[0]
        r = self._live_memo[key] = (live, live_now)
        return r

    def tokens(self, st):
        """(tokens in existence, live tokens, live tokens judged by the destination's
        state now) -- see the comment above for the definition of live."""
        n, Q = self.n, self._Q
        vinfo = self._vinfo
        total = live = 0
        for k in range(n):
            x = vinfo[st[k]]
            if x[1]:
                total += 1
                if x[2]:
                    live += 1
        live_now = live
        for i in range(n):
            qid = st[Q + i]
            c = self._qtokens[qid]
            if not c:
                continue
            total += c
            j = i + 1 if i + 1 < n else 0
            a, b = self._live_in_link(j, st[j], qid)
            live += a
            live_now += b
        return total, live, live_now

    def formed(self, st):
        if any(self._vinfo[v][3] for v in st[:self.n]):
            return False
        total, live, _ = self.tokens(st)
        return total == 1 and live == 1

    # -- the graph -----------------------------------------------------------
    def build(self, stop_on_violation=False, keep_edges=False):
        """Breadth-first over every reachable state. stop_on_violation: True (any
        invariant) or the invariant keys to stop at, after the state whose
        successors showed the first one. keep_edges: also keep the graph
        (successor ids), for can_form()."""
        t0 = time.perf_counter()
        init = self.initial()
        index = {init: 0}
        states = [init]
        parent = array("q", [-1])
        depth = array("l", [0])
        succ = array("l") if keep_edges else None
        start = array("q", [0]) if keep_edges else None
        formed = bytearray()
        self.first = {}  # invariant -> ("state", sid) or ("edge", sid, t)
        self.counts = {"two_in_cs": 0, "two_live": 0, "two_live_now": 0, "regenerations": 0, "discards": 0,
                       "stale": 0, "errors": 0, "entry_repeats": 0, "entry_pair_repeats": 0}
        self.max_tokens = 0
        self.max_live = 0
        self.transitions = 0
        self.budget_hit = False
        first = self.first
        counts = self.counts
        n = self.n
        vinfo = self._vinfo

        def check_state(sid, st):
            vs = [vinfo[v] for v in st[:n]]
            if sum(1 for v in vs if v[0]) > 1:
                counts["two_in_cs"] += 1
                first.setdefault("mutual_exclusion", ("state", sid))
            # tokens in existence first (cheap); which are live only when it matters
            total = self.token_count(st)
            if total > self.max_tokens:
                self.max_tokens = total
            joined = not any(v[3] for v in vs)
            live = 0
            if total > 1 or (total == 1 and (joined or not self.max_live)):
                _, live, live_now = self.tokens(st)
                if live > self.max_live:
                    self.max_live = live
                if live > 1:
                    counts["two_live"] += 1
                    first.setdefault("one_live_token", ("state", sid))
                if live_now > 1:
                    counts["two_live_now"] += 1
                    first.setdefault("one_live_token_now", ("state", sid))
            ok = total == 1 and live == 1 and joined
            formed.append(ok)
            if ok and "formed" not in first:
                first["formed"] = ("state", sid)

        check_state(0, init)
        k = 0
        max_states = self.max_states
        if stop_on_violation is True:
            safety_keys = [key for key, _ in _INVARIANTS]
        else:
            safety_keys = list(stop_on_violation or ())
        while k < len(states):
            st = states[k]
            for t, (label, s2, (a, obs, bad)) in enumerate(self.successors(st)):
                self.transitions += 1
                if a & (REGENERATED | DISCARDED) or obs or bad:
                    if a & REGENERATED:
                        counts["regenerations"] += 1
                    if a & DISCARDED:
                        counts["discards"] += 1
                    if obs & OBS_STALE:
                        counts["stale"] += 1
                    if obs & OBS_ERROR:
                        counts["errors"] += 1
                        first.setdefault("impossible_frame", ("edge", k, t))
                    if obs & OBS_BOTH:
                        first.setdefault("token_and_request", ("edge", k, t))
                    if bad & 1:
                        counts["entry_repeats"] += 1
                        first.setdefault("entry_numbers", ("edge", k, t))
                    if bad & 2:
                        counts["entry_pair_repeats"] += 1
                        first.setdefault("entry_epoch_numbers", ("edge", k, t))
                    if bad & 4:
                        first.setdefault("entry_numbers_completed", ("edge", k, t))
                    if bad & 8:
                        first.setdefault("entry_numbers_survivors", ("edge", k, t))
                sid = index.get(s2)
                if sid is None:
                    sid = len(states)
                    if sid >= max_states:
                        self.budget_hit = True
                        break
                    index[s2] = sid
                    states.append(s2)
                    parent.append((k << 12) | t)
                    depth.append(depth[k] + 1)
                    check_state(sid, s2)
                if keep_edges:
                    succ.append(sid)
            if self.budget_hit:
                break
            if keep_edges:
                start.append(len(succ))
            if stop_on_violation and any(key in first for key in safety_keys):
                break
            k += 1
        self.index = index
        self.states = states
        self.parent = parent
        self.depth = depth
        self.formed_states = formed
        self.succ = succ
        self.start = start
        self.complete = k >= len(states)
        self.build_time = time.perf_counter() - t0
        if self.budget_hit:
            raise StateBudgetExceeded(
                "state budget exhausted: more than %d reachable states for %s, n=%d, R=%d, faults %s "
                "(raise --max-states, or lower n, R or the fault budgets)"
                % (max_states, self.protocol, self.n, self.R, self.faults))
        return self

    def can_form(self):
        """For every reachable state, whether some continuation (within the budgets
        left) reaches a formed ring. Needs build(keep_edges=True), complete.
        Returns (bytearray: 1 = can still form, the shallowest state that cannot
        or None)."""
        if self.succ is None or not self.complete:
            raise RuntimeError("can_form needs a complete build(keep_edges=True)")
        N = len(self.states)
        succ, start = self.succ, self.start
        indeg = array("l", [0]) * (N + 1)
        for w in succ:
            indeg[w + 1] += 1
        for v in range(N):
            indeg[v + 1] += indeg[v]
        pos = array("l", indeg)
        pred = array("l", [0]) * len(succ)
        for v in range(N):
            for k in range(start[v], start[v + 1]):
                w = succ[k]
                pred[pos[w]] = v
                pos[w] += 1
        ok = bytearray(self.formed_states)
        work = [v for v in range(N) if ok[v]]
        while work:
            w = work.pop()
            for k in range(indeg[w], indeg[w + 1]):
                v = pred[k]
                if not ok[v]:
                    ok[v] = 1
                    work.append(v)
        bad = None
        for v in range(N):  # states are in breadth-first order: the first is the shallowest
            if not ok[v]:
                bad = v
                break
        return ok, bad

    # -- schedules -----------------------------------------------------------
    def label_of(self, sid, t):
        """The label of transition t of state sid, frames as tuples."""
        lb = self.successors(self.states[sid])[t][0]
        if lb[0] in ("deliver", "drop"):
            lb = (lb[0], lb[1], self._fr[lb[2]]) + lb[3:]
        return lb

    def path_to(self, sid):
        return [self.label_of(u, t) for u, t in _walk_back(self.parent, sid, 12)]

    def schedule_of(self, where):
        """Labels of the shortest schedule to a recorded violation."""
        if where[0] == "state":
            return self.path_to(where[1])
        _, sid, t = where
        return self.path_to(sid) + [self.label_of(sid, t)]

    def fmt(self, labels):
        return [fmt_lossy_label(lb, self.n) for lb in labels]


def fmt_lossy_label(lb, n):
    kind = lb[0]
    if kind in ("deliver", "drop"):
        s = frame_text(lb[2], lb[1], n)
        if len(lb) > 3:
            w = s.split(" ", 2)
            s = " ".join([w[0], w[1], "@%d" % lb[3]] + w[2:])
        return "%s %s" % (kind, s)
    return "%s %d" % (kind, lb[1])


_INVARIANTS = (
    ("mutual_exclusion", "at most one node in its critical section"),
    ("entry_numbers", "entry numbers strictly increasing (node.seq at each ENTER_CS)"),
    ("one_live_token", "at most one live token"),
)
# reported with their shortest schedules, not failures: weaker readings of the
# entry-number audit (they matter once restarts are allowed)
_DIAGNOSTICS = (
    ("entry_epoch_numbers", "(epoch, entry number) strictly increasing, lexicographic"),
    ("entry_numbers_completed", "entry numbers above every critical section that ended by exit_cs "
                                "(a section cut by its board's restart is excused)"),
    ("entry_numbers_survivors", "entry numbers above every number entered by a board that has not "
                                "restarted since (a restart voids the board's own entry numbers)"),
)


def explore_faults(protocol, n, requests_per_node=1, drops=0, timeouts=0, restarts=0, boot=False,
                   max_states=2_000_000, exact=False, drop_anywhere=False, stop_on_violation=False,
                   can_form=False):
    """Lossy mode: every reachable state under the fault budgets; safety only.
    can_form: also decide, for every reachable state, whether a formed ring is
    still reachable from it (keeps the graph: more memory).
    Returns a JSON-able report dict (see the comment above LossyExplorer)."""
    t0 = time.perf_counter()
    ex = LossyExplorer(protocol, n, requests_per_node, drops, timeouts, restarts, boot=boot,
                       max_states=max_states, exact=exact, drop_anywhere=drop_anywhere)
    rep = {
        "protocol": ex.protocol,
        "n": n,
        "requests_per_node": requests_per_node,
        "faults": {"drops": drops, "timeouts": timeouts, "restarts": restarts},
        "start": "boot" if boot else "token",
        "model": ("asynchronous, FIFO links, bounded faults (frame lost, timeout at any moment, restart); "
                  + ("every node boots, its join in flight; node 0 is the starter" if boot
                     else "the token at rest at node 0 (give_token)")),
        "abstraction": "full attributes" if exact else
        "observer counters and claim outputs dropped, dead count/state/epoch of non-holders zeroed",
        "drops": "any frame" if drop_anywhere else "head of a link (equivalent)",
    }
    try:
        ex.build(stop_on_violation=stop_on_violation, keep_edges=can_form)
    except StateBudgetExceeded as e:
        # what was found so far is still reported (each schedule is real; "ok"
        # only means "not found among the states explored")
        rep["error"] = str(e)
        ex.complete = False
    first = ex.first
    rep["complete"] = ex.complete
    rep["budget_hit"] = ex.budget_hit
    rep["states"] = len(ex.states)
    rep["transitions"] = ex.transitions
    rep["max_depth"] = max(ex.depth)
    fails = []
    for key, what in _INVARIANTS:
        d = {"ok": key not in first, "what": what}
        if key in first:
            labels = ex.schedule_of(first[key])
            d["schedule"] = ex.fmt(labels)
            d["steps"] = len(labels)
            fails.append(key)
        rep[key] = d
    for key, what in _DIAGNOSTICS:
        d = {"ok": key not in first, "what": what}
        if key in first:
            labels = ex.schedule_of(first[key])
            d["schedule"] = ex.fmt(labels)
            d["steps"] = len(labels)
        rep[key] = d
    d = {"ok": "one_live_token_now" not in first, "states": ex.counts["two_live_now"]}
    if not d["ok"]:
        d["schedule"] = ex.fmt(ex.schedule_of(first["one_live_token_now"]))
    rep["live_tokens_now"] = d
    rep["max_tokens"] = ex.max_tokens
    rep["max_live_tokens"] = ex.max_live
    for key in ("impossible_frame", "token_and_request"):
        if key in first:
            rep[key] = {"schedule": ex.fmt(ex.schedule_of(first[key]))}
    if "formed" in first:
        labels = ex.schedule_of(first["formed"])
        rep["formed"] = {"reachable": True, "steps": len(labels), "schedule": ex.fmt(labels)}
    else:
        rep["formed"] = {"reachable": False}
    if can_form and ex.complete:
        ok, bad = ex.can_form()
        d = {"states_that_can": sum(ok), "states": len(ok), "all": bad is None}
        if bad is not None:
            d["schedule"] = ex.fmt(ex.path_to(bad))
        rep["formed"]["from_every_state"] = d
    rep["counts"] = dict(ex.counts)
    if ex.budget_hit:
        fails.append("incomplete")
    rep["failures"] = fails
    rep["ok"] = not fails
    rep["seconds"] = round(time.perf_counter() - t0, 3)
    return rep


def _parse_lossy_label(lb):
    """A label tuple, or its text, -> (kind, i, frame kind or None, position)."""
    if isinstance(lb, tuple):
        if lb[0] in ("deliver", "drop"):
            return lb[0], lb[1], _kind_name(lb[2]), (lb[3] if len(lb) > 3 else 0), lb[2]
        return lb[0], lb[1], None, 0, None
    w = lb.split()
    if w[0] in ("deliver", "drop"):
        pos = int(w[3][1:]) if len(w) > 3 and w[3].startswith("@") else 0
        return w[0], int(w[2].split("->")[0]), w[1], pos, None
    return w[0], int(w[1]), None, 0, None


def replay_faults(protocol, n, labels, boot=False):
    """Run a lossy-mode schedule (labels or their text) on fresh node objects with
    real FIFO queues, independently of the explorer's encoding, checking the
    invariants after every step. Returns {"violations": [(step, invariant)],
    "entries": [(step, node, seq)], "failed": [(step, node, why)] (requests lost
    by a restart), "in_flight" (frames), "tokens" (held or in flight, live or
    not), "holders", "nodes" (the node objects)}.
    A step whose frame does not match the text (kind, fields) raises ValueError."""
    import copy

    cls = PROTOCOLS[protocol] if isinstance(protocol, str) else protocol
    nodes = [cls(i, n) for i in range(n)]
    links = [deque() for _ in range(n)]

    def send(i, a):
        links[i].extend(_frames_of(nodes[i], a))

    if boot:
        for i in range(n):
            send(i, nodes[i].boot(starter=(i == 0)))
    else:
        send(0, nodes[0].give_token())
    violations = []
    entries = []
    failed = []
    restarts = 0  # so far: the incarnation number of the next restart
    last = -1
    last_pair = (-1, -1)
    last_done = -1
    mine = [-1] * n  # per board: the highest number it entered with since its last restart

    def live_tokens():
        live = 0
        for x in nodes:
            if x.has_token and not x.fresh:
                live += 1
        for i in range(n):
            if not any(f[0] == F_TOKEN for f in links[i]):
                continue
            y = copy.copy(nodes[(i + 1) % n])
            for f in links[i]:
                a = _deliver(y, f)
                if f[0] == F_TOKEN and not a & DISCARDED:
                    live += 1
        return live

    for step, lb in enumerate(labels, 1):
        kind, i, fkind, pos, ftuple = _parse_lossy_label(lb)
        a = 0
        j = i
        if kind in ("deliver", "drop"):
            if len(links[i]) <= pos:
                raise ValueError("step %d (%s): link %d has no frame there" % (step, lb, i))
            f = links[i][pos]
            if _kind_name(f) != fkind or (isinstance(lb, str) and fmt_lossy_label(
                    (kind, i, f) + ((pos,) if "@" in lb else ()), n) != lb) or (ftuple is not None and ftuple != f):
                raise ValueError("step %d: expected %s, the link holds %s" % (step, lb, frame_text(f, i, n)))
            del links[i][pos]
            if kind == "deliver":
                j = (i + 1) % n
                a = _deliver(nodes[j], f)
        elif kind == "exit":
            if not nodes[i].in_cs:
                raise ValueError("step %d: node %d is not in its critical section" % (step, i))
            last_done = max(last_done, nodes[i].seq)
            a = nodes[i].exit_cs()
        elif kind == "request":
            if nodes[i].busy():
                raise ValueError("step %d: node %d is busy" % (step, i))
            a = nodes[i].request()
        elif kind == "timeout":
            if not nodes[i].waiting():
                raise ValueError("step %d: node %d is not waiting" % (step, i))
            a = nodes[i].on_timeout()
        elif kind == "restart":
            x = nodes[i]
            if x.in_cs:
                failed.append((step, i, "restarted in its critical section"))
            elif x.pending:
                failed.append((step, i, "restarted with a pending request"))
            nodes[i] = cls(i, n)
            mine[i] = -1
            restarts += 1
            a = nodes[i].boot(starter=(i == 0), nonce=restarts)  # as LossyExplorer numbers them
        else:
            raise ValueError("step %d: unknown step %r" % (step, lb))
        send(j, a)
        if a & ENTER_CS:
            s = nodes[j].seq
            entries.append((step, j, s))
            if s <= last:
                violations.append((step, "entry_numbers"))
            pair = (nodes[j].epoch, s)
            if pair <= last_pair:
                violations.append((step, "entry_epoch_numbers"))
            if s <= last_done:
                violations.append((step, "entry_numbers_completed"))
            if s <= max(mine):
                violations.append((step, "entry_numbers_survivors"))
            mine[j] = s
            last = max(last, s)
            last_pair = max(last_pair, pair)
        if sum(1 for x in nodes if x.in_cs) > 1:
            violations.append((step, "mutual_exclusion"))
        if live_tokens() > 1:
            violations.append((step, "one_live_token"))
    return {"violations": violations, "entries": entries, "failed": failed,
            "in_flight": sum(len(q) for q in links),
            "tokens": sum(1 for x in nodes if x.has_token) + sum(1 for q in links for f in q if f[0] == F_TOKEN),
            "holders": [i for i, x in enumerate(nodes) if x.has_token],
            "nodes": nodes}


def format_faults_report(rep):
    f = rep["faults"]
    lines = ["explore %s  n=%d  R=%d per node  faults: drop<=%d timeout<=%d restart<=%d  start: %s"
             % (rep["protocol"], rep["n"], rep["requests_per_node"], f["drops"], f["timeouts"], f["restarts"],
                rep["start"])]
    lines.append("  model: " + rep["model"])
    lines.append("  abstraction: " + rep["abstraction"] + "; drops: " + rep["drops"])
    if rep.get("budget_hit"):
        lines.append("  INCOMPLETE: " + rep.get("error", "") + "; below, what the states explored show")
    lines.append("  states %d, transitions %d, longest shortest-schedule %d steps, %.2f s%s"
                 % (rep["states"], rep["transitions"], rep["max_depth"], rep["seconds"],
                    " (stopped at the first violation)" if not rep["complete"] and not rep.get("budget_hit") else ""))

    def sched(label, s, indent="      "):
        _schedule_lines(lines, label, s, indent)

    for key, what in _INVARIANTS:
        d = rep[key]
        lines.append("  %s: %s" % (what, "ok" if d["ok"] else "FAIL"))
        if not d["ok"]:
            sched("shortest schedule to a violation", d["schedule"])
    for key, what in _DIAGNOSTICS:
        d = rep[key]
        lines.append("  (diagnostic) %s: %s" % (what, "ok" if d["ok"] else "no"))
        if not d["ok"]:
            sched("shortest schedule to a repeat", d["schedule"])
    c = rep["counts"]
    d = rep["live_tokens_now"]
    lines.append("  (diagnostic) at most one live token judged by the destination's state now: %s"
                 % ("ok" if d["ok"] else "no: %d states" % d["states"]))
    lines.append("  tokens in existence at once, live or not: at most %d (live: at most %d)"
                 % (rep["max_tokens"], rep["max_live_tokens"]))
    if "impossible_frame" in rep:
        lines.append("  a handler counted an error (a second token reached its holder):")
        sched("shortest schedule", rep["impossible_frame"]["schedule"])
    if "token_and_request" in rep:
        lines.append("  a handler returned SEND_TOKEN with SEND_REQUEST (node.py sends only the token):")
        sched("shortest schedule", rep["token_and_request"]["schedule"])
    fm = rep["formed"]
    if fm["reachable"]:
        lines.append("  a formed ring (no node fresh or starting, exactly one token, live) is reachable: "
                     "shortest schedule %d steps" % fm["steps"])
    else:
        lines.append("  a formed ring (no node fresh or starting, exactly one token, live) is NOT reachable")
    if "from_every_state" in fm:
        d = fm["from_every_state"]
        lines.append("  ... and still reachable (within the budgets left) from %d of %d states"
                     % (d["states_that_can"], d["states"]))
        if not d["all"]:
            sched("shortest schedule to a state from which it is not", d["schedule"])
    lines.append("  edges: %d regenerations, %d tokens discarded, %d stale-counter rests (Q), %d handler errors"
                 % (c["regenerations"], c["discards"], c["stale"], c["errors"]))
    lines.append("  liveness: not checked (the budgets run out)")
    lines.append("  verdict: %s" % ("ok" if rep["ok"] else "FAIL: " + ", ".join(rep["failures"])))
    return "\n".join(lines)


# -- the command -----------------------------------------------------------------

def argparse_explore(sub):
    p = sub.add_parser("explore", help="every reachable state of a small ring: safety, liveness, exact worst cases")
    p.add_argument("--protocol", "-p", choices=tuple(PROTOCOLS), default="d")
    p.add_argument("-n", type=int, default=3, help="ring size (default 3)")
    p.add_argument("--requests-per-node", "-R", type=int, default=1,
                   help="at most this many requests per node (default 1)")
    p.add_argument("--max-states", type=int, default=2_000_000,
                   help="stop with a message beyond this many states (default 2,000,000)")
    p.add_argument("--exact", action="store_true",
                   help="keep every node attribute (seq, epoch, dead counters): slower, same results")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    p.add_argument("--faults", metavar="SPEC", default=None,
                   help="lossy mode: the recovery's SAFETY under bounded faults (liveness is not checked). "
                        "SPEC: drop=D,timeout=T,restart=B, any subset, missing ones 0 (e.g. drop=1,timeout=2): "
                        "at most D frames lost, T timeouts (at any moment, at a node whose waiting() is true), "
                        "B board restarts in the whole execution. Checks mutual exclusion, strictly increasing "
                        "entry numbers and at most one live token, each with a shortest schedule. The states grow "
                        "fast: drop=1,timeout=2 at -n 3 -R 1 is about 1e5 states (seconds); n=4 or bigger budgets "
                        "reach millions (minutes, GBs)")
    p.add_argument("--boot", action="store_true",
                   help="(with --faults) start from every node booting, boot(starter=(i == 0)), its join in flight, "
                        "instead of the token at rest at node 0")
    p.add_argument("--drop-anywhere", action="store_true",
                   help="(with --faults) let a drop take any frame in flight, not only the next one to arrive "
                        "(equivalent, slower; for cross-checking)")
    p.add_argument("--stop-at-first", nargs="?", const="all", default=None, metavar="KEYS",
                   help="(with --faults) stop at the first safety violation (its schedule is still a shortest "
                        "one); KEYS: only at these, comma-separated from mutual_exclusion, entry_numbers, "
                        "one_live_token (entry_numbers fails whenever restarts are allowed)")
    p.add_argument("--can-form", action="store_true",
                   help="(with --faults) also decide for every reached state whether a formed ring (all joined, "
                        "one live token) is still reachable from it within the budgets left (keeps the graph)")


def do_explore(args):
    import json
    import sys

    if args.n < 2:
        raise ValueError("-n must be at least 2")
    if args.requests_per_node < 0:
        raise ValueError("--requests-per-node cannot be negative")
    if args.faults is not None:
        budgets = parse_faults(args.faults)
        stop = False
        if args.stop_at_first == "all":
            stop = True
        elif args.stop_at_first:
            stop = [k.strip() for k in args.stop_at_first.split(",") if k.strip()]
            known = [k for k, _ in _INVARIANTS]
            for k in stop:
                if k not in known:
                    raise ValueError("--stop-at-first: unknown invariant %r (known: %s)" % (k, ", ".join(known)))
        rep = explore_faults(args.protocol, args.n, args.requests_per_node, boot=args.boot,
                             max_states=args.max_states, exact=args.exact, drop_anywhere=args.drop_anywhere,
                             stop_on_violation=stop, can_form=args.can_form, **budgets)
        fmt = format_faults_report
    else:
        if args.boot or args.drop_anywhere or args.stop_at_first or args.can_form:
            raise ValueError("--boot, --drop-anywhere, --stop-at-first and --can-form need --faults")
        rep = explore(args.protocol, args.n, args.requests_per_node, max_states=args.max_states, exact=args.exact)
        fmt = format_report
    if args.json:
        json.dump(rep, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(fmt(rep))
    if args.faults is not None:
        # 1: a violation (found, even in an incomplete search); 2: incomplete, none found
        if any(f != "incomplete" for f in rep["failures"]):
            return 1
        return 0 if rep.get("complete") else 2
    if not rep.get("complete"):
        return 2
    return 0 if rep["ok"] else 1
