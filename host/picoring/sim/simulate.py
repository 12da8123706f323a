"""`picoring sim`: run the firmware's protocol code on a simulated ring.

The loop itself is simcore.run (shared with the MicroPython equivalence
tests); this module builds the ring, the workload, the checker and the trace
writer around it and turns the outcome into one report.
"""

import itertools
import json
import os
import random
from pathlib import Path

from ..check import registry
from ..check.checker import Checker
from ..check.trace import Event, TraceWriter, header
from . import simcore
from .nodes import make_nodes
from .workload import WorkloadError, make_workload


class TraceTap:
    """simcore's tracer interface over a TraceWriter (or any Event listener)."""

    def __init__(self, listener, n):
        self.listener = listener
        self.n = n

    def frame(self, t, ev, node, is_token, payload):
        link = node if ev == "send" else (node - 1) % self.n
        if is_token:
            pd = {"count": payload[0], "state": payload[1], "seq": payload[2], "epoch": payload[3]}
            self.listener(Event(t, ev, node, link, "token", pd))
        else:
            self.listener(Event(t, ev, node, link, "request"))

    def message(self, t, ev, node, m):
        """A message frame's send or recv: the fields of its event record (ring/hostlink.py)."""
        kind, src, dst, p, hop, fwd = m
        link = node if ev == "send" else (node - 1) % self.n
        pd = {"mkind": kind, "src": src, "dst": dst, "hop": hop,
              "seq": simcore.first_word(p),
              "epoch": p[4] | p[5] << 8 if len(p) >= 6 else 0}
        if ev == "send":
            pd["fwd"] = fwd
        self.listener(Event(t, ev, node, link, "msg", pd))

    def event(self, t, ev, node):
        self.listener(Event(t, ev, node))


class _CountDeferrals:
    """The workload as simcore.run sees it, counting the requests that fall due at a node whose
    previous request is still outstanding: simcore defers them to the node's exit (the same test
    as its own, made as it takes each one). Many of them: the ring was saturated."""

    def __init__(self, workload, nodes, checker):
        self._workload = workload
        self._nodes = nodes
        self._checker = checker
        self.deferred = 0
        self.most_queued = 0  # the most requests due at once and not yet made (deferred, waiting)
        # what simcore.run reads, bound once (it asks at every request)
        self.closed_loop = workload.closed_loop
        self.defer_busy = workload.defer_busy
        self.next_time = workload.next_time
        self.on_quiescent = workload.on_quiescent

    @property
    def issued(self):
        return self._workload.issued

    @property
    def exhausted(self):
        return self._workload.exhausted

    def __getattr__(self, name):  # anything else (describe, total, ...)
        return getattr(self._workload, name)

    def due(self, t):
        for i, line in self._workload.due(t):
            if self._nodes[i].pending or self._nodes[i].in_cs:
                self.deferred += 1
            yield i, line
        self.most_queued = max(self.most_queued, self._workload.issued - self._checker.requests)


