"""The checker catches planted violations; traces round-trip and pandas reads them."""

import json

import pytest

from conftest import why_not_ok
from picoring.check.checker import check_trace
from picoring.cli.main import main
from picoring.sim.simulate import simulate
from picoring.check.trace import TraceError, TraceReader


def write_trace(path, protocol, n, events, end=True):
    """A trace of these events; end: close it with an end record, as a run that finished does."""
    lines = [{"v": 1, "ev": "meta", "protocol": protocol, "n": n, "source": "test", "time_unit": "hop"}] + events
    if end:
        lines.append({"t": max([e["t"] for e in events] or [0]), "ev": "end", "reason": "done"})
    path.write_text("".join(json.dumps(d) + "\n" for d in lines))
    return path


def send(t, node, kind="token"):
    return {"t": t, "ev": "send", "node": node, "link": node, "kind": kind}


def test_clean_trace_passes(tmp_path):
    p = write_trace(tmp_path / "ok.jsonl", "q", 3, [
        {"t": 0, "ev": "req", "node": 1}, send(0, 1, "request"), send(1, 2, "request"), send(2, 0),
        {"t": 3, "ev": "enter", "node": 1}, {"t": 4, "ev": "exit", "node": 1},
    ])
    _, report = check_trace(p)
    assert report["ok"], why_not_ok(report)
    assert report["messages"] == {"total": 3, "token": 1, "request": 2}
    assert report["max_service_traffic"] == 3


def test_overlapping_critical_sections(tmp_path):
    p = write_trace(tmp_path / "t.jsonl", "d", 3, [
        {"t": 0, "ev": "req", "node": 0}, {"t": 0, "ev": "req", "node": 1},
        {"t": 0, "ev": "enter", "node": 0}, {"t": 1, "ev": "enter", "node": 1},
        {"t": 2, "ev": "exit", "node": 1},
    ])
    _, report = check_trace(p)
    assert not report["ok"]
    assert report["safety_violations"] >= 1
    assert any("while node 0 was in it" in v["message"] for v in report["violations"])


def test_entry_without_request(tmp_path):
    p = write_trace(tmp_path / "t.jsonl", "q", 3, [{"t": 0, "ev": "enter", "node": 2}, {"t": 1, "ev": "exit", "node": 2}])
    _, report = check_trace(p)
    assert report["safety_violations"] == 1
    assert "no pending request" in report["violations"][0]["message"]


def test_unserved_request_names_it(tmp_path):
    p = write_trace(tmp_path / "t.jsonl", "q", 3, [{"t": 5, "ev": "req", "node": 2}, send(5, 2, "request")])
    _, report = check_trace(p)
    assert not report["ok"]
    (v,) = report["violations"]
    assert v["kind"] == "liveness" and v["request"] == 1 and v["node"] == 2
    assert "request #1 (node 2, t=5) was never served" in v["message"]


def test_over_bound_counts(tmp_path):
    n = 3
    events = [{"t": 0, "ev": "req", "node": 1}]
    events += [send(i, i % n) for i in range(3 * n * n)]  # far more than (5n^2 - 5n + 2)/2 and n per request
    events += [{"t": 99, "ev": "enter", "node": 1}, {"t": 100, "ev": "exit", "node": 1}]
    _, report = check_trace(write_trace(tmp_path / "t.jsonl", "q", n, events))
    kinds = [v["kind"] for v in report["violations"]]
    assert kinds.count("bound") == 2
    assert any("service traffic 27 > bound 16" in v["message"] for v in report["violations"])
    assert any("27 messages for 1 requests > 3 per request" in v["message"] for v in report["violations"])


