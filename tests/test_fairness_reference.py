"""The fairness part's figures against a straightforward reference (the checker's own before it
took O(log pending) per entry: a counter per waiting request and node, the longest waiting found
by a scan of every pending request), on random streams of requests, entries, exits, failures and
restarts: times out of order (a merged ring trace), nodes repeated, requests made twice."""

from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picoring.check.checker import Checker
from picoring.check.parts import fairness as fairness_part


class ReferenceFairness:
    """A listener fed before the parts (Checker.add): it sees the ledger as the fairness part does."""

    def __init__(self, ledger, part, paper_overtaken, paper_by_one):
        self.ledger = ledger
        self.part = part  # the fairness part: its answer for each entry, asked as the entry finds it
        self.answers = []
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
        self.answers.append(self.part.overtaken_by_one(req[4]))
        if self.overtaken[-1] > self.paper_overtaken:
            self.over["overtaken"] = self.over.get("overtaken", 0) + 1
        if self.by_one[-1] > self.paper_by_one:
            self.over["overtaken_by_one"] = self.over.get("overtaken_by_one", 0) + 1

    def fail(self, t, node, reason):
        self.counts.pop(node, None)


OPS = ("request", "request", "enter", "enter", "exit", "fail", "restarted")


@st.composite
def streams(draw):
    # from a drawn random generator: hypothesis's own draws favour repeated and boundary
    # values, and its streams seldom had a node request again while others waited
    n = draw(st.integers(1, 12))
    rng = draw(st.randoms(use_true_random=False))
    ops = [(rng.choice(OPS), rng.randrange(n), rng.randint(0, 60)) for _ in range(rng.randint(0, 250))]
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


@pytest.mark.cpu  # 400 examples, 4 s: out of the fast tier
@settings(max_examples=400, deadline=None)
@given(streams(), st.integers(0, 4), st.integers(0, 3), st.sampled_from((1, 3, fairness_part._FEW_WAITING)))
def test_the_fairness_figures_are_the_reference_ones(stream, paper_overtaken, paper_by_one, few_waiting):
    # few_waiting 1: the longest waiting always from the heap; 3 and the part's own: scans too
    n, ops = stream
    with patch.object(fairness_part, "_FEW_WAITING", few_waiting):
        checker = Checker("q", n)
        fairness = checker.parts.fairness
        fairness.paper_overtaken, fairness.paper_by_one = paper_overtaken, paper_by_one
        reference = ReferenceFairness(checker.ledger, fairness, paper_overtaken, paper_by_one)
        checker.add(reference)
        feed(checker, ops)
    assert list(fairness.responsiveness) == reference.responsiveness
    # every entry's answer, not only the largest: a node entering again and again while others
    # wait takes the path over the waiting requests, a busy ring the path over its own entries
    assert reference.answers == reference.by_one
    assert fairness.max_overtaken == max(reference.overtaken, default=0)
    assert fairness.max_overtaken_by_one == max(reference.by_one, default=0)
    assert checker.ledger.over_paper == reference.over
