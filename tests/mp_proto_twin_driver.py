# Runs the protocols' twin functions (proto_sk.py: take_arrays, queue_waiting, give_arrays;
# proto_ra.py: take_stamps, oldest_waiting, give_stamps; proto_dag.py: flip_marks, pass_flip;
# proto_raymond.py: pass_header; each *_py and
# *_viper) on the cases in a JSON file and prints one JSON line: {"impl": ..., "results": {twin:
# [...]}}, each result the function's return value and the buffers it was given, as they are after
# the call. Under MicroPython both twins run; under CPython only the *_py ones exist.
# Usage: <python> mp_proto_twin_driver.py FIRMWARE_DIR CASES.json
import sys

sys.path.insert(0, sys.argv[1])
import json
from array import array

import proto_dag
import proto_ra
import proto_raymond
import proto_sk

MODULE = {"take_arrays": proto_sk, "queue_waiting": proto_sk, "give_arrays": proto_sk,
          "take_stamps": proto_ra, "oldest_waiting": proto_ra, "give_stamps": proto_ra,
          "flip_marks": proto_dag, "pass_flip": proto_dag,
          "pass_header": proto_raymond}
# Each case: [name, arguments...]; a list argument of ints is an int array ("i": LN, RN, LV, RQ)
# when named here, else a bytearray (a payload, Q, inq, the signposts).
INT_ARRAYS = {"take_arrays": (3,), "queue_waiting": (0, 1), "give_arrays": (3,),
              "take_stamps": (3,), "oldest_waiting": (0, 1), "give_stamps": (3,), "flip_marks": (),
              "pass_flip": (), "pass_header": ()}


def run(case, suffix):
    name = case[0]
    f = getattr(MODULE[name], name + suffix, None)
    if f is None:
        return None
    args = []
    for k, a in enumerate(case[1:]):
        if isinstance(a, list):
            a = array("i", a) if k in INT_ARRAYS[name] else bytearray(a)
        args.append(a)
    r = f(*args)
    return [r] + [list(a) for a in args if not isinstance(a, int)]


def main():
    with open(sys.argv[2]) as fh:
        cases = json.load(fh)
    results = {}
    for suffix in ("_py", "_viper"):
        got = [run(c, suffix) for c in cases]
        if all(g is not None for g in got):
            results[suffix[1:]] = got
    print(json.dumps({"impl": sys.implementation.name, "results": results}))


main()
