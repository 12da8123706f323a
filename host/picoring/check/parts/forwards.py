"""A protocol's own count: a search for the token (BinarySearch's gimme, Lemma 6), how often each
request's search message was sent on by another node, read from its payload (the descriptor's
about["messages"]["request"]["search"]: the requester and its request's number as expressions in
w, the payload's first word, the trace's "seq"), against the descriptor's bounds."""

from .. import registry


class Forwards:
    def __init__(self, ledger, bounds):
        self.ledger = ledger
        protocol = ledger.protocol
        self.search = registry.search_of(registry.about(protocol)) if isinstance(protocol, str) else None
        self.listens = ("message_sent", "enter", "fail") if self.search is not None and not ledger.soft else ()
        self.bound = bounds.bound_forwards
        self.paper = bounds.paper_forwards
        self._forwards = {}  # requester -> [its request's number, forwards so far]
        self.max_forwards = 0

    def message_sent(self, src, mkind, first_word):
        """A new message (not a frame passed on; first_word: its payload's, the trace's "seq"):
        a search message of a pending request's, sent by its requester (the first: rule 5) or
        on by another node (a forward: rule 6)."""
        kind, requester, number_of = self.search
        if mkind != kind or not isinstance(first_word, int):
            return
        n = self.ledger.n
        names = {"w": first_word}
        z = registry.evaluate(requester, n, names)
        number = registry.evaluate(number_of, n, names)
        f = self._forwards.get(z)
        if src == z:
            if z in self.ledger.pending and (f is None or f[0] != number):
                self._forwards[z] = [number, 0]
        elif f is not None and f[0] == number:
            f[1] += 1

    def enter(self, t, node, seq):
        """At node's entry, if it serves its request: that request's forwards against the
        descriptor's bounds."""
        req = self.ledger.pending.get(node)
        if req is None:
            return
        f = self._forwards.pop(node, None)
        if f is None:
            return
        self.max_forwards = max(self.max_forwards, f[1])
        if self.paper is not None and f[1] > self.paper:
            self.ledger.over("forwards_per_request")
        if self.bound is not None and f[1] > self.bound:
            rid = req[0]
            self.ledger.violate("bound", rid, node, t, "request #%d (node %d): its search was forwarded %d times > "
                                "bound %d" % (rid, node, f[1], self.bound))

    def fail(self, t, node, reason):
        self._forwards.pop(node, None)

    def report(self):
        return {"max_forwards_per_request": self.max_forwards if self.search is not None else None}
