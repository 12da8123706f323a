"""The explorer's lossy mode (picoring.explore.lossy.explore_faults): the token
recovery's SAFETY under bounded faults -- frames lost, timeouts at any moment,
board restarts -- checked exhaustively on the firmware's own node objects.
Planted bugs are found with schedules that replay on fresh nodes; a ring of
booting boards forms with timeouts only. Liveness is not checked here."""

import pytest

from picoring.cli.main import main
from picoring.explore.lossy import explore_faults, format_faults_report, replay_faults
from picoring.explore.lossy_model import (F_TOKEN, L_COUNT, L_FLAG, L_FRESH, L_HAS_TOKEN, L_IN_CS, L_KNOWN_EPOCH,
                                          L_KNOWN_OWNER, L_PENDING, L_STATE, LOSSY_FIELDS, LossyExplorer,
                                          parse_faults)
from picoring.explore.model import REQ, Explorer
from picoring.firmware.protocol import OWNER_TOKEN, NodeD, NodeQ, NodeS, newer

SAFETY = ("mutual_exclusion", "entry_numbers", "one_live_token")


def first_violation(r, key):
    return min((step for step, k in r["violations"] if k == key), default=None)


def assert_replays(protocol, n, rep, key, boot=False):
    """The reported schedule is real: on fresh node objects with plain FIFO
    queues, the violation happens at its last step and not before."""
    sched = rep[key]["schedule"]
    r = replay_faults(protocol, n, sched, boot=boot)
    assert first_violation(r, key) == len(sched), (key, sched, r["violations"])
    return r


# -- (1) the real protocols ----------------------------------------------------------

@pytest.mark.parametrize("protocol", ["s", "q", "d"])
@pytest.mark.parametrize("n, budgets, boot", [
    (2, dict(drops=2, timeouts=2), False),
    (2, dict(drops=1, timeouts=2), True),
    (3, dict(drops=1, timeouts=2), False),
    (3, dict(drops=1, timeouts=1), True),
], ids=["n2-token-d2t2", "n2-boot-d1t2", "n3-token-d1t2", "n3-boot-d1t1"])
def test_real_protocols_are_safe_under_drops_and_timeouts(protocol, n, budgets, boot):
    rep = explore_faults(protocol, n, 1, boot=boot, **budgets)
    assert rep["complete"] and rep["ok"], format_faults_report(rep)
    assert rep["max_live_tokens"] == 1
    # the weaker readings and the literal live-token reading agree here
    assert rep["entry_epoch_numbers"]["ok"] and rep["entry_numbers_completed"]["ok"]
    assert rep["live_tokens_now"]["ok"]
    assert "impossible_frame" not in rep and "token_and_request" not in rep
    assert rep["formed"]["reachable"]
    # the faults were exercised: tokens were lost and made again
    assert rep["counts"]["regenerations"] > 0


@pytest.mark.parametrize("protocol", ["s", "q", "d"])
@pytest.mark.parametrize("boot", [False, True], ids=["token", "boot"])
def test_restarts_keep_one_token_but_can_repeat_an_entry_number(protocol, boot):
    # FINDING (reported): a board that restarts while it holds the token (in its
    # critical section, or with the token at rest) takes the only copy of the
    # last entry number with it; the token regenerated afterwards starts from
    # the highest number the others saw, so the next entry repeats it. Mutual
    # exclusion and the single live token hold.
    rep = explore_faults(protocol, 2, 1, timeouts=1, restarts=1, boot=boot)
    assert rep["complete"]
    assert rep["mutual_exclusion"]["ok"] and rep["one_live_token"]["ok"], format_faults_report(rep)
    assert rep["failures"] == ["entry_numbers"]
    r = assert_replays(protocol, 2, rep, "entry_numbers", boot=boot)
    assert any(step.startswith("restart") for step in rep["entry_numbers"]["schedule"])
    seqs = [s for _, _, s in r["entries"]]
    assert seqs[-1] in seqs[:-1]  # the very number of an earlier entry
    assert r["failed"]  # ... whose board restarted: its request is reported failed


