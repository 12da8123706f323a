"""Fairness under hard mutual exclusion: how many entries other nodes made while a request waited
(overtaken), and how many any one other node made (Englert et al., Thm 3: "no one node gets the
token more than log N times"), against the descriptor's printed bounds; and responsiveness
(Englert et al., Definition 3: "the maximum time period during which at least one node requires
the token and until the token is given to a ready node"): at each entry, the time since a node has
been waiting with nobody in the critical section.

Each entry costs O(log pending) amortised, not O(pending): a busy ring of 10,000 nodes has
thousands of requests waiting at every entry (docs/performance.md)."""

from array import array
from bisect import bisect_left
from heapq import heappop, heappush
from operator import itemgetter

_REQUESTED_AT = itemgetter(1)  # of a pending request (ledger.py)


class OvertakenByOne:
    """For each waiting request, the most entries any one node made since it was made.

    Not a counter per waiting request and node (every entry would touch every waiting request)
    but levels: level[j - 1] is the latest entry position at which some node made its j-th most
    recent entry, so a request made when `position` entries had been made was overtaken by one
    node at least j times iff level[j - 1] >= that position. An entry moves only its own node's
    entries one level down. A level may lag its true value where no waiting request's position
    lies between the two (no answer can tell them apart), which lets an entry touch either its
    node's entries since the oldest waiting request or the waiting requests, whichever are fewer."""

    def __init__(self):
        self.position = 0  # entries so far
        self._waiting = {}  # node -> the position at its request
        self._oldest = []  # heap of (position, node); stale ones are skipped when on top
        self._entries = {}  # node -> array of its entry positions
        self._level = []

    def request(self, node):
        """A request at node (a second one replaces the first)."""
        self._waiting[node] = self.position
        heappush(self._oldest, (self.position, node))

    def drop(self, node):
        """node's request will not be served."""
        self._waiting.pop(node, None)

    def enter(self, node):
        """node enters: the most entries one other node made since its request (0: none waiting)."""
        at = self._waiting.pop(node, None)
        by_one = 0 if at is None else self._overtaken(at)
        mine = self._entries.get(node)
        if mine is None:
            mine = self._entries[node] = array("q")
        mine.append(self.position)
        self.position += 1
        if self._waiting:
            self._move_down(mine)
        return by_one

    def _overtaken(self, at):
        level = self._level  # level[j] >= at holds for a prefix of j (at: a waiting request's)
        lo, hi = 0, len(level)
        while lo < hi:
            mid = (lo + hi) // 2
            if level[mid] >= at:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def _oldest_waiting(self):
        oldest, waiting = self._oldest, self._waiting
        while waiting.get(oldest[0][1]) != oldest[0][0]:
            heappop(oldest)
        return oldest[0][0]

    def _move_down(self, mine):
        """A node made an entry (the last of `mine`): its j-th most recent is now mine[-j]."""
        level = self._level
        n = len(mine)
        since_oldest = n - bisect_left(mine, self._oldest_waiting())
        if since_oldest <= len(self._waiting):
            depths = range(1, since_oldest + 1)
        else:  # only the levels a waiting request sees this node's entries at
            depths = {n - bisect_left(mine, at) for at in self._waiting.values()}
        for j in depths:
            p = mine[-j]
            if j > len(level):  # (j <= len(level) + 1: it was overtaken j - 1 times already)
                level.append(p)
            elif level[j - 1] < p:
                level[j - 1] = p


class Fairness:
    def __init__(self, ledger, bounds):
        self.ledger = ledger
        self.listens = () if ledger.soft else ("request", "enter", "fail")
        self.paper_overtaken = bounds.paper_overtaken
        self.paper_by_one = bounds.paper_by_one
        self.max_overtaken = 0
        self.max_overtaken_by_one = 0
        self._by_one = OvertakenByOne()
        self._requested = []  # heap of (t, request id, node) of requests, served ones skipped on top
        self._untimed = False  # a request had no time: the longest waiting is found the slow way
        self.responsiveness = array("d")

    def request(self, t, node, rid):
        self._by_one.request(node)
        if t is None:
            self._untimed = True
        else:
            heappush(self._requested, (t, rid, node))

    def _requested_first(self, pending):
        """When the longest waiting pending request was made."""
        if not self._untimed:
            heap = self._requested
            while heap:
                t, rid, node = heap[0]
                req = pending.get(node)
                if req is not None and req[0] == rid:
                    return t
                heappop(heap)
        return min(pending.values(), key=_REQUESTED_AT)[1]

    def enter(self, t, node, seq):
        led = self.ledger
        pending = led.pending
        if pending:
            start = self._requested_first(pending)
            last_exit = led.last_exit
            if last_exit is not None and last_exit > start:
                start = last_exit
            if t is not None and start is not None:
                self.responsiveness.append(t - start)
        by_one = self._by_one.enter(node)
        req = pending.get(node)  # the request this entry serves
        if req is None:
            return
        overtaken = led.entries - req[4]  # (this entry is not counted yet)
        self.max_overtaken = max(self.max_overtaken, overtaken)
        self.max_overtaken_by_one = max(self.max_overtaken_by_one, by_one)
        if self.paper_overtaken is not None and overtaken > self.paper_overtaken:
            self.ledger.over("overtaken")
        if self.paper_by_one is not None and by_one > self.paper_by_one:
            self.ledger.over("overtaken_by_one")

    def fail(self, t, node, reason):
        self._by_one.drop(node)

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
