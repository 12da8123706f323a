"""`picoring run`: drive a ring of boards over their USB serial ports.

Connects to every board (pyserial: a device path, or an rfc2217:// or
socket:// URL), checks that their configs form one ring, aligns each board's
microsecond clock with the host's, injects requests from a workload, and turns
the boards' event streams into one trace that the checker reads as it goes.

Ordering. Board clocks are only aligned to within a fraction of a millisecond,
about one hop. Events are therefore merged causally: each board's own order is
kept, and the k-th frame received on a link is never placed before the k-th
frame sent on it (links are FIFO). Among the events that causality leaves free,
the estimated host time decides. So "node A left its critical section, then
node B entered" is exact whenever the token carried the permission from A to
B, and the checker's safety verdict does not depend on clock error.

That needs every send whose receive is merged to be merged too. A run therefore
starts from the boards' boot: they are restarted before it (Q and D at rest, so
no token is in flight then), the token exists only once every board is up, so each
board's token (and request) frames since its hello line form a history with no
half-messages. (Start-up claims do not: see PAIRED_FROM_BOOT.) The events up to the board's reply to the run's first !flush pair
the links but are not part of the run (the ring's forming, S's circulating token).
A receive whose send has not come waits for it, however late: no clock estimate
decides that a send is lost. A lost one (its board's event stream showed a gap, or
the board restarted) shows once its board sends again, as a cycle of receives each
waiting for a send queued behind its own board's; only then, or at the run's end, is
a receive placed without its send (CausalMerger._unblock). It is reported
(causal_forced, a run condition), never a silent fallback to clock estimates. (At the end,
a receive that reached the host after its sender's last flush may have been made after it,
its send past the trace's end: its board's part of the trace ends before it, _finish.)
A board that restarts mid-run starts a new clock: its events wait for a clock
sample of the new incarnation before they are placed.

The pipeline (docs/ring-path.md draws it): each board's link (link.py: its port, reader thread
and line parser) puts what the board says into one inbox; the run loop hands each item to its
board's BoardStream (stream.py: event numbering, link counts, outages, restarts and resync),
which places events into the CausalMerger (merge.py); what the merger releases goes to one
Notifier (notify.py), whose listeners are the checker, the trace writer, the caller's listener
(the dashboard) and Progress. The Driver (driver.py) sees every event as it arrives, injects
the workload's requests and applies the start, quiet, stall and end rules on the clock it is given;
Pings keeps the clock offsets fresh. The run writes what it saw in a RunRecord and builds its
report from it (runreport.py).
"""

import queue
import time

from ..check import registry
from ..check.checker import Checker
from ..check.trace import Event, TraceWriter, header
from .. import interrupt
from ..clock import WALL
from . import forming
from . import resource as shared_resource
from .deploy import start_order
from .driver import Driver
from .hostlink import BoardEvent, Reply, encode_command
from .link import REPLY_TIMEOUT_S, BoardLink, HarnessError, LinkNotice, clock_rates, drain, now_us, slowness, stop_firmware
from .merge import CausalMerger, LostFrames
from .notify import Notifier, Progress
from .runreport import PING_GRACE_S, RunRecord, clock_rates_noted, run_report
from .stream import MERGED_EVENTS, BoardStream, Pings

PING_GIVE_UP_S = 30.0  # a ping round unanswered this long is forgotten (its answer was lost)
HOLD_LIMIT_US = 30_000_000  # a board whose link counts the merger awaits (CausalMerger.hold) this long: unpaired


