"""Soft mutual exclusion (a descriptor's "exclusion": "soft", the wandering token, or "none", its
random-access benchmark): two nodes in their critical sections at once are not a violation. This
part measures instead, as Ciuffoletti's paper does, the time spent with k operations running
(k = 0, 1, 2, ...; the fraction with k >= 2), the intervals between two successive operations of
one node, and the time spent with k tokens alive (from the regenerated and discarded tokens, the
losses a simulator injects and those a ring trace's "lost" events show), and the stabilisation
after a token loss (check/soft.py). Entry numbers are not checked (several tokens count entries
independently).

Time in which the ring stood still is left out of the times with k operations running and with k
tokens alive: a loaded host that does not run a virtual ring's processes (or an emulated Pico's)
for seconds stops the protocol, not the trace's clock, and two tokens alive across such a freeze
are not two tokens for that long as the protocol goes (a loaded suite run: 1.84 s of 3.15 s).
What stood still is a silence of the ring's (no event from any board) in which the host's pings
went unanswered past their grace, the ring's own clock stood still, or the host's own loop was not
run for as long (a machine that ran nothing; a ring trace's "stood still" notice, ring/driver.py):
the whole silence, from the ring's last event to its next, and on until the pings were answered
again (the notice's time): a board that the host runs again first moves a token on only as far as
the next board that still stands still (a loaded suite run: the ring's first event 116 ms before
the last board answered, two tokens waiting at that board, 148.7 ms of 1.47 s counted as two)."""

from array import array
from bisect import bisect_right

from ...firmware.protocol import DISCARDED, REGENERATED
from .. import registry, soft
from ..quantile import nearest_rank

# A trace's time units per unit of a clocked protocol's clock (protocol.py's header: Time): the
# simulator's hop times are both; a board's clock counts milliseconds (firmware/node.py).
CLOCK_UNIT = {"hop": 1, "us": 1000}

# The shortest silence kept as one the ring may have stood still in (ms of a board's clock): a
# stood-still notice comes only after a ping went unanswered for its grace (0.5 s at least), so a
# silence that holds one is longer; shorter ones (a token held for an operation) are not kept.
SILENCE_MIN_MS = 50


