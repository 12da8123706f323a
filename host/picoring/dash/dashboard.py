"""`picoring dash`: a live view of the ring's traffic, in a terminal (rich).

The Dashboard takes its rich Console, its event source and its key source as
arguments (python-can's viewer does the same with its screen and bus), so a
test drives it with a recording console and a list of events. Events go into a
DashModel as they arrive (cheap); the screen is built only at the refresh rate.

Sources. Anything iterable over Events (a list, a TraceReader) is replayed,
paced by the events' times; a FeedSource is filled by another thread through
its listener (RingRun, simulate) and is shown as it comes, or paced too.
"""

import collections
import os
import select
import sys
import threading
import time

from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from .model import IDLE, IN_CS, REQUESTING, DashModel

# Playback rate at speed 1, in trace time units per second: real time for
# board traces, 10 hops a second for the simulator (a request on a ring of 8
# takes 1-2 s: watchable).
UNITS_PER_SECOND = {"us": 1_000_000, "hop": 10}
# A quiet stretch longer than this (wall seconds at the current speed) is skipped.
MAX_GAP_S = 1.0
CHUNK = 2048  # events applied between clock checks
KIND_FILTERS = ("all", "req", "send", "recv", "cs", "token", "request")


# -- event sources -----------------------------------------------------------


class IterSource:
    """An iterable of Events (list, TraceReader) as a source: take(until_t, limit)."""

    def __init__(self, events):
        self._it = iter(events)
        self._next = None
        self.done = False
        self._advance()

    def _advance(self):
        try:
            self._next = next(self._it)
        except StopIteration:
            self._next = None
            self.done = True

    def peek_t(self):
        return None if self._next is None else self._next.t

    def take(self, until_t, limit):
        out = []
        while self._next is not None and len(out) < limit:
            t = self._next.t
            if until_t is not None and t is not None and t > until_t:
                break
            out.append(self._next)
            self._advance()
        return out


class FeedSource:
    """Events pushed from another thread (a listener), taken by the dashboard.

    max_buffered > 0 makes the producer wait while that many events are
    waiting (the simulator runs far ahead of a paced replay); the harness must
    never wait, so its feed is unbounded.
    """

    def __init__(self, max_buffered=0):
        self._q = collections.deque()
        self._max = max_buffered
        self._finished = threading.Event()
        self.closed = False  # the dashboard has quit: producers should stop
        self.error = None

    def __call__(self, event):
        if self._max:
            while len(self._q) >= self._max and not self.closed:
                time.sleep(0.002)
        self._q.append(event)

    def close(self):
        self.closed = True

    def finish(self, error=None):
        self.error = error
        self._finished.set()

    @property
    def done(self):
        return self._finished.is_set() and not self._q

    def peek_t(self):
        try:
            return self._q[0].t
        except IndexError:
            return None

    def take(self, until_t, limit):
        q = self._q
        out = []
        while q and len(out) < limit:
            t = q[0].t
            if until_t is not None and t is not None and t > until_t:
                break
            out.append(q.popleft())
        return out


def _token_fields(view, p, short=False):
    """The token frame's fields the protocol's descriptor shows (view: token_state, token_count),
    e.g. ["ACTIVE", "count 3"]; short (the event log): ["active", "c=3"]."""
    out = []
    names = view.get("token_state")
    if names:
        name = names[1 if p.get("state") else 0]
        out.append(name.lower() if short else name)
    if view.get("token_count"):
        out.append(("c=%d" if short else view["token_count"] + " %d") % p.get("count", 0))
    return out


def as_source(events):
    return events if hasattr(events, "take") else IterSource(events)


# -- keys --------------------------------------------------------------------


