"""`picoring bench sim`: the SimPy model agrees with picoring's simulator, and
the command runs. Behaviour only: nothing here asserts on speed."""

import contextlib
import io
import json

import pytest

pytest.importorskip("simpy")

from picoring.bench import sim as bench
from picoring.sim import simcore  # noqa: E402
from picoring.check.checker import Checker  # noqa: E402
from picoring.cli.main import main  # noqa: E402
from picoring.firmware.protocol import make_node  # noqa: E402
from picoring.sim.workload import FileWorkload, make_workload  # noqa: E402


def both(protocol, n, workload, link, **kw):
    a, _ = bench.run_picoring(protocol, n, workload=workload, **kw)
    b, _ = bench.run_simpy(protocol, n, workload=workload, link=link, **kw)
    return a, b


@pytest.mark.parametrize("link", bench.LINKS)
@pytest.mark.parametrize("protocol", ["q", "d"])
@pytest.mark.parametrize("workload", ["sequential", "adversarial", "poisson", "burst"])
@pytest.mark.parametrize("cs_time", [0, 1, 3])
def test_same_counts_generated_workloads(protocol, workload, link, cs_time):
    for seed in (0, 1):
        a, b = both(protocol, 5, workload, link, requests=30, seed=seed, cs_time=cs_time)
        assert a["requests"] == 30
        assert a["served"] == 30
        assert a["token_msgs"] + a["request_msgs"] > 0
        assert a == b


def _fixed_schedule(path, protocol, n, lines, cs_time):
    """Write lines [(t, node)] as a file workload, leaving out each line that
    asks a node whose request is still outstanding (a file workload must not),
    as picoring's simulator finds them. Returns the path and the lines kept."""
    lines = list(lines)
    while True:
        path.write_text("".join(json.dumps({"t": t, "node": i}) + "\n" for t, i in lines))
        try:
            bench.run_picoring(protocol, n, workload=lambda: FileWorkload(n, str(path)), cs_time=cs_time)
        except simcore.BusyNodeError as e:
            lineno = int(str(e).split(":")[0].split()[1])
            del lines[lineno - 1]
            continue
        return str(path), lines


def _busy_schedule(tmp_path, protocol, n, seed, cs_time):
    """A fixed schedule with overlapping requests: a busy poisson workload's request times."""
    wl = make_workload("poisson", n, 40, seed=seed, rate=0.5)
    lines = [(t, i) for t, i, _ in wl._items]
    return _fixed_schedule(tmp_path / ("sched-%s-%d-%d.jsonl" % (protocol, seed, cs_time)), protocol, n, lines, cs_time)


@pytest.mark.parametrize("link", bench.LINKS)
@pytest.mark.parametrize("protocol", ["q", "d"])
@pytest.mark.parametrize("cs_time", [0, 1, 2])
def test_same_counts_fixed_schedule(tmp_path, protocol, link, cs_time):
    n = 5
    for seed in (0, 1, 2):
        path, lines = _busy_schedule(tmp_path, protocol, n, seed, cs_time)
        assert len(lines) >= 20
        a, b = both(protocol, n, lambda: FileWorkload(n, path), link, cs_time=cs_time)
        assert a["requests"] == a["served"] == len(lines)
        assert a == b


def test_fixed_schedule_hand_written(tmp_path):
    # Requests colliding with frames at the same node and time: the order of
    # events within one time unit matters here, and both models must keep it.
    n = 5
    wanted = [(0, 3), (0, 1), (1, 4), (2, 2), (2, 0), (5, 3), (6, 1), (6, 4), (9, 2), (12, 3), (13, 0),
              (20, 1), (30, 0), (30, 2), (31, 1), (31, 4), (33, 3)]
    for protocol in ("q", "d"):
        path, lines = _fixed_schedule(tmp_path / ("hand-%s.jsonl" % protocol), protocol, n, wanted, 1)
        assert len(lines) >= 10
        for link in bench.LINKS:
            a, b = both(protocol, n, lambda: FileWorkload(n, path), link, cs_time=1)
            assert a["served"] == len(lines)
            assert a == b


def test_busy_node_is_an_error_in_both(tmp_path):
    path = tmp_path / "busy.jsonl"
    path.write_text('{"t": 0, "node": 3}\n{"t": 1, "node": 3}\n')
    msgs = []
    for run in (bench.run_picoring, bench.run_simpy):
        with pytest.raises(simcore.BusyNodeError) as e:
            run("q", 5, workload=lambda: FileWorkload(5, str(path)))
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1]


def test_mismatch_is_reported():
    a, _ = bench.run_picoring("q", 5, requests=10)
    b = dict(a, token_msgs=a["token_msgs"] + 1)
    with pytest.raises(bench.MismatchError, match="token_msgs"):
        bench.assert_same(a, b, "q n=5")


def test_simpy_model_refuses_protocol_s():
    import simpy

    nodes = [make_node("s", i, 4) for i in range(4)]
    with pytest.raises(ValueError):
        bench.SimPyRing(simpy.Environment(), nodes, make_workload("sequential", 4, 3), 1, Checker("s", 4))


EXPECTED_CASE_KEYS = {
    "protocol", "n", "workload", "seed", "cs_time", "requests", "served", "messages", "token_msgs", "request_msgs",
    "equivalent", "repeats", "seconds", "picoring_msgs_per_s", "simpy_msgs_per_s", "simpy_link",
    "simpy_msgs_per_s_by_link", "ratio", "ratio_median",
}


