# The protocol layer through the node loop: a ring of node loops in one process, wired
# by in-memory links, running the toy protocol (firmware/proto_toy.py: broadcast
# requests, the token sent to a requester by index), or another protocol of messages
# (tests/test_sk_ra.py: sk, ra). Runs under MicroPython (unix port) and CPython; prints
# one JSON line per scenario, which tests/test_layer.py compares between the two and checks.
# Usage: <python> mp_layer_driver.py FIRMWARE_DIR [PROTOCOL]
import sys

sys.path.insert(0, sys.argv[1])
import json

import node
import protocol
import mp_links


class Counting:
    """Counts what the node loop hands to one protocol node: deliveries by kind."""

    def __init__(self, nd):
        self.got = []
        inner = nd.on_message

        def on_message(kind, src, buf):
            self.got.append([kind, src])
            return inner(kind, src, buf)

        nd.on_message = on_message


def ring(n, proto="toy"):
    loops, wires, hosts = mp_links.ring(proto, n)
    counts = [Counting(lp.node) for lp in loops]
    for lp in loops:
        lp.bind_hot()  # the loop calls the node's on_message through bind_hot's tuple
    return loops, wires, hosts, counts


def run(loops, passes=60):
    for _ in range(passes):
        for lp in loops:
            lp.step()


def snapshot(loops, wires, hosts, counts):
    out = {
        "tx": [w.frames for w in wires],
        "got": [c.got for c in counts],
        "token": [lp.node.has_token for lp in loops],
        "seq": [lp.node.seq for lp in loops],
        "bad": [lp.dec.bad for lp in loops],
        "errors": [lp.node.errors for lp in loops],
        "host": [bytes(h.out).decode() for h in hosts],
    }
    for w in wires:
        w.delimiters = 0
    for c in counts:
        c.got = []
    for h in hosts:
        h.out = bytearray()
    return out


def main():
    proto = sys.argv[2] if len(sys.argv) > 2 else "toy"
    results = {}
    # One request at node 3 of 5: its broadcast goes once round (5 hop frames, delivered
    # at 4, 0, 1, 2), the holder (0) sends the token to 3 (3 hop frames, delivered at 3 only).
    loops, wires, hosts, counts = ring(5, proto)
    run(loops)
    snapshot(loops, wires, hosts, counts)
    loops[3].request()
    run(loops)
    results["one"] = snapshot(loops, wires, hosts, counts)
    # Every node asks at once: each served once, in ring order from the holder (3).
    for lp in loops:
        lp.request()
    run(loops, 200)
    results["all"] = snapshot(loops, wires, hosts, counts)
    # A frame the protocol does not declare (kind 9) and one of the wrong size: bad, not delivered.
    import frame

    enc = frame.Encoder()
    wires[1].peer.pending.extend(enc.message(9, 1, 3, b""))
    wires[1].peer.pending.extend(enc.message(0, 1, frame.BROADCAST, b"\x01\x02"))
    run(loops, 5)
    results["bad"] = snapshot(loops, wires, hosts, counts)
    print(json.dumps({"impl": sys.implementation.name, "protocol": proto, "results": results}))


main()
