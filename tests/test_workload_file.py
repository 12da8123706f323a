"""`-w file:PATH`: a file of requests with any times >= 0, or a trace of `sim` or `run` whose
requests are replayed, its times converted with the trace's unit (issue 18, item 6)."""

import json

import pytest

from picoring.cli.main import main
from picoring.sim.simulate import simulate
from picoring.sim.workload import FileWorkload, WorkloadError, make_workload


def sim_json(capsys, *argv):
    status = main(["sim", *argv, "--json"])
    out, err = capsys.readouterr()
    return status, json.loads(out), err


def items(wl):
    """(time, node) of every request, in the order they are made."""
    out = []
    while wl.next_time() is not None:
        t = wl.next_time()
        out += [(t, node) for node, _ in wl.due(t)]
    return out


def test_fractional_times_are_made_at_the_next_whole_unit(tmp_path):
    path = tmp_path / "wl.jsonl"
    path.write_text('{"t": 0.25, "node": 1}\n{"t": 3, "node": 2}\n{"t": 2.0, "node": 0}\n{"t": 3.5, "node": 1}\n')
    wl = make_workload("file:%s" % path, 3, 0)
    assert wl.total == 4 and not wl.defer_busy  # still exact: a saved schedule replays its run
    assert items(wl) == [(1, 1), (2, 0), (3, 2), (4, 1)]


def test_a_file_with_fractional_times_runs(tmp_path, capsys):
    path = tmp_path / "wl.jsonl"
    path.write_text('{"t": 0.5, "node": 1}\n{"t": 7.25, "node": 0}\n')
    status, report, _ = sim_json(capsys, "-p", "q", "-n", "3", "-w", "file:%s" % path)
    assert status == 0 and report["served"] == report["requests"] == 2


@pytest.mark.parametrize("line,message", [
    ('{"t": NaN, "node": 0}', "t must be a time >= 0 (in time units), not nan"),
    ('{"t": Infinity, "node": 0}', "t must be a time >= 0 (in time units), not inf"),
    ('{"t": "1", "node": 0}', "t must be a time >= 0 (in time units), not '1'"),
    ('{"t": true, "node": 0}', "t must be a time >= 0 (in time units), not True"),
    ('{"t": 1, "node": 1.0}', "node must be an integer in 0..2, not 1.0"),
])
def test_bad_times_and_nodes_name_their_line(tmp_path, line, message):
    path = tmp_path / "wl.jsonl"
    path.write_text('{"t": 0, "node": 0}\n' + line + "\n")
    with pytest.raises(WorkloadError) as e:
        make_workload("file:%s" % path, 3, 0)
    assert str(e.value) == "%s:2: %s" % (path, message)


def test_a_simulator_trace_replays_its_run(tmp_path, capsys):
    """Its requests, at their times and nodes: the same run, message for message; -n comes from
    the trace when not given."""
    trace = tmp_path / "d6.jsonl"
    original = simulate("d", 6, "poisson", requests=150, seed=5, trace=str(trace))
    status, replay, err = sim_json(capsys, "-p", "d", "-w", "file:%s" % trace)
    assert status == 0 and err == ""
    assert replay["n"] == 6 and replay["workload"] == "file:%s (sim trace)" % trace
    for key in ("requests", "served", "messages", "max_service_traffic", "latency"):
        assert replay[key] == original[key], key
    # the replay's own trace holds the same requests
    again = tmp_path / "again.jsonl"
    assert main(["sim", "-p", "d", "-w", "file:%s" % trace, "--trace", str(again)]) == 0
    capsys.readouterr()
    reqs = [line for line in trace.read_text().splitlines() if '"ev":"req"' in line]
    assert [line for line in again.read_text().splitlines() if '"ev":"req"' in line] == reqs


def ring_trace(path, unit_us=1700, reqs=((0, 1), (3, 2), (4, 1), (9, 0)), jitter=613, **meta):
    """A trace as the harness writes one: us since the run began, unit_us in the header, each
    request a little after its scheduled time (the host's write and the board's loop)."""
    head = {"v": 2, "ev": "meta", "protocol": "q", "n": 3, "source": "ring", "time_unit": "us",
            "workload": "poisson(rate=0.333333)", "unit_us": unit_us}
    head.update(meta)
    lines = [head]
    for k, node in reqs:
        t = k * (unit_us or 2000) + jitter
        lines += [{"t": t, "ev": "req", "node": node}, {"t": t + 40, "ev": "send", "node": node, "link": node,
                                                        "kind": "request"}]
    lines.append({"t": 10 ** 6, "ev": "end", "quiescent": True, "reason": "done"})
    path.write_text("".join(json.dumps({k: v for k, v in d.items() if v is not None}) + "\n" for d in lines))
    return path


