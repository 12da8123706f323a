# The protocols' own part of the hops `picoring bench chip` measures for sk, ra, DAG and Raymond
# (docs/performance.md, "The delivered hops and Raymond's tree hop"): on_message alone, called K
# times, less a loop that only resets the state it changes; chip microseconds a call. On an
# emulated Pico, from the project root, DIR a folder with protocol.py, graphs.py and the four
# proto_*.py of the firmware to measure:
#   ../shared/rp2040/exec tests/mp_protocol_hop_bench.py --upload DIR
# (runs on any MicroPython; the unix port's figures are not a Pico's).
import time
import gc
import protocol
import proto_sk
import proto_ra
import proto_dag
import proto_raymond

K = 300


def per(f):
    gc.collect()
    t0 = time.ticks_us()
    for _ in range(K):
        f()
    return time.ticks_diff(time.ticks_us(), t0) / K


buf = bytearray(64)
buf[5] = 5  # seq 5, epoch 0, the rest 0: LN/LV zero, |Q| 0, more 0

sk = proto_sk.NodeSK(2, 3)
ra = proto_ra.NodeRA(2, 3)
dag = proto_dag.NodeDAG(2, 3)
ray = proto_raymond.NodeRaymond(0, 3)


def sk_base():
    sk.has_token = False


def sk_hop():
    sk.has_token = False
    sk.on_message(1, 0, buf)


def ra_base():
    ra.has_token = False


def ra_hop():
    ra.has_token = False
    ra.on_message(1, 0, buf)


def dag_base():
    s = dag.sign
    s[0] = 1
    s[1] = 1
    dag.has_token = False
    dag.flipping = False


def dag_hop():
    s = dag.sign
    s[0] = 1
    s[1] = 1
    dag.has_token = False
    dag.flipping = False
    dag.on_message(1, 0, buf)


def ray_base():
    ray.queue[0] = 2
    ray.qlen = 1
    ray.has_token = False


def ray_hop():
    ray.queue[0] = 2
    ray.qlen = 1
    ray.has_token = False
    ray.on_message(1, 1, buf)


native = getattr(proto_raymond, "on_message_native", None)  # the tree hop's native twin, where it has one


def ray_native_hop():
    ray.queue[0] = 2
    ray.qlen = 1
    ray.has_token = False
    native(ray, 1, 1, buf)


fbuf = bytearray(64)
fbuf[5] = 2  # a FLIP of origin 2, no marks left
dag1 = proto_dag.NodeDAG(1, 3)


def nothing():
    pass


def flip_on():
    dag1.on_message(2, 2, fbuf)


def back_base():
    dag.flipping = True


def flip_back():
    dag.flipping = True
    dag.on_message(2, 1, fbuf)


dag_hop()
assert dag.out_kind == 2 and dag.out_dst == 1, (dag.out_kind, dag.out_dst)
ray_hop()
assert ray.out_kind == 1 and ray.out_dst == 2 and not ray.has_token, (ray.out_kind, ray.out_dst)
flip_on()
assert dag1.out_dst == 2 and dag1.out_kind == 2
hops = [("sk delivered", sk_base, sk_hop), ("ra delivered", ra_base, ra_hop),
        ("dag delivered (FLIP out)", dag_base, dag_hop), ("raymond tree hop", ray_base, ray_hop),
        ("dag FLIP in and on", nothing, flip_on), ("dag FLIP back", back_base, flip_back)]
if native is not None and native is not proto_raymond.NodeRaymond.on_message:
    ray_native_hop()
    assert ray.out_kind == 1 and ray.out_dst == 2 and not ray.has_token, (ray.out_kind, ray.out_dst)
    hops.append(("raymond tree hop (native)", ray_base, ray_native_hop))
for name, base, hop in hops:
    b = per(base)
    h = per(hop)
    print("%-26s %6.1f us (loop %5.1f)" % (name, h - b, b))
