"""Recovery on a lossy ring (docs/recovery.md): timeouts, regenerated and discarded tokens, claim
and re-announced request frames (recovery traffic, counted apart from the paper's messages),
restarts and the host's lost events. The first of these marks the time from which the fault-free
bounds are reported, not checked (the ledger's faults_at)."""

from ...firmware.protocol import DISCARDED, REGENERATED


class Recovery:
    def __init__(self, ledger):
        self.ledger = ledger
        self.recovery_msgs = {"claim": 0, "again": 0}
        self.regenerations = []  # dicts: see regen
        self._token_seen_t = None  # the last sign of a token: a token sent, an entry, an exit, a new token
        self._waited = False  # a request was pending at that sign
        self._first_timeout_t = None  # the first recovery timeout since that sign
        self._fired = {}  # node -> the re-announce timeout (ms) that fired there last
        self.discarded = 0
        self.timeouts = 0
        self.restarts = 0
        self.events_lost_at = []  # (t, node): the host lost node's events there (USB link down)

    def frame(self, t, kind):
        self.recovery_msgs[kind] = self.recovery_msgs.get(kind, 0) + 1
        if kind == "again":
            self.ledger.faults(t)

    def token_seen(self, t):
        self._token_seen_t = t
        self._waited = bool(self.ledger.pending)
        self._first_timeout_t = None

    def regen(self, event):
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
        self.token_seen(t)
        self.ledger.faults(t)

    def discard(self, t, node):
        self.discarded += 1
        self.ledger.faults(t)

    def timeout(self, t, node, extra):
        self.timeouts += 1
        if extra.get("why") == "again":
            self._fired[node] = extra.get("gen_ms")
        if self._first_timeout_t is None:
            self._first_timeout_t = t
        self.ledger.faults(t)

    def tokens(self, t, node, a):
        """The simulator's note that a handler regenerated or discarded a token (action bits)."""
        if a & REGENERATED:
            self.regenerations.append({"t": t, "node": node})
        if a & DISCARDED:
            self.discarded += 1

    def fail(self, t, node, reason):
        self.ledger.faults(t)

    def restarted(self, t, node):
        self.ledger.faults(t)
        self.restarts += 1

    def events_lost(self, t, node):
        self.ledger.faults(t)
        self.events_lost_at.append((t, node))

    def report(self):
        return {"recovery": {
            "regenerations": len(self.regenerations),
            "regenerated": list(self.regenerations),
            "discarded_tokens": self.discarded,
            "timeouts": self.timeouts,
            "messages": dict(self.recovery_msgs),
            "restarts": self.restarts,
            "events_lost_at": list(self.events_lost_at),
        }}