# FINDING, fixed: a board that restarts twice could be answered by a join of its
# previous incarnation (a join retry still in flight), which carries an epoch older
# than a claim that incarnation made; the new incarnation claimed again with the very
# same key (epoch, origin), the old claim came back, matched, and a second token was
# made while the first was alive. Shortest, S, token start, n=2, R=2 (16 steps, before
# the fix; the frames of the first restarted incarnation now carry its nonce, 1):
STALE_JOIN_TWO_CS = [
    "request 1",
    "deliver token 0->1 [count=0 state=0 seq=0 epoch=0]",  # node 1 enters
    "restart 0",  # node 0 fresh (and the starter): join J1
    "deliver join 0->1 [epoch=0 origin=0 seq=0 nonce=1]",
    "exit 1",  # the token (epoch 0) goes to node 0, behind J1
    "request 1",
    "timeout 0",  # fresh node 0 asks again: join J2
    "deliver join 0->1 [epoch=0 origin=0 seq=0 nonce=1]",  # J2 collects epoch 0 at node 1
    "deliver join 1->0 [epoch=0 origin=0 seq=1 nonce=1]",  # J1 back: epoch 0, the starter claims (1, 0)
    "deliver claim 0->1 [epoch=1 origin=0 seq=1 nonce=1]",  # node 1 adopts it, forwards it
    "deliver token 1->0 [count=0 state=0 seq=1 epoch=0]",  # node 0 keeps it (its claim's epoch)
    "deliver token 0->1 [count=0 state=0 seq=1 epoch=1]",  # node 1 enters
    "restart 0",  # node 0 fresh again (nonce 2)
    "deliver join 1->0 [epoch=0 origin=0 seq=1 nonce=1]",  # the OLD J2: was taken as its own answer
    "request 0",
    "deliver claim 1->0 [epoch=1 origin=0 seq=1 nonce=1]",  # the OLD claim (1, 0): was a second token
]


# Q's and D's take 4 s of exploration each: `cpu`, out of the fast tier
@pytest.mark.parametrize("protocol", ["s", pytest.param("q", marks=pytest.mark.cpu), pytest.param("d", marks=pytest.mark.cpu)])
def test_two_restarts_of_a_board_keep_one_token(protocol):
    # The join and claim carry the incarnation's nonce; a board ignores its own frames
    # of another incarnation (firmware/protocol.py, Node.boot and on_claim).
    rep = explore_faults(protocol, 2, 2, timeouts=1, restarts=2,
                         stop_on_violation=["mutual_exclusion", "one_live_token"])
    assert rep["mutual_exclusion"]["ok"] and rep["one_live_token"]["ok"], format_faults_report(rep)


def test_finding_stale_join_schedule_is_harmless_now():
    # The schedule still happens frame for frame, but the stale join and the stale claim
    # are stopped at the board's new incarnation: no second token, no second entry.
    r = replay_faults("s", 2, STALE_JOIN_TWO_CS)
    assert not [v for v in r["violations"] if v[1] in ("mutual_exclusion", "one_live_token")], r["violations"]
    assert [s for _, _, s in r["entries"]] == [1, 2]


