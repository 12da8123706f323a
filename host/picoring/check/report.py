"""Human-readable run reports (rich), from the checker's report dict."""

from rich.console import Console
from rich.table import Table

from . import registry
from .compare import saturated


def _fmt_bound(value):
    return "unbounded" if value is None else str(value)


def print_report(report, console=None):
    console = console or Console()
    b = report["bounds"]
    m = report["messages"]
    title = "protocol %s, n=%d" % (report["protocol"].upper(), report["n"])
    if report.get("workload"):
        title += ", %s" % report["workload"]
    table = Table(title=title, show_header=True, header_style="bold")
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("bound", justify="right")
    table.add_row("requests served", "%d / %d" % (report["served"], report["requests"]), "")
    if m.get("msg"):  # a protocol of the layer's messages: logical messages and hop frames differ
        table.add_row("logical messages / hop frames", "%d / %d" % (report["logical_messages"], m["total"]), "")
        table.add_row("logical messages per request", "%.3f" % report["logical_per_request"],
                      _fmt_bound(b.get("logical_per_request")))
        table.add_row("hop frames per request", "%.3f" % report["messages_per_request"], _fmt_bound(b["messages_per_request"]))
    else:  # S, Q and D: every message is one hop frame, the two counts are one
        table.add_row("messages (token + request)", "%d (%d + %d)" % (m["total"], m["token"], m["request"]), "")
        table.add_row("messages per request", "%.3f" % report["messages_per_request"], _fmt_bound(b["messages_per_request"]))
    paper = report.get("paper_bounds") or {}
    instead = []  # (mark, why the printed bound is not the checked one): printed under the table
    if report.get("over_paper_total_bound"):
        table.add_row("  over the paper's printed bound", "yes", _instead(
            report, "messages_per_request", paper["messages_per_request"], b["messages_per_request"], instead))
    table.add_row("max service traffic", str(report["max_service_traffic"]), _fmt_bound(b["service_traffic"]))
    if paper.get("service_traffic") is not None and paper["service_traffic"] != b["service_traffic"]:
        table.add_row("  requests over the paper's printed bound", str(report.get("over_paper_service_bound", 0)),
                      _instead(report, "service_traffic", paper["service_traffic"], b["service_traffic"], instead))
    lat = report.get("latency") or {}
    unit = "us" if report.get("source") == "ring" else "hop times"
    if lat:
        table.add_row("latency mean / max", "%.1f / %s %s" % (lat.get("mean", 0.0), lat.get("max", 0), unit), "")
    if saturated(report):  # the simulator's count: the workload asked faster than the ring served
        table.add_row("  saturated: requests that waited behind their node's own, most at once / in all",
                      "%d / %d" % (report["requests_queued_max"], report["requests_deferred"]),
                      "the latency is that queue's")
    table.add_row("safety violations", str(report["safety_violations"]), "0")
    audit = report.get("audit")
    if audit:
        table.add_row("audit: shared counter / entries", "%s / %d" % (audit["counter"], audit["entries"]),
                      "overlaps lose some (soft)" if audit.get("soft") else "equal")
    for label, value, bound in resource_rows(report.get("resource"), report.get("soft") is not None):
        table.add_row(label, value, bound)
    rec = report.get("recovery") or {}
    # (a protocol that makes and removes tokens by its own rules, the wandering token, in the simulator too)
    if rec.get("faults_at") is not None or rec.get("regenerations") or rec.get("discarded_tokens"):
        msgs = rec.get("messages") or {}
        # What each count is: a token made (the layer's recovery after its timeout, or a protocol's
        # own rule, as the wandering token's: no visit for Delta_gen), the layer's timeouts alone,
        # and tokens a node dropped (a second token met, or one of an old epoch).
        table.add_row("tokens made by a node that saw none for its timeout", str(rec["regenerations"]),
                      "" if rec["timeouts"] or not rec["regenerations"] else "the protocol's own rule")
        table.add_row("recovery timeouts (the layer's) / tokens removed by a node",
                      "%d / %d" % (rec["timeouts"], rec["discarded_tokens"]), "")
        table.add_row("recovery frames (claim, again)", "%d, %d" % (msgs.get("claim", 0), msgs.get("again", 0)), "")
        if rec.get("over_bound_after_faults"):
            table.add_row("  over a fault-free bound after faults", str(rec["over_bound_after_faults"]), "not checked")
    failed = report.get("failed") or {}
    if failed:
        table.add_row("requests failed", ", ".join("%d %s" % (k, r) for r, k in sorted(failed.items())), "")
    for label, value in soft_rows(report.get("soft"), unit):
        table.add_row(label, value, "")
    if report.get("drop"):  # the simulator's injected losses (sim --drop)
        table.add_row("hop frames dropped (tokens among them)", "%d (%d)" % (report["frames_dropped"], report["tokens_dropped"]),
                      "p = %g" % report["drop"])
    if report.get("queued_at_host"):  # the run stopped early: these never left the host
        table.add_row("requests never sent (queued at the host when the run stopped)", str(report["queued_at_host"]), "")
    if report.get("quiescent") is not None:
        table.add_row("quiescent at the end", "yes" if report["quiescent"] else "NO", "yes")
    if "idle_messages" in report:
        table.add_row("messages while idle", "%d in %d hop times" % (report["idle_messages"], report["idle_horizon"]),
                      "unbounded (grows with idle time)")
    console.print(table)
    for line in instead:
        console.print(line, highlight=False)
    for v in report["violations"][:20]:
        console.print("[bold red]%s[/]: %s" % (v["kind"], v["message"]), highlight=False)
    if len(report["violations"]) > 20:
        console.print("... %d violations in all" % len(report["violations"]))
    documented = registry.findings(report["protocol"])
    for kind in sorted({v["kind"] for v in report["violations"]} & set(documented)):
        console.print("[yellow]%s, a documented finding[/]: %s" % (kind, documented[kind]), highlight=False)
    for c in report.get("run_conditions") or ():  # the run itself, not the protocol
        console.print("[bold %s]run condition[/]: %s" % ("yellow" if c.get("explained") else "red", c["message"]),
                      highlight=False)
    for line in link_lines(report):
        console.print(line, highlight=False)
    notices = report.get("notices") or []
    for text in notices[:10]:  # boards restarted, USB links lost and back, refused lines...
        console.print("[yellow]notice[/]: %s" % text, highlight=False)
    if len(notices) > 10:
        console.print("... %d notices in all (--json has them)" % len(notices))
    if report.get("schedule_file"):
        console.print("schedule that led there: %s (replay with --workload file:%s)" % (report["schedule_file"], report["schedule_file"]))
    console.print("[bold green]OK[/]" if report["ok"] else "[bold red]CHECK FAILED[/]")


