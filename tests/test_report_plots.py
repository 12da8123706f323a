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


# -- readable at large n (issue 18, item 5) ----------------------------------------

def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from picoring.check.plots import DPI, FIGSIZE

    return plt, *plt.subplots(figsize=FIGSIZE, dpi=DPI)


def _pixel_row(fig, ax, node, img):
    """The PNG row of a node's y coordinate (the figure saved at its own dpi)."""
    x0, _ = ax.transAxes.transform((0, 0))
    x1, _ = ax.transAxes.transform((1, 0))
    _, y = ax.transData.transform((0, node))
    return img.shape[0] - 1 - int(round(y)), int(x0) + 1, int(x1) - 1


def test_a_node_the_token_reached_once_shows_among_200(tmp_path):
    """A long run is drawn as counts per node and time slice, not thinned: a node the token
    reached once in 200,000 arrivals is still coloured on its own row of the PNG, and the nodes
    it reached in every slice are coloured all along theirs. (Every 12th arrival, as before,
    drew a ring of 200 as if the token visited 50 nodes.)"""
    from matplotlib.image import imread

    from picoring.check.plots import TOKEN_POINTS, token_grid, token_position

    n, rare = 200, 57
    ts = list(range(200_000))  # the token goes round every n time units: each node twice a slice
    nodes = [t % n if t % n != rare else (rare + 1) for t in ts]
    nodes[123_457] = rare  # the only arrival at node 57
    assert len(ts) > TOKEN_POINTS
    counts, edges, per_row = token_grid(ts, nodes, n)
    assert per_row == 1 and counts.shape[0] == n and counts.sum() == len(ts)
    assert counts[rare].sum() == 1
    assert all(counts[k].sum() > 0 for k in range(n))
    plt, fig, ax = _figure()
    token_position(fig, ax, ts, nodes, n, "hop times")
    assert ax.images[0].get_array().shape == counts.shape
    fig.tight_layout()
    assert ax.get_window_extent().height >= 1.5 * n  # at least 1.5 pixels a row: none falls between pixels
    path = tmp_path / "token.png"
    fig.savefig(path, dpi=fig.dpi)
    plt.close(fig)
    img = imread(str(path))[:, :, :3]
    for node in (rare, rare - 1, rare + 1, 0, n - 1):
        row, x0, x1 = _pixel_row(fig, ax, node, img)
        coloured = (img[row, x0:x1] < 0.97).any(axis=1)
        if node == rare:
            assert 0 < coloured.sum() <= 6, coloured.sum()  # one cell: one time slice wide
        else:
            assert coloured.all()  # visited in every slice


def test_a_short_run_draws_every_arrival_as_a_point():
    from picoring.check.plots import token_position

    ts = list(range(3000))
    nodes = [t % 7 for t in ts]
    plt, fig, ax = _figure()
    assert token_position(fig, ax, ts, nodes, 7, "hop times") == ""
    assert list(ax.lines[0].get_xdata()) == ts and list(ax.lines[0].get_ydata()) == nodes
    plt.close(fig)


def _annotations(ax):
    return [(a.get_text(), a.get_va(), a.xyann[1]) for a in ax.texts]


def test_bounds_that_nearly_coincide_are_named_apart():
    """D at n = 200: service traffic bound 598 checked, 597 printed; each line keeps its name,
    one above its line and one below, in their own colours, and the lines differ in style."""
    from picoring.check.plots import _bound_lines

    plt, fig, ax = _figure()
    ax.plot(range(100), [k * 5 for k in range(100)], ".")
    _bound_lines(ax, 598, 597, "checked bound", "paper's printed bound", data_max=495)
    assert sorted(_annotations(ax)) == [("checked 598", "bottom", 3), ("paper 597", "top", -3)]
    lines = {ln.get_label(): ln for ln in ax.lines[1:]}
    assert set(lines) == {"checked bound 598", "paper's printed bound 597"}
    assert lines["checked bound 598"].get_linestyle() != lines["paper's printed bound 597"].get_linestyle()
    assert ax.get_ylim()[1] > 598
    plt.close(fig)


def test_bounds_far_above_the_data_do_not_squash_it():
    """Q at n = 200: service traffic up to 1,586 against bounds of 99,501 and 59,501: the axes
    stay at the data's scale, and the bounds are named at the top with an arrow."""
    from picoring.check.plots import _bound_lines

    plt, fig, ax = _figure()
    ax.plot(range(100), [k * 16 for k in range(100)], ".")
    _bound_lines(ax, 99501, 59501, "checked bound", "paper's printed bound", data_max=1584)
    assert ax.get_ylim()[1] < 2000
    assert [t for t, _, _ in _annotations(ax)] == ["\u2191 checked 99,501", "\u2191 paper 59,501"]
    plt.close(fig)


def test_no_legend_covers_the_data(trace, tmp_path, monkeypatch):
    """Every plot's legend sits outside its axes (above them), so no marker is hidden."""
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    write_report(str(trace), str(tmp_path / "out"))
    assert len(figures) == len(PLOTS)
    legends = 0
    for fig in figures:
        fig.canvas.draw()
        for ax in fig.axes:
            if ax.get_legend() is None:
                continue
            legends += 1
            box, area = ax.get_legend().get_window_extent(), ax.get_window_extent()
            assert box.y0 >= area.y1 - 1, (ax.get_title(), box, area)
            title = ax.title.get_window_extent()
            assert title.y0 >= box.y1 - 1, ax.get_title()  # nor the title the legend
    monkeypatch.undo()
    for fig in figures:
        plt.close(fig)
    assert legends == 4  # messages, service traffic, latency, service per node
