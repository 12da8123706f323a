"""Progress of long runs (issue 18, items 6 and 7): on stderr, only on a terminal, only once a
run has lasted a moment, never with --json unless asked; and it changes no result."""

import io
import json
from types import SimpleNamespace

import pytest

from picoring.cli import progress
from picoring.cli.main import main
from picoring.explore.search import explore
from picoring.sim.simulate import simulate


class Tty(io.StringIO):
    def isatty(self):
        return True


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


@pytest.mark.parametrize("flag,as_json,tty,shown", [
    (None, False, True, True),     # a terminal: yes
    (None, True, True, False),     # --json: never by default
    (None, False, False, False),   # a pipe or a file: no
    (True, True, False, True),     # --progress: asked for
    (False, False, True, False),   # --no-progress
])
def test_when_progress_is_shown(flag, as_json, tty, shown):
    args = SimpleNamespace(progress=flag, json=as_json)
    streams = (Tty(), Tty()) if tty else (io.StringIO(), io.StringIO())
    assert progress.wanted(args, *streams) is shown


def test_a_terminal_line_appears_after_the_delay_and_is_gone_at_the_end():
    clock, out = Clock(), Tty()
    p = progress.Progress("sim D n=10000", "requests", 1000, stream=out, clock=clock)
    p.update(10)
    clock.t += 0.5
    p.update(20)
    assert out.getvalue() == ""  # a short run shows nothing
    clock.t += 1.0
    p.update(300, text="msgs 3,000,000")
    drawn = out.getvalue()
    assert "sim D n=10000" in drawn and "300/1000" in drawn and "msgs 3,000,000" in drawn
    clock.t += 0.05
    p.update(301)
    assert out.getvalue() == drawn  # redrawn at most every REFRESH seconds
    p.close()
    assert out.getvalue().endswith("\r\x1b[1A\x1b[2K")  # the line is erased: the report starts on a clean line


def test_asked_for_off_a_terminal_it_writes_plain_lines():
    clock, out = Clock(), io.StringIO()
    p = progress.Progress("explore D n=4 R=2", "states expanded", stream=out, clock=clock)
    for k in range(1, 30):
        clock.t += 1.0
        p.update(k * 4096, text="found {:,}".format(k * 5000))
    p.close()
    lines = out.getvalue().splitlines()
    assert lines[0] == "picoring: explore D n=4 R=2: 4,096 states expanded, found 5,000 (1 s)"
    assert len(lines) == 6  # one every PLAIN_EVERY = 5 s of 29 s, none before the delay
    assert "\x1b" not in out.getvalue()


def test_the_simulator_reports_progress_on_its_fast_path_with_the_same_result():
    calls = []
    quiet = simulate("d", 2000, "sequential", requests=20, seed=1)
    shown = simulate("d", 2000, "sequential", requests=20, seed=1, progress=lambda *a: calls.append(a))
    assert shown == quiet and quiet["messages"]["total"] == 20 * (2 * 2000 - 1)
    assert len(calls) >= 10  # a lone token's hops count: every 4096 of them
    ts = [c[0] for c in calls]
    assert ts == sorted(ts) and all(c[1] <= 20 for c in calls)


def test_explore_reports_its_states_as_it_goes():
    calls = []
    quiet = explore("d", 4, 2)
    shown = explore("d", 4, 2, progress=lambda k, found: calls.append((k, found)))
    for r in (quiet, shown):
        r.pop("seconds", None)
        r.pop("build_seconds", None)
    assert shown == quiet
    assert len(calls) == quiet["states"] // 4096
    assert all(k % 4096 == 0 and k <= found for k, found in calls)


def _progress_lines(capsys, monkeypatch, argv):
    """argv's stderr lines with --progress (at once, every update), after checking that without
    it, off a terminal, stderr is empty and stdout (a report, or --json's JSON) the same."""
    monkeypatch.setattr(progress, "DELAY", 0.0)
    monkeypatch.setattr(progress, "PLAIN_EVERY", 0.0)
    assert main(argv) == 0
    quiet = capsys.readouterr()
    assert quiet.err == ""  # not a terminal, not asked: nothing
    assert main(argv + ["--progress"]) == 0
    shown = capsys.readouterr()
    assert shown.out == quiet.out
    return shown.err.splitlines()