@pytest.mark.parametrize("protocol", ["s", "q", "d"])
def test_lossy_mode_without_faults_is_the_fault_free_explorer(protocol):
    rep = explore_faults(protocol, 3, 1)
    assert rep["ok"] and rep["max_tokens"] == 1 and rep["counts"]["discards"] == 0
    assert rep["counts"]["regenerations"] == 0 and rep["counts"]["stale"] == 0
    # the same reachable states, seen through the fault-free explorer's fields
    lossy = LossyExplorer(protocol, 3, 1).build()
    free = Explorer(protocol, 3, 1).build()
    cut = lambda v: (v[L_PENDING], v[L_IN_CS], v[L_HAS_TOKEN], v[L_COUNT], v[L_STATE], v[L_FLAG])  # noqa: E731
    frame = lambda f: (f[1], f[2]) if f[0] == F_TOKEN else REQ  # noqa: E731
    a = {(tuple(cut(v) for v in nodes), tuple(tuple(frame(f) for f in q) for q in links), budget)
         for nodes, links, budget, _, _ in map(lossy.decode, lossy.states)}
    b = {(tuple(v[:6] for v in nodes), links, budget) for nodes, links, budget in free.states}
    assert a == b


def gate_out_of_sync(protocol, n, boot, **budgets):
    """The node attribute tuples of the reachable states (the lossy explorer, these fault
    budgets) whose open_epoch is not what protocol.Node.sync_gate makes of fresh, known_epoch
    and known_owner: every on_token's one comparison must say what the three would."""
    lossy = LossyExplorer(protocol, n, 1, boot=boot, **budgets).build()
    assert lossy.complete
    at = LOSSY_FIELDS.index("open_epoch")
    bad = set()
    for st in lossy.states:
        for v in lossy.decode(st)[0]:
            if v[at] != (-1 if v[L_FRESH] or v[L_KNOWN_OWNER] != OWNER_TOKEN else v[L_KNOWN_EPOCH]):
                bad.add(v)
    return bad


@pytest.mark.parametrize("protocol", ["s", "q", "d"])
def test_the_gates_one_comparison_agrees_with_its_three_fields_in_every_state(protocol):
    # boots, claims, joins, lost frames, a restart: every handler that writes the gate's fields
    assert gate_out_of_sync(protocol, 3, True, drops=1, timeouts=1) == set()
    assert gate_out_of_sync(protocol, 2, False, drops=1, timeouts=2, restarts=1) == set()


class QGateLeftOpen(NodeQ):
    """Q whose claim handler adopts a claim's key but leaves the gate as it was (a writer
    of known_owner that forgets sync_gate)."""

    name = "q-gate-left-open"

    def on_claim(self, epoch, origin, join, seq, nonce=0):
        was = self.open_epoch
        try:
            return NodeQ.on_claim(self, epoch, origin, join, seq, nonce)
        finally:
            self.open_epoch = was  # the bug


def test_a_writer_that_forgets_sync_gate_is_found():
    assert gate_out_of_sync(QGateLeftOpen, 2, False, timeouts=1)


# -- (2) planted bugs ---------------------------------------------------------------

class QClaimPassesHolder(NodeQ):
    """Q whose holder forgets the rule "a node that has the token stops a claim":
    it adopts and forwards the claim, its token keeping the old epoch."""

    name = "q-claim-passes-holder"

    def on_claim(self, epoch, origin, join, seq, nonce=0):
        if origin == self.index or join or not self.has_token:
            return NodeQ.on_claim(self, epoch, origin, join, seq, nonce)
        self.has_token = False  # the bug: the claim does not see the token
        try:
            return NodeQ.on_claim(self, epoch, origin, join, seq, nonce)
        finally:
            self.has_token = True


def accepts_old_epochs(base):
    """base whose epoch gate lets a token of an older epoch through (and takes
    its epoch as the one it knows)."""

    class AcceptsOldEpochs(base):
        name = base.name + "-accepts-old-epochs"

        def on_token(self, count, state, seq, epoch):
            if not self.fresh and newer(self.known_epoch, epoch):
                self.known_epoch = epoch  # the bug
                self.sync_gate()
            return base.on_token(self, count, state, seq, epoch)

    AcceptsOldEpochs.__name__ = base.__name__ + "AcceptsOldEpochs"
    return AcceptsOldEpochs


