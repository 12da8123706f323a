"""The run's driver (ring/harness.py): it injects the workload's requests into the ring and
decides when the run ends. It sees every board event as it arrives (observe), in board order
rather than causal order: what it needs is counts (requests outstanding per board, frames sent
and received, the token's balance), not order.

Its rules, each pass of the run loop (step):
- start: nothing is injected until every board has answered the run's first !flush (its part of
  the run starts there: what it did before is the ring's start-up, left out of the trace). The
  workload's time counts from then. A board that does not answer in REPLY_TIMEOUT_S is named;
- open loop: the requests due are written (one outstanding per board; the next waits at the
  host, deferred, until its board's is through);
- stall: requests outstanding and no critical section entered or left for the stall limit of
  the stall clock: the ring stalled (a lost token), and the run ends and says so. The stall
  clock runs only while the boards answer their pings (Pings.late) and leaves out the time the
  machine's serial ports stood still (the clock passed in): a machine too busy to run the ring
  is not taken for a ring that stalled, and is given up on (a run condition) after FROZEN_LIMIT
  stall limits (WALL_LIMIT times that of wall time);
- quiet: nothing in flight; the closed-loop workload asks then, behind the resting token;
- end: every request served and the ring quiet (quiescent), or still moving after the quiesce
  timeout, or for a token that never rests, the idle horizon.
"""

from ..check import registry
from .hostlink import REQUEST, TICK_PERIOD
from .link import REPLY_TIMEOUT_S, HarnessError

STALL_STEP_S = 0.05  # one pass of the run loop adds at most this to the stall clock
# A pass of the run loop (1 ms apart) this long after the one before (times the boards' slowness,
# as a ping's grace): the host was not run meanwhile, and, on a machine that ran nothing (a stolen
# virtual CPU), neither was the ring; its silence then goes into the trace as stood still.
HOST_GAP_S = 0.5
PACE_EVERY_US = 100_000  # how often the ring's own clock is asked its pace (Driver.rate)
FROZEN_LIMIT = 12  # a run with no progress for this many stall limits is given up (time the serial ports delivered)
WALL_LIMIT = 5  # ... or for WALL_LIMIT times that of wall time, however long the ports stood still


class Stop:
    """Why the run loop ends: reason (the report's stop_reason), quiescent (True, False, or None
    when the question does not apply)."""

    def __init__(self, reason, quiescent=None):
        self.reason = reason
        self.quiescent = quiescent