class TerminalKeys:
    """Keys from a terminal without blocking: cbreak mode and select on stdin.

    Not a tty (a pipe, a test): no keys. The terminal's mode is restored on
    exit, also after an exception or Ctrl-C (cbreak keeps Ctrl-C a signal).
    """

    def __init__(self, stream=None):
        self.stream = stream if stream is not None else sys.stdin
        self._saved = None
        self.interactive = False

    def __enter__(self):
        try:
            fd = self.stream.fileno()
            isatty = os.isatty(fd)
        except (AttributeError, OSError, ValueError):
            return self
        if isatty:
            import termios
            import tty

            self._fd = fd
            self._saved = termios.tcgetattr(fd)
            tty.setcbreak(fd)
            self.interactive = True
        return self

    def __exit__(self, *exc):
        if self._saved is not None:
            import termios

            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved)
            self._saved = None
        self.interactive = False

    def read(self):
        if not self.interactive:
            return []
        keys = []
        while select.select([self._fd], [], [], 0)[0]:
            data = os.read(self._fd, 64)
            if not data:
                break
            text = data.decode("utf-8", "replace")
            if text.startswith("\x1b"):
                keys.append("esc" if len(text) == 1 else None)  # arrows and the like: ignored
                continue
            keys.extend(text)
        return [k for k in keys if k]


class ScriptedKeys:
    """Keys for tests: one list of keys handed out per loop turn."""

    def __init__(self, turns):
        self._turns = collections.deque(turns)
        self.interactive = bool(turns)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def read(self):
        if not self._turns:
            self.interactive = False
            return []
        keys = self._turns.popleft()
        return list(keys) if isinstance(keys, (list, tuple)) else [keys]


# -- the dashboard -----------------------------------------------------------

_NODE_STYLE = {IDLE: "dim", REQUESTING: "bold yellow", IN_CS: "bold black on green"}
_TOKEN_STYLE = "bold white on magenta"
# frame counters that are no fault when non-zero: what MicroPython prints when the harness
# restarts a board (its banner, main.py's Ctrl-C traceback); a row of their own says what they are
_NOT_ALARMS = ("restart lines",)


