"""`picoring compare`: every registered protocol on one workload, in the simulator and on
virtual boards, one row each (check/compare.py, cli/compare.py)."""

import csv
import io
import json

from picoring.check.registry import names
from picoring.cli.main import main
from picoring.sim.simulate import simulate


def _json(capsys, argv):
    status = main(argv + ["--json"])
    return status, json.loads(capsys.readouterr().out)


def test_compare_runs_every_registered_protocol_on_the_same_workload(capsys):
    status, out = _json(capsys, ["compare", "-n", "5", "-w", "adversarial", "-k", "12", "--seed", "2"])
    assert status == 0
    rows = {r["protocol"]: r for r in out["rows"]}
    assert tuple(rows) == names()  # default: all registered, in registry order
    n = 5
    # The adversarial workload asks just behind the resting token (Thm 2.2's construction).
    assert rows["q"]["hop_frames_per_request"] == rows["q"]["logical_per_request"] == n
    assert rows["d"]["hop_frames_per_request"] == 2 * n - 1
    assert (rows["toy"]["logical_per_request"], rows["toy"]["hop_frames_per_request"]) == (2, 2 * n - 1)
    for p, r in rows.items():
        sim = simulate(p, n, "adversarial", requests=12, seed=2)
        assert r["max_service_traffic"] == sim["max_service_traffic"] and r["max_overtaken"] == sim["max_overtaken"]
        checks = {c["check"]: c for c in r["checks"]}
        assert checks["safety"]["ok"] and checks["served"]["ok"]
    assert "logical/req" in {c["check"] for c in rows["toy"]["checks"]}  # the toy's own bound


def test_compare_csv_and_an_unknown_protocol(capsys):
    assert main(["compare", "-p", "q,toy", "-n", "4", "-k", "10", "--csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["protocol"] for r in rows] == ["q", "toy"] and rows[0]["logical_per_request"] == rows[0]["hop_frames_per_request"]
    assert main(["compare", "-p", "q,nope"]) == 2
    assert "nope" in capsys.readouterr().err


def test_compare_on_virtual_boards_counts_as_the_simulator(capsys):
    status, out = _json(capsys, ["compare", "--virtual", "4", "-p", "q,toy", "-w", "sequential", "-k", "8", "--seed", "1"])
    assert status == 0
    for r in out["rows"]:
        sim = simulate(r["protocol"], 4, "sequential", requests=8, seed=1)
        assert (r["logical_per_request"], r["hop_frames_per_request"], r["max_service_traffic"]) == (
            round(sim["logical_per_request"], 3), round(sim["messages_per_request"], 3), sim["max_service_traffic"])