class SoftExclusion:
    def __init__(self, ledger, exclusion, time_unit="hop"):
        self.ledger = ledger
        self.exclusion = exclusion
        self.listens = None if ledger.soft else ()  # (None: every method it has)
        protocol = ledger.protocol
        self.running = set()  # nodes in their critical sections
        self.concurrency_time = {}  # k -> time spent with k critical sections running
        self._k_since = None
        self.intervals = array("d")  # between two successive entries of one node
        self.last_entry = {}  # node -> its last entry time
        # the first token (none for a protocol without one: random access), + regenerated
        # - discarded - lost
        self.tokens_alive = registry.tokens_at_start(protocol) if isinstance(protocol, str) else 1
        self.tokens_time = {}  # k -> time spent with k tokens alive
        self._tok_since = None
        self.tokens_lost = 0
        # The token count's history (k alive from t on), so that a token found lost later (a
        # ring trace's "lost" event, when the next frame on its wire showed the gap) counts from
        # its send, and the losses: what the stabilisation after a loss is measured from (soft.py)
        self._sent = {}  # link -> token frames sent on it in the run (a ring trace's)
        self._received = {}  # link -> those received or lost
        self._first_sent_t = {}  # link -> when the first of them was sent
        self._token_in = {}  # node -> (t, sent before the run) of the last token frame it received
        self._run_t = array("d")  # the running count's history (k running from t on): _left_out
        self._run_k = array("l")
        self._tok_t = array("d")
        self._tok_k = array("l")
        self._losses = array("d")
        # ... until a token has been alive for this long (trace units; None: not measured)
        settle = registry.settle_time(protocol, ledger.n) if isinstance(protocol, str) and ledger.soft else None
        self.settle = None if settle is None else settle * CLOCK_UNIT[time_unit]
        self._token_kinds = {k for k, role in registry.message_roles(registry.about(protocol)).items()
                             if role == "token"} if isinstance(protocol, str) else set()
        # The ring's silences (module doc): (from, to) of each gap of at least silence_min
        # between two events of the ring; and the stood-still notices'
        # (since, at): the host's pings unanswered from since on
        self.silence_min = SILENCE_MIN_MS * CLOCK_UNIT[time_unit]
        self._active_t = None
        self._silences = []
        self._stood_still = []

    def start(self, t):
        """The run begins at t (the time the measures count from)."""
        if self._k_since is None:
            self._k_since = t
            self._running_from(t)
        if self._tok_since is None:
            self._tok_since = t
            self._tok_t.append(t)
            self._tok_k.append(self.tokens_alive)

    def _active(self, t):
        """An event of the ring's at t: the silence before it, if long, is kept (module doc). (A
        late event of a board placed after a later one says nothing: the order is the trace's.)"""
        last = self._active_t
        if last is not None and t is not None and t - last >= self.silence_min:
            self._silences.append((last, t))
        if t is not None and (last is None or t > last):
            self._active_t = t

    def request(self, t, node, rid):
        self._active(t)
        self.start(t)

    def enter(self, t, node, seq):
        self._active(t)
        self.start(t)
        self._concurrency_to(t)
        self.running.add(node)
        self._running_from(t)
        last = self.last_entry.get(node)
        if last is not None and t is not None:
            self.intervals.append(t - last)
        self.last_entry[node] = t

    def exit(self, t, node):
        self._active(t)
        if node not in self.running:
            self.ledger.unsafe(node, t, "node %d left a critical section it was not in" % node)
            return
        self._concurrency_to(t)
        self.running.discard(node)
        self._running_from(t)

    def _concurrency_to(self, t):
        """The time since the last change goes to the count running so far; the caller then
        changes the count (enter, exit), which the history takes from t on (_running_from)."""
        if self._k_since is not None and t is not None:
            k0 = len(self.running)
            self.concurrency_time[k0] = self.concurrency_time.get(k0, 0) + (t - self._k_since)
        self._k_since = t

    def _running_from(self, t):
        if t is not None:
            self._run_t.append(t)
            self._run_k.append(len(self.running))

    def _tokens_to(self, t, k):
        if self._tok_since is not None and t is not None:
            k0 = self.tokens_alive
            self.tokens_time[k0] = self.tokens_time.get(k0, 0) + (t - self._tok_since)
        self._tok_since = t
        self.tokens_alive = k
        if t is not None:
            self._tok_t.append(t)
            self._tok_k.append(k)

    def regen(self, event):
        self._active(event.t)
        self._tokens_to(event.t, self.tokens_alive + 1)

    def wire(self, event):
        """A ring trace's send or recv of a frame: per link, which received token frames were
        sent before the run (a link delivers in order, so the receives with no send yet counted
        on their link). Such a token is one the count never had (module doc, discard)."""
        self._active(event.t)
        if event.link is None or not self._carries_token(event):
            return
        link = event.link
        if event.ev == "send":
            self._sent[link] = self._sent.get(link, 0) + 1
            self._first_sent_t.setdefault(link, event.t)
        elif self._received.get(link, 0) < self._sent.get(link, 0):
            self._received[link] = self._received.get(link, 0) + 1
            self._token_in[event.node] = (event.t, False)
        else:
            self._token_in[event.node] = (event.t, True)  # sent before the run: not counted

    def discard(self, t, node):
        # A token the node just received whose frame was sent before the run (an old epoch's,
        # made before the ring formed, dropped at the epoch gate) is one the count never had:
        # the count stays. Any other removal takes one off, down to 0: the wandering token
        # drops a token older than one the node saw even when that one has since been lost
        # (and its lost event comes later), so "another is alive" does not hold on a lossy ring.
        self._active(t)
        if self._token_in.get(node) == (t, True):
            return
        self._tokens_to(t, self.tokens_alive - 1)

    def tokens(self, t, node, a):
        """The simulator's note that a handler regenerated or discarded a token (action bits)."""
        if a & REGENERATED:
            self._tokens_to(t, self.tokens_alive + 1)
        if a & DISCARDED:
            self._tokens_to(t, self.tokens_alive - 1)

    def lost(self, t, node=None):
        """A token was lost on a wire (a simulator's injected loss)."""
        self.tokens_lost += 1
        self._losses.append(t)
        self._tokens_to(t, self.tokens_alive - 1)

    def _carries_token(self, event):
        if event.kind == "token":
            return True
        return event.kind == "msg" and (event.payload or {}).get("mkind") in self._token_kinds

    def lost_frame(self, event):
        """A ring trace's "lost" event: a frame its receiver never got (a gap on its wire), at
        the gap's time, sent at extra["sent_t"]. A token lost so counts from when it was sent:
        the time since then moves down one token."""
        if not self._carries_token(event):
            return
        sent_t = (event.extra or {}).get("sent_t", event.t)
        link = event.link
        if link in self._first_sent_t and sent_t >= self._first_sent_t[link]:
            self._received[link] = self._received.get(link, 0) + 1  # its send was counted (wire)
        self.tokens_lost += 1
        self._losses.append(sent_t)
        if self._tok_since is None or sent_t >= self._tok_since:
            self._tokens_to(sent_t, self.tokens_alive - 1)  # nothing changed since it was sent
            return
        # The changes since sent_t were counted one token too high: move their time down.
        ts, ks = self._tok_t, self._tok_k
        first = bisect_right(ts, sent_t) - 1
        if first < 0:
            # Sent before the run (before its sender's start, lost after its receiver's): a
            # token alive at the start, taken as the ring's one the count began with
            sent_t, first = ts[0], 0
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

    def stood_still(self, t, since):
        """A ring trace's "stood still" notice at t: the host's pings went unanswered from since
        on (ring/driver.py)."""
        self._stood_still.append((since, t))

    def _left_out(self, last_t):
        """The times the ring stood still in (module doc): [(from, to)], in order, none
        overlapping: each silence in which a stood-still notice's window began, from its start to
        the later of its end and the notice's (the ring's silence at the end of the trace
        included, to last_t)."""
        silences = list(self._silences)
        if self._active_t is not None and last_t is not None and last_t - self._active_t >= self.silence_min:
            silences.append((self._active_t, last_t))
        windows = []
        for since, at in self._stood_still:
            for a, b in silences:
                if a <= since < b:
                    end = max(b, at)
                    windows.append((a, end if last_t is None else min(end, last_t)))
        out = []
        for a, b in sorted(windows):
            if out and a <= out[-1][1]:
                out[-1] = (out[-1][0], max(out[-1][1], b))
            else:
                out.append((a, b))
        return out

    def _tokens_during(self, a, b, last_t):
        """{k: time within [a, b) with k tokens alive}, from the token count's history."""
        return _during(self._tok_t, self._tok_k, a, b, last_t)

    def _running_during(self, a, b, last_t):
        """{k: time within [a, b) with k critical sections running}, from its history."""
        return _during(self._run_t, self._run_k, a, b, last_t)

    def clock_rates(self, rates):
        """The boards' clocks ran at these rates against the trace's time (emulated Picos on a busy
        machine; ring/runreport.py clock_rates_noted). The stabilisation after a loss waits for
        Delta_max of the boards' clocks: in the trace's time, that long over their mean rate."""
        if rates and self.settle is not None:
            self.settle = round(self.settle * len(rates) / sum(rates))

    def soft_report(self):
        """The measures of soft mutual exclusion so far (module doc)."""
        last_t = self.ledger.last_t
        conc = dict(self.concurrency_time)
        if self._k_since is not None and last_t is not None and last_t > self._k_since:
            k = len(self.running)
            conc[k] = conc.get(k, 0) + (last_t - self._k_since)
        toks = dict(self.tokens_time)
        if self._tok_since is not None and last_t is not None and last_t > self._tok_since:
            toks[self.tokens_alive] = toks.get(self.tokens_alive, 0) + (last_t - self._tok_since)
        stood_still = 0
        for a, b in self._left_out(last_t):
            stood_still += b - a
            for k, v in self._running_during(a, b, last_t).items():
                conc[k] = conc.get(k, 0) - v
            for k, v in self._tokens_during(a, b, last_t).items():
                toks[k] = toks.get(k, 0) - v
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
            # left out of the times above (module doc): said only where the ring stood still
            **({"stood_still": stood_still} if stood_still else {}),
            **({"stabilisation": dict(soft.summary(soft.transients(
                self._tok_t, self._tok_k, self._losses, self.settle, last_t)), settle=self.settle)}
               if self.settle is not None else {}),
        }

    def report(self):
        return {"soft": self.soft_report()} if self.ledger.soft else {}


def _during(ts, ks, a, b, last_t):
    """{k: time within [a, b)} of a count's history: k from ts[i] on, to the next change (the
    last to last_t)."""
    out = {}
    for i in range(max(bisect_right(ts, a) - 1, 0), len(ts)):
        end = ts[i + 1] if i + 1 < len(ts) else max(last_t, ts[i])
        overlap = min(end, b) - max(ts[i], a)
        if overlap > 0:
            out[ks[i]] = out.get(ks[i], 0) + overlap
        if end >= b:
            break
    return out
