"""The fault-free state graph's analysis (model.Explorer inherits it): the edge encoding, the
schedules that reach a state (in the ring's own numbering, rotations undone), the strongly
connected components, and the exact worst cases by longest paths over them (model.py's
docstring describes the measures)."""

from array import array
from bisect import bisect_right
from collections import deque

from .states import P_PENDING

# edge encoding (one int per edge in a flat array)
_HOPS = 0x7  # bits 0-2: hop frames sent
_DELIV_SHIFT = 3
_DELIV = 1 << _DELIV_SHIFT  # bit 3: a frame was delivered
_LOG_SHIFT = 4  # bits 4-5: logical messages sent
_ENT_SHIFT = 6  # bits 6-11: node that entered its critical section + 1
_REQ_SHIFT = 12  # bits 12-17: node that made a request + 1
_T_SHIFT = 18  # bits 18-25: transition index within the state
_FWD_SHIFT = 26  # bits 26-31: node whose search message (Lemma 6) another node sent on + 1
_ROT_SHIFT = 32  # bits 32-37: the rotation that made the successor its class's representative
_ROT = 0x3F
_SUCC_SHIFT = 38
# the weights a measure reads from an edge: (shift, mask)
HOP_FRAMES = (0, _HOPS)
LOGICAL = (_LOG_SHIFT, 0x3)
DELIVERED = (_DELIV_SHIFT, 1)
ENTERED = (_ENT_SHIFT, 0x3F)  # 1 for an edge on which a node entered its critical section
FORWARDS = (_FWD_SHIFT, 0x3F)  # 1 for an edge on which another node sent the pending node's search on

INF = 1 << 60


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


