"""`picoring figures wt`: Figures 2, 3 and 4 of Ciuffoletti's wandering token paper, section 5
(seeds/ciuffoletti-wandering-token.md), on the protocols' own code.

The paper's setup: Table 1's constants (Delta_skip 1, Delta_op 4, Delta_min 600, Delta_max 1800),
N = 150 (nominal) and N = 300 (overload), runs of 10**6 time units, "a simple ... discrete event
simulator" in which "the token passing operation ... is assumed to be negligible with respect to
Delta_skip". Figure 2: the time with k operations running, the benchmark (random access,
section 2) against the wandering token; Figure 3: the intervals between two successive operations
of a component; Figure 4: the stabilisation time after a token loss (100 transients).

Here: the wandering token is wt (firmware/proto_wt.py) on the saturated workload (every component
always wants the operation, as the paper's do), the benchmark is random (firmware/proto_random.py)
on the periodic workload (period Delta_min plus a bias in [0, Delta_min/2]); both run in
sim/simcore.py on the paper's full mesh (complete=True), measured by the checker's soft exclusion
part (check/parts/soft_exclusion.py) and, for Figure 4 and the phases below, by Losses, one more
listener of the checker's. simcore's messages take one time unit; so that a pass is negligible, as
in the paper, a paper time unit is `scale` simulator units (default 100: a pass is 1% of Delta_skip).
Every time below is in paper units.

Figure 4's transient (the paper does not define its end): a loss is injected (the next message of
the one token alive is dropped), the first 3 Delta_max into the run, each next one 2 Delta_max after
the last transient ended; the transient ends where the first stretch after the loss with a token
alive throughout lasts Delta_max begins (a regenerated token that the domino effect of section 4
removes again is part of the transient; spurious tokens beside a live one are not: at N = 300 they
come every few tens of units even without a loss).

Stable operation and stabilisation (the paper's "8 time units ... with more than 5 operations
during stable operation", Figure 4's concurrency "during stabilisation"; it defines neither): the
run is stable while exactly one token is alive, every component has had its operation once (before
that, components the token has not reached make tokens of their own at Delta_max: the warm-up),
and no injected loss's transient is under way (up to a token alive again); all other time is
stabilisation. The time with k
operations running is measured for both apart.
"""

import csv
import os

from ..check.checker import Checker
from ..firmware.protocol import DISCARDED, REGENERATED
from . import simcore
from .nodes import make_nodes
from .workload import make_workload

SKIP, OP, MIN, MAX = 1, 4, 600, 1800  # Table 1
NS = (150, 300)
PAPER = {  # section 5's numbers, for the table beside ours
    (150, "benchmark"): "> 15%", (150, "wandering token"): "< 0.5%",
    (300, "benchmark"): "40%", (300, "wandering token"): "10%",
}
FIELDS = ("figure", "curve", "n", "time_units", "operations", "over_one_percent", "paper_over_one",
          "over_five_units", "stable_percent", "over_one_stable_percent", "over_five_stable_units",
          "over_one_stabilising_percent", "over_five_stabilising_units", "max_running", "interval_mean", "interval_p50", "interval_p99", "interval_max",
          "intervals_over_5min", "tokens_over_one_percent", "generated", "removed", "logical_messages",
          "hop_frames", "transients", "stabilisation_mean", "stabilisation_p50", "stabilisation_max")


def wt_spec(scale, per=None):
    spec = "wt:skip=%d,op=%d,min=%d,max=%d" % (SKIP * scale, OP * scale, MIN * scale, MAX * scale)
    return spec if per is None else spec + ",per=%d" % (per * scale)