class Driver:
    """The workload's injections and the start, quiet, stall and end rules of one run (module doc).

    streams: the boards' BoardStreams (their links, and their state queries in flight); record:
    the run's RunRecord; clock: what the stall rules leave out (picoring.clock); the waits
    (settle_us, quiesce_us, stall_us, board time) are scaled to wall time by the boards'
    measured slowness."""

    def __init__(self, streams, protocol, workload, record, clock, t0, settle_us, quiesce_us, stall_us,
                 idle_horizon_us, slowness=1.0, rate=None):
        n = len(streams)
        self.streams = streams
        self.links = [s.link for s in streams]
        self.workload = workload
        self.record = record
        self.clock = clock
        self.t0 = t0  # host us the workload's time counts from: the run's start, then every board's (step)
        self.started = False  # every board has answered the run's first !flush
        self.slowness = slowness
        self.start_deadline = clock.deadline(REPLY_TIMEOUT_S * slowness)
        self.settle_us, self.quiesce_us, self.stall_us = (int(x * slowness) for x in (settle_us, quiesce_us,
                                                                                     stall_us))
        self.host_gap_us = int(HOST_GAP_S * 1e6 * slowness)
        self.idle_horizon_us = idle_horizon_us
        self.rests = registry.rests(protocol)
        self.renew = getattr(workload, "renew", None)  # renew(i): node i asks again as its critical section ends
        self.outstanding = [0] * n  # per board: requests injected, not yet through its critical section
        self.deferred = [0] * n  # per board: requests due, held at the host behind an outstanding one
        self.sends = self.recvs = 0
        self.by_msg = False  # protocol-layer messages seen: the token balance cannot tell the holder
        # the board that last received the token (S: the one just behind it)
        self.holder = registry.first_holder(protocol)
        # tokens received minus tokens sent per board: at rest, the holder is the one board at 1
        # (Q and D start with the token resting at position 0; any protocol at its holder option)
        self.tokens = [0] * n
        self.tokens[self.holder] = 1
        self.lossy = False  # a frame went bad or missing, or recovery acted: frames may never arrive
        self.longest_timeout = 0  # us: the longest recovery timeout a board has reported firing, or taken
        # Per board: its tick when it last sent a token (or made one). A protocol that makes tokens
        # by its own rule (the wandering token: no visit for Delta_gen) logs no timeout; its
        # generation timeout grows x1.5 with each token it makes, and what a regen took since the
        # board last held a token tells the stall rule how long the next one may take.
        self.token_left = [None] * n
        self.last_event = self.last_inject = self.last_pass = self.last_progress = t0
        self.last_exit = None
        self.was_busy = False
        self.ports_stood_still = clock.stalled()  # at last_progress
        self.host_gaps_us = 0  # the run loop's passes not run (HOST_GAP_S), summed
        self.host_gaps_at_progress = 0  # that sum at last_progress
        # The stall clock: time without progress while the host loop ran and the boards answered
        # their pings, so that a machine too busy to run the ring (or the host) is not taken for
        # a ring that stalled.
        self.stalled_us = 0
        self.frozen_us = 0  # time the clock stood still: the boards (or the host) did not keep up
        # rate: None, or the ring's own clock (an emulated ring's chip time, a virtual ring's
        # clock less what stood still: RingRun clock_rate), its seconds per wall second now. The
        # boards' timeouts run on it, so the stall clock runs at its pace against the pace the
        # waits were scaled for (slowness), never faster than wall time.
        self.rate = rate
        self.pace = 1.0
        self._pace_at = None
        # The windows in which a ping round was unanswered past its grace or the ring's own clock
        # stood still (rate 0), or in which this loop was not run (HOST_GAP_S): (since, until)
        # host us, each once it ends, for the trace (take_stood_still: the checker leaves the
        # ring's silences within them out of its soft-exclusion times)
        self.late_since = None
        self.stood_still = []

    # -- requests --
    def inject(self, i):
        """One request to board i (one whose USB link is down fails at once, with its reason)."""
        link = self.links[i]
        dropped = link.writes_dropped
        link.write(REQUEST)
        if link.writes_dropped != dropped:
            # The board's USB link is down: the request never left the host. Failed now,
            # with its reason (the checker never sees it: there is no req event).
            self.record.not_sent("its board's USB link was down")
            self.record.notices.append("%s: a request could not be sent: the USB link is down" % link.port)
            return False
        self.outstanding[i] += 1
        query = self.streams[i].resync
        if query is not None:
            query["after"] += 1  # written after the state query: not in its answer
        return True

    def inject_deferred(self):
        """The next request queued behind a served one, for every board (one whose link is down
        fails at once, with its reason, and the next one is tried)."""
        for b in range(len(self.links)):
            while self.deferred[b] and not self.outstanding[b]:
                self.deferred[b] -= 1
                self.inject(b)

    def busy(self):
        return any(self.outstanding) or any(self.deferred)

    # -- what the boards said --
    def observe(self, b, e, now):
        """Board b's event e, as it arrives (host us now)."""
        ev = e.ev
        if ev == "send":
            self.sends += 1
            if e.kind == "token":
                self.tokens[b] -= 1
            if e.kind == "token" or (e.kind == "msg" and not (e.payload or {}).get("fwd")):
                self.token_left[b] = e.tick_us  # (a message of its own: the wandering token's)
        elif ev == "recv":
            self.recvs += 1
            if e.kind == "token":
                self.holder = b
                self.tokens[b] += 1
            elif e.kind == "msg":  # the token may travel as a message: holder() asks the boards
                self.by_msg = True
        elif ev == "regen":
            self.tokens[b] += 1
            self.lossy = True
            left = self.token_left[b]
            if left is not None:  # board time: what the generation timeout took, at least
                self.longest_timeout = max(self.longest_timeout, (e.tick_us - left) % TICK_PERIOD)
            self.token_left[b] = e.tick_us
        elif ev in ("discard", "timeout"):
            if ev == "discard":
                self.tokens[b] -= 1
            else:
                self.longest_timeout = max(self.longest_timeout, 1000 * ((e.aux or {}).get("gen_ms") or 0))
            self.lossy = True
        elif ev == "exit":
            # (a request written to a board just after it restarted, and so not
            # counted failed, is served by the new incarnation: never below 0)
            self.outstanding[b] = max(self.outstanding[b] - 1, 0)
            self.last_exit = now
            if self.renew is not None and self.renew(b):
                self.deferred[b] += 1  # (saturated) it asks again as its section ends
        elif ev == "reject":
            # The board had one outstanding that the host did not count (the host's
            # count is off): this one is not served, and must not be waited for.
            self.outstanding[b] = max(self.outstanding[b] - 1, 0)
            self.record.not_sent("refused by its board: one already outstanding")
            self.record.notices.append("%s: a request was refused (one already outstanding)" % self.links[b].port)
        elif ev in ("bad", "gap"):
            self.lossy = True
        if ev in ("enter", "exit"):
            self._progress(now)

    def board_restarted(self, b):
        """Board b said hello: its token balance starts again, and the requests outstanding at
        it are gone with its memory. Returns how many (to be reported failed)."""
        self.lossy = True
        self.tokens[b] = 0
        failed, self.outstanding[b] = self.outstanding[b], 0
        return failed

    # -- the rules --
    def step(self, now, pings_late):
        """One pass of the rules (module doc) at host us now; pings_late: a ping round is
        unanswered beyond its grace (the stall clock stands still). Returns a Stop, None to go
        on, or "again" when a closed-loop request was just injected (the next pass at once)."""
        if not self.started and not self._start(now):
            return None
        wl = self.workload
        t_units = (now - self.t0) // self.record.unit_us
        nt = self._open_loop(t_units)
        busy = self.busy()
        stop = self._stall_rules(now, busy, pings_late)
        if stop is not None:
            return stop
        # Quiet: nothing in flight. Frames lost on a lossy ring never arrive, so
        # there the wait is longer instead of sends == recvs.
        # (events lost in a USB outage leave the balance of sends and receives off for good)
        self.lossy = self.lossy or any(link.parser.missing_in_outages for link in self.links)
        # A token that never rests (S, BinarySearch) moves for ever: frames never stop, so
        # its ring is quiet once no request has been in it for settle_us (a bs run on an
        # idle machine waited for ever for a pause between frames that never came).
        since = self.last_event if self.rests else max(self.last_exit or self.t0, self.last_inject)
        quiet = (not busy and (now - since > self.settle_us and (self.sends == self.recvs or not self.rests)
                               or self.lossy and now - self.last_event > 3 * self.settle_us))
        if quiet and wl.closed_loop and not wl.exhausted:
            i = wl.on_quiescent(t_units, self.holder_at_rest() if self.rests else self.holder)
            if i is not None:
                self.inject(i)
                self.last_event = self.last_inject = now
                return "again"
        # (and not while a board whose USB link came back has not answered its state
        # query: it may have restarted, and says so only in answer to a host line)
        done = (not busy and nt is None and (not wl.closed_loop or wl.exhausted)
                and not any(s.link.connected for s in self.streams if s.resync is not None))
        if not done:
            return None
        if not self.rests:
            if self.last_exit is None or now - self.last_exit >= self.idle_horizon_us:
                return Stop("idle horizon")
        elif quiet:
            return Stop("done", quiescent=True)
        elif now - self.last_event > self.quiesce_us or (self.last_exit is not None
                                                          and now - self.last_exit > self.quiesce_us):
            return Stop("every request was served but frames were still moving %.1f s later"
                        % ((now - (self.last_exit or self.t0)) / 1e6), quiescent=False)
        return None

    def _start(self, now):
        """True once every board has answered the run's first !flush (the workload starts at
        host us now). Until then no request is written: the token's first hop, made by a board
        that had not yet answered, was that board's start-up, not in the trace (through
        labgrid's ser2net under load: Q's exact count one token message short, in a run
        reported OK)."""
        late = [s.link.port for s in self.streams if not s.in_run]
        if not late:
            self.started = True
            # (the stall clock's progress marks start over at the first request: _stall_rules)
            self.t0 = self.last_event = self.last_inject = self.last_pass = now
            return True
        if self.start_deadline.expired():
            raise HarnessError("%s: no reply to the run's !flush in %.0f s%s: the run did not start"
                               % (", ".join(late), self.start_deadline.seconds, self.start_deadline.not_counted()))
        return False

    def _open_loop(self, t_units):
        """The open-loop requests due by t_units; returns the workload's next time (None: no more)."""
        wl = self.workload
        nt = wl.next_time()
        while nt is not None and nt <= t_units:
            for i, line in wl.due(t_units):
                if self.outstanding[i]:
                    if not wl.defer_busy:
                        raise HarnessError("%s: line %s: node %d requests but its request is still outstanding"
                                           % (wl.describe(), line, i))
                    self.deferred[i] += 1
                else:
                    self.inject(i)
            nt = wl.next_time()
        return nt

    def _stall_rules(self, now, busy, pings_late):
        """The stall clock's pass; a Stop when the ring stalled or the run is given up."""
        if busy and not self.was_busy:
            self._progress(now)
            self.stalled_us = 0
        self.was_busy = busy
        # (the ring's own clock standing still is a window too: a relay that did not run while the
        # boards answered their pings)
        pace = self._pace(now)
        still = pings_late or pace == 0.0
        if still and self.late_since is None:
            self.late_since = now
        elif not still and self.late_since is not None:
            self.stood_still.append((self.late_since, now))
            self.late_since = None
        raw = now - self.last_pass
        self.last_pass = now
        if raw > self.host_gap_us:
            # Not run: a loaded suite run's wandering-token ring was silent for 17.8 s, pings
            # answered before the loop's next pass and no window said so, and the checker counted
            # a late-seen lost token and a new one as two tokens alive for 88% of the run.
            self.stood_still.append((now - raw, now))
            self.host_gaps_us += raw
        counted = 0 if pings_late else min(raw, int(STALL_STEP_S * 1e6))
        self.frozen_us += raw - counted
        step = int(counted * pace)
        if self.last_progress == now:
            self.stalled_us = 0
        elif busy:
            self.stalled_us += step
        # Recovery may legitimately take a few of the boards' current timeouts.
        stall_limit = max(self.stall_us, 3 * self.longest_timeout * self.slowness)
        # Time in which the serial ports stood still is not counted: the kernel's tty
        # worker stopped for 89 s under a loaded suite run (a workqueue lockup), nothing
        # reached the boards, and a fine run was given up ("the machine too busy"). A
        # machine whose ports never deliver again is given up on by the wall clock. Nor is
        # time in which this loop was not run (HOST_GAP_S): nothing ran, the ring included.
        still_us = (int((self.clock.stalled() - self.ports_stood_still) * 1e6)
                    + self.host_gaps_us - self.host_gaps_at_progress)
        waited = now - self.last_progress
        if busy and self.stalled_us <= stall_limit and (waited - still_us > FROZEN_LIMIT * stall_limit
                                                        or waited > WALL_LIMIT * FROZEN_LIMIT * stall_limit):
            # The boards answered too seldom for the stall clock to run out: not a verdict
            # on the ring, a machine that cannot run it. A condition of the run.
            self.record.host_lagged.append(
                "the run was given up: no critical section entered or left for %.1f s, in which the boards "
                "answered their pings for only %.1f s (a machine too busy to run the ring)%s"
                % (waited / 1e6, self.stalled_us / 1e6, self.clock.not_counted(still_us / 1e6)))
            return Stop("given up: the machine was too busy to run the ring")
        if busy and self.stalled_us > stall_limit:
            wl = self.workload
            waited = self.stalled_us / 1e6
            outstanding, deferred = sum(self.outstanding), sum(self.deferred)
            self.record.stalled = {"outstanding": outstanding, "queued": deferred,
                                   "not_issued": wl.total - wl.issued, "seconds": round(waited, 1)}
            reason = ("the ring stalled (token probably lost): no critical section entered or left for "
                      "%.1f s with %d requests outstanding at the boards (%d more queued behind them, "
                      "%d not issued)" % (waited, outstanding, deferred, wl.total - wl.issued))
            if now - self.last_progress > self.stalled_us + 1_000_000:
                reason += " (%.1f s of wall time: the boards did not answer their pings for the rest)" % (
                    (now - self.last_progress) / 1e6)
            return Stop(reason)
        return None

    def _progress(self, now):
        """A critical section entered or left, or the ring busy again: the stall rules count
        from now."""
        self.last_progress = now
        self.ports_stood_still = self.clock.stalled()
        self.host_gaps_at_progress = self.host_gaps_us

    def _pace(self, now):
        """The stall clock's pace (rate, above), asked at most every PACE_EVERY_US."""
        if self.rate is not None and (self._pace_at is None or now - self._pace_at >= PACE_EVERY_US):
            self._pace_at = now
            r = self.rate()
            self.pace = 1.0 if r is None else min(1.0, r * self.slowness)
        return self.pace

    def take_stood_still(self, now, final=False):
        """The ended windows of unanswered pings since the last call, (since, until) host us;
        final: the one still open too, as ending now (the run ends)."""
        if final and self.late_since is not None:
            self.stood_still.append((self.late_since, now))
            self.late_since = None
        out, self.stood_still = self.stood_still, []
        return out

    def holder_at_rest(self):
        """The board holding the token at rest, from the token balance of the events seen;
        if lost events leave it ambiguous, or the token may travel as a protocol-layer
        message, the boards are asked (one !status each)."""
        holders = [b for b, k in enumerate(self.tokens) if k == 1]
        if len(holders) == 1 and not self.by_msg and sum(self.tokens) == 1:
            return holders[0]
        holders = [link.index for link in self.links if link.command("status")[1].fields.get("tok") == 1]
        if len(holders) != 1:
            self.record.notices.append("%d boards hold a token at rest: %s" % (len(holders), holders))
            return self.holder
        return holders[0]
