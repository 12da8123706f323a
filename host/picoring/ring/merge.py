"""CausalMerger: the boards' event streams in one order, each board's own order kept and
no receive before its send (the ordering rules are described in harness.py)."""

from collections import deque


class CausalMerger:
    """Merges per-board event streams into one order (see harness.py's module doc)."""

    def __init__(self, n, window_us=150_000, stall_us=2_000_000):
        self.n = n
        self.window_us = window_us
        self.stall_us = stall_us
        self.queues = [deque() for _ in range(n)]
        self.sent = [0] * n  # released sends per link (link i: node i -> i+1)
        self.received = [0] * n
        self.last_t = 0
        self.forced = 0  # recvs released without their send (events lost)
        self.forced_links = [0] * n  # the same, per link
        # links whose sender lost send events of unknown number (its USB link was down): their
        # counts no longer pair, so their receives are placed by time (and counted as forced)
        self.unpaired = [False] * n
        # per board: the latest time it is known to have reached (its events, its pongs). A
        # receive whose send has not come is forced only once its sender was heard from past
        # it: on a busy machine one board's USB output was seen held back for seconds while
        # the next board's came through, and its sends were only late, not lost.
        self.heard = [None] * n
        self.give_up_us = 15 * stall_us  # ... or when this much wall time has passed (a silent sender)
        self.pushed = [None] * n  # per board: the time of its latest event (its own order is kept)
        self.latest = None  # the latest time of any board's own event pushed so far

    def unpair(self, link):
        self.unpaired[link] = True

    def hear(self, board, t):
        """Board `board` was running at time t (a pong's tick, in the merger's time)."""
        if self.heard[board] is None or t > self.heard[board]:
            self.heard[board] = t

    def push(self, board, t, event, counted=True, not_before=None):
        """counted=False: the event only pairs its link (before the run); release() skips it.
        not_before: a time the event is known to come after (it is placed just past it)."""
        if not_before is not None and t <= not_before:
            t = not_before + 1
        if self.pushed[board] is not None and t < self.pushed[board]:
            t = self.pushed[board]  # a clock estimate that moved back: the board's order is the truth
        self.pushed[board] = t
        self.queues[board].append((t, event, counted))
        if getattr(event, "tick_us", None) is not None:  # the board's own event (not a host notice)
            self.hear(board, t)
            if self.latest is None or t > self.latest:
                self.latest = t

    def _ready(self, board, event):
        if event.ev != "recv":
            return True
        link = (board - 1) % self.n
        return self.unpaired[link] or self.sent[link] > self.received[link]

    def release(self, now, final=False):
        """Events that can be placed now, in order, as (t, BoardEvent)."""
        out = []
        horizon = None if final else now - self.window_us
        while True:
            best = None
            blocked_oldest = None
            for b, q in enumerate(self.queues):
                if not q:
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
            if best is None:
                if blocked_oldest is None:
                    return out
                t, b = blocked_oldest
                # A recv whose send never came: lost events. Place it rather than stall.
                sender = (b - 1) % self.n
                heard_past = self.heard[sender] is not None and self.heard[sender] > t + self.window_us
                if final or (horizon is not None and t < now - self.stall_us and heard_past) or (
                        horizon is not None and t < now - self.give_up_us):
                    self.forced += 1
                    self.forced_links[(b - 1) % self.n] += 1
                    best = blocked_oldest
                else:
                    return out
            t, b = best
            _, e, counted = self.queues[b].popleft()
            if e.ev == "send":
                self.sent[b] += 1
            elif e.ev == "recv":
                self.received[(b - 1) % self.n] += 1
                if self.unpaired[(b - 1) % self.n] and best is not blocked_oldest:
                    self.forced += 1
                    self.forced_links[(b - 1) % self.n] += 1
            if not counted:
                continue
            t = max(t, self.last_t)
            self.last_t = t
            out.append((t, e))