class Dashboard:
    """meta: the trace header (protocol, n, time_unit, source, workload...).

    speed: playback speed (1 = real time for board traces, 10 hops/s for the
    simulator); None applies events as fast as they come (tests, benchmarks,
    a live ring). stats: optional callable -> dict of frame counters (the
    harness's lost and corrupt frames), read at render time.
    """

    def __init__(self, console, source, meta, keys=None, speed=1.0, refresh_hz=12, stats=None,
                 wait_at_end=True, clock=time.monotonic, sleep=time.sleep):
        self.console = console
        self.source = as_source(source)
        self.meta = dict(meta)
        self.model = DashModel(meta["protocol"], meta["n"], meta.get("time_unit", "hop"))
        self.keys = keys if keys is not None else ScriptedKeys([])
        self.speed = speed
        self.refresh_interval = 1.0 / refresh_hz
        self.stats = stats
        self.wait_at_end = wait_at_end
        self.clock = clock
        self.sleep = sleep
        self.paused = False
        self.finished = False
        self.finished_at = None  # clock() when the source ran out
        self.quit = False
        self.node_filter = None
        self.kind_filter = "all"
        self._typed = ""  # digits typed for a node filter
        self.play_t = None
        self.frames = 0
        self.rate = UNITS_PER_SECOND.get(self.model.time_unit, 10)

    # -- the loop -------------------------------------------------------------
    def run(self):
        """Run until the source ends (and q, on a terminal) or q. Returns the model."""
        live = None
        if self.console.is_terminal:
            live = Live(console=self.console, screen=True, auto_refresh=False, redirect_stdout=False,
                        redirect_stderr=False)
        with self.keys:
            if live is not None:
                live.start()
            try:
                self._loop(live)
            finally:
                if live is not None:
                    live.stop()
        if live is None or self.frames == 0:
            self.console.print(self.render())
        return self.model

    def _loop(self, live):
        clock = self.clock
        last = clock()
        next_frame = last
        while not self.quit:
            now = clock()
            self._advance_playback(now - last)
            last = now
            applied = self.pump(deadline=next_frame)
            keys = self.keys.read()
            for key in keys:
                self.on_key(key)
            if self.source.done and not self.finished:
                self.finished = True
                self.finished_at = now
                next_frame = now  # show the final state at once
            now = clock()
            # paused: the screen stays as it was, except to show what a key changed
            if (now >= next_frame and not self.paused) or keys:
                if live is not None:
                    live.update(self.render(), refresh=True)
                    self.frames += 1
                next_frame = now + self.refresh_interval
            if self.finished and not (self.wait_at_end and self.keys.interactive):
                break
            if not applied:
                self.sleep(max(0.0, min(next_frame - clock(), 0.01)))

    def _advance_playback(self, dt):
        if self.speed is None:
            self.play_t = None
            return
        nxt = self.source.peek_t()
        if self.play_t is None:
            self.play_t = nxt
            return
        if self.paused:
            return
        step = self.rate * self.speed
        self.play_t += dt * step
        if nxt is not None and nxt - self.play_t > MAX_GAP_S * step:
            self.play_t = nxt  # a quiet stretch: skip it

    def pump(self, deadline=None):
        """Apply the events due now, until the deadline (clock) passes. Returns the count."""
        if self.paused and not isinstance(self.source, FeedSource):
            return 0  # a replay stops where it is; a live feed keeps being absorbed (the screen freezes)
        until = None if self.speed is None else self.play_t
        if self.speed is not None and until is None:
            return 0
        apply = self.model.apply
        applied = 0
        while True:
            batch = self.source.take(until, CHUNK)
            for event in batch:
                apply(event)
            applied += len(batch)
            if len(batch) < CHUNK or (deadline is not None and self.clock() >= deadline):
                return applied

    # -- keys -----------------------------------------------------------------
    def on_key(self, key):
        n = self.model.n
        if key in ("q", "Q"):
            self.quit = True
        elif key in (" ", "p"):
            self.paused = not self.paused
        elif key == "+" and self.speed is not None:
            self.speed = min(self.speed * 2, 1e6)
        elif key == "-" and self.speed is not None:
            self.speed = max(self.speed / 2, 1 / 64)
        elif key == "n":
            self.node_filter = 0 if self.node_filter is None or self.node_filter == n - 1 else self.node_filter + 1
        elif key == "N":
            self.node_filter = n - 1 if self.node_filter in (None, 0) else self.node_filter - 1
        elif key == "k":
            self.kind_filter = KIND_FILTERS[(KIND_FILTERS.index(self.kind_filter) + 1) % len(KIND_FILTERS)]
        elif key.isdigit():
            self._typed += key
        elif key in ("\n", "\r"):
            if self._typed:
                self.node_filter = int(self._typed) if int(self._typed) < n else None
            self._typed = ""
        elif key in ("c", "esc"):
            self.node_filter = None
            self.kind_filter = "all"
            self._typed = ""

    # -- rendering ------------------------------------------------------------
    def render(self):
        """The whole screen for the console's current size."""
        width, height = self.console.size
        parts = [self._title_line(width), self._ring_picture(width)]
        nodes = self._node_table(width, height)
        if nodes is not None:
            parts.append(nodes)
        parts.append(self._figures(width))
        footer = self._footer(width)
        options = self.console.options.update(width=width)
        used = sum(len(self.console.render_lines(p, options, pad=False)) for p in parts) + 1  # + footer
        log_lines = max(height - used - 1, 1)  # - the log's own rule line
        parts.append(self._log(width, log_lines))
        parts.append(footer)
        return Group(*parts)

    def _unit(self):
        return "us" if self.model.time_unit == "us" else "hop"

    def _runs_on(self):
        """True when a pause stops the screen only: a live feed taken as it comes (a ring, or the
        simulator at --speed 0) goes on and is counted. A paced one waits for the playback."""
        return isinstance(self.source, FeedSource) and self.speed is None

    def _title_line(self, width):
        m = self.model
        meta = self.meta
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(" %s " % m.protocol.upper(), style="bold white on blue")
        text.append(" n=%d %s" % (m.n, meta.get("source", "")), style="bold")
        if meta.get("workload"):
            text.append(" %s" % meta["workload"])
        text.append("  t=%s %s" % (_num(m.t), self._unit()))
        if self.finished:
            state = ("  ■ end", "bold")
        elif self.paused and self._runs_on():  # only the screen stands still
            state = ("  ▮▮ view paused, %s runs on" % ("sim" if self.meta.get("source") == "sim" else "ring"),
                     "bold yellow")
        elif self.paused:
            state = ("  ▮▮ paused", "bold yellow")
        else:
            state = ("  ▶ live" if self.speed is None else "  ▶ x%g" % self.speed, "bold green")
        text.append(*state)
        text.append("  %s events" % _num(m.events), style="dim")
        return text

    def _ring_picture(self, width):
        m = self.model
        n = m.n
        place, where = m.token_place()
        label_w = len(str(n - 1))
        cell = label_w + 2
        link_w = 5 if n * (cell + 5) + 4 <= width else 3
        if n * (cell + link_w) + 4 <= width:
            line = Text(no_wrap=True)
            line.append("╭▶", style="dim")
            for i in range(n):
                style = _TOKEN_STYLE if place == "node" and where == i else _NODE_STYLE[m.node_state[i]]
                line.append(" %*d " % (label_w, i), style=style)
                reqs = m.requests_in_flight_on(i)
                mark = "─" * (link_w - 1) + "▶"
                if place == "link" and where == i:
                    line.append("─" * (link_w - 3), style="dim")
                    line.append("●", style="bold magenta")
                    line.append("─▶", style="dim")
                elif place == "lost" and where == i:
                    line.append("─" * (link_w - 3), style="dim")
                    line.append("×", style="bold red")
                    line.append("─▶", style="dim")
                elif reqs:
                    r = ("r%d" % reqs) if reqs < 10 else "r+"
                    line.append("─", style="dim")
                    line.append(r, style="yellow")
                    line.append("─" * (link_w - 2 - len(r)) + "▶", style="dim")
                else:
                    line.append(mark, style="dim")
            line.append("╮", style="dim")
            back = Text("╰" + "─" * (line.cell_len - 2) + "╯", style="dim", no_wrap=True)
            return Group(line, back, self._token_line(width))
        # compact: one character per node, token in magenta
        rows = []
        per_row = max(8, width - 8)
        for start in range(0, n, per_row):
            row = Text("%5d " % start, style="dim", no_wrap=True)
            for i in range(start, min(n, start + per_row)):
                if place == "node" and where == i:
                    row.append("T", style=_TOKEN_STYLE)
                elif place == "link" and where == i:
                    row.append(">", style="bold magenta")
                elif place == "lost" and where == i:
                    row.append("x", style="bold red")
                else:
                    st = m.node_state[i]
                    row.append(("·", "r", "C")[st], style=_NODE_STYLE[st])
            rows.append(row)
        rows.append(self._token_line(width))
        return Group(*rows)

    def _token_line(self, width):
        m = self.model
        place, where = m.token_place()
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("token ", style="bold magenta")
        if place == "link":
            text.append("on link %d→%d" % (where, (where + 1) % m.n))
            if m.token_dst is not None and m.token_dst != (where + 1) % m.n:
                text.append(" to node %d" % m.token_dst)  # a token message travelling several hops
        elif place == "lost":
            text.append("lost on link %d→%d, none seen since" % (where, (where + 1) % m.n), style="bold red")
        else:
            st = m.node_state[where]
            text.append("at node %d%s" % (where, " (in CS)" if st == IN_CS else ""))
            if m.token_dst is not None and m.token_dst != where:
                text.append(", passing on to node %d" % m.token_dst)
        p = m.token_payload
        if p:
            # what the token frame carried on its last hop (a node may change it before it sends it on)
            text.append("  last hop:", style="dim")
            fields = _token_fields(m.view, p)
            if fields:
                text.append(" " + ", ".join(fields), style="bold" if m.view.get("token_state") and p.get("state") else "")
            text.append("  seq %d" % p.get("seq", 0), style="dim")
        tok, req = m.in_flight()
        # on a lossy ring a lost frame is sent and never received: not in flight, gone
        label = "sent, not received" if m.checker.faults_at is not None else "in flight"
        text.append("   %s: %d token, %d request" % (label, tok, req), style="dim")
        return text

    def _node_table(self, width, height):
        m = self.model
        n = m.n
        rows = [("state", [("idle", "req", "CS")[s] for s in m.node_state])]
        if m.view.get("flags"):
            rows.append((m.view["flags"], [str(f) for f in m.flag]))
            if height > 24:  # a secondary figure: 24 lines leave the log little room already
                rows.append(("stopped", [str(x) for x in m.stopped_at]))
        rows.append(("served", [str(x) for x in m.served_by_node]))
        rows.append(("tok→", [str(x) for x in m.token_sends]))
        if m.view.get("requests"):
            rows.append(("req→", [str(x) for x in m.request_sends]))
        col = max(4, max(len(v) for _, vals in rows for v in vals) + 1, len(str(n - 1)) + 1)
        if 9 + n * (col + 1) > width:
            return self._link_summary(width)
        table = Table(box=None, show_header=True, header_style="bold", pad_edge=False, padding=(0, 1), expand=False)
        table.add_column("node", style="dim", no_wrap=True, min_width=8)
        for i in range(n):
            table.add_column(str(i), justify="right", min_width=col - 1, no_wrap=True)
        for label, vals in rows:
            if label == "state":
                cells = [Text(v, style=_NODE_STYLE[s]) for v, s in zip(vals, m.node_state)]
            else:
                cells = vals
            table.add_row(label, *cells)
        return table

    def _link_summary(self, width):
        """For rings too wide for a column per node: the extremes per kind."""
        m = self.model
        text = Text(no_wrap=True, overflow="ellipsis")
        busy = [i for i, s in enumerate(m.node_state) if s == REQUESTING]
        text.append("links  ", style="dim")
        text.append("tok→ %s..%s" % (min(m.token_sends), max(m.token_sends)))
        if m.view.get("requests"):
            text.append("  req→ %s..%s (busiest %d→%d)" % (
                min(m.request_sends), max(m.request_sends),
                *_busiest(m.request_sends, m.n)))
        text.append("\nserved per node %d..%d  requesting %d" % (min(m.served_by_node), max(m.served_by_node), len(busy)))
        if m.view.get("flags"):
            text.append("  %s=1 at %d nodes  stopped %d" % (m.view["flags"], sum(m.flag), sum(m.stopped_at)))
        if self.node_filter is not None:
            i = self.node_filter
            text.append("\nnode %d: %s, served %d, tok→ %d, req→ %d" % (
                i, ("idle", "requesting", "in CS")[m.node_state[i]], m.served_by_node[i], m.token_sends[i],
                m.request_sends[i]))
        return text

    def _figures(self, width):
        m = self.model
        c = m.checker
        unit = self._unit()
        grid = Table.grid(padding=(0, 1))
        wide = width >= 110
        grid.add_column(style="dim", no_wrap=True)
        grid.add_column(no_wrap=True)
        if wide:
            grid.add_column(style="dim", no_wrap=True)
            grid.add_column(no_wrap=True)
        served = Text("%s / %s" % (_num(c.served), _num(c.requests)))
        if c.msg_frames:  # the layer's messages: logical messages and hop frames differ (S, Q, D: one count)
            msgs = Text("%s logical, %s hop frames" % (_num(c.logical), _num(c.total)))
        else:
            msgs = Text("%s (token %s + request %s)" % (_num(c.total), _num(c.token_msgs), _num(c.request_msgs)))
        mpr = c.total / c.requests if c.requests else 0.0
        mpr_text = Text("%.2f" % mpr, style=_bound_style(mpr, c.bound_mpr, c.paper_mpr, c.requests))
        mpr_text.append(" ≤ %s" % _bound(c.bound_mpr), style="")
        if c.paper_mpr is not None and c.paper_mpr != c.bound_mpr:
            mpr_text.append(" (paper %d)" % c.paper_mpr, style="dim")
        svc = Text(str(c.max_service), style=_bound_style(c.max_service, c.bound_service, c.paper_service, 1))
        svc.append(" ≤ %s" % _bound(c.bound_service))
        if c.max_service_request is not None:
            rid, node, _ = c.max_service_request
            svc.append(" (#%d, node %d)" % (rid, node), style="dim")
        p50 = m.latency_percentile(0.5)
        p99 = m.latency_percentile(0.99)
        lat = Text("p50 %s  p99 %s  max %s %s" % (_num(p50), _num(p99), _num(c.latency_max) if c.served else "-", unit))
        safety = Text(str(c.safety_violations), style="bold red" if c.safety_violations else "green")
        safety.append(" violations" if c.safety_violations != 1 else " violation", style="")
        if c.faults_at is not None:
            # recovery acted (docs/recovery.md): the fault-free bounds are reported, not checked
            for t in (mpr_text, svc):
                t.append(" faults: not checked", style="dim")
            # tokens made, the layer's recovery timeouts, tokens removed (check/report.py says more)
            safety.append("  tokens made %d  removed %d  timeouts %d" % (len(c.regenerations), c.discarded, c.timeouts),
                          style="yellow")
        frames = self._frame_stats()
        rows = [("served", served), ("messages", msgs), ("msgs/req", mpr_text), ("max service", svc),
                ("latency", lat), ("safety", safety)]
        if frames is not None:
            rows.append(("frames", frames))
        restarts = (self.stats() or {}).get("restart lines") if self.stats is not None else None
        if restarts:
            rows.append(("restarts", Text("%s lines of MicroPython's banner as boards restarted: no fault"
                                          % _num(restarts), style="dim")))
        if c.resource is not None:
            rows.append(("FRAM", _fram_text(c.resource)))
        if wide:
            half = (len(rows) + 1) // 2
            for left, right in zip(rows[:half], rows[half:] + [("", "")]):
                grid.add_row(left[0], left[1], right[0], right[1])
        else:
            # two figures per line where both fit in 80 columns
            pairs = [(rows[0], rows[5]), (rows[1], None), (rows[2], None), (rows[3], None), (rows[4], None)]
            pairs += [(row, None) for row in rows[6:]]  # the frame counters, the FRAM counter
            grid = Table.grid(padding=(0, 1))
            grid.add_column(style="dim", no_wrap=True, min_width=11)
            grid.add_column(no_wrap=True, overflow="ellipsis")
            for a, b in pairs:
                value = a[1].copy()
                if b is not None:
                    value.append("   %s " % b[0], style="dim")
                    value.append_text(b[1])
                grid.add_row(a[0], value)
        return grid

    def _frame_stats(self):
        if self.stats is None:
            return None
        s = self.stats() or {}
        text = Text()
        for k, (label, v) in enumerate((label, v) for label, v in s.items() if label not in _NOT_ALARMS):
            if k:
                text.append("  ")
            text.append("%s %s" % (label, _num(v)), style="bold red" if v else "")
        return text

    def _log_matches(self, event):
        if self.node_filter is not None and event.node != self.node_filter:
            return False
        kf = self.kind_filter
        if kf == "all":
            return True
        if kf in ("token", "request"):
            return self.model.role(event) == kf  # token and request frames, or the messages that carry them
        if kf == "cs":
            return event.ev in ("enter", "exit", "res")  # and what the section did to the FRAM
        return event.ev == kf

    def _log(self, width, lines):
        title = " log"
        if self.node_filter is not None:
            title += " · node %d" % self.node_filter
        if self.kind_filter != "all":
            title += " · %s" % self.kind_filter
        if self._typed:
            title += " · node %s…" % self._typed
        out = Text(no_wrap=True, overflow="ellipsis")
        out.append(title + " " + "─" * max(0, width - len(title) - 2), style="dim")
        picked = []
        for event in reversed(self.model.log):
            if self._log_matches(event):
                picked.append(event)
                if len(picked) >= lines:
                    break
        for event in reversed(picked):
            out.append("\n")
            out.append_text(_format_event(event, self.model))
        out.append("\n" * (lines - len(picked)))
        return out

    def _footer(self, width):
        pause = ("resume" if self.paused else "pause") + (" view" if self._runs_on() else "")
        keys = [("space", pause), ("n/N", "node"), ("0-9⏎", "node"), ("k", "kind"), ("c", "clear")]
        if self.speed is not None:
            keys.append(("+/-", "speed"))
        keys.append(("q", "quit"))
        text = Text(no_wrap=True, overflow="ellipsis")
        for k, (key, what) in enumerate(keys):
            text.append(" " if k else "")
            text.append(key, style="bold reverse")
            text.append(" " + what)
        return text