def _instead(report, name, printed, checked, notes):
    """The bound cell of a count over the paper's printed bound: the printed one and the one
    checked instead, marked; notes gets the mark's line: where the printed one is printed, and
    why it does not hold (the descriptor's bound's "where" and "why")."""
    b = (registry.about(report["protocol"]).get("bounds") or {}).get(name) or {}
    mark = "¹²³"[len(notes)]
    where = (b.get("where") or "").split(";")[0].strip()
    notes.append("%s %s: the paper's %s%s does not hold: %s; the run is checked against %s instead" % (
        mark, name.replace("_", " "), printed, " (%s)" % where if where else "",
        b.get("why") or "docs/bounds.md", _fmt_bound(checked)))
    return "printed %s; checked %s %s" % (printed, _fmt_bound(checked), mark)


def soft_rows(soft, unit):
    """(measure, value) rows of soft mutual exclusion (the checker's module doc): concurrency,
    intervals, tokens alive, and the stabilisation after a token loss (check/soft.py)."""
    if not soft:
        return []
    total = soft["time"] or 1
    rows = [("> 1 running: time (most at once)", "%.3f %% (%d)" % (100.0 * soft["over_one_fraction"], soft["max_running"]))]
    iv = soft["intervals"]
    if iv["count"]:
        rows.append(("entries of a node apart: p50 / p99 / max", " / ".join(_span(iv[q], unit) for q in ("p50", "p99", "max"))))
    toks = soft["time_with_k_tokens"]
    if toks:
        rows.append(("tokens alive (1 + made - removed - lost): share of time",
                     ", ".join("%d: %.2f %%" % (k, 100.0 * v / total) for k, v in toks.items() if v > 0)))
    rows.append(("tokens lost on a wire (a gap in the receiver's frames)", str(soft["tokens_lost"])))
    st = soft.get("stabilisation")
    if st and st["count"]:
        rows.append(("transients after a loss (unfinished)", "%d (%d)" % (st["count"], st["unfinished"])))
        if st["count"] > st["unfinished"]:
            rows.append(("  stabilisation: mean / p50 / max", " / ".join(_span(st[q], unit) for q in ("mean", "p50", "max"))))
    return rows