class StateGraph:
    """The analysis of a built state graph: states, parent, depth, start and edges (one int
    per edge, the encoding above), rotations and init_shift, and successors(state) for the
    labels of schedules (model.Explorer provides them)."""

    # -- schedules -----------------------------------------------------------
    def label_of(self, sid, t):
        """Transition t of state sid, in sid's own numbering (with rotations: its representative's)."""
        return self.successors(self.states[sid])[t][0]

    def _shift(self, sid, t):
        return (self._edge(sid, t) >> _ROT_SHIFT) & _ROT if self.rotations else 0

    def real_labels(self, steps, o=None):
        """(labels, offset): the labels of steps [(state, t)] as the ring's own schedule from the
        initial state, and the offset after the last step (the ring's node of a representative's
        node j is j + offset). o: the offset before steps[0] (default: the initial state's)."""
        if o is None:
            o = self.init_shift
        n = self.n
        out = []
        for u, t in steps:
            lb = self.label_of(u, t)
            if o:
                lb = (lb[0], (lb[1] + o) % n) + lb[2:]
            out.append(lb)
            if self.rotations:
                o = (o + self._shift(u, t)) % n
        return out, o

    def offset_of(self, sid):
        """The offset (real_labels) of sid reached by its shortest schedule."""
        o = self.init_shift
        for u, t in _walk_back(self.parent, sid, 8):
            o = (o + self._shift(u, t)) % self.n
        return o

    def _path(self, pred, sid):
        """Transition labels from the initial state to sid, following pred (state -> (prev << 8) | t)."""
        return self.real_labels(_walk_back(pred, sid, 8))[0]

    def path_to(self, sid):
        """Shortest schedule from the initial state to sid."""
        return self._path(self.parent, sid)

    def _edges_of(self, v):
        e = self.edges
        for k in range(self.start[v], self.start[v + 1]):
            yield e[k]

    # -- what the rotation classes stand for ---------------------------------------
    def full_states(self):
        """With rotations: the number of states of the full graph (the ring's states reachable
        from its initial state, as Explorer(rotations=False) finds them), from the classes: a
        class stands for its representative rotated by every offset at which some schedule
        reaches it. The offsets (a bit mask per class) are propagated along the edges, each
        edge adding its rotation, in topological order (sccs), again within a cycle's states
        until nothing changes. A class whose representative is
        fixed by a rotation (never with exactly one token) counts its distinct rotations."""
        N, n = len(self.states), self.n
        if not self.rotations:
            return N
        full = (1 << n) - 1
        if getattr(self, "topo", None) is None:
            self.sccs()
        edges, start, cyclic = self.edges, self.start, self.cyclic
        offs = array("Q", [0]) * N
        offs[0] = 1 << self.init_shift
        again = []

        def spread(v, forward):
            m = offs[v]
            for k in range(start[v], start[v + 1]):
                e = edges[k]
                w = e >> _SUCC_SHIFT
                r = (e >> _ROT_SHIFT) & _ROT
                m2 = m if not r else ((m << r) | (m >> (n - r))) & full  # offset o -> o + r
                old = offs[w]
                if m2 | old != old:
                    offs[w] = old | m2
                    if not forward or cyclic[w]:  # (else w comes after v in topological order)
                        again.append(w)

        for v in self.topo:
            spread(v, True)
        while again:
            spread(again.pop(), False)
        total = sum(m.bit_count() for m in offs)
        for v in self.irregular:  # (a planted bug's second token: a rotation may fix the state)
            st = self.states[v]
            distinct = {tuple(x[n - o:] + x[:n - o] for x in st) for o in range(n) if offs[v] >> o & 1}
            total += len(distinct) - offs[v].bit_count()
        return total

    # -- cycles ----------------------------------------------------------------
    def sccs(self):
        """Iterative Tarjan. Sets self.topo (states in topological order of their
        components) and self.cyclic (bytearray: state lies on a cycle)."""
        N = len(self.states)
        start, edges = self.start, self.edges
        idx = array("i", [-1]) * N  # (4 bytes: fewer than 2**31 states)
        low = array("i", [0]) * N
        onst = bytearray(N)
        cyclic = bytearray(N)
        stack = []
        rev_topo = array("i")
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
        """Shortest cycle through root (breadth-first within cyclic states): labels, in the
        numbering of root's shortest schedule (with rotations, a cycle of representatives
        may end at a rotation of root's state: it is repeated until it is a cycle of the ring)."""
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
                    o = self.offset_of(root)
                    labels, end = self.real_labels(steps, o)
                    while end != o:  # back at a rotation of root's state: go round again
                        more, end = self.real_labels(steps, end)
                        labels += more
                    return labels
                if self.cyclic[w] and w not in prev:
                    prev[w] = (v, t)
                    dq.append(w)
        return []

    # -- worst cases -------------------------------------------------------------
    def longest(self, weight=HOP_FRAMES):
        """(M, pred): M[v] the most of an edge weight (HOP_FRAMES or LOGICAL) on a run
        from the initial state to v (INF if v is on or after a cycle); pred the
        longest-path predecessors, for path_longest."""
        N = len(self.states)
        M = array("q", [-1]) * N
        pred = array("q", [-1]) * N
        M[0] = 0
        edges, start, cyclic = self.edges, self.start, self.cyclic
        shift, mask = weight
        for v in self.topo:
            m = M[v]
            if cyclic[v]:
                m = M[v] = INF
            for k in range(start[v], start[v + 1]):
                e = edges[k]
                w = e >> _SUCC_SHIFT
                c = INF if m >= INF else m + ((e >> shift) & mask)
                if c > M[w]:
                    M[w] = c
                    pred[w] = (v << 8) | ((e >> _T_SHIFT) & 0xFF)
        return M, pred

    def _pending_of(self, v):
        return [i for i, x in enumerate(self.states[v][0]) if x[P_PENDING]]

    def pending_at(self, v):
        """The pending nodes of state v, numbered as on v's shortest schedule."""
        o = self.offset_of(v)
        return sorted((i + o) % self.n for i in self._pending_of(v))

    def service_traffic(self, a=HOP_FRAMES, b=DELIVERED):
        """Exact worst service traffic in two readings, each an edge weight: by default
        (a) hop frames sent and (b) frames delivered (LOGICAL: logical messages sent).

        A forward longest-path DP in topological order over the product
        (state, pending node): L[p][v] is the most traffic since p's current
        request over all runs reaching v. Returns {reading: (value or INF,
        witness)}, the witness (node, index of its request in the schedule,
        schedule)."""
        N = len(self.states)
        n = self.n
        edges, start, cyclic = self.edges, self.start, self.cyclic
        sha, ma = a
        shb, mb = b
        # (4-byte numbers where they fit: these 4n arrays are most of the analysis' memory)
        La = [array("i", [-1]) * N for _ in range(n)]
        Lb = [array("i", [-1]) * N for _ in range(n)]
        # predecessors: the edge's index k in edges; -2 - k marks p's request edge
        pc = "i" if len(edges) < (1 << 31) - 2 else "q"
        Pa = [array(pc, [-1]) * N for _ in range(n)]
        Pb = [array(pc, [-1]) * N for _ in range(n)]
        best = {"a": -1, "b": -1}
        best_w = {"a": None, "b": None}
        unbounded = False
        # pmask[v]: the nodes p with L[p][v] set (bit p), so that a state's pending nodes are
        # one read, not n; the lists of the masks met, made once each
        pmask = array("Q", [0]) * N
        lists = {0: []}
        ent_mode_a, fwd_mode = sha == _ENT_SHIFT, sha == _FWD_SHIFT
        ent_mode_b = shb == _ENT_SHIFT
        for v in self.topo:
            m = pmask[v]
            pend = lists.get(m)
            if pend is None:
                pend = lists[m] = [p for p in range(n) if m >> p & 1]
            if pend and cyclic[v]:
                unbounded = True
            cur = [(p, La[p][v], Lb[p][v]) for p in pend]
            for k in range(start[v], start[v + 1]):
                e = edges[k]
                w = e >> _SUCC_SHIFT
                # node p of v is node p - rot of w (rot: the rotation to w's representative)
                rot = (e >> _ROT_SHIFT) & _ROT
                wa = (e >> sha) & ma
                wb = (e >> shb) & mb
                ent = ((e >> _ENT_SHIFT) & 0x3F) - 1
                fwd = -1
                if ent_mode_a:
                    wa = 1 if wa else 0  # ENTERED: entries, not the node's number
                elif fwd_mode:
                    fwd, wa = wa - 1, 0  # FORWARDS: counted for the node whose search it is (below)
                if ent_mode_b:
                    wb = 1 if wb else 0
                req = ((e >> _REQ_SHIFT) & 0x3F) - 1
                if req >= 0:
                    if ent == req:
                        for r in ("a", "b"):
                            if best[r] < 0:
                                best[r], best_w[r] = 0, (req, (v << 8) | ((e >> _T_SHIFT) & 0xFF))
                    else:
                        q = req - rot if req >= rot else req - rot + n
                        pmask[w] |= 1 << q
                        if wa > La[q][w]:
                            La[q][w] = wa
                            Pa[q][w] = -2 - k
                        if wb > Lb[q][w]:
                            Lb[q][w] = wb
                            Pb[q][w] = -2 - k
                for p, la, lb in cur:
                    ca = la + (wa if fwd < 0 else p == fwd)
                    cb = lb + wb
                    if ent == p:
                        if ca > best["a"]:
                            best["a"], best_w["a"] = ca, (p, (v << 8) | ((e >> _T_SHIFT) & 0xFF))
                        if cb > best["b"]:
                            best["b"], best_w["b"] = cb, (p, (v << 8) | ((e >> _T_SHIFT) & 0xFF))
                    else:
                        q = p - rot if p >= rot else p - rot + n
                        Lq = La[q]
                        if ca > Lq[w]:
                            if Lq[w] < 0:
                                pmask[w] |= 1 << q
                            Lq[w] = ca
                            Pa[q][w] = k
                        Lq = Lb[q]
                        if cb > Lq[w]:
                            Lq[w] = cb
                            Pb[q][w] = k
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
            q = p  # p in the numbering of the chain's states, walking back
            if ((self._edge(cur, ut & 0xFF) >> _REQ_SHIFT) & 0x3F) - 1 != p:
                while True:
                    k = P[q][cur]
                    last = k <= -2
                    if last:
                        k = -2 - k
                    e = edges[k]
                    cur = bisect_right(start, k) - 1  # the state whose edge k is
                    chain.append((cur << 8) | ((e >> _T_SHIFT) & 0xFF))
                    q = (q + ((e >> _ROT_SHIFT) & _ROT)) % n
                    if last:
                        break
            chain.reverse()
            prefix = _walk_back(self.parent, cur, 8)
            labels, o = self.real_labels(prefix + [(x >> 8, x & 0xFF) for x in chain])
            # the requester: p of the entering edge's state, whose offset is o before that edge
            o_last = (o - self._shift(ut >> 8, ut & 0xFF)) % n
            res[r] = (best[r], ((p + o_last) % n, len(prefix), labels))
        return res

    def _edge(self, v, t):
        for e in self._edges_of(v):
            if (e >> _T_SHIFT) & 0xFF == t:
                return e
        raise KeyError((v, t))

    def path_longest(self, pred, sid):
        """The schedule to sid along the longest-path predecessors pred (of longest)."""
        return self._path(pred, sid)

    def requests_made(self, sid):
        return sum(self.R - b for b in self.states[sid][2])
