"""`picoring report`: the checker's figures of a trace as PNG plots (matplotlib, Agg).

One pass over the trace feeds a Checker and records, per request, what the
checker measured (service traffic, latency), so the plots show the checker's
own numbers. Files written (DIR/...):
  messages_per_request.png  messages / requests so far, over the run, with the bounds
  service_traffic.png       service traffic of every request, with the bounds
  latency_hist.png          latency histogram (hop times or us, as the trace says)
  token_position.png        the node the token was received at, over time
  service_per_node.png      requests served per node (fairness)
  summary.json              the checker's report
"""

import json
import math
import os

from .checker import Checker, finish_trace, nearest_rank
from .compare import number
from .trace import TraceReader

DPI = 150
FIGSIZE = (8, 4.5)  # inches: 1200 x 675 pixels at DPI
MAX_POINTS = 200_000  # token positions plotted; a longer run is thinned evenly


class RunSeries:
    """A Checker plus the per-request series the plots need; callable with Events."""

    def __init__(self, protocol, n):
        self.checker = Checker(protocol, n)
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

    def __call__(self, event):
        c = self.checker
        ev = event.ev
        if ev == "enter":
            pending = c.pending.get(event.node)
            c.feed(event)
            if pending is not None:
                rid, t_req, msgs_at_req = pending[:3]
                self.service.append((rid, event.node, c.total - msgs_at_req))
                self.latency.append(event.t - t_req)
                self.served_by_node[event.node] += 1
                self.latency_by_node[event.node] += event.t - t_req
            return
        c.feed(event)
        if ev == "req":
            self.requests_by_node[event.node] += 1
            self.req_count.append(c.requests)
            self.req_total.append(c.total)
        elif ev == "recv" and event.kind == "token":
            self.token_t.append(event.t)
            self.token_node.append(event.node)


def read_series(path):
    """(meta, RunSeries, report) of a trace file; the report is check_trace's."""
    with TraceReader(path) as reader:
        meta = reader.meta
        series = RunSeries(meta["protocol"], meta["n"])
        for event in reader:
            series(event)
    report = finish_trace(series.checker)
    report.setdefault("source", meta.get("source"))
    if meta.get("workload"):
        report.setdefault("workload", meta["workload"])
    return meta, series, report


