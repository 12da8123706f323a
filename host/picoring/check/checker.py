"""Hold a run against the paper's proven bounds, safety and liveness.

One Checker consumes a stream of ring events, from a trace file, from the
simulator (which hands over its message counters in bulk between events, so it
need not build an event per hop) or, later, from the board harness.

Measures (section 1 of the paper):
  messages            one frame over one link (a hop frame): token and request frames, and
                      every hop of a protocol-layer message (docs/frames.md)
  logical messages    the textbook's count: a token or request frame (one hop each), or one
                      message however many hops it takes (a send with fwd false); for S, Q
                      and D the two counts are equal
  messages/request    total messages / requests (and logical messages / requests)
  service traffic     messages anywhere in the ring from the moment a request is
                      made (its request message, if any, included) to the moment
                      the requester receives the token
Bounds checked (docs/bounds.md has the counterexamples and the arguments):
  Q  total <= n * requests              (Thm 3.1, holds)
     service traffic <= (5n^2 - 5n + 2)/2 (corrected; the paper prints
                                         3/2 n^2 - 5/2 n + 1, exceeded at n = 2..5;
                                         worst found by exhaustive search: (2n-1)(n-1))
  D  total <= 3n * requests             (empirical, not proven: the paper prints
                                         2n, exceeded by the corrected D at n = 5)
     service traffic <= 3n - 2          (corrected; the paper prints 3n - 3,
                                         exceeded at n = 3)
  S  unbounded (Thm 2.1): reported, not checked
The paper's printed bounds are reported next to the checked ones, with the
number of requests that exceeded them.

Soft mutual exclusion (a descriptor's "exclusion": "soft", the wandering token, or "none",
its random-access benchmark): two nodes in their critical sections at once are not a
violation. The checker measures instead, as Ciuffoletti's paper does, the time spent with k
operations running (k = 0, 1, 2, ...; the fraction with k >= 2), the intervals between two
successive operations of one node, and the time spent with k tokens alive (from the
regenerated and discarded tokens, the losses a simulator injects and those a ring trace's
"lost" events show), and the stabilisation after a token loss (check/soft.py). Entry numbers
are not checked there (several tokens count entries independently).

On a lossy ring (docs/recovery.md) the bounds are the fault-free ones and do
not apply once recovery has acted (a timeout, a discarded or regenerated
token, a failed request): from then on they are reported, not checked. What
is checked still: mutual exclusion, that entries carry strictly increasing
token sequence numbers (an audit that does not trust the protocol: a
duplicated token shows as a repeated number), and that every request is
served or reported failed with a reason. Claim and re-announced request
frames are recovery traffic, counted apart from the paper's messages.
"""

from array import array
from bisect import bisect_right

from . import registry, soft
from .quantile import nearest_rank


def paper_bounds_for(protocol, n):
    """(messages per request, service traffic) as printed in the paper, or None: from the
    protocol's descriptor (firmware, `about["bounds"]`)."""
    return (registry.bound(protocol, "messages_per_request", n, "paper"),
            registry.bound(protocol, "service_traffic", n, "paper"))


def bounds_for(protocol, n):
    """(messages per request, service traffic) the checker holds a run to: the descriptor's
    checked bounds, in hop frames (for S, Q and D every message is one hop)."""
    return (registry.bound(protocol, "messages_per_request", n),
            registry.bound(protocol, "service_traffic", n))


SEQ_PERIOD = 1 << 30  # boards' entry numbers wrap here (firmware/protocol.py SEQ_MASK + 1)
# A trace's time units per unit of a clocked protocol's clock (protocol.py's header: Time): the
# simulator's hop times are both; a board's clock counts milliseconds (firmware/node.py).
CLOCK_UNIT = {"hop": 1, "us": 1000}


