"""Token recovery rules of firmware/protocol.py (docs/recovery.md), on pure protocol
nodes with FIFO links the test controls frame by frame: what is delivered, what is
lost, when a timeout fires."""

from collections import deque

import pytest

from picoring.firmware.protocol import (
    ACTIVE, CHECK, DISCARDED, ENTER_CS, OWNER_TOKEN, REGENERATED, SEND_AGAIN, SEND_CLAIM, SEND_REQUEST,
    SEND_TOKEN, SEQ_MASK, make_node, newer, seq_later,
)


class Ring:
    """Nodes and the FIFO link out of each; frames are tuples."""

    def __init__(self, protocol, n, boot=False):
        self.n = n
        self.nodes = [make_node(protocol, i, n) for i in range(n)]
        self.links = [deque() for _ in range(n)]
        self.entries = []  # (node, seq) in order
        self.log = []
        if boot:
            for i, node in enumerate(self.nodes):
                self.act(i, node.boot(starter=i == 0))
        else:
            self.act(0, self.nodes[0].give_token())

    def act(self, i, a):
        node = self.nodes[i]
        out = self.links[i]
        if a & SEND_TOKEN:
            out.append(("token", node.count, node.state, node.seq, node.epoch))
        elif a & SEND_REQUEST:
            out.append(("request",))
        if a & SEND_AGAIN:
            out.append(("again", node.again_origin))
        if a & SEND_CLAIM:
            out.append(("claim", node.claim_epoch, node.claim_origin, node.claim_join, node.claim_seq, node.claim_nonce))
        if a & ENTER_CS:
            self.entries.append((i, node.seq))
        if a & REGENERATED:
            self.log.append(("regen", i, node.epoch))
        if a & DISCARDED:
            self.log.append(("discard", i))
        return a

    def deliver(self, i):
        """The first frame on link i reaches node i + 1."""
        f = self.links[i].popleft()
        j = (i + 1) % self.n
        node = self.nodes[j]
        if f[0] == "token":
            return self.act(j, node.on_token(*f[1:]))
        if f[0] == "request":
            return self.act(j, node.on_request())
        if f[0] == "again":
            return self.act(j, node.on_request_again(f[1]))
        return self.act(j, node.on_claim(*f[1:]))

    def drop(self, i):
        return self.links[i].popleft()

    def request(self, i):
        return self.act(i, self.nodes[i].request())

    def exit(self, i):
        return self.act(i, self.nodes[i].exit_cs())

    def timeout(self, i):
        return self.act(i, self.nodes[i].on_timeout())

    def run(self, exit_cs=True, limit=10_000):
        """Deliver in round-robin until nothing moves; critical sections end at once."""
        for _ in range(limit):
            moved = False
            for i in range(self.n):
                if self.links[i]:
                    self.deliver(i)
                    moved = True
                if exit_cs and self.nodes[i].in_cs:
                    self.exit(i)
                    moved = True
            if not moved:
                return
        raise AssertionError("still moving after %d rounds" % limit)

    def tokens(self):
        held = sum(1 for x in self.nodes if x.has_token and not x.fresh)
        return held + sum(1 for q in self.links for f in q if f[0] == "token")

    def assert_entries_increase(self):
        seqs = [s for _, s in self.entries]
        assert all(b > a for a, b in zip(seqs, seqs[1:])), self.entries


def test_serial_epochs():
    assert newer(1, 0) and not newer(0, 1) and not newer(5, 5)
    assert newer(0, 0xFFFF) and newer(3, 0xFFF0) and not newer(0xFFF0, 3)


@pytest.mark.parametrize("protocol", ["q", "d"])
def test_a_fresh_ring_forms_with_one_token_made_by_position_0(protocol):
    r = Ring(protocol, 4, boot=True)
    assert all(x.fresh for x in r.nodes) and r.nodes[0].starting
    r.run()
    assert not any(x.fresh for x in r.nodes) and not r.nodes[0].starting
    assert [e for e in r.log if e[0] == "regen"] == [("regen", 0, 1)]
    assert r.nodes[0].has_token and r.tokens() == 1  # at rest where the paper starts it
    for i in (2, 1, 3):
        r.request(i)
        r.run()
    assert [i for i, _ in r.entries] == [2, 1, 3] and r.tokens() == 1
    r.assert_entries_increase()


def test_a_fresh_s_ring_forms_and_its_token_circulates():
    r = Ring("s", 3, boot=True)
    for _ in range(30):  # S's token never rests: deliver a bounded number of frames
        for i in range(3):
            if r.links[i]:
                r.deliver(i)
    assert not any(x.fresh for x in r.nodes)
    assert [e for e in r.log if e[0] == "regen"] == [("regen", 0, 1)] and r.tokens() == 1


