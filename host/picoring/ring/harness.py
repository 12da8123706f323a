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
(causal_forced, a run condition), never a silent fallback to clock estimates.
A board that restarts mid-run starts a new clock: its events wait for a clock
sample of the new incarnation before they are placed.
"""

import queue
import time

from .. import ttystall
from ..check import registry
from ..check.checker import Checker
from ..check.trace import Event, TraceWriter, header
from . import forming
from . import resource as shared_resource
from .deploy import start_order
from .hostlink import REQUEST, BoardEvent, Reply, encode_command
from .link import (REPLY_TIMEOUT_S, BoardLink, HarnessError, LinkNotice, clock_rates, drain, now_us, slowness,
                   stop_firmware)
from .merge import CausalMerger, LinkTally, LostFrames, insert_credit, lost_credit
from .runreport import PING_GRACE_S, UNSEEN_IN_OUTAGE, clock_rates_noted, run_report

# The stall clock (RingRun.run) runs only while the boards answer pings (PING_GRACE_S, runreport.py),
# and one pass of the run loop adds at most STALL_STEP_S.
STALL_STEP_S = 0.05
PING_GIVE_UP_S = 30.0  # a ping round unanswered this long is forgotten (its answer was lost)
FROZEN_LIMIT = 12  # a run with no progress for this many stall limits is given up (time the serial ports delivered)
WALL_LIMIT = 5  # ... or for WALL_LIMIT times that of wall time, however long the ports stood still
HOLD_LIMIT_US = 30_000_000  # a board whose link counts the merger awaits (CausalMerger.hold) this long: unpaired

# The frames whose start-up history pairs the links (module doc). A ring forms by claim
# frames while its boards restart one after another, and a board that is stopped or
# booting loses what reaches it (the rp2 UART's FIFO overflows; a virtual board's pty is
# flushed when it opens it), so start-up claims do not pair: sent, never received.
# Tokens exist only once the ring has formed, with every board up, and requests only in
# the run. (CI on emulated Picos: the lost claims put link counts off by several frames,
# and a receive was placed by clock estimate before its send.) Messages of the layer ("msg")
# likewise: a token that is a message exists only once the ring has formed, and BinarySearch's
# circulates from then on (left out, the message frames in flight at the run's cut put the
# links off by one: a virtual run of bs placed 2,045 receives by clock estimate).
PAIRED_FROM_BOOT = ("token", "request", "msg")

# Board events that go through the causal merger (the rest are handled as they come).
MERGED_EVENTS = ("req", "send", "recv", "enter", "exit", "bad", "drop", "regen", "discard", "timeout", "gap", "res")


class RingRun:
    """One run of a workload on a ring of boards (already flashed and configured).

    ports: USB ports in ring order (ports[i] is the board at position i).
    resetter: optional callable(i) that restarts board i (virtual ring); else
    the boards are restarted through their USB serial (stop, then Ctrl-D).
    resource: "fram" when the boards' critical sections share an I2C FRAM counter (flashed
    with --resource fram): board 0 sets it to 0 before the run and reads it after (resource.py).
    """

    def __init__(self, ports, protocol, workload, unit_us=2000, trace=None, listener=None, resetter=None,
                 settle_us=60_000, quiesce_timeout_s=5.0, idle_horizon=None, progress=None, seed=0, tap=None,
                 stall_timeout_s=5.0, resource=None):
        self.ports = list(ports)
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
        self.writer = None
        self.board_info = [{} for _ in range(self.n)]
        self.notices = []
        self.bad_events = [{} for _ in range(self.n)]  # per board: {reason: bad-frame events seen}
        self.final_status = [None] * self.n  # each board's !status fields at the end of the run
        self.stalled = None
        self.reconnect_wait_s = 3.0  # at the end, for a board whose USB link is down
        self.restarts = [0] * self.n
        self.send_lseq = [0] * self.n  # per board: the link sequence byte of its next send (_number_send)
        self.lost_frames = LostFrames(self.n)  # the gaps' lost frames, as "lost" trace events (_deliver)
        self.unsent = {}  # reason -> requests that never left the host
        self.outstanding = [0] * self.n  # per board: requests injected, not yet through (run())
        self.deferred = [0] * self.n  # per board: requests due, held at the host behind an outstanding one (run())
        self.link_events = []  # USB link lost / back, board restarted: {"t", "board", "what", "text"}
        self.restart_timeout_s = 15.0  # per board's !hello, and for the ring to form: on a real Pico
        self.slowness = 1.0  # measured in connect(): wall time per board time, at least 1
        self.t0 = None  # host us of the run's start: trace time 0
        # per board: events waiting for the board's clock offset (after a restart), in order,
        # as (host us it arrived, BoardEvent, counted)
        self.unplaced = [[] for _ in range(self.n)]
        self.link_tallies = [LinkTally() for _ in range(self.n)]
        # board -> a state query after a USB outage, in flight: {"sent": host us, "status": the
        # !status fields once they came, "after": requests written to the board since the query}
        self.resync = {}
        self.unseen_in_outage = 0  # requests failed by _resync
        self.host_lagged = []  # the host could not get an answer in time: run conditions
        self.host_slow = []  # answers that came late but came: explained run conditions
        self.frozen_s = 0.0  # run time in which the boards did not answer pings (or the host loop did not run)
        self.resource = resource
        self.resource_count = None  # board 0's !res reply after the run

    # -- setup --
    def connect(self):
        for i, port in enumerate(self.ports):
            link = BoardLink(i, port, self.inbox, self.n)
            link.tap = self.tap
            self.links.append(link.open())
        # The boards normally run the firmware already: how fast their clocks run says how
        # long their restart may take in wall time (a board at its REPL answers no ping: 1).
        self.slowness = slowness(clock_rates(self.links))
        for link in self.links:
            link.slowness = self.slowness
        self.restart_ring(timeout=self.restart_timeout_s * self.slowness)
        self.check_ring()
        if self.resource is not None:
            shared_resource.set_counter(self.links[0])  # (its res event opens the trace's count)
        for link in self.links:
            link.align()

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
        forming.wait_formed(self.links, self.protocol, self.settle_us, self.slowness, timeout)

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
            self.notices.append("the boards lose received frames on purpose, per million: %s (flashed with --drop-rx; "
                                "flash again without it to end it)" % ", ".join(lossy))

    # -- the loop --
    def run(self):
        n = self.n
        wl = self.workload
        # Waits in board time, scaled to wall time by the boards' measured slowness (connect):
        # how long the wires need to drain before the ring counts as quiet (the adversarial
        # workload then asks behind the resting token), and how long without progress is a
        # stall, or frames still moving after the last service.
        slow = self.slowness
        settle_us, quiesce_us, stall_us = (int(x * slow) for x in (self.settle_us, self.quiesce_timeout_us,
                                                                     self.stall_timeout_us))
        rests = registry.rests(self.protocol)
        outstanding = self.outstanding = [0] * n  # injected and not yet through its critical section
        deferred = self.deferred = [0] * n
        sends = recvs = 0
        by_msg = False  # protocol-layer messages seen: the token balance below cannot tell the holder
        holder = registry.first_holder(self.protocol)  # the board that last received the token (S: the one just behind it)
        # tokens received minus tokens sent per board: at rest, the holder is the one board at 1
        # (Q and D start with the token resting at position 0; any protocol at its holder option)
        tokens = [0] * n
        tokens[holder] = 1
        last_event = now_us()
        last_inject = last_event  # the closed loop's last request
        last_exit = None
        t0 = now_us()
        next_ping = t0 + 500_000
        ping_k = 100
        quiescent = None
        reason = "done"
        was_busy = False
        last_progress = t0
        ports_stood_still = ttystall.stalled()  # at last_progress (ttystall: the serial ports delivered nothing)
        # The stall clock: time without progress while the host loop ran and the boards answered
        # their pings, so that a machine too busy to run the ring (or the host) is not taken for
        # a ring that stalled. pending_pings: ping round -> (sent at, boards still to answer).
        stalled_us = 0
        frozen_us = 0  # time the clock stood still: the boards (or the host) did not keep up
        last_pass = t0
        pending_pings = {}
        if self.trace_path is not None:
            meta = header(self.protocol, n, "ring", "us", seed=self.seed, workload=wl.describe(), ports=self.ports,
                          unit_us=self.unit_us, **({"resource": self.resource} if self.resource else {}))
            self.writer = TraceWriter(self.trace_path, meta)
        ping_sent = {}
        lossy = False  # a frame went bad or missing, or recovery acted: frames may never arrive
        longest_timeout = 0  # us: the longest recovery timeout a board has reported firing
        self.t0 = t0
        # The inbox holds everything since the boards' restart: each board's events from its
        # hello on pair the links (a consistent cut, module doc); up to its flush reply they
        # are the ring's start-up (join and claim rounds, S's token), not part of the run.
        for link in self.links:
            link.write(encode_command("flush"))
            link.write(encode_command("zero"))
        since_boot = [[] for _ in range(n)]  # per board: start-up events since its last hello
        resync_due = set()  # boards whose events were lost in a USB outage: ask them their state
        in_run = [False] * n

        def answered(b, reply):
            parts = reply.text.split()
            k = int(parts[0]) if parts and parts[0].isdigit() else None
            if k in pending_pings:
                pending_pings[k][1].discard(b)
                if not pending_pings[k][1]:
                    del pending_pings[k]

        def forget_pings(b):
            for k in list(pending_pings):
                pending_pings[k][1].discard(b)
                if not pending_pings[k][1]:
                    del pending_pings[k]

        renew = getattr(wl, "renew", None)  # renew(i): node i asks again as its critical section ends

        def inject(i):
            link = self.links[i]
            dropped = link.writes_dropped
            link.write(REQUEST)
            if link.writes_dropped != dropped:
                # The board's USB link is down: the request never left the host. Failed now,
                # with its reason (the checker never sees it: there is no req event).
                why = "its board's USB link was down"
                self.unsent[why] = self.unsent.get(why, 0) + 1
                self.notices.append("%s: a request could not be sent: the USB link is down" % self.ports[i])
                return
            outstanding[i] += 1
            if i in self.resync:
                self.resync[i]["after"] += 1  # written after the state query: not in its answer

        try:
            while True:
                now = now_us()
                # 1. what the boards said
                while True:
                    try:
                        b, t_rx, item = self.inbox.get_nowait()
                    except queue.Empty:
                        break
                    if isinstance(item, HarnessError):
                        raise item
                    if isinstance(item, BoardEvent):
                        self._arrived(b, item)
                    elif isinstance(item, Reply) and item.word == "hello" and not item.fields.get("rep"):
                        self.send_lseq[b] = 0  # (a repeated hello comes after the boot's events: see boot)
                    if not in_run[b] and not isinstance(item, LinkNotice):
                        if isinstance(item, BoardEvent) and item.ev in MERGED_EVENTS:
                            since_boot[b].append(item)
                        elif isinstance(item, Reply) and item.word == "hello":
                            since_boot[b] = []  # what came before is another incarnation's
                            self.link_tallies[b] = LinkTally()
                        elif isinstance(item, Reply) and item.word == "flush":
                            in_run[b] = True
                            for e in since_boot[b]:
                                if e.ev in ("send", "recv") and e.kind not in PAIRED_FROM_BOOT or e.ev == "gap":
                                    continue  # (a gap before the run: start-up claims a booting board missed)
                                # (a res event before the run is the host setting the FRAM counter: the
                                # run's count starts there, so it is part of the trace)
                                self._place(b, t_rx, e, counted=e.ev == "res")
                            since_boot[b] = []
                        continue
                    if isinstance(item, LinkNotice):
                        # The USB link went away or came back (the board may run on meanwhile).
                        self._notice(b, now - t0, item.word, item.text)
                        forget_pings(b)  # what was asked before does not come back
                        self.resync.pop(b, None)  # a query in flight went with the link: asked again
                        if item.word == "reconnected":
                            resync_due.add(b)  # what it did meanwhile may never reach the host
                        elif self.link_tallies[b].since is not None:
                            self.merger.hold(b, now)  # until it says how many frames it sent and received
                        else:
                            self._unpair(b)
                        continue
                    if isinstance(item, Reply):
                        query = self.resync.get(b)
                        if query is not None and item.word == "status" and query["status"] is None:
                            query["status"] = item.fields
                            continue
                        if query is not None and item.word == "flush" and query["status"] is not None:
                            # every event the board made before the status is in now
                            del self.resync[b]
                            self._resync(b, query["status"], outstanding, now - t0, query["after"])
                            lost = self.link_tallies[b].settle(query["status"])
                            if lost is not None:
                                self._repair(b, lost, query["status"])
                            continue
                        if item.word == "zero":
                            self.link_tallies[b].zeroed(item)
                            continue
                        if item.word == "pong":
                            self._clock_sample(b, t_rx, item, ping_sent)
                            answered(b, item)
                            continue
                        if item.word == "hello":
                            lossy = True
                            tokens[b] = 0
                            forget_pings(b)
                            self._restarted(b, now - t0, t_rx)
                            next_ping = now  # its clock started again: a fresh offset soon
                            continue
                        if item.word == "err":
                            self.notices.append("%s: %s" % (self.ports[b], item.text))
                        continue
                    e = item
                    if e.lost_in_outage:
                        # The board ran on while its USB link was down, and what it said went
                        # nowhere: the checker learns where, and the host asks the board itself.
                        # Its lost sends and receives leave the host's balance of them off for
                        # good: quiet is then judged by time, as on a lossy ring.
                        self._events_lost(b, now - t0, e.lost_in_outage)
                        lossy = True
                        resync_due.add(b)
                    if e.ev == "send":
                        sends += 1
                        if e.kind == "token":
                            tokens[b] -= 1
                    elif e.ev == "recv":
                        recvs += 1
                        if e.kind == "token":
                            holder = b
                            tokens[b] += 1
                        elif e.kind == "msg":  # the token may travel as a message: _holder asks the boards
                            by_msg = True
                    elif e.ev == "regen":
                        tokens[b] += 1
                        lossy = True
                    elif e.ev in ("discard", "timeout"):
                        if e.ev == "discard":
                            tokens[b] -= 1
                        else:
                            longest_timeout = max(longest_timeout, 1000 * ((e.aux or {}).get("gen_ms") or 0))
                        lossy = True
                    elif e.ev == "exit":
                        # (a request written to a board just after it restarted, and so not
                        # counted failed, is served by the new incarnation: never below 0)
                        outstanding[b] = max(outstanding[b] - 1, 0)
                        last_exit = now
                        if renew is not None and renew(b):
                            deferred[b] += 1  # (saturated) it asks again as its section ends
                    elif e.ev == "reject":
                        # The board had one outstanding that the host did not count (the host's
                        # count is off): this one is not served, and must not be waited for.
                        outstanding[b] = max(outstanding[b] - 1, 0)
                        why = "refused by its board: one already outstanding"
                        self.unsent[why] = self.unsent.get(why, 0) + 1
                        self.notices.append("%s: a request was refused (one already outstanding)" % self.ports[b])
                    elif e.ev in ("bad", "gap"):
                        if e.ev == "bad":
                            self._count_bad(b, e)
                        lossy = True
                    elif e.ev == "hosterr":
                        self.notices.append("%s: refused a host line: %s" % (self.ports[b], e.aux))
                    if e.ev in ("enter", "exit"):
                        last_progress = now
                        ports_stood_still = ttystall.stalled()
                    if e.ev in MERGED_EVENTS:
                        last_event = now
                        self._place(b, t_rx, e)
                for b, since in list(self.merger.held.items()):
                    if now - since > HOLD_LIMIT_US:
                        self._unpair(b)  # it never told its counts: the merge must go on
                for b in sorted(resync_due):
                    if b not in self.resync:  # (one in flight answers for this one too)
                        self._ask_after_outage(b, now)
                resync_due.clear()
                for b, query in list(self.resync.items()):
                    if now - query["sent"] > REPLY_TIMEOUT_S * 1e6 * slow and self.links[b].connected:
                        # no answer yet: a slow machine, or a reply lost; asked again (the
                        # requests written since the first query are not in the new answer either)
                        self.host_slow.append("%s: no answer to its state query after its USB link came back "
                                              "within %.1f s: asked again" % (self.ports[b], REPLY_TIMEOUT_S * slow))
                        self._ask_after_outage(b, now, after=query["after"])
                for b in range(n):
                    # the next request queued behind a served one (one whose link is down
                    # fails at once, with its reason, and the next one is tried)
                    while deferred[b] and not outstanding[b]:
                        deferred[b] -= 1
                        inject(b)
                # 2. into the checker and the trace, in causal order
                self._deliver(self.merger.release(now - t0))
                busy = any(outstanding) or any(deferred)
                t_units = (now - t0) // self.unit_us
                # 3. open-loop requests
                nt = wl.next_time()
                while nt is not None and nt <= t_units:
                    for i, line in wl.due(t_units):
                        if outstanding[i]:
                            if not wl.defer_busy:
                                raise HarnessError("%s: line %s: node %d requests but its request is still outstanding"
                                                   % (wl.describe(), line, i))
                            deferred[i] += 1
                        else:
                            inject(i)
                    nt = wl.next_time()
                busy = any(outstanding) or any(deferred)
                if busy and not was_busy:
                    last_progress = now
                    ports_stood_still = ttystall.stalled()
                    stalled_us = 0
                was_busy = busy
                raw = now - last_pass
                last_pass = now
                for k in [k for k, (sent, _) in pending_pings.items() if now - sent > PING_GIVE_UP_S * 1e6 * slow]:
                    del pending_pings[k]  # never answered (a reply lost): the stall clock may not wait forever
                late = any(now - sent > PING_GRACE_S * 1e6 * slow for sent, _ in pending_pings.values())
                step = 0 if late else min(raw, int(STALL_STEP_S * 1e6))
                frozen_us += raw - step
                if last_progress == now:
                    stalled_us = 0
                elif busy:
                    stalled_us += step
                stall_limit = max(stall_us, 3 * longest_timeout * slow)
                # Time in which the serial ports stood still is not counted: the kernel's tty
                # worker stopped for 89 s under a loaded suite run (a workqueue lockup), nothing
                # reached the boards, and a fine run was given up ("the machine too busy"). A
                # machine whose ports never deliver again is given up on by the wall clock.
                still_us = int((ttystall.stalled() - ports_stood_still) * 1e6)
                waited = now - last_progress
                if busy and stalled_us <= stall_limit and (waited - still_us > FROZEN_LIMIT * stall_limit
                                                           or waited > WALL_LIMIT * FROZEN_LIMIT * stall_limit):
                    # The boards answered too seldom for the stall clock to run out: not a verdict
                    # on the ring, a machine that cannot run it. A condition of the run.
                    self.host_lagged.append(
                        "the run was given up: no critical section entered or left for %.1f s, in which the boards "
                        "answered their pings for only %.1f s (a machine too busy to run the ring)%s"
                        % (waited / 1e6, stalled_us / 1e6, ttystall.not_counted(still_us / 1e6)))
                    reason = "given up: the machine was too busy to run the ring"
                    break
                # Recovery may legitimately take a few of the boards' current timeouts.
                if busy and stalled_us > stall_limit:
                    waited = stalled_us / 1e6
                    self.stalled = {"outstanding": sum(outstanding), "queued": sum(deferred),
                                    "not_issued": wl.total - wl.issued, "seconds": round(waited, 1)}
                    reason = ("the ring stalled (token probably lost): no critical section entered or left for "
                              "%.1f s with %d requests outstanding at the boards (%d more queued behind them, "
                              "%d not issued)" % (waited, sum(outstanding), sum(deferred), wl.total - wl.issued))
                    if now - last_progress > stalled_us + 1_000_000:
                        reason += " (%.1f s of wall time: the boards did not answer their pings for the rest)" % (
                            (now - last_progress) / 1e6)
                    break
                # Quiet: nothing in flight. Frames lost on a lossy ring never arrive, so
                # there the wait is longer instead of sends == recvs.
                # (events lost in a USB outage leave the balance of sends and receives off for good)
                lossy = lossy or any(link.parser.missing_in_outages for link in self.links)
                # A token that never rests (S, BinarySearch) moves for ever: frames never stop, so
                # its ring is quiet once no request has been in it for settle_us (a bs run on an
                # idle machine waited for ever for a pause between frames that never came).
                since = last_event if rests else max(last_exit or t0, last_inject)
                quiet = (not busy and (now - since > settle_us and (sends == recvs or not rests)
                                       or lossy and now - last_event > 3 * settle_us))
                # 4. closed loop
                if quiet and wl.closed_loop and not wl.exhausted:
                    i = wl.on_quiescent(t_units, self._holder(tokens, holder, by_msg) if rests else holder)
                    if i is not None:
                        inject(i)
                        last_event = last_inject = now
                        continue
                # 5. the end
                # (and not while a board whose USB link came back has not answered its state
                # query: it may have restarted, and says so only in answer to a host line)
                done = (not busy and nt is None and (not wl.closed_loop or wl.exhausted)
                        and not any(self.links[b].connected for b in self.resync))
                if done:
                    if not rests:
                        if last_exit is None or now - last_exit >= self.idle_horizon_us:
                            reason = "idle horizon"
                            break
                    elif quiet:
                        quiescent = True
                        break
                    elif now - last_event > quiesce_us or (last_exit is not None and now - last_exit > quiesce_us):
                        quiescent = False
                        reason = "every request was served but frames were still moving %.1f s later" % (
                            (now - (last_exit or t0)) / 1e6)
                        break
                if now >= next_ping:
                    # Keep the clock offsets fresh: crystals drift (~50 ppm is 3 ms a minute). A board
                    # still to answer a ping gets no other: pings sent every 0.5 s of wall time to an
                    # emulated Pico running at 1/30 of real time queued up 26 deep on a loaded
                    # machine, and answering them took the chip time the ring needed.
                    asked = self._boards_to_ping(pending_pings)
                    if asked:
                        ping_sent[ping_k] = now_us()
                        for b in asked:
                            self.links[b].write(encode_command("ping", ping_k))
                        asked = {b for b in asked if self.links[b].connected}
                        if asked:
                            pending_pings[ping_k] = (ping_sent[ping_k], asked)
                        ping_k += 1
                    next_ping = now + 500_000
                if self.progress is not None:
                    self.progress(wl.issued, wl.total, self.checker.served, sends)
                time.sleep(0.001)
            self.frozen_s = frozen_us / 1e6
            # flush every board's log, then place the rest; a board whose USB link is down
            # gets a moment to come back (its events of the meantime are lost either way)
            deadline = time.monotonic() + self.reconnect_wait_s
            while not all(link.connected for link in self.links) and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.resource is not None:  # (before the flush: its res event comes with it)
                self.resource_count = shared_resource.read_counter(self.links[0], self.notices)
            for link in self.links:
                drain(link.replies)  # an earlier flush reply must not stand for this one
                try:
                    link.command("flush")
                except HarnessError as e:
                    if link.connected:
                        # a condition of the run (its last events may be missing), not a crash
                        self.host_lagged.append("%s: no final flush: %s" % (link.port, e))
                    else:
                        self.notices.append("%s: no final flush: %s" % (link.port, e))
            time.sleep(0.05)
            self._take_last(in_run)
            self._align_restarted()
            self._final_status(now_us() - t0, in_run)
            self._deliver(self.merger.release(now_us() - t0, final=True), final=True)
            end_t = self.merger.last_t
            if self.writer is not None:
                rates = clock_rates_noted(self)  # (emulated Picos: the checker of the trace needs them)
                self.writer(Event(end_t, "end", extra={"quiescent": quiescent, "reason": reason,
                                                       **({"clock_rates": rates} if rates else {})}))
        finally:
            if self.writer is not None:
                self.writer.close()
        self.checker.last_t = self.merger.last_t
        return run_report(self, quiescent, reason)

    def _ask_after_outage(self, b, now, after=0):
        """Ask the board its state, then flush it, without waiting: the run loop takes the
        replies from the inbox, and applies the state when the flush reply comes, after every
        event the board made before the state (so a request it served in between was still
        pending in that state: self._resync). Requests written after the query are counted in
        the query's "after": the board's answer cannot know them. (Waiting here, up to seconds
        on a busy machine, stopped the run loop and its stall clock kept running.)"""
        link = self.links[b]
        self.resync[b] = {"sent": now, "status": None, "after": after}
        link.write(encode_command("status"))
        link.write(encode_command("flush"))
        if not link.connected:
            self.resync.pop(b, None)  # gone again: asked again when it is back

    def _events_lost(self, b, t, k):
        """k of board b's events went nowhere while its USB link was down: the checker is told
        there. Its links wait for the state query that follows (LinkTally: how many of them
        were sends and receives), or, when the board cannot say, are paired by time from now on."""
        self._notice(b, t, "events lost", "%s: %d events were lost while its USB link was down" % (self.ports[b], k))
        self.merger.events_lost(b)
        if self.link_tallies[b].since is None:
            self._unpair(b)

    def _repair(self, b, lost, status):
        """Board b's frames sent and received whose events were lost before its status
        (LinkTally.settle: lost = (sends, receives)): counted where it made them, among its
        events (CausalMerger.repair), and its sends from now on numbered past them."""
        eseq = status.get("eseq") if isinstance(status.get("eseq"), int) else None
        if self.unplaced[b]:  # its events wait for its clock offset: the credit waits among them
            self.merger.pair_again(b)
            insert_credit(self.unplaced[b], (None, lost_credit(b, *lost), False, self.merger.last_t), eseq)
        else:
            self.merger.repair(b, *lost, eseq=eseq)
        self.send_lseq[b] = (self.send_lseq[b] + lost[0]) & 0xFF

    def _unpair(self, b):
        """Board b's sends and receives can no longer be paired by counts: the receives on its
        link out (at the next board) and on its link in (its own) are placed by time from now
        on (reported: causal_forced, run condition "order")."""
        self.merger.unhold(b)
        self.merger.unpair(b)
        self.merger.unpair((b - 1) % self.n)

    def _resync(self, b, status, outstanding, t, after=0):
        """Requests the host counts outstanding at a board that has none pending nor in its
        critical section: their events were lost with the USB link (or the request itself was,
        written just before the link went). Failed, with that reason. Returns how many.
        after: requests written to the board after it was asked (not in its answer)."""
        if isinstance(status.get("eseq"), int) and isinstance(status.get("pending"), int) and not status.get("dropped"):
            # events lost with nothing after them to show the gap
            lost = self.links[b].parser.expect_next(status["eseq"] - status["pending"])
            if lost:
                self._events_lost(b, t, lost)
        k = outstanding[b] - after
        if k <= 0 or status.get("pend") or status.get("cs"):
            return 0
        outstanding[b] -= k
        self.unseen_in_outage += k
        for _ in range(k):  # (the checker counts the ones whose req it saw; _report the rest)
            self._place(b, None, BoardEvent(b, None, None, "fail", aux={"reason": UNSEEN_IN_OUTAGE}), host_t=t)
        self.notices.append("%s: %d request(s) failed: %s" % (self.ports[b], k, UNSEEN_IN_OUTAGE))
        return k

    def _restarted(self, b, t, t_rx=None):
        """Board b said hello: it restarted (power cycle, reset) and rejoins the ring by itself;
        the request it had pending is gone with its memory: reported failed."""
        failed, self.outstanding[b] = self.outstanding[b], 0
        # Its counters and event numbers start again at 0: events of it lost from here on (its
        # first output, before the host reopened its port, is dropped when that takes long, as
        # under load) are counted by asking it, as after any USB outage. (With the tally
        # unknown, its links were paired by time for the rest of the run: 100 to 134 receives
        # forced, 82 and 89 false safety violations in two loaded suite runs.)
        self.link_tallies[b] = LinkTally(from_boot=True)
        self.merger.unhold(b)
        self.merger.sender_restarted(b)  # its link sequence bytes start again at 0
        self.merger.events_lost(b)  # the old incarnation's events not yet flushed died with it
        self._place_unplaced(b)  # the previous incarnation's, before its clock is forgotten
        self.links[b].board_restarted(t_rx)
        self.restarts[b] += 1
        text = "%s: the board restarted; it rejoins the ring" % self.ports[b]
        if failed:
            text += "; its pending request is reported failed"
        for _ in range(failed):
            self._place(b, None, BoardEvent(b, None, None, "fail", aux={"reason": "board restarted"}), host_t=t)
        self._notice(b, t, "restarted", text)

    def _notice(self, b, t, word, text):
        """Something the host saw happen to a board, for the trace and the report."""
        self.notices.append(text)
        self.link_events.append({"t": t, "board": b, "what": word, "text": text})
        self._place(b, None, BoardEvent(b, None, None, "notice", aux={"what": word, "text": text}), host_t=t)

    def _place(self, b, t_rx, e, counted=True, host_t=None):
        """Into the merger at the host time of its board tick (host_t: the host's own event),
        or held, in the board's order, while the board's clock offset is unknown."""
        if self.links[b].offset is None or self.unplaced[b]:
            self.unplaced[b].append((t_rx, e, counted, host_t))
            return
        self.merger.push(b, self.links[b].host_time(e.tick_us) - self.t0 if host_t is None else host_t, e, counted)

    def _place_unplaced(self, b):
        held, self.unplaced[b] = self.unplaced[b], []
        link = self.links[b]
        for t_rx, e, counted, host_t in held:
            if host_t is None:
                # no clock for it (the run ended first): when it reached the host, a bound
                host_t = (link.host_time(e.tick_us) if link.offset is not None else t_rx) - self.t0
            self.merger.push(b, host_t, e, counted)

    def _align_restarted(self):
        """At the end: a board that restarted and has not answered a ping since is asked now."""
        for b, link in enumerate(self.links):
            if link.offset is None and link.connected:
                drain(link.replies)
                try:
                    link.align(samples=3)
                except HarnessError as e:
                    self.notices.append("%s: its clock could not be aligned after its restart: %s" % (link.port, e))
            if self.unplaced[b]:
                if link.offset is None:
                    self.notices.append("%s: %d events placed at the time they reached the host (no clock sample "
                                        "since the board restarted)" % (link.port, len(self.unplaced[b])))
                self._place_unplaced(b)

    def _count_bad(self, b, e):
        reason = e.aux if isinstance(e.aux, str) else "?"
        self.bad_events[b][reason] = self.bad_events[b].get(reason, 0) + 1

    def _take_last(self, in_run):
        """The events in the inbox after the run loop (the boards' final flush): placed. A board
        that restarted as the run ended says hello only now (at the latest before it answers the
        final flush: the first host line after its boot): it is reported as a restart like one
        in the run."""
        while True:
            try:
                b, t_rx, item = self.inbox.get_nowait()
            except queue.Empty:
                break
            if isinstance(item, Reply) and item.word == "hello":
                self._restarted(b, now_us() - self.t0, t_rx)
            elif isinstance(item, BoardEvent):
                self._arrived(b, item)
                if item.ev == "bad":
                    self._count_bad(b, item)
                if item.ev in MERGED_EVENTS:
                    self._place(b, t_rx, item, counted=in_run[b])

    def _arrived(self, b, e):
        """What every event of board b does as it reaches the host, in the run loop or after
        it: counted for its links (LinkTally), a send numbered (_number_send), and a gap
        before it told to the merger (a send of this board's may never come: CausalMerger.lossy)."""
        self.link_tallies[b].event(e)
        self._number_send(b, e)
        if self.links[b].parser.missing:
            self.merger.events_lost(b)

    def _number_send(self, b, e):
        """A board numbers the frames it sends from its start (link sequence bytes, 0 first):
        so does the host, from its hello or boot event, for a restarted receiver's first
        frame (CausalMerger)."""
        if e.ev == "boot":
            self.send_lseq[b] = 0
            self.lost_frames.restarted(b)
        elif e.ev == "send":
            e.lseq = self.send_lseq[b]
            self.send_lseq[b] = (self.send_lseq[b] + 1) & 0xFF

    def _final_status(self, t, in_run):
        """Each board's counters (bad frames by reason, frames received) since the run's !zero;
        and the events it made that never arrived, when no later event showed the gap. A board
        whose counts the merger still awaits after a USB outage (its state query unanswered
        when the run ended) is settled here: its status, then a flush, so that every event it
        made before the status is in."""
        for i, link in enumerate(self.links):
            try:
                _, reply = link.command("status")
                if i in self.merger.held:
                    link.command("flush")
            except HarnessError as e:
                self.notices.append("%s: no final status: %s" % (link.port, e))
                continue
            f = self.final_status[i] = reply.fields
            if i in self.merger.held:
                self._take_last(in_run)
                lost = self.link_tallies[i].settle(f)
                if lost is not None:
                    self._repair(i, lost, f)
                else:
                    self._unpair(i)
            if isinstance(f.get("eseq"), int) and isinstance(f.get("pending"), int) and not f.get("dropped"):
                in_outages = link.parser.missing_in_outages
                lost = link.parser.expect_next(f["eseq"] - f["pending"])
                if lost and link.parser.missing_in_outages > in_outages:
                    self._events_lost(i, t, lost)

    def _boards_to_ping(self, pending_pings):
        """The connected boards that owe no answer to an earlier ping (pending_pings: round ->
        (sent at, boards still to answer))."""
        waiting = set().union(*(asked for _, asked in pending_pings.values()))
        return {link.index for link in self.links if link.connected and link.index not in waiting}

    def _clock_sample(self, b, t_rx, reply, ping_sent):
        parts = reply.text.split()
        if len(parts) not in (2, 3) or not parts[0].isdigit() or int(parts[0]) not in ping_sent:
            return
        link = self.links[b]
        t_sent = ping_sent[int(parts[0])]
        if t_sent < link.booted_at:
            return  # sent to an earlier incarnation: its answer may come from either clock
        rtt = t_rx - t_sent
        tick = link.unwrap(int(parts[1]))
        if link.offset is None:  # a restarted board: the first sample of its new clock, however slow
            link.rtt = rtt
        if rtt <= max(2 * (link.rtt or 0), 2000):  # a slow answer says little about the offset
            link.offset = tick - (t_sent + t_rx) // 2
            link.clock_sampled((t_sent + t_rx) // 2, tick, rtt)
            if self.unplaced[b]:
                self._place_unplaced(b)

    def _holder(self, tokens, last_token_recv, ask=False):
        """The board holding the token at rest, from the token balance of the events seen;
        if lost events leave it ambiguous, or ask (the token may travel as a protocol-layer
        message), the boards are asked (one !status each)."""
        holders = [b for b, k in enumerate(tokens) if k == 1]
        if len(holders) == 1 and not ask and sum(tokens) == 1:
            return holders[0]
        holders = [link.index for link in self.links if link.command("status")[1].fields.get("tok") == 1]
        if len(holders) != 1:
            self.notices.append("%d boards hold a token at rest: %s" % (len(holders), holders))
            return last_token_recv
        return holders[0]

    def _deliver(self, released, final=False):
        for t, e in released:
            self._emit_lost(self.lost_frames.released(t, e))
            if e.ev in ("bad", "drop", "gap"):
                continue  # counted per board below, not ring events
            self._emit(e.to_trace(t))
        if final:
            self._emit_lost(self.lost_frames.take())

    def _emit_lost(self, frames):
        for t, sent_t, s in frames:
            self._emit(Event(t, "lost", s.board, s.link, s.kind, s.payload, {"sent_t": sent_t}))

    def _emit(self, ev):
        self.checker.feed(ev)
        if self.writer is not None:
            self.writer(ev)
        if self.listener is not None:
            self.listener(ev)

    def close(self):
        for link in self.links:
            link.close()