def test_check_command_exit_status_and_json(tmp_path, capsys):
    p = write_trace(tmp_path / "t.jsonl", "q", 3, [{"t": 5, "ev": "req", "node": 2}])
    assert main(["check", str(p), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    for key in ("protocol", "n", "requests", "served", "messages", "messages_per_request", "max_service_traffic",
                "bounds", "safety_violations", "ok"):
        assert key in out
    assert out["ok"] is False


def test_a_trace_cut_short_is_incomplete_not_ok(tmp_path, capsys):
    # Every request seen so far is served, but there is no end record: the run was
    # interrupted or the file truncated, so the check cannot say OK.
    events = [{"t": 0, "ev": "req", "node": 1}, send(0, 1, "request"), send(1, 2, "request"), send(2, 0),
              {"t": 3, "ev": "enter", "node": 1}, {"t": 4, "ev": "exit", "node": 1}]
    p = write_trace(tmp_path / "cut.jsonl", "q", 3, events, end=False)
    _, report = check_trace(p)
    assert report["complete"] is False and report["ok"] is False
    assert report["violations"][0]["kind"] == "incomplete"
    assert main(["check", str(p)]) == 1
    out = " ".join(capsys.readouterr().out.split())  # the console wraps long lines
    assert "the trace has no end record (read to t=4): the run was interrupted or the file was truncated" in out
    assert "CHECK FAILED" in out
    assert main(["check", str(p), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["complete"] is False and out["ok"] is False
    # the same events with their end record: complete and OK
    _, report = check_trace(write_trace(tmp_path / "whole.jsonl", "q", 3, events))
    assert report["complete"] is True and report["ok"] is True


def test_a_checker_fed_as_the_run_goes_needs_no_end_record():
    # sim (like run) checks events as they come and closes with finish: no end record
    # has reached its checker, and a clean run is OK.
    report = simulate("q", 4, "poisson", requests=30, seed=1, listener=lambda e: None)
    assert report["ok"] is True and "complete" not in report


@pytest.mark.parametrize("content,message", [
    ("", "empty trace"),
    ('{"v": 1, "ev": "meta", "n": 3}\n', "header lacks"),
    ('{"t": 0, "ev": "req", "node": 1}\n', "first line must be the header"),
    ('{"v": 9, "ev": "meta", "protocol": "q", "n": 3}\n', "version 9"),
    ('{"v": 1, "ev": "meta", "protocol": "q", "n": 3}\n{"t": 0, "ev": "req", "node": 1}\nnot json\n', ":3: not JSON"),
    ('{"v": 1, "ev": "meta", "protocol": "q", "n": 3}\n{"t": 0, "ev": "req", "node": 7}\n', ":2: node 7 is not in 0..2"),
    ('{"v": 1, "ev": "meta", "protocol": "q", "n": 3}\n{"t": 0, "ev": "send", "node": 1, "kind": "x"}\n', "frame kind"),
])
def test_bad_traces_are_clear_errors(tmp_path, content, message, capsys):
    p = tmp_path / "bad.jsonl"
    p.write_text(content)
    with pytest.raises(TraceError, match=message):
        check_trace(p)
    assert main(["check", str(p)]) == 2
    assert message.split(":")[-1].strip()[:10] in capsys.readouterr().err


def test_sim_trace_rechecks_to_the_same_report(tmp_path):
    path = tmp_path / "sim.jsonl"
    live = simulate("d", 6, "poisson", requests=200, seed=3, trace=str(path))
    meta, offline = check_trace(path)
    assert meta["v"] == 2 and meta["source"] == "sim" and meta["protocol"] == "d"
    for key in ("requests", "served", "messages", "max_service_traffic", "latency", "ok", "safety_violations"):
        assert offline[key] == live[key]
    assert offline["frames_in_flight_at_end"] == 0
    with TraceReader(path) as reader:
        kinds = {e.ev for e in reader}
    assert kinds == {"req", "send", "recv", "enter", "exit", "end"}


def test_pandas_reads_the_trace(tmp_path):
    pd = pytest.importorskip("pandas")
    path = tmp_path / "sim.jsonl"
    report = simulate("q", 5, "sequential", requests=30, seed=1, trace=str(path))
    df = pd.read_json(path, lines=True)
    sends = df[df["ev"] == "send"]
    assert len(sends) == report["messages"]["total"]
    assert (sends["kind"] == "token").sum() == report["messages"]["token"]
    assert set(df["ev"].dropna()) == {"meta", "req", "send", "recv", "enter", "exit", "end"}


# -- restarts on a lossy ring (docs/recovery.md) --------------------------------

def _lossy_checker():
    from picoring.check.checker import Checker
    from picoring.check.trace import Event

    c = Checker("q", 3)
    c.feed(Event(0, "timeout", 2, extra={"why": "again", "gen_ms": 100, "epoch": 0}))  # recovery acted
    for node in (0, 1):
        c.feed(Event(1, "req", node))
    return c, Event


def test_a_board_that_dies_in_its_critical_section_is_not_an_overlap():
    c, Event = _lossy_checker()
    c.feed(Event(2, "enter", 0, payload={"seq": 5, "epoch": 0}))  # board 0 dies in there
    c.feed(Event(3, "regen", 1, payload={"count": 0, "state": 0, "seq": 4, "epoch": 1}))
    c.feed(Event(3, "enter", 1, payload={"seq": 5, "epoch": 1}))  # its number 5 was lost with it
    c.feed(Event(4, "exit", 1))
    c.feed(Event(5, "notice", 0, extra={"what": "restarted", "text": "..."}))  # the host learns it late
    rep = c.finish()
    assert rep["safety_violations"] == 0 and rep["ok"], rep["violations"]
    assert rep["recovery"]["critical_sections_ended_by_a_restart"] == 1
    assert rep["recovery"]["entry_numbers_reused_after_a_restart"] == 1


def test_an_overlap_with_a_live_board_is_still_a_violation():
    c, Event = _lossy_checker()
    c.feed(Event(2, "enter", 0, payload={"seq": 5, "epoch": 0}))
    c.feed(Event(3, "enter", 1, payload={"seq": 6, "epoch": 1}))
    c.feed(Event(4, "exit", 0))  # board 0 was alive in its critical section
    c.feed(Event(5, "exit", 1))
    rep = c.finish()
    assert rep["safety_violations"] == 1
    assert "node 1 entered the critical section while node 0 was in it" in rep["violations"][0]["message"]


def test_a_repeated_entry_number_of_a_board_that_lives_on_is_a_violation():
    c, Event = _lossy_checker()
    c.feed(Event(2, "enter", 0, payload={"seq": 5, "epoch": 0}))
    c.feed(Event(3, "exit", 0))
    c.feed(Event(4, "enter", 1, payload={"seq": 5, "epoch": 1}))  # suspect: 0 might have died...
    c.feed(Event(5, "exit", 1))
    c.feed(Event(6, "req", 0))
    c.feed(Event(7, "enter", 0, payload={"seq": 6, "epoch": 1}))  # ... but it enters again: it did not
    rep = c.finish()
    assert rep["safety_violations"] == 1 and "entry number 5" in rep["violations"][0]["message"]
    c2, Event = _lossy_checker()
    c2.feed(Event(2, "enter", 0, payload={"seq": 5, "epoch": 0}))
    c2.feed(Event(3, "exit", 0))
    c2.feed(Event(4, "enter", 1, payload={"seq": 5, "epoch": 1}))
    rep = c2.finish()  # never resolved: a violation
    assert rep["safety_violations"] == 1


def test_a_number_repeated_after_its_maker_restarted_is_forgiven():
    # Board 2 enters with 85 and dies holding the token; the host sees the restart *before*
    # the regenerated token repeats 85 (here at board 2 itself, its first entry since).
    c, Event = _lossy_checker()
    c.feed(Event(1, "req", 2))
    c.feed(Event(2, "enter", 2, payload={"seq": 85, "epoch": 2}))
    c.feed(Event(3, "exit", 2))
    c.feed(Event(4, "notice", 2, extra={"what": "restarted", "text": "..."}))
    c.feed(Event(5, "regen", 2, payload={"count": 2, "state": 0, "seq": 85, "epoch": 3}))
    c.feed(Event(5, "req", 2))
    c.feed(Event(6, "enter", 2, payload={"seq": 85, "epoch": 3}))
    c.feed(Event(7, "exit", 2))
    c.feed(Event(8, "enter", 0, payload={"seq": 86, "epoch": 3}))
    c.feed(Event(9, "exit", 0))
    c.feed(Event(10, "enter", 1, payload={"seq": 87, "epoch": 3}))
    c.feed(Event(11, "exit", 1))
    rep = c.finish()
    assert rep["safety_violations"] == 0 and rep["ok"], rep["violations"]
    assert rep["recovery"]["entry_numbers_reused_after_a_restart"] == 1


def test_a_number_repeated_after_a_restart_is_still_checked_against_the_survivors():
    # Board 2 made 85 and restarted, but board 1 made 84 and lives on: a repeat of 84 is not
    # explained by the restart.
    c, Event = _lossy_checker()
    c.feed(Event(1, "req", 2))
    c.feed(Event(2, "enter", 1, payload={"seq": 84, "epoch": 2}))
    c.feed(Event(3, "exit", 1))
    c.feed(Event(4, "enter", 2, payload={"seq": 85, "epoch": 2}))
    c.feed(Event(5, "exit", 2))
    c.feed(Event(6, "notice", 2, extra={"what": "restarted", "text": "..."}))
    c.feed(Event(8, "enter", 0, payload={"seq": 84, "epoch": 3}))
    rep = c.finish()
    assert rep["safety_violations"] == 1 and "entry number 84" in rep["violations"][0]["message"]


def test_events_lost_in_a_usb_outage_end_that_boards_critical_section_unseen():
    c, Event = _lossy_checker()
    c.feed(Event(2, "enter", 0, payload={"seq": 5, "epoch": 0}))  # its exit goes nowhere
    c.feed(Event(3, "notice", 0, extra={"what": "events lost", "text": "..."}))
    c.feed(Event(4, "enter", 1, payload={"seq": 6, "epoch": 0}))
    c.feed(Event(5, "exit", 1))
    rep = c.finish()
    assert rep["safety_violations"] == 0 and rep["ok"], rep["violations"]
    assert rep["recovery"]["events_lost_at"] == [(3, 0)]


def test_an_s_trace_from_sim_checks_ok(tmp_path, capsys):
    # S never rests: its end record says "quiescent": null (not applicable), which the
    # checker took for false and reported "the ring did not become quiescent".
    path = tmp_path / "s.jsonl"
    assert main(["sim", "-p", "s", "-n", "3", "-w", "poisson", "-k", "20", "--seed", "1", "--trace", str(path)]) == 0
    assert '"quiescent":null' in path.read_text().splitlines()[-1].replace(" ", "")
    capsys.readouterr()
    assert main(["check", str(path)]) == 0, capsys.readouterr().out


def test_entry_numbers_across_the_30_bit_wrap():
    # Boards keep entry numbers in 30 bits (no long ints on a Pico): after 2**30 - 1
    # comes 0. That is an increase; a number seen again is still a violation.
    from picoring.check.checker import SEQ_PERIOD, Checker

    top = SEQ_PERIOD - 1
    c = Checker("q", 3)
    for t, seq in enumerate((top - 1, top, 0, 1)):
        c.request(10 * t, t % 3)
        c.enter(10 * t + 1, t % 3, seq)
        c.exit(10 * t + 2, t % 3)
    assert c.safety_violations == 0 and not c.violations
    c.request(100, 0)
    c.enter(101, 0, 0)
    assert any("not strictly increasing" in v["message"] for v in c.violations)


def test_the_stabilisation_waits_for_delta_max_of_the_boards_clocks():
    """A trace from boards whose clocks ran at a fifth of the host's (its end record says so):
    Delta_max of the boards' clocks is five times as long in the trace's time, and a token that
    lived for Delta_max of the host's only has not settled the ring yet."""
    from picoring.check.checker import Checker
    from picoring.check.trace import Event

    def stabilisation(end_extra):
        c = Checker("wt:skip=2,op=20,seed=2", 3, time_unit="us")  # Delta_max 270 ms
        c.start(0)
        c.feed(Event(1_000_000, "lost", node=0, link=0, kind="token", extra={"sent_t": 1_000_000}))
        c.feed(Event(1_500_000, "regen", node=1, kind="token", payload={"seq": 1, "epoch": 1}))
        c.feed(Event(2_000_000, "lost", node=1, link=1, kind="token", extra={"sent_t": 2_000_000}))
        c.feed(Event(2_500_000, "regen", node=2, kind="token", payload={"seq": 2, "epoch": 1}))
        c.feed(Event(9_000_000, "end", extra=end_extra))
        return c.finish()["soft"]["stabilisation"]

    host = stabilisation({"quiescent": None, "reason": "done"})
    assert host["settle"] == 270_000 and host["count"] == 2 and host["max"] == 500_000
    boards = stabilisation({"quiescent": None, "reason": "done", "clock_rates": [0.2, 0.2, 0.2]})
    # the first token lived 500 ms, under 5 x 270: one transient, from the first loss to the second regen
    assert boards["settle"] == 1_350_000 and boards["count"] == 1 and boards["max"] == 1_500_000