def test_sim_progress_goes_to_stderr_and_never_into_the_json(capsys, monkeypatch):
    argv = ["sim", "-p", "d", "-n", "3000", "-w", "sequential", "-k", "10", "--json"]
    lines = _progress_lines(capsys, monkeypatch, argv)
    assert lines and all(line.startswith("picoring: sim D n=3000: ") and "/10 requests" in line for line in lines)


def test_progress_shows_on_a_terminal_whatever_stdout_is():
    # `picoring sim -n 10000000 -k 10 | cat`: stdout is a pipe, stderr (where progress goes) a terminal
    args = SimpleNamespace(progress=None, json=False)
    assert progress.wanted(args, io.StringIO(), Tty()) is True
    assert progress.wanted(args, Tty(), io.StringIO()) is False


def test_stopped_by_ctrl_c_it_says_how_far_it_got():
    clock, out = Clock(), Tty()
    with pytest.raises(KeyboardInterrupt):
        with progress.Progress("sim D n=10000000", "requests", 10, stream=out, clock=clock) as p:
            clock.t += 2.0
            p.update(3, text="msgs 30,000,000")
            raise KeyboardInterrupt
    assert out.getvalue().endswith("picoring: sim D n=10000000: stopped at 3/10 requests, msgs 30,000,000 (2 s)\n")
    quiet = Tty()
    with progress.Progress("sim D n=8", "requests", 10, stream=quiet, clock=clock) as p:
        p.update(3)  # before the delay: nothing shown, nothing to say
    assert quiet.getvalue() == ""


def test_a_big_ring_says_what_a_node_costs_before_it_is_built(capsys, monkeypatch):
    from picoring.cli import sim as sim_cli
    from picoring.sim.nodes import node_bytes

    monkeypatch.setattr(sim_cli, "BIG_RING", 3000)
    argv = ["sim", "-p", "q", "-n", "70000", "-w", "sequential", "-k", "2", "--json"]
    lines = _progress_lines(capsys, monkeypatch, argv)
    per = node_bytes("q", 70000)
    assert lines[0] == "picoring: sim Q n=70000: building the ring: 70,000 nodes of about %d bytes, %.1f GB in all" % (
        per, per * 70000 / 1e9)
    built = [line.rsplit(" (", 1)[0] for line in lines if "nodes (" in line]  # without the seconds
    assert built == ["picoring: sim Q n=70000: building the ring: %s/70,000 nodes" % k for k in ("65,536", "70,000")]
    assert lines[-1].startswith("picoring: sim Q n=70000: 2/2 requests")
    # a ring that cannot fit in the machine's memory is refused before anything is built
    monkeypatch.setattr(sim_cli, "_memory", lambda: (per * 50000, per * 40000))
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "more than this machine's" in err and "about 50,000 nodes" in err
    monkeypatch.setattr(sim_cli, "_memory", lambda: (per * 100000, per * 40000))
    assert main(argv) == 0
    assert "more than the %.1f GB available now: it may run out of memory" % (per * 40000 / 1e9) in capsys.readouterr().err


@pytest.mark.parametrize("command", [["check"], ["report", "--no-plots"]])
def test_reading_a_long_trace_shows_how_far_it_got(tmp_path, capsys, monkeypatch, command):
    from picoring.check.trace import TraceReader

    trace = tmp_path / "t.jsonl"
    assert main(["sim", "-p", "q", "-n", "40", "-k", "30", "--trace", str(trace), "--json"]) == 0
    capsys.readouterr()
    monkeypatch.setattr(TraceReader, "PROGRESS_EVERY", 512)
    mb = trace.stat().st_size // 1_000_000
    argv = command + [str(trace)] + (["--json"] if command == ["check"] else ["--out", str(tmp_path / "r")])
    lines = _progress_lines(capsys, monkeypatch, argv)
    what = "picoring: %s %s: " % (command[0], trace)
    assert len(lines) >= 3 and all(line.startswith(what) and " MB (" in line for line in lines)
    assert lines[-1].startswith(what + "%d/%d MB (" % (mb, mb))