@pytest.mark.parametrize("protocol", ["q", "d"])
def test_a_lost_token_is_regenerated_once_and_entries_keep_increasing(protocol):
    r = Ring(protocol, 3)
    r.request(1)
    r.run()
    r.request(2)
    while not r.links[0]:  # the request travels to the token at node 1...
        r.deliver(next(i for i in range(3) if r.links[i]))
    # ... no: the request message goes 2 -> 0 -> 1, and the token 1 -> 2
    r.run()
    assert [i for i, _ in r.entries] == [1, 2]
    r.request(0)
    # the token leaves node 2 towards node 0 and is lost on the way
    while not any(f[0] == "token" for f in r.links[2]):
        r.deliver(next(i for i in range(3) if r.links[i]))
    assert r.drop(2)[0] == "token" and r.tokens() == 0
    r.run()
    assert r.nodes[0].pending  # nothing else happens without a timeout
    a = r.timeout(0)
    assert a & SEND_CLAIM and a & SEND_AGAIN
    r.run()
    assert [e for e in r.log if e[0] == "regen"] == [("regen", 0, 1)]
    assert [i for i, _ in r.entries] == [1, 2, 0] and r.tokens() <= 1
    r.assert_entries_increase()
    for i in (1, 2):
        r.request(i)
        r.run()
    assert [i for i, _ in r.entries][-2:] == [1, 2]
    assert all(x.known_epoch == 1 for x in r.nodes)
    r.assert_entries_increase()


def test_entry_numbers_wrap_at_30_bits_and_a_claim_keeps_the_later_one():
    # A board never holds a long int (rp2 small ints are 30-bit): entry numbers wrap at
    # 2**30 and compare as serial numbers, also when a claim collects the highest one.
    assert seq_later(0, SEQ_MASK) and not seq_later(SEQ_MASK, 0) and seq_later(5, 4)
    r = Ring("q", 3)
    for node in r.nodes:
        node.seq = SEQ_MASK - 1
    r.request(1)
    r.run()
    r.request(2)
    r.run()
    assert r.entries == [(1, SEQ_MASK), (2, 0)]
    r.request(0)
    while not any(f[0] == "token" for f in r.links[2]):
        r.deliver(next(i for i in range(3) if r.links[i]))
    assert r.drop(2)[0] == "token"
    r.run()
    r.timeout(0)
    r.run()
    # node 0 last saw SEQ_MASK - 1, node 1 SEQ_MASK, node 2 made 0: the new token goes on from 0
    assert r.entries == [(1, SEQ_MASK), (2, 0), (0, 1)]


def test_a_claim_that_meets_the_resting_token_ends_there_and_restamps_it():
    r = Ring("q", 3)
    r.request(1)
    r.drop(1)  # its request message is lost: the token rests at 0, alive
    a = r.timeout(1)
    assert a & SEND_CLAIM
    r.drop(1)  # the re-announcement is lost too: only the claim goes on
    r.run()
    assert r.nodes[0].has_token and r.nodes[0].epoch == 1 and r.nodes[0].known_owner == OWNER_TOKEN
    assert not [e for e in r.log if e[0] == "regen"]  # the claim died at the holder
    assert r.nodes[1].pending
    r.timeout(1)  # a second claim (epoch 2) and a second re-announcement
    r.run()
    assert r.entries == [(1, 1)] and r.tokens() == 1
    assert not [e for e in r.log if e[0] == "regen"]


def test_the_claimant_keeps_the_live_token_that_reaches_it_before_its_claim():
    # The classic false alarm: the request message was lost, the token is alive at rest.
    # The re-announcement sets the token moving towards the claimant; the claim must not
    # kill it, and nothing is regenerated.
    r = Ring("q", 3)
    r.request(1)
    r.drop(1)
    r.timeout(1)  # again + claim (epoch 1) on link 1 -> 2
    r.run()
    assert r.entries == [(1, 1)]
    assert not [e for e in r.log if e[0] in ("regen", "discard")]
    assert r.tokens() == 1 and r.nodes[1].has_token and r.nodes[1].epoch == 1


def test_an_old_token_is_discarded_where_the_claim_has_passed():
    r = Ring("d", 3)
    r.nodes[0].has_token = False
    r.nodes[1].has_token = True  # the token rests at node 1
    r.request(2)
    r.links[2].clear()  # node 2's request message is lost
    r.timeout(2)
    r.links[2].popleft()  # and so is the re-announcement: only the claim travels, 2 -> 0 -> 1
    r.run()
    assert r.nodes[1].has_token and r.nodes[1].epoch == 1  # stopped there, the token re-stamped
    assert r.nodes[0].known_epoch == 1 and r.nodes[0].known_owner == 2
    # A token of epoch 0 (a second token: impossible on a sound ring, injected here) is
    # dropped by node 0, which the claim passed.
    assert r.nodes[0].on_token(2, ACTIVE, 0, 0) == DISCARDED and r.nodes[0].discarded == 1
    # Node 2, the claimant, would keep a token of epoch 0 reaching it before its claim came
    # back (it is the live one on a sound ring); one of epoch 1 is simply accepted.
    r.timeout(2)  # claim epoch 2 this time; lost with the re-announcement
    r.links[2].clear()
    assert r.nodes[2].on_token(2, ACTIVE, 0, 0) == DISCARDED  # two epochs behind: dropped


