"""The explorer's lossy mode, its state graph: LossyExplorer (described below) and the
fault budgets' parser. lossy.py runs the search over it (explore_faults, replay_faults)."""

import time
from array import array

from ..firmware.protocol import (DISCARDED, ENTER_CS, REGENERATED, SEND_AGAIN, SEND_CLAIM, SEND_REQUEST,
                                 SEND_TOKEN, sends)
from .graph import _walk_back
from .model import StateBudgetExceeded, _check_size, _protocol_class, has_messages

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
# Not covered: messages of the layer (SEND_MSG: routed and broadcast frames). A
# protocol that declares them (message_sizes) is refused with a ValueError; its
# recovery (a lost token message, an again frame the holder answers with a message)
# would need message frames to be dropped and judged live here.

F_TOKEN, F_REQUEST, F_AGAIN, F_CLAIM = 0, 1, 2, 3
FRAME_REQUEST = (F_REQUEST,)

LOSSY_FIELDS = ("pending", "in_cs", "has_token", "count", "state", "seq", "epoch", "flag",
                "known_epoch", "known_owner", "fresh", "starting", "nonce",
                "open_epoch")  # (derived from three before it: protocol.Node.sync_gate; no extra states)
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
    """The frames a handler's action bits send, in the node loop's order (protocol.ACTIONS)."""
    out = []
    for b in sends(a):
        if b == SEND_TOKEN:
            out.append((F_TOKEN, node.count, node.state, node.seq, node.epoch))
        elif b == SEND_REQUEST:
            out.append(FRAME_REQUEST)
        elif b == SEND_AGAIN:
            out.append((F_AGAIN, node.again_origin))
        else:  # SEND_CLAIM (_call refuses SEND_MSG: the lossy mode covers no messages)
            out.append((F_CLAIM, node.claim_epoch, node.claim_origin, node.claim_join, node.claim_seq,
                        node.claim_nonce))
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
        if has_messages(self.cls, n):
            raise ValueError(
                "explore --faults does not cover protocol %s: it sends messages of the layer (message_sizes), and "
                "the lossy mode models only token, request, again and claim frames (S, Q and D); explore it "
                "without --faults (fault-free: safety, liveness, worst cases)" % self.protocol)
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
    def build(self, stop_on_violation=False, keep_edges=False, progress=None):
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

        qtokens = self._qtokens
        # what the nodes' attributes alone say, per combination of them (far fewer than the
        # states): (two or more in the critical section, tokens held, every node joined)
        by_nodes = {}

        def check_state(sid, st):
            nodes = st[:n]
            seen = by_nodes.get(nodes)
            if seen is None:
                vs = [vinfo[v] for v in nodes]
                seen = by_nodes[nodes] = (sum(1 for v in vs if v[0]) > 1, sum(1 for v in vs if v[1]),
                                          not any(v[3] for v in vs))
            two_in_cs, held, joined = seen
            if two_in_cs:
                counts["two_in_cs"] += 1
                first.setdefault("mutual_exclusion", ("state", sid))
            # tokens in existence first (cheap: as token_count); which are live only when it matters
            total = held
            for q in st[n:n + n]:
                total += qtokens[q]
            if total > self.max_tokens:
                self.max_tokens = total
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
        firsts_looked_at = -1
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
            if stop_on_violation and len(first) != firsts_looked_at:  # (first only grows)
                firsts_looked_at = len(first)
                if any(key in first for key in safety_keys):
                    break
            k += 1
            if progress is not None and not k & 4095:
                progress(k, len(states))  # expanded, found (every 4096)
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
