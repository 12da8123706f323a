"""The report of a run on a ring of boards (ring/harness.py's RingRun): the checker's verdict
with what the host saw of the boards, their links and itself, and the run conditions: what
went wrong with the run rather than with the protocol. RunRecord is what the run writes down
as it goes (its parts, the driver and the board streams, write into it); run_report reads it,
the board streams (ring/stream.py) and the causal merger's counts."""

# The stall clock (driver.py) runs only while the boards answer pings: a ping round unanswered
# this long stops it (pings go every 0.5 s; a board answers within milliseconds when the machine
# keeps up).
PING_GRACE_S = 0.5

# A board clock that ran this much (relative) faster or slower than the host's over the run is a
# run condition: the report's times are the host's, the boards' timers ran by their own clocks.
CLOCK_RATE_NOTED = 0.02

# Why a request is failed when its board's events of it were lost with its USB link.
UNSEEN_IN_OUTAGE = "its events were lost while its board's USB link was down"


class RunRecord:
    """What one run wrote down besides its events: its settings that the report repeats, the
    notices (things the host saw happen), link events, the host's own troubles (lagged: not
    explained, slow: explained), requests that never left the host (unsent: reason -> count),
    the ones still queued at the host when it stopped, a stall, and the time the ring stood
    still (frozen_s)."""

    def __init__(self, workload, seed, unit_us):
        self.workload = workload
        self.seed = seed
        self.unit_us = unit_us
        self.slowness = 1.0  # the boards' measured slowness (RingRun.connect)
        self.notices = []
        self.link_events = []  # USB link lost / back, board restarted: {"t", "board", "what", "text"}
        self.host_lagged = []  # the host could not get an answer in time: run conditions
        self.host_slow = []  # answers that came late but came: explained run conditions
        self.unsent = {}  # reason -> requests that never left the host
        self.queued = 0  # requests due, held at the host behind an outstanding one when the run stopped
        self.stalled = None
        self.frozen_s = 0.0  # run time in which the boards did not answer pings (or the host loop did not run)

    def not_sent(self, why):
        self.unsent[why] = self.unsent.get(why, 0) + 1


def run_report(checker, record, streams, merger, quiescent, reason):
    """The report of a finished RingRun: the checker's verdict, and what the run saw of
    the boards (streams: one BoardStream each, in ring order), their links and the host
    (run conditions)."""
    links = [s.link for s in streams]
    checker.clock_rates(clock_rates_noted(links))
    report = checker.finish(quiescent=quiescent, reason=None if quiescent is not False else reason)
    boards = []
    lost = 0
    n = len(streams)
    for s in streams:
        link = s.link
        p = link.parser
        lost += p.missing - p.missing_in_outages
        entry = {
            "port": link.port, "position": link.index, "clock_rtt_us": link.rtt, "events": p.events,
            "events_lost": p.missing, "events_lost_in_usb_outages": p.missing_in_outages,
            "garbage_lines": dict(p.garbage), "clock_rate": link.clock_rate(),
            # frames that arrived broken on the link from the previous board and were dropped
            "bad_frame_events": dict(s.bad_events),
            # its start-up since its last hello (forming: a token made or removed there is not the
            # run's) and when its part of the run began, us from the run's time 0
            "start_up": {"events": dict(s.start_up), "run_from_us": s.run_from_us},
        }
        st = s.final_status
        if st is not None:
            entry["link_in"] = {"wire": (link.index - 1) % n, "rx_frames": st.get("rx_frames"),
                                "bad": st.get("bad"), "lost_frames": merger.lost_frames[(link.index - 1) % n],
                                "bad_by_reason": {r: st.get("bad_" + r, 0) for r in ("crc", "len", "cobs", "kind")}}
        boards.append(entry)
    # Requests the host sent that no board ever took (no req event): written to a board
    # while it was restarting. Reported failed, never silently dropped.
    for why, k in record.unsent.items():
        report["failed"][why] = report["failed"].get(why, 0) + k
    # Requests the workload handed out that waited at the host behind their board's outstanding
    # one when the run stopped (a stall, a run given up): never sent, so not vanished either.
    queued = record.queued
    report["queued_at_host"] = queued
    workload = record.workload
    vanished = workload.issued - report["requests"] - sum(record.unsent.values()) - queued
    restarts = [s.restarts for s in streams]
    unseen_in_outage = sum(s.unseen_in_outage for s in streams)
    if vanished > 0:
        if any(restarts) or unseen_in_outage:
            why = UNSEEN_IN_OUTAGE if unseen_in_outage else "sent while its board restarted, never taken"
            report["failed"][why] = report["failed"].get(why, 0) + vanished
        else:
            # The host only sees req events: a request the board took whose event was lost
            # looks the same as one the board never read.
            report["violations"].append({"kind": "liveness", "request": None, "node": None, "t": None,
                                         "message": "%d requests were sent to the boards and no req event came "
                                                    "back for them (not taken, or their events were lost)"
                                                    % vanished})
            report["ok"] = False
    report.update(source="ring", workload=workload.describe(), seed=record.seed, unit_us=record.unit_us,
                  issued=workload.issued,
                  stop_reason=reason, boards=boards, events_lost=lost, causal_forced=merger.forced,
                  notices=record.notices, stalled=record.stalled, restarts=restarts,
                  link_events=record.link_events,
                  unreceived_sends=[s - r for s, r in zip(merger.sent, merger.received)])
    if record.stalled is not None:
        report["violations"].insert(0, {"kind": "stall", "request": None, "node": None, "t": None, "message": reason})
        report["ok"] = False
    if lost:
        report["violations"].append({"kind": "events", "request": None, "node": None, "t": None,
                                     "message": "%d events were lost between the boards and the host: the counts are incomplete" % lost})
        report["ok"] = False
    report["run_conditions"] = run_conditions(record, streams, merger, report)
    # Board events are placed on the host's clock (each board's ticks through its clock offset),
    # so latencies are host microseconds: on emulated Picos, chip time times 1/clock_rate.
    report["latency_unit"] = "host us"
    return report


