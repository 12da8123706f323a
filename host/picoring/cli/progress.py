"""Progress of long commands (sim, explore, run) on stderr.

By default it shows only where someone watches and only when it helps: when stderr is a
terminal (also when stdout goes into a pipe or a file: `picoring sim ... | cat` is watched
too; never into a test's capture), never with --json, and only once the command has run for
DELAY seconds (a short run prints nothing). It is a rich progress line that disappears when
the command prints its report; a run stopped by Ctrl-C leaves one plain line saying how far
it got. --progress forces it (on a terminal the same line; elsewhere a plain line every
PLAIN_EVERY seconds, for a log), --no-progress turns it off.

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
    """Whether to show progress: --progress / --no-progress as given, else when stderr (where it
    goes) is a terminal; stdout may go anywhere (its report is printed once the work is done)."""
    flag = getattr(args, "progress", None)
    if flag is not None:
        return flag
    if getattr(args, "json", False):
        return False
    return _tty(stderr or sys.stderr)


def say(args, text):
    """One line on stderr now (no delay) where progress is wanted: what a long command is about
    to do, before its first progress line."""
    if wanted(args):
        print("picoring: %s" % text, file=sys.stderr, flush=True)


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
        self.state = None  # (done, text, seconds) of the last update shown

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
        self.state = (done, text, now - self.started)
        if self.plain:
            self.stream.write("picoring: %s: %s\n" % (self.what, self._where()))
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

    def _where(self, stopped=False):
        done, text, seconds = self.state
        of = "/{:,}".format(self.total) if self.total is not None else ""
        return "%s%s%s %s%s (%.0f s)" % ("stopped at " if stopped else "", "{:,}".format(done), of, self.unit,
                                        ", " + text if text else "", seconds)

    def close(self, stopped=False):
        """Erase the line; stopped (Ctrl-C): leave a plain line of how far the work got."""
        if self.live is not None:
            self.live.stop()
            self.live = None
        if stopped and self.state is not None:
            self.stream.write("picoring: %s: %s\n" % (self.what, self._where(stopped=True)))
            self.stream.flush()

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        self.close(stopped=kind is not None and issubclass(kind, KeyboardInterrupt))


def maybe(args, what, unit, total=None):
    """A Progress if wanted(args), else None."""
    return Progress(what, unit, total) if wanted(args) else None


class Nothing:
    """A with block that shows nothing (its value: None)."""

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


class _Reading:
    def __init__(self, shown):
        self.shown = shown

    def __enter__(self):
        return lambda done, size: self.shown.update(done // 1_000_000, size // 1_000_000)

    def __exit__(self, *exc):
        return self.shown.__exit__(*exc)


def reading(args, what, path):
    """A with block whose value is progress(bytes read, size) for reading a trace file (check,
    report: check.trace.TraceReader), or None where progress is not wanted; Ctrl-C inside it
    leaves a line of how far the reading got."""
    shown = maybe(args, "%s %s" % (what, path), "MB")
    return Nothing() if shown is None else _Reading(shown)
