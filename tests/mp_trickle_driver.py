# A ring of node loops whose UARTs have any() and let the bytes land one per any() call,
# as a Pico's at 1 Mbaud does (a frame takes 160 us, a pass of the loop tens): the loop
# sees every frame half read and finishes it in NodeLoop._finish_frame, which gives a
# token to the protocol itself, passes a message for another node on (toy, sk) and gives one
# for this node to the protocol (BS's rotation). The same workload runs on whole-frame wires (no any():
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
        "tx": [w.frames for w in wires],
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


def relays_in_the_pass_that_saw_the_message_half_read():
    """BinarySearch's node 1 (no request, no trap): a gimme for node 2 lands whole and is passed
    on (the link's first frame, logged with a gap); then the rotating token's message from node
    0 has its first byte landed, and one step() reads the rest, gives it to the protocol, which
    passes it on by rule 4, and writes the message to node 2 before it logs either."""
    import frame
    import proto_bs

    wire = TrickleWire()
    wire.peer = Wire()
    lp = node.NodeLoop(protocol.make_node("bs", 1, 3), wire, Host(), lambda: 0, lambda a, b: a - b)
    lp.node.fresh = False
    lp.node.sync_gate()
    enc = frame.Encoder()
    first = enc.message(proto_bs.GIMME, 0, 2, bytes(11))
    wire.pending.extend(first)
    wire.landed = len(first)
    lp.step()
    while lp.log.flush_one(lp.link.write):
        pass
    passed = len(wire.peer.pending)
    logged_before = len(lp.link.io.out)
    epoch = lp.node.open_epoch
    # seq 9, the gate's epoch, R = 5, lend 0 and no served entry (the idle rotation's payload)
    payload = bytes([9, 0, 0, 0, epoch & 0xFF, epoch >> 8, 5, 0, 0, 0, 0])
    wire.pending.extend(enc.message(proto_bs.TOKEN, 0, 1, payload))
    wire.landed = 1
    busy = lp.step()
    written = bytes(wire.peer.pending)[passed:]
    while lp.log.flush_one(lp.link.write):
        pass
    dec = frame.Decoder()
    dec.feed(written, len(written))
    kind = dec.next()
    return {"busy": busy, "rx_bytes": lp.rx_bytes, "tx_frames": lp.tx_frames, "passed": passed,
            "wire": len(written), "kind": kind, "mkind": dec.st[frame.F_STATE], "src": dec.st[frame.F_SRC],
            "dst": dec.st[frame.F_DST], "payload": list(dec.payload), "rot": list(lp.node.rot),
            "has_token": lp.node.has_token, "host": bytes(lp.link.io.out)[logged_before:].decode()}


def main():
    results = {}
    for proto in ("s", "q", "d", "toy", "sk"):
        results[proto] = {"trickle": workload(proto, 3, TrickleWire), "whole": workload(proto, 3, Wire)}
    results["one_step"] = enters_in_the_pass_that_saw_the_token_half_read()
    results["one_step_relay"] = relays_in_the_pass_that_saw_the_message_half_read()
    # (written to the stream as it goes: S's logs alone are hundreds of kilobytes, one string of
    # them more than the unix port's heap can place)
    json.dump({"impl": sys.implementation.name, "results": results}, sys.stdout)
    print()


main()
