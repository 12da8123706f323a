"""Raymond's tree algorithm (`raymond`, firmware/proto_raymond.py), Naimi-Trehel (`nt`,
proto_nt.py) and the slides' DAG generalisation (`dag`, proto_dag.py) on the ring's message
layer: exact counts under `sequential` and `adversarial` derived by hand, the bounds (Raymond
2*D logical messages per critical section, Naimi-Trehel n), the explorer complete at n = 3 (and
4) from every start with the slides' invariants asserted in every state, the node loop under
the real micropython binary, and a virtual ring per protocol.

The ring's cost of a tree edge: a message from i to j is routed (j - i) mod n hops, so an edge
crossed once each way costs (j - i) mod n + (i - j) mod n = n hop frames, whatever the edge.
Raymond on a quiet ring: a request d tree edges from the holder sends d REQUESTs up and the
token d edges down: 2d logical messages and d*n hop frames."""

import json
import subprocess
import sys

import pytest

from picoring.explore.model import Explorer, Msg
from picoring.explore.search import explore
from picoring.firmware import graphs, protocol
from picoring.sim.simulate import simulate

TOKEN, FLIP = 1, 2


def requests_of(spec, n, workload, k, seed=0, **kw):
    """(report, the nodes that asked, in order) of a simulator run."""
    events = []
    rep = simulate(spec, n, workload, requests=k, seed=seed, listener=events.append, **kw)
    assert rep["ok"] and rep["quiescent"] and rep["served"] == k, rep["violations"]
    assert rep["protocol_errors"] == 0
    return rep, [e.node for e in events if e.ev == "req"]


def tree_distance(kind, n, a, b):
    return graphs.bfs(graphs.tree(kind, n), a)[0][b]


# -- Raymond: exact counts ------------------------------------------------------------------

def test_raymond_adversarial_on_a_path_by_hand():
    # Path 0-1-2-3, token at 0. Adversarial asks behind the token: first node 3, 3 edges away:
    # 3 REQUESTs up, against the ring (3->2, 2->1, 1->0: 3 hops each) and the token down, with
    # it (0->1, 1->2, 2->3: 1 hop each): 6 logical messages, 9 + 3 = 12 hop frames. Then the
    # holder is 3 and behind it is 2, one edge away: REQUEST 2->3 (1 hop), TOKEN 3->2 (3 hops):
    # 2 logical, 4 hop frames; and so on down (2 -> 1, 1 -> 0) and round again (0 -> 3: 3 edges).
    # k = 6: 3, 2, 1, 0, 3, 2: logical 6+2+2+2+6+2 = 20, hop frames 12+4+4+4+12+4 = 40.
    rep, asked = requests_of("raymond:tree=path", 4, "adversarial", 6)
    assert asked == [3, 2, 1, 0, 3, 2]
    assert (rep["logical_messages"], rep["hop_frames"]) == (20, 40)


def test_raymond_adversarial_on_a_binary_tree_by_hand():
    # Binary n = 4: 0's children 1, 2; 1's child 3. Token at 0; behind it 3 (2 edges: 4 logical,
    # 8 hop frames); at 3 behind is 2 (2-0-1-3: 3 edges, 6 and 12); at 2 behind is 1 (1-0-2: 2
    # edges, 4 and 8); at 1 behind is 0 (1 edge, 2 and 4); at 0 again 3 (4 and 8).
    # k = 5: logical 4+6+4+2+4 = 20, hop frames 8+12+8+4+8 = 40.
    rep, asked = requests_of("raymond:tree=binary", 4, "adversarial", 5)
    assert asked == [3, 2, 1, 0, 3]
    assert (rep["logical_messages"], rep["hop_frames"]) == (20, 40)


@pytest.mark.parametrize("tree", ["binary", "path", "star", "random:5"])
@pytest.mark.parametrize("workload", ["sequential", "adversarial"])
@pytest.mark.parametrize("n,holder", [(6, 0), (7, 3)])
def test_raymond_quiet_ring_costs_2d_logical_and_d_times_n_hop_frames(tree, workload, n, holder):
    spec = "raymond:holder=%d,tree=%s" % (holder, tree)
    rep, asked = requests_of(spec, n, workload, 60, seed=4)
    logical = hops = 0
    at = holder
    for j in asked:  # one request at a time: the token goes to the requester and rests there
        d = tree_distance(tree, n, at, j)
        logical += 2 * d
        hops += d * n
        at = j
    assert (rep["logical_messages"], rep["hop_frames"]) == (logical, hops)
    D = graphs.diameter(graphs.tree(tree, n))
    assert rep["bounds"]["logical_per_request"] == 2 * D and rep["bounds"]["messages_per_request"] == D * n
    assert rep["violations"] == []


