"""The simulator loop: its fast path, and replaying a realized schedule."""

import pytest

from picoring.sim import simulate
from picoring.workload import Schedule

CASES = [(p, n, w, cs, seed) for p in ("q", "d", "d-literal", "s") for n in (2, 3, 7) for w in
         ("sequential", "adversarial", "poisson", "burst") for cs in (0, 2) for seed in (0, 1)]


@pytest.mark.parametrize("protocol,n,workload,cs_time,seed", CASES)
def test_fast_path_changes_nothing(protocol, n, workload, cs_time, seed):
    # A listener turns the lone-frame fast path off: both runs must agree exactly.
    fast = simulate(protocol, n, workload, requests=25, seed=seed, cs_time=cs_time, rate=0.5)
    slow = simulate(protocol, n, workload, requests=25, seed=seed, cs_time=cs_time, rate=0.5, listener=lambda e: None)
    assert fast == slow


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("cs_time", [0, 1, 3])
def test_realized_schedule_replays_the_run(seed, cs_time):
    # poisson at a high rate defers many requests; the realized schedule, run as
    # an exact (file) workload, must give the same run.
    reqs = []
    first = simulate("d", 5, "poisson", requests=40, seed=seed, cs_time=cs_time, rate=0.8,
                     listener=lambda e: reqs.append((e.t, e.node)) if e.ev == "req" else None)
    again = simulate("d", 5, Schedule(5, reqs), cs_time=cs_time)
    for key in ("messages", "max_service_traffic", "latency", "served", "end_time"):
        assert again[key] == first[key]
