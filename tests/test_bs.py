"""System BinarySearch (firmware/proto_bs.py): its rules step by step, Lemma 6 over every
requester and holder of small rings, runs in the simulator, the node loop under MicroPython."""

import json
import math
import subprocess
import sys

import pytest

from picoring.firmware import proto_bs
from picoring.firmware.protocol import ENTER_CS, SEND_MSG, get30, make_node
from picoring.sim import simcore
from picoring.sim.simulate import simulate

GIMME, TOKEN = proto_bs.GIMME, proto_bs.TOKEN


class Net:
    """Nodes of one ring and an instant, FIFO network (the paper's complete graph): a test
    delivers messages one by one and sees each."""

    def __init__(self, n):
        self.n = n
        self.nodes = [make_node("bs", i, n) for i in range(n)]
        self.queue = []  # (src, dst, kind, payload)
        self.log = []  # delivered (src, dst, kind, payload)

    def act(self, i, a):
        if a & SEND_MSG:
            nd = self.nodes[i]
            self.queue.append((i, nd.out_dst, nd.out_kind, bytes(nd.out[:nd.out_len])))
        return a

    def step(self):
        src, dst, kind, payload = self.queue.pop(0)
        self.log.append((src, dst, kind, payload))
        buf = bytearray((7, 0, kind, src & 0xFF, dst & 0xFF)) + payload
        return self.act(dst, self.nodes[dst].on_message(kind, src, buf))

    def start(self):
        self.act(0, self.nodes[0].give_token())

    def rotate_to(self, p, rounds=2):
        """Run the rotating token until node p holds it in its critical section, after `rounds`
        rounds (so every history is a real one)."""
        target = rounds * self.n + p
        while True:
            src, dst, kind, payload = self.queue[0]
            if kind == TOKEN and get30(payload, 6) == target:
                self.nodes[dst].pending = True
                assert self.step() & ENTER_CS
                return
            self.step()


def gimme_fields(payload):
    return {"z": payload[0] | payload[1] << 8, "sn": payload[2], "h": get30(payload, 3),
            "lo": payload[7] | payload[8] << 8, "hi": payload[9] | payload[10] << 8}


def test_rule_5_a_gimme_goes_across_the_ring_with_the_requesters_history():
    net = Net(8)
    net.start()
    net.rotate_to(3)
    a = net.act(6, net.nodes[6].request())
    assert a == SEND_MSG and net.nodes[6].pending
    src, dst, kind, payload = net.queue[-1]
    assert (src, dst, kind) == (6, 2, GIMME)  # across: the middle of 1..7 from 6: 6 + 4 = 10 = 2 (mod 8)
    # Node 6 last passed the token in round 1 (count 8 + 6 + 1 = 15)
    assert gimme_fields(payload) == {"z": 6, "sn": 1, "h": 15, "lo": 1, "hi": 7} and net.nodes[6].rot[proto_bs._R_H] == 15


def test_rule_6_turns_by_the_prefix_comparison_of_histories():
    """Figure 8: (a) the token has been here since the requester saw it: clockwise; (b) it has
    not: counter-clockwise."""
    net = Net(16)
    net.start()
    net.rotate_to(10)  # token held at 10; node 2 asks: its gimme goes to 2 + 8 = 10
    net.act(2, net.nodes[2].request())
    net.queue.clear()
    net.act(5, net.nodes[5].request())  # 5 + 8 = 13: not visited since 5 saw it -> back 4 to 9
    net.step()
    assert net.queue[-1][:3] == (13, 9, GIMME) and gimme_fields(net.queue[-1][3])["hi"] == 7
    net.queue.clear()
    net.act(1, net.nodes[1].request())  # 1 + 8 = 9: visited since -> on 4 to 13
    net.step()
    assert net.queue[-1][:3] == (9, 13, GIMME)


