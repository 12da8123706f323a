"""`picoring report --csv`: the figures behind a report as CSV tables (issue 18, item 6)."""

import csv
import json

import pandas
import pytest

from picoring.check import plots, tables
from picoring.check.checker import check_trace
from picoring.cli.main import main
from picoring.sim.simulate import simulate


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("csv") / "q6.jsonl"
    simulate("q", 6, "poisson", requests=120, seed=9, trace=str(path))
    return path


def read(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_report_csv_writes_three_tables_that_agree_with_the_checker(trace, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["report", str(trace), "--out", str(out), "--csv"]) == 0
    listed = capsys.readouterr().out
    for name in ("summary.csv", "requests.csv", "nodes.csv", "token_position.png", "summary.json"):
        assert str(out / name) in listed
    _, expected = check_trace(trace)
    requests = pandas.read_csv(out / "requests.csv")
    assert tuple(requests.columns) == tables.REQUEST_FIELDS
    assert list(requests["request"]) == list(range(1, 121))
    assert (requests["outcome"] == "served").all() and (requests["time_unit"] == "hop").all()
    assert (requests["latency"] == requests["t_enter"] - requests["t_request"]).all()
    assert requests["service_traffic"].max() == expected["max_service_traffic"]
    assert requests["latency"].max() == expected["latency"]["max"]
    assert requests["overtaken"].max() == expected["max_overtaken"]
    # the requests, at their nodes and times, are the trace's req events
    reqs = [json.loads(line) for line in trace.read_text().splitlines() if '"ev":"req"' in line]
    assert list(zip(requests["node"], requests["t_request"])) == [(d["node"], d["t"]) for d in reqs]
    nodes = pandas.read_csv(out / "nodes.csv")
    assert tuple(nodes.columns) == tables.NODE_FIELDS and list(nodes["node"]) == list(range(6))
    assert nodes["served"].sum() == nodes["requested"].sum() == 120
    by_node = requests.groupby("node")
    for row in nodes.itertuples():
        assert row.requested == len(by_node.get_group(row.node))
        assert row.mean_latency == pytest.approx(by_node.get_group(row.node)["latency"].mean(), abs=1e-3)
        assert row.max_service_traffic == by_node.get_group(row.node)["service_traffic"].max()


def test_summary_csv_is_a_row_of_compare_csv(trace, tmp_path, capsys):
    """Same columns, same figures: runs from `report` and `compare` go into one sheet."""
    assert main(["report", str(trace), "--out", str(tmp_path), "--csv", "--no-plots"]) == 0
    capsys.readouterr()
    assert main(["compare", "-p", "q", "-n", "6", "-w", "poisson", "-k", "120", "--seed", "9", "--csv"]) == 0
    compared = capsys.readouterr().out.splitlines()
    assert (tmp_path / "summary.csv").read_text().splitlines() == compared


def test_requests_not_served_or_failed_say_so(tmp_path):
    """A ring trace: us, a request failed by a restart, one cut short by the end of the trace."""
    lines = [{"v": 2, "ev": "meta", "protocol": "q", "n": 3, "source": "ring", "time_unit": "us"},
             {"t": 100, "ev": "req", "node": 1},
             {"t": 900, "ev": "req", "node": 2},
             {"t": 950, "ev": "fail", "node": 2, "reason": "board restarted"},
             {"t": 1000, "ev": "recv", "node": 1, "link": 0, "kind": "token",
              "payload": {"count": 0, "state": 0, "seq": 0, "epoch": 0}},
             {"t": 1000, "ev": "enter", "node": 1},
             {"t": 1500, "ev": "exit", "node": 1},
             {"t": 2000, "ev": "req", "node": 0}]
    path = tmp_path / "ring.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in lines))
    report, files = plots.write_report(str(path), str(tmp_path / "out"), plots=False, tables=True)
    assert not report["ok"]  # no end record: incomplete
    rows = read(tmp_path / "out" / "requests.csv")
    assert [(r["request"], r["node"], r["t_enter"], r["latency"], r["outcome"], r["time_unit"]) for r in rows] == [
        ("1", "1", "1000", "900", "served", "us"),
        ("2", "2", "", "", "failed: board restarted", "us"),
        ("3", "0", "", "", "not served", "us")]
    nodes = read(tmp_path / "out" / "nodes.csv")
    assert [(r["node"], r["requested"], r["served"], r["mean_latency"]) for r in nodes] == [
        ("0", "1", "0", ""), ("1", "1", "1", "900.0"), ("2", "1", "0", "")]


def test_no_plots_needs_no_matplotlib(trace, tmp_path, monkeypatch, capsys):
    def missing():
        raise plots.PlotError("the plots need matplotlib: pip install -e '.[report]'")

    monkeypatch.setattr(plots, "_pyplot", missing)
    assert main(["report", str(trace), "--out", str(tmp_path), "--csv", "--no-plots"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["nodes.csv", "requests.csv", "summary.csv", "summary.json"]
    capsys.readouterr()
    assert main(["report", str(trace), "--out", str(tmp_path / "p")]) == 2  # plots asked for: said, not a traceback
    assert "the plots need matplotlib" in capsys.readouterr().err
    assert not (tmp_path / "p").exists()
