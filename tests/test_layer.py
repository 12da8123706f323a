"""The protocol layer (firmware/protocol.py, frame.MSG, NodeLoop._on_msg) through the node
loop, with the toy protocol of the registry (firmware/proto_toy.py: broadcast requests, the
token sent to a requester by index), under the real micropython binary and under CPython
(tests/mp_layer_driver.py): a routed frame is passed on without waking the protocols in
between; a broadcast is delivered once to every other node and taken off by its sender;
the event records say which send is a new logical message and which a hop frame."""

import json
import subprocess
import sys

import pytest

from picoring.ring import hostlink as hl
from picoring.firmware import protocol as host_protocol

from conftest import FIRMWARE, ROOT, run_micropython

DRIVER = str(ROOT / "tests" / "mp_layer_driver.py")


@pytest.fixture(scope="module")
def runs(micropython):
    mp = json.loads(run_micropython(micropython, DRIVER, str(FIRMWARE)))
    cp = json.loads(subprocess.run([sys.executable, DRIVER, str(FIRMWARE)], capture_output=True, text=True,
                                   check=True, timeout=60).stdout)
    assert mp["impl"] == "micropython" and cp["impl"] == "cpython"
    return mp["results"], cp["results"]


@pytest.mark.slow
def test_micropython_and_cpython_agree_frame_for_frame(runs):
    mp, cp = runs
    assert mp == cp  # hop frames per wire, deliveries, entries and the event records' bytes


@pytest.mark.slow
def test_one_request_broadcast_once_round_token_routed_to_the_requester(runs):
    one = runs[0]["one"]
    # Node 3 of 5 asks; node 0 holds the token. The broadcast: 3->4->0->1->2->3 (5 hop
    # frames); the token 0->1->2->3 (3 hop frames): 8 on the wires, 2 logical messages.
    assert one["tx"] == [2, 2, 2, 1, 1] and sum(one["tx"]) == 8
    # Deliveries: the broadcast once to every node but its sender, the token to node 3
    # alone: nodes 1 and 2 passed it on without waking their protocol.
    assert one["got"] == [[[0, 3]], [[0, 3]], [[0, 3]], [[1, 0]], [[0, 3]]]
    assert one["token"] == [False, False, False, True, False] and one["seq"][3] == 1
    assert one["bad"] == [0] * 5 and one["errors"] == [0] * 5


@pytest.mark.slow
def test_the_event_records_count_logical_messages_and_hop_frames(runs):
    one = runs[0]["one"]
    events = []
    for i, text in enumerate(one["host"]):
        events += [e for e in hl.LineParser(board=i, size=5).feed(text.encode()) if isinstance(e, hl.BoardEvent)]
    sends = [e for e in events if e.ev == "send"]
    assert all(e.kind == "msg" for e in sends) and len(sends) == 8
    new = sorted((e.board, e.payload["mkind"], e.payload["dst"]) for e in sends if not e.payload["fwd"])
    assert new == [(0, 1, 3), (3, 0, 255)]  # the token to 3 and node 3's broadcast
    # hop: which hop of its message's way each frame is; a message's last hop tells its length.
    assert sorted(e.payload["hop"] for e in sends if e.payload["mkind"] == 0) == [1, 2, 3, 4, 5]
    assert sorted(e.payload["hop"] for e in sends if e.payload["mkind"] == 1) == [1, 2, 3]
    recv_token = [e for e in events if e.ev == "recv" and e.payload["mkind"] == 1]
    assert [(e.board, e.link, e.payload["hop"]) for e in recv_token] == [(1, 0, 1), (2, 1, 2), (3, 2, 3)]
    # The token's header (seq, epoch) is what a token's record carries.
    assert recv_token[-1].payload["seq"] == 0 and recv_token[-1].payload["epoch"] == 0


@pytest.mark.slow
def test_every_node_asks_at_once_each_served_once_in_ring_order(runs):
    a = runs[0]["all"]
    # Node 3 held the token (entry 2); then 4, 0, 1, 2 in ring order.
    assert a["seq"] == [4, 5, 6, 2, 3] and a["token"] == [False, False, True, False, False]
    # 4 broadcasts of 5 hops and 4 token hops of 1.
    assert sum(a["tx"]) == 4 * 5 + 4
    for i, got in enumerate(a["got"]):
        requests = sorted(src for kind, src in got if kind == 0)
        assert requests == sorted(j for j in (0, 1, 2, 4) if j != i)  # every broadcast once, never its own
    assert sum(1 for got in a["got"] for kind, _src in got if kind == 1) == 4


@pytest.mark.slow
def test_undeclared_or_wrong_size_messages_are_bad_frames_not_delivered(runs):
    bad = runs[0]["bad"]
    assert bad["bad"] == [0, 0, 2, 0, 0] and bad["got"] == [[]] * 5 and sum(bad["tx"]) == 0


def test_the_registry_loads_the_toy_and_reads_its_descriptor():
    cls = host_protocol.load("toy")
    assert cls.about["exclusion"] == "hard" and cls.about["name"] == "toy"
    node = cls(2, 32)
    assert node.msg_sizes[0] == 1 and node.msg_sizes[1] == 6 + 32 and node.msg_sizes[2] == host_protocol.NO_SIZE
    assert host_protocol.bound(cls.about["bounds"]["messages_per_request"]["checked"], 5) == 9
    assert "toy" not in host_protocol.PROTOCOLS  # the paper's four (the host offers every REGISTRY name)


def test_a_kind_of_variable_length_declares_its_least_and_most():
    node = host_protocol.load("bs")(0, 8)  # the token: 11 bytes with no served entry, 13 + 3 x 8 with all
    assert (node.msg_least[1], node.msg_sizes[1]) == (11, 37) and len(node.out) == 37
    assert node.msg_least[0] == node.msg_sizes[0] == 11 and node.msg_least[2] == host_protocol.NO_SIZE
    for sizes in ({0: (5, 4)}, {0: (-1, 4)}, {0: (0, 247)}):
        cls = type("Bad", (host_protocol.Node,), {"message_sizes": lambda self, n, sizes=sizes: sizes})
        with pytest.raises(ValueError, match="least <= most"):
            cls(0, 2)

@pytest.mark.parametrize("name", sorted(host_protocol.REGISTRY))
def test_every_descriptor_has_the_keys_the_host_reads(name):
    about = host_protocol.load(name).about
    assert about["name"] == name and about["citation"] and about["exclusion"] in ("hard", "soft", "none")
    for key in ("messages_per_request", "service_traffic"):
        b = about["bounds"][key]
        assert set(b) >= {"paper", "checked", "where"}


# The checker's own table from before the registry (docs/bounds.md): the descriptors must keep
# giving these numbers, now that the checker reads them from the descriptors.
_CHECKED = {"s": lambda n: (None, None), "q": lambda n: (n, (5 * n * n - 5 * n + 2) // 2),
            "d": lambda n: (3 * n, 3 * n - 2), "d-literal": lambda n: (3 * n, 3 * n - 2)}
_PRINTED = {"s": lambda n: (None, None), "q": lambda n: (n, (3 * n * n - 5 * n + 2) // 2),
            "d": lambda n: (2 * n, 3 * n - 3), "d-literal": lambda n: (2 * n, 3 * n - 3)}


@pytest.mark.parametrize("name", ["s", "q", "d", "d-literal"])
def test_descriptors_hold_the_bounds_the_checker_held(name):
    from picoring.check.checker import bounds_for, paper_bounds_for

    for n in range(2, 12):
        assert bounds_for(name, n) == _CHECKED[name](n)
        assert paper_bounds_for(name, n) == _PRINTED[name](n)