def test_rules_7_and_8_the_token_is_lent_to_a_trapped_requester_and_returned():
    net = Net(8)
    net.start()
    net.rotate_to(4)
    net.act(1, net.nodes[1].request())
    while net.queue:  # the search: 1 -> 5 (behind? no: 5 not visited since 1 saw it) ... ends at 4's trap
        net.step()
    holder = net.nodes[4]
    assert holder.rot[proto_bs._R_FIFO_LEN] == 1 and holder.trap_h[1] == net.nodes[1].rot[proto_bs._R_H]
    net.act(4, holder.exit_cs())  # rule 7: lent to 1, "to be returned upon use"
    src, dst, kind, payload = net.queue[-1]
    assert (src, dst, kind, payload[10] & 1) == (4, 1, TOKEN, 1) and holder.rot[proto_bs._R_FIFO_LEN] == 0  # lend
    assert net.step() & ENTER_CS and net.nodes[1].lender == 4  # rule 8: 1 uses it
    net.act(1, net.nodes[1].exit_cs())
    src, dst, kind, payload = net.queue[-1]
    assert (src, dst, kind, payload[10] & 1) == (1, 4, TOKEN, 0)  # back to the lender
    served = [(payload[k] | payload[k + 1] << 8, payload[k + 2]) for k in range(13, len(payload), 3)]
    assert served == [(4, 0), (1, 1)] and payload[10] >> 1 == 2  # the served list: 4's own use, then 1's request 1
    assert len(payload) == 13 + 3 * 2 and payload[11:13] == bytes(2)  # its age: no rotation since
    net.step()  # 4 has it back: no trap left, rule 4 passes it on
    assert net.queue[-1][:3] == (4, 5, TOKEN)


def test_a_trap_of_a_served_request_is_garbage_collected():
    net = Net(8)
    net.start()
    net.rotate_to(4)
    node = net.nodes[6]
    # A trap at 6 for request 1 of node 2, which the token's served list names: dropped, no lend.
    buf = bytearray((7, 0, GIMME, 2, 6)) + bytes((2, 0, 1)) + bytes(4) + bytes((4, 0, 4, 0))  # lo = hi = 4: ends here
    node.on_message(GIMME, 2, buf)
    assert node.rot[proto_bs._R_FIFO_LEN] == 1
    net.nodes[4].sv_node[0] = 2
    net.nodes[4].sv_sn[0] = 1
    net.act(4, net.nodes[4].exit_cs())
    net.step()  # 5: passes it on
    net.step()  # 6: the trap is stale
    assert node.rot[proto_bs._R_FIFO_LEN] == 0 and net.queue[-1][:3] == (6, 7, TOKEN)


def test_the_served_list_goes_with_the_token_for_n_passes_then_expires():
    """Only live entries travel: the idle token is 11 payload bytes; an entry makes it 13 + 3k
    with the list's age, one more at each rule-4 pass, and the pass that makes the age n drops
    the list (the round rule drops the traps it names from then on: proto_bs.py's header)."""
    n = 8
    net = Net(n)
    net.start()
    assert len(net.queue[0][3]) == 11 and net.queue[0][3][10] == 0
    net.rotate_to(4)
    net.act(4, net.nodes[4].exit_cs())
    ages = []
    for _ in range(n):
        src, dst, kind, payload = net.queue[0]
        assert kind == TOKEN and dst == (src + 1) % n
        ages.append((len(payload), payload[10], payload[11] | payload[12] << 8 if len(payload) > 11 else None))
        net.step()
    assert ages == [(16, 2, age) for age in range(1, n)] + [(11, 0, None)]
    assert all(not x.sv_len and x.sv_node[0] == 0xFFFF for x in net.nodes)  # cleared wherever it went


