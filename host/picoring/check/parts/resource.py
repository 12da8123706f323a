"""The shared resource's audit (--resource fram, docs/fram.md): the FRAM counter against the
critical sections, from the first res event on (check/audit.py FramAudit); its verdict comes
first among the run's violations, since it does not rest on the boards' own reports."""

from ..audit import FramAudit

_AUDITING = ("res", "enter", "exit", "restarted")


class Resource:
    def __init__(self, ledger, recovery):
        self.ledger = ledger
        self.recovery = recovery  # restarts and lost events: writes the host never saw
        self.audit = None  # FramAudit; None: the run had no res event
        self.listens = ("res",)  # until the first: then the critical sections too (_AUDITING)

    def res(self, event):
        """A res event (an access to the shared resource): the first starts the audit, which
        then listens to more (a true result: the checker routes the events again)."""
        started = self.audit is None
        if started:
            self.audit = FramAudit()
            self.listens = _AUDITING
        self.audit.res(event)
        return started

    def enter(self, t, node, seq):
        self.audit.enter(t, node, seq)

    def exit(self, t, node):
        self.audit.exit(node)

    def restarted(self, t, node):
        self.audit.restarted(node)

    def result(self):
        """The audit's report (None: no resource), its violations put first in the ledger's."""
        if self.audit is None:
            return None
        led = self.ledger
        resource, violations = self.audit.result(events_lost=bool(self.recovery.restarts
                                                                  or self.recovery.events_lost_at))
        if led.soft:  # overlaps are allowed: lost updates are measured (resource["lost_updates"])
            violations = [v for v in violations if v["kind"] != "safety"]
            resource["ok"] = not violations
        led.safety_violations += sum(1 for v in violations if v["kind"] == "safety")
        led.violations[:0] = violations
        del led.violations[led.max_violations:]
        return resource
