"""`picoring sim` from the command line: reports, exit statuses, workload errors."""

import json

import pytest

from picoring.cli.main import main

KEYS = ("protocol", "n", "requests", "served", "messages", "messages_per_request", "max_service_traffic",
        "bounds", "safety_violations", "ok")


def run_json(capsys, *argv):
    status = main(["sim", *argv, "--json"])
    return status, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("protocol", ["s", "q", "d"])
@pytest.mark.parametrize("workload", ["poisson", "burst", "sequential", "adversarial"])
def test_every_protocol_and_workload(capsys, protocol, workload):
    status, report = run_json(capsys, "--protocol", protocol, "-n", "6", "--workload", workload, "--requests", "60", "--seed", "2")
    assert status == 0
    for key in KEYS:
        assert key in report
    assert set(report["messages"]) == {"total", "token", "request"}
    assert report["served"] == report["requests"] == 60
    assert report["ok"] is True


def test_deterministic_for_a_seed(capsys):
    a = run_json(capsys, "-p", "d", "-n", "9", "-k", "300", "--seed", "7")[1]
    b = run_json(capsys, "-p", "d", "-n", "9", "-k", "300", "--seed", "7")[1]
    c = run_json(capsys, "-p", "d", "-n", "9", "-k", "300", "--seed", "8")[1]
    assert a == b
    assert a["messages"] != c["messages"] or a["latency"] != c["latency"]


def test_d_literal_livelock_fails_with_its_schedule(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    wl = tmp_path / "wl.jsonl"
    wl.write_text('{"t": 0, "node": 1}\n{"t": 1, "node": 0}\n')
    status, report = run_json(capsys, "-p", "d-literal", "-n", "2", "-w", "file:%s" % wl, "--cs-time", "0")
    assert status == 1
    assert report["quiescent"] is False
    saved = tmp_path / report["schedule_file"]
    assert [json.loads(line) for line in saved.read_text().splitlines()] == [{"t": 0, "node": 1}, {"t": 1, "node": 0}]
    # the saved schedule replays the same run
    status2, replay = run_json(capsys, "-p", "d-literal", "-n", "2", "-w", "file:%s" % saved, "--cs-time", "0",
                               "--schedule-out", str(tmp_path / "again.jsonl"))
    assert status2 == 1 and replay["messages"] == report["messages"]


def test_schedules_never_overwrite_and_stay_out_of_the_working_folder(tmp_path, capsys, monkeypatch):
    """Schedules of runs that did not go quiet go to $XDG_STATE_HOME/picoring/schedules (or next
    to --trace), each under its own name; a rerun of the same run finds its file (issue 18, item 3)."""
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text('{"t": 0, "node": 1}\n{"t": 1, "node": 0}\n')
    b.write_text('{"t": 1, "node": 1}\n{"t": 2, "node": 0}\n')
    argv = ["-p", "d-literal", "-n", "2", "--cs-time", "0"]
    files = []
    for wl in (a, b, a):
        status, report = run_json(capsys, *argv, "-w", "file:%s" % wl)
        assert status == 1
        files.append(report["schedule_file"])
    folder = tmp_path / "state" / "picoring" / "schedules"
    assert files == [str(folder / "nonquiescent-d-literal-n2-seed0.jsonl"),
                     str(folder / "nonquiescent-d-literal-n2-seed0-2.jsonl"),
                     str(folder / "nonquiescent-d-literal-n2-seed0.jsonl")]
    assert [line for line in open(files[1])] == b.read_text().splitlines(keepends=True)
    assert list(work.iterdir()) == []
    # with --trace: next to the trace; the human report and --json's stderr say where
    (tmp_path / "t").mkdir()
    assert main(["sim", *argv, "-w", "file:%s" % a, "--trace", str(tmp_path / "t" / "run.jsonl")]) == 1
    out = capsys.readouterr().out.replace("\n", "")  # rich wraps long lines
    assert "schedule that led there: %s" % (tmp_path / "t" / "nonquiescent-d-literal-n2-seed0.jsonl") in out
    status = main(["sim", *argv, "-w", "file:%s" % b, "--trace", str(tmp_path / "t" / "run.jsonl"), "--json"])
    assert status == 1
    assert "its schedule is in %s" % (tmp_path / "t" / "nonquiescent-d-literal-n2-seed0-2.jsonl") in capsys.readouterr().err


def test_human_report(capsys):
    assert main(["sim", "-p", "q", "-n", "4", "-w", "sequential", "-k", "10"]) == 0
    out = capsys.readouterr().out
    assert "protocol Q, n=4" in out and "messages per request" in out and "OK" in out


@pytest.mark.parametrize("content,message", [
    ('{"t": 0, "node": 1}\nnope\n', "wl.jsonl:2: not JSON"),
    ('{"t": 0, "node": 9}\n', "wl.jsonl:1: node must be an integer in 0..3"),
    ('{"t": -1, "node": 0}\n', "wl.jsonl:1: t must be a time >= 0 (in time units), not -1"),
    ('{"t": 0}\n', 'wl.jsonl:1: expected {"t"'),
    ('{"t": 0, "node": 1}\n{"t": 1, "node": 1}\n', "line 2: node 1 requests at t=1 but its request is still outstanding"),
])
def test_bad_workload_files(tmp_path, capsys, content, message):
    wl = tmp_path / "wl.jsonl"
    wl.write_text(content)
    assert main(["sim", "-p", "q", "-n", "4", "-w", "file:%s" % wl]) == 2
    err = capsys.readouterr().err
    assert err.startswith("picoring: ")
    assert message in err


def test_bad_arguments(capsys):
    assert main(["sim", "-n", "1"]) == 2
    assert "at least 2" in capsys.readouterr().err
    assert main(["sim", "-w", "zipf"]) == 2
    assert "unknown workload 'zipf'" in capsys.readouterr().err
    assert main(["sim", "-w", "file:/nonexistent/x.jsonl"]) == 2
    assert "cannot open workload file" in capsys.readouterr().err


def test_large_ring_runs(capsys):
    status, report = run_json(capsys, "-p", "d", "-n", "10000", "-w", "sequential", "-k", "3")
    assert status == 0 and report["messages"]["total"] == 3 * (2 * 10000 - 1)