def write_report(trace_path, out_dir):
    """Write the plots and summary.json; returns (report, [paths])."""
    meta, series, report = read_series(trace_path)
    os.makedirs(out_dir, exist_ok=True)
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
    _bound_lines(ax, c.bound_mpr, c.paper_mpr, "checked bound", "paper's printed bound")
    ax.set_title("Messages per request over the run\n" + what)
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
    _bound_lines(ax, c.bound_service, c.paper_service, "checked bound", "paper's printed bound")
    ax.set_title("Service traffic per request (max %d)\n%s" % (c.max_service, what))
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
        if unit == "hop times" and hi - lo <= 200:
            bins = [x - 0.5 for x in range(lo, hi + 2)]  # one bar per hop time
        else:
            bins = 50
        ax.hist(lat, bins=bins, color="C0", edgecolor="white", linewidth=0.3)
        srt = sorted(lat)
        p50, p99 = nearest_rank(srt, 0.5), nearest_rank(srt, 0.99)  # as the dashboard shows them
        for v, name, style in ((p50, "p50", "--"), (p99, "p99", ":")):
            ax.axvline(v, color="C3", linestyle=style, linewidth=1, label="%s = %s %s" % (name, _fmt(v), unit))
        ax.set_title("Latency, request to critical section (mean %s, max %s %s)\n%s"
                     % (_fmt(sum(lat) / len(lat)), _fmt(hi), unit, what))
    else:
        ax.set_title("Latency: no request served\n" + what)
    ax.set_xlabel("latency (%s)" % unit)
    ax.set_ylabel("requests")
    _legend(ax)
    save(fig, "latency_hist.png")

    # token position over time
    fig, ax = plt.subplots(figsize=FIGSIZE)
    ts, nodes = series.token_t, series.token_node
    step = max(1, len(ts) // MAX_POINTS)
    if ts:
        # points, not a line: the wrap from node n-1 to 0 is one hop, not a sweep across the ring
        ax.plot(ts[::step], nodes[::step], ".", markersize=2.5 if len(ts) // step < 5000 else 1, color="C4")
    ax.set_title("Token position over time%s\n%s" % ("" if step == 1 else " (every %dth arrival)" % step, what))
    ax.set_xlabel("time (%s)" % unit)
    ax.set_ylabel("node holding the token")
    ax.set_ylim(-0.5, meta["n"] - 0.5)
    if meta["n"] <= 16:
        ax.set_yticks(range(meta["n"]))
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
    ax.set_title("Service per node (fairness): %d of %d requests served\n%s" % (c.served, c.requests, what))
    ax.set_xlabel("node")
    ax.set_ylabel("requests")
    if meta["n"] <= 32:
        ax.set_xticks(idx)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, loc="upper right", fontsize=9)
    save(fig, "service_per_node.png")

    path = os.path.join(out_dir, "summary.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(report, f, indent=1, sort_keys=True)
    files.append(path)
    return report, files


def _pyplot():
    try:
        import matplotlib
    except ImportError:
        raise RuntimeError("the plots need matplotlib: pip install -e '.[report]'") from None
    matplotlib.use("Agg")  # files only: no display needed
    import matplotlib.pyplot as plt

    return plt


def _bound_lines(ax, bound, paper, bound_label, paper_label):
    if bound is not None:
        ax.axhline(bound, color="C3", linewidth=1.2, label="%s %d" % (bound_label, bound))
    if paper is not None and paper != bound:
        ax.axhline(paper, color="C1", linewidth=1, linestyle="--", label="%s %d" % (paper_label, paper))
    if bound is None and paper is None:
        ax.text(0.99, 0.97, "S: unbounded (Thm 2.1)", transform=ax.transAxes, ha="right", va="top", fontsize=9)


def _legend(ax):
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize=9)


def _fmt(v):
    return ("%.1f" % v) if isinstance(v, float) else str(v)


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


def write_compare(rows, path, title, unit):
    """compare's rows (check/compare.py row()) as one figure of two panels, a group of bars per
    protocol: logical messages and hop frames per request, each with its checked bound as a tick
    over its bar; latency p50 and p99 (unit: "hop times" or "µs"; on a log scale when they span
    more than 30x). A protocol whose run is not OK has its name in red with "not OK". PNG or
    SVG by the suffix (SVG keeps its text as text). Returns path."""
    plt = _pyplot()
    names = [r["protocol"] for r in rows]
    xs = list(range(len(rows)))
    w = 0.38
    with plt.rc_context({"svg.fonttype": "none"}):
        fig, (ax, ax2) = plt.subplots(1, 2, figsize=(max(FIGSIZE[0], 2.2 * len(rows) + 3), FIGSIZE[1]))
        by = [{c["check"]: c for c in r["checks"]} for r in rows]
        series = (("logical messages", "logical_per_request", "logical/req", -w / 2, "C0"),
                  ("hop frames", "hop_frames_per_request", "hops/req", w / 2, "C1"))
        bound_drawn = False
        for label, key, check, dx, color in series:
            bars = ax.bar([x + dx for x in xs], [r[key] for r in rows], w, color=color, label=label)
            ax.bar_label(bars, labels=[number(round(r[key], 2)) for r in rows], fontsize=8, padding=1)
            for x, checks in zip(xs, by):
                bound = (checks.get(check) or {}).get("bound")
                if bound is not None:
                    ax.hlines(bound, x + dx - w / 2, x + dx + w / 2, color="C3", linewidth=2, linestyles=(0, (3, 1)),
                              label=None if bound_drawn else "checked bound")
                    bound_drawn = True
        ax.set_title("Messages per request", pad=22)
        ax.set_ylabel("per request")
        ax.set_ylim(bottom=0)
        ax.margins(y=0.15)
        lat = (("p50", "latency_p50", -w / 2, "C2"), ("p99", "latency_p99", w / 2, "C4"))
        values = [r[key] for _, key, _, _ in lat for r in rows if r[key]]
        log = bool(values) and max(values) > 30 * min(values)  # one slow run must not flatten the others
        for label, key, dx, color in lat:
            bars = ax2.bar([x + dx for x in xs], [r[key] or 0 for r in rows], w, color=color, label="latency " + label)
            ax2.bar_label(bars, labels=["-" if r[key] is None else number(r[key]) for r in rows], fontsize=8, padding=1)
        ax2.set_title("Latency, request to critical section", pad=22)
        ax2.set_ylabel(unit + (", log scale" if log else ""))
        if log:
            ax2.set_yscale("log")
            ax2.set_ylim(bottom=10 ** math.floor(math.log10(min(values))))  # bars grow from a round figure
        else:
            ax2.set_ylim(bottom=0)
            ax2.margins(y=0.15)
        for a in (ax, ax2):
            a.set_xticks(xs)
            a.set_xticklabels([n if r["ok"] else "%s\nnot OK" % n for n, r in zip(names, rows)])
            for tick, r in zip(a.get_xticklabels(), rows):
                if not r["ok"]:
                    tick.set_color("C3")
            a.legend(loc="lower center", bbox_to_anchor=(0.5, 1.0), ncol=3, fontsize=8, frameon=False)
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=DPI)
        plt.close(fig)
    return path
