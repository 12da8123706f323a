"""`picoring compare`'s table: protocols side by side, from the checker's reports of runs
on the same workload, ring size and seed (cli/compare.py makes the runs).

One row per protocol: logical messages and hop frames per request, latency p50 and p99,
the mean responsiveness (Englert et al.'s Definition 3), the largest service traffic, fairness (the most critical-section entries by other nodes
between a request and its service), and every check of the report with its bound.
Readers of a row need no protocol name: bounds come from the report (the descriptors), and so do
the findings a run may show as documented (registry.findings: d-literal never goes quiet).
A figure that does not apply to a protocol is None ("n/a" in the table): responsiveness and
fairness measure hard mutual exclusion, which soft exclusion (the wandering token, random
access) does not give.
"""

import csv
import io

from . import registry

FIELDS = ("protocol", "n", "requests", "served", "logical_per_request", "hop_frames_per_request",
          "latency_p50", "latency_p99", "responsiveness", "max_service_traffic", "max_service_logical", "max_overtaken",
          "over_one_running", "interval_p50", "interval_p99", "checks", "ok", "verdict")
# Not in the CSV: requests_deferred and requests_queued_max, which a run's trace does not keep
# (`report --csv`'s summary.csv, read from a trace, is a row of this CSV).


def checks(report):
    """[(name, value, bound, ok)] of every check the report holds: the bounds it was held to
    (None: none proven, reported only), safety, liveness, quiescence."""
    b = report["bounds"]
    out = []
    if b.get("logical_per_request") is not None:
        out.append(("logical/req", round(report["logical_per_request"], 3), b["logical_per_request"],
                    report["logical_per_request"] <= b["logical_per_request"]))
    out.append(("hops/req", round(report["messages_per_request"], 3), b["messages_per_request"],
                None if b["messages_per_request"] is None else report["messages_per_request"] <= b["messages_per_request"]))
    out.append(("service", report["max_service_traffic"], b["service_traffic"],
                None if b["service_traffic"] is None else report["max_service_traffic"] <= b["service_traffic"]))
    if report.get("max_forwards_per_request") is not None:  # a search's forwards (BinarySearch: Lemma 6)
        bound = b.get("forwards_per_request")
        out.append(("forwards", report["max_forwards_per_request"], bound,
                    None if bound is None else report["max_forwards_per_request"] <= bound))
    out.append(("safety", report["safety_violations"], 0, report["safety_violations"] == 0))
    out.append(("served", report["served"], report["requests"], report["served"] == report["requests"]))
    if report.get("quiescent") is not None:
        out.append(("quiet", report["quiescent"], True, report["quiescent"]))
    return out


def verdict(report):
    """(verdict, expected) of one run: "ok"; "expected" when every shortfall is a finding the
    protocol's descriptor documents (expected: [(kind, where and why)]); else "failed"."""
    if report["ok"]:
        return "ok", []
    documented = registry.findings(report["protocol"])
    violations = report.get("violations") or ()
    unexplained = [c for c in report.get("run_conditions") or () if not c.get("explained")]
    if not violations or unexplained or any(v["kind"] not in documented for v in violations):
        return "failed", []
    kinds = sorted({v["kind"] for v in violations})
    return "expected", [(k, documented[k]) for k in kinds]


def saturated(row):
    """True when the row's run saturated the ring: at some moment more requests had fallen due
    behind their node's outstanding one than the ring has nodes (the queue grew faster than the
    ring served it, and latencies measure the queue, not one request's wait); None when the run
    does not say (a ring's)."""
    queued = row.get("requests_queued_max")
    return None if queued is None else queued >= row["n"]


