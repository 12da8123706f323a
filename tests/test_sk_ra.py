"""Suzuki-Kasami's broadcast algorithm (firmware/proto_sk.py, `sk`) and Ricart-Agrawala's token
algorithm (firmware/proto_ra.py, `ra`) on the ring's message layer: the slides' claims as exact
counts in the simulator and on virtual boards, the synchronisation delay, the rules step by
step, 30-bit wrapping, the payload sizes, and the recovery hooks.

The slides' claims (seeds/suzuki-kasami-broadcast-slides.md, Performance; seeds/token-request-
algorithms-slides-de.md, "Ricart / Agrawala 1983"): N messages per critical section (N - 1
requests + 1 token) when the requester does not hold the token, 0 when it holds the idle token;
synchronisation delay 0 or T. On the ring the N - 1 requests are one broadcast frame going once
round: n hop frames (the last one back to its sender, which takes it off, docs/frames.md) and
n - 1 deliveries; the token is one message of d hops, d its distance from the holder to the
requester. So per request: N = n deliveries (the slides' count), 2 logical messages (the
layer's count: a broadcast is one message), n + d hop frames (docs/bounds.md)."""

import pytest

from conftest import why_not_ok
from picoring.firmware import protocol
from picoring.firmware.protocol import BROADCAST, ENTER_CS, SEND_AGAIN, SEND_MSG, SEQ_MASK, make_node
from picoring.sim.simulate import simulate

BOTH = ("sk", "ra")
TOKEN, REQUEST = 1, 0  # both protocols' message kinds


def per_request(protocol_name, n, workload, requests, seed, cs_time=1):
    """For each request of a closed-loop run (the next request only once the ring is quiet):
    (requester, holder when it asked, hop frames, logical messages, deliveries) until the next."""
    events = []
    rep = simulate(protocol_name, n, workload, requests=requests, seed=seed, cs_time=cs_time, listener=events.append)
    assert rep["ok"] and rep["quiescent"], rep["violations"]
    out = []
    holder = 0
    for e in events:
        if e.ev == "req":
            out.append([e.node, holder, 0, 0, 0])
        elif e.kind == "msg" and e.ev == "send":
            out[-1][2] += 1
            out[-1][3] += 0 if e.payload["fwd"] else 1
        elif e.kind == "msg" and e.ev == "recv":
            p = e.payload
            if p["dst"] == e.node or (p["dst"] == BROADCAST and p["src"] != e.node):
                out[-1][4] += 1
                if p["mkind"] == TOKEN:
                    holder = e.node
    assert len(out) == requests
    return out, rep


@pytest.mark.parametrize("name", BOTH)
@pytest.mark.parametrize("workload", ["sequential", "adversarial"])
@pytest.mark.parametrize("n", [2, 3, 5, 8, 13])
@pytest.mark.parametrize("cs_time", [0, 1, 3])
def test_n_messages_per_critical_section_exactly(name, workload, n, cs_time):
    rows, rep = per_request(name, n, workload, 40, seed=n + cs_time, cs_time=cs_time)
    for r, h, hops, logical, delivered in rows:
        if r == h:  # the idle token is here: "no message is needed"
            assert (hops, logical, delivered) == (0, 0, 0)
        else:  # N - 1 REQUESTs + 1 token: one broadcast round (n hops) and the token's d hops
            d = (r - h) % n
            assert (delivered, logical, hops) == (n, 2, n + d), (r, h)
    if workload == "adversarial":  # behind the token: d = n - 1, every time
        assert all(r == (h - 1) % n for r, h, *_ in rows)
        assert rep["hop_frames"] == 40 * (2 * n - 1) and rep["logical_messages"] == 80
    # The requester waits for its broadcast to reach the holder and the token to come back:
    # once round the ring, n hop times, whoever holds the token.
    assert rep["latency"]["max"] == (n if any(r != h for r, h, *_ in rows) else 0)