def _span(x, unit):
    """A time for the table: a ring's microseconds in ms from 10 ms on."""
    if x is None:
        return "-"
    if unit == "us" and x >= 10_000:
        return "%.1f ms" % (x / 1000.0)
    return ("%d" % x if x == int(x) else "%.1f" % x) + (" us" if unit == "us" else "")


def resource_rows(res, soft=False):
    """(measure, value, bound) rows of the shared FRAM counter against the entries (docs/fram.md);
    soft: soft exclusion, whose overlapping sections may lose updates."""
    if not res:
        return []
    counter = "-" if res.get("counter") is None else str(res["counter"])
    start = res.get("start") or 0
    rows = [("FRAM counter / entries", "%s / %d" % (counter if not start else "%s - %d" % (counter, start), res["entries"]),
             "equal")]
    if res["updates"] != res["entries"]:
        rows.append(("  updates written", str(res["updates"]), ""))
    if res.get("lost_updates"):
        rows.append(("  lost updates (overlaps)", str(res["lost_updates"]), "measured (soft)" if soft else "0"))
    if res.get("errors"):
        rows.append(("  FRAM accesses failed (OSError)", str(res["errors"]), "0"))
    return rows


def print_summary(reports, console=None):
    """One row per run: the demo's table."""
    console = console or Console()
    table = Table(title="runs checked against the bounds (msgs/req and max service traffic <= bound)",
                  header_style="bold")
    for col in ("run", "served", "msgs", "msgs/req", "max svc", "safety", "quiet", "check"):
        table.add_column(col, justify="right", no_wrap=True)
    for r in reports:
        b = r["bounds"]
        table.add_row(
            "%s n=%d" % (r["protocol"].upper(), r["n"]),
            "%d/%d" % (r["served"], r["requests"]),
            str(r["messages"]["total"]),
            "%.2f <= %s" % (r["messages_per_request"], _fmt_bound(b["messages_per_request"])),
            "%d <= %s" % (r["max_service_traffic"], _fmt_bound(b["service_traffic"])),
            str(r["safety_violations"]),
            {True: "yes", False: "NO", None: "-"}[r.get("quiescent")],
            "[green]OK[/]" if r["ok"] else "[red]FAILED[/]",
        )
    console.print(table)
    for r in reports:
        for v in r["violations"][:10]:
            console.print("[bold red]%s %s[/]: %s" % (r["protocol"].upper(), v["kind"], v["message"]), highlight=False)


def link_lines(report):
    """Per link: what the wire's faults injected (virtual ring) and the bad frames the
    receiving board dropped, e.g. "wire 1 (board 1 -> 2): 12 bytes corrupted in 12 frames;
    board 2 dropped 12 bad frames (crc 12)". Links with nothing to say are left out."""
    boards = report.get("boards") or []
    wires = {w["wire"]: w for w in report.get("wires") or []}
    n = report.get("n") or len(boards)
    out = []
    if report.get("faults"):
        out.append("faults injected: %s" % report["faults"])
    for b in sorted(boards, key=lambda b: (b["position"] - 1) % n):
        link = b.get("link_in")
        if link is None:
            continue
        w = link["wire"]
        wire = wires.get(w, {})
        injected = wire.get("faults")
        bad = link.get("bad") or 0
        if not bad and not (injected and any(v for k, v in injected.items() if k != "frames")):
            continue
        if injected is not None:
            from ..virtual.wire import describe_injected

            text = describe_injected(injected)
        else:
            text = "no faults injected"
        reasons = ", ".join("%s %d" % (r, c) for r, c in link["bad_by_reason"].items() if c)
        out.append("wire %d (board %d -> %d): %s; board %d dropped %d bad frames%s"
                   % (w, w, (w + 1) % n, text, b["position"], bad, " (%s)" % reasons if reasons else ""))
    return out
