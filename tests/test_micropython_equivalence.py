"""The protocol code and the simulator loop give identical traces under the
real MicroPython binary and under CPython, on the scenarios the other tests use."""

import json
import subprocess
import sys

import pytest

from picoring.sim.simulate import simulate

from conftest import FIRMWARE, ROOT, run_micropython

pytestmark = pytest.mark.slow  # every test here starts MicroPython or a ring (tests/conftest.py)

DRIVER = str(ROOT / "tests" / "mpy_sim_driver.py")
SIMCORE_DIR = str(ROOT / "host" / "picoring" / "sim")


def realized_schedule(protocol, n, workload, requests, seed, cs_time):
    """Run the CPython simulator once and keep the (t, node) requests it made."""
    events = []
    simulate(protocol, n, workload, requests=requests, seed=seed, cs_time=cs_time,
             listener=lambda e: events.append(e) if e.ev == "req" else None)
    return [[e.t, e.node] for e in events]


def run_driver(interpreter, scenario, tmp_path):
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    args = [DRIVER, str(FIRMWARE), SIMCORE_DIR, str(path)]
    if interpreter == "cpython":
        out = subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=60, check=True).stdout
    else:
        out = run_micropython(interpreter, *args)
    return [json.loads(line) for line in out.splitlines()]


SCENARIOS = [
    ("q", 5, "sequential", 20, 1, 1),
    ("d", 5, "sequential", 20, 2, 1),
    ("q", 4, "adversarial", 12, 0, 0),
    ("d", 4, "adversarial", 12, 0, 2),
    ("s", 3, "poisson", 15, 3, 1),
    ("q", 7, "poisson", 40, 4, 1),
    ("d", 7, "poisson", 40, 5, 0),
    ("d", 6, "burst", 18, 6, 1),
    ("d-literal", 2, None, 2, 0, 0),  # the livelock counterexample, see test_bounds_findings.py
    ("toy", 5, "poisson", 30, 7, 1),  # the layer's messages: routed and broadcast, hop by hop
    ("toy", 4, "adversarial", 10, 1, 0),
    ("sk", 5, "poisson", 40, 8, 1),  # Suzuki-Kasami: RN, the token's LN and Q
    ("sk", 6, "burst", 18, 2, 0),
    ("ra", 5, "poisson", 40, 8, 1),  # Ricart-Agrawala: Lamport stamps, the token's LV
    ("ra", 6, "burst", 18, 2, 0),
]


@pytest.mark.parametrize("protocol,n,workload,requests,seed,cs_time", SCENARIOS)
def test_identical_traces(micropython, tmp_path, protocol, n, workload, requests, seed, cs_time):
    if workload is None:
        schedule = [[0, 1], [1, 0]]
    else:
        schedule = realized_schedule(protocol, n, workload, requests, seed, cs_time)
    scenario = {"protocol": protocol, "n": n, "cs_time": cs_time, "schedule": schedule}
    cp = run_driver("cpython", scenario, tmp_path)
    mp = run_driver(micropython, scenario, tmp_path)
    assert len(cp) > requests
    assert mp == cp
    # and the replayed schedule reproduces the simulator's own counts
    result = cp[-1]
    assert result[0] == "result"
    sends = sum(1 for e in cp if e[1] == "send")
    assert sends == result[2] + result[3] + result[4]  # token, request and message hop frames
    # logical: token and request frames, and each message once (its sender's send)
    assert sum(1 for e in cp if e[1] == "send" and (len(e) < 9 or not e[8])) == result[2] + result[3] + result[5]
