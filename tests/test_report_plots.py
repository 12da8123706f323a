"""`picoring report`: the checker's summary and PNG plots that are real images."""

import json
import struct

import pytest

from picoring.check.checker import check_trace
from picoring.cli.main import main
from picoring.check.plots import read_series, write_report
from picoring.sim.simulate import simulate

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PLOTS = ("messages_per_request.png", "service_traffic.png", "latency_hist.png", "token_position.png",
         "service_per_node.png")


def png_size(path):
    """(width, height) from the IHDR chunk, which must come first."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, path
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13, path
    return struct.unpack(">II", data[16:24])


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("report") / "d8.jsonl"
    simulate("d", 8, "poisson", requests=200, seed=4, trace=str(path))
    return path


def test_report_writes_png_plots_and_the_checkers_summary(trace, tmp_path):
    out = tmp_path / "out"
    report, files = write_report(str(trace), str(out))
    assert sorted(p.split("/")[-1] for p in files) == sorted(PLOTS + ("summary.json",))
    for name in PLOTS:
        path = out / name
        assert png_size(path) == (1200, 675), name
        assert path.stat().st_size > 8000, name  # axes, labels and data, not a blank canvas
    _, expected = check_trace(trace)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["messages"] == expected["messages"]
    assert summary["max_service_traffic"] == expected["max_service_traffic"]
    assert summary["violations"] == expected["violations"] == []
    assert report["ok"]


def test_series_are_the_checkers(trace):
    meta, series, report = read_series(str(trace))
    _, expected = check_trace(trace)
    assert report == dict(expected, source="sim", workload=meta["workload"])
    assert max(s[2] for s in series.service) == expected["max_service_traffic"]
    assert max(series.latency) == expected["latency"]["max"]
    assert sum(series.served_by_node) == expected["served"]
    assert series.req_count[-1] == expected["requests"]


def test_report_command(trace, tmp_path, capsys):
    out = tmp_path / "cli"
    assert main(["report", str(trace), "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert "max service traffic" in text and "OK" in text
    for name in PLOTS:
        assert str(out / name) in text
        assert png_size(out / name) == (1200, 675)


def test_report_of_a_board_trace_and_of_s(tmp_path):
    """Board traces count time in us; S has no bound: both plot without trouble."""
    path = tmp_path / "ring.jsonl"
    simulate("s", 4, "sequential", requests=20, seed=1, trace=str(path))
    lines = path.read_text().splitlines()
    head = json.loads(lines[0])
    head.update(source="ring", time_unit="us")
    scaled = []
    for line in lines[1:]:
        d = json.loads(line)
        d["t"] = d["t"] * 1700  # about one hop at 115200 baud
        scaled.append(json.dumps(d))
    path.write_text("\n".join([json.dumps(head)] + scaled) + "\n")
    report, files = write_report(str(path), str(tmp_path / "out"))
    assert report["served"] == 20 and report["source"] == "ring"
    for name in PLOTS:
        assert png_size(tmp_path / "out" / name) == (1200, 675)