def clock_rates_noted(links):
    """The boards' clock rates against the host's over the run (BoardLink.clock_rate) if one of
    them is off by more than CLOCK_RATE_NOTED, else []."""
    rates = [r for r in (link.clock_rate() for link in links) if r is not None]
    return rates if rates and max(abs(r - 1) for r in rates) > CLOCK_RATE_NOTED else []


def run_conditions(record, streams, merger, report):
    """What went wrong with the run itself rather than with the protocol: each one makes
    the verdict less than certain, and all but the explained ones make it not OK."""
    conditions = []
    links = [s.link for s in streams]
    n = len(streams)
    for link in links:
        k = link.parser.missing_in_outages
        if k:  # explained: the board ran on and its USB output had nowhere to go
            conditions.append({
                "kind": "usb_outage", "board": link.index, "count": k, "explained": True,
                "message": "%s: %d events were lost while its USB link was down: what that board did meanwhile "
                           "is not in the trace (the others' events are, and are checked)" % (link.port, k)})
    rates = clock_rates_noted(links)
    if rates:
        # explained: the verdict is causal, and the timers are the boards' own; but a time in
        # this report is not what a board's clock counted (emulated Picos on a busy machine)
        lo, hi = min(rates), max(rates)
        conditions.append({
            "kind": "clock", "explained": True, "rates": rates,
            "message": "the boards' clocks ran at %s of the host's over the run (emulated Picos run slower than "
                       "real time on a busy machine): the times in this report are the host's, while the boards' "
                       "timers (the protocol's delays, recovery timeouts, critical sections) ran by their own "
                       "clocks: 100 ms of a board's took up to %.0f ms of the host's (times here are placed by "
                       "clock samples 0.5 s apart: shorter spans are nearer the boards'; a soft protocol's "
                       "stabilisation waits for Delta_max of the boards' clocks)"
                       % ("%.2f" % lo if hi - lo < 0.01 else "%.2f-%.2f" % (lo, hi), 100 / lo)})
    for text in record.host_lagged:
        conditions.append({"kind": "host", "explained": False, "message": text})
        report["ok"] = False
    for text in record.host_slow:  # the answer came in the end: the verdict does not depend on it
        conditions.append({"kind": "slow", "explained": True, "message": text})
    if record.frozen_s >= 1.0:
        # explained: the verdict does not rest on timing (the merge is causal), and the stall
        # clock stood still meanwhile; the run only took longer, and recovery may have fired
        conditions.append({
            "kind": "slow", "explained": True, "seconds": round(record.frozen_s, 1),
            "message": "for %.1f s in all the boards did not answer their pings within %.1f s (or the host loop "
                       "did not run): the machine was too busy to keep the ring running in real time; the stall "
                       "clock stood still meanwhile, and the boards' recovery may have fired"
                       % (record.frozen_s, PING_GRACE_S * record.slowness)})
    for link, k in enumerate(merger.forced_links):
        if not k:
            continue
        # A board that dies loses the events it had not flushed, its sends among them; one
        # whose USB link is down loses what it says meanwhile.
        why = []
        if streams[link].restarts:
            why.append("board %d restarted and lost its unsent events" % link)
        for b in (link, (link + 1) % n):  # its sends, or the next board's receives
            if links[b].parser.missing_in_outages:
                why.append("board %d's events were lost while its USB link was down" % b)
        explained = bool(why)
        conditions.append({
            "kind": "order", "link": link, "count": k, "explained": explained,
            "message": "%d frame(s) received on link %d were placed without their send%s: their order is a "
                       "clock estimate, and so is the safety verdict around them"
                       % (k, link, " (%s)" % "; ".join(why) if why else "")})
        if not explained:
            report["ok"] = False
    if report.get("quiescent") is True:
        # At rest every frame sent has been received: a send left over means the link's
        # frames were paired off by one from the start (PAIRED_FROM_BOOT), and its receives
        # were placed as if their sends had come earlier (no wait: no forced count).
        for link, k in enumerate(report["unreceived_sends"]):
            after = streams[(link + 1) % n]
            if k <= 0 or streams[link].restarts or after.restarts or after.bad_events:
                continue
            if links[link].parser.missing_in_outages or after.link.parser.missing_in_outages:
                continue
            conditions.append({
                "kind": "order", "link": link, "count": k, "explained": False,
                "message": "%d frame(s) sent on link %d were never received although the ring is at rest: the "
                           "link's frames were paired off by %d, and the order of its receives is a clock "
                           "estimate" % (k, link, k)})
            report["ok"] = False
    return conditions