class Losses:
    """Figure 4's losses and transients, and the time with k operations running split into stable
    operation and stabilisation (module doc): a listener of the checker's (Checker.add), so fed
    each of the simulator's events before the checker's parts, while their state is the one the
    event ends. It reads the soft exclusion part (check/parts/soft_exclusion.py): the tokens
    alive, the components reached, the operations running."""

    def __init__(self, soft, n, scale, transients, first_at):
        self.soft = soft
        self.n = n
        self.scale = scale
        self.hold = MAX * scale
        self.wanted = transients
        self.next_loss = first_at
        self.loss_at = None  # the loss of the transient under way
        self.one_since = None  # after the loss: the start of the current stretch with a token alive
        self.stabilisation = []
        self.in_transient_time = 0
        self.by_phase = {True: {}, False: {}}  # stable? -> {operations running: time} (module doc)
        self.warm_until = None
        self._since = None  # the start of the stretch under way: the last change of either count

    @property
    def intervals(self):
        return self.soft.intervals

    @property
    def tokens_lost(self):
        return self.soft.tokens_lost

    def stable(self, tokens):
        """One token alive, every component reached, and no transient under way: a loss's
        transient counts as over here once a token is alive again (one_since), as its
        stabilisation time does; a domino removal after that is counted stable (rare)."""
        return (tokens == 1 and len(self.soft.last_entry) == self.n
                and (self.loss_at is None or self.one_since is not None))

    def _stretch(self, t, tokens):
        """The stretch since the last change ends at t: its time into its phase."""
        if self.warm_until is None and len(self.soft.last_entry) == self.n:
            self.warm_until = t  # every component has had its operation: the warm-up is over
        if self._since is not None and t is not None:
            k0, phase = len(self.soft.running), self.by_phase[self.stable(tokens)]
            phase[k0] = phase.get(k0, 0) + (t - self._since)
        self._since = t

    def _tokens_to(self, t, k):
        if k == 0:
            self.one_since = None
        elif self.loss_at is not None and self.one_since is None:
            self.one_since = t

    # -- the checker's events (check/parts/__init__.py) --------------------------------------
    def start(self, t):
        if self._since is None:
            self._since = t

    def request(self, t, node, rid):
        self.start(t)

    def enter(self, t, node, seq):
        self.start(t)
        self._stretch(t, self.soft.tokens_alive)

    def exit(self, t, node):
        if node in self.soft.running:
            self._stretch(t, self.soft.tokens_alive)

    def tokens(self, t, node, a):
        k = self.soft.tokens_alive
        if a & REGENERATED:
            self._stretch(t, k)
            k += 1
            self._tokens_to(t, k)
        if a & DISCARDED:
            self._stretch(t, k)
            k -= 1
            self._tokens_to(t, k)

    def lost(self, t, node):
        k = self.soft.tokens_alive
        self._stretch(t, k)
        self._tokens_to(t, k - 1)

    # -- the run's -------------------------------------------------------------------------
    def close(self, t):
        """The run ends at t: the last stretch into its phase."""
        self._stretch(t, self.soft.tokens_alive)

    def due(self, t):
        """simcore's drop, asked for each message frame: True when the next loss is due now (the
        caller then loses the frame and tells the checker)."""
        self._settle(t)
        if (self.loss_at is None and len(self.stabilisation) < self.wanted and t >= self.next_loss
                and self.soft.tokens_alive == 1):
            self.loss_at = t
            return True
        return False

    def _settle(self, t):
        if self.loss_at is not None and self.one_since is not None and t - self.one_since >= self.hold:
            self.stabilisation.append((self.one_since - self.loss_at) / self.scale)
            self.in_transient_time += self.one_since - self.loss_at
            self.next_loss = self.one_since + 2 * self.hold
            self.loss_at = None
            self.one_since = None


def run_wt(n, time_units, scale=100, seed=1, transients=0, per=None, complete=True):
    """The wandering token on the saturated workload for time_units paper units; with transients,
    Figure 4's losses, the run ending once that many are measured. Returns (report, measure,
    nodes): the measure (Losses) has the checker's intervals and tokens lost besides its own."""
    spec = wt_spec(scale, per) + ",seed=%d" % seed
    nodes = make_nodes(spec, n)
    wl = make_workload("saturated", n, 1 << 40, seed=seed)
    c = Checker(spec, n)
    losses = Losses(c.parts.soft, n, scale, transients, 3 * MAX * scale)
    c.add(losses)
    c.start(0)

    def drop(t, node, dst, mkind):
        if not losses.due(t):
            return False
        c.lost(t, node)
        return True

    out = simcore.run(nodes, wl, OP * scale, c, complete=complete, until=time_units * scale,
                      starve_horizon=1 << 50, drop=drop if transients else None,
                      stop_when=(lambda: len(losses.stabilisation) >= transients) if transients else None)
    c.last_t = out["end_time"]
    losses.close(out["end_time"])
    return c.finish(), losses, nodes


def run_benchmark(n, time_units, scale=100, seed=1):
    """Random access (section 2): period Delta_min plus a bias in [0, Delta_min / 2]."""
    p = MIN * scale
    k = int(n * time_units * scale / p) + n
    nodes = make_nodes("random", n)
    wl = make_workload("periodic", n, k, seed=seed, period=p)
    c = Checker("random", n)
    c.start(0)  # the measures count from 0, not from the first request
    out = simcore.run(nodes, wl, OP * scale, c, until=time_units * scale, starve_horizon=1 << 50)
    c.last_t = out["end_time"]
    return c.finish(), c, nodes