@pytest.mark.parametrize("name", BOTH)
def test_sequential_exercises_both_cases(name):
    rows, _ = per_request(name, 3, "sequential", 60, seed=1)
    assert any(r == h for r, h, *_ in rows) and any(r != h for r, h, *_ in rows)


@pytest.mark.parametrize("name", BOTH)
@pytest.mark.parametrize("workload,kw", [("poisson", {"rate": 1.0}), ("poisson", {"rate": 0.05}), ("burst", {})])
@pytest.mark.parametrize("n", [3, 6, 11])
def test_synchronisation_delay_is_0_or_t(name, workload, kw, n):
    """After an exit that sends the token on, the next entry is the token's addressee's, exactly
    d hop times later (T: one message delay, d hops on the ring); an entry with no token
    message before it is a request at the idle holder, which enters at once (delay 0). From
    an exit that leaves an earlier request waiting whose broadcast has not reached the holder
    yet, the next entry comes within max(n - 1, 2n - 4) hop times: docs/bounds.md and
    test_sync_delay_exceeds_one_message_when_the_holder_has_not_heard_the_request."""
    events = []
    rep = simulate(name, n, workload, requests=150, seed=n, cs_time=2, listener=events.append, **kw)
    assert rep["ok"] and rep["served"] == 150, rep["violations"]
    pending_token = None  # (t sent, from, to) of the token message on its way
    last_req = {}
    waiting = {}  # node -> time of its request not yet entered
    deadline = None  # an exit left an earlier request waiting: the next entry by then
    seen_t, seen_0, seen_wait = 0, 0, 0
    for e in events:
        if e.ev == "exit" and any(t < e.t for t in waiting.values()):
            deadline = e.t + max(n - 1, 2 * n - 4)
        if e.ev == "req":
            last_req[e.node] = e.t
            waiting[e.node] = e.t
        elif e.ev == "send" and e.kind == "msg" and e.payload["mkind"] == TOKEN and not e.payload["fwd"]:
            assert pending_token is None
            pending_token = (e.t, e.node, e.payload["dst"])
        elif e.ev == "enter":
            del waiting[e.node]
            if deadline is not None:
                assert e.t <= deadline
                deadline = None
                seen_wait += 1
            if pending_token is None:
                assert e.t == last_req[e.node]  # the idle token was here: 0
                seen_0 += 1
            else:
                t, i, j = pending_token
                assert e.node == j and e.t - t == (j - i) % n  # T = d hops
                pending_token = None
                seen_t += 1
    assert seen_t > 0 and seen_wait > 0 and seen_0 + seen_t == 150


def sync_delays(name, n, schedule, cs_time):
    """(exit time, next entry time, its node) for every exit that left a request made before
    it waiting, and the order the nodes entered in."""
    from picoring.sim.workload import Schedule

    events = []
    rep = simulate(name, n, Schedule(n, schedule), cs_time=cs_time, listener=events.append)
    assert rep["ok"] and rep["quiescent"], rep["violations"]
    waiting, out, order, exit_t = {}, [], [], None
    for e in events:
        if e.ev == "exit":
            exit_t = e.t if any(t < e.t for t in waiting.values()) else None
        elif e.ev == "req":
            waiting[e.node] = e.t
        elif e.ev == "enter":
            del waiting[e.node]
            order.append(e.node)
            if exit_t is not None:
                out.append((exit_t, e.t, e.node))
                exit_t = None
    return out, order


@pytest.mark.parametrize("name", BOTH)
def test_sync_delay_exceeds_one_message_when_the_holder_has_not_heard_the_request(name):
    """Finding (docs/bounds.md): "0 or T" assumes the holder knows of the waiting request when
    it leaves. Smallest schedule (exhaustive over n <= 4, up to 3 requests at times 0..2,
    critical sections 0..2): n = 4, node 1 asks at t=0, node 0 (the holder) asks at t=1 and
    leaves at once; node 1's broadcast is still 2 hops from node 0. Node 3 asks at t=1; its
    broadcast reaches node 0 first (1 hop), and the token goes 3 hops to node 3: the next
    entry 4 hop times after the exit, more than any one message takes (3)."""
    delays, order = sync_delays(name, 4, [(0, 1), (1, 0), (1, 3)], 0)
    assert delays[0] == (1, 5, 3) and order == [0, 3, 1]
    # The worst: 2n - 4 hop times for n >= 4 (the derivation is in docs/bounds.md).
    for n in range(4, 9):
        delays, _ = sync_delays(name, n, [(0, 0), (0, 1), (n - 3, n - 1)], 1)
        assert max(b - a for a, b, _ in delays) == 2 * n - 4