def simulate(protocol, n, workload="sequential", requests=100, seed=0, cs_time=1, trace=None,
             idle_horizon=None, rate=None, period=None, progress=None, listener=None, drop=0.0, building=None):
    """Run one simulation; returns the checker's report with the run's details.

    workload is a name (see workload.make_workload) or a Workload object;
    trace a path or open file for the JSON-lines trace; listener an extra
    callable that receives every Event (the dashboard, a test); drop the probability
    that a message's hop frame is lost on its wire (seeded by seed; protocols of the
    message layer only: `run --virtual --faults drop=P` drops any frame on boards);
    progress(t, requests made, pending, messages) every few thousand steps of the run, and
    building(nodes made, n) as the ring is built (nodes.make_nodes).
    """
    if cs_time < 0:
        raise ValueError("cs-time cannot be negative")
    if not 0.0 <= drop <= 1.0:
        raise ValueError("drop is a probability: between 0 and 1, not %r" % (drop,))
    roles = registry.message_roles(registry.about(protocol))  # {message kind: "token" | "request"}
    if drop and not roles:
        raise ValueError("drop: %s sends no messages of the protocol layer, whose frames the simulator can lose "
                         "(on a ring of boards: run --virtual N --faults drop=P, with --regen-ms for recovery)"
                         % protocol)
    nodes = make_nodes(protocol, n, progress=building)
    if isinstance(workload, str):
        wl = make_workload(workload, n, requests, seed=seed, cs_time=cs_time, rate=rate, period=period)
    else:
        wl = workload
    if idle_horizon is None:
        idle_horizon = 4 * n
    # The run's horizons (simcore.run) grow with the longest a request can take on a quiet
    # ring: n hop times for the ring protocols; a protocol whose messages travel a logical
    # structure routed over the ring says how long in its descriptor ("horizon": D*n for a
    # tree's requests up and its token down).
    h = max(n, registry.horizon(protocol, n) or 0)
    starve = starve_horizon(protocol, n, cs_time)  # the descriptor's own, if it gives one (bs)
    checker = Checker(protocol, n)
    writer = None
    listeners = []
    if trace is not None:
        meta = header(protocol, n, "sim", "hop", seed=seed, workload=wl.describe(), cs_time=cs_time)
        writer = TraceWriter(trace, meta)
        listeners.append(writer)
    if listener is not None:
        listeners.append(listener)
    tracer = None
    if listeners:
        tracer = TraceTap(listeners[0] if len(listeners) == 1 else _fanout(listeners), n)
    lose = None
    dropped = {"frames": 0, "tokens": 0}
    if drop:
        rng = random.Random("picoring-sim-drop/%d" % seed)

        def lose(t, node, dst, mkind):
            if rng.random() >= drop:
                return False
            dropped["frames"] += 1
            if roles.get(mkind) == "token":
                dropped["tokens"] += 1
                checker.lost(t, node)
            return True

    try:
        try:
            counted = _CountDeferrals(wl, nodes, checker)
            out = simcore.run(nodes, counted, cs_time, checker, tracer=tracer, idle_horizon=idle_horizon, progress=progress,
                              drop=lose,
                              holder=nodes[0].first,  # the protocol's holder option, 0 by default
                              quiesce_horizon=4 * h + 4 * cs_time + 8,
                              starve_horizon=starve if starve is not None else 8 * h * (cs_time + 1) + 16)
        except simcore.BusyNodeError as e:
            raise WorkloadError("%s: %s" % (wl.describe(), e)) from None
        if writer is not None:
            end = {"quiescent": out["quiescent"], "reason": out["reason"]}
            writer(Event(out["end_time"], "end", extra=end))
    finally:
        if writer is not None:
            writer.close()
    checker.last_t = out["end_time"]
    report = checker.finish(quiescent=out["quiescent"], reason=None if out["quiescent"] else out["reason"])
    report.update(
        source="sim",
        workload=wl.describe(),
        seed=seed,
        cs_time=cs_time,
        end_time=out["end_time"],
        stop_reason=out["reason"],
        protocol_errors=sum(node.errors for node in nodes),
        requests_deferred=counted.deferred,  # came while their node still waited: run at its exit
        requests_queued_max=counted.most_queued,  # the most of those waiting at once
    )
    if not registry.rests(protocol):
        report["idle_horizon"] = idle_horizon
        report["idle_messages"] = checker.total - out["messages_when_idle"]
    if drop:
        report["drop"] = drop
        report["frames_dropped"] = dropped["frames"]
        report["tokens_dropped"] = dropped["tokens"]
    if out["quiescent"] is False:
        report["schedule"] = [{"t": t, "node": i} for t, i in out["schedule"]]
    return report


def starve_horizon(protocol, n, cs_time):
    """How long a request may wait before the simulator calls it starved: the descriptor's
    about["starve_horizon"] (an expression in n and cs, the critical section's length), else
    simcore's default (None)."""
    expr = registry.about(protocol).get("starve_horizon")
    return None if expr is None else eval(expr, {"__builtins__": {}}, {"n": n, "cs": cs_time})


def _fanout(listeners):
    def fan(event):
        for listener in listeners:
            listener(event)

    return fan


def write_schedule(schedule, path):
    """Save a realized schedule as a file:PATH workload that replays the run."""
    with open(path, "w", encoding="utf-8") as f:
        f.write(_schedule_text(schedule))


def _schedule_text(schedule):
    return "".join(json.dumps(item) + "\n" for item in schedule)


def schedule_dir():
    """Where schedules of runs that did not go quiet go by default: $XDG_STATE_HOME/picoring/
    schedules (~/.local/state/...), not the working folder, where they piled up."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "picoring" / "schedules"


def save_schedule(schedule, folder, stem):
    """Save a schedule as folder/stem.jsonl without ever replacing another file: a file with
    the same schedule is reused (a rerun of the same run), else stem-2.jsonl, stem-3.jsonl...
    Returns the path."""
    text = _schedule_text(schedule)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for k in itertools.count(1):
        path = folder / ("%s%s.jsonl" % (stem, "-%d" % k if k > 1 else ""))
        try:
            with open(path, "x", encoding="utf-8") as f:  # O_EXCL: never over someone else's file
                f.write(text)
            return path
        except FileExistsError:
            try:
                if path.read_text(encoding="utf-8") == text:
                    return path
            except (OSError, UnicodeDecodeError):
                pass