def test_no_lists_expire_where_the_round_rule_drops_nothing():
    """The explorer's histories modulo 16 (half 8) on a ring of 8: the round rule never drops a
    trap (n <= d < 8 is empty), so the list never expires; its age wraps with the histories."""
    n = 8
    net = Net(n)
    for x in net.nodes:
        x.rot[proto_bs._R_HMASK], x.rot[proto_bs._R_HHALF] = 15, 8
        x.rot[proto_bs._R_H] &= 15
    net.start()
    net.nodes[4].pending = True
    while not net.step() & ENTER_CS:
        pass
    net.act(4, net.nodes[4].exit_cs())
    for _ in range(5 * n):
        net.step()
    payload = net.queue[0][3]
    assert payload[10] == 2 and (payload[11] | payload[12] << 8) == (5 * n + 1) & 15


@pytest.mark.parametrize("n", [3, 5, 8, 13])
def test_the_lists_expiry_changes_no_run(monkeypatch, n):
    """Expiry drops nothing the round rule would not: in the simulator (full counters), every
    run gives the same report, trap for trap and lend for lend, as the same run with the lists
    never expiring, while the lists do expire on the way (a list long enough never to overflow,
    so that the entries' only way out is expiry)."""
    monkeypatch.setattr(proto_bs, "SERVED_SLOTS", 32)
    lends, expired = [], [0]
    give, relay, rotate = proto_bs.NodeBS._give, proto_bs.relay_rotation, proto_bs.NodeBS._rotate

    def give_counted(self, j, lend):
        if lend:
            lends.append((self.index, j, self.trap_sn[j], self.rot[proto_bs._R_RND]))  # rule 7
        return give(self, j, lend)

    def relay_counted(out, buf, epoch, hmask, hhalf, ring):
        size = relay(out, buf, epoch, hmask, hhalf, ring)
        expired[0] += buf[proto_bs._AT + proto_bs._T_FLAGS] >> 1 and size == 11
        return size

    def relay_never_expiring(out, buf, epoch, hmask, hhalf, ring):
        return relay(out, buf, epoch, hmask, hhalf, hmask + 1)  # (no age is hmask + 1 or more)

    def rotate_never_expiring(self):
        self.sv_age = self.rot[proto_bs._R_HMASK]  # one more is 0: never n
        return rotate(self)

    monkeypatch.setattr(proto_bs.NodeBS, "_give", give_counted)
    for workload, kw in WORKLOADS + [("poisson", {"rate": 0.5})]:
        runs = []
        for never in (False, True):
            monkeypatch.setattr(proto_bs, "relay_rotation", relay_never_expiring if never else relay_counted)
            monkeypatch.setattr(proto_bs.NodeBS, "_rotate", rotate_never_expiring if never else rotate)
            lends.clear()
            r = simulate("bs", n, workload=workload, requests=150, seed=3, **kw)
            assert r["ok"] and r["served"] == 150, r["violations"][:3]
            runs.append((r, list(lends)))
        assert runs[0] == runs[1], workload
    assert expired[0] > 0

def lemma6_paths(n):
    """For every holder p (in its critical section, the token not moving) and every requester
    z: the gimme's path, as the nodes it reaches."""
    out = {}
    for p in range(n):
        for z in range(n):
            if z == p:
                continue
            net = Net(n)
            net.start()
            net.rotate_to(p)
            net.act(z, net.nodes[z].request())
            path = []
            while net.queue:
                src, dst, kind, payload = net.queue[0]
                assert kind == GIMME
                path.append(dst)
                net.step()
            out[p, z] = path
    return out


@pytest.mark.parametrize("n", list(range(2, 18)) + [31, 32, 33])
def test_lemma_6_the_search_reaches_a_token_that_does_not_move_within_ceil_log2_n_forwards(n):
    """Lemma 6: "If the token does not move, i.e., Rule 4 is not invoked, then within log N
    message cycles, a search message will reach the node that has the token": the last gimme
    reaches the holder, after at most ceil(log2 n) forwards (rule 6) beyond rule 5's."""
    bound = math.ceil(math.log2(n))
    for (p, z), path in lemma6_paths(n).items():
        assert path and path[-1] == p, (n, p, z, path)
        assert len(path) - 1 <= bound, (n, p, z, path)


