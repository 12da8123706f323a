"""CausalMerger: the boards' event streams in one order, each board's own order kept and
no receive before its send (the ordering rules are described in harness.py)."""

from collections import deque

from .hostlink import SEQ_PERIOD, BoardEvent, TickUnwrapper


_AGAIN = object()  # _unblock placed nothing (it counted a lost send, or ended a board's part): look again


class CausalMerger:
    """Merges per-board event streams into one order (see harness.py's module doc)."""

    def __init__(self, n, window_us=150_000):
        self.n = n
        self.window_us = window_us
        self.queues = [deque() for _ in range(n)]
        self.sent = [0] * n  # released sends per link (link i: node i -> i+1)
        self.received = [0] * n
        self.last_t = 0
        self.forced = 0  # recvs released without their send (events lost)
        self.forced_links = [0] * n  # the same, per link
        # links whose sender lost send events of unknown number (its USB link was down): their
        # counts no longer pair, so their receives are placed by time (and counted as forced)
        self.unpaired = [False] * n
        # per board: its event stream showed a gap, or it restarted (events_lost). A send of
        # its may then never come: a receive in a cycle of waiting receives (_unblock) on its
        # link out is the one placed without its send. Never a clock estimate: a send that has
        # not come is late as far as any estimate can tell (an emulated Pico's clock lags its
        # estimate under load by more than any window; receives forced so made 1 to 3
        # unexplained "order" conditions in 3 of 5 runs, and a restarted board's receives
        # forced after 2 s, while its clock offset was awaited, made 5 false safety violations).
        self.lossy = [False] * n
        self.held = {}  # board -> since when its link counts are awaited: nothing is released meanwhile (hold)
        self.lost_frames = [0] * n  # per link: frames its receiver counted lost (gap events)
        # per link: (count index, link sequence byte) of its released sends not yet received,
        # for a receiver's first frame after a restart (gap events with "first")
        self.unreceived = [deque(maxlen=1024) for _ in range(n)]
        self.restarted_sender = [False] * n  # per link: its sender restarted, no gap on it since (sender_restarted)
        # callable(t, send) for each send from before the run released (not in the trace): the
        # run's LostFrames, so that a frame sent before its sender's start of the run and lost
        # after its receiver's is found (each board's start is its own !flush reply)
        self.send_before_run = None
        # boards whose part of the trace ended at the final release, before a receive whose send
        # may have been made past the end (_unblock); their events from there on are left out
        self.ended = set()

    def sender_restarted(self, board):
        """Board `board` restarted: it numbers the frames it sends from 0 again, so the next
        gap on its link out counts link sequence bytes skipped against the old incarnation's.
        That gap pairs with the send that carried its frame's byte instead. (When the gap
        reached the host before the restarted board's hello, under load, it counted 216
        frames lost, the link's receives then waited for sends that never came and were
        forced one by one: 85 to 116 in loaded runs of the power-cycle test, 76 false safety
        violations.) A receive clears nothing: the next board's receives of the old
        incarnation's frames may still come before the gap."""
        self.restarted_sender[board] = True

    def unpair(self, link):
        self.unpaired[link] = True

    def repair(self, board, lost_sends, lost_receives, eseq=None, t=None):
        """Board `board` says how many frames it sent and received whose events never came
        (LinkTally), made before its event numbered eseq (its status's): both its links pair
        by counts again, with those frames counted where the board made them, by a credit in
        its stream (lost_credit) after its events numbered before eseq. (Counted at once, as
        they were, the next board's receives paired with them ahead of the board's own
        earlier events, still held with its queue: a false "two tokens?" in every run of
        `run --virtual 3 -p q ... --faults unplug=2@1s:600ms`.) eseq None: after everything
        of it that came. t: the credit's time (default: the latest released; only its place in
        the board's order matters, it is not in the output)."""
        self.pair_again(board)
        credit = lost_credit(board, lost_sends, lost_receives)
        insert_credit(self.queues[board], (self.last_t if t is None else t, credit, False), eseq)

    def pair_again(self, board):
        """Both links of board `board` pair by counts again, and nothing waits for it (repair
        without its credit: the caller puts that among the board's events not pushed yet)."""
        self.unpaired[board] = False
        self.unpaired[(board - 1) % self.n] = False
        self.held.pop(board, None)

    def hold(self, board, since=None):
        """Release nothing (final release aside) until repair() or unhold() of `board`: its
        events are being lost, and the counts its links pair by are off until it says how
        many. Nothing at all: were only its events held, a link whose counts are off for
        another reason (a corrupted frame) would let the next board's run ahead of them."""
        self.held.setdefault(board, since)

    def unhold(self, board):
        self.held.pop(board, None)

    def events_lost(self, board):
        """Board `board`'s event stream has a gap: a send of it may never come (lossy)."""
        self.lossy[board] = True

    def push(self, board, t, event, counted=True):
        """counted=False: the event only pairs its link (before the run); release() skips it."""
        self.queues[board].append((t, event, counted))

    def _ready(self, board, event):
        if event.ev == "recv":
            link = (board - 1) % self.n
            return self.unpaired[link] or self.sent[link] > self.received[link]
        if event.ev == "gap":  # the lost frames' sends come first: they were sent before
            link = (board - 1) % self.n
            if self.unpaired[link]:
                return True
            if event.aux.get("first") or self.restarted_sender[link]:
                return self._send_with_lseq(link, event.aux["lseq"]) is not None
            return self.sent[link] >= self.received[link] + event.aux["lost"]
        if event.ev == "credit":  # a lost receive can be counted (its send is in), or only sends are left
            link = (board - 1) % self.n
            return not event.aux["receives"] or self.unpaired[link] or self.sent[link] > self.received[link]
        return True

    def _send_with_lseq(self, link, lseq):
        """The count index of the oldest released, unreceived send on the link that carried
        link sequence byte lseq, or None."""
        for i, s in self.unreceived[link]:
            if i >= self.received[link] and s == lseq:
                return i
        return None

    def _unblock(self, blocked, now, horizon, final):
        """Nothing is ready, and blocked = (t, board) is the oldest receive (or gap) waiting for
        its send: what to release now, (t, board, forced), or None (wait)."""
        if blocked is None:
            return None
        # Its send is here, later than the horizon by its board's clock estimate (an emulated
        # Pico's clock lags when the machine is busy): the send and what its board did before
        # it come first, whatever the estimate says. The sender's first event may itself be a
        # receive waiting for its own sender's send, beyond the horizon in turn (3 emulated
        # Picos under D forced receives so, 4 runs in 5): go up the ring to the first board
        # that can move.
        t, waiting = blocked
        cycle = []  # (t, board) of each receive waiting on a board whose send is queued behind it
        for _ in range(self.n):
            up = (waiting - 1) % self.n
            q = self.queues[up]
            if up in self.ended or not q or not any(e.ev == "send" or e.ev == "credit" and e.aux["sends"]
                                                    for _, e, _ in q):
                # up's send has not come. It is late, or lost with events of up's that never
                # came; either way up sends again before long (it goes on running, or it
                # restarted and rejoins), and a lost one then shows as the cycle below. Until
                # then, or the run's final release, the receive waits: no clock estimate can
                # tell late from lost (a restarted board's first events wait for its clock
                # offset; a pty held a board's output back 8 s under load).
                if not final:
                    return None
                if up in self.ended or self.queues[waiting][0][1].after_sender_flushed:
                    # At the end: the receive reached the host after its sender's last flush,
                    # so its send may have been made after it (a token that never rests goes
                    # on while the host flushes one board after another), or its send is past
                    # where up's part ended. The trace ends before it on this board: placed
                    # without its send, it was a false "order" condition (RingRun._finish).
                    self.ended.add(waiting)
                    return _AGAIN
                break
            if self._ready(up, q[0][1]):
                return q[0][0], up, False
            cycle.append((t, waiting))
            t, waiting = q[0][0], up  # up's first event waits in turn
        else:
            # Every board waits for a send queued behind its own waiting receive: by the link
            # counts, each receive's send came after it. Only a lost send explains that (counts
            # shifted by one), and no event to come can undo it: the receive on a link out of a
            # board that lost events is placed by time, else the oldest.
            for _, b in cycle:
                credit = self.queues[b][0][1]
                if credit.ev == "credit" and credit.aux["sends"]:
                    # b's lost receives still to count wait for sends that came after a send
                    # of b's lost ones: that send is counted first (_credit), and nothing is
                    # placed without its send.
                    credit.aux["sends"] -= 1
                    self.sent[b] += 1
                    return _AGAIN
            lossy = [c for c in cycle if self.lossy[(c[1] - 1) % self.n]]
            t, waiting = min(lossy or cycle)
            up = (waiting - 1) % self.n
        self.forced += 1
        self.forced_links[up] += 1
        return t, waiting, True

    def _count(self, b, e, forced):
        """The link counts after board b's event e is released (forced: without its send)."""
        link = (b - 1) % self.n  # the link into board b
        if e.ev == "send":
            if e.lseq is not None:
                self.unreceived[b].append((self.sent[b], e.lseq))
            self.sent[b] += 1
        elif e.ev == "gap":
            # Frames the board never received (bad, or lost whole): as received, so that the
            # link's next receive pairs with its own send. Counted from the link sequence bytes
            # skipped, or, when they do not count (the receiver's first frame since it started,
            # or the sender's since it did), up to the send that carried the frame's byte.
            i = None
            if (e.aux.get("first") or self.restarted_sender[link]) and not self.unpaired[link]:
                i = self._send_with_lseq(link, e.aux["lseq"])
            elif not e.aux.get("first"):
                i = self.received[link] + e.aux["lost"]
            self.restarted_sender[link] = False
            if i is not None:
                self.lost_frames[link] += i - self.received[link]
                self.received[link] = i
        elif e.ev == "recv":
            self._count_receives(link, 1)
            if self.unpaired[link] and not forced:
                self.forced += 1
                self.forced_links[link] += 1

    def _credit(self, b, e, forced=False):
        """Board b's credit (lost_credit) at the head of its queue counts what it can: the lost
        receives whose sends are in (forced: one without), then, with none left, the lost
        sends; it leaves the queue when all is counted. The board's order of its lost sends
        and receives is unknown: a send is counted before the receives still to come only
        when a cycle shows it came first (_unblock), so that no receive at the next board
        pairs with it ahead of a send it followed."""
        link = (b - 1) % self.n
        left = e.aux["receives"]
        k = left if self.unpaired[link] else min(left, self.sent[link] - self.received[link])
        if forced:
            k = max(k, 1)
        if k > 0:
            e.aux["receives"] = left - k
            self._count_receives(link, k)
        if not e.aux["receives"]:
            self.sent[b] += e.aux["sends"]
            self.queues[b].popleft()

    def _count_receives(self, link, k):
        self.received[link] += k
        q = self.unreceived[link]
        while q and q[0][0] < self.received[link]:
            q.popleft()

    def release(self, now, final=False):
        """Events that can be placed now, in order, as (t, BoardEvent)."""
        out = []
        horizon = None if final else now - self.window_us
        if self.held and not final:
            return out
        while True:
            best = None
            blocked_oldest = None
            for b, q in enumerate(self.queues):
                if not q or b in self.ended:
                    continue
                t, e, _ = q[0]
                if horizon is not None and t > horizon:
                    continue
                if not self._ready(b, e):
                    if blocked_oldest is None or t < blocked_oldest[0]:
                        blocked_oldest = (t, b)
                    continue
                if best is None or t < best[0]:
                    best = (t, b)
            forced = False
            if best is None:
                unblocked = self._unblock(blocked_oldest, now, horizon, final)
                if unblocked is None:
                    return out
                if unblocked is _AGAIN:
                    continue
                t, b, forced = unblocked
            else:
                t, b = best
            e = self.queues[b][0][1]
            if e.ev == "credit":
                self._credit(b, e, forced)
                continue
            _, e, counted = self.queues[b].popleft()
            self._count(b, e, forced=forced)
            if not counted:
                if e.ev == "send" and self.send_before_run is not None:
                    self.send_before_run(t, e)
                continue
            t = max(t, self.last_t)
            self.last_t = t
            out.append((t, e))


