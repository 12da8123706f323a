"""Hold a run against the paper's proven bounds, safety and liveness.

One Checker consumes a stream of ring events, from a trace file, from the
simulator (which hands over its message counters in bulk between events, so it
need not build an event per hop) or from the board harness, and feeds each one to
its parts (check/parts/: safety, liveness and latency, the bounds, fairness, a
protocol's own counts, recovery, soft exclusion, the resource audit), listeners
that each keep one concern; the report is theirs, put together.

Measures (section 1 of the paper):
  messages            one frame over one link (a hop frame): token and request frames, and
                      every hop of a protocol-layer message (docs/frames.md)
  logical messages    the textbook's count: a token or request frame (one hop each), or one
                      message however many hops it takes (a send with fwd false); for S, Q
                      and D the two counts are equal
  messages/request    total messages / requests (and logical messages / requests)
  service traffic     messages anywhere in the ring from the moment a request is
                      made (its request message, if any, included) to the moment
                      the requester receives the token
Bounds checked (docs/bounds.md has the counterexamples and the arguments):
  Q  total <= n * requests              (Thm 3.1, holds)
     service traffic <= (5n^2 - 5n + 2)/2 (corrected; the paper prints
                                         3/2 n^2 - 5/2 n + 1, exceeded at n = 2..5;
                                         worst found by exhaustive search: (2n-1)(n-1))
  D  total <= 3n * requests             (empirical, not proven: the paper prints
                                         2n, exceeded by the corrected D at n = 5)
     service traffic <= 3n - 2          (corrected; the paper prints 3n - 3,
                                         exceeded at n = 3)
  S  unbounded (Thm 2.1): reported, not checked
The paper's printed bounds are reported next to the checked ones, with the
number of requests that exceeded them.

Soft mutual exclusion (parts/soft_exclusion.py) is measured, not checked. On a
lossy ring (docs/recovery.md, parts/recovery.py) the bounds are the fault-free ones
and do not apply once recovery has acted (a timeout, a discarded or regenerated
token, a failed request): from then on they are reported, not checked. What is
checked still: mutual exclusion, that entries carry strictly increasing token
sequence numbers (parts/safety.py), and that every request is served or reported
failed with a reason (parts/liveness.py).
"""

from operator import attrgetter
from types import SimpleNamespace

from . import registry
from .parts.bounds import Bounds, bounds_for, paper_bounds_for  # noqa: F401 (the explorers' import)
from .parts.fairness import Fairness
from .parts.forwards import Forwards
from .parts.ledger import Ledger
from .parts.liveness import Liveness
from .parts.recovery import Recovery
from .parts.resource import Resource
from .parts.safety import SEQ_PERIOD, Safety  # noqa: F401
from .parts.soft_exclusion import CLOCK_UNIT, SoftExclusion  # noqa: F401

# The listener methods the Checker feeds (parts/__init__.py), each to every part that has it.
EVENTS = ("request", "enter", "exit", "fail", "restarted", "events_lost", "frame", "token_seen", "regen",
          "discard", "timeout", "lost_frame", "tokens", "lost", "message_sent", "start", "clock_rates", "res",
          "wire", "stood_still")

# The report's keys, in the order it has always had them (the parts give them).
REPORT_KEYS = ("protocol", "n", "requests", "served", "messages", "logical_messages", "hop_frames",
               "messages_per_request", "logical_per_request", "max_service_traffic", "max_service_logical",
               "max_service_request", "latency", "latency_quantiles", "max_overtaken", "max_overtaken_by_one",
               "responsiveness", "over_paper_fairness", "max_forwards_per_request", "bounds", "paper_bounds",
               "over_paper_service_bound", "over_paper_total_bound", "safety_violations", "failed", "recovery",
               "quiescent", "soft", "violations", "ok")
RECOVERY_KEYS = ("faults_at", "regenerations", "regenerated", "discarded_tokens", "timeouts", "messages",
                 "over_bound_after_faults", "last_entry_seq", "restarts", "critical_sections_ended_by_a_restart",
                 "entry_numbers_reused_after_a_restart", "events_lost_at")

# What the checker's readers (the dashboard, plots, the harness, the simulator, tests) read of
# it, by the part that keeps it: read-only properties of the Checker (below the class).
VIEW = {
    "ledger": ("protocol", "n", "soft", "total", "logical", "token_msgs", "request_msgs", "msg_frames",
               "msg_logical", "recv_msgs", "requests", "served", "entries", "pending", "in_cs", "faults_at",
               "quiescent", "stop_reason", "ended", "violations", "safety_violations"),
    "bounds": ("bound_mpr", "bound_service", "bound_logical", "bound_forwards", "paper_mpr", "paper_service",
               "max_service", "max_service_request", "max_service_logical", "over_paper_service",
               "over_bound_request"),
    "liveness": ("latency_sum", "latency_max", "latencies", "failed", "quantiles"),
    "fairness": ("max_overtaken", "max_overtaken_by_one", "responsiveness"),
    "forwards": ("max_forwards",),
    "recovery": ("regenerations", "discarded", "timeouts", "recovery_msgs", "restarts", "events_lost_at"),
    "safety": ("last_entry_seq", "crashed_in_cs", "entry_numbers_reused"),
    "soft": ("running", "concurrency_time", "intervals", "tokens_alive", "tokens_time", "tokens_lost", "settle",
             "soft_report"),
}


