"""The shared-counter audits: a virtual ring's counter file (docs/recovery.md) and, with
--resource fram, the I2C FRAM counter on real or virtual boards (FramAudit, docs/fram.md).

Every board increments one counter file across its critical section: read at entry,
written at exit (firmware/main.py, SharedCounterFile). Critical sections that overlap
lose increments, whatever the protocol claims, so at the end of a run the counter
must equal the critical sections the run saw complete. The two ways it can differ
mean different things: a counter below the entries lost increments (an overlap),
one above them counted critical sections the host never saw (see violation).
"""

import os

FILE_NAME = "audit-counter"


def path(ring):
    """The counter file of a virtual ring (in its work directory)."""
    return os.path.join(ring.workdir, FILE_NAME)


def reset(ring):
    """Counter to 0: call once the ring has formed, just before a run."""
    with open(path(ring), "w") as f:
        f.write("0")


def read(ring, report):
    """The counter's value against the critical sections the run saw complete.
    A board that dies in its critical section never writes its increment (the checker
    counts those); one that dies just after can take the events of a finished critical
    section with it, and then the counter is ahead of the entries seen."""
    crashed = (report.get("recovery") or {}).get("critical_sections_ended_by_a_restart", 0)
    entries = report["served"] - crashed
    events_lost = bool(report.get("events_lost") or any(report.get("restarts") or ())
                       or any(b.get("events_lost_in_usb_outages") for b in report.get("boards") or ()))
    try:
        with open(path(ring)) as f:
            value = int(f.read() or 0)
    except (OSError, ValueError) as e:
        return {"counter": None, "entries": entries, "ok": False, "error": str(e)}
    # Soft exclusion (the wandering token) lets critical sections overlap: the increments they
    # lose are its measured cost, reported, not a violation.
    soft = report.get("soft") is not None
    ok = value == entries or (events_lost and value > entries) or (soft and value < entries)
    return {"counter": value, "entries": entries, "ok": ok, "unseen_entries": max(value - entries, 0),
            "lost_increments": max(entries - value, 0), "soft": soft, "ended_by_a_restart": crashed}


def violation(result):
    """The checker-style violation a failed audit (a result of read) stands for, or None."""
    if result["ok"]:
        return None
    value, entries = result["counter"], result["entries"]
    if value is None:
        kind, message = "audit", "audit: the shared counter could not be read: %s" % result.get("error")
    elif value < entries:
        # two sections that overlap both read the same value: one increment is lost
        kind, message = "safety", (
            "audit: the shared counter is %d after %d critical sections: %d increment(s) lost, so critical "
            "sections overlapped" % (value, entries, entries - value))
    else:
        kind, message = "audit", (
            "audit: the shared counter is %d after %d critical sections: %d more than the host saw, so entries "
            "went unrecorded (their events never reached the host) or a board wrote the counter outside a "
            "critical section" % (value, entries, value - entries))
    return {"kind": kind, "request": None, "node": None, "t": None, "message": message}


