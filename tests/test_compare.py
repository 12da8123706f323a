"""`picoring compare`: every registered protocol on one workload, in the simulator and on
virtual boards, one row each (check/compare.py, cli/compare.py)."""

import csv
import io
import json

import pytest

from picoring.check.registry import names
from picoring.cli.main import main
from picoring.sim.simulate import simulate


def _json(capsys, argv):
    status = main(argv + ["--json"])
    out, err = capsys.readouterr()
    assert out, "no JSON (exit status %s); it said:\n%s" % (status, err)  # (a loaded run once: why?)
    return status, json.loads(out)


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
        # fairness does not apply to soft exclusion (None, "n/a"), which the checker does not measure
        assert r["max_service_traffic"] == sim["max_service_traffic"]
        assert r["max_overtaken"] == (None if "soft" in sim else sim["max_overtaken"])
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


# -- on boards given by their ports (--ports): flashed for each protocol in turn ---------------

@pytest.fixture
def fake_ring(monkeypatch, tmp_path):
    """Three 'ports' (files: a port must exist), and flash and the harness's run replaced by
    recorders: the run's report is the simulator's, made a ring's (latency in us)."""
    from picoring.cli import run as cli_run
    from picoring.ring import flash

    ports = []
    for name in ("ttyA", "ttyB", "ttyC"):
        (tmp_path / name).write_text("")
        ports.append(str(tmp_path / name))
    calls = []

    def fake_flash(targets, protocol, baud=None, board=None, mpy=True, **kw):
        calls.append(("flash", protocol, [t.port for t in targets], baud, board, mpy))

    def fake_run(run_ports, protocol, workload, args, resetter=None, progress=None, connected=None):
        calls.append(("run", protocol, list(run_ports), workload.describe(), args.unit_ms, resetter))
        report = simulate(protocol, len(run_ports), "sequential", requests=workload.total, seed=args.seed)
        report["source"] = "ring"
        return report

    monkeypatch.setattr(flash, "flash", fake_flash)
    monkeypatch.setattr(cli_run, "_run_ring", fake_run)
    return ports, calls


def test_compare_on_ports_flashes_each_protocol_before_its_run(fake_ring, capsys, tmp_path):
    ports, calls = fake_ring
    plot = tmp_path / "cmp.svg"
    status, out = _json(capsys, ["compare", "--ports", ",".join(ports), "-p", "toy,q", "-w", "sequential", "-k", "6",
                                 "--seed", "4", "--baud", "1000000", "--unit-ms", "5", "--plot", str(plot)])
    assert status == 0
    assert calls == [("flash", "toy", ports, 1000000, "pico", True), ("run", "toy", ports, "sequential", 5.0, None),
                     ("flash", "q", ports, 1000000, "pico", True), ("run", "q", ports, "sequential", 5.0, None)]
    assert [r["protocol"] for r in out["rows"]] == ["toy", "q"] and out["where"] == "3 boards at 1000000 baud"
    assert out["latency_unit"] == "µs" and out["plot"] == str(plot)
    svg = plot.read_text()
    assert ">ms<" in svg and all(">%s<" % p in svg for p in ("toy", "q"))  # a ring's us, shown in ms


@pytest.mark.parametrize("extra,message", [
    (["-w", "bogus"], "unknown workload 'bogus'"),
    (["-k", "-1"], "--requests cannot be negative"),
    (["-p", "q,nope"], "unknown protocol(s) nope"),
    (["-n", "4"], "-n 4 is the simulator's ring size; this ring has 3 boards"),
    (["--board", "nope"], "--board nope: known boards are"),
    (["--baud", "0"], "--baud must be positive"),
    (["--plot", "x.pdf"], "write a .png or a .svg file"),
    (["--plot", "/nonexistent-picoring/x.png"], "no folder /nonexistent-picoring"),
])
def test_compare_on_ports_checks_its_arguments_before_flashing(fake_ring, capsys, extra, message):
    ports, calls = fake_ring
    assert main(["compare", "--ports", ",".join(ports)] + extra) == 2
    err = capsys.readouterr().err
    assert err.startswith("picoring: ") and message in err, err
    assert calls == []