@pytest.mark.parametrize("n", [3, 8, 13, 17, pytest.param(33, marks=pytest.mark.cpu)])  # 33: 2 s, `cpu`
def test_the_checker_counts_each_requests_forwards_in_every_run(n, tmp_path):
    """Lemma 6 per request, as the checker reads it from the gimmes (the descriptor's "search"):
    at most ceil(log2 n) - 1 forwards after rule 5's gimme, whatever the token does meanwhile
    (the search interval halves at each forward), reached; the trace's check counts the same."""
    from picoring.check.checker import check_trace

    bound = (n - 1).bit_length() - 1
    worst = 0
    for workload, kw in (("sequential", {}), ("poisson", {"rate": 0.5}), ("burst", {}), ("adversarial", {})):
        trace = tmp_path / ("%s.jsonl" % workload)
        r = simulate("bs", n, workload, requests=150, seed=2, trace=str(trace), **kw)
        assert r["ok"] and r["max_forwards_per_request"] <= bound, r["violations"][:2]
        assert "forwards_per_request" not in r["over_paper_fairness"]
        assert check_trace(str(trace))[1]["max_forwards_per_request"] == r["max_forwards_per_request"]
        worst = max(worst, r["max_forwards_per_request"])
    assert worst == bound


def test_a_search_forwarded_beyond_lemma_6_is_a_bound_violation():
    from picoring.check.checker import Checker
    from picoring.check.trace import Event

    def gimme(t, src, z, sn):
        return Event(t, "send", src, src, "msg", {"mkind": proto_bs.GIMME, "src": src, "dst": 0, "hop": 1,
                                                  "seq": z | sn << 16, "epoch": 0, "fwd": False})

    n = 8  # the bound: ceil(log2 8) - 1 = 2 forwards; the paper's: 3
    c = Checker("bs", n)
    c.feed(Event(0, "req", 1))
    c.feed(gimme(0, 1, 1, 7))  # rule 5
    c.feed(gimme(1, 4, 1, 6))  # an old request's gimme, still travelling: not this one's
    for t, y in ((2, 5), (3, 6), (4, 7), (5, 0)):  # rule 6, four times
        c.feed(gimme(t, y, 1, 7))
    c.feed(Event(6, "enter", 1, payload={"seq": 1, "epoch": 0}))
    c.feed(Event(7, "exit", 1))
    r = c.finish()
    assert r["max_forwards_per_request"] == 4 and r["over_paper_fairness"]["forwards_per_request"] == 1
    assert [v["message"] for v in r["violations"]] == ["request #1 (node 1): its search was forwarded 4 times > bound 2"]
    assert Checker("q", n).finish()["max_forwards_per_request"] is None  # no search declared


WORKLOADS = [("sequential", {}), ("poisson", {}), ("burst", {}), ("adversarial", {})]


@pytest.mark.parametrize("workload,kw", WORKLOADS)
@pytest.mark.parametrize("n", [2, 3, 8, 13])
def test_every_request_is_served_safely_in_the_simulator(workload, kw, n):
    r = simulate("bs", n, workload=workload, requests=120, seed=1, **kw)
    assert r["ok"], r["violations"][:3]
    assert r["served"] == r["requests"] == 120 and r["protocol_errors"] == 0


def test_the_paper_model_is_one_time_unit_per_message():
    """simcore's complete=True: a gimme across the ring takes one unit, not n/2 hops."""
    from picoring.check.checker import Checker
    from picoring.sim.workload import make_workload

    n = 64
    lat = {}
    for complete in (False, True):
        nodes = [make_node("bs", i, n) for i in range(n)]
        wl = make_workload("sequential", n, 40, seed=0, cs_time=0)
        c = Checker("bs", n)
        simcore.run(nodes, wl, 0, c, idle_horizon=4 * n, complete=complete)
        rep = c.finish()
        assert rep["served"] == 40 and not rep["safety_violations"]
        lat[complete] = rep["latency"]["max"]
    # The paper's model: the search and the lend take at most 1 + ceil(log2 n) + 1 units.
    assert lat[True] <= math.ceil(math.log2(n)) + 2 < lat[False]