def _format_event(event, model):
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append("%10s " % _num(event.t), style="dim")
    ev = event.ev
    if ev == "end":
        extra = event.extra or {}
        text.append("end  quiescent=%s %s" % (extra.get("quiescent"), extra.get("reason", "")), style="bold")
        return text
    text.append("n%-3d " % event.node)
    style = {"req": "yellow", "enter": "bold green", "exit": "green"}.get(ev, "")
    if ev in ("send", "recv"):
        arrow = "→%d" % ((event.node + 1) % model.n) if ev == "send" else "←%d" % event.link
        kind_style = "magenta" if model.role(event) == "token" else "yellow"
        text.append("%-5s%-5s" % (ev, arrow))
        text.append(event.kind, style=kind_style)
        p = event.payload
        if p:
            if event.kind == "msg":  # mkind src→dst (*: all); a new message or a hop passed on
                text.append(" %d %d→%s%s" % (p.get("mkind", 0), p.get("src", 0), "*" if p.get("dst") == 255
                                               else p.get("dst"), " fwd" if p.get("fwd") else ""), style="dim")
            fields = _token_fields(model.view, p, short=True)
            if fields:
                text.append(" " + " ".join(fields), style="dim")
            text.append(" seq=%d" % p.get("seq", 0), style="dim")
    elif ev == "res":  # the FRAM counter (docs/fram.md)
        x = event.extra or {}
        text.append("FRAM %s " % x.get("op"), style="cyan")
        text.append("errno %s" % x["errno"] if x.get("errno") else str(x.get("value")),
                    style="bold red" if x.get("errno") else "")
    else:
        text.append({"req": "request", "enter": "enter CS", "exit": "exit CS"}.get(ev, ev), style=style)
    return text


