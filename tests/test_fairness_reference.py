"""The fairness part's figures against a straightforward reference (the checker's own before it
took O(log pending) per entry: a counter per waiting request and node, the longest waiting found
by a scan of every pending request), on random streams of requests, entries, exits, failures and
restarts: times out of order (a merged ring trace), nodes repeated, requests made twice."""

from hypothesis import given, settings
from hypothesis import strategies as st

from picoring.check.checker import Checker
from picoring.check.parts.fairness import OvertakenByOne


class ReferenceFairness:
    """A listener fed before the parts (Checker.add): it sees the ledger as the fairness part does."""

    def __init__(self, ledger, paper_overtaken, paper_by_one):
        self.ledger = ledger
        self.paper_overtaken = paper_overtaken
        self.paper_by_one = paper_by_one
        self.counts = {}  # node waiting -> {other node: its entries since the request}
        self.responsiveness = []
        self.by_one = []  # per entry that serves a request
        self.overtaken = []
        self.over = {}

    def request(self, t, node, rid):
        self.counts[node] = {}

    def enter(self, t, node, seq):
        led = self.ledger
        if led.pending:
            start = min(req[1] for req in led.pending.values())
            if led.last_exit is not None and led.last_exit > start:
                start = led.last_exit
            self.responsiveness.append(t - start)
        mine = self.counts.pop(node, None)
        for others in self.counts.values():
            others[node] = others.get(node, 0) + 1
        req = led.pending.get(node)
        if req is None:
            return
        self.overtaken.append(led.entries - req[4])
        self.by_one.append(max(mine.values(), default=0))
        if self.overtaken[-1] > self.paper_overtaken:
            self.over["overtaken"] = self.over.get("overtaken", 0) + 1
        if self.by_one[-1] > self.paper_by_one:
            self.over["overtaken_by_one"] = self.over.get("overtaken_by_one", 0) + 1

    def fail(self, t, node, reason):
        self.counts.pop(node, None)


OPS = ("request", "request", "enter", "enter", "exit", "fail", "restarted")


@st.composite
def streams(draw):
    n = draw(st.integers(1, 7))
    ops = draw(st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, n - 1), st.integers(0, 60)),
                        max_size=250))
    return n, ops


def feed(checker, ops):
    for op, node, t in ops:
        if op == "request":
            checker.request(t, node)
        elif op == "enter":
            checker.enter(t, node)
        elif op == "exit":
            checker.exit(t, node)
        elif op == "fail":
            checker.fail(t, node, "restarted")
        else:
            checker.restarted(t, node)


@settings(max_examples=300, deadline=None)
@given(streams(), st.integers(0, 4), st.integers(0, 3))
def test_the_fairness_figures_are_the_reference_ones(stream, paper_overtaken, paper_by_one):
    n, ops = stream
    checker = Checker("q", n)
    fairness = checker.parts.fairness
    fairness.paper_overtaken, fairness.paper_by_one = paper_overtaken, paper_by_one
    reference = ReferenceFairness(checker.ledger, paper_overtaken, paper_by_one)
    checker.add(reference)
    feed(checker, ops)
    assert list(fairness.responsiveness) == reference.responsiveness
    assert fairness.max_overtaken == max(reference.overtaken, default=0)
    assert fairness.max_overtaken_by_one == max(reference.by_one, default=0)
    assert checker.ledger.over_paper == reference.over


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 6), st.lists(st.tuples(st.sampled_from(("request", "enter", "enter", "drop")),
                                             st.integers(0, 5)), max_size=300))
def test_each_entry_is_overtaken_by_one_as_counted_per_node(n, ops):
    # every entry's answer, not only the largest: a node entering again and again while others
    # wait takes the path over the waiting requests, a busy ring the path over its own entries
    levels, counts = OvertakenByOne(), {}
    for op, node in ops:
        node %= n
        if op == "request":
            levels.request(node)
            counts[node] = {}
        elif op == "drop":
            levels.drop(node)
            counts.pop(node, None)
        else:
            mine = counts.pop(node, {})
            for others in counts.values():
                others[node] = others.get(node, 0) + 1
            assert levels.enter(node) == max(mine.values(), default=0)
