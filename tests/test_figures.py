"""`picoring figures ers`: the rows behind Figures 9 and 10 (sim/figures.py), at a small scale."""

from picoring.sim import figures


def test_each_figure_has_every_curve_at_every_point():
    rows = figures.figure9(ns=(8, 16), rounds=20)
    assert [(r["curve"], r["n"]) for r in rows] == [(c[0], n) for c in figures.CURVES for n in (8, 16)]
    assert {r["figure"] for r in rows} == {9} and {r["gap"] for r in rows} == {figures.FIG9_GAP}
    rows = figures.figure10(n=8, gaps=(5, 20), rounds=20)
    assert [(r["curve"], r["gap"]) for r in rows] == [(c[0], g) for c in figures.CURVES for g in (5, 20)]
    assert {r["figure"] for r in rows} == {10} and {r["n"] for r in rows} == {8}
    for r in rows:
        assert r["requests"] > 0 and r["responsiveness_mean"] >= 0


def test_the_command_writes_the_table(tmp_path, capsys):
    from picoring.cli.main import main

    assert main(["figures", "ers", "--out", str(tmp_path), "--figure", "10", "--rounds", "20", "--no-plots"]) == 0
    assert (tmp_path / "ers_table.csv").read_text().count("\n") == 1 + len(figures.CURVES) * len(figures.FIG10_GAPS)
    assert (tmp_path / "ers_table.md").exists()