def lost_credit(board, sends, receives):
    """The merger's stand-in for the frames board `board` sent and received whose events were
    lost: released in the board's order, it counts them for its links (never in the trace)."""
    return BoardEvent(board, None, None, "credit", aux={"sends": sends, "receives": receives})


def insert_credit(entries, entry, eseq):
    """Inserts entry (whose [1] is a lost_credit) into a board's queued entries (each with its
    BoardEvent at [1], in the board's order) before the first event numbered eseq or later: the
    lost frames were made before the board's status (event eseq) and after every event of it
    that reached the host before it. The sends after it carry link sequence bytes that many
    frames on. eseq None: at the end."""
    i = len(entries)
    if eseq is not None:
        for k, queued in enumerate(entries):
            e = queued[1]
            if e.seq is not None and (e.seq - eseq) % SEQ_PERIOD < SEQ_PERIOD // 2:
                i = k
                break
    sends = entry[1].aux["sends"]
    for k in range(i, len(entries)):
        e = entries[k][1]
        if e.ev == "send" and e.lseq is not None:
            e.lseq = (e.lseq + sends) & 0xFF
    entries.insert(i, entry)


class LinkTally:
    """A board's send and receive events counted from its !zero on, so that after a USB
    outage the host can tell how many frames it sent and received whose events went
    nowhere: its status's tx_frames and rx_frames (zeroed by !zero, whose reply names the
    event number it zeroed at) less the events that reached the host before the status's
    event number. The merger then pairs both its links by counts again (module doc)
    instead of by clock estimates for the rest of the run, which once ordered an entry
    before the one it followed."""

    def __init__(self, from_boot=False):
        """from_boot: the board has just restarted, so its counters and its event numbers both
        start at 0 (no !zero needed)."""
        self.unwrap = TickUnwrapper(SEQ_PERIOD)
        # event number (unwrapped) of the !zero, or the boot's (0); None: not known (old firmware)
        self.since = self.unwrap(0) if from_boot else None
        self.counts = {"send": 0, "recv": 0}  # events numbered since then
        self.recent = {"send": deque(maxlen=4096), "recv": deque(maxlen=4096)}  # their numbers, the latest ones

    def event(self, e):
        u = self.unwrap(e.seq)
        ev, k = e.ev, 1
        if ev == "gap":  # frames the board never received: on the receive side of its link in
            ev, k = "recv", e.aux["lost"]
        if ev in self.counts and self.since is not None and u >= self.since:
            self.counts[ev] += k
            self.recent[ev].append((u, k))

    def zeroed(self, reply):
        parts = reply.text.split()
        if len(parts) == 1 and parts[0].isdigit():
            self.since = self.unwrap(int(parts[0]) % SEQ_PERIOD)
            for ev in self.counts:
                self.counts[ev] = 0
                self.recent[ev].clear()

    def lost(self, status, ev="send"):
        """Frames sent (ev "send") or received ("recv") before the status whose events never
        came, or None: unknown. Received frames include the ones the board counted lost on
        its link in (status "lost": the gap events' sum)."""
        frames, eseq = status.get("tx_frames" if ev == "send" else "rx_frames"), status.get("eseq")
        if self.since is None or not isinstance(frames, int) or not isinstance(eseq, int):
            return None
        if ev == "recv":
            frames += status.get("lost", 0)
        upto = self.unwrap(eseq % SEQ_PERIOD)
        seen = self.counts[ev]
        for u, k in reversed(self.recent[ev]):  # the ones made after the status (before its flush)
            if u < upto:
                break
            seen -= k
        lost = (frames - seen) % COUNT_PERIOD
        return lost if lost < COUNT_PERIOD // 2 else None  # more seen than made: not understood

    def settle(self, status):
        """(lost sends, lost receives) before the status, each counted once: a second outage's
        answer then gives only what was lost since (the merger adds them up). None: unknown."""
        lost_tx, lost_rx = self.lost(status, "send"), self.lost(status, "recv")
        if lost_tx is None or lost_rx is None:
            return None
        self.counts["send"] += lost_tx
        self.counts["recv"] += lost_rx
        return lost_tx, lost_rx