def test_ra_longest_waiting_means_longest_known_to_the_holder():
    """Finding (docs/bounds.md): rule 5's "the process that has waited longest" can only be
    among the requests the holder has registered. Smallest schedule (exhaustive over n <= 4,
    up to 3 requests at times 0..2): n = 4, node 1 asks at t=0, node 3 at t=1; the token rests
    at node 0, which hears node 3 first (1 hop; node 1's broadcast needs 3): node 3 is
    served first. Their stamps are equal (concurrent requests), so the clock's order is kept."""
    _, order = sync_delays("ra", 4, [(0, 1), (1, 3)], 0)
    assert order == [3, 1]
    _, order = sync_delays("ra", 3, [(0, 1), (1, 2)], 0)
    assert order == [1, 2]  # n = 3: node 1's broadcast (2 hops) arrives with node 2's, ahead of it


@pytest.mark.parametrize("name", BOTH)
@pytest.mark.parametrize("workload", ["poisson", "burst", "sequential", "adversarial"])
def test_the_descriptors_bounds_hold(name, workload):
    n = 7
    rep = simulate(name, n, workload, requests=300, seed=5)
    assert rep["ok"] and rep["served"] == 300 and rep["quiescent"], rep["violations"]
    assert rep["bounds"]["logical_per_request"] == 2 and rep["bounds"]["messages_per_request"] == 2 * n - 1
    assert rep["logical_messages"] <= 2 * 300 and rep["hop_frames"] <= (2 * n - 1) * 300


@pytest.mark.slow
@pytest.mark.parametrize("name", BOTH)
@pytest.mark.parametrize("workload", ["sequential", "adversarial"])
def test_on_a_ring_the_counts_are_the_simulators(ring, name, workload):
    """Through the pytest plugin's ring (virtual boards by default; real or emulated Picos with
    --ring-ports): flash copies the protocol's module from the registry, and both counts, the
    service traffic and the fairness equal the simulator's, request for request."""
    n, k = ring.n, 10
    report = ring.run(name, workload, k, seed=3)
    assert report["ok"], why_not_ok(report)
    assert report["served"] == k and report["events_lost"] == 0 and report["safety_violations"] == 0
    sim = simulate(name, n, workload, requests=k, seed=3)
    for key in ("messages", "hop_frames", "logical_messages", "max_service_traffic", "max_service_logical",
                "max_overtaken"):
        assert report[key] == sim[key], key
    if workload == "adversarial":  # behind the token: a broadcast round and n - 1 token hops
        assert (report["hop_frames"], report["logical_messages"]) == (k * (2 * n - 1), 2 * k)


def test_payloads_fit_a_message_at_32_boards_and_beyond():
    """Token payload: SK 6 + 4n + 1 + (n - 1) bytes (LN and Q), RA 6 + 4n (LV); a message
    carries at most 246 bytes (docs/frames.md)."""
    for name, size in (("sk", lambda n: 6 + 5 * n), ("ra", lambda n: 6 + 4 * n)):
        node = make_node(name, 0, 32)
        assert node.msg_sizes[REQUEST] == 4 and node.msg_sizes[TOKEN] == size(32) <= protocol.MSG_MAX_PAYLOAD
        assert len(node.out) == size(32)
    assert make_node("sk", 0, 48).msg_sizes[TOKEN] == 246
    with pytest.raises(ValueError, match="at most 246 bytes"):
        make_node("sk", 0, 49)
    assert make_node("ra", 0, 60).msg_sizes[TOKEN] == 246
    with pytest.raises(ValueError, match="at most 246 bytes"):
        make_node("ra", 0, 61)