@pytest.fixture(scope="module")
def quick_json():
    # The command's whole path on runs a test can afford: the real --quick takes about 30 s.
    # A few requests a case (one at n = 10000): what this checks is the command's path, its
    # JSON and exit status, none of which depends on the run's length; that both models
    # count the same is checked at length by test_same_counts_* above.
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(out):
        mp.setattr(bench, "REQUESTS", {case: (max(1, quick // 400), full) for case, (quick, full) in bench.REQUESTS.items()})
        status = main(["bench", "sim", "--quick", "--json"])
    return status, out.getvalue()


def test_quick_cases_are_long_enough_to_measure():
    """--quick once ran 30k messages a case (16 ms of picoring's time) and its ratios swung by
    half between runs: each case now runs at least 700k messages (sequential requests cost
    exactly n messages under Q, 2n - 1 under D)."""
    for (protocol, n), (quick, full) in bench.REQUESTS.items():
        per_request = n if protocol == "q" else 2 * n - 1
        assert 700_000 <= quick * per_request <= full * per_request


def test_bench_sim_quick_json(quick_json):
    status, text = quick_json
    out = json.loads(text)
    # whether the target is met is the machine's business; the exit status must say the same
    assert out["ok"] is out["target_met"] and status == (0 if out["ok"] else 1)
    assert {"command", "quick", "machine", "timing", "target_ratio", "target_met", "ok", "cases"} <= set(out)
    assert out["quick"] is True
    assert {"python", "cpus"} <= set(out["machine"])
    assert [(c["protocol"], c["n"]) for c in out["cases"]] == [("q", 64), ("q", 10000), ("d", 64), ("d", 10000)]
    for c in out["cases"]:
        assert EXPECTED_CASE_KEYS <= set(c)
        assert c["equivalent"] is True
        assert c["served"] == c["requests"] > 0
        assert c["messages"] == c["token_msgs"] + c["request_msgs"] > 0
        assert c["picoring_msgs_per_s"] > 0 and c["simpy_msgs_per_s"] > 0 and c["ratio"] > 0


def test_bench_table(quick_json):
    from rich.console import Console

    result = json.loads(quick_json[1])
    buf = io.StringIO()
    bench.print_table(result, Console(file=buf, width=160))
    text = buf.getvalue()
    for word in ("picoring msg/s", "SimPy msg/s", "ratio", "command:", "machine:", "10000", "target"):
        assert word in text


def made_up_case(protocol, n, ratio):
    """A measured case with made-up timings: SimPy takes ratio times picoring's time."""
    msgs = 1000
    return {"protocol": protocol, "n": n, "workload": "sequential", "seed": 0, "cs_time": 1, "requests": 10,
            "served": 10, "messages": msgs, "picoring_msgs_per_s": msgs / 0.01, "simpy_msgs_per_s": msgs / (0.01 * ratio),
            "simpy_msgs_per_s_by_link": {"process": msgs / (0.01 * ratio)}, "ratio": ratio, "ratio_median": ratio}


@pytest.mark.parametrize("ratios,verdict,status", [((25.0, 31.0), "met", 0), ((25.0, 12.5), "not met", 1)])
def test_bench_sim_says_the_target_verdict_in_its_exit_status(monkeypatch, capsys, ratios, verdict, status):
    # Measurements are made up: this checks that the printed verdict and the exit status agree.
    cases = [made_up_case("q", 64, ratios[0]), made_up_case("d", 64, ratios[1])]
    monkeypatch.setattr(bench, "run_bench", lambda quick=False, log=None: bench.bench_result(cases, quick, 20.0))
    assert main(["bench", "sim"]) == status
    out = " ".join(capsys.readouterr().out.split())
    assert "target picoring >= 20x SimPy (process-based model) and >= 8x its callback floor: %s" % verdict in out
    assert main(["bench", "sim", "--json"]) == status
    assert json.loads(capsys.readouterr().out)["ok"] is (status == 0)


def test_soak_regeneration_times_from_a_trace(tmp_path):
    # A token lost on link 1 while node 2 waited: node 2 times out (200 ms fired) and regenerates
    # 10 ms later; the ring round trip is n x the median matched hop (3 x 1 ms).
    from picoring.bench.soak import regeneration_times
    from picoring.check.trace import Event, TraceWriter, header

    tok = {"count": 0, "state": 0, "seq": 4, "epoch": 0}
    events = [
        Event(0, "send", 0, 0, "token", tok), Event(1000, "recv", 1, 0, "token", tok),
        Event(1500, "req", 2),
        Event(2000, "send", 1, 1, "token", tok),  # lost
        Event(202000, "timeout", 2, extra={"why": "again", "gen_ms": 200, "epoch": 0}),
        Event(212000, "regen", 2, payload={"count": 0, "state": 0, "seq": 4, "epoch": 1}),
        Event(212000, "enter", 2, payload={"seq": 5, "epoch": 1}),
    ]
    path = tmp_path / "t.jsonl"
    with TraceWriter(str(path), header("d", 3, "ring", "us")) as w:
        for e in events:
            w(e)
    rtt_us, rows = regeneration_times(str(path), 3)
    assert rtt_us == 3000
    assert rows == [{"t": 212000, "node": 2, "after_ms": 210.0, "waited": True, "repair_ms": 10.0,
                     "timeout_ms": 200, "budget_ms": 203.0}]
