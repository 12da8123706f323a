"""Fairness under hard mutual exclusion: how many entries other nodes made while a request waited
(overtaken), and how many any one other node made (Englert et al., Thm 3: "no one node gets the
token more than log N times"), against the descriptor's printed bounds; and responsiveness
(Englert et al., Definition 3: "the maximum time period during which at least one node requires
the token and until the token is given to a ready node"): at each entry, the time since a node has
been waiting with nobody in the critical section."""

from array import array
from operator import itemgetter

_REQUESTED_AT = itemgetter(1)  # of a pending request (ledger.py)


class Fairness:
    def __init__(self, ledger, bounds):
        self.ledger = ledger
        self.listens = () if ledger.soft else ("request", "enter", "fail")
        self.paper_overtaken = bounds.paper_overtaken
        self.paper_by_one = bounds.paper_by_one
        self.max_overtaken = 0
        self.max_overtaken_by_one = 0
        self._by_one = {}  # node waiting -> {other node: its entries since the request}
        self.responsiveness = array("d")

    def request(self, t, node, rid):
        self._by_one[node] = {}

    def enter(self, t, node, seq):
        led = self.ledger
        pending = led.pending
        if pending:
            start = min(pending.values(), key=_REQUESTED_AT)[1]  # the longest waiting
            last_exit = led.last_exit
            if last_exit is not None and last_exit > start:
                start = last_exit
            if t is not None and start is not None:
                self.responsiveness.append(t - start)
        counts = self._by_one.pop(node, None)
        for others in self._by_one.values():
            others[node] = others.get(node, 0) + 1
        req = pending.get(node)  # the request this entry serves
        if req is None:
            return
        overtaken = led.entries - req[4]  # (this entry is not counted yet)
        self.max_overtaken = max(self.max_overtaken, overtaken)
        by_one = max(counts.values()) if counts else 0
        self.max_overtaken_by_one = max(self.max_overtaken_by_one, by_one)
        if self.paper_overtaken is not None and overtaken > self.paper_overtaken:
            self.ledger.over("overtaken")
        if self.paper_by_one is not None and by_one > self.paper_by_one:
            self.ledger.over("overtaken_by_one")

    def fail(self, t, node, reason):
        self._by_one.pop(node, None)

    def report(self):
        r = self.responsiveness
        return {
            "max_overtaken": self.max_overtaken,  # fairness: entries by others between a request and its service
            "max_overtaken_by_one": self.max_overtaken_by_one,  # ... by any one other node
            "responsiveness": {  # Englert et al., Definition 3 (in the run's time unit)
                "mean": (sum(r) / len(r)) if r else 0.0, "max": max(r) if r else 0},
            "over_paper_fairness": dict(self.ledger.over_paper),  # requests over the descriptor's fairness bounds
            # (and forwards_per_request: over Lemma 6's printed bound)
        }