# The firmware's frame counters wrap at 2**30 (small ints on the rp2 port).
COUNT_PERIOD = 1 << 30


class LostFrames:
    """The frames each link lost, from its receiver's gap events (docs/trace-format.md "lost"),
    fed every event in the order the merger releases them.

    A gap says how many frames its link lost and the link sequence byte of the frame after
    them (docs/frames.md, "Lost frames"); the lost ones are the sender's sends with the bytes
    it skipped. The gap is released when the receiver's events are, maybe before the sender's
    sends of those frames (its USB output late on a loaded machine): it waits for the
    receiver's next receive, the frame after the gap's, which the merger releases only after
    that frame's send, and so after theirs."""

    def __init__(self, n):
        self.n = n
        self._recent = [{} for _ in range(n)]  # per sender: lseq -> (t, send), its last 256
        self._gaps = [[] for _ in range(n)]  # per receiver: (t, gap) waiting for its next receive

    def restarted(self, board):
        """board starts numbering its sends from 0 again (its boot)."""
        self._recent[board].clear()

    def sent_before_run(self, t, e):
        """A send from before the run (its sender's !flush reply), released at host time t: a
        frame the receiver may lose once its run has begun (CausalMerger.send_before_run)."""
        if e.lseq is not None:
            self._recent[e.board][e.lseq] = (t, e)

    def released(self, t, e):
        """Feed one released event; returns the lost frames known now, [(gap's t, sent t, send)]."""
        if e.ev == "send" and e.lseq is not None:
            self._recent[e.board][e.lseq] = (t, e)
        elif e.ev == "gap":
            self._gaps[e.board].append((t, e))
        elif e.ev == "recv" and self._gaps[e.board]:
            return self.take(e.board)
        return []

    def take(self, board=None):
        """The lost frames of the gaps waiting at board (None: at every board)."""
        out = []
        for b in range(self.n) if board is None else (board,):
            gaps, self._gaps[b] = self._gaps[b], []
            recent = self._recent[(b - 1) % self.n]
            for t, gap in gaps:
                aux = gap.aux or {}
                if aux.get("first") or not aux.get("lost"):
                    continue  # a receiver's first frame since it started: how many were lost is not known
                for back in range(min(aux["lost"], 255), 0, -1):
                    found = recent.pop((aux["lseq"] - back) & 0xFF, None)
                    if found is not None:
                        out.append((t, found[0], found[1]))
        return out