@pytest.mark.parametrize("tree", ["binary", "path", "star"])
def test_raymond_bounds_hold_under_load(tree):
    # Busy rings (poisson, every node often waiting): at most 2*D logical messages per
    # critical section, D*n hop frames (the checker holds the run to them).
    for n in (5, 8):
        rep = simulate("raymond:tree=" + tree, n, "poisson", requests=400, seed=n, rate=1.0)
        assert rep["ok"] and rep["served"] == 400 and rep["violations"] == [], rep["violations"]


def test_the_dag_on_a_tree_is_raymond_message_for_message():
    # On a tree every non-holder has one out-edge (its HOLDER) and the receiver's only
    # out-edge is the one the token came over: no FLIP; the rest is the same rules.
    for workload in ("sequential", "adversarial", "poisson"):
        for tree in ("binary", "path", "random:2"):
            a = simulate("raymond:tree=" + tree, 7, workload, requests=150, seed=1)
            b = simulate("dag:graph=tree:" + tree, 7, workload, requests=150, seed=1)
            for key in ("logical_messages", "hop_frames", "max_service_traffic", "max_overtaken", "end_time"):
                assert a[key] == b[key], (workload, tree, key)


# -- Naimi-Trehel -----------------------------------------------------------------------------

def test_nt_adversarial_by_hand():
    # n = 4, token at 0, every last = 0. Adversarial (behind the token):
    #  3: REQUEST 3->0 (1 hop), 0 idle root: TOKEN 0->3 (3 hops); last0 = 3.       2 logical, 4 hops
    #  2: REQUEST 2->0 (2), forwarded 0->3 (3), last0 = 2; TOKEN 3->2 (3); last3 = 2. 3, 8
    #  1: REQUEST 1->0 (3), forwarded 0->2 (2), last0 = 1; TOKEN 2->1 (3); last2 = 1. 3, 8
    #  0: REQUEST 0->1 (1); TOKEN 1->0 (3); last1 = 0.                                2, 4
    #  3: REQUEST 3->2 (3), 2->1 (3), 1->0 (3), TOKEN 0->3 (3): the path 3-2-1-0 is
    #     the whole ring: n = 4 logical messages, Naimi-Trehel's worst case.           4, 12
    # k = 5: 14 logical messages, 36 hop frames.
    rep, asked = requests_of("nt", 4, "adversarial", 5)
    assert asked == [3, 2, 1, 0, 3]
    assert (rep["logical_messages"], rep["hop_frames"]) == (14, 36)


def nt_by_hand(n, holder, asked):
    """Naimi-Trehel on a quiet ring, one request at a time: the request follows last from the
    requester to the root (the holder), every node on the way points at the requester after
    (path reversal), the root sends the token. (logical messages, hop frames)."""
    last = [holder] * n
    last[holder] = None
    logical = hops = 0
    at = holder
    for j in asked:
        if j == at:
            continue
        path = [j]
        while last[path[-1]] is not None:
            path.append(last[path[-1]])
        assert path[-1] == at
        for a, b in zip(path, path[1:]):
            logical += 1
            hops += (b - a) % n
        logical += 1  # the token
        hops += (j - at) % n
        for x in path:
            last[x] = j
        last[j] = None
        at = j
    return logical, hops


@pytest.mark.parametrize("n,holder", [(5, 0), (8, 3)])
@pytest.mark.parametrize("workload", ["sequential", "adversarial"])
def test_nt_quiet_ring_counts(n, holder, workload):
    rep, asked = requests_of("nt:holder=%d" % holder, n, workload, 80, seed=2)
    assert (rep["logical_messages"], rep["hop_frames"]) == nt_by_hand(n, holder, asked)
    assert rep["bounds"]["logical_per_request"] == n and rep["violations"] == []


def test_nt_average_grows_like_log_n():
    # Naimi, Trehel, Arnold 1996 (abstract): "only O(Log(n)) messages on average". One request
    # at a time at a uniformly random node (sequential), 2,000 requests: the average stays
    # below log2(n) + 1 logical messages per request while the worst case is n.
    import math

    for n in (8, 16, 32, 64):
        rep = simulate("nt", n, "sequential", requests=2000, seed=11)
        assert rep["ok"]
        assert rep["logical_per_request"] <= math.log2(n) + 1, (n, rep["logical_per_request"])


