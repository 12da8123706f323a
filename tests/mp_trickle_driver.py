# A ring of node loops whose UARTs have any() and let the bytes land one per any() call,
# as a Pico's at 1 Mbaud does (a frame takes 160 us, a pass of the loop tens): the loop
# sees every frame half read and finishes it in NodeLoop._finish_frame, which gives a
# token to the protocol itself and passes a message for another node on (toy, sk). The same workload runs on whole-frame wires (no any():
# _finish_frame never runs) for tests/test_node_loop.py to compare. Runs under MicroPython
# (unix port) and CPython; prints one JSON line.
# Usage: <python> mp_trickle_driver.py FIRMWARE_DIR
import sys

sys.path.insert(0, sys.argv[1])
import json

import node
import protocol
from mp_links import Host, TrickleWire, Wire, ring


def run(loops, passes):
    for _ in range(passes):
        for lp in loops:
            lp.step()


def workload(proto, n, wire):
    """Requests at every node, one at a time and then all at once; returns what each board
    logged (the host's lines), the frames on each wire and the entries."""
    loops, wires, hosts = ring(proto, n, wire)
    run(loops, 20)
    for i in (2, 1, 0, 2):
        loops[i].request()
        run(loops, 200)
    for lp in loops:
        lp.request()
    run(loops, 400)
    for lp in loops:
        while lp.log.flush_one(lp.link.write):
            pass
    return {
        "host": [bytes(h.out).decode() for h in hosts],
        "tx": [w.writes for w in wires],
        "seq": [lp.node.seq for lp in loops],
        "rx_bytes": [lp.rx_bytes for lp in loops],
        "rx_wire": [w.received for w in wires],
        "tx_frames": [lp.tx_frames for lp in loops],
        "bad": [lp.dec.bad for lp in loops],
    }


def enters_in_the_pass_that_saw_the_token_half_read():
    """A waiting Q node: the token's first byte has landed, then one step() reads the rest,
    gives the token to the protocol and enters its critical section."""
    import frame

    wire = TrickleWire()
    wire.peer = Wire()
    lp = node.NodeLoop(protocol.make_node("q", 1, 3), wire, Host(), lambda: 0, lambda a, b: a - b)
    lp.node.fresh = False
    lp.node.sync_gate()
    lp.request()
    wire.pending.extend(frame.Encoder().token(0, 0, 7, 0))
    wire.landed = 1
    sent_before = len(wire.peer.pending)  # the request message
    busy = lp.step()
    while lp.log.flush_one(lp.link.write):
        pass
    return {"busy": busy, "seq": lp.node.seq, "has_token": lp.node.has_token, "rx_bytes": lp.rx_bytes,
            "sent": len(wire.peer.pending) - sent_before, "host": bytes(lp.link.io.out).decode()}


def main():
    results = {}
    for proto in ("s", "q", "d", "toy", "sk"):
        results[proto] = {"trickle": workload(proto, 3, TrickleWire), "whole": workload(proto, 3, Wire)}
    results["one_step"] = enters_in_the_pass_that_saw_the_token_half_read()
    print(json.dumps({"impl": sys.implementation.name, "results": results}))


main()