@pytest.mark.parametrize("name", BOTH)
def test_32_boards_run_in_the_simulator(name):
    rep = simulate(name, 32, "poisson", requests=400, seed=2, rate=0.5)
    assert rep["ok"] and rep["served"] == 400 and rep["quiescent"], rep["violations"]


# -- the rules step by step ------------------------------------------------------------


def _deliver(node, sender, kind=None):
    """Hand sender's outgoing message to node as the node loop would (payload at PAYLOAD_AT)."""
    buf = bytearray(protocol.PAYLOAD_AT) + bytes(sender.out[:sender.out_len])
    return node.on_message(sender.out_kind if kind is None else kind, sender.index, buf)


def _request(node, src, sn):
    """REQUEST(src, sn) delivered to node, built by hand (a late or repeated one)."""
    buf = bytearray(protocol.PAYLOAD_AT + 4)
    protocol.put30(buf, protocol.PAYLOAD_AT, sn)
    return node.on_message(REQUEST, src, buf)


def test_sk_rules_a_to_f():
    n = 4
    a, b, c, d = (make_node("sk", i, n) for i in range(n))
    a.give_token()
    assert a.request() == ENTER_CS  # the idle token: 0 messages, RN_a[a] unchanged
    # (a) b asks: RN_b[b] = 1, REQUEST(b, 1) to all
    assert b.request() == SEND_MSG and b.out_dst == BROADCAST and b.rn[1] == 1
    # (b) a, in its CS, registers it and keeps the token until the end of its CS
    assert _deliver(a, b) == 0 and a.rn[1] == 1 and a.has_token
    assert d.request() == SEND_MSG
    assert _deliver(a, d) == 0 and a.rn[3] == 1
    # (d) LN[a] = RN_a[a] = 0; (e) b and d appended in ring order after a; (f) the head, b, gets it
    assert a.exit_cs() == SEND_MSG and a.out_dst == 1 and a.out_kind == TOKEN and not a.has_token
    assert list(a.ln) == [0, 0, 0, 0] and a.qlen == 0 and bytes(a.q) == bytes(4)  # LN and Q left with it
    assert a.out[6 + 4 * 4] == 1 and a.out[6 + 4 * 4 + 1] == 3  # the token carries |Q| = 1: d
    assert _deliver(c, b) == 0 and c.rn[1] == 1
    assert _deliver(b, a) == ENTER_CS and b.qlen == 1 and b.q[0] == 3 and b.seq == 2
    # (d) LN[b] = 1; (e) d is in Q already: not appended twice; (f) the head, d
    assert b.exit_cs() == SEND_MSG and b.out_dst == 3
    assert _deliver(d, b) == ENTER_CS and d.qlen == 0 and list(d.ln) == [0, 1, 0, 0]
    assert d.exit_cs() == 0 and d.has_token and list(d.ln) == [0, 1, 0, 1]  # nobody waits: idle
    # b's REQUEST(b, 1) reaches d only now: outdated (RN_d[b] = 1 = LN[b]), not served
    assert _request(d, 1, 1) == 0 and d.rn[1] == 1 and d.has_token
    # ... and an older one than RN_d[b] leaves RN_d[b] as it is: max(RN, n)
    assert _request(d, 1, 0) == 0 and d.rn[1] == 1
    # (b) a current request at the idle holder: the token goes straight to it
    assert c.request() == SEND_MSG
    assert _deliver(d, c) == SEND_MSG and d.out_dst == 2 and d.out_kind == TOKEN