# -- the DAG ----------------------------------------------------------------------------------

def test_dag_adversarial_on_a_triangle_by_hand():
    # complete n = 3, token at 0: order numbers (height, index) 0 < 1 < 2, so 1->0, 2->0, 2->1.
    # Behind 0 is 2: REQUEST over its nearest out-edge 2->0 (1 hop); 0 sends the token 0->2 (2
    # hops) and points 0->2; 2's out-edges 2->0 (the sender) and 2->1 reversed: FLIP 2->1 (2
    # hops), back 1->2 (1 hop); then 2 enters. 4 logical messages, 6 hop frames. The next
    # request (behind 2: node 1, with 1->2 one hop and 1->0) is the same picture turned by
    # one: every request 4 and 6. k = 6: 24 logical, 36 hop frames.
    rep, asked = requests_of("dag:graph=complete", 3, "adversarial", 6)
    assert asked == [2, 1, 0, 2, 1, 0]
    assert (rep["logical_messages"], rep["hop_frames"]) == (24, 36)


@pytest.mark.parametrize("graph", ["complete", "ring", "random:0.4:3"])
def test_dag_runs_safe_and_live(graph):
    for workload in ("sequential", "adversarial", "poisson"):
        rep = simulate("dag:graph=" + graph, 8, workload, requests=300, seed=5)
        assert rep["ok"] and rep["served"] == 300 and rep["protocol_errors"] == 0


# -- the explorer, with the slides' invariants in every state ----------------------------------

def _holder_of(ex, st):
    """The node with the token, or the addressee of the token message in flight."""
    nodes, links, _ = st
    ht = ex.fields.index("has_token")
    for i, v in enumerate(nodes):
        if v[ht]:
            return i
    for q in links:
        for f in q:
            if f.__class__ is Msg and f[0] == TOKEN:
                return f[2]
    raise AssertionError("no token")


def _check_paths_end_at_holder(n, H, out_edges, edges):
    """The slides' invariants: acyclic, and every directed path ends at the holder H (every
    other node has an out-edge, all of them edges of the graph)."""
    for x in range(n):
        for y in out_edges[x]:
            assert y in edges[x]
        if x != H:
            assert out_edges[x], "node %d has no way to the token" % x
    # acyclic: a depth-first search finds no back edge
    state = [0] * n

    def visit(x):
        state[x] = 1
        for y in out_edges[x]:
            assert state[y] != 1, "a directed cycle through %d" % y
            if state[y] == 0:
                visit(y)
        state[x] = 2

    for x in range(n):
        if state[x] == 0:
            visit(x)


def raymond_invariants(ex, st, edges):
    nodes = st[0]
    n = len(nodes)
    H = _holder_of(ex, st)
    hi = ex.fields.index("holder")
    # HOLDER of every node but the holder (whose own, while the token is on its way to it,
    # still names the sender: the token's arrival sets it)
    out = [[] if x == H or nodes[x][hi] == x else [nodes[x][hi]] for x in range(n)]
    _check_paths_end_at_holder(n, H, out, edges)


def dag_invariants(ex, st, edges):
    nodes = st[0]
    n = len(nodes)
    H = _holder_of(ex, st)
    k = len(ex.fields) + ex.buffers.index("sign")
    # The receiver of a token in flight has not yet reversed its out-edges: they are the
    # ones the token's move reverses ("Regel"), so they are not counted.
    out = [[] if x == H else [y for y in range(n) if nodes[x][k][y]] for x in range(n)]
    _check_paths_end_at_holder(n, H, out, edges)


def nt_invariants(ex, st, edges):
    # last pointers never form a cycle (each chain ends at a root)
    nodes = st[0]
    n = len(nodes)
    li = ex.fields.index("last")
    for x in range(n):
        seen = 0
        y = x
        while nodes[y][li] != 0xFF:
            y = nodes[y][li]
            seen += 1
            assert seen <= n, "a cycle of last pointers"


CASES = [("raymond:tree=binary", raymond_invariants, lambda n: graphs.tree("binary", n)),
         ("raymond:tree=path", raymond_invariants, lambda n: graphs.tree("path", n)),
         ("raymond:tree=star", raymond_invariants, lambda n: graphs.tree("star", n)),
         ("nt", nt_invariants, None),
         ("dag:graph=complete", dag_invariants, lambda n: graphs.graph("complete", n)),
         ("dag:graph=ring", dag_invariants, lambda n: graphs.graph("ring", n))]