def test_competing_claims_of_one_epoch_regenerate_once():
    r = Ring("s", 3)
    r.nodes[0].has_token = False  # lose S's token outright (it is on link 0)
    r.links[0].clear()
    for i in range(3):
        r.nodes[i].pending = True
    for i in range(3):
        r.timeout(i)  # three claims of epoch 1: (1, 0), (1, 1), (1, 2)
    # deliver the claims only (S's token would circle forever): until no claim is left
    for _ in range(20):
        for i in range(3):
            if r.links[i] and r.links[i][0][0] == "claim":
                r.deliver(i)
    regens = [e for e in r.log if e[0] == "regen"]
    assert regens == [("regen", 2, 1)]  # the highest origin wins
    assert r.tokens() == 1


def test_a_fresh_node_drops_tokens_and_stops_claims_until_its_join_returns():
    r = Ring("q", 3)
    r.request(1)
    r.run()
    # node 2 restarts
    r.nodes[2] = make_node("q", 2, 3)
    r.act(2, r.nodes[2].boot())
    assert r.nodes[2].on_token(1, 0, 5, 0) == DISCARDED
    assert r.nodes[2].on_claim(7, 1, 0, 0) == 0
    r.run()  # the join goes round and comes back
    assert not r.nodes[2].fresh and r.nodes[2].known_epoch == 0 and r.nodes[2].seq == 1
    r.request(2)
    r.run()
    assert [i for i, _ in r.entries] == [1, 2]
    r.assert_entries_increase()


def test_a_restarted_starter_in_a_running_ring_makes_no_second_token():
    r = Ring("d", 3, boot=True)
    r.run()
    r.request(2)
    r.run()
    assert r.tokens() == 1
    r.nodes[0] = make_node("d", 0, 3)  # position 0 restarts; the token rests elsewhere
    holder = next(i for i, x in enumerate(r.nodes) if x.has_token)
    assert holder != 0
    r.act(0, r.nodes[0].boot(starter=True))
    r.run()
    assert not r.nodes[0].fresh and not r.nodes[0].starting and r.tokens() == 1
    assert [e for e in r.log if e[0] == "regen"] == [("regen", 0, 1)]  # the first one only


def test_d_again_passes_a_stale_flag_and_reaches_the_token():
    r = Ring("d", 4)
    r.nodes[0].has_token = False
    r.nodes[3].has_token = True  # the token rests at node 3
    r.request(1)
    r.drop(1)  # node 1's request message is lost: M_1 = 1 stays set
    r.request(0)
    r.run()  # node 0's message reaches node 1 and is stopped there by M_1 (rule 3)
    assert r.nodes[0].pending and r.nodes[1].pending and r.entries == []
    a = r.timeout(0)
    assert a & SEND_AGAIN and a & SEND_CLAIM
    r.run()  # the re-announcement passes M_1, wakes the token; the claim dies at the holder
    assert sorted(i for i, _ in r.entries) == [0, 1]
    assert not [e for e in r.log if e[0] == "regen"] and r.tokens() == 1
    assert all(x.flag == 0 for x in r.nodes)
    r.assert_entries_increase()


def test_q_regenerated_token_sweeps_pending_nodes_then_rests():
    r = Ring("q", 4)
    for i in (1, 2, 3):
        r.request(i)
    for i in range(4):
        r.links[i].clear()  # every request message is lost; the token rests at 0
    r.nodes[0].has_token = False  # ... and the token too (it was in 0's memory: a restart)
    r.timeout(2)
    for i in range(4):  # keep only node 2's claim
        while r.links[i] and r.links[i][0][0] != "claim":
            r.links[i].popleft()
    r.run()
    assert sorted(i for i, _ in r.entries) == [1, 2, 3]
    assert r.tokens() == 1 and sum(x.stale_counts for x in r.nodes) == 1  # the sweep came to rest
    r.assert_entries_increase()


@pytest.mark.parametrize("protocol", ["q", "d"])
def test_a_re_announcement_goes_round_at_most_once(protocol):
    r = Ring(protocol, 4)
    r.nodes[0].has_token = False  # the token is lost
    r.request(2)
    r.links[2].clear()
    a = r.timeout(2)
    assert a & SEND_AGAIN
    r.links[2].pop()  # lose the claim: only the re-announcement travels
    hops = 0
    while any(r.links):
        r.deliver(next(i for i in range(4) if r.links[i]))
        hops += 1
    assert hops == 4 and r.nodes[2].pending  # 2 -> 3 -> 0 -> 1 -> 2, and stopped there


def test_q_hop_rule_never_fires_without_faults():
    r = Ring("q", 5)
    for k in range(40):
        r.request((k * 3) % 5)
        if k % 3 == 0:
            r.run()
    r.run()
    assert sum(x.stale_counts for x in r.nodes) == 0
    r.assert_entries_increase()


def test_timeout_of_a_node_that_needs_nothing_does_nothing():
    r = Ring("d", 3)
    assert r.timeout(1) == 0 and r.timeout(0) == 0  # idle, and the holder
    assert not any(r.links)
    n = make_node("d", 1, 3)
    assert n.boot() == SEND_CLAIM and n.claim_join == 1 and n.waiting()
    assert n.on_timeout() == SEND_CLAIM and n.claim_join == 1  # a fresh node asks again
    assert n.state == CHECK
