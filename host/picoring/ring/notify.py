"""Where a run's events go once the causal merger releases them (ring/harness.py): one Notifier
calls every listener with each trace event, in causal order. The listeners are the checker
(check/checker.py, its feed), the trace writer (check/trace.py), the caller's listener (the
dashboard's feed) and Progress. deliver() turns what the merger releases into trace events:
board events as they are, the frames a gap says were lost as "lost" events, and the per-board
counters (bad, drop, gap) left out."""

from ..check.trace import Event

NOT_RING_EVENTS = ("bad", "drop", "gap")  # counted per board (the report), not ring events


class Notifier:
    """Calls each listener (callable(event)) with every event, in the order they were given."""

    def __init__(self, listeners=()):
        self.listeners = [listener for listener in listeners if listener is not None]

    def __call__(self, ev):
        for listener in self.listeners:
            listener(ev)

    def deliver(self, released, lost_frames, final=False):
        """What the merger released, [(t, BoardEvent)], as trace events; lost_frames: the run's
        LostFrames, fed every released event (final: the gaps still waiting too)."""
        for t, e in released:
            self._lost(lost_frames.released(t, e))
            if e.ev in NOT_RING_EVENTS:
                continue
            self(e.to_trace(t))
        if final:
            self._lost(lost_frames.take())

    def _lost(self, frames):
        for t, sent_t, s in frames:
            self(Event(t, "lost", s.board, s.link, s.kind, s.payload, {"sent_t": sent_t}))


class Progress:
    """A listener that tells progress(issued, total, served, sends) how the run goes, as each
    event passes: requests issued by the workload, served (the checker's count), frames sent."""

    def __init__(self, progress, workload, checker):
        self.progress = progress
        self.workload = workload
        self.checker = checker
        self.sends = 0

    def __call__(self, ev):
        if ev.ev == "send":
            self.sends += 1
        self.progress(self.workload.issued, self.workload.total, self.checker.served, self.sends)
