"""`picoring compare`'s table: protocols side by side, from the checker's reports of runs
on the same workload, ring size and seed (cli/compare.py makes the runs).

One row per protocol: logical messages and hop frames per request, latency p50 and p99,
the mean responsiveness (Englert et al.'s Definition 3), the largest service traffic, fairness (the most critical-section entries by other nodes
between a request and its service), and every check of the report with its bound.
Readers of a row need no protocol name: bounds come from the report (the descriptors).
"""

import csv
import io

FIELDS = ("protocol", "n", "requests", "served", "logical_per_request", "hop_frames_per_request",
          "latency_p50", "latency_p99", "responsiveness", "max_service_traffic", "max_service_logical", "max_overtaken",
          "over_one_running", "interval_p50", "interval_p99", "checks", "ok")


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


def row(report):
    """The compared figures of one run's report (a dict with FIELDS)."""
    q = report.get("latency_quantiles") or {}
    soft = report.get("soft")
    return {
        "protocol": report["protocol"], "n": report["n"], "requests": report["requests"], "served": report["served"],
        "logical_per_request": round(report["logical_per_request"], 3),
        "hop_frames_per_request": round(report["messages_per_request"], 3),
        "latency_p50": q.get("p50"), "latency_p99": q.get("p99"),
        # mean time from a node waiting with nobody in the critical section to the next entry
        # (Englert et al.'s Definition 3, averaged as their Figures 9 and 10 do)
        "responsiveness": round((report.get("responsiveness") or {}).get("mean", 0.0), 3),
        "max_service_traffic": report["max_service_traffic"], "max_service_logical": report["max_service_logical"],
        "max_overtaken": report["max_overtaken"],
        # soft mutual exclusion (the wandering token, random access): the fraction of the time with
        # two operations or more running, and the intervals between two operations of one node;
        # None for a protocol with hard mutual exclusion (always 0 running at once beyond one)
        "over_one_running": round(soft["over_one_fraction"], 6) if soft else None,
        "interval_p50": soft["intervals"]["p50"] if soft else None,
        "interval_p99": soft["intervals"]["p99"] if soft else None,
        "checks": [{"check": c, "value": v, "bound": bd, "ok": ok} for c, v, bd, ok in checks(report)],
        "ok": report["ok"],
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


def print_table(rows, title, console=None):
    """One line per protocol; a bound next to its value (none: not proven, reported only);
    the checks column names the checks that failed."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    table = Table(title=title, header_style="bold", caption="logical: the textbook's messages; hops: frames on the wires; "
                  "resp: mean responsiveness (a node waiting, nobody in the critical section, to the next entry); "
                  "svc: largest service traffic (hops/logical); fair: most entries by others while a request waited; "
                  ">1 run: time with two operations or more running (soft exclusion); gap: an operation's interval "
                  "since the same node's last, p50/p99")
    for col in ("protocol", "logical/req", "hops/req", "p50", "p99", "resp", "svc", "fair", ">1 run", "gap", "checks"):
        table.add_column(col, justify="left" if col in ("protocol", "checks") else "right", no_wrap=col != "checks")

    def num(x):
        return "-" if x is None else number(x)

    for r in rows:
        by = {c["check"]: c for c in r["checks"]}
        logical = by.get("logical/req")
        failed = [c["check"] for c in r["checks"] if c["ok"] is False]
        table.add_row(
            r["protocol"],
            _within(r["logical_per_request"], logical["bound"] if logical else None, "%.2f"),
            _within(r["hop_frames_per_request"], by["hops/req"]["bound"], "%.2f"),
            num(r["latency_p50"]), num(r["latency_p99"]), "%.2f" % r["responsiveness"],
            _within(r["max_service_traffic"], by["service"]["bound"], "%d/" + str(r["max_service_logical"])),
            str(r["max_overtaken"]),
            "-" if r.get("over_one_running") is None else "%.2f%%" % (100 * r["over_one_running"]),
            "-" if r.get("interval_p50") is None else "%s/%s" % (num(r["interval_p50"]), num(r["interval_p99"])),
            ("[red]FAILED: %s[/]" % ", ".join(failed) if failed else "[green]%d ok[/]" % len(r["checks"]) if r["ok"]
             else "[red]run not OK[/]"),  # its checks passed, the run itself failed: why is printed below
        )
    console.print(table)