class Checker:
    def __init__(self, protocol, n, max_violations=100, time_unit="hop"):
        self.protocol = protocol
        self.n = n
        self.bound_mpr, self.bound_service = bounds_for(protocol, n)
        self.paper_mpr, self.paper_service = paper_bounds_for(protocol, n)
        self.over_paper_service = 0  # requests whose service traffic exceeded the printed bound
        self.token_msgs = 0
        self.request_msgs = 0
        self.msg_frames = 0  # hop frames of protocol-layer messages (kind msg)
        self.msg_logical = 0  # of which new messages (fwd false): the logical count
        self.bound_logical = registry.bound(protocol, "logical_per_request", n)
        self.max_service_logical = 0
        self.recv_msgs = 0
        self.requests = 0
        self.served = 0
        self.in_cs = None  # node in its critical section
        self.pending = {}  # node -> (request id, t, hop frames, logical messages and entries at request)
        self.max_service = 0
        self.max_service_request = None
        self.latency_sum = 0
        self.latency_max = 0
        self.latencies = array("d")  # one per service, in service order (p50, p99)
        self.entries = 0  # critical-section entries so far
        self.max_overtaken = 0  # fairness: the most entries by other nodes while one request waited
        # ... and by any one other node (Englert et al., Thm 3: "no one node gets the token more
        # than log N times"): per pending request, its waiting time's entries per node
        self.max_overtaken_by_one = 0
        self._by_one = {}  # node waiting -> {other node: its entries since the request}
        # Responsiveness (Englert et al., Definition 3: "the maximum time period during which at
        # least one node requires the token and until the token is given to a ready node"): at
        # each entry, the time since a node has been waiting with nobody in the critical section.
        self.responsiveness = array("d")
        self._last_exit = None
        self.over_paper = {}  # a per-request paper bound of the descriptor -> requests over it
        self.paper_overtaken = registry.bound(protocol, "overtaken", n, "paper")
        self.paper_by_one = registry.bound(protocol, "overtaken_by_one", n, "paper")
        # A search for the token (BinarySearch's gimme, Lemma 6): how often each request's search
        # message was sent on by another node, read from its payload (the descriptor's
        # about["messages"]["request"]["search"]: the requester and its request's number as
        # expressions in w, the payload's first word, the trace's "seq").
        self._search = registry.search_of(registry.about(protocol)) if isinstance(protocol, str) else None
        self._forwards = {}  # requester -> [its request's number, forwards so far]
        self.max_forwards = 0
        self.bound_forwards = registry.bound(protocol, "forwards_per_request", n)
        self.paper_forwards = registry.bound(protocol, "forwards_per_request", n, "paper")
        self.over_bound_request = None  # first request after which the total went over
        self.safety_violations = 0
        self.violations = []
        self._max_violations = max_violations
        self.last_t = 0
        self.quiescent = None
        self.stop_reason = None
        self.ended = False  # an end record was read: the run that wrote the trace finished
        # recovery (lossy rings)
        self.recovery_msgs = {"claim": 0, "again": 0}
        self.regenerations = []  # dicts: see _regenerated
        self._token_seen_t = None  # the last sign of a token: a token sent, an entry, an exit, a new token
        self._waited = False  # a request was pending at that sign
        self._first_timeout_t = None  # the first recovery timeout since that sign
        self._fired = {}  # node -> the re-announce timeout (ms) that fired there last
        self.discarded = 0
        self.timeouts = 0
        self.failed = {}  # reason -> requests reported failed
        self.faults_at = None  # time of the first recovery action: bounds stop applying
        self.over_bound_after_faults = 0
        self.last_entry_seq = None
        self._seq_ref = None  # the last entry number seen, unwrapped (see _unwrap_seq)
        self._entry_max = {}  # node -> highest entry number it made since it last restarted
        self._suspect_seqs = []  # [t, node, seq, {boards whose restart would explain it}]
        self._suspect_overlaps = []  # (node that entered, node still in its CS, t)
        self.restarts = 0
        self.crashed_in_cs = 0  # critical sections ended by their board's restart
        self.entry_numbers_reused = 0  # after the board that held them restarted
        self.events_lost_at = []  # (t, node): the host lost node's events there (USB link down)
        # The shared resource's counter (--resource fram), audited from the first res event on
        # (check/audit.py FramAudit); None: the run had none.
        self.resource = None
        # soft mutual exclusion (module doc)
        self.exclusion = registry.about(protocol).get("exclusion", "hard")
        self.soft = self.exclusion != "hard"
        self.running = set()  # nodes in their critical sections (soft)
        self.concurrency_time = {}  # k -> time spent with k critical sections running
        self._k_since = None
        self.intervals = array("d")  # between two successive entries of one node (soft)
        self._last_entry = {}  # node -> its last entry time
        self.tokens_alive = 1  # soft: the first token, + regenerated - discarded - lost
        self.tokens_time = {}  # k -> time spent with k tokens alive
        self._tok_since = None
        self.tokens_lost = 0
        # The token count's history (k alive from t on), so that a token found lost later (a
        # ring trace's "lost" event, when the next frame on its wire showed the gap) counts from
        # its send, and the losses: what the stabilisation after a loss is measured from (soft.py)
        self._tok_t = array("d")
        self._tok_k = array("l")
        self._losses = array("d")
        # ... until a token has been alive for this long (trace units; None: not measured)
        settle = registry.settle_time(protocol, n) if isinstance(protocol, str) and self.soft else None
        self.settle = None if settle is None else settle * CLOCK_UNIT[time_unit]
        self._token_kinds = {k for k, role in registry.message_roles(registry.about(protocol)).items()
                             if role == "token"} if isinstance(protocol, str) else set()

    # -- counters ---------------------------------------------------------
    @property
    def total(self):
        """Hop frames: every frame on a wire (token, request, each hop of a message)."""
        return self.token_msgs + self.request_msgs + self.msg_frames

    @property
    def logical(self):
        """Logical messages: token and request frames, and each message once."""
        return self.token_msgs + self.request_msgs + self.msg_logical

    def count_to(self, token_msgs, request_msgs, msg_frames=0, msg_logical=0):
        """Set the cumulative frame counts (the simulator's bulk path)."""
        self.token_msgs = token_msgs
        self.request_msgs = request_msgs
        self.msg_frames = msg_frames
        self.msg_logical = msg_logical

    # -- events -----------------------------------------------------------
    def feed(self, event):
        """Consume one trace Event."""
        ev = event.ev
        if self.resource is not None:
            self.resource.feed(event)
        elif ev == "res":
            from .audit import FramAudit

            self.resource = FramAudit()
            self.resource.feed(event)
        if ev == "send":
            kind = event.kind
            if kind == "token":
                self._token_sign(event.t)
                self.token_msgs += 1
            elif kind == "request":
                self.request_msgs += 1
            elif kind == "msg":
                self.msg_frames += 1
                if not (event.payload or {}).get("fwd"):
                    self.msg_logical += 1
                    if self._search is not None:
                        p = event.payload or {}
                        self.message_sent(p.get("src"), p.get("mkind"), p.get("seq"))
            else:
                self.recovery_msgs[kind] = self.recovery_msgs.get(kind, 0) + 1
                if kind == "again":
                    self._faults(event.t)
        elif ev == "recv":
            if event.kind in ("token", "request", "msg"):
                self.recv_msgs += 1
        elif ev == "req":
            self.request(event.t, event.node)
        elif ev == "enter":
            self.enter(event.t, event.node, (event.payload or {}).get("seq"))
            self._token_sign(event.t)
        elif ev == "exit":
            self.exit(event.t, event.node)
            self._token_sign(event.t)
        elif ev == "regen":
            self._regenerated(event)
            self._token_sign(event.t)
            self._faults(event.t)
            if self.soft:
                self._tokens_to(event.t, self.tokens_alive + 1)
        elif ev == "discard":
            self.discarded += 1
            self._faults(event.t)
            if self.soft:
                # A node removes a token only where another is alive (one that precedes it met
                # there, or the current epoch's at the epoch gate): at least one stays. A removal
                # at 1 is of a token the count never saw (made before the ring formed).
                self._tokens_to(event.t, max(1, self.tokens_alive - 1))
        elif ev == "timeout":
            self.timeouts += 1
            extra = event.extra or {}
            if extra.get("why") == "again":
                self._fired[event.node] = extra.get("gen_ms")
            if self._first_timeout_t is None:
                self._first_timeout_t = event.t
            self._faults(event.t)
        elif ev == "fail":
            self.fail(event.t, event.node, (event.extra or {}).get("reason", "unknown"))
        elif ev == "lost":
            self.lost_frame(event)
        elif ev == "notice":
            what = (event.extra or {}).get("what")
            if what == "restarted":
                self.restarted(event.t, event.node)
            elif what == "events lost":
                self.events_lost(event.t, event.node)
        elif ev == "end":
            self.ended = True
            extra = event.extra or {}
            if extra.get("quiescent") is not None:  # null: not applicable (S never rests)
                self.quiescent = bool(extra["quiescent"])
            self.stop_reason = extra.get("reason", self.stop_reason)
            self.clock_rates(extra.get("clock_rates"))
        if event.t is not None:
            self.last_t = event.t

    __call__ = feed

    def request(self, t, node):
        self.requests += 1
        rid = self.requests
        if self.soft:
            self.start(t)
        if node in self.pending or self.in_cs == node:
            self._violate("workload", rid, node, t, "node %d requested again before its request was served" % node)
        self.pending[node] = (rid, t, self.total, self.logical, self.entries)
        self._by_one[node] = {}
        self._check_total(rid)

    @property
    def wants_messages(self):
        """The simulator calls message_sent for each new message (it feeds no Event per message)."""
        return self._search is not None

    def message_sent(self, src, mkind, first_word):
        """A new message (not a frame passed on; first_word: its payload's, the trace's "seq"):
        a search message of a pending request's, sent by its requester (the first: rule 5) or
        on by another node (a forward: rule 6)."""
        kind, requester, number_of = self._search
        if mkind != kind or not isinstance(first_word, int):
            return
        names = {"w": first_word}
        z = registry.evaluate(requester, self.n, names)
        number = registry.evaluate(number_of, self.n, names)
        f = self._forwards.get(z)
        if src == z:
            if z in self.pending and (f is None or f[0] != number):
                self._forwards[z] = [number, 0]
        elif f is not None and f[0] == number:
            f[1] += 1

    def _count_forwards(self, t, node, rid):
        """At node's entry: its request's forwards against the descriptor's bounds."""
        f = self._forwards.pop(node, None)
        if f is None:
            return
        self.max_forwards = max(self.max_forwards, f[1])
        if self.paper_forwards is not None and f[1] > self.paper_forwards:
            self.over_paper["forwards_per_request"] = self.over_paper.get("forwards_per_request", 0) + 1
        if self.bound_forwards is not None and f[1] > self.bound_forwards:
            self._violate("bound", rid, node, t, "request #%d (node %d): its search was forwarded %d times > bound %d"
                          % (rid, node, f[1], self.bound_forwards))

    def _token_sign(self, t):
        self._token_seen_t = t
        self._waited = bool(self.pending)
        self._first_timeout_t = None

    def _regenerated(self, event):
        """A new token: how long the ring had been without any sign of one (after),
        whether a request was waiting then (else the wait began only when somebody
        asked), the time from the first timeout since to the new token (repair), and
        the timeout that last fired at its origin (timeout_ms)."""
        t = event.t
        seen, first = self._token_seen_t, self._first_timeout_t
        self.regenerations.append({
            "t": t, "node": event.node, "epoch": (event.payload or {}).get("epoch"),
            "after": None if seen is None or t is None else t - seen, "waited": self._waited,
            "repair": None if first is None or t is None else t - first,
            "timeout_ms": self._fired.get(event.node),
        })

    def _faults(self, t):
        if self.faults_at is None:
            self.faults_at = t

    def fail(self, t, node, reason):
        """The request pending at node will never be served, for a reason the
        harness knows (the board restarted): reported, not a liveness violation."""
        self._faults(t)
        self._by_one.pop(node, None)
        self._forwards.pop(node, None)
        if self.pending.pop(node, None) is not None:
            self.failed[reason] = self.failed.get(reason, 0) + 1

    def _unwrap_seq(self, seq):
        """Boards keep entry numbers in 30 bits (firmware/protocol.py SEQ_MASK: no long
        ints on a Pico), so they wrap at 2**30. Placed within half a period of the last
        number seen, every later comparison here is on unwrapped numbers."""
        if self._seq_ref is None:
            self._seq_ref = seq
            return seq
        d = (seq - self._seq_ref) % SEQ_PERIOD
        if d >= SEQ_PERIOD // 2:
            d -= SEQ_PERIOD
        self._seq_ref += d
        return self._seq_ref

    # -- soft mutual exclusion (module doc) -------------------------------------

    def _concurrency_to(self, t, k):
        if self._k_since is not None and t is not None:
            k0 = len(self.running)
            self.concurrency_time[k0] = self.concurrency_time.get(k0, 0) + (t - self._k_since)
        self._k_since = t

    def _tokens_to(self, t, k):
        if self._tok_since is not None and t is not None:
            k0 = self.tokens_alive
            self.tokens_time[k0] = self.tokens_time.get(k0, 0) + (t - self._tok_since)
        self._tok_since = t
        self.tokens_alive = k
        if t is not None:
            self._tok_t.append(t)
            self._tok_k.append(k)

    def _carries_token(self, event):
        if event.kind == "token":
            return True
        return event.kind == "msg" and (event.payload or {}).get("mkind") in self._token_kinds

    def lost_frame(self, event):
        """A ring trace's "lost" event: a frame its receiver never got (a gap on its wire), at
        the gap's time, sent at extra["sent_t"]. A token lost so counts from when it was sent:
        the time since then moves down one token (soft measures)."""
        if not (self.soft and self._carries_token(event)):
            return
        sent_t = (event.extra or {}).get("sent_t", event.t)
        self.tokens_lost += 1
        self._losses.append(sent_t)
        if self._tok_since is None or sent_t >= self._tok_since:
            self._tokens_to(sent_t, self.tokens_alive - 1)  # nothing changed since it was sent
            return
        # The changes since sent_t were counted one token too high: move their time down.
        ts, ks = self._tok_t, self._tok_k
        first = bisect_right(ts, sent_t) - 1
        if first < 0:
            return  # sent before the run's start: not placed
        for i in range(first, len(ts)):
            b = ts[i + 1] if i + 1 < len(ts) else self._tok_since
            moved = b - max(ts[i], sent_t)
            k = ks[i]
            if moved > 0 and k > 0:
                self.tokens_time[k] = self.tokens_time.get(k, 0) - moved
                self.tokens_time[k - 1] = self.tokens_time.get(k - 1, 0) + moved
            if i > first:
                ks[i] = max(0, k - 1)
        ts.insert(first + 1, sent_t)
        ks.insert(first + 1, max(0, ks[first] - 1))
        self.tokens_alive = max(0, self.tokens_alive - 1)

    def clock_rates(self, rates):
        """The boards' clocks ran at these rates against the trace's time (emulated Picos on a busy
        machine; ring/runreport.py clock_rates_noted). The stabilisation after a loss waits for
        Delta_max of the boards' clocks: in the trace's time, that long over their mean rate."""
        if rates and self.settle is not None:
            self.settle = round(self.settle * len(rates) / sum(rates))

    def tokens(self, t, node, a):
        """The simulator's note that a handler regenerated or discarded a token (action bits)."""
        from ..firmware.protocol import DISCARDED, REGENERATED

        if a & REGENERATED:
            self.regenerations.append({"t": t, "node": node})
            self._tokens_to(t, self.tokens_alive + 1)
        if a & DISCARDED:
            self.discarded += 1
            self._tokens_to(t, self.tokens_alive - 1)

    def lost(self, t, node=None):
        """A token was lost on a wire (a simulator's injected loss)."""
        self.tokens_lost += 1
        self._losses.append(t)
        self._tokens_to(t, self.tokens_alive - 1)

    def start(self, t):
        """The run begins at t (the time the measures of soft exclusion count from)."""
        if self._k_since is None:
            self._k_since = t
        if self._tok_since is None:
            self._tok_since = t
            self._tok_t.append(t)
            self._tok_k.append(self.tokens_alive)

    def _enter_soft(self, t, node):
        self.start(t)
        self._concurrency_to(t, None)
        self.running.add(node)
        last = self._last_entry.get(node)
        if last is not None and t is not None:
            self.intervals.append(t - last)
        self._last_entry[node] = t
        self.entries += 1
        self._by_one.pop(node, None)
        req = self._take_request(t, node)
        if req is not None:
            self._measure_service(t, node, req)

    def _take_request(self, t, node):
        """The pending request that node's entry serves, or None: it had none (a violation)."""
        req = self.pending.pop(node, None)
        if req is None:
            self.safety_violations += 1
            self._violate("safety", None, node, t, "node %d entered the critical section with no pending request" % node)
            return None
        self.served += 1
        return req

    def _measure_service(self, t, node, req):
        """A served request's service traffic (returned) and latency, into the run's maxima."""
        rid, t_req, msgs_at_req, logical_at_req, _ = req
        service = self.total - msgs_at_req
        self.max_service_logical = max(self.max_service_logical, self.logical - logical_at_req)
        if service > self.max_service:
            self.max_service = service
            self.max_service_request = (rid, node, t_req)
        latency = t - t_req
        self.latency_sum += latency
        self.latencies.append(latency)
        if latency > self.latency_max:
            self.latency_max = latency
        return service

    def _exit_soft(self, t, node):
        if node not in self.running:
            self.safety_violations += 1
            self._violate("safety", None, node, t, "node %d left a critical section it was not in" % node)
            return
        self._concurrency_to(t, None)
        self.running.discard(node)
        self._last_exit = t

    def soft_report(self):
        """The measures of soft mutual exclusion so far (module doc)."""
        conc = dict(self.concurrency_time)
        if self._k_since is not None and self.last_t is not None and self.last_t > self._k_since:
            k = len(self.running)
            conc[k] = conc.get(k, 0) + (self.last_t - self._k_since)
        toks = dict(self.tokens_time)
        if self._tok_since is not None and self.last_t is not None and self.last_t > self._tok_since:
            toks[self.tokens_alive] = toks.get(self.tokens_alive, 0) + (self.last_t - self._tok_since)
        total = sum(conc.values())
        over = sum(v for k, v in conc.items() if k >= 2)
        iv = sorted(self.intervals)
        return {
            "exclusion": self.exclusion,
            "time": total,
            "time_with_k_running": {k: conc[k] for k in sorted(conc)},
            "over_one_fraction": (over / total) if total else 0.0,
            "max_running": max((k for k, v in conc.items() if v > 0), default=0),
            "intervals": {"count": len(iv), "mean": (sum(iv) / len(iv)) if iv else 0.0,
                          "p50": nearest_rank(iv, 0.5) if iv else None, "p99": nearest_rank(iv, 0.99) if iv else None,
                          "max": iv[-1] if iv else None},
            "time_with_k_tokens": {k: toks[k] for k in sorted(toks)},
            "tokens_lost": self.tokens_lost,
            **({"stabilisation": dict(soft.summary(soft.transients(
                self._tok_t, self._tok_k, self._losses, self.settle, self.last_t)), settle=self.settle)}
               if self.settle is not None else {}),
        }

    def enter(self, t, node, seq=None):
        if self.soft:
            self._enter_soft(t, node)
            return
        if self.in_cs is not None:
            if self.faults_at is not None:
                # On a lossy ring the board in its critical section may have died in it
                # (power cycle: its exit never comes). Judged when that is known: it
                # restarts (a crash, forgiven) or it exits (an overlap), or at the end.
                self._suspect_overlaps.append((node, self.in_cs, t))
            else:
                self.safety_violations += 1
                self._violate("safety", None, node, t, "node %d entered the critical section while node %d was in it"
                              % (node, self.in_cs))
        if seq is not None:
            seq = self._unwrap_seq(seq)
            # The token counts entries; a second live token repeats or reverses the count.
            if self.last_entry_seq is not None and seq <= self.last_entry_seq:
                # A board that dies holding the token takes the last entry number with it, and
                # the regenerated token repeats it (docs/recovery.md): forgiven if every board
                # that made a number >= seq restarts before entering again (the survivors rule).
                culprits = [y for y, m in self._entry_max.items() if m >= seq]
                if not culprits:
                    # Every board that made such a number has restarted already: the
                    # host saw the restart before the repeat.
                    self.entry_numbers_reused += 1
                elif self.faults_at is not None:
                    self._suspect_seqs.append([t, node, seq, set(culprits)])  # until they restart
                else:
                    self._entry_violation(t, node, seq, self.last_entry_seq)
            for suspect in self._suspect_seqs:
                if node in suspect[3]:  # it is alive: its number was not lost with it
                    suspect[3].clear()
                    self._entry_violation(suspect[0], suspect[1], suspect[2], None)
            self._suspect_seqs = [x for x in self._suspect_seqs if x[3]]
            self.last_entry_seq = seq if self.last_entry_seq is None else max(seq, self.last_entry_seq)
            if seq > self._entry_max.get(node, -1):
                self._entry_max[node] = seq
        if self.pending:
            start = min(p[1] for p in self.pending.values())
            if self._last_exit is not None and self._last_exit > start:
                start = self._last_exit
            if t is not None and start is not None:
                self.responsiveness.append(t - start)
        by_one = self._by_one.pop(node, None)
        for counts in self._by_one.values():
            counts[node] = counts.get(node, 0) + 1
        self.in_cs = node
        self.entries += 1
        req = self._take_request(t, node)
        if req is None:
            return
        rid, t_req, _, _, entries_at_req = req
        self._count_forwards(t, node, rid)
        overtaken = self.entries - 1 - entries_at_req
        self.max_overtaken = max(self.max_overtaken, overtaken)
        by_one = max(by_one.values()) if by_one else 0
        self.max_overtaken_by_one = max(self.max_overtaken_by_one, by_one)
        if self.paper_overtaken is not None and overtaken > self.paper_overtaken:
            self.over_paper["overtaken"] = self.over_paper.get("overtaken", 0) + 1
        if self.paper_by_one is not None and by_one > self.paper_by_one:
            self.over_paper["overtaken_by_one"] = self.over_paper.get("overtaken_by_one", 0) + 1
        service = self._measure_service(t, node, req)
        if self.paper_service is not None and service > self.paper_service:
            self.over_paper_service += 1
        if self.bound_service is not None and service > self.bound_service:
            self._violate(
                "bound", rid, node, t_req,
                "request #%d (node %d, t=%s): service traffic %d > bound %d" % (rid, node, t_req, service, self.bound_service),
            )

    def exit(self, t, node):
        if self.soft:
            self._exit_soft(t, node)
            self._check_total(self.requests)
            return
        if self.in_cs != node:
            overlapped = [x for x in self._suspect_overlaps if x[1] == node]
            if overlapped:
                # It was alive in its critical section when the other one entered.
                self._suspect_overlaps = [x for x in self._suspect_overlaps if x[1] != node]
                for x, y, tx in overlapped:
                    self.safety_violations += 1
                    self._violate("safety", None, x, tx, "node %d entered the critical section while node %d was in it"
                                  % (x, y))
                return
            self.safety_violations += 1
            self._violate("safety", None, node, t, "node %d left a critical section it was not in" % node)
        self.in_cs = None
        self._last_exit = t
        self._check_total(self.requests)

    def restarted(self, t, node):
        """The board at node restarted (power cycle, reset): a critical section it was in
        ended there, and the entry numbers it alone knew are gone (docs/recovery.md)."""
        self._faults(t)
        self.restarts += 1
        if self.in_cs == node:
            self.in_cs = None
            self.crashed_in_cs += 1
        forgiven = [x for x in self._suspect_overlaps if x[1] == node]
        if forgiven:
            self.crashed_in_cs += 1
            self._suspect_overlaps = [x for x in self._suspect_overlaps if x[1] != node]
        self._entry_max.pop(node, None)
        for suspect in self._suspect_seqs:
            suspect[3].discard(node)
            if not suspect[3]:
                self.entry_numbers_reused += 1
        self._suspect_seqs = [x for x in self._suspect_seqs if x[3]]

    def events_lost(self, t, node):
        """The host lost some of node's events (its USB link was down; the board ran on): a
        critical section it was in may have ended unseen. Only its own: what the others did
        is still checked against it."""
        self._faults(t)
        self.events_lost_at.append((t, node))
        if self.in_cs == node:
            self.in_cs = None
        self._suspect_overlaps = [x for x in self._suspect_overlaps if x[1] != node]

    def _entry_violation(self, t, node, seq, before):
        self.safety_violations += 1
        self._violate("safety", None, node, t, "node %d entered with token entry number %d%s: not strictly increasing "
                      "(two tokens?)" % (node, seq, "" if before is None else " after number %d" % before))

    def _check_total(self, rid):
        if self.bound_mpr is None or self.over_bound_request is not None:
            return
        if self.total > self.bound_mpr * self.requests and self.requests:
            self.over_bound_request = rid

    def _violate(self, kind, rid, node, t, message):
        if kind == "bound" and self.faults_at is not None:
            self.over_bound_after_faults += 1  # the fault-free bounds no longer apply
            return
        if len(self.violations) < self._max_violations:
            self.violations.append({"kind": kind, "request": rid, "node": node, "t": t, "message": message})

    # -- result -----------------------------------------------------------
    def finish(self, quiescent=None, reason=None):
        """Close the run: unserved requests and the total bound. Returns the report."""
        if quiescent is not None:
            self.quiescent = quiescent
        if reason is not None:
            self.stop_reason = reason
        for x, y, tx in self._suspect_overlaps:  # the board in its CS neither exited nor restarted
            self.safety_violations += 1
            self._violate("safety", None, x, tx, "node %d entered the critical section while node %d was in it "
                          "(and node %d never left it)" % (x, y, y))
        self._suspect_overlaps = []
        for t, node, seq, _ in self._suspect_seqs:
            self._entry_violation(t, node, seq, None)
        self._suspect_seqs = []
        for node, (rid, t_req, *_) in sorted(self.pending.items(), key=lambda kv: kv[1][0]):
            self._violate("liveness", rid, node, t_req, "request #%d (node %d, t=%s) was never served" % (rid, node, t_req))
        if self.bound_mpr is not None and self.requests and self.total > self.bound_mpr * self.requests:
            rid = self.over_bound_request or self.requests
            self._violate(
                "bound", rid, None, None,
                "%d messages for %d requests > %d per request (first over after request #%d)"
                % (self.total, self.requests, self.bound_mpr, rid),
            )
        if self.bound_logical is not None and self.requests and self.logical > self.bound_logical * self.requests:
            self._violate("bound", self.requests, None, None, "%d logical messages for %d requests > %d per request"
                          % (self.logical, self.requests, self.bound_logical))
        if self.quiescent is False:
            self._violate("quiescence", None, None, self.last_t, "the ring did not become quiescent: %s" % (self.stop_reason or "token still moving"))
        resource = None
        if self.resource is not None:
            resource, violations = self.resource.result(events_lost=bool(self.restarts or self.events_lost_at))
            if self.soft:  # overlaps are allowed: lost updates are measured (resource["lost_updates"])
                violations = [v for v in violations if v["kind"] != "safety"]
                resource["ok"] = not violations
            self.safety_violations += sum(1 for v in violations if v["kind"] == "safety")
            # first: the shared device's verdict does not rest on the boards' own reports
            self.violations[:0] = violations
            del self.violations[self._max_violations:]
        report = self.report()
        if resource is not None:
            report["resource"] = resource
        return report

    def quantiles(self):
        """{"p50", "p99"} of the latencies so far (nearest rank), None before any service."""
        if not self.latencies:
            return {"p50": None, "p99": None}
        s = sorted(self.latencies)
        q = {"p50": nearest_rank(s, 0.5), "p99": nearest_rank(s, 0.99)}
        return {k: int(v) if v == int(v) else v for k, v in q.items()}

    def report(self):
        served = self.served
        return {
            "protocol": self.protocol,
            "n": self.n,
            "requests": self.requests,
            "served": served,
            "messages": dict({"total": self.total, "token": self.token_msgs, "request": self.request_msgs},
                             **({"msg": self.msg_frames} if self.msg_frames else {})),  # msg: hop frames of messages
            "logical_messages": self.logical,  # the textbook's count (S, Q, D: = hop_frames)
            "hop_frames": self.total,  # every frame on a wire (= messages.total)
            "messages_per_request": (self.total / self.requests) if self.requests else 0.0,
            "logical_per_request": (self.logical / self.requests) if self.requests else 0.0,
            "max_service_traffic": self.max_service,
            "max_service_logical": self.max_service_logical,
            "max_service_request": (
                None if self.max_service_request is None
                else dict(zip(("request", "node", "t"), self.max_service_request))
            ),
            "latency": {"mean": (self.latency_sum / served) if served else 0.0, "max": self.latency_max},
            "latency_quantiles": self.quantiles(),
            "max_overtaken": self.max_overtaken,  # fairness: entries by others between a request and its service
            "max_overtaken_by_one": self.max_overtaken_by_one,  # ... by any one other node
            "responsiveness": {  # Englert et al., Definition 3 (in the run's time unit)
                "mean": (sum(self.responsiveness) / len(self.responsiveness)) if self.responsiveness else 0.0,
                "max": max(self.responsiveness) if self.responsiveness else 0},
            "over_paper_fairness": dict(self.over_paper),  # requests over the descriptor's fairness bounds
            # (and forwards_per_request: over Lemma 6's printed bound)
            "max_forwards_per_request": self.max_forwards if self._search is not None else None,
            "bounds": {"messages_per_request": self.bound_mpr, "service_traffic": self.bound_service,
                       "logical_per_request": self.bound_logical, "forwards_per_request": self.bound_forwards},
            "paper_bounds": {"messages_per_request": self.paper_mpr, "service_traffic": self.paper_service},
            "over_paper_service_bound": self.over_paper_service,
            "over_paper_total_bound": bool(self.paper_mpr is not None and self.total > self.paper_mpr * self.requests),
            "safety_violations": self.safety_violations,
            "failed": dict(self.failed),
            "recovery": {
                "faults_at": self.faults_at,
                "regenerations": len(self.regenerations),
                "regenerated": list(self.regenerations),
                "discarded_tokens": self.discarded,
                "timeouts": self.timeouts,
                "messages": dict(self.recovery_msgs),
                "over_bound_after_faults": self.over_bound_after_faults,
                "last_entry_seq": self.last_entry_seq,
                "restarts": self.restarts,
                "critical_sections_ended_by_a_restart": self.crashed_in_cs,
                "entry_numbers_reused_after_a_restart": self.entry_numbers_reused,
                "events_lost_at": list(self.events_lost_at),
            },
            "quiescent": self.quiescent,
            **({"soft": self.soft_report()} if self.soft else {}),
            "violations": list(self.violations),
            "ok": not self.violations,
        }


def finish_trace(checker):
    """The report of a checker that has read a whole trace file. A trace without an
    end record is incomplete, whatever it holds: the run was interrupted or the file
    cut short, so what it would have shown next is unknown and the verdict is not OK.
    (A checker fed while a run goes on has no end record yet: it calls finish.)"""
    report = checker.finish()
    report["frames_in_flight_at_end"] = checker.total - checker.recv_msgs
    report["complete"] = checker.ended
    if not checker.ended:
        report["violations"].insert(0, {
            "kind": "incomplete", "request": None, "node": None, "t": checker.last_t,
            "message": "the trace has no end record (read to t=%s): the run was interrupted or the file "
                       "was truncated" % checker.last_t})
        report["ok"] = False
    return report


def check_trace(path, progress=None):
    """Run the checker over a trace file. Returns (meta, report). progress: TraceReader's."""
    from .trace import TraceReader

    with TraceReader(path, progress) as reader:
        meta = reader.meta
        checker = Checker(meta["protocol"], meta["n"], time_unit=meta.get("time_unit", "hop"))
        for event in reader:
            checker.feed(event)
    return meta, finish_trace(checker)