def row(report):
    """The compared figures of one run's report (a dict with FIELDS)."""
    q = report.get("latency_quantiles") or {}
    soft = report.get("soft")
    verdict_, expected = verdict(report)
    return {
        "protocol": report["protocol"], "n": report["n"], "requests": report["requests"], "served": report["served"],
        "logical_per_request": round(report["logical_per_request"], 3),
        "hop_frames_per_request": round(report["messages_per_request"], 3),
        "latency_p50": q.get("p50"), "latency_p99": q.get("p99"),
        # mean time from a node waiting with nobody in the critical section to the next entry
        # (Englert et al.'s Definition 3, averaged as their Figures 9 and 10 do)
        # (None: soft exclusion, where it does not apply; nor does fairness)
        "responsiveness": None if soft else round((report.get("responsiveness") or {}).get("mean", 0.0), 3),
        "max_service_traffic": report["max_service_traffic"], "max_service_logical": report["max_service_logical"],
        "max_overtaken": None if soft else report["max_overtaken"],
        # soft mutual exclusion (the wandering token, random access): the fraction of the time with
        # two operations or more running, and the intervals between two operations of one node;
        # None for a protocol with hard mutual exclusion (always 0 running at once beyond one)
        "over_one_running": round(soft["over_one_fraction"], 6) if soft else None,
        "interval_p50": soft["intervals"]["p50"] if soft else None,
        "interval_p99": soft["intervals"]["p99"] if soft else None,
        # requests that came while their node still waited, run at its exit (the simulator's;
        # None for a ring's run, which does not count them)
        "requests_deferred": report.get("requests_deferred"),
        "requests_queued_max": report.get("requests_queued_max"),  # the most of those waiting at once
        "checks": [{"check": c, "value": v, "bound": bd, "ok": ok} for c, v, bd, ok in checks(report)],
        "ok": report["ok"],
        "verdict": verdict_,  # ok, expected (every shortfall a documented finding) or failed
        "expected": [{"check": k, "why": why} for k, why in expected],
    }


def _check_text(c):
    mark = {True: "ok", False: "FAIL", None: "-"}[c["ok"]]
    if c["check"] in ("safety", "served", "quiet"):
        return "%s %s" % (c["check"], mark)
    return "%s %s<=%s %s" % (c["check"], c["value"], "∞" if c["bound"] is None else c["bound"], mark)


def to_csv(rows):
    """The rows as CSV text (checks as one 'name value<=bound ok; ...' cell)."""
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(FIELDS)
    for r in rows:
        w.writerow([("; ".join(_check_text(c) for c in r[k]) if k == "checks" else r[k]) for k in FIELDS])
    return out.getvalue()


def number(x):
    """A figure for a cell or a bar label: %g up to 6 digits, a whole number with thousands
    separators beyond (latencies in us: 1,978,970, not 1.97897e+06)."""
    return "%g" % x if abs(x) < 1e6 else "{:,.0f}".format(x)


def not_ok_lines(report):
    """Why a run that passed its checks is not OK: its violations and the run conditions that
    are not explained (check/report.py prints them for one run; compare under its table)."""
    out = ["%s: %s" % (v["kind"], v["message"]) for v in report.get("violations") or ()]
    out += ["run condition: %s" % c["message"] for c in report.get("run_conditions") or () if not c.get("explained")]
    return out


def _within(value, bound, fmt="%g"):
    return (fmt % value) + ("" if bound is None else "≤%s" % bound)


def _checks_cell(r):
    """The checks column: how many passed, the failed ones, or the run's own verdict."""
    failed = [c["check"] for c in r["checks"] if c["ok"] is False]
    if r.get("verdict") == "expected":
        return "[yellow]expected[/]"  # which finding, and where it is documented: notes()
    if failed:
        return "[red]FAILED: %s[/]" % ", ".join(failed)
    if r["ok"]:
        return "[green]%d ok[/]" % len(r["checks"])
    return "[red]run not OK[/]"  # its checks passed, the run itself failed: why is printed below