def standard_parts(ledger, exclusion="hard", time_unit="hop"):
    """The checker's parts by name (attributes), in the order each event reaches them
    (parts/__init__.py)."""
    bounds = Bounds(ledger)
    recovery = Recovery(ledger)
    return SimpleNamespace(
        resource=Resource(ledger, recovery),  # first: it sees every exit (safety may end one)
        safety=Safety(ledger),
        soft=SoftExclusion(ledger, exclusion, time_unit),
        forwards=Forwards(ledger, bounds),  # before fairness: the requests over the printed bounds
        # are counted in the order found (over_paper_fairness), forwards first
        fairness=Fairness(ledger, bounds),
        liveness=Liveness(ledger),
        bounds=bounds,
        recovery=recovery,
    )


def _listens(listener, name):
    wanted = getattr(listener, "listens", None)
    return hasattr(listener, name) and (wanted is None or name in wanted)


class Checker:
    """The run's events, each fed to each part (standard_parts) and to any listener added; the
    report put together from the parts'. What its readers read of it is the parts' (VIEW)."""

    def __init__(self, protocol, n, max_violations=100, time_unit="hop"):
        self.exclusion = registry.about(protocol).get("exclusion", "hard")
        self.ledger = Ledger(protocol, n, self.exclusion != "hard", max_violations)
        self.parts = standard_parts(self.ledger, self.exclusion, time_unit)
        self._liveness = self.parts.liveness
        # count_to(token, request, msg_frames=0, msg_logical=0): the simulator's bulk counts,
        # straight into the ledger (called before each of its events)
        self.count_to = self.ledger.count_to
        self._listeners = []
        self._route()

    def add(self, listener):
        """One more listener (a figure's measure: parts/__init__.py), fed each event before the
        parts, so that it sees the state each event finds."""
        self._listeners.append(listener)
        self._route()

    def _route(self):
        """For each event, its handlers in order: a tuple per event, so that feeding one is a loop."""
        order = self._listeners + list(vars(self.parts).values())
        for name in EVENTS:
            setattr(self, "_on_" + name, tuple(getattr(x, name) for x in order if _listens(x, name)))

    @property
    def last_t(self):
        return self.ledger.last_t

    @last_t.setter
    def last_t(self, t):
        self.ledger.last_t = t

    @property
    def resource(self):
        """The shared counter's audit (check/audit.py FramAudit), None before the first res event."""
        return self.parts.resource.audit

    @property
    def wants_messages(self):
        """The simulator calls message_sent for each new message (it feeds no Event per message)."""
        return bool(self._on_message_sent)

    # -- the simulator's and explorer's calls, and the events they stand for ----------------
    def request(self, t, node):
        rid = self._liveness.add(t, node)
        for on in self._on_request:
            on(t, node, rid)

    def enter(self, t, node, seq=None):
        for on in self._on_enter:
            on(t, node, seq)
        self._liveness.take(t, node)  # last: the parts saw the request it serves still pending

    def exit(self, t, node):
        for on in self._on_exit:
            if on(t, node):
                return

    def fail(self, t, node, reason):
        for on in self._on_fail:
            on(t, node, reason)

    def restarted(self, t, node):
        """The board at node restarted (power cycle, reset): a critical section it was in
        ended there, and the entry numbers it alone knew are gone (docs/recovery.md)."""
        for on in self._on_restarted:
            on(t, node)

    def events_lost(self, t, node):
        """The host lost some of node's events (its USB link was down; the board ran on)."""
        for on in self._on_events_lost:
            on(t, node)

    def tokens(self, t, node, a):
        """The simulator's note that a handler regenerated or discarded a token (action bits)."""
        for on in self._on_tokens:
            on(t, node, a)

    def lost(self, t, node=None):
        """A token was lost on a wire (a simulator's injected loss)."""
        for on in self._on_lost:
            on(t, node)

    def lost_frame(self, event):
        """A ring trace's "lost" event: a frame its receiver never got."""
        for on in self._on_lost_frame:
            on(event)

    def message_sent(self, src, mkind, first_word):
        """A new message (not a frame passed on; first_word: its payload's, the trace's "seq")."""
        for on in self._on_message_sent:
            on(src, mkind, first_word)

    def start(self, t):
        """The run begins at t (the time the measures of soft exclusion count from)."""
        for on in self._on_start:
            on(t)

    def clock_rates(self, rates):
        """The boards' clocks ran at these rates against the trace's time (parts/soft_exclusion.py)."""
        for on in self._on_clock_rates:
            on(rates)

    # -- a trace's events ----------------------------------------------------------------
    def feed(self, event):
        """Consume one trace Event."""
        ev = event.ev
        t = event.t
        if self._on_wire and (ev == "send" or ev == "recv"):
            for on in self._on_wire:
                on(event)
        if ev == "send":
            led = self.ledger
            kind = event.kind
            if kind == "token":
                for on in self._on_token_seen:
                    on(t)
                led.token_msgs += 1
            elif kind == "request":
                led.request_msgs += 1
            elif kind == "msg":
                led.msg_frames += 1
                p = event.payload or {}
                if not p.get("fwd"):
                    led.msg_logical += 1
                    if self._on_message_sent:
                        self.message_sent(p.get("src"), p.get("mkind"), p.get("seq"))
            else:
                for on in self._on_frame:
                    on(t, kind)
        elif ev == "recv":
            if event.kind in ("token", "request", "msg"):
                self.ledger.recv_msgs += 1
        elif ev == "req":
            self.request(t, event.node)
        elif ev == "enter":
            self.enter(t, event.node, (event.payload or {}).get("seq"))
            for on in self._on_token_seen:
                on(t)
        elif ev == "exit":
            self.exit(t, event.node)
            for on in self._on_token_seen:
                on(t)
        elif ev == "regen":
            for on in self._on_regen:
                on(event)
        elif ev == "discard":
            for on in self._on_discard:
                on(t, event.node)
        elif ev == "timeout":
            for on in self._on_timeout:
                on(t, event.node, event.extra or {})
        elif ev == "fail":
            self.fail(t, event.node, (event.extra or {}).get("reason", "unknown"))
        elif ev == "lost":
            self.lost_frame(event)
        elif ev == "notice":
            what = (event.extra or {}).get("what")
            if what == "restarted":
                self.restarted(t, event.node)
            elif what == "events lost":
                self.events_lost(t, event.node)
            elif what == "stood still":
                for on in self._on_stood_still:
                    on(t, event.extra["since"])
        elif ev == "res":
            if any([on(event) for on in self._on_res]):  # (a list: every one is fed)
                self._route()  # a part listens to more from now on (parts/resource.py)
        elif ev == "end":
            self._end(event.extra or {})
        if t is not None:
            self.ledger.last_t = t

    __call__ = feed

    def _end(self, extra):
        led = self.ledger
        led.ended = True
        if extra.get("quiescent") is not None:  # null: not applicable (S never rests)
            led.quiescent = bool(extra["quiescent"])
        led.stop_reason = extra.get("reason", led.stop_reason)
        self.clock_rates(extra.get("clock_rates"))

    # -- result ----------------------------------------------------------------------------
    def finish(self, quiescent=None, reason=None):
        """Close the run: what each part still holds open, then the report."""
        led = self.ledger
        if quiescent is not None:
            led.quiescent = quiescent
        if reason is not None:
            led.stop_reason = reason
        for part in vars(self.parts).values():
            if hasattr(part, "finish"):
                part.finish()
        if led.quiescent is False:
            led.violate("quiescence", None, None, led.last_t, "the ring did not become quiescent: %s"
                        % (led.stop_reason or "token still moving"))
        resource = self.parts.resource.result()
        report = self.report()
        if resource is not None:
            report["resource"] = resource
        return report

    def report(self):
        """The report so far: every part's keys, in REPORT_KEYS' order."""
        keys = {}
        for part in (self.ledger, *vars(self.parts).values()):
            if hasattr(part, "report"):
                for key, value in part.report().items():
                    if key == "recovery":
                        keys.setdefault(key, {}).update(value)
                    else:
                        keys[key] = value
        keys["recovery"] = {k: keys["recovery"][k] for k in RECOVERY_KEYS}
        return {k: keys[k] for k in REPORT_KEYS if k in keys}