def _row(figure, curve, n, rep, c, scale, nodes=None):
    soft = rep["soft"]
    tot = soft["time"] or 1
    iv = sorted(x / scale for x in c.intervals)
    km = soft["time_with_k_running"]
    toks = soft["time_with_k_tokens"]
    ttot = sum(toks.values()) or 1
    row = {k: None for k in FIELDS}
    row.update({
        "figure": figure, "curve": curve, "n": n, "time_units": tot // scale, "operations": rep["served"],
        "over_one_percent": round(100.0 * soft["over_one_fraction"], 4), "paper_over_one": PAPER.get((n, curve)),
        "over_five_units": sum(v for k, v in km.items() if k > 5) / scale, "max_running": soft["max_running"],
        "interval_mean": round(sum(iv) / len(iv), 1) if iv else None,
        "interval_p50": _q(iv, 0.5), "interval_p99": _q(iv, 0.99), "interval_max": iv[-1] if iv else None,
        "intervals_over_5min": sum(1 for x in iv if x > 5 * MIN),
        "logical_messages": rep["logical_messages"], "hop_frames": rep["hop_frames"],
    })
    phases = getattr(c, "by_phase", None)
    if phases is not None:
        for name, phase in (("stable", phases[True]), ("stabilising", phases[False])):
            t_phase = sum(phase.values())
            over = sum(v for k, v in phase.items() if k >= 2)
            row["over_one_%s_percent" % name] = round(100.0 * over / t_phase, 4) if t_phase else None
            row["over_five_%s_units" % name] = sum(v for k, v in phase.items() if k > 5) / scale
        row["stable_percent"] = round(100.0 * sum(phases[True].values()) / tot, 3)
    if nodes is not None and nodes[0].name.startswith("wt"):
        row["tokens_over_one_percent"] = round(100.0 * sum(v for k, v in toks.items() if k >= 2) / ttot, 3)
        row["generated"] = sum(x.generated for x in nodes)
        row["removed"] = sum(x.removed for x in nodes)
    return row


def _q(sorted_values, q):
    if not sorted_values:
        return None
    k = min(len(sorted_values) - 1, max(0, int(q * len(sorted_values) + 0.999999) - 1))
    return round(sorted_values[k], 2)


def figures23(ns=NS, time_units=200_000, scale=100, seed=1, progress=None):
    """Figures 2 and 3: for each n, the benchmark and the wandering token. Returns (rows,
    {(curve, n): (time with k running, sorted intervals)}) for the plots."""
    rows, data = [], {}
    for n in ns:
        for curve, run in (("benchmark", run_benchmark), ("wandering token", run_wt)):
            rep, c, nodes = run(n, time_units, scale=scale, seed=seed)
            row = _row(2, curve, n, rep, c, scale, nodes)
            rows.append(row)
            data[curve, n] = ({k: v / scale for k, v in rep["soft"]["time_with_k_running"].items()},
                              sorted(x / scale for x in c.intervals))
            if progress:
                progress(row)
    return rows, data


def figure4(ns=NS, transients=100, scale=100, seed=1, progress=None):
    """Figure 4: `transients` token losses per n, each measured to its end (module doc)."""
    rows, data = [], {}
    for n in ns:
        # time enough for every transient (each loss waits 3 Delta_max, a transient lasts a few
        # Delta_max, rarely tens); the run ends once all are measured
        rep, c, nodes = run_wt(n, transients * 40 * MAX + 3 * MAX, scale=scale, seed=seed, transients=transients)
        st = sorted(s / scale for _, s in rep["soft"]["stabilisation"]["times"] if s is not None)
        row = _row(4, "wandering token, token losses", n, rep, c, scale, nodes)
        row.update({"transients": len(st), "stabilisation_mean": round(sum(st) / len(st), 1) if st else None,
                    "stabilisation_p50": _q(st, 0.5), "stabilisation_max": st[-1] if st else None,
                    "paper_over_one": {150: "3% (during stabilisation)", 300: "9% (during stabilisation)"}.get(n)})
        rows.append(row)
        data[n] = st
        if progress:
            progress(row)
    return rows, data