def test_ra_serves_the_longest_waiting_and_breaks_ties_in_ring_order():
    n = 5
    nodes = [make_node("ra", i, n) for i in range(n)]
    h = nodes[0]
    h.give_token()
    assert h.request() == ENTER_CS
    # 3 asks first (stamp 1); 1 and 4 hear it, then ask (stamp 2 each: concurrent with each other)
    assert nodes[3].request() == SEND_MSG and nodes[3].rq[3] == 1
    for j in (1, 4):
        assert _deliver(nodes[j], nodes[3]) == 0 and nodes[j].clock == 1
    for j in (4, 1):
        assert nodes[j].request() == SEND_MSG and nodes[j].rq[j] == 2
    for j in (4, 1, 3):
        assert _deliver(h, nodes[j]) == 0  # registered in the CS (rule 4), served at its end
    assert list(h.rq) == [0, 2, 0, 1, 2]
    # rule 5: the longest waiting is 3 (stamp 1)
    assert h.exit_cs() == SEND_MSG and h.out_dst == 3 and h.lv[0] == 0
    t = nodes[3]
    for j in (1, 4):
        _deliver(t, nodes[j])
    assert _deliver(t, h) == ENTER_CS and t.exit_cs() == SEND_MSG
    # 1 and 4 both stamp 2: the first in ring order after the holder (3): 4
    assert t.out_dst == 4 and protocol.get30(t.out, 6 + 4 * 3) == 1  # the token's LV[3]: 3's stamp
    assert list(t.lv) == [0] * n  # the token's memory leaves with it


def test_ra_an_idle_process_is_recognised_however_far_the_clock_moved():
    """LV[j] of a process idle for 2**29 and more requests of others is far behind the clock:
    'younger than the last visit' must still see its next request (RQ != LV, not a serial
    comparison), and its stamp never equals its last one modulo 2**30 (the wrap guard)."""
    a, b = make_node("ra", 0, 2), make_node("ra", 1, 2)
    a.give_token()
    a.lv[1] = b.rq[1] = 5  # b's last visit, stamp 5
    b.clock = (5 + (1 << 29) + 7) & SEQ_MASK  # the clock has moved on by more than 2**29 since
    a.clock = b.clock
    a.rq[1] = 5
    assert b.request() == SEND_MSG
    assert protocol.seq_later(5, b.rq[1])  # a serial comparison would call it older than the visit
    assert _deliver(a, b) == SEND_MSG and a.out_dst == 1  # yet it is served
    # The wrap guard: a stamp equal to the last visit's modulo 2**30 is skipped.
    c = make_node("ra", 1, 2)
    c.rq[1] = 9
    c.clock = 8
    assert c.request() == SEND_MSG and c.rq[1] == 10 and c.clock == 10


@pytest.mark.parametrize("name", BOTH)
def test_counters_wrap_at_2_to_the_30(name, monkeypatch):
    """Every node's numbers start 3 below 2**30: requests, LN/LV and the clock wrap to 0 and the
    run is the same as from 0 (counts, order of service)."""
    n = 5
    original = protocol.load(name).__init__

    def near_wrap(self, index, n):
        original(self, index, n)
        start = SEQ_MASK - 2
        for arr in ("rn", "ln", "rq", "lv"):
            if hasattr(self, arr):
                a = getattr(self, arr)
                for j in range(n):
                    a[j] = start
        if hasattr(self, "clock"):
            self.clock = start

    plain = simulate(name, n, "poisson", requests=120, seed=9, rate=0.6)
    monkeypatch.setattr(protocol.load(name), "__init__", near_wrap)
    wrapped = simulate(name, n, "poisson", requests=120, seed=9, rate=0.6)
    assert wrapped["ok"] and wrapped["served"] == 120, wrapped["violations"]
    for key in ("hop_frames", "logical_messages", "max_service_traffic", "max_overtaken", "latency"):
        assert wrapped[key] == plain[key], key


# -- recovery hooks (docs/adding-a-protocol.md, section 4) ------------------------------


@pytest.mark.parametrize("name", BOTH)
def test_the_epoch_gate_drops_a_token_of_an_old_epoch(name):
    a, b = make_node(name, 0, 3), make_node(name, 1, 3)
    a.give_token()
    assert b.request() == SEND_MSG
    assert _deliver(a, b) == SEND_MSG
    b.known_epoch = 3  # a claim of epoch 3 passed b meanwhile: a's token (epoch 0) is dead
    b.known_owner = 2
    b.sync_gate()
    assert _deliver(b, a) == protocol.DISCARDED and not b.has_token and b.discarded == 1