@pytest.mark.parametrize("argv,message", [
    (["compare", "--board", "pico"], "--board is for boards given by --ports or --ring-file"),
    (["compare", "--virtual", "3", "--no-mpy"], "--no-mpy is for boards given by --ports or --ring-file"),
    (["compare", "--baud", "115200"], "--baud is for a ring of boards"),
    (["compare", "--ports", "/dev/nonexistent-picoring0,/dev/nonexistent-picoring1"],
     "port not found: /dev/nonexistent-picoring0"),
    (["compare", "--ports", "/dev/nonexistent-picoring0", "--virtual", "3"], "not allowed with argument"),
])
def test_compare_argument_mistakes(capsys, argv, message):
    try:
        status = main(argv)
    except SystemExit as e:  # argparse's own: mutually exclusive options
        status = e.code
    assert status == 2 and message in capsys.readouterr().err


def test_compare_on_ports_of_virtual_boards_counts_as_the_simulator(tmp_path, capsys):
    """The whole path on boards named by port (`picoring virtual up`'s, as virtual:I): flash for
    each protocol in turn (mpremote), run through the harness; the counts are the simulator's."""
    from picoring.virtual import supervisor

    d = tmp_path / "state"
    try:
        supervisor.up(d, 3)
        status, out = _json(capsys, ["compare", "--ports", "virtual:0,virtual:1,virtual:2", "--virtual-dir", str(d),
                                     "-p", "q,toy", "-w", "sequential", "-k", "6", "--seed", "1"])
    finally:
        supervisor.down(d)
    assert status == 0, out
    assert [r["protocol"] for r in out["rows"]] == ["q", "toy"] and out["latency_unit"] == "µs"
    for r in out["rows"]:
        sim = simulate(r["protocol"], 3, "sequential", requests=6, seed=1)
        assert (r["logical_per_request"], r["hop_frames_per_request"], r["max_service_traffic"]) == (
            round(sim["logical_per_request"], 3), round(sim["messages_per_request"], 3), sim["max_service_traffic"])


@pytest.mark.parametrize("suffix", [".svg", ".png"])
def test_compare_plot_has_every_protocol(tmp_path, capsys, suffix):
    plot = tmp_path / ("cmp" + suffix)
    assert main(["compare", "-n", "4", "-w", "adversarial", "-k", "8", "--plot", str(plot)]) == 0
    out = capsys.readouterr().out
    assert "plot written to %s" % plot in out and "latency in hop times" in out
    if suffix == ".svg":  # text kept as text: the protocols, the panels, the unit
        svg = plot.read_text()
        for text in names() + ("logical messages", "hop frames", "latency p50", "latency p99", "hop times",
                               "red tick: the checked bound"):
            assert ">%s<" % text in svg, text
        assert "not OK" not in svg
    else:
        data = plot.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_a_run_that_is_not_ok_with_its_checks_passed_says_so(tmp_path):
    """A ring run can pass every check and still not be OK (a run condition: frames placed by a
    clock estimate): the table, the lines under it and the plot say so."""
    from rich.console import Console

    from picoring.check import compare, plots

    report = simulate("q", 3, "adversarial", requests=4, seed=3)
    report.update(ok=False, run_conditions=[{"kind": "order", "explained": False, "message": "2 frame(s) received "
                                             "on link 2 were placed without their send"}])
    row = compare.row(report)
    assert all(c["ok"] is not False for c in row["checks"]) and row["ok"] is False
    console = Console(record=True, width=100, file=io.StringIO())
    compare.print_table([row], "t", console)
    assert "run not OK" in console.export_text()
    assert compare.not_ok_lines(report) == ["run condition: 2 frame(s) received on link 2 were placed without their send"]
    svg = plots.write_compare([row], str(tmp_path / "x.svg"), "t", "µs")
    assert open(svg).read().count(">not OK<") == 1  # under its name, which the panels share


