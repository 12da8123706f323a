"""`picoring bench soak`: the recovery (docs/recovery.md) under sustained faults.

A virtual ring of 5 boards runs the real firmware. Requests arrive as Poisson, 10,000 by
default. Every wire corrupts 1% of its frames (one flipped bit: the CRC drops the frame) and
drops 0.5% outright. One board is power-cycled once half the requests have been served. The
run goes through the harness like any `picoring run`, and the figures come from its checker
and trace:

- overlapping critical sections: the checker's safety violations, plus the shared-counter
  audit (its final value must equal the number of entries);
- requests served / failed, with reasons / lost; lost = issued - served - failed, and must
  be 0;
- token regenerations: how long each took, from the last sign of the old token to the new
  one, against the timeout that fired plus one ring round trip. The round trip is n times
  the median token hop latency, measured in the same run.

This is a bench, not a test: it takes minutes (`--quick`: 1,000 requests), and what it
prints is a measurement.
"""

import os
import statistics
import tempfile
import threading
import time

DEFAULT_FAULTS = "corruptframe=0.01,drop=0.005,seed=1"
N_BOARDS = 5
REQUESTS = (10_000, 1_000)  # (full, --quick)


def regeneration_times(trace_path, n):
    """Each regeneration of the run in the trace, as the checker times it (Checker.
    _regenerated: time without a token, whether a request waited, first timeout to
    new token, the timeout that fired), in ms, against that timeout plus one ring
    round trip. The round trip is n times the median token hop latency (a token
    frame matched by its link and payload; frames that were lost have no match)."""
    from ..check.checker import Checker
    from ..check.trace import TraceReader

    sent = {}
    lat = []
    with TraceReader(trace_path) as reader:
        checker = Checker(reader.meta["protocol"], reader.meta["n"], time_unit=reader.meta.get("time_unit", "hop"))
        for e in reader:
            checker.feed(e)
            if e.kind == "token" and e.ev in ("send", "recv"):
                key = (e.link, tuple(sorted((e.payload or {}).items())))
                if e.ev == "send":
                    sent[key] = e.t
                elif key in sent:
                    lat.append(e.t - sent.pop(key))
    rtt_us = statistics.median(lat) * n if lat else None
    rows = []
    for r in checker.regenerations:
        rows.append({
            "t": r["t"], "node": r["node"],
            "after_ms": None if r["after"] is None else r["after"] / 1000,
            "waited": r["waited"],
            "repair_ms": None if r["repair"] is None else r["repair"] / 1000,
            "timeout_ms": r["timeout_ms"],
            "budget_ms": None if r["timeout_ms"] is None or rtt_us is None else r["timeout_ms"] + rtt_us / 1000,
        })
    return rtt_us, rows


def run_soak(quick=False, log=None, protocol="d", n=N_BOARDS, requests=None, faults=DEFAULT_FAULTS,
             restart=2, regen_ms=200, seed=1, trace=None, rate=None):
    from ..check import audit
    from ..ring import deploy
    from ..ring.harness import RingRun
    from ..sim.workload import make_workload
    from ..virtual.wire import FaultPlan

    requests = requests if requests is not None else REQUESTS[1 if quick else 0]
    plan = FaultPlan.coerce(faults)
    if plan is not None:
        plan.check(n)
    if restart is not None and not 0 <= restart < n:
        raise ValueError("--restart: board %d does not exist in a ring of %d" % (restart, n))
    say = log or (lambda msg: None)
    say("starting %d virtual boards and deploying the firmware..." % n)
    ring = deploy.start_virtual(n, protocol, regen_ms=regen_ms, audit=True)
    tmp = None
    if trace is None:
        tmp = tempfile.NamedTemporaryFile(prefix="picoring-soak-", suffix=".jsonl", delete=False)
        tmp.close()
        trace = tmp.name
    restarted = []
    t_start = [None]

    def progress(issued, total, served, messages):
        if restart is not None and not restarted and served >= requests // 2:
            restarted.append(time.monotonic())
            # Off the harness's loop: the power cycle waits for the board to come back.
            threading.Thread(target=ring.power_cycle, args=(restart,), daemon=True).start()
        now = time.monotonic()
        if log and now - progress.last >= 0.5:
            progress.last = now
            say("soak: %d/%d issued, %d served, %d messages, %.0f s" % (issued, total, served, messages,
                                                                       now - t_start[0]))

    progress.last = 0.0
    try:
        workload = make_workload("poisson", n, requests, seed=seed, rate=rate)
        run = RingRun([b.usb_path for b in ring.boards], protocol, workload, trace=trace, resetter=ring.reset,
                      seed=seed, progress=progress, stall_timeout_s=120.0, clock=ring.clock)
        try:
            run.connect()
            audit.reset(ring)
            ring.set_faults(plan)
            t_start[0] = time.monotonic()
            report = run.run()
            took = time.monotonic() - t_start[0]
        finally:
            run.close()
        wires = [w.counters() for w in ring.wires]
        counter = audit.read(ring, report)
    finally:
        ring.stop()
    rtt_us, regens = regeneration_times(trace, n)
    if tmp is not None:
        os.unlink(tmp.name)
    failed = report.get("failed") or {}
    lost = report["issued"] - report["served"] - sum(failed.values())
    # Lost while a request waited: the time without a token is the timeout plus the claim's
    # round trip (plus any claims lost on the way). Lost while the ring was idle: the clock
    # starts only when someone asks, so only the repair time says something.
    waited = [r for r in regens if r["waited"] and r["after_ms"] is not None]
    afters = [r["after_ms"] for r in waited]
    within = [r for r in waited if r["budget_ms"] is not None and r["after_ms"] <= r["budget_ms"]]
    ratios = sorted(r["after_ms"] / r["budget_ms"] for r in waited if r["budget_ms"])
    repairs = [r["repair_ms"] for r in regens if r["repair_ms"] is not None]
    frames = sum(w["faults"]["frames"] for w in wires)
    failed_audit = audit.violation(counter)
    return {
        "protocol": protocol, "n": n, "requests": report["issued"], "faults": plan.describe() if plan else None,
        "restart": None if restart is None else {"board": restart, "done": bool(restarted)},
        "regen_ms": regen_ms, "seconds": round(took, 1),
        "overlapping_critical_sections": report["safety_violations"],
        "audit": counter,
        "served": report["served"], "failed": failed, "lost": lost,
        "stalled": report.get("stalled"),
        "regenerations": len(regens),
        "regeneration_ms": {
            "lost_while_waited": len(waited),
            "median": statistics.median(afters) if afters else None,
            "max": max(afters) if afters else None,
            "within_timeout_plus_rtt": len(within),
            "ratio_to_timeout_plus_rtt": {"median": statistics.median(ratios) if ratios else None,
                                          "max": ratios[-1] if ratios else None},
            "repair_median": statistics.median(repairs) if repairs else None,
            "repair_max": max(repairs) if repairs else None,
        },
        "regenerated": regens,
        "ring_round_trip_ms": None if rtt_us is None else rtt_us / 1000,
        "timeouts": report["recovery"]["timeouts"], "discarded_tokens": report["recovery"]["discarded_tokens"],
        "recovery_frames": report["recovery"]["messages"],
        "wire_frames": frames,
        "frames_corrupted": sum(w["faults"]["frames_corrupted"] for w in wires),
        "frames_dropped": sum(w["faults"]["frames_dropped"] for w in wires),
        "bad_frames_at_boards": sum((b.get("link_in") or {}).get("bad") or 0 for b in report["boards"]),
        "events_lost": report["events_lost"],
        "notices": report["notices"][:20],
        "violations": (([failed_audit] if failed_audit else []) + report["violations"])[:20],
        "ok": (report["safety_violations"] == 0 and counter["ok"] and lost == 0),
    }