@pytest.mark.parametrize("name", BOTH)
def test_regenerate_and_request_again(name):
    a, b, c = (make_node(name, i, 3) for i in range(3))
    # A regenerated token at a pending node (its request heard by all): it enters.
    assert b.request() == SEND_MSG
    _deliver(a, b)
    _deliver(c, b)
    assert b._regenerate() == ENTER_CS and b.has_token
    # c's broadcast is lost; its re-announced request reaches b in its CS: served at the exit.
    assert c.request() == SEND_MSG
    assert b.on_request_again(2) == 0 and b.has_token
    assert b.exit_cs() == SEND_MSG and b.out_dst == 2 and b.out_kind == TOKEN
    # Not the holder: it passes the again frame on; its origin takes it off.
    assert a.on_request_again(2) == SEND_AGAIN and a.again_origin == 2
    assert c.on_request_again(2) == 0
    # At an idle holder: the token goes to the origin at once, even if its broadcast was lost.
    assert _deliver(c, b) == ENTER_CS and c.exit_cs() == 0
    assert a.request() == SEND_MSG
    assert c.on_request_again(0) == SEND_MSG and c.out_dst == 0


@pytest.mark.parametrize("name", BOTH)
def test_a_token_nobody_asked_for_is_passed_on(name):
    """Only after recovery: a regenerated token reaches a node that no longer waits; it
    releases it as at the end of a critical section (to a waiting node, or keeps it)."""
    a, b, c = (make_node(name, i, 3) for i in range(3))
    assert c.request() == SEND_MSG
    _deliver(a, c)
    assert a._regenerate() == SEND_MSG and a.out_dst == 2  # not pending: c waits, c gets it
    # b did not ask either: it releases the token as at an exit, to c, whose request it heard
    b.has_token = False
    _deliver(b, c)
    assert _deliver(b, a) == SEND_MSG and b.out_dst == 2


# -- the node code under the real micropython binary ------------------------------------


@pytest.fixture(scope="module")
def loop_runs(micropython):
    """tests/mp_layer_driver.py (a ring of 5 node loops on in-memory wires) per protocol, under
    MicroPython and CPython."""
    import json
    import subprocess
    import sys

    from conftest import FIRMWARE, ROOT, run_micropython

    driver = str(ROOT / "tests" / "mp_layer_driver.py")
    out = {}
    for name in BOTH:
        mp = json.loads(run_micropython(micropython, driver, str(FIRMWARE), name))
        cp = json.loads(subprocess.run([sys.executable, driver, str(FIRMWARE), name], capture_output=True, text=True,
                                       check=True, timeout=60).stdout)
        assert mp["impl"] == "micropython" and cp["impl"] == "cpython" and mp["protocol"] == name
        out[name] = (mp["results"], cp["results"])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", BOTH)
def test_the_node_loop_runs_them_alike_under_micropython_and_cpython(loop_runs, name):
    mp, cp = loop_runs[name]
    assert mp == cp  # hop frames per wire, deliveries, entries and the event records' bytes
    one = mp["one"]
    # Node 3 of 5 asks, node 0 holds the token: the broadcast once round (5 hop frames,
    # delivered at 4, 0, 1, 2), the token 0 -> 3 (3 hop frames, delivered at 3 alone).
    assert one["tx"] == [2, 2, 2, 1, 1] and one["got"] == [[[0, 3]], [[0, 3]], [[0, 3]], [[1, 0]], [[0, 3]]]
    assert one["token"] == [False, False, False, True, False] and one["seq"][3] == 1
    everyone = mp["all"]
    # Every node asks at once (the token at rest at 3): each served once; 4 broadcasts of 5
    # hops and 4 token messages of 1 hop (the queue is in ring order from the holder).
    assert sorted(everyone["seq"]) == [2, 3, 4, 5, 6] and sum(everyone["tx"]) == 4 * 5 + 4
    assert mp["bad"]["bad"] == [0, 0, 2, 0, 0] and mp["bad"]["got"] == [[]] * 5  # undeclared kind, wrong size
    for scenario in mp.values():
        assert scenario["errors"] == [0] * 5