LEGEND = ("logical: the textbook's messages per request; hops: frames on the wires per request (≤ the "
          "checked bound); p50, p99: latency; resp: mean responsiveness (a node waiting, nobody in the "
          "critical section, to the next entry); svc: largest service traffic, hops/logical; fair: most "
          "entries by others while a request waited; n/a: does not apply (soft exclusion)")
SATURATED_LEGEND = "; *: the ring was saturated (below)"
SOFT_LEGEND = (">1 running: share of the time with two operations or more running; gap: an operation's "
               "interval since the same node's last, p50/p99")


def print_table(rows, title, console=None, unit=None):
    """The rows as tables that fit 80 columns: one line per protocol with its costs, latencies
    and checks (a bound next to its value; none: not proven, reported only), and, for the
    protocols of soft mutual exclusion, a second table of their own measures. unit: the rows'
    time unit, said after the title ("µs", a ring's: latencies, responsiveness and gaps shown in
    ms, which fit the columns)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table

    console = console or Console()

    def num(x):
        return "n/a" if x is None else number(x)

    in_ms = unit == "µs"

    def time(x):
        return num(x if x is None or not in_ms else round(x / 1000.0, 1 if x < 100_000 else None))

    def table(title_=None):
        return Table(title=title_, header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False, collapse_padding=True,
                     title_justify="left")

    console.print(title + ("" if unit is None else "; latency in %s" % ("ms" if in_ms else unit)), highlight=False)
    main = table()
    for col in ("protocol", "logical", "hops", "p50", "p99", "resp", "svc", "fair", "checks"):
        # names and figures whole; a long spec (raymond:tree=path) folds, a long verdict wraps
        main.add_column(col, justify="left" if col in ("protocol", "checks") else "right",
                        no_wrap=col not in ("protocol", "checks"),
                        overflow="fold", min_width=min(12, max(len(r["protocol"]) for r in rows)) if col == "protocol"
                        else None)
    for r in rows:
        by = {c["check"]: c for c in r["checks"]}
        logical = by.get("logical/req")
        star = "*" if saturated(r) else ""
        main.add_row(
            r["protocol"],
            _within(r["logical_per_request"], logical["bound"] if logical else None, "%.2f"),
            _within(r["hop_frames_per_request"], by["hops/req"]["bound"], "%.2f"),
            time(r["latency_p50"]) + star, time(r["latency_p99"]) + star,
            "n/a" if r["responsiveness"] is None else time(r["responsiveness"]) if in_ms else "%.2f" % r["responsiveness"],
            _within(r["max_service_traffic"], by["service"]["bound"], "%d/" + str(r["max_service_logical"])),
            num(r["max_overtaken"]), _checks_cell(r))
    console.print(main)
    console.print(LEGEND + (SATURATED_LEGEND if any(saturated(r) for r in rows) else ""), style="dim", highlight=False)
    soft = [r for r in rows if r.get("over_one_running") is not None]
    if soft:
        second = table("soft mutual exclusion")
        for col in ("protocol", ">1 running", "gap p50", "gap p99"):
            second.add_column(col, justify="left" if col == "protocol" else "right", overflow="fold")
        for r in soft:
            second.add_row(r["protocol"], "%.2f%%" % (100 * r["over_one_running"]),
                           time(r["interval_p50"]), time(r["interval_p99"]))
        console.print(second)
        console.print(SOFT_LEGEND, style="dim", highlight=False)


def notes(rows):
    """Lines for under the tables: the runs that were saturated and the documented findings."""
    out = []
    for r in rows:
        if saturated(r):
            out.append("%s: saturated: up to %d requests at once waited behind their node's own (%d of %d in "
                       "all), more than the %d nodes: the latencies measure that queue; a lower --rate "
                       "measures the protocol" % (r["protocol"], r["requests_queued_max"], r["requests_deferred"],
                                                  r["requests"], r["n"]))
        for e in r.get("expected") or ():
            out.append("%s: %s, as expected: %s" % (r["protocol"], e["check"], e["why"]))
    return out
