"""One board's stream into a run (ring/harness.py): BoardStream places what the board said into
the causal merger at its host time, in the board's own order, numbered and counted for its
links; it follows the board's USB outages and restarts and the state query that resyncs the
host with it afterwards. Pings keeps the boards' clock offsets fresh (their answers are the
streams' clock samples) and says when the boards answer too slowly for the run's stall clock
to run.

The link (link.py) reads and parses the board's lines (hostlink.py) in its own thread; the
run loop hands each item to its board's stream (RingRun._take); what the stream places, the
merger (merge.py) releases in causal order to the run's notifier (notify.py).
"""

from .hostlink import BoardEvent, encode_command
from .link import HarnessError, drain
from .merge import LinkTally, insert_credit, lost_credit
from .runreport import UNSEEN_IN_OUTAGE

# The frames whose start-up history pairs the links (harness.py's module doc). A ring forms by
# claim frames while its boards restart one after another, and a board that is stopped or
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
# Those of a board's start-up that the report counts (BoardStream.start_up): what the forming did
# to the token and its links.
START_UP_COUNTED = ("regen", "discard", "timeout", "gap", "bad", "drop")

PING_EVERY_US = 500_000


class BoardStream:
    """Board `index`'s events on their way from its link into the merger (one per board).

    t0: host us of the run's start (trace time 0). record: the run's RunRecord (notices and
    link events go there). lost_frames: the run's LostFrames (a board's boot restarts its
    send numbering there)."""

    def __init__(self, index, link, n, merger, record, lost_frames, t0):
        self.index = index
        self.link = link
        self.port = link.port
        self.n = n
        self.merger = merger
        self.record = record
        self.lost_frames = lost_frames
        self.t0 = t0
        self.send_lseq = 0  # the link sequence byte of its next send (number_send)
        self.tally = LinkTally()
        # events waiting for the board's clock offset (after a restart), in order, as
        # (host us it arrived, BoardEvent, counted, host time or None)
        self.unplaced = []
        # a state query after a USB outage, in flight: {"sent": host us, "status": the !status
        # fields once they came, "after": requests written to the board since the query}
        self.resync = None
        self.resync_due = False  # its events were lost in a USB outage: ask it its state
        self.in_run = False  # its reply to the run's first !flush came: its events are the run's
        self.since_boot = []  # start-up events since its last hello (before the run)
        # What its start-up did to the token, for the report: {event: count} of its
        # START_UP_COUNTED events since its last hello, and when its run began (its flush
        # reply, host us from t0: its frames before then are start-up, not the trace's)
        self.start_up = {}
        self.run_from_us = None
        self.restarts = 0
        self.bad_events = {}  # {reason: bad-frame events seen}
        self.final_status = None  # its !status fields at the end of the run
        self.unseen_in_outage = 0  # requests failed by resynced()

    # -- every event, in the run or after it --
    def arrived(self, e):
        """What every event does as it reaches the host: counted for its links (LinkTally), a
        send numbered (number_send), and a gap before it told to the merger (a send of this
        board's may never come: CausalMerger.lossy)."""
        self.tally.event(e)
        self.number_send(e)
        if self.link.parser.missing:
            self.merger.events_lost(self.index)

    def number_send(self, e):
        """A board numbers the frames it sends from its start (link sequence bytes, 0 first):
        so does the host, from its hello or boot event, for a restarted receiver's first
        frame (CausalMerger)."""
        if e.ev == "boot":
            self.send_lseq = 0
            self.lost_frames.restarted(self.index)
        elif e.ev == "send":
            e.lseq = self.send_lseq
            self.send_lseq = (self.send_lseq + 1) & 0xFF

    def before_run(self, t_rx, item, is_hello, is_flush):
        """An item from before the board's reply to the run's first !flush: the start-up events
        since its hello are kept, and placed (uncounted) once the flush reply comes: each
        board's token frames since its hello pair the links (harness.py's module doc)."""
        if isinstance(item, BoardEvent) and item.ev in MERGED_EVENTS:
            self.since_boot.append(item)
        elif is_hello:
            self.since_boot = []  # what came before is another incarnation's
            self.tally = LinkTally()
        elif is_flush:
            self.in_run = True
            self.run_from_us = t_rx - self.t0
            for e in self.since_boot:
                if e.ev in START_UP_COUNTED:
                    self.start_up[e.ev] = self.start_up.get(e.ev, 0) + 1
                if e.ev in ("send", "recv") and e.kind not in PAIRED_FROM_BOOT or e.ev == "gap":
                    continue  # (a gap before the run: start-up claims a booting board missed)
                # (a res event before the run is the host setting the FRAM counter: the
                # run's count starts there, so it is part of the trace)
                self.place(t_rx, e, counted=e.ev == "res")
            self.since_boot = []

    def count_bad(self, e):
        reason = e.aux if isinstance(e.aux, str) else "?"
        self.bad_events[reason] = self.bad_events.get(reason, 0) + 1

    # -- into the merger --
    def place(self, t_rx, e, counted=True, host_t=None):
        """Into the merger at the host time of its board tick (host_t: the host's own event),
        or held, in the board's order, while the board's clock offset is unknown."""
        if self.link.offset is None or self.unplaced:
            self.unplaced.append((t_rx, e, counted, host_t))
            return
        self.merger.push(self.index, self.link.host_time(e.tick_us) - self.t0 if host_t is None else host_t, e,
                         counted)

    def place_unplaced(self):
        held, self.unplaced = self.unplaced, []
        link = self.link
        for t_rx, e, counted, host_t in held:
            if host_t is None:
                # no clock for it (the run ended first): when it reached the host, a bound
                host_t = (link.host_time(e.tick_us) if link.offset is not None else t_rx) - self.t0
            self.merger.push(self.index, host_t, e, counted)

    def notice(self, t, word, text):
        """Something the host saw happen to the board, for the trace and the report."""
        self.record.notices.append(text)
        self.record.link_events.append({"t": t, "board": self.index, "what": word, "text": text})
        self.place(None, BoardEvent(self.index, None, None, "notice", aux={"what": word, "text": text}), host_t=t)

    def stood_still(self, t, since):
        """At host time t: the ring's pings went unanswered past their grace from host time since
        on (Driver.take_stood_still); a notice for the trace only (the report says it as a run
        condition)."""
        self.place(None, BoardEvent(self.index, None, None, "notice", aux={"what": "stood still", "since": since}),
                   host_t=t)

    def fail(self, t, why, k):
        """k requests of the board's reported failed, at host time t."""
        for _ in range(k):  # (the checker counts the ones whose req it saw; the report the rest)
            self.place(None, BoardEvent(self.index, None, None, "fail", aux={"reason": why}), host_t=t)

    def clock_sample(self, t_rx, reply, t_sent):
        """A pong: the board's clock offset from it when it came quickly (a slow answer says
        little about it), and the events that waited for an offset placed."""
        link = self.link
        if t_sent < link.booted_at:
            return  # sent to an earlier incarnation: its answer may come from either clock
        rtt = t_rx - t_sent
        tick = link.unwrap(int(reply.text.split()[1]))
        if link.offset is None:  # a restarted board: the first sample of its new clock, however slow
            link.rtt = rtt
        if rtt <= max(2 * (link.rtt or 0), 2000):
            link.offset = tick - (t_sent + t_rx) // 2
            link.clock_sampled((t_sent + t_rx) // 2, tick, rtt)
            if self.unplaced:
                self.place_unplaced()

    # -- outages and restarts --
    def link_changed(self, now, notice):
        """The USB link went away or came back (the board may run on meanwhile); now: host us."""
        self.notice(now - self.t0, notice.word, notice.text)
        self.resync = None  # a query in flight went with the link: asked again
        if notice.word == "reconnected":
            self.resync_due = True  # what it did meanwhile may never reach the host
        elif self.tally.since is not None:
            self.merger.hold(self.index, now)  # until it says how many frames it sent and received
        else:
            self.unpair()

    def ask_after_outage(self, now, after=0):
        """Ask the board its state, then flush it, without waiting: the run loop takes the
        replies from the inbox, and applies the state when the flush reply comes, after every
        event the board made before the state (so a request it served in between was still
        pending in that state: resynced). Requests written after the query are counted in
        the query's "after": the board's answer cannot know them. (Waiting here, up to seconds
        on a busy machine, stopped the run loop and its stall clock kept running.)"""
        self.resync = {"sent": now, "status": None, "after": after}
        self.link.write(encode_command("status"))
        self.link.write(encode_command("flush"))
        if not self.link.connected:
            self.resync = None  # gone again: asked again when it is back

    def resync_reply(self, item, t, outstanding):
        """A reply that answers the state query in flight; returns (consumed, requests failed).
        The status is kept; its flush reply, after every event the board made before the
        status, applies it (resynced, then its link counts settled)."""
        query = self.resync
        if query is None:
            return False, 0
        if item.word == "status" and query["status"] is None:
            query["status"] = item.fields
            return True, 0
        if item.word == "flush" and query["status"] is not None:
            self.resync = None
            failed = self.resynced(query["status"], outstanding, t, query["after"])
            lost = self.tally.settle(query["status"])
            if lost is not None:
                self.repair(lost, query["status"])
            return True, failed
        return False, 0

    def resynced(self, status, outstanding, t, after=0):
        """Requests the host counts outstanding (outstanding) at a board that has none pending
        nor in its critical section: their events were lost with the USB link (or the request
        itself was, written just before the link went). Failed, with that reason. Returns how
        many. after: requests written to the board after it was asked (not in its answer)."""
        if isinstance(status.get("eseq"), int) and isinstance(status.get("pending"), int) and not status.get("dropped"):
            # events lost with nothing after them to show the gap
            lost = self.link.parser.expect_next(status["eseq"] - status["pending"])
            if lost:
                self.events_lost(t, lost)
        k = outstanding - after
        if k <= 0 or status.get("pend") or status.get("cs"):
            return 0
        self.unseen_in_outage += k
        self.fail(t, UNSEEN_IN_OUTAGE, k)
        self.record.notices.append("%s: %d request(s) failed: %s" % (self.port, k, UNSEEN_IN_OUTAGE))
        return k

    def events_lost(self, t, k):
        """k of the board's events went nowhere while its USB link was down: the checker is told
        there. Its links wait for the state query that follows (LinkTally: how many of them
        were sends and receives), or, when the board cannot say, are paired by time from now on."""
        self.notice(t, "events lost", "%s: %d events were lost while its USB link was down" % (self.port, k))
        self.merger.events_lost(self.index)
        if self.tally.since is None:
            self.unpair()

    def repair(self, lost, status):
        """The board's frames sent and received whose events were lost before its status
        (LinkTally.settle: lost = (sends, receives)): counted where it made them, among its
        events (CausalMerger.repair), and its sends from now on numbered past them."""
        eseq = status.get("eseq") if isinstance(status.get("eseq"), int) else None
        if self.unplaced:  # its events wait for its clock offset: the credit waits among them
            self.merger.pair_again(self.index)
            insert_credit(self.unplaced, (None, lost_credit(self.index, *lost), False, self.merger.last_t), eseq)
        else:
            self.merger.repair(self.index, *lost, eseq=eseq)
        self.send_lseq = (self.send_lseq + lost[0]) & 0xFF

    def unpair(self):
        """The board's sends and receives can no longer be paired by counts: the receives on its
        link out (at the next board) and on its link in (its own) are placed by time from now
        on (reported: causal_forced, run condition "order")."""
        self.merger.unhold(self.index)
        self.merger.unpair(self.index)
        self.merger.unpair((self.index - 1) % self.n)

    def restarted(self, t, t_rx, failed):
        """The board said hello: it restarted (power cycle, reset) and rejoins the ring by
        itself; the `failed` requests it had pending are gone with its memory: reported failed."""
        # Its counters and event numbers start again at 0: events of it lost from here on (its
        # first output, before the host reopened its port, is dropped when that takes long, as
        # under load) are counted by asking it, as after any USB outage. (With the tally
        # unknown, its links were paired by time for the rest of the run: 100 to 134 receives
        # forced, 82 and 89 false safety violations in two loaded suite runs.)
        self.tally = LinkTally(from_boot=True)
        self.merger.unhold(self.index)
        self.merger.sender_restarted(self.index)  # its link sequence bytes start again at 0
        self.merger.events_lost(self.index)  # the old incarnation's events not yet flushed died with it
        self.place_unplaced()  # the previous incarnation's, before its clock is forgotten
        self.link.board_restarted(t_rx)
        self.restarts += 1
        text = "%s: the board restarted; it rejoins the ring" % self.port
        if failed:
            text += "; its pending request is reported failed"
        self.fail(t, "board restarted", failed)
        self.notice(t, "restarted", text)

    # -- at the end --
    def align_restarted(self):
        """A board that restarted and has not answered a ping since is asked now; its events
        still waiting for a clock are placed."""
        link = self.link
        if link.offset is None and link.connected:
            drain(link.replies)
            try:
                link.align(samples=3)
            except HarnessError as e:
                self.record.notices.append("%s: its clock could not be aligned after its restart: %s" % (link.port, e))
        if self.unplaced:
            if link.offset is None:
                self.record.notices.append("%s: %d events placed at the time they reached the host (no clock sample "
                                           "since the board restarted)" % (link.port, len(self.unplaced)))
            self.place_unplaced()

    def final_state(self, t, take_last):
        """The board's counters (bad frames by reason, frames received) since the run's !zero;
        and the events it made that never arrived, when no later event showed the gap. A board
        whose counts the merger still awaits after a USB outage (its state query unanswered
        when the run ended) is settled here: its status, then a flush, so that every event it
        made before the status is in (take_last: places what came meanwhile)."""
        link = self.link
        held = self.index in self.merger.held
        try:
            _, reply = link.command("status")
            if held:
                link.command("flush")
        except HarnessError as e:
            self.record.notices.append("%s: no final status: %s" % (link.port, e))
            return
        f = self.final_status = reply.fields
        if held:
            take_last()
            lost = self.tally.settle(f)
            if lost is not None:
                self.repair(lost, f)
            else:
                self.unpair()
        if isinstance(f.get("eseq"), int) and isinstance(f.get("pending"), int) and not f.get("dropped"):
            in_outages = link.parser.missing_in_outages
            lost = link.parser.expect_next(f["eseq"] - f["pending"])
            if lost and link.parser.missing_in_outages > in_outages:
                self.events_lost(t, lost)


class Pings:
    """The run's pings: every PING_EVERY_US to each connected board that owes no answer to an
    earlier one. Their answers keep the clock offsets fresh (crystals drift: ~50 ppm is 3 ms a
    minute), and a round unanswered for longer than a grace stops the run's stall clock
    (Driver.step): the boards, or this machine, did not keep up."""

    def __init__(self, links, t0):
        self.links = links
        self.sent = {}  # round -> host us it was sent
        self.pending = {}  # round -> (sent at, boards still to answer)
        self.next_at = t0 + PING_EVERY_US
        self.k = 100

    def answered(self, b, reply):
        parts = reply.text.split()
        k = int(parts[0]) if parts and parts[0].isdigit() else None
        if k in self.pending:
            self.pending[k][1].discard(b)
            if not self.pending[k][1]:
                del self.pending[k]

    def round_of(self, reply):
        """The host us the round a pong answers was sent, or None if it answers none."""
        parts = reply.text.split()
        if len(parts) not in (2, 3) or not parts[0].isdigit():
            return None
        return self.sent.get(int(parts[0]))

    def forget(self, b):
        """What was asked of board b before does not come back (its link went, it restarted)."""
        for k in list(self.pending):
            self.pending[k][1].discard(b)
            if not self.pending[k][1]:
                del self.pending[k]

    def late(self, now, give_up_us, grace_us):
        """Whether a round is unanswered beyond grace_us; rounds unanswered beyond give_up_us
        are forgotten first (a reply lost: the stall clock may not wait for ever)."""
        for k in [k for k, (sent, _) in self.pending.items() if now - sent > give_up_us]:
            del self.pending[k]
        return any(now - sent > grace_us for sent, _ in self.pending.values())

    def boards_to_ping(self):
        """The connected boards that owe no answer to an earlier ping."""
        waiting = set().union(*(asked for _, asked in self.pending.values()))
        return {link.index for link in self.links if link.connected and link.index not in waiting}

    def send_if_due(self, now, now_us):
        """A round to the boards that owe no answer (a board still to answer a ping gets no
        other: pings sent every 0.5 s of wall time to an emulated Pico running at 1/30 of real
        time queued up 26 deep on a loaded machine, and answering them took the chip time the
        ring needed)."""
        if now < self.next_at:
            return
        asked = self.boards_to_ping()
        if asked:
            self.sent[self.k] = now_us()
            for b in asked:
                self.links[b].write(encode_command("ping", self.k))
            asked = {b for b in asked if self.links[b].connected}
            if asked:
                self.pending[self.k] = (self.sent[self.k], asked)
            self.k += 1
        self.next_at = now + PING_EVERY_US