def write_table(rows, folder):
    """wt_table.csv (every measure) and wt_table.md (as docs/bounds.md shows it)."""
    with open(os.path.join(folder, "wt_table.csv"), "w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for row in rows:
            w.writerow({k: row.get(k) for k in FIELDS})
    with open(os.path.join(folder, "wt_table.md"), "w", encoding="utf-8") as f:
        f.write(markdown(rows))


def markdown(rows):
    out = []
    two = [r for r in rows if r["figure"] == 2]
    if two:
        out.append("Figures 2 and 3: time with more than one operation running, intervals between two operations "
                   "of a component (paper time units)\n")
        out.append("| N | algorithm | > 1 running (ours) | (paper) | > 5 running (units) | stable: time / > 1 running "
                   "/ > 5 (units) | stabilising: > 1 running / > 5 (units) | max running | "
                   "interval mean / p50 / p99 / max | intervals > 5 Delta_min | time with > 1 token | "
                   "tokens made / removed |")
        out.append("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in two:
            out.append("| %d | %s | %.3f%% | %s | %g | %s | %s | %d | %s / %s / %s / %s | %d | %s | %s |" % (
                r["n"], r["curve"], r["over_one_percent"], r["paper_over_one"] or "", r["over_five_units"],
                _phase(r, "stable", with_time=True), _phase(r, "stabilising"), r["max_running"], r["interval_mean"], r["interval_p50"], r["interval_p99"], r["interval_max"],
                r["intervals_over_5min"], "" if r["tokens_over_one_percent"] is None else "%.3f%%" % r["tokens_over_one_percent"],
                "" if r["generated"] is None else "%d / %d" % (r["generated"], r["removed"])))
        out.append("")
    four = [r for r in rows if r["figure"] == 4]
    if four:
        out.append("Figure 4: stabilisation after a token loss (paper time units)\n")
        out.append("| N | transients | mean | p50 | max | > 1 running over the run | > 1 running during "
                   "stabilisation | (paper, during stabilisation) |")
        out.append("|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in four:
            out.append("| %d | %d | %s | %s | %s | %.3f%% | %s | %s |" % (
                r["n"], r["transients"], r["stabilisation_mean"], r["stabilisation_p50"], r["stabilisation_max"],
                r["over_one_percent"], _pct(r["over_one_stabilising_percent"]), r["paper_over_one"] or ""))
        out.append("")
    return "\n".join(out) + "\n"


def _pct(x):
    return "" if x is None else "%.3f%%" % x


def _phase(r, name, with_time=False):
    """A row's measures in stable operation or stabilisation (module doc); blank for the benchmark."""
    if r.get("over_one_%s_percent" % name) is None and r.get("stable_percent") is None:
        return ""
    cells = [_pct(r.get("over_one_%s_percent" % name)), "%g" % r["over_five_%s_units" % name]]
    if with_time:
        cells.insert(0, _pct(r["stable_percent"]))
    return " / ".join(cells)


def plot(rows, data23, data4, folder):
    """wt_figure2.png, wt_figure3.png, wt_figure4.png (matplotlib, Agg)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    if data23:
        ns = sorted({n for _c, n in data23})
        f, axes = plt.subplots(1, len(ns), figsize=(5 * len(ns), 4), squeeze=False)
        for ax, n in zip(axes[0], ns):
            for k_off, curve in ((-0.2, "benchmark"), (0.2, "wandering token")):
                km = data23.get((curve, n), ({}, []))[0]
                ks = [k for k in sorted(km) if km[k] > 0]
                ax.bar([k + k_off for k in ks], [km[k] for k in ks], width=0.4, label=curve)
            ax.set_yscale("log")
            ax.set_xlabel("operations running at once")
            ax.set_ylabel("time units")
            ax.set_title("Figure 2: N = %d" % n)
            ax.legend(fontsize=8)
            ax.grid(True, which="both", alpha=0.3)
        paths.append(_save(f, plt, folder, "wt_figure2.png"))
        f, axes = plt.subplots(1, len(ns), figsize=(5 * len(ns), 4), squeeze=False)
        for ax, n in zip(axes[0], ns):
            for curve in ("benchmark", "wandering token"):
                iv = data23.get((curve, n), ({}, []))[1]
                if iv:
                    ax.hist(iv, bins=range(0, int(max(iv)) + 100, 100), histtype="step", label=curve)
            ax.axvline(MIN, color="grey", ls="--", lw=0.8, label="Delta_min")
            ax.set_yscale("log")
            ax.set_xlabel("interval between two operations of a component (time units)")
            ax.set_ylabel("intervals")
            ax.set_title("Figure 3: N = %d" % n)
            ax.legend(fontsize=8)
        paths.append(_save(f, plt, folder, "wt_figure3.png"))
    if data4:
        f, ax = plt.subplots(figsize=(6, 4))
        for n in sorted(data4):
            if data4[n]:
                ax.hist(data4[n], bins=20, histtype="step", label="N = %d (%d transients)" % (n, len(data4[n])))
        ax.set_xlabel("stabilisation time after a token loss (time units)")
        ax.set_ylabel("transients")
        ax.set_title("Figure 4: stabilisation after a token loss")
        ax.legend(fontsize=8)
        paths.append(_save(f, plt, folder, "wt_figure4.png"))
    return paths


def _save(f, plt, folder, name):
    path = os.path.join(folder, name)
    f.tight_layout()
    f.savefig(path, dpi=130)
    plt.close(f)
    return path