def test_compare_rows_the_wandering_token_against_random_access_on_concurrency_and_intervals(capsys):
    """Soft mutual exclusion (Ciuffoletti): the periodic workload (period Delta_min = 1.5 * cs * n,
    the default of both), the wandering token against random access: less time with two operations
    or more running; hard protocols show none."""
    status, out = _json(capsys, ["compare", "-p", "wt,random,q", "-n", "20", "-w", "periodic", "-k", "400",
                                 "--cs-time", "4"])
    assert status == 0
    rows = {r["protocol"]: r for r in out["rows"]}
    assert rows["q"]["over_one_running"] is None and rows["q"]["interval_p50"] is None
    assert 0 <= rows["wt"]["over_one_running"] < rows["random"]["over_one_running"]
    assert rows["random"]["interval_p50"] >= 120 and rows["wt"]["interval_p50"] >= 120
    assert rows["random"]["logical_per_request"] == rows["random"]["hop_frames_per_request"] == 0


def test_compare_defaults_exit_0_with_d_literal_reported_as_the_documented_finding(capsys):
    """The default set holds d-literal, which docs/bounds.md (finding 1) shows never going quiet:
    its shortfall is expected (its descriptor's "findings"), the command succeeds."""
    assert main(["compare", "-n", "6", "-k", "100"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # (the lines under the table are wrapped)
    assert "d-literal: quiescence, as expected: docs/bounds.md, finding 1" in out
    assert "not OK" not in out
    status, doc = _json(capsys, ["compare", "-n", "6", "-k", "100", "-p", "d-literal,d"])
    rows = {r["protocol"]: r for r in doc["rows"]}
    assert status == 0 and rows["d-literal"]["ok"] is False  # the check itself still fails...
    assert rows["d-literal"]["verdict"] == "expected" and rows["d"]["verdict"] == "ok"  # ...as documented
    assert [e["check"] for e in rows["d-literal"]["expected"]] == ["quiescence"]


def test_only_a_documented_shortfall_is_expected():
    """Another violation of d-literal, or the same one of d (whose descriptor documents none),
    or an unexplained run condition is a failure."""
    from picoring.check import compare

    base = simulate("d-literal", 2, "sequential", requests=2)
    quiet = {"kind": "quiescence", "request": None, "node": None, "t": 9, "message": "not quiet"}
    safety = dict(quiet, kind="safety", message="two in the critical section")
    assert compare.verdict(dict(base, ok=False, violations=[quiet]))[0] == "expected"
    assert compare.verdict(dict(base, ok=False, violations=[quiet, safety]))[0] == "failed"
    assert compare.verdict(dict(base, protocol="d", ok=False, violations=[quiet]))[0] == "failed"
    assert compare.verdict(dict(base, ok=False, violations=[quiet], run_conditions=[
        {"kind": "order", "explained": False, "message": "placed without their send"}]))[0] == "failed"
    assert compare.verdict(dict(base, ok=False, violations=[]))[0] == "failed"  # not OK, and nothing says why


def test_compare_fails_when_a_shortfall_comes_with_the_documented_one(tmp_path, capsys):
    """docs/bounds.md's two-request schedule: d-literal never goes quiet and its circulation runs
    its messages over the bound before the run stops; the bound is not documented: exit 1."""
    two = tmp_path / "two.jsonl"
    two.write_text('{"t":0,"node":1}\n{"t":1,"node":0}\n')
    assert main(["compare", "-p", "d-literal,d", "-n", "2", "-w", "file:%s" % two, "--cs-time", "0"]) == 1
    out = " ".join(capsys.readouterr().out.split())  # (the lines under the table are wrapped)
    assert "FAILED: hops/req, quiet" in out and "d-literal not OK: bound: 23 messages for 2 requests" in out


def test_the_table_is_readable_at_80_columns(tmp_path):
    """Every column's header and every row's verdict whole at 80 columns, with a ring's
    latencies in microseconds, a long protocol spec and the soft protocols' own table."""
    from rich.console import Console

    from picoring.check import compare

    rows = [compare.row(simulate(p, 6, "poisson", requests=60, seed=1)) for p in names()]
    rows = [dict(r, latency_p50=1978970 + 1000 * i, latency_p99=12345678 + 1000 * i,
                 responsiveness=None if r["responsiveness"] is None else 2265.7) for i, r in enumerate(rows)]
    rows.append(compare.row(simulate("raymond:tree=path,holder=2", 6, "poisson", requests=20, seed=1)))
    console = Console(record=True, width=80, file=io.StringIO())
    compare.print_table(rows, "a title", console, unit="µs")  # a ring's run: shown in ms
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    for head in ("protocol", "logical", "hops", "p50", "p99", "resp", "svc", "fair", "checks", ">1 running",
                 "gap p50", "gap p99"):
        assert " %s " % head in text + " ", head
    assert "a title; latency in ms" in text and " 1979 " in text and " 12346 " in text
    assert " 2.3 " in text and "2265" not in text  # responsiveness in ms too
    assert text.count(" ok") + text.count("expected") >= len(rows)
    for p in names():
        assert "\n %s " % p in text, p


def test_a_figure_that_does_not_apply_says_n_a_and_a_saturated_run_says_so(capsys):
    """Soft exclusion has no responsiveness nor fairness (None, "n/a"); dag at -n 6 -k 100 makes
    requests faster than it serves them: 47 wait at once behind their node's own."""
    from picoring.check import compare

    status, doc = _json(capsys, ["compare", "-n", "6", "-k", "100", "-p", "wt,dag,q"])
    rows = {r["protocol"]: r for r in doc["rows"]}
    assert rows["wt"]["responsiveness"] is None and rows["wt"]["max_overtaken"] is None
    assert rows["q"]["responsiveness"] > 0 and rows["q"]["max_overtaken"] is not None
    assert rows["dag"]["requests_queued_max"] == 47 and compare.saturated(rows["dag"])
    assert rows["q"]["requests_queued_max"] < 6 and not compare.saturated(rows["q"])
    assert main(["compare", "-n", "6", "-k", "100", "-p", "wt,dag,q"]) == 0
    out = capsys.readouterr().out
    text = " ".join(out.split())
    assert "dag: saturated: up to 47 requests at once waited behind their node's own" in text
    assert "q: saturated" not in text
    line = next(line for line in out.splitlines() if line.startswith(" wt "))
    assert line.split().count("n/a") == 2  # resp and fair
    assert " 77* " in next(line for line in out.splitlines() if line.startswith(" dag "))


def test_the_plot_fits_a_screen_one_panel_per_measure_and_no_label_over_a_bound(tmp_path):
    """Every registered protocol: at most 2,000 px wide and 1,200 high at the plot's DPI, four
    panels, and no value label over a bound's tick."""
    import struct

    from picoring.check import compare, plots

    rows = [compare.row(simulate(p, 6, "poisson", requests=100, seed=0)) for p in names()]
    path = plots.write_compare(rows, str(tmp_path / "c.png"), "t", "hop times")
    width, height = struct.unpack(">II", open(path, "rb").read(24)[16:24])
    assert width <= 2000 and height <= 1200, (width, height)
    fig = plots.compare_figure(rows, "t", "hop times")
    try:
        renderer = fig.canvas.get_renderer()
        assert [ax.get_title() for ax in fig.axes] == ["logical messages", "hop frames", "latency p50", "latency p99"]
        ticks = labels = 0
        for ax in fig.axes:
            boxes = [t.get_window_extent(renderer) for t in ax.texts]
            labels += len(boxes)
            for coll in ax.collections:  # the bounds' ticks
                for seg in coll.get_segments():
                    (x0, y0), (x1, y1) = ax.transData.transform(seg)
                    ticks += 1
                    for b in boxes:
                        assert not (b.x0 - 1 <= x0 <= b.x1 + 1 and b.y0 <= max(y0, y1) and min(y0, y1) <= b.y1), (
                            ax.get_title(), b)
        assert ticks >= 10 and labels == 4 * len(rows)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_a_saturated_simulation_says_so_in_its_report():
    from rich.console import Console

    from picoring.check.report import print_report

    console = Console(record=True, width=200, file=io.StringIO())
    print_report(simulate("dag", 6, "poisson", requests=100), console)
    line = next(line for line in console.export_text().splitlines() if "saturated" in line)
    assert [cell.strip() for cell in line.split("│")[1:4]] == [
        "saturated: requests that waited behind their node's own, most at once / in all", "47 / 89",
        "the latency is that queue's"]
    console = Console(record=True, width=200, file=io.StringIO())
    print_report(simulate("q", 6, "poisson", requests=100), console)
    assert "saturated" not in console.export_text()
