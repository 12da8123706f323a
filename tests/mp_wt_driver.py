# The wandering token (firmware/proto_wt.py) through the node loop: a ring of node loops in one
# process, wired by in-memory links, one shared clock that advances a fixed step per pass, every
# node always wanting the operation (the paper's components). Runs under MicroPython (unix port)
# and CPython; prints one JSON line, which tests/test_wt.py compares between the two and checks.
# Usage: <python> mp_wt_driver.py FIRMWARE_DIR N PASSES [SPEC [LOSE_AT [DROP_PPM]]]: from pass
# LOSE_AT on (-1: never), the first frame found on a wire is lost (the token: the generation rule
# must make another); DROP_PPM: every board reads its wire through hal.LossyUart (the drop_rx
# fault), which loses that many frames in a million.
import sys

sys.path.insert(0, sys.argv[1])
import json

import node
import proto_wt
import protocol
from mp_links import Host, Wire


def main():
    n = int(sys.argv[2])
    passes = int(sys.argv[3])
    spec = sys.argv[4] if len(sys.argv) > 4 else "wt:skip=2,op=8,min=60,max=180,seed=3"
    wires = [Wire() for _ in range(n)]
    for i in range(n):
        wires[i].peer = wires[(i + 1) % n]
    clock = [0]

    def ticks():
        return clock[0]

    lose_at = int(sys.argv[5]) if len(sys.argv) > 5 else -1
    drop_ppm = int(sys.argv[6]) if len(sys.argv) > 6 else 0
    lost_at = -1
    op_ms = int(protocol.parse_spec(spec)[1].get("op", "4"))
    uarts = wires
    if drop_ppm:
        import hal

        uarts = [hal.LossyUart(w, drop_ppm, 7 + i * 104729) for i, w in enumerate(wires)]
    loops = [node.NodeLoop(protocol.make_node(spec, i, n), uarts[i], Host(), ticks, lambda a, b: a - b,
                           cs_us=op_ms * 1000) for i in range(n)]
    for i, lp in enumerate(loops):
        lp.start(give_token=i == 0)
        lp._cmd_zero("")  # the host's "zero", a run's start: arms the drop_rx fault (hal.LossyUart)
    running = 0
    most = 0
    ops_after = 0
    for p in range(passes):
        if 0 <= lose_at <= p and lost_at < 0:
            for w in wires:
                if w.peer.pending:
                    w.peer.pending = bytearray()
                    lost_at = p
                    ops_after = -sum(lp.node.ops for lp in loops)
                    break
        for lp in loops:
            if not lp.node.busy():
                lp.request()  # always wanting A
            lp.step()
        clock[0] += 250  # a quarter of a millisecond per pass
        k = 0
        for lp in loops:
            if lp.node.in_cs:
                k += 1
        running += k
        most = k if k > most else most
    nodes = [lp.node for lp in loops]
    print(json.dumps({"impl": sys.implementation.name, "ms": loops[0].node.now,
                      "ops": [nd.ops for nd in nodes], "generated": [nd.generated for nd in nodes],
                      "removed": [nd.removed for nd in nodes], "tx": [w.frames for w in wires],
                      "errors": [nd.errors for nd in nodes], "bad": [lp.dec.bad for lp in loops],
                      "d_gen": [nd.walk[proto_wt.W_GEN] for nd in nodes], "timeouts": [lp.timeouts for lp in loops], "most_running": most, "running_passes": running,
                      "lost_at": lost_at, "dropped_rx": [getattr(u, "lost", 0) for u in uarts],
                      "gaps_counted": [lp._dst[28] for lp in loops],  # frame.S_LOST: the receivers' count
                      "ops_after_loss": ops_after + sum(nd.ops for nd in nodes) if lost_at >= 0 else 0}))


main()