for _keeper, _names in VIEW.items():
    for _name in _names:  # e.g. Checker.served: ledger.served; Checker.tokens_alive: parts.soft's
        assert not hasattr(Checker, _name), _name  # (a name of its own would be hidden)
        setattr(Checker, _name, property(attrgetter(("%s.%s" if _keeper == "ledger" else "parts.%s.%s")
                                                    % (_keeper, _name))))


def finish_trace(checker):
    """The report of a checker that has read a whole trace file. A trace without an
    end record is incomplete, whatever it holds: the run was interrupted or the file
    cut short, so what it would have shown next is unknown and the verdict is not OK.
    (A checker fed while a run goes on has no end record yet: it calls finish.)"""
    report = checker.finish()
    report["frames_in_flight_at_end"] = checker.total - checker.recv_msgs
    report["complete"] = checker.ended
    if not checker.ended:
        report["violations"].insert(0, {
            "kind": "incomplete", "request": None, "node": None, "t": checker.last_t,
            "message": "the trace has no end record (read to t=%s): the run was interrupted or the file "
                       "was truncated" % checker.last_t})
        report["ok"] = False
    return report


def check_trace(path, progress=None):
    """Run the checker over a trace file. Returns (meta, report). progress: TraceReader's."""
    from .trace import TraceReader

    with TraceReader(path, progress) as reader:
        meta = reader.meta
        checker = Checker(meta["protocol"], meta["n"], time_unit=meta.get("time_unit", "hop"))
        for event in reader:
            checker.feed(event)
    return meta, finish_trace(checker)
