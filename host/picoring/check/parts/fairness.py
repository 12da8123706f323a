"""Fairness under hard mutual exclusion: how many entries other nodes made while a request waited
(overtaken), and how many any one other node made (Englert et al., Thm 3: "no one node gets the
token more than log N times"), against the descriptor's printed bounds; and responsiveness
(Englert et al., Definition 3: "the maximum time period during which at least one node requires
the token and until the token is given to a ready node"): at each entry, the time since a node has
been waiting with nobody in the critical section.

An entry does not walk every waiting request (a busy ring of 10,000 nodes has thousands waiting
at each entry: docs/performance.md): the longest waiting comes from a heap, O(log pending)
amortised, and overtaken by one costs O(log pending) plus the entering node's entries since the
oldest waiting request, which is at most how often that request was overtaken by one node: one
or two in a fair run, log N by the paper's bound, and never more than the pending requests (the
other way below, then O(pending log pending), is taken instead). Overtaken by one node is kept
in levels, not in a counter per waiting request and node that each entry would touch:
level[j - 1] is the latest entry position (entries made before it) at which some node made its
j-th most recent entry, so a request made at position `at` was overtaken by one node at least j
times iff level[j - 1] >= at. An entry moves only its own node's entries one level down. A level
may lag its true value where no waiting request's position lies between the two (no answer can
tell them apart), which lets an entry touch either its node's entries since the oldest waiting
request or the waiting requests, whichever are fewer."""

from array import array
from bisect import bisect_left
from collections import deque
from heapq import heapify, heappop, heappush
from operator import itemgetter

_REQUESTED_AT = itemgetter(1)  # of a pending request (ledger.py)
_AT = 4  # ... its position: the entries made before it
_FEW_WAITING = 8  # requests pending: fewer are scanned for the longest waiting


class Fairness:
    def __init__(self, ledger, bounds):
        self.ledger = ledger
        self.listens = () if ledger.soft else ("request", "enter")
        self.paper_overtaken = bounds.paper_overtaken
        self.paper_by_one = bounds.paper_by_one
        self.max_overtaken = 0
        self.max_overtaken_by_one = 0
        self.responsiveness = array("d")
        self._requested = None  # heap of (t, request id, node) while many wait: served ones skipped on top
        self._untimed = False  # a request had no time: the longest waiting is found the slow way
        self._level = []
        self._entries = {}  # node -> its entry positions since nobody waited (array)
        self._oldest = deque()  # (position, node) of requests in their order: stale ones skipped at the left

    def request(self, t, node, rid):
        # the waiting requests are the ledger's pending ones (the liveness part keeps them)
        self._oldest.append((self.ledger.entries, node))
        if t is None:
            self._untimed = True
        elif self._requested is not None:
            heappush(self._requested, (t, rid, node))

    def enter(self, t, node, seq):
        led = self.ledger
        pending = led.pending
        req = pending.get(node)  # the request this entry serves
        if pending:
            if req is not None and len(pending) == 1:  # only the request served waits (a quiet ring)
                start = req[1]
                self._requested = None
            else:
                start = self._requested_first(pending)
            last_exit = led.last_exit
            if last_exit is not None and last_exit > start:
                start = last_exit
            if t is not None and start is not None:
                self.responsiveness.append(t - start)
        if req is not None:
            overtaken = led.entries - req[_AT]  # (this entry is not counted yet)
            if overtaken > self.max_overtaken:
                self.max_overtaken = overtaken
            if self.paper_overtaken is not None and overtaken > self.paper_overtaken:
                led.over("overtaken")
            if self._level:  # (none: nobody entered while a request waited: overtaken by one is 0,
                # over no bound: the descriptors' are counts, never below 0)
                by_one = self.overtaken_by_one(req[_AT])
                if by_one > self.max_overtaken_by_one:
                    self.max_overtaken_by_one = by_one
                if self.paper_by_one is not None and by_one > self.paper_by_one:
                    led.over("overtaken_by_one")
        if len(pending) > (req is not None):  # others wait: they see this entry
            self._entered(node, led.entries)
        elif self._oldest:  # nobody else waits: no later request sees this entry or an earlier one
            self._oldest.clear()
            if self._level:
                self._entries.clear()
                self._level.clear()

    def overtaken_by_one(self, at):
        """The most entries one node made since the waiting request made at position `at`."""
        level = self._level  # level[j] >= at holds for a prefix of j
        lo, hi = 0, len(level)
        while lo < hi:
            mid = (lo + hi) // 2
            if level[mid] >= at:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _requested_first(self, pending):
        """When the longest waiting pending request was made: a scan of a few, a heap of many
        (built from the pending ones when they become many, dropped when one is left)."""
        if len(pending) < _FEW_WAITING or self._untimed:
            if len(pending) == 1:
                self._requested = None
            return min(pending.values(), key=_REQUESTED_AT)[1]
        heap = self._requested
        if heap is None:
            heap = self._requested = [(req[1], req[0], node) for node, req in pending.items()]
            heapify(heap)
        while True:
            t, rid, node = heap[0]
            req = pending.get(node)
            if req is not None and req[0] == rid:
                return t
            heappop(heap)

    def _entered(self, node, position):
        """node made an entry that waiting requests see: its j-th most recent is now mine[-j]."""
        mine = self._entries.get(node)
        if mine is None:
            mine = self._entries[node] = array("q")
        mine.append(position)
        pending, oldest = self.ledger.pending, self._oldest
        while True:  # (its own request, if any, is pending still: a harmless extra)
            req = pending.get(oldest[0][1])
            if req is not None and req[_AT] == oldest[0][0]:
                break
            oldest.popleft()
        n = len(mine)
        since_oldest = n - bisect_left(mine, oldest[0][0])
        if since_oldest <= len(pending):
            depths = range(1, since_oldest + 1)
        else:  # only the levels a waiting request sees this node's entries at
            depths = {n - bisect_left(mine, req[_AT]) for req in pending.values()}
        level = self._level
        for j in depths:
            p = mine[-j]
            if j > len(level):  # (j <= len(level) + 1: it was overtaken j - 1 times already)
                level.append(p)
            elif level[j - 1] < p:
                level[j - 1] = p

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