def print_soak(result, console=None):
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = Table(title="soak: protocol %s, n=%d, %d requests, faults %s, board %s power-cycled mid-run"
              % (result["protocol"].upper(), result["n"], result["requests"], result["faults"],
                 (result["restart"] or {}).get("board", "none")), header_style="bold")
    t.add_column("measure")
    t.add_column("value", justify="right")
    t.add_column("must be", justify="right")
    t.add_row("overlapping critical sections", str(result["overlapping_critical_sections"]), "0")
    a = result["audit"]
    t.add_row("audit: shared counter / entries", "%s / %s" % (a["counter"], a["entries"]), "equal")
    t.add_row("requests served", str(result["served"]), "")
    t.add_row("requests failed", ", ".join("%d %s" % (k, r) for r, k in sorted(result["failed"].items())) or "0", "")
    t.add_row("requests lost", str(result["lost"]), "0")
    t.add_row("token regenerations", str(result["regenerations"]), "")
    rm = result["regeneration_ms"]
    if rm["median"] is not None:
        t.add_row("  lost while a request waited", str(rm["lost_while_waited"]), "")
        t.add_row("    time without a token, median / max", "%.0f / %.0f ms" % (rm["median"], rm["max"]), "")
        t.add_row("    within the timeout that fired + 1 round trip",
                  "%d of %d" % (rm["within_timeout_plus_rtt"], rm["lost_while_waited"]), "")
        ratio = rm["ratio_to_timeout_plus_rtt"]
        if ratio["median"] is not None:
            t.add_row("    ratio to (timeout + round trip), median / max",
                      "%.2f / %.2f" % (ratio["median"], ratio["max"]), "")
    if rm["repair_median"] is not None:
        t.add_row("  first timeout to new token, median / max",
                  "%.0f / %.0f ms" % (rm["repair_median"], rm["repair_max"]), "")
    if result["ring_round_trip_ms"] is not None:
        t.add_row("ring round trip (n x median token hop)", "%.1f ms" % result["ring_round_trip_ms"], "")
    t.add_row("timeouts / tokens discarded", "%d / %d" % (result["timeouts"], result["discarded_tokens"]), "")
    rf = result["recovery_frames"]
    t.add_row("recovery frames: claims / re-announced", "%d / %d" % (rf.get("claim", 0), rf.get("again", 0)), "")
    t.add_row("frames on the wires / corrupted / dropped",
              "%d / %d / %d" % (result["wire_frames"], result["frames_corrupted"], result["frames_dropped"]), "")
    t.add_row("run time", "%.0f s (base timeout %d ms)" % (result["seconds"], result["regen_ms"]), "")
    console.print(t)
    for v in result["violations"]:
        console.print("[red]%s[/]: %s" % (v["kind"], v["message"]), highlight=False)
    console.print("[bold green]OK[/]" if result["ok"] else "[bold red]FAILED[/]")


def main(args):
    from .common import run_command

    def run(quick=False, log=None):
        return run_soak(quick=quick, log=log, protocol=args.protocol or "d", n=args.n or N_BOARDS,
                        requests=args.requests, faults=args.faults or DEFAULT_FAULTS,
                        restart=None if args.restart is not None and args.restart < 0 else (
                            2 if args.restart is None else args.restart),
                        regen_ms=args.regen_ms or 200, seed=args.seed or 1, trace=args.trace)

    return run_command(args, run, print_soak)