class FramAudit:
    """The FRAM counter of --resource fram against the critical sections (docs/fram.md), from
    the run's events: the checker's resource part (check/parts/resource.py) feeds it the entries,
    exits, restarts and res events once the first res event has come.

    Every critical section reads the counter at entry (res read) and writes what it read plus
    one at its exit (res write). The host sets the counter before the run (res set) and reads
    it after (res count), both through board 0. The counter must then equal its start plus the
    writes made: two critical sections that overlap both read the same value, and one of their
    increments is lost. The sections that read the same value witness each lost update; the
    violation names them with the entries around them. A failed access (an OSError on the
    board) is a violation of its own, never retried: after a failed read nothing is written;
    a failed write may or may not have landed, so the counter is allowed either."""

    def __init__(self):
        self.start = None  # what the host set the counter to before the run
        self.start_errno = None
        self.final = None  # what the host read after it
        self.final_errno = None
        self.sections = []  # every critical section seen, in entry order (dicts, _section)
        self._open = {}  # node -> its section in progress
        self.errors = []  # (section or None, op, errno)
        self._readers = {}  # value read -> the sections that read it and wrote it back plus one
        self.lost = 0  # lost updates witnessed so far: sections that read a value another had written back

    # -- events ----------------------------------------------------------------
    def enter(self, t, node, seq):
        sec = {"node": node, "t": t, "seq": seq, "read": None, "wrote": None, "failed": None}
        self.sections.append(sec)
        self._open[node] = sec

    def exit(self, node):
        self._open.pop(node, None)

    def restarted(self, node):
        self._open.pop(node, None)  # its section ended there, its write never made

    def res(self, event):
        x = event.extra or {}
        op, errno, value = x.get("op"), x.get("errno"), x.get("value")
        if op == "set":
            self.start, self.start_errno = value, errno
        elif op == "count":
            self.final, self.final_errno = value, errno
        elif op in ("read", "write"):
            sec = self._open.get(event.node)
            if errno:
                self.errors.append((sec, op, errno))
                if sec is not None:
                    sec["failed"] = op
            elif sec is not None:
                if op == "read":
                    sec["read"] = value
                else:
                    sec["wrote"] = value
                    if sec["read"] is not None:  # (its read event lost: it witnesses nothing)
                        readers = self._readers.setdefault(sec["read"], [])
                        readers.append(sec)
                        if len(readers) > 1:
                            self.lost += 1

    # -- the verdict -------------------------------------------------------------
    def live(self):
        """What the dashboard shows while the run goes on: entries, updates written, the last
        value written, lost updates witnessed, failed accesses."""
        written = [s["wrote"] for s in self.sections if s["wrote"] is not None]
        return {"entries": len(self.sections), "updates": len(written), "last": written[-1] if written else None,
                "lost": self.lost, "errors": len(self.errors)}

    def result(self, events_lost=False):
        """(report dict, violations). events_lost: the host lost some boards' events (restarts,
        USB outages): writes it never saw can put the counter above what it counted."""
        updates = sum(1 for s in self.sections if s["wrote"] is not None)
        failed_writes = sum(1 for _, op, _ in self.errors if op == "write")
        start = self.start if self.start is not None else 0
        low, high = start + updates, start + updates + failed_writes
        out = {"device": "fram", "start": self.start, "counter": self.final, "entries": len(self.sections),
               "updates": updates, "expected": low if low == high else [low, high], "errors": len(self.errors),
               "lost_updates": 0, "unseen_updates": 0}
        violations = [self._error_violation(sec, op, errno) for sec, op, errno in self.errors]
        if self.start is None or self.start_errno:
            violations.append(_violation("resource", None, None, "FRAM: the counter was not set before the run%s: "
                                         "the count starts from an unknown value" % _errno_text(self.start_errno)))
        if self.final is None or self.final_errno:
            violations.append(_violation("resource", None, None, "FRAM: the counter could not be read after the run%s"
                                         % _errno_text(self.final_errno)))
        elif self.final < low:
            out["lost_updates"] = low - self.final
            violations += self._lost_violations(low - self.final)
        elif self.final > high:
            out["unseen_updates"] = self.final - high
            if not events_lost:
                violations.append(_violation("audit", None, None, (
                    "FRAM: the counter is %d after %d updates from %d: %d more than the host saw, so updates went "
                    "unrecorded (their events never reached the host) or a board wrote the FRAM outside a critical "
                    "section" % (self.final, updates, start, self.final - high))))
        out["ok"] = not violations
        return out, violations

    def _error_violation(self, sec, op, errno):
        where = "outside any critical section it was seen in" if sec is None else "in its critical section (%s)" % (
            _section_text(sec))
        then = ("nothing was written back, so that update is not made" if op == "read"
                else "the update may or may not have landed")
        return _violation("resource", None if sec is None else sec["node"], None if sec is None else sec["t"],
                          "FRAM: the %s failed%s %s: reported, not retried; %s" % (op, _errno_text(errno), where, then))

    def _lost_violations(self, lost):
        """One safety violation per value that several sections read and wrote back: the
        witnesses, and the entries around them in entry order."""
        out = []
        index = {id(s): k for k, s in enumerate(self.sections)}
        witnessed = 0
        for value, readers in self._readers.items():
            if len(readers) < 2:
                continue
            witnessed += len(readers) - 1
            ks = sorted(index[id(s)] for s in readers)
            around = [s for s in self.sections[max(ks[0] - 1, 0):ks[-1] + 2] if all(s is not r for r in readers)]
            readers = sorted(readers, key=lambda s: (s["t"] is None, s["t"]))
            out.append(_violation("safety", readers[1]["node"], readers[1]["t"], (
                "FRAM lost update: %d critical sections read the counter at %d and each wrote back %d, so %d "
                "increment(s) were lost: they overlapped. %s. The entries around them: %s"
                % (len(readers), value, value + 1, len(readers) - 1, "; ".join(_section_text(s) for s in readers),
                   "; ".join(_section_text(s) for s in around) or "none"))))
        if lost > witnessed:
            out.append(_violation("safety", None, None, (
                "FRAM: the counter is %d increment(s) short of the updates written%s: critical sections overlapped "
                "(the reads that would name them did not reach the host)"
                % (lost - witnessed, " besides the ones above" if witnessed else ""))))
        return out


def _section_text(sec):
    text = "node %d entered at t=%s (entry #%s)" % (sec["node"], sec["t"], sec["seq"])
    if sec["read"] is not None:
        text += " read %d" % sec["read"]
    if sec["wrote"] is not None:
        text += " wrote %d" % sec["wrote"]
    if sec["failed"]:
        text += " (%s failed)" % sec["failed"]
    return text


def _errno_text(errno):
    if not errno:
        return ""
    import errno as errnos

    return " with OSError %d (%s)" % (errno, errnos.errorcode.get(errno, "?"))


def _violation(kind, node, t, message):
    return {"kind": kind, "request": None, "node": node, "t": t, "message": message}