@pytest.mark.parametrize("n", [2, 3])
def test_planted_holder_forwarding_a_claim_is_two_tokens_and_two_critical_sections(n):
    rep = explore_faults(QClaimPassesHolder, n, 1, timeouts=1)
    assert not rep["one_live_token"]["ok"] and not rep["mutual_exclusion"]["ok"]
    assert rep["max_live_tokens"] == 2
    assert rep["mutual_exclusion"]["steps"] <= 2 * n + 4
    for key in ("one_live_token", "mutual_exclusion"):
        r = assert_replays(QClaimPassesHolder, n, rep, key)
        assert len(r["holders"]) == 2 or key == "one_live_token"
    sched = rep["mutual_exclusion"]["schedule"]
    assert sum(step.startswith("timeout") for step in sched) == 1
    assert not any(step.startswith(("drop", "restart")) for step in sched)
    # the same budgets on the real Q: nothing
    assert explore_faults("q", n, 1, timeouts=1)["ok"]


@pytest.mark.parametrize("base", [NodeS, NodeQ, NodeD], ids=["s", "q", "d"])
def test_planted_gate_accepting_old_epochs_is_found(base):
    # Under FIFO links a claim never passes the token, so the gate alone is not
    # what keeps one token: the bug shows when a node that accepted an old
    # token (and went back to its epoch) claims the same key (epoch, origin)
    # twice, and the first claim, still on its way, is taken for the second.
    cls = accepts_old_epochs(base)
    rep = explore_faults(cls, 2, 2, timeouts=2)
    assert not rep["one_live_token"]["ok"]
    r = assert_replays(cls, 2, rep, "one_live_token")
    assert r["holders"] or r["in_flight"]
    sched = rep["one_live_token"]["schedule"]
    assert sum(step.startswith("timeout") for step in sched) == 2
    assert explore_faults(base.name, 2, 2, timeouts=2)["ok"]


def test_replay_rejects_a_schedule_that_does_not_happen():
    rep = explore_faults(QClaimPassesHolder, 2, 1, timeouts=1)
    sched = list(rep["mutual_exclusion"]["schedule"])
    claim = next(k for k, s in enumerate(sched) if s.startswith("deliver claim"))
    bad = sched[:claim] + [sched[claim].replace("epoch=1", "epoch=7")] + sched[claim + 1:]
    with pytest.raises(ValueError):
        replay_faults(QClaimPassesHolder, 2, bad)
    with pytest.raises(ValueError):
        replay_faults("q", 2, ["timeout 0"])  # node 0 is not waiting


# -- (3) a fresh ring forms ----------------------------------------------------------

@pytest.mark.parametrize("protocol", ["s", "q", "d"])
@pytest.mark.parametrize("n, R", [(2, 1), (3, 0)])
def test_booting_ring_forms_with_timeouts_only(protocol, n, R):
    # Every node boots (its join in flight); timeouts may fire at any moment,
    # nothing is lost: a formed ring (every node joined, exactly one token, live)
    # is reachable, and still reachable from every state reached.
    rep = explore_faults(protocol, n, R, timeouts=2, boot=True, can_form=True)
    assert rep["ok"], format_faults_report(rep)
    fm = rep["formed"]
    assert fm["reachable"] and fm["from_every_state"]["all"]
    r = replay_faults(protocol, n, fm["schedule"], boot=True)
    assert r["violations"] == []
    assert not any(x.fresh or x.starting for x in r["nodes"])
    assert r["tokens"] == 1
    regen = sum(x.regenerated for x in r["nodes"])
    assert regen == 1  # the starter's first claim made the token


def test_a_lost_join_without_timeouts_left_can_stop_the_ring_forming():
    # Not a failure (liveness needs unbounded timeouts), but the analysis sees it.
    rep = explore_faults("s", 3, 0, drops=1, timeouts=0, boot=True, can_form=True)
    assert rep["ok"]
    d = rep["formed"]["from_every_state"]
    assert not d["all"] and any(step.startswith("drop join") for step in d["schedule"])