@pytest.mark.slow
def test_the_node_loop_runs_it_alike_under_micropython_and_cpython(micropython):
    from conftest import FIRMWARE, ROOT, run_micropython

    driver = str(ROOT / "tests" / "mp_layer_driver.py")
    mp = json.loads(run_micropython(micropython, driver, str(FIRMWARE), "bs"))
    cp = json.loads(subprocess.run([sys.executable, driver, str(FIRMWARE), "bs"], capture_output=True, text=True,
                                   check=True, timeout=60).stdout)
    assert mp["impl"] == "micropython" and cp["impl"] == "cpython"
    assert mp["results"] == cp["results"]
    res = mp["results"]
    assert all(e == [0] * 5 for e in (s["errors"] for s in res.values()))
    assert sum(res["all"]["tx"]) > 0 and res["bad"]["bad"] == [0, 0, 2, 0, 0]


@pytest.mark.slow
@pytest.mark.parametrize("n", [3, 32])
def test_the_node_loop_allocates_nothing_under_micropython(micropython, n):
    from conftest import FIRMWARE, ROOT, run_micropython

    out = run_micropython(micropython, str(ROOT / "tests" / "mp_node_bench.py"), str(FIRMWARE), "bs", str(n), "300",
                          "1", "1", "lock")
    assert out.strip() == "no allocation in 300 rounds"


# -- the claims: Theorem 2 (responsiveness), Theorem 3 (fairness), the explorer ------------


def _run(n, items, cs_time, complete=True):
    from picoring.check.checker import Checker
    from picoring.sim.workload import Schedule

    nodes = [make_node("bs", i, n) for i in range(n)]
    c = Checker("bs", n)
    simcore.run(nodes, Schedule(n, items, defer_busy=True), cs_time, c, idle_horizon=2 * n, starve_horizon=10 ** 6,
                complete=complete)
    return c.finish()


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 16, 32, 64])
def test_theorem_2_a_lone_request_gets_the_token_within_log2_n_plus_2_units(n):
    """Thm 2 (responsiveness O(log N)) in the paper's model: a request made while the token
    rotates freely, at every phase of the rotation, gets it within ceil(log2 n) + 2 units
    (the search: at most ceil(log2 n) messages; the token bumps into a trap as it moves; the lend:
    one). Reached from n = 8 on; below, one unit less (docs/bounds.md)."""
    worst = max(_run(n, [(t0, 0)], 0)["latency"]["max"] for t0 in range(2 * n, 3 * n))
    bound = (n - 1).bit_length() + 2
    assert worst <= bound
    assert worst == (bound if n >= 8 else bound - 1)


def test_theorem_3_fails_more_than_n_entries_by_others_while_one_request_waits():
    """Thm 3: "no more than N possessions of the token by other nodes" while a node waits. The
    smallest counterexample found (random search over n <= 6, up to 8 requests): n = 3, six
    requests, a critical section of one unit, the paper's network. Node 2 asks at t = 4 and waits
    while 1, 0, 1, 0 enter: 4 > 3. Its only trap (at 0) was laid while 0 had lent the token to 1;
    0 then passed it on, and 0 and 1, asking again at once, found each other's traps (docs/bounds.md)."""
    items = [(0, 0), (1, 1), (2, 0), (4, 2), (6, 1), (7, 0)]
    r = _run(3, items, 1)
    assert r["ok"] and r["served"] == 6
    assert r["max_overtaken"] == 4 > 3 and r["over_paper_fairness"] == {"overtaken": 1}
    # on the physical ring (a gimme d hops, a lend a full circuit) the same schedule fails alike
    assert _run(3, items, 1, complete=False)["max_overtaken"] == 4


