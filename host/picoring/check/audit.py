"""The shared-counter audit of a virtual ring (docs/recovery.md).

Every board increments one counter file across its critical section: read at entry,
written at exit (firmware/main.py, shared_counter). Critical sections that overlap
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
    ok = value == entries or (events_lost and value > entries)
    return {"counter": value, "entries": entries, "ok": ok, "unseen_entries": max(value - entries, 0),
            "ended_by_a_restart": crashed}


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
