"""`picoring bench dash`: can the dashboard keep up with a fast ring?

For rings of 5 and 64 (protocol D, poisson workload, simulator events):
  absorb     events/s the model takes in (DashModel.apply, the Checker inside)
  render     frames/s the screen is built and written (80x24 and 160x48)
  paced      the whole loop (Dashboard.run on a terminal console writing to
             memory) replaying at 20,000 events/s for a few seconds: events/s
             absorbed, frames/s shown, and how far the model fell behind the
             playback clock at the end (0 events = it kept up)
"""

import io
import time

from rich.console import Console

from ..check.trace import header
from ..dash.dashboard import Dashboard, IterSource
from ..dash.model import DashModel
from ..sim.simulate import simulate

SIZES = (5, 64)
TARGET_RATE = 20_000  # events per second the paced run replays at


def _events(n, requests):
    events = []
    simulate("d", n, "poisson", requests=requests, seed=1, listener=events.append)
    return events


def _absorb(events, n):
    model = DashModel("d", n)
    apply = model.apply
    t0 = time.perf_counter()
    for e in events:
        apply(e)
    dt = time.perf_counter() - t0
    return model, len(events) / dt


def _render_rate(model, width, height, seconds):
    console = Console(file=io.StringIO(), width=width, height=height, force_terminal=True, color_system="truecolor")
    meta = header("d", model.n, "sim", "hop", workload="poisson")
    dash = Dashboard(console, [], meta, speed=None)
    dash.model = model
    frames = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        console.file.seek(0)
        console.file.truncate()
        console.print(dash.render())
        frames += 1
    return frames / (time.perf_counter() - t0)


class _QuitAfter:
    """Keys: q once the time is up (the loop reads keys every turn)."""

    interactive = True

    def __init__(self, seconds):
        self.deadline = time.monotonic() + seconds

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def read(self):
        return ["q"] if time.monotonic() >= self.deadline else []


def _paced(events, n, seconds):
    span = (events[-1].t - events[0].t) or 1
    per_unit = len(events) / span
    console = Console(file=io.StringIO(), width=120, height=40, force_terminal=True, color_system="truecolor")
    meta = header("d", n, "sim", "hop", workload="poisson")
    dash = Dashboard(console, IterSource(events), meta, keys=_QuitAfter(seconds), refresh_hz=12)
    dash.speed = TARGET_RATE / (per_unit * dash.rate)
    t0 = time.monotonic()
    dash.run()
    wall = (dash.finished_at or time.monotonic()) - t0  # a short trace ends before the time is up
    due = sum(1 for e in events if e.t <= dash.play_t) if dash.play_t is not None else 0
    return {"events_per_s": dash.model.events / wall, "frames_per_s": dash.frames / (time.monotonic() - t0),
            "behind_events": max(0, due - dash.model.events), "seconds": round(wall, 2)}


def run_bench(quick=False, log=None):
    out = {}
    for n in SIZES:
        requests = 2000 if quick else 20000
        if log:
            log("n=%d: simulating %d requests..." % (n, requests))
        events = _events(n, requests)
        if log:
            log("n=%d: %d events: absorbing, rendering..." % (n, len(events)))
        model, absorb = _absorb(events, n)
        secs = 1.0 if quick else 3.0
        row = {
            "events": len(events),
            "absorb_events_per_s": absorb,
            "render_fps_80x24": _render_rate(model, 80, 24, secs),
            "render_fps_160x48": _render_rate(model, 160, 48, secs),
        }
        if log:
            log("n=%d: paced run at %d events/s..." % (n, TARGET_RATE))
        row["paced"] = _paced(events, n, 2.0 if quick else 5.0)
        out[str(n)] = row
    return out


def main(args):
    from .common import run_command

    return run_command(args, run_bench, print_table)


def print_table(result):
    from rich import box
    from rich.table import Table

    table = Table(title="picoring dash: model, rendering, paced run at %s events/s" % format(TARGET_RATE, ","),
                  header_style="bold", box=box.SIMPLE_HEAD, padding=(0, 1), pad_edge=False)
    for col in ("ring", "model ev/s", "fps 80x24", "fps 160x48", "paced ev/s", "paced fps", "behind"):
        table.add_column(col, justify="right", no_wrap=True)
    for n, r in result.items():
        p = r["paced"]
        table.add_row("D n=%s" % n, format(int(r["absorb_events_per_s"]), ","),
                      "%.0f" % r["render_fps_80x24"], "%.0f" % r["render_fps_160x48"],
                      format(int(p["events_per_s"]), ","), "%.1f" % p["frames_per_s"], "%d ev" % p["behind_events"])
    console = Console()
    console.print(table)
    console.print("events per run: %s (simulator, protocol D, poisson); paced: %s s on a terminal console "
                  "writing to memory, refresh 12/s; behind = events due by the playback clock but not yet applied."
                  % (", ".join("n=%s %s" % (n, format(r["events"], ",")) for n, r in result.items()),
                     "/".join(str(r["paced"]["seconds"]) for r in result.values())))