def _fram_text(audit):
    """The FRAM counter against the entries (check/audit.py FramAudit): while the run goes on,
    the last value written back; once the host has read the counter, that value. Red when it
    falls short of the entries (lost updates) or an access failed."""
    live = audit.live()
    start = audit.start or 0
    counter = audit.final if audit.final is not None else live["last"]
    counted = None if counter is None else counter - start
    short = live["lost"] or live["errors"] or (counted is not None and counted != live["entries"])
    text = Text("counter %s / entries %s" % (_num(counted), _num(live["entries"])),
                style="bold red" if short else "bold green")
    if audit.final is None:
        text.append(" (last written)", style="dim")
    if live["lost"]:
        text.append("  lost %s" % _num(live["lost"]), style="bold red")
    if live["errors"]:
        text.append("  I2C errors %s" % _num(live["errors"]), style="bold red")
    return text


def _busiest(counts, n):
    i = max(range(n), key=counts.__getitem__)
    return i, (i + 1) % n


def _num(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "%.1f" % v
    return "{:,}".format(v)


def _bound(b):
    return "∞" if b is None else str(b)


def _bound_style(value, bound, paper, seen):
    if not seen or bound is None:
        return "bold"
    if value > bound:
        return "bold red"
    if paper is not None and value > paper:
        return "bold yellow"
    return "bold green"