@pytest.mark.slow
@pytest.mark.parametrize("name", BOTH)
@pytest.mark.parametrize("n", [3, 32])
def test_the_node_loop_allocates_nothing_under_micropython(micropython, name, n):
    """tests/mp_node_bench.py: the adversarial workload (a request behind the resting token, so
    a broadcast round and an n - 1 hop token each time) under micropython.heap_lock(): any
    allocation raises MemoryError. The rp2 port's 30-bit ints: tests/test_rp2040.py."""
    from conftest import FIRMWARE, ROOT, run_micropython

    out = run_micropython(micropython, str(ROOT / "tests" / "mp_node_bench.py"), str(FIRMWARE), name, str(n), "300",
                          "1", "1", "lock")
    assert out.strip() == "no allocation in 300 rounds"


def test_bench_chip_routes_the_tokens_that_are_messages():
    """`picoring bench chip -p sk` routes the token alone (mp_node_bench.py P-route) for a
    protocol whose token is a message, and prints that table row and the heap after start."""
    import io

    from rich.console import Console

    from picoring.bench import chip

    assert [p for p in ("s", "q", "d", "toy", "sk", "ra") if chip.token_is_a_message(p)] == ["toy", "sk", "ra"]
    row = {"frames": 600, "chip_us_per_frame": 700.0, "chip_us_per_pass": None, "passes": 0,
           "alloc_bytes_per_frame": 0, "heap_lock": "no allocation in 400 rounds", "usb_bytes_per_frame": 60.0,
           "chip_us_per_routed_hop": 450.5, "chip_us_per_token_delivered": 1200.0, "routed_alloc_bytes": 0,
           "memory": {16: {"loop_bytes": 5000, "heap_used": 70000, "heap_free": 170000},
                      32: {"loop_bytes": 5300, "heap_used": 70300, "heap_free": 169700}}}
    console = Console(file=io.StringIO(), width=250, record=True)
    chip.print_table({"boards": 3, "rounds": 200, "memory_sizes": [16, 32], "protocols": {"sk": row}}, console)
    text = console.export_text()
    assert "450.5" in text and "1200.0" in text and "5300 / 70300 / 169700" in text


def test_the_bench_feeder_sends_requests_in_turn_and_drains_the_boards():
    """picoring.bench.feed keeps a flashed ring busy for ../shared/rp2040/bench (sk and ra
    send nothing without requests): `!r` to each port in turn, what the boards write read
    and dropped. Two ptys stand in for two boards."""
    import os
    import pty

    from picoring.bench import feed

    pairs = [pty.openpty() for _ in range(2)]
    try:
        for master, _ in pairs:
            os.write(master, b"!hello fw=0.5.0\n" * 50)  # a board's output, to be drained
        names = [os.ttyname(slave) for _, slave in pairs]
        # The feeder's clock is a counter (10 ms a call), so the count does not depend on how
        # busy the machine is (on the wall clock, a loaded run sent 1 in 0.3 s)
        ticks = iter(range(10**6))
        sent = feed.feed(names, period=0.01, life=0.3, clock=lambda: next(ticks) * 0.01)
        # 30 reads of the clock in 0.3 s: two before the loop, two a pass, a request due each pass
        assert sent == 14
        got = []
        for master, _ in pairs:
            os.set_blocking(master, False)
            data = b""
            try:
                while True:
                    data += os.read(master, 4096)
            except BlockingIOError:
                pass
            got.append(data.replace(b"\r", b"").count(b"!r\n"))
        assert sorted(got) == [sent // 2, sent - sent // 2]  # in turn
    finally:
        for master, slave in pairs:
            os.close(master)
            os.close(slave)
