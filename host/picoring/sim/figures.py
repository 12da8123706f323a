"""`picoring figures ers`: Figures 9 and 10 of Englert, Rudolph and Shvartsman (2001), section
4.3 (seeds/englert-rudolph-shvartsman-2001-adaptive-token-passing.md), on the protocols' own code.

The paper's setup: "In each simulation 1000 rounds were performed, i.e., the token visited each
node at least 1000 times." Figure 9: "the load is fixed so that on average, every 10 time units,
one of the nodes in the system makes a request"; n from 10 to 1000; "using a regular ring
algorithm, the average responsiveness approaches 10 ... Using System Binary Search, the average
responsiveness is bounded by log n". Figure 10: n = 100, decreasing load: BinarySearch
"approaches log n from below", the ring "n/2 (= 50)".

Here: the ring is S (firmware/proto_s.py), BinarySearch is bs (firmware/proto_bs.py), run by
sim/simcore.py. Requests are Poisson at a uniformly random node (sim/workload.py), a node that
still waits defers its next one; critical sections take no time ("local events take negligible
time", section 2). Responsiveness is the checker's (Definition 3: from the moment a node waits
with nobody in the critical section to the next entry), averaged over the entries. Two networks:
  paper   the paper's complete graph: every message arrives one time unit after it is sent
          (simcore's complete=True); the ring's token still goes one hop a unit
  ring    picoring's unidirectional ring: a message to a node d ahead takes d hop times (a gimme
          "counter-clockwise by d" n - d), so a lend and its return are a full circuit
Each point simulates rounds * n time units (S's token makes `rounds` rounds), capped at
max_time units (the default cap makes n = 200, 500 and 1000 run 500, 200 and 100 rounds: a couple of
minutes in all; docs/bounds.md says how much the cap changes).
"""

import csv
import math
import os

from ..check.checker import Checker
from . import simcore
from .nodes import make_nodes
from .workload import make_workload

FIG9_NS = (10, 20, 50, 100, 200, 500, 1000)
FIG9_GAP = 10  # time units between requests, ring-wide, on average
FIG10_N = 100
FIG10_GAPS = (5, 10, 20, 50, 100, 200, 500, 1000)
# (label, protocol, complete network)
CURVES = (("ring (S)", "s", False),
          ("BinarySearch, the paper's network", "bs", True),
          ("BinarySearch on picoring's ring", "bs", False))
FIELDS = ("figure", "curve", "protocol", "network", "n", "gap", "time_units", "requests", "responsiveness_mean",
          "responsiveness_max", "latency_mean", "logical_per_request", "hop_frames_per_request", "log2_n")


def point(protocol, n, gap, complete, rounds=1000, max_time=100_000, seed=1):
    """One simulation: Poisson requests every `gap` units on average for rounds * n units (at most
    max_time; 0: no cap). Returns a row of FIELDS' measures."""
    units = rounds * n if not max_time else min(rounds * n, max_time)
    k = max(1, int(units / gap))
    nodes = make_nodes(protocol, n)
    wl = make_workload("poisson", n, k, seed=seed, cs_time=0, rate=1.0 / gap)
    c = Checker(protocol, n)
    simcore.run(nodes, wl, 0, c, idle_horizon=n, starve_horizon=1 << 40, complete=complete)
    r = c.finish()
    if r["safety_violations"] or r["served"] != r["requests"]:
        raise RuntimeError("%s n=%d gap=%s: not every request served safely: %s" % (protocol, n, gap, r["violations"][:2]))
    return {"protocol": protocol, "network": "paper" if complete else "ring", "n": n, "gap": gap,
            "time_units": units, "requests": r["requests"],
            "responsiveness_mean": round(r["responsiveness"]["mean"], 3),
            "responsiveness_max": r["responsiveness"]["max"], "latency_mean": round(r["latency"]["mean"], 3),
            "logical_per_request": round(r["logical_per_request"], 2),
            "hop_frames_per_request": round(r["messages_per_request"], 2), "log2_n": round(math.log2(n), 3)}


def _curves(figure, points, rounds, max_time, seed, progress):
    """Every curve of a figure at its points, (n, gap) pairs: the table's rows."""
    rows = []
    for label, protocol, complete in CURVES:
        for n, gap in points:
            row = dict(point(protocol, n, gap, complete, rounds, max_time, seed), figure=figure, curve=label)
            rows.append(row)
            if progress:
                progress(row)
    return rows


