"""`picoring report`: the checker's figures of a trace as PNG plots (matplotlib, Agg).

One pass over the trace feeds a Checker and records, per request, what the
checker measured (service traffic, latency), so the plots show the checker's
own numbers. Files written (DIR/...):
  messages_per_request.png  messages / requests so far, over the run, with the bounds
  service_traffic.png       service traffic of every request, with the bounds
  latency_hist.png          latency histogram (hop times or us, as the trace says)
  token_position.png        the node the token was received at, over time: every arrival as a
                            point, or, for long runs, counted in a grid of time slices by nodes
                            (one row per node up to TOKEN_ROWS nodes), so no node drops out
  service_per_node.png      requests served per node (fairness)
  summary.json              the checker's report
and with --csv the tables behind them (check/tables.py: summary.csv, requests.csv, nodes.csv).
"""

import json
import math
import os

from .checker import Checker, finish_trace
from .quantile import nearest_rank
from .compare import number
from .trace import TraceReader

DPI = 150
FIGSIZE = (8, 4.5)  # inches: 1200 x 675 pixels at DPI
TOKEN_POINTS = 20_000  # token arrivals drawn one point each; more are counted in a grid
TOKEN_ROWS = 300  # grid rows (nodes, or groups of nodes beyond): at least 1.5 pixels each
TOKEN_SLICES = 500  # grid columns (time slices): about 2 pixels each


class RunSeries:
    """A Checker plus the per-request series the plots need; callable with Events."""

    def __init__(self, protocol, n, time_unit="hop"):
        self.checker = Checker(protocol, n, time_unit=time_unit)
        self.n = n
        self.req_count = []  # at each request: requests so far
        self.req_total = []  # ... and messages so far
        self.service = []  # per service, in order: (request id, node, service traffic)
        self.latency = []
        self.served_by_node = [0] * n
        self.requests_by_node = [0] * n
        self.latency_by_node = [0] * n  # sums
        self.token_t = [0]  # every run starts with the token at node 0
        self.token_node = [0]
        # per request, in the order made (check/tables.py REQUEST_FIELDS): request id, node,
        # t request, t enter, latency, service traffic (hop frames, logical), overtaken, outcome
        self.requests = []

    def __call__(self, event):
        c = self.checker
        ev = event.ev
        if ev == "enter":
            pending = c.pending.get(event.node)
            c.feed(event)
            if pending is not None:
                rid, t_req, msgs_at_req, logical_at_req, entries_at_req = pending
                self.service.append((rid, event.node, c.total - msgs_at_req))
                self.latency.append(event.t - t_req)
                self.served_by_node[event.node] += 1
                self.latency_by_node[event.node] += event.t - t_req
                self.requests[rid - 1][3:] = [event.t, event.t - t_req, c.total - msgs_at_req,
                                              c.logical - logical_at_req, c.entries - 1 - entries_at_req, "served"]
            return
        if ev == "fail":
            pending = c.pending.get(event.node)
            if pending is not None:
                self.requests[pending[0] - 1][8] = "failed: %s" % ((event.extra or {}).get("reason") or "?")
        c.feed(event)
        if ev == "req":
            self.requests_by_node[event.node] += 1
            self.req_count.append(c.requests)
            self.req_total.append(c.total)
            self.requests.append([c.requests, event.node, event.t, None, None, None, None, None, "not served"])
        elif ev == "recv" and event.kind == "token":
            self.token_t.append(event.t)
            self.token_node.append(event.node)


def read_series(path, progress=None):
    """(meta, RunSeries, report) of a trace file; the report is check_trace's. progress:
    TraceReader's."""
    with TraceReader(path, progress) as reader:
        meta = reader.meta
        series = RunSeries(meta["protocol"], meta["n"], meta.get("time_unit", "hop"))
        for event in reader:
            series(event)
    report = finish_trace(series.checker)
    report.setdefault("source", meta.get("source"))
    if meta.get("workload"):
        report.setdefault("workload", meta["workload"])
    return meta, series, report