@pytest.mark.parametrize("spec,invariants,graph", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("start", [0, 1, 2])
def test_explorer_complete_at_3_from_every_start(spec, invariants, graph, start):
    n, R = 3, 2
    rep = explore(spec, n, R, start=start)
    assert rep["complete"] and rep["ok"], rep["failures"]
    ex = Explorer(spec, n, R, start=start).build()
    edges = graph(n) if graph else None
    for st in ex.states:
        invariants(ex, st, edges)
    cls = protocol.load(rep["protocol"])
    if spec.startswith("raymond"):
        D = graphs.diameter(graphs.tree(cls.opts["tree"], n))
        assert rep["logical_per_request"]["worst"] <= 2 * D
        assert rep["messages_per_request"]["worst"] <= D * n
    if spec == "nt":
        assert rep["logical_per_request"]["worst"] <= n


def test_the_explorers_worst_cases_at_3():
    # One request per node (R = 1), every schedule. Raymond on the path 0-1-2, token at 0: the
    # run where only node 2 asks costs 2*D = 4 logical messages and D*n = 6 hop frames, the
    # bound reached. Naimi-Trehel's worst complete run averages 2.5 logical messages per
    # request, below n = 3: a request that costs n needs a chain of n - 1 last pointers, which
    # only earlier, cheaper requests build (test_nt_adversarial_by_hand has one costing n).
    rep = explore("raymond:tree=path", 3, 1)
    assert rep["ok"] and (rep["logical_per_request"]["worst"], rep["messages_per_request"]["worst"]) == (4, 6)
    rep = explore("nt", 3, 1)
    assert rep["ok"] and (rep["logical_per_request"]["worst"], rep["messages_per_request"]["worst"]) == (2.5, 4.5)


@pytest.mark.parametrize("spec,invariants,graph", [CASES[0], CASES[3], CASES[4]], ids=["raymond", "nt", "dag"])
def test_explorer_complete_at_4(spec, invariants, graph):
    n = 4
    rep = explore(spec, n, 1)
    assert rep["complete"] and rep["ok"], rep["failures"]
    ex = Explorer(spec, n, 1).build()
    edges = graph(n) if graph else None
    for st in ex.states:
        invariants(ex, st, edges)


# -- the firmware under the real micropython binary ---------------------------------------------

NAMES = ("raymond:tree=binary", "nt", "dag:graph=complete")


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_the_node_loop_runs_them_alike_under_micropython_and_cpython(micropython, name):
    from conftest import FIRMWARE, ROOT, run_micropython

    driver = str(ROOT / "tests" / "mp_layer_driver.py")
    mp = json.loads(run_micropython(micropython, driver, str(FIRMWARE), name))
    cp = json.loads(subprocess.run([sys.executable, driver, str(FIRMWARE), name], capture_output=True, text=True,
                                   check=True, timeout=60).stdout)
    assert mp["impl"] == "micropython" and cp["impl"] == "cpython"
    assert mp["results"] == cp["results"]
    res = mp["results"]
    # one request at node 3 of 5, then every node at once: all served, no protocol error
    assert res["one"]["token"] == [False, False, False, True, False]
    assert sorted(res["all"]["seq"])[-1] == 6 and res["all"]["errors"] == [0] * 5


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_the_node_loop_allocates_nothing_under_micropython(micropython, name):
    from conftest import FIRMWARE, ROOT, run_micropython

    out = run_micropython(micropython, str(ROOT / "tests" / "mp_node_bench.py"), str(FIRMWARE), name, "8", "200",
                          "1", "1", "lock")
    assert out.strip() == "no allocation in 200 rounds"


# -- a virtual ring per protocol ----------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("name", ["raymond:tree=path,holder=2", "nt:holder=1", "dag:graph=complete"])
def test_on_a_virtual_ring_the_counts_are_the_simulators(ring, name):
    n, k = ring.n, 8
    report = ring.run(name, "sequential", k, seed=3)
    assert report["ok"] and report["served"] == k, report["violations"]
    sim = simulate(name, n, "sequential", requests=k, seed=3)
    for key in ("hop_frames", "logical_messages", "max_service_traffic", "max_service_logical"):
        assert report[key] == sim[key], key
