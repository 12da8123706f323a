"""Progress of long commands (sim, explore, run) on stderr.

By default it shows only where someone watches and only when it helps: when stdout and stderr
are both terminals (never into a pipe, a file or a test's capture), never with --json, and
only once the command has run for DELAY seconds (a short run prints nothing). It is a rich
progress line that disappears when the command prints its report. --progress forces it (on
a terminal the same line; elsewhere a plain line every PLAIN_EVERY seconds, for a log),
--no-progress turns it off.

The command's loop calls update() as often as it likes (the simulator every few thousand
steps, the harness every millisecond): it costs a clock reading until REFRESH has passed.
"""

import sys
import time

DELAY = 1.0  # s: runs shorter than this show no progress
REFRESH = 0.2  # s between redraws on a terminal
PLAIN_EVERY = 5.0  # s between plain lines (--progress where stderr is not a terminal)


def add_progress_args(p):
    g = p.add_mutually_exclusive_group()
    g.add_argument("--progress", dest="progress", action="store_true", default=None,
                   help="show progress on stderr even when it is not a terminal or with --json (default: on a "
                        "terminal, for runs longer than a second, not with --json)")
    g.add_argument("--no-progress", dest="progress", action="store_false", help="never show progress")


def _tty(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # closed, or no real file (pytest's capture)
        return False


def wanted(args, stdout=None, stderr=None):
    """Whether to show progress: --progress / --no-progress as given, else on a terminal only."""
    flag = getattr(args, "progress", None)
    if flag is not None:
        return flag
    if getattr(args, "json", False):
        return False
    return _tty(stdout or sys.stdout) and _tty(stderr or sys.stderr)


class Progress:
    """One task's progress: update(done, total, text); close() (or use it in a with block).

    what: what runs, e.g. "sim D n=10000"; unit: what done counts, e.g. "requests";
    total None: a count without an end (the explorer's states)."""

    def __init__(self, what, unit, total=None, stream=None, delay=None, clock=time.monotonic):
        self.what = what
        self.unit = unit
        self.total = total
        self.stream = stream or sys.stderr
        self.delay = DELAY if delay is None else delay
        self.clock = clock
        self.started = clock()
        self.last = None  # when last drawn
        self.live = None  # the rich Progress, made once the delay has passed
        self.plain = not _tty(self.stream)
        self.shown = False

    def update(self, done, total=None, text=""):
        now = self.clock()
        if total is not None:
            self.total = total
        if now - self.started < self.delay:
            return
        if self.last is not None and now - self.last < (PLAIN_EVERY if self.plain else REFRESH):
            return
        self.last = now
        self.shown = True
        if self.plain:
            of = "/{:,}".format(self.total) if self.total is not None else ""
            self.stream.write("picoring: %s: %s%s %s%s (%.0f s)\n" % (
                self.what, "{:,}".format(done), of, self.unit, ", " + text if text else "", now - self.started))
            self.stream.flush()
            return
        if self.live is None:
            self._start()
        self.live.update(self.task, completed=done, total=self.total, text=text, seconds=now - self.started)
        self.live.refresh()

    def _start(self):
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
        from rich.progress import Progress as RichProgress

        # about 75 columns: a terminal of 80 shows it whole
        if self.total is not None:
            columns = [TextColumn("{task.description}"), BarColumn(bar_width=20), MofNCompleteColumn(),
                       TextColumn(self.unit), TimeRemainingColumn()]
        else:  # a count without an end: no bar
            columns = [TextColumn("{task.description}"), TextColumn("{task.completed:,.0f} %s" % self.unit),
                       TextColumn("{task.fields[seconds]:.0f} s")]
        columns.append(TextColumn("{task.fields[text]}"))
        self.live = RichProgress(*columns, console=Console(file=self.stream), transient=True, auto_refresh=False)
        self.live.start()
        self.task = self.live.add_task(self.what, total=self.total, text="", seconds=self.clock() - self.started)

    def close(self):
        if self.live is not None:
            self.live.stop()
            self.live = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def maybe(args, what, unit, total=None):
    """A Progress if wanted(args), else None."""
    return Progress(what, unit, total) if wanted(args) else None