def test_a_ring_trace_converts_its_times_with_its_unit(tmp_path):
    path = ring_trace(tmp_path / "ring.jsonl")
    wl = make_workload("file:%s" % path, 3, 0)
    assert isinstance(wl, FileWorkload) and wl.defer_busy and wl.notes == []
    assert wl.describe() == "file:%s (ring trace, 1700 us per time unit)" % path
    # 613 us after the k-th unit: made at unit k + 1, the first whole unit at or after it
    assert items(wl) == [(1, 1), (4, 2), (5, 1), (10, 0)]
    exact = ring_trace(tmp_path / "exact.jsonl", jitter=0)
    assert items(make_workload("file:%s" % exact, 3, 0)) == [(0, 1), (3, 2), (4, 1), (9, 0)]


def test_a_ring_trace_without_its_unit_takes_runs_default_and_says_so(tmp_path, capsys):
    path = ring_trace(tmp_path / "ring.jsonl", unit_us=None)
    status, report, err = sim_json(capsys, "-p", "q", "-w", "file:%s" % path)
    assert status == 0 and report["requests"] == 4 and report["n"] == 3
    assert "picoring: note: %s does not say how many us make one time unit (unit_us): taking 2000" % path in err


def test_requests_closer_than_the_simulator_serves_them_wait_for_their_node(tmp_path, capsys):
    """On the ring node 1 asked again 1 unit after its first request had been served; the
    simulator is slower there (its token starts elsewhere): the second waits for the exit."""
    path = ring_trace(tmp_path / "ring.jsonl", reqs=((0, 1), (1, 1), (1, 2)))
    status, report, _ = sim_json(capsys, "-p", "q", "-w", "file:%s" % path, "--cs-time", "3")
    assert status == 0 and report["served"] == report["requests"] == 3
    # the same times in a plain file are exact, and say which line asked too early
    plain = tmp_path / "plain.jsonl"
    plain.write_text('{"t": 1, "node": 1}\n{"t": 2, "node": 1}\n')
    assert main(["sim", "-p", "q", "-n", "3", "-w", "file:%s" % plain, "--cs-time", "3"]) == 2
    assert "line 2: node 1 requests at t=2 but its request is still outstanding" in capsys.readouterr().err


def test_a_trace_of_a_larger_ring_says_which_line_does_not_fit(tmp_path, capsys):
    path = ring_trace(tmp_path / "ring.jsonl", n=5, reqs=((0, 1), (2, 4)))
    assert main(["sim", "-p", "q", "-n", "3", "-w", "file:%s" % path]) == 2
    err = capsys.readouterr().err
    assert "ring.jsonl:4: node must be an integer in 0..2, not 4 (the trace's ring has 5 nodes)" in err
    status, report, err = sim_json(capsys, "-p", "q", "-n", "7", "-w", "file:%s" % path)
    assert status == 0 and report["n"] == 7
    assert "is a trace of a ring of 5 nodes; its requests are replayed on 7" in err


@pytest.mark.slow
def test_a_ring_runs_trace_replays_in_the_simulator(tmp_path, capsys):
    """End to end: `run --virtual 3` writes the trace, `sim -w file:` replays its requests: each
    node's k-th request at the first whole time unit (--unit-ms, 2 ms) at or after its time on
    the ring, or later if the simulator is still serving that node's previous one."""
    trace = tmp_path / "ring.jsonl"
    assert main(["run", "--virtual", "3", "-p", "q", "-w", "poisson", "-k", "12", "--seed", "4",
                 "--trace", str(trace), "--json"]) == 0
    ring = json.loads(capsys.readouterr().out)
    asked = [json.loads(line) for line in trace.read_text().splitlines() if '"ev":"req"' in line]
    assert len(asked) == 12
    status, replay, _ = sim_json(capsys, "-p", "q", "-w", "file:%s" % trace, "--trace", str(tmp_path / "sim.jsonl"))
    assert status == 0 and replay["served"] == ring["served"] == 12
    assert json.loads(trace.read_text().splitlines()[0])["unit_us"] == 2000
    made = [json.loads(line) for line in (tmp_path / "sim.jsonl").read_text().splitlines() if '"ev":"req"' in line]
    for node in range(3):
        on_ring = [-(-d["t"] // 2000) for d in asked if d["node"] == node]
        in_sim = [d["t"] for d in made if d["node"] == node]
        assert len(in_sim) == len(on_ring) and all(s >= r for s, r in zip(in_sim, on_ring))
    first = min(asked, key=lambda d: d["t"])  # nothing is outstanding yet: it cannot wait
    assert (made[0]["t"], made[0]["node"]) == (-(-first["t"] // 2000), first["node"])