def write_report(trace_path, out_dir, plots=True, tables=False, progress=None):
    """Write the plots (unless plots is false: then matplotlib is not needed), summary.json,
    and with tables the CSV tables of check/tables.py; returns (report, [paths]). progress:
    TraceReader's, while the trace is read."""
    if plots:
        _pyplot()  # before the trace is read: a missing matplotlib costs nothing
    meta, series, report = read_series(trace_path, progress)
    os.makedirs(out_dir, exist_ok=True)
    files = _plots(meta, series, out_dir) if plots else []
    path = os.path.join(out_dir, "summary.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    files.append(path)
    if tables:
        from .tables import write_tables

        files += write_tables(series, report, "us" if meta.get("time_unit") == "us" else "hop", out_dir)
    return report, files


def _plots(meta, series, out_dir):
    plt = _pyplot()
    unit = "µs" if meta.get("time_unit") == "us" else "hop times"
    what = "%s, n=%d, %s%s" % (
        meta["protocol"].upper(), meta["n"], "simulator" if meta.get("source") == "sim" else "boards",
        (", " + meta["workload"]) if meta.get("workload") else "")
    c = series.checker
    files = []

    def save(fig, name):
        path = os.path.join(out_dir, name)
        fig.tight_layout()
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
        files.append(path)

    # messages per request over the run
    fig, ax = plt.subplots(figsize=FIGSIZE)
    if series.req_count:
        xs = series.req_count + [c.requests]
        ys = [t / k for t, k in zip(series.req_total, series.req_count)] + [c.total / c.requests]
        ax.plot(xs, ys, drawstyle="steps-post", color="C0", label="messages / requests so far")
    _bound_lines(ax, c.bound_mpr, c.paper_mpr, "checked bound", "paper's printed bound",
                 max(ys) if series.req_count else None)
    ax.set_title("Messages per request over the run\n" + what, pad=_TITLE_PAD)
    ax.set_xlabel("requests made")
    ax.set_ylabel("messages per request")
    ax.set_ylim(bottom=0)
    _legend(ax)
    save(fig, "messages_per_request.png")

    # service traffic per request
    fig, ax = plt.subplots(figsize=FIGSIZE)
    if series.service:
        ax.plot([s[0] for s in series.service], [s[2] for s in series.service], ".", markersize=3, color="C0",
                label="service traffic of a request")
    _bound_lines(ax, c.bound_service, c.paper_service, "checked bound", "paper's printed bound",
                 c.max_service if series.service else None)
    ax.set_title("Service traffic per request (max %d)\n%s" % (c.max_service, what), pad=_TITLE_PAD)
    ax.set_xlabel("request number")
    ax.set_ylabel("messages from request to token arrival")
    ax.set_ylim(bottom=0)
    _legend(ax)
    save(fig, "service_traffic.png")

    # latency histogram
    fig, ax = plt.subplots(figsize=FIGSIZE)
    lat = series.latency
    if lat:
        lo, hi = min(lat), max(lat)
        if unit == "hop times":
            # whole hop times per bar (1 up to 200 of them): bars of 4.12 hop times would hold
            # 4 or 5 values each and draw a comb that is not in the data
            width = max(1, math.ceil((hi - lo + 1) / 100)) if hi - lo > 200 else 1
            bins = [lo - 0.5 + k * width for k in range((hi - lo) // width + 2)]
        else:
            bins = 50
        ax.hist(lat, bins=bins, color="C0", edgecolor="white", linewidth=0.3)
        srt = sorted(lat)
        p50, p99 = nearest_rank(srt, 0.5), nearest_rank(srt, 0.99)  # as the dashboard shows them
        for v, name, style in ((p50, "p50", "--"), (p99, "p99", ":")):
            ax.axvline(v, color="C3", linestyle=style, linewidth=1, label="%s = %s %s" % (name, _fmt(v), unit))
        ax.set_title("Latency, request to critical section (mean %s, max %s %s)\n%s"
                     % (_fmt(sum(lat) / len(lat)), _fmt(hi), unit, what), pad=_TITLE_PAD)
    else:
        ax.set_title("Latency: no request served\n" + what, pad=_TITLE_PAD)
    ax.set_xlabel("latency (%s)" % unit)
    ax.set_ylabel("requests")
    _legend(ax)
    save(fig, "latency_hist.png")

    # token position over time
    fig, ax = plt.subplots(figsize=FIGSIZE, dpi=DPI)
    how = token_position(fig, ax, series.token_t, series.token_node, meta["n"], unit)
    ax.set_title("Token position over time%s\n%s" % (how, what))
    save(fig, "token_position.png")

    # fairness
    fig, ax = plt.subplots(figsize=FIGSIZE)
    idx = list(range(meta["n"]))
    ax.bar(idx, series.requests_by_node, color="none", edgecolor="C7", label="requested")
    ax.bar(idx, series.served_by_node, color="C2", width=0.6, label="served")
    ax.yaxis.get_major_locator().set_params(integer=True)
    # fairness is about waiting, not counts (the workload picks the nodes): mean latency per node
    ax2 = ax.twinx()
    mean_lat = [(s / k) if k else float("nan") for s, k in zip(series.latency_by_node, series.served_by_node)]
    ax2.plot(idx, mean_lat, "D", markersize=3.5, color="C3", label="mean latency")
    ax2.set_ylabel("mean latency (%s)" % unit, color="C3")
    ax2.set_ylim(bottom=0)
    ax.set_title("Service per node (fairness): %d of %d requests served\n%s" % (c.served, c.requests, what),
                 pad=_TITLE_PAD)
    ax.set_xlabel("node")
    ax.set_ylabel("requests")
    if meta["n"] <= 32:
        ax.set_xticks(idx)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    _legend(ax, h1 + h2, l1 + l2)  # above the bars: a legend inside would hide some of them
    save(fig, "service_per_node.png")
    return files


class PlotError(ValueError):
    """The plots cannot be drawn here (no matplotlib); the command line says so, no traceback."""


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise PlotError("the plots need matplotlib: pip install -e '.[report]' (or report --csv --no-plots)") from None
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


_TITLE_PAD = 20  # points between an axes and its title: room for the legend above the axes


def _bound_lines(ax, bound, paper, bound_label, paper_label, data_max=None):
    """The checked bound (solid) and the paper's printed one (dashed), drawn over the data, each
    named at its right end; two that nearly coincide (D's service traffic at n = 200: 598 and
    597) get their names one above and one below, so both stay readable. A bound far above the
    data (Q's service traffic: 1,586 against 99,501) would squash the data to a line: it is
    named at the top of the axes, with an arrow, instead of drawn."""
    if bound is None and paper is None:
        ax.text(0.99, 0.97, "S: unbounded (Thm 2.1)", transform=ax.transAxes, ha="right", va="top", fontsize=9)
        return
    lines = []
    if bound is not None:
        lines.append((bound, "checked", "%s %s" % (bound_label, _fmt(bound)), "C3", "-", 1.5))
    if paper is not None and paper != bound:
        lines.append((paper, "paper", "%s %s" % (paper_label, _fmt(paper)), "C1", (0, (4, 2)), 1.5))
    lo, data_hi = ax.get_ylim()
    off = [ln for ln in lines if data_max and ln[0] > 4 * data_max]
    on = [ln for ln in lines if ln not in off]
    hi = max([data_hi] + [ln[0] for ln in on]) * 1.08  # the lines and their names inside the axes
    ax.set_ylim(lo, hi)
    close = len(on) == 2 and abs(on[0][0] - on[1][0]) < 0.06 * (hi - lo)
    top = max([ln[0] for ln in on] or [0])
    for value, short, label, color, style, width in lines:
        ax.axhline(value, color=color, linestyle=style, linewidth=width, zorder=3, label=label)
    box = dict(boxstyle="square,pad=0.1", fc="white", ec="none", alpha=0.85)
    for value, short, label, color, style, width in on:
        below = close and value < top
        ax.annotate("%s %s" % (short, _fmt(value)), xy=(1, value), xycoords=ax.get_yaxis_transform(),
                    xytext=(-4, -3 if below else 3), textcoords="offset points", ha="right",
                    va="top" if below else "bottom", fontsize=8, color=color, zorder=4, bbox=box)
    for k, (value, short, label, color, style, width) in enumerate(sorted(off, reverse=True)):
        ax.annotate("\u2191 %s %s" % (short, _fmt(value)), xy=(1, 1), xycoords="axes fraction",
                    xytext=(-4, -4 - 11 * k), textcoords="offset points", ha="right", va="top", fontsize=8,
                    color=color, zorder=4, bbox=box)


def _legend(ax, handles=None, labels=None):
    """Above the axes, in one row, where it hides no data."""
    if handles is None:
        handles, labels = ax.get_legend_handles_labels()
    if handles:
        ax.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=len(handles), fontsize=8,
                  frameon=False, borderaxespad=0.2)


def token_grid(ts, nodes, n, slices=TOKEN_SLICES, rows=TOKEN_ROWS):
    """Token arrivals counted per (row, time slice): (counts, t edges, nodes per row), counts
    a numpy array of rows x slices; every arrival is counted, none thinned out, so a node the
    token reached in a slice has a count there."""
    import numpy as np

    per_row = max(1, math.ceil(n / rows))
    t = np.asarray(ts, dtype=float)
    t0, t1 = float(t.min()), float(t.max())
    if t1 <= t0:
        t1 = t0 + 1
    edges = np.linspace(t0, t1, slices + 1)
    col = np.minimum(((t - t0) / (t1 - t0) * slices).astype(np.int64), slices - 1)
    row = np.asarray(nodes, dtype=np.int64) // per_row
    nrows = math.ceil(n / per_row)
    counts = np.bincount(row * slices + col, minlength=nrows * slices).reshape(nrows, slices)
    return counts, edges, per_row


def token_position(fig, ax, ts, nodes, n, unit):
    """Draw where the token was over time; returns what the title should add. Up to
    TOKEN_POINTS arrivals: each one a point (no line: the wrap from node n-1 to 0 is one hop,
    not a sweep across the ring). More: a grid of time slices by nodes, coloured by the
    arrivals it counts and white where there were none. Thinning the points instead (every
    k-th arrival) drew a ring of 200 as if the token visited 50 nodes: k = 12 steps round the
    ring in fours."""
    ax.set_xlabel("time (%s)" % unit)
    ax.set_ylim(-0.5, n - 0.5)
    if n <= 16:
        ax.set_yticks(range(n))
    if len(ts) <= TOKEN_POINTS:
        ax.set_ylabel("node holding the token")
        ax.plot(ts, nodes, ".", markersize=2.5 if len(ts) < 5000 else 1.2, color="C4")
        return ""
    import numpy as np

    counts, edges, per_row = token_grid(ts, nodes, n)
    shown = np.ma.masked_equal(counts, 0)
    cmap = _pyplot().get_cmap("viridis").with_extremes(bad="white")
    image = ax.imshow(shown, aspect="auto", origin="lower", interpolation="nearest", cmap=cmap,
                      extent=(edges[0], edges[-1], -0.5, counts.shape[0] * per_row - 0.5))
    ax.set_ylabel("node holding the token" if per_row == 1 else "node (rows of %d nodes)" % per_row)
    from matplotlib.ticker import MaxNLocator

    bar = fig.colorbar(image, ax=ax, pad=0.01, ticks=MaxNLocator(integer=True))
    bar.set_label("arrivals per %s and %s %s (white: none)" % ("node" if per_row == 1 else "%d nodes" % per_row,
                                                              _fmt(round(edges[1] - edges[0], 1)), unit), fontsize=8)
    return ": %s arrivals, counted per node and time slice" % _fmt(len(ts))


def _fmt(v):
    if isinstance(v, float) and v.is_integer() and abs(v) >= 100:
        v = int(v)
    return ("%.1f" % v) if isinstance(v, float) else "{:,}".format(v) if abs(v) >= 10_000 else str(v)


# -- `picoring compare --plot` ---------------------------------------------------

PLOT_SUFFIXES = (".png", ".svg")


def check_plot_path(path):
    """Before any run: the plot's format comes from its suffix, and matplotlib must be there."""
    suffix = os.path.splitext(path)[1].lower()
    if suffix not in PLOT_SUFFIXES:
        raise ValueError("--plot %s: write a .png or a .svg file" % path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError("--plot %s: no folder %s" % (path, folder))
    _pyplot()


COMPARE_WIDTH = 13.0  # inches: 1,950 px at DPI, under 2,000; a laptop screen shows it whole


def write_compare(rows, path, title, unit):
    """compare's rows (check/compare.py row()) as small multiples: one panel per measure (logical
    messages and hop frames per request, latency p50 and p99; unit "hop times" or "µs"), side by
    side with the protocols down their shared axis, one horizontal bar each. A checked bound is
    a red tick across its bar; a bar's value is written past the bar and past its bound, never
    over the tick. A latency panel whose values span more than 30x is on a log scale. A protocol
    whose run is not OK has its name in red with "not OK" (a documented finding: "expected", in
    orange); a saturated run's latencies carry "*" (check/compare.py saturated). PNG or SVG by the
    suffix (SVG keeps its text as text). Returns path."""
    plt = _pyplot()
    with plt.rc_context({"svg.fonttype": "none", "font.size": 10}):
        fig = compare_figure(rows, title, unit)
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
    return path


def compare_figure(rows, title, unit):
    """The figure of write_compare (matplotlib's; the caller closes it)."""
    from .compare import saturated

    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    ys = list(range(len(rows)))
    in_ms = unit == "µs"  # a ring's microseconds, in ms as compare's table shows them
    panels = (("logical messages", "per request", "logical_per_request", "logical/req", "C0"),
              ("hop frames", "per request", "hop_frames_per_request", "hops/req", "C1"),
              ("latency p50", "ms" if in_ms else unit, "latency_p50", None, "C2"),
              ("latency p99", "ms" if in_ms else unit, "latency_p99", None, "C4"))
    height = max(3.5, 0.3 * len(rows) + 1.8)
    fig, axes = plt.subplots(1, len(panels), figsize=(COMPARE_WIDTH, height), sharey=True)
    bound_drawn = False
    for ax, (name, xlabel, key, check, color) in zip(axes, panels):
        values = [r[key] for r in rows]
        if in_ms and check is None:
            values = [None if v is None else v / 1000.0 for v in values]
        bounds = [({c["check"]: c for c in r["checks"]}.get(check) or {}).get("bound") if check else None
                  for r in rows]
        shown = [v for v in values if v] + [b for b in bounds if b]
        log = check is None and len(shown) > 1 and max(shown) > 30 * min(shown)
        ax.barh(ys, [v or 0 for v in values], 0.6, color=color)
        for y, b in zip(ys, bounds):
            if b is not None:
                ax.vlines(b, y - 0.42, y + 0.42, color="C3", linewidth=2.2)
                bound_drawn = True
        top = max(shown) if shown else 1
        if log:
            ax.set_xscale("log")
            ax.set_xlim(10 ** math.floor(math.log10(min(shown))), top * 6)
        else:
            ax.set_xlim(0, top * 1.35)
            ax.xaxis.set_major_locator(MaxNLocator(nbins=4))  # tick labels that do not run together
        # the data per point of text along x (linear panels: the only ones with bounds)
        per_point = (ax.get_xlim()[1] - ax.get_xlim()[0]) / (ax.get_position().width * COMPARE_WIDTH * 72)
        for y, v, b, r in zip(ys, values, bounds, rows):
            text = "n/a" if v is None else number(round(v, 2))
            if check is None and v is not None and saturated(r):
                text += "*"
            at = v or 0
            # next to the bar, unless its bound's tick falls under the text: then past the tick
            if b is not None and at <= b <= at + (len(text) * 6 + 8) * per_point:
                at = b
            ax.annotate(text, (at if at > 0 or not log else ax.get_xlim()[0], y), xytext=(4, 0),
                        textcoords="offset points", va="center", fontsize=9)
        ax.set_title(name, fontsize=11)
        ax.set_xlabel(xlabel + (", log scale" if log else ""))
        ax.grid(True, axis="x", alpha=0.3)
    axes[0].set_yticks(ys)
    labels = []
    for r in rows:
        verdict = r.get("verdict") or ("ok" if r["ok"] else "failed")
        labels.append(r["protocol"] + {"ok": "", "expected": "\n(expected)", "failed": "\nnot OK"}[verdict])
    axes[0].set_yticklabels(labels)
    for tick, r in zip(axes[0].get_yticklabels(), rows):
        verdict = r.get("verdict") or ("ok" if r["ok"] else "failed")
        if verdict != "ok":
            tick.set_color("C3" if verdict == "failed" else "C1")
    axes[0].invert_yaxis()  # the first protocol at the top, as in the table
    notes = []
    if bound_drawn:
        notes.append("red tick: the checked bound")
    if any(saturated(r) for r in rows):
        notes.append("*: the ring was saturated, the latency is its queue's")
    fig.suptitle(title, fontsize=12)
    if notes:
        fig.text(0.5, 0.005, "; ".join(notes), ha="center", va="bottom", fontsize=9)
    fig.tight_layout(rect=(0, 0.04 if notes else 0, 1, 1))
    return fig