def test_the_explorer_n3_every_schedule_is_safe_and_serves_every_request():
    from picoring.explore.search import explore

    rep = explore("bs", 3, 1)
    assert rep["complete"] and rep["ok"]
    for key in ("safety", "token_integrity", "deadlock", "starvation", "served"):
        assert rep[key]["ok"], key
    assert rep["livelock"]["by_design"]  # the token rotates for ever (rule 4)
    assert rep["overtaken"]["worst"] == 2  # one request per node: at most the two others
    assert rep["service_traffic_logical"]["worst"] == 9
    # Lemma 6 per request, over every schedule (the token moving too): ceil(log2 3) - 1 forwards
    assert rep["forwards_per_request"] == {"paper_bound": 2, "checked_bound": 1, "exact": True, "worst": 1,
                                           "node": rep["forwards_per_request"]["node"],
                                           "schedule": rep["forwards_per_request"]["schedule"], "within_checked": True}


def test_the_explorer_shows_a_request_forwarded_more_often_than_a_claim_allows(monkeypatch):
    # The same n = 3 graph held to a claim of no forward at all: the explorer finds the schedule
    # in which a request's gimme is sent on once, and fails the checked bound with it.
    import copy

    from picoring.explore.search import explore, format_report

    about = copy.deepcopy(proto_bs.NodeBS.about)
    about["bounds"]["forwards_per_request"]["checked"] = "0"
    monkeypatch.setattr(proto_bs.NodeBS, "about", about)
    rep = explore("bs", 3, 1)
    fw = rep["forwards_per_request"]
    assert fw["worst"] == 1 and fw["within_checked"] is False and not rep["ok"]
    assert "checked forwards-per-request bound" in rep["failures"]
    # the schedule: node z's request, then another node sends z's gimme on
    assert ("request %d" % fw["node"]) in fw["schedule"] and "kind=0 from=%d" % fw["node"] in " ".join(fw["schedule"])
    text = format_report(rep)
    assert "forwards of one request's search (Lemma 6): worst 1  (paper 2, checked 0)" in text
    assert "reached by node %d" % fw["node"] in text


# -- on a ring of boards (virtual by default; --ring-ports for Picos) -------------------------


@pytest.mark.slow
def test_on_a_ring_of_boards_each_message_takes_the_simulators_hop_frames(ring, tmp_path):
    """The token never rests, so a run's totals depend on how long it lasts, not only on its
    schedule; what the simulator fixes is each message's cost: a message to a node d ahead is d
    hop frames (a gimme "counter-clockwise by d" n - d). Every delivery on the boards came after
    exactly that many hops, and the hop frames sent are the delivered messages' (and those still
    on their way at the end: the rotating token's, fewer than n)."""
    import json as _json

    from picoring.sim.workload import make_workload

    n, k = ring.n, 4
    ring.flash("bs", 0)
    trace = tmp_path / "bs.jsonl"
    run = ring.make_run(ring.ports, "bs", make_workload("sequential", n, k, seed=2), trace=str(trace), seed=2)
    try:
        run.connect()
        report = run.run()
    finally:
        run.close()
    assert report["ok"], (report["violations"], report.get("run_conditions"))
    assert report["served"] == k and report["safety_violations"] == 0 and report["causal_forced"] == 0
    sends = delivered_hops = 0
    gimmes = 0
    with open(trace, encoding="utf-8") as f:
        for line in f:
            e = _json.loads(line)
            if e.get("kind") != "msg":
                continue
            p = e["payload"]
            if e["ev"] == "send":
                sends += 1
            elif p["dst"] == e["node"]:
                assert p["hop"] == (p["dst"] - p["src"]) % n, e
                delivered_hops += p["hop"]
                gimmes += p["mkind"] == GIMME
    assert gimmes >= k  # rule 5: each request sends one, rule 6 forwards it
    assert 0 <= sends - delivered_hops < n