def figure9(ns=FIG9_NS, gap=FIG9_GAP, rounds=1000, max_time=100_000, seed=1, progress=None):
    return _curves(9, [(n, gap) for n in ns], rounds, max_time, seed, progress)


def figure10(n=FIG10_N, gaps=FIG10_GAPS, rounds=1000, max_time=100_000, seed=1, progress=None):
    return _curves(10, [(n, gap) for gap in gaps], rounds, max_time, seed, progress)


def _row(rows, figure, curve, key, x):
    return next((r for r in rows if r["figure"] == figure and r["curve"] == curve and r[key] == x), None)


def verdicts(rows):
    """Lines that say, per figure, whether each of the paper's claims reproduces, and why not
    where it does not (from the rows: the reasons are docs/bounds.md's, each tested on them)."""
    ring, paper, on_ring = (c[0] for c in CURVES)
    out = []
    for fig, key, limit_name in ((9, "n", "%d" % FIG9_GAP), (10, "gap", "n/2 = %d" % (FIG10_N // 2))):
        sub = [r for r in rows if r["figure"] == fig]
        if not sub:
            continue
        xs = sorted({r[key] for r in sub})
        out.append("Figure %d, does the paper's claim reproduce?" % fig)
        # the ring: Figure 9 "approaches 10" (the load's gap), Figure 10 "n/2" at the lowest load
        last = _row(sub, fig, ring, key, xs[-1])
        if last is not None:
            limit = FIG9_GAP if fig == 9 else FIG10_N / 2
            got = last["responsiveness_mean"]
            out.append("- the ring approaches %s: %s (%.2f at %s = %s)" % (
                limit_name, "yes" if abs(got - limit) <= 0.1 * limit else "no", got, key, xs[-1]))
        pts = [r for r in (_row(sub, fig, paper, key, x) for x in xs) if r is not None]
        if pts and fig == 9:
            over = [r for r in pts if r["responsiveness_mean"] > r["log2_n"]]
            out.append("- BinarySearch in the paper's network stays below log2 n: %s" % (
                "yes, at every n" if not over else "no at n = %s (%s against %s)" % (
                    ", ".join(str(r["n"]) for r in over), ", ".join("%.2f" % r["responsiveness_mean"] for r in over),
                    ", ".join("%.2f" % r["log2_n"] for r in over))))
            for r in over:
                if r["responsiveness_max"] <= r["n"]:  # (more than n: the line below says why)
                    out.append("  at n = %d, %.0f %% above: %s" % (
                        r["n"], 100.0 * (r["responsiveness_mean"] / r["log2_n"] - 1), _SEARCH_COST))
        elif pts:
            low = pts[-1]
            below = low["responsiveness_mean"] <= low["log2_n"]
            out.append("- BinarySearch in the paper's network approaches log2 n from below at low load: %s "
                       "(%.2f at gap %s, log2 n = %.2f)%s" % (
                           "yes" if below else "no", low["responsiveness_mean"], low["gap"], low["log2_n"],
                           "" if below else ": " + _SEARCH_COST))
        for r in pts:
            if r["responsiveness_max"] > r["n"]:
                out.append("  at %s = %s its worst wait, %s units, is more than n: stale traps (the token "
                           "remembers only the last few requests it served, so at this load most traps outlive "
                           "their request) each cost a lend and a return, and the token falls behind the "
                           "requests (mean latency %.0f units, the ring's %.0f): a property of the trap clean-up "
                           "chosen here, not of the search (docs/bounds.md)" % (
                               key, r[key], _num(r["responsiveness_max"]), r["latency_mean"],
                               _ring_latency(sub, fig, key, r[key])))
        same = [(_row(sub, fig, ring, key, x), _row(sub, fig, on_ring, key, x)) for x in xs]
        same = [(a, b) for a, b in same if a is not None and b is not None]
        if same:
            equal = all((a["responsiveness_mean"], a["responsiveness_max"]) ==
                        (b["responsiveness_mean"], b["responsiveness_max"]) for a, b in same)
            out.append("- BinarySearch on picoring's ring beats the ring: no, %s: on a unidirectional ring "
                       "with FIFO wires a gimme never overtakes the token, and a lend from a trap at t to the "
                       "requester z takes (z - t) mod n hops, what the rotation takes; the search only costs "
                       "messages. The paper's log n needs a network where a message to any node takes one "
                       "unit (docs/bounds.md)" % ("it equals the ring at every point, worst cases included"
                                                  if equal else "see the table"))
        out.append("")
    return out


# Why BinarySearch can sit a little above log2 n (docs/bounds.md, Figures 9 and 10)
_SEARCH_COST = ("a request needs up to ceil(log2 n) gimmes and the lend, and a moving token is caught only at "
                "a trap, up to ceil(log2 n) + 2 units (Thm 2; docs/bounds.md)")


def _ring_latency(sub, fig, key, x):
    r = _row(sub, fig, CURVES[0][0], key, x)
    return r["latency_mean"] if r else float("nan")


def write_table(rows, folder):
    """ers_table.csv (every measure) and ers_table.md (the responsiveness, as docs/bounds.md shows it)."""
    with open(os.path.join(folder, "ers_table.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for row in rows:
            w.writerow({k: row[k] for k in FIELDS})
    with open(os.path.join(folder, "ers_table.md"), "w", encoding="utf-8") as f:
        f.write(markdown(rows) + "\n".join(verdicts(rows)))


def markdown(rows):
    """The average responsiveness per point, one column per curve (and the worst, in brackets)."""
    out = []
    for fig, key, head in ((9, "n", "n (one request every %d units)" % FIG9_GAP),
                           (10, "gap", "units between requests (n = %d)" % FIG10_N)):
        sub = [r for r in rows if r["figure"] == fig]
        if not sub:
            continue
        xs = sorted({r[key] for r in sub})
        labels = [c[0] for c in CURVES if any(r["curve"] == c[0] for r in sub)]
        out.append("Figure %d: average responsiveness (worst in brackets), logical messages per request\n" % fig)
        out.append("| %s | log2 n | %s |" % (head, " | ".join(labels)))
        out.append("|---:|---:|%s" % ("---:|" * len(labels)))
        for x in xs:
            cells = []
            for lab in labels:
                r = next(r for r in sub if r["curve"] == lab and r[key] == x)
                cells.append("%.2f (%s), %.1f msg" % (r["responsiveness_mean"], _num(r["responsiveness_max"]),
                                                     r["logical_per_request"]))
            lg = next(r["log2_n"] for r in sub if r[key] == x)
            out.append("| %s | %.2f | %s |" % (x, lg, " | ".join(cells)))
        out.append("")
    return "\n".join(out) + "\n"


def _num(v):
    return int(v) if v == int(v) else v


def plot(rows, folder):
    """ers_figure9.png and ers_figure10.png (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    for fig, key, xlabel, title in (
            (9, "n", "number of processors n", "Figure 9: fixed load, a request every %d time units" % FIG9_GAP),
            (10, "gap", "time units between requests (lower load to the right)",
             "Figure 10: n = %d, decreasing load" % FIG10_N)):
        sub = [r for r in rows if r["figure"] == fig]
        if not sub:
            continue
        f, ax = plt.subplots(figsize=(8, 4.5))
        # the ring and BinarySearch on the ring coincide (docs/bounds.md): big squares under dots
        styles = ({"marker": "s", "ms": 9, "ls": "-"}, {"marker": "^", "ms": 6, "ls": "-"},
                  {"marker": "o", "ms": 4, "ls": "--"})
        for (label, _p, _c), style in zip(CURVES, styles):
            pts = sorted((r[key], r["responsiveness_mean"]) for r in sub if r["curve"] == label)
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], label=label, **style)
        xs = sorted({r[key] for r in sub})
        if fig == 9:
            ax.plot(xs, [math.log2(x) for x in xs], "k:", label="log2 n")
            ax.axhline(FIG9_GAP, color="grey", ls="--", lw=0.8, label="%d (the ring's limit)" % FIG9_GAP)
        else:
            ax.axhline(math.log2(FIG10_N), color="k", ls=":", label="log2 n")
            ax.axhline(FIG10_N / 2, color="grey", ls="--", lw=0.8, label="n/2 (the ring's limit)")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("average responsiveness (time units)")
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        path = os.path.join(folder, "ers_figure%d.png" % fig)
        f.tight_layout()
        f.savefig(path, dpi=150)
        plt.close(f)
        paths.append(path)
    return paths