class RingRun:
    """One run of a workload on a ring of boards (already flashed and configured).

    ports: USB ports in ring order (ports[i] is the board at position i).
    resetter: optional callable(i) that restarts board i (virtual ring); else
    the boards are restarted through their USB serial (stop, then Ctrl-D).
    resource: "fram" when the boards' critical sections share an I2C FRAM counter (flashed
    with --resource fram): board 0 sets it to 0 before the run and reads it after (resource.py).
    clock: what the waits on the boards and the stall rules count (picoring.clock): wall time
    for real boards, the stall-aware clock for a virtual or emulated ring.
    clock_rate: None, or a function giving the boards' clock rate as the ring itself counts it
    (an emulated ring's chip-seconds per wall-second: emulated.supervisor.chip_rate_for_ports; a
    virtual ring's clock, less what stood still: virtual.ringclock.ring_pace_for_ports; both:
    ringrate.clock_rate_for_ports); the deadlines scale by it as by the pings' rates
    (measure_slowness), and the stall clock runs at its pace (Driver.rate).
    listener: called with every trace event (the dashboard's feed); progress(issued, total,
    served, sends): told as the run goes (notify.Progress).
    """

    def __init__(self, ports, protocol, workload, unit_us=2000, trace=None, listener=None, resetter=None,
                 settle_us=60_000, quiesce_timeout_s=5.0, idle_horizon=None, progress=None, seed=0, tap=None,
                 stall_timeout_s=5.0, resource=None, clock=WALL, clock_rate=None):
        self.ports = list(ports)
        self.clock = clock
        self.clock_rate = clock_rate
        self.n = len(self.ports)
        if self.n < 2:
            raise HarnessError("a ring needs at least 2 boards, got %d" % self.n)
        self.protocol = registry.spec(protocol)  # canonical: the spec the boards say in their hello
        self.workload = workload
        self.unit_us = unit_us
        self.trace_path = trace
        self.listener = listener
        self.resetter = resetter
        self.settle_us = settle_us
        self.quiesce_timeout_us = int(quiesce_timeout_s * 1e6)
        # Requests outstanding and no critical section entered or left for this long: the
        # ring has stalled (a lost token: nothing regenerates it yet). The run ends and says so.
        self.stall_timeout_us = int(stall_timeout_s * 1e6)
        self.idle_horizon_us = (idle_horizon if idle_horizon is not None else 4 * self.n) * unit_us
        self.progress = progress
        self.seed = seed
        self.tap = tap
        self.inbox = queue.Queue()
        self.links = []
        self.checker = Checker(protocol, self.n, time_unit="us")
        self.merger = CausalMerger(self.n)
        self.record = RunRecord(workload, seed, unit_us)
        self.writer = None
        self.board_info = [{} for _ in range(self.n)]
        self.reconnect_wait_s = 3.0  # at the end, for a board whose USB link is down
        self.restart_timeout_s = 15.0  # per board's !hello, and for the ring to form: on a real Pico
        self.slowness = 1.0  # measured in connect(): wall time per board time, at least 1
        self.t0 = None  # host us of the run's start: trace time 0
        self.streams = []  # the run's parts, from its start (begin)
        self.driver = self.pings = self.lost_frames = self.notify = None
        self.resource = resource
        self.resource_count = None  # board 0's !res reply after the run
        self.final_flush_us = [None] * self.n  # host us each board's last flush was asked at the end (_finish)

    @property
    def bad_events(self):
        """Per board: {reason: bad-frame events seen} (the dashboard's counters)."""
        return [s.bad_events for s in self.streams] if self.streams else [{} for _ in range(self.n)]

    # -- setup --
    def connect(self):
        for i, port in enumerate(self.ports):
            link = BoardLink(i, port, self.inbox, self.n, clock=self.clock)
            link.tap = self.tap
            self.links.append(link.open())
        # The boards normally run the firmware already: how fast their clocks run says how
        # long their restart may take in wall time (a board at its REPL answers no ping: 1).
        self.slowness = self.measure_slowness()
        for link in self.links:
            link.slowness = self.slowness
        self.restart_ring(timeout=self.restart_timeout_s * self.slowness)
        self.check_ring()
        if self.resource is not None:
            shared_resource.set_counter(self.links[0])  # (its res event opens the trace's count)
        for link in self.links:
            link.align()

    def measure_slowness(self):
        """Wall time per board time for the ring's deadlines (link.slowness): from the boards'
        pings, and from the ring's own count where it has one (clock_rate: an emulated ring's
        chip-seconds per wall-second), the slower of them. The pings can leave a board's rate
        unknown (round trips of seconds on a loaded machine): the count still scales the waits."""
        rates = clock_rates(self.links, clock=self.clock)
        if self.clock_rate is not None:
            rates.append(self.clock_rate())
        return slowness(rates)

    def restart_ring(self, timeout=15.0):
        """Stop every board (each says so), let the wires drain, start them again, and wait
        until the ring has formed: every board has joined (learnt the ring's
        epoch) and position 0, which starts last, has made the token by its
        claim (docs/recovery.md)."""
        # No board starts before every board has stopped: a board's USB input can stand still
        # for seconds on a loaded machine, and one still running answered the restarted
        # boards' join rounds with the old ring's epoch; position 0 then made no token (the
        # old one died with the old boards). A board at its REPL says no "!stopped": it
        # prints a new prompt.
        stop_firmware(self.links, timeout)
        time.sleep(0.2)
        for i in start_order(self.n, self.protocol):
            link = self.links[i]
            drain(link.replies)
            if self.resetter is not None:
                self.resetter(i)
            else:
                link.write(b"\x04")  # Ctrl-D at the REPL: soft reset, main.py runs again
            t, hello = link.wait_hello(timeout)
            link.board_restarted(t)
            self.board_info[i]["hello"] = hello.fields
        self.wait_formed(timeout)

    def wait_formed(self, timeout=15.0):
        """Until the ring has formed and, for a protocol whose token rests, come to rest
        (forming.wait_formed)."""
        forming.wait_formed(self.links, self.protocol, self.settle_us, self.slowness, timeout, self.clock)

    def check_ring(self):
        seen = {}
        lossy = []
        for i, link in enumerate(self.links):
            f = self.board_info[i].get("hello", {})
            if f.get("drop_rx"):
                lossy.append("%s %s" % (link.port, f["drop_rx"]))
            pos, size, proto = f.get("pos"), f.get("n"), f.get("proto")
            if proto != self.protocol:
                raise HarnessError("%s: the board runs protocol %r, this run asks for %r (flash it: picoring flash --protocol %s)"
                                   % (link.port, proto, self.protocol, self.protocol))
            if size != self.n:
                raise HarnessError("%s: the board is configured for a ring of %r, %d ports were given" % (link.port, size, self.n))
            if pos in seen:
                raise HarnessError("%s and %s both claim ring position %r" % (seen[pos], link.port, pos))
            seen[pos] = link.port
            if pos != i:
                raise HarnessError("%s is at ring position %r but was given as port #%d: list the ports in ring order"
                                   % (link.port, pos, i))
        if lossy:
            self.record.notices.append("the boards lose received frames on purpose, per million: %s (flashed with --drop-rx; "
                                "flash again without it to end it)" % ", ".join(lossy))

    # -- the run --
    def begin(self, t0):
        """The run's parts from its start (host us t0: trace time 0): a stream per board, the
        driver and the pings."""
        self.t0 = t0
        self.record.slowness = self.slowness
        self.lost_frames = LostFrames(self.n)  # the gaps' lost frames, as "lost" trace events
        self.merger.send_before_run = self.lost_frames.sent_before_run
        self.streams = [BoardStream(i, link, self.n, self.merger, self.record, self.lost_frames, t0)
                        for i, link in enumerate(self.links)]
        self.driver = Driver(self.streams, self.protocol, self.workload, self.record, self.clock, t0, self.settle_us,
                             self.quiesce_timeout_us, self.stall_timeout_us, self.idle_horizon_us, self.slowness,
                             rate=self.clock_rate)
        self.pings = Pings(self.links, t0)

    def run(self):
        """Run the workload on the connected ring; returns the checked report (runreport.py)."""
        self.begin(now_us())
        if self.trace_path is not None:
            meta = header(self.protocol, self.n, "ring", "us", seed=self.seed, workload=self.workload.describe(),
                          ports=self.ports, unit_us=self.unit_us,
                          **({"resource": self.resource} if self.resource else {}))
            self.writer = TraceWriter(self.trace_path, meta)
        progress = Progress(self.progress, self.workload, self.checker) if self.progress is not None else None
        self.notify = Notifier([self.checker.feed, self.writer, self.listener, progress])
        # The inbox holds everything since the boards' restart: each board's events from its
        # hello on pair the links (a consistent cut, module doc); up to its flush reply they
        # are the ring's start-up (join and claim rounds, S's token), not part of the run.
        for link in self.links:
            link.write(encode_command("flush"))
            link.write(encode_command("zero"))
        try:
            stop = self._loop()
            self._stood_still(now_us(), final=True)
            self.record.frozen_s = self.driver.frozen_us / 1e6
            self._finish(stop)
        finally:
            if self.writer is not None:
                self.writer.close()
        self.record.queued = sum(self.driver.deferred)
        self.checker.last_t = self.merger.last_t
        return run_report(self.checker, self.record, self.streams, self.merger, stop.quiescent, stop.reason)

    def _loop(self):
        """Until the driver says stop (returned): what the boards said, into the streams; what
        the merger releases, to the listeners; the driver's rules; the pings."""
        grace_us, give_up_us = (int(s * 1e6 * self.slowness) for s in (PING_GRACE_S, PING_GIVE_UP_S))
        while True:
            now = now_us()
            while True:
                try:
                    b, t_rx, item = self.inbox.get_nowait()
                except queue.Empty:
                    break
                self._take(b, t_rx, item, now)
            self._housekeeping(now)
            self.notify.deliver(self.merger.release(now - self.t0), self.lost_frames)
            stop = self.driver.step(now, self.pings.late(now, give_up_us, grace_us))
            self._stood_still(now)
            if stop == "again":
                continue
            if stop is not None:
                return stop
            self.pings.send_if_due(now, now_us)
            interrupt.check()  # (a Ctrl-C that a library took on its way: picoring/interrupt.py)
            time.sleep(0.001)

    def _stood_still(self, now, final=False):
        """The driver's ended windows of unanswered pings, into the trace as "stood still"
        notices (on board 0's stream: the ring's, not a board's), for the checker
        (parts/soft_exclusion.py)."""
        for since, until in self.driver.take_stood_still(now, final):
            self.streams[0].stood_still(until - self.t0, since - self.t0)

    def _take(self, b, t_rx, item, now):
        """One item from board b's link (host us t_rx it arrived; now: this pass's time)."""
        if isinstance(item, HarnessError):
            raise item
        s = self.streams[b]
        is_reply = isinstance(item, Reply)
        if isinstance(item, BoardEvent):
            s.arrived(item)
        elif is_reply and item.word == "hello" and not item.fields.get("rep"):
            s.send_lseq = 0  # (a repeated hello comes after the boot's events: see boot)
        if isinstance(item, LinkNotice):
            s.link_changed(now, item)
            self.pings.forget(b)  # what was asked before does not come back
        elif not s.in_run:
            s.before_run(t_rx, item, is_reply and item.word == "hello", is_reply and item.word == "flush")
        elif is_reply:
            self._reply(s, t_rx, item, now)
        else:
            self._event(s, t_rx, item, now)

    def _reply(self, s, t_rx, item, now):
        b = s.index
        consumed, failed = s.resync_reply(item, now - self.t0, self.driver.outstanding[b])
        if consumed:
            self.driver.outstanding[b] -= failed
        elif item.word == "zero":
            s.tally.zeroed(item)
        elif item.word == "pong":
            t_sent = self.pings.round_of(item)
            if t_sent is not None:
                s.clock_sample(t_rx, item, t_sent)
            self.pings.answered(b, item)
        elif item.word == "hello":
            self.pings.forget(b)
            self._restarted(b, now - self.t0, t_rx)
            self.pings.next_at = now  # its clock started again: a fresh offset soon
        elif item.word == "err":
            self.record.notices.append("%s: %s" % (s.port, item.text))

    def _event(self, s, t_rx, e, now):
        if e.lost_in_outage:
            # The board ran on while its USB link was down, and what it said went
            # nowhere: the checker learns where, and the host asks the board itself.
            # Its lost sends and receives leave the host's balance of them off for
            # good: quiet is then judged by time, as on a lossy ring.
            s.events_lost(now - self.t0, e.lost_in_outage)
            self.driver.lossy = True
            s.resync_due = True
        if e.ev == "bad":
            s.count_bad(e)
        elif e.ev == "hosterr":
            self.record.notices.append("%s: refused a host line: %s" % (s.port, e.aux))
        self.driver.observe(s.index, e, now)
        if e.ev in MERGED_EVENTS:
            self.driver.last_event = now
            s.place(t_rx, e)

    def _housekeeping(self, now):
        """Each pass: links the merger awaited too long unpaired, state queries asked (again),
        requests queued behind served ones injected."""
        for b, since in list(self.merger.held.items()):
            if now - since > HOLD_LIMIT_US:
                self.streams[b].unpair()  # it never told its counts: the merge must go on
        for s in self.streams:
            if s.resync_due:
                s.resync_due = False
                if s.resync is None:  # (one in flight answers for this one too)
                    s.ask_after_outage(now)
        wait_us = REPLY_TIMEOUT_S * 1e6 * self.slowness
        for s in self.streams:
            query = s.resync
            if query is not None and now - query["sent"] > wait_us and s.link.connected:
                # no answer yet: a slow machine, or a reply lost; asked again (the
                # requests written since the first query are not in the new answer either)
                self.record.host_slow.append("%s: no answer to its state query after its USB link came back "
                                             "within %.1f s: asked again" % (s.port, REPLY_TIMEOUT_S * self.slowness))
                s.ask_after_outage(now, after=query["after"])
        self.driver.inject_deferred()

    def _restarted(self, b, t, t_rx=None):
        """Board b said hello: it restarted (power cycle, reset) and rejoins the ring by itself;
        the request it had pending is gone with its memory: reported failed."""
        self.streams[b].restarted(t, t_rx, self.driver.board_restarted(b))

    # -- the end --
    def _finish(self, stop):
        """Flush every board's log, then place the rest; a board whose USB link is down gets a
        moment to come back (its events of the meantime are lost either way). The trace ends."""
        deadline = time.monotonic() + self.reconnect_wait_s
        while not all(link.connected for link in self.links) and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.resource is not None:  # (before the flush: its res event comes with it)
            self.resource_count = shared_resource.read_counter(self.links[0], self.record.notices)
        # A token that never rests (S, BinarySearch) goes on round the ring while the boards are
        # flushed one after another: board i+1's flush brings receives of frames board i sent
        # after its own flush, whose sends may still be on their way (a loaded machine holds a
        # board's USB output back for seconds). A second round brings every send made before
        # the first ended. A receive that reached the host after its sender's last flush was
        # asked may have been made after it: the merger ends that board's part of the trace
        # before it (CausalMerger.ended), rather than placing it without its send.
        flushed = list(self.links)
        for _ in range(2):
            for link in list(flushed):
                drain(link.replies)  # an earlier flush reply must not stand for this one
                self.final_flush_us[link.index] = now_us()
                try:
                    link.command("flush")
                except HarnessError as e:
                    flushed.remove(link)
                    if link.connected:
                        # a condition of the run (its last events may be missing), not a crash
                        self.record.host_lagged.append("%s: no final flush: %s" % (link.port, e))
                    else:
                        self.record.notices.append("%s: no final flush: %s" % (link.port, e))
        time.sleep(0.05)
        self._take_last()
        for s in self.streams:
            s.align_restarted()
        t = now_us() - self.t0
        for s in self.streams:
            s.final_state(t, self._take_last)
        self.notify.deliver(self.merger.release(now_us() - self.t0, final=True), self.lost_frames, final=True)
        if self.writer is not None:
            rates = clock_rates_noted(self.links)  # (emulated Picos: the checker of the trace needs them)
            self.writer(Event(self.merger.last_t, "end", extra={"quiescent": stop.quiescent, "reason": stop.reason,
                                                                **({"clock_rates": rates} if rates else {})}))

    def _take_last(self):
        """The events in the inbox after the run loop (the boards' final flush): placed. A board
        that restarted as the run ended says hello only now (at the latest before it answers the
        final flush: the first host line after its boot): it is reported as a restart like one
        in the run."""
        while True:
            try:
                b, t_rx, item = self.inbox.get_nowait()
            except queue.Empty:
                break
            s = self.streams[b]
            if isinstance(item, Reply) and item.word == "hello":
                self._restarted(b, now_us() - self.t0, t_rx)
            elif isinstance(item, BoardEvent):
                sender_flushed = self.final_flush_us[(b - 1) % self.n]
                item.after_sender_flushed = sender_flushed is not None and t_rx >= sender_flushed
                s.arrived(item)
                if item.ev == "bad":
                    s.count_bad(item)
                if item.ev in MERGED_EVENTS:
                    s.place(t_rx, item, counted=s.in_run)

    def close(self):
        for link in self.links:
            link.close()