# -- the reductions and the options ----------------------------------------------------

def _summary(rep):
    keys = SAFETY + ("entry_epoch_numbers", "entry_numbers_completed")
    return (rep["failures"], {k: rep[k].get("steps") for k in keys}, rep["formed"].get("steps"),
            rep["max_tokens"], rep["max_live_tokens"])


@pytest.mark.parametrize("protocol, n, kw", [
    ("q", 2, dict(drops=1, timeouts=1, restarts=1)),
    ("d", 2, dict(drops=1, timeouts=1, restarts=1, boot=True)),
    (QClaimPassesHolder, 3, dict(drops=1, timeouts=1)),
])
def test_reductions_are_exact(protocol, n, kw):
    # dropped observers and dead fields, and drops only at a link's head, give the
    # same verdicts and the same shortest schedule lengths
    a = explore_faults(protocol, n, 1, **kw)
    b = explore_faults(protocol, n, 1, exact=True, **kw)
    c = explore_faults(protocol, n, 1, drop_anywhere=True, **kw)
    assert _summary(a) == _summary(b) == _summary(c)
    assert a["states"] < b["states"] and a["states"] < c["states"]


def test_stop_at_first_violation_and_state_budget():
    rep = explore_faults(QClaimPassesHolder, 3, 1, timeouts=1, stop_on_violation=True)
    full = explore_faults(QClaimPassesHolder, 3, 1, timeouts=1)
    assert not rep["complete"] and rep["states"] < full["states"]
    assert rep["mutual_exclusion"]["steps"] == full["mutual_exclusion"]["steps"]
    rep = explore_faults("q", 3, 1, drops=1, timeouts=2, max_states=500)
    assert rep["complete"] is False and not rep["ok"] and "state budget" in rep["error"]
    assert rep["failures"] == ["incomplete"]
    # a violation found before the budget runs out is still reported
    rep = explore_faults(QClaimPassesHolder, 3, 1, timeouts=1, max_states=3000)
    assert rep["budget_hit"] and "mutual_exclusion" in rep["failures"] and "incomplete" in rep["failures"]
    assert_replays(QClaimPassesHolder, 3, rep, "mutual_exclusion")
    # stop only at the invariants asked for
    rep = explore_faults("s", 2, 1, timeouts=1, restarts=1, stop_on_violation=["mutual_exclusion"])
    assert rep["complete"] and rep["failures"] == ["entry_numbers"]


def test_parse_faults():
    assert parse_faults("drop=1,timeout=2") == {"drops": 1, "timeouts": 2, "restarts": 0}
    assert parse_faults("restart=1, d=3") == {"drops": 3, "timeouts": 0, "restarts": 1}
    assert parse_faults("none") == {"drops": 0, "timeouts": 0, "restarts": 0}
    for bad in ("drop", "drop=-1", "loose=2", "timeout=x"):
        with pytest.raises(ValueError):
            parse_faults(bad)


def test_cli_explore_faults(capsys):
    assert main(["explore", "--faults", "drop=1,timeout=2", "-p", "q", "-n", "2", "-R", "1"]) == 0
    out = capsys.readouterr().out
    assert "faults: drop<=1 timeout<=2 restart<=0" in out
    assert "at most one live token: ok" in out and "verdict: ok" in out
    assert main(["explore", "--faults", "timeout=1,restart=1", "--boot", "-p", "s", "-n", "2"]) == 1
    out = capsys.readouterr().out
    assert "entry numbers strictly increasing (node.seq at each ENTER_CS): FAIL" in out
    assert "restart" in out
    assert main(["explore", "--faults", "timeout=1", "--boot", "--can-form", "-p", "d", "-n", "2"]) == 0
    out = capsys.readouterr().out
    assert "and still reachable (within the budgets left) from" in out and "verdict: ok" in out
    assert main(["explore", "--boot", "-p", "s", "-n", "2"]) == 2  # --boot needs --faults
