"""The dashboard: its model gives the checker's figures, its screen shows them, keys work."""

import io
import re
import threading

import pytest
from rich.console import Console

from picoring.sim import simcore
from picoring.check.checker import check_trace, finish_trace
from picoring.cli.main import main
from picoring.dash.dashboard import Dashboard, FeedSource, ScriptedKeys, TerminalKeys
from picoring.dash.model import IDLE, IN_CS, REQUESTING, DashModel
from picoring.firmware.protocol import make_node
from picoring.sim.simulate import TraceTap, simulate
from picoring.check.trace import Event, TraceReader, header
from picoring.sim.workload import make_workload

CASES = [("d", 5, "poisson"), ("q", 6, "burst"), ("s", 4, "poisson"), ("d", 64, "poisson"), ("d-literal", 3, "sequential")]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("traces")
    out = {}
    for protocol, n, workload in CASES:
        path = d / ("%s-%d.jsonl" % (protocol, n))
        simulate(protocol, n, workload, requests=80, seed=3, trace=str(path))
        out[(protocol, n)] = path
    return out


def read(path):
    with TraceReader(path) as reader:
        return reader.meta, list(reader)


def recording_console(width, height):
    return Console(record=True, width=width, height=height, file=io.StringIO(), force_terminal=False)


@pytest.mark.parametrize("protocol,n,workload", CASES)
def test_replay_gives_the_checkers_numbers_exactly(traces, protocol, n, workload):
    path = traces[(protocol, n)]
    meta, events = read(path)
    dash = Dashboard(recording_console(80, 24), events, meta, speed=None)
    model = dash.run()
    assert dash.finished and model.events == len(events)
    _, expected = check_trace(path)
    got = finish_trace(model.checker)  # what `dash --replay` reports when the file has been read
    assert got == expected
    # the model's own tallies agree with the checker's
    assert sum(model.token_sends) == expected["messages"]["token"]
    assert sum(model.request_sends) == expected["messages"]["request"]
    assert sum(model.served_by_node) == expected["served"]
    assert sum(model.requests_by_node) == expected["requests"]
    assert len(model.latencies) == expected["served"]
    assert max(model.latencies) == expected["latency"]["max"]
    assert sum(model.latencies) / len(model.latencies) == pytest.approx(expected["latency"]["mean"])


@pytest.mark.parametrize("width,height", [(80, 24), (120, 40)])
@pytest.mark.parametrize("protocol,n", [("d", 5), ("q", 6), ("d", 64)])
def test_screen_shows_the_checkers_figures(traces, protocol, n, width, height):
    path = traces[(protocol, n)]
    meta, events = read(path)
    console = recording_console(width, height)
    Dashboard(console, events, meta, speed=None).run()
    text = console.export_text()
    lines = text.rstrip("\n").split("\n")
    assert len(lines) <= height
    assert max(len(line) for line in lines) <= width
    _, r = check_trace(path)
    m = r["messages"]
    b = r["bounds"]
    assert re.search(r"served\s+%d / %d" % (r["served"], r["requests"]), text)
    assert "{:,} (token {:,} + request {:,})".format(m["total"], m["token"], m["request"]) in text
    assert re.search(r"msgs/req\s+%.2f ≤ %d" % (r["messages_per_request"], b["messages_per_request"]), text)
    assert re.search(r"max service\s+%d ≤ %d" % (r["max_service_traffic"], b["service_traffic"]), text)
    assert re.search(r"latency\s+p50 \d+\s+p99 \d+\s+max %d hop" % r["latency"]["max"], text)
    assert "■ end" in text and " %s " % protocol.upper() in text
    assert "quiescent=True" in text  # the log's last line: the end event


def _replayed(meta, events, width, height):
    """(console, dashboard, screen text) after replaying events at once on a recording console."""
    console = recording_console(width, height)
    dash = Dashboard(console, events, meta, speed=None)
    dash.run()
    return console, dash, console.export_text()


def test_screen_of_a_small_ring_draws_every_node_and_the_token():
    meta = header("q", 3, "sim", "hop")
    events = [Event(0, "req", 1), Event(0, "send", 1, 1, "request"), Event(1, "recv", 2, 1, "request"),
              Event(1, "send", 2, 2, "request"), Event(2, "recv", 0, 2, "request"),
              Event(2, "send", 0, 0, "token", {"count": 1, "state": 0, "seq": 0, "epoch": 0})]
    console, dash, text = _replayed(meta, events, 80, 24)
    assert "token on link 0→1  last hop: counter 1" in text
    assert re.search(r"╭▶ 0 ──●─▶ 1 ────▶ 2 ────▶╮", text)
    assert re.search(r"state\s+idle\s+req\s+idle", text)
    model = dash.model
    assert model.node_state == [IDLE, REQUESTING, IDLE]
    assert model.consumed_at == [1, 0, 0]
    model.apply(Event(3, "recv", 1, 0, "token", {"count": 1, "state": 0, "seq": 0, "epoch": 0}))
    model.apply(Event(3, "enter", 1))
    assert model.node_state[1] == IN_CS and model.token_place() == ("node", 1)
    assert model.latencies == [3]


@pytest.mark.parametrize("protocol", ["d", "d-literal"])
def test_derived_flags_are_the_nodes_flags(protocol):
    """M_p from the frames equals the nodes' own flag at the end of every time unit."""
    n = 6
    nodes = [make_node(protocol, i, n) for i in range(n)]
    wl = make_workload("poisson", n, 150, seed=7, cs_time=1)
    model = DashModel(protocol, n)
    checks = [0]

    def listener(event):
        if model.t is not None and event.t != model.t:
            # every node handler of the previous time unit has run (simcore traces recv before it)
            assert model.flag == [node.flag for node in nodes], model.t
            checks[0] += 1
        model.apply(event)

    from picoring.check.checker import Checker

    simcore.run(nodes, wl, 1, Checker(protocol, n), tracer=TraceTap(listener, n), idle_horizon=4 * n)
    assert checks[0] > 100
    assert sum(model.stopped_at) > 0  # the workload did stop some request messages


def _token_follows_the_nodes(protocol, n, workload, requests, seed):
    """Run the simulator with a DashModel listening; at the end of every time unit the model's
    token is where the nodes hold it (on a link when no node has it), and at every entry it is
    at the entering node already, from the frames alone. Returns the model and the report."""
    nodes = [make_node(protocol, i, n) for i in range(n)]
    wl = make_workload(workload, n, requests, seed=seed, cs_time=1)
    model = DashModel(protocol, n)
    seen = {"node": 0, "link": 0, "enter": 0}

    def listener(event):
        if model.t is not None and event.t != model.t:
            holders = [i for i, node in enumerate(nodes) if node.has_token]
            place = model.token_place()
            assert place == (("node", holders[0]) if holders else ("link", place[1])), (model.t, holders, place)
            seen[place[0]] += 1
        if event.ev == "enter":
            assert model.token_place() == ("node", event.node), event
            seen["enter"] += 1
        model.apply(event)

    from picoring.check.checker import Checker

    checker = Checker(protocol, n)
    simcore.run(nodes, wl, 1, checker, tracer=TraceTap(listener, n), idle_horizon=4 * n)
    return model, seen, checker.report()


def test_a_token_that_travels_as_a_message_is_placed_from_its_frames():
    """The toy's token is a layer message (kind 1, sent to a requester by index): the descriptor's
    about["messages"] names its kind, and the model places it from those hop frames as it does
    a token frame, with where it is going (no protocol name in host/)."""
    model, seen, report = _token_follows_the_nodes("toy", 6, "poisson", 150, 7)
    assert report["ok"] and seen["enter"] == 150 and seen["link"] > 100 and seen["node"] > 100
    # every message frame is the token's or a request's (the descriptor's two kinds)
    assert sum(model.token_sends) + sum(model.request_sends) == report["messages"]["msg"] > 0
    assert sum(model.token_sends) == sum(model.token_recvs) and model.in_flight() == (0, 0)
    # a token frame still places the token as before
    model, seen, _ = _token_follows_the_nodes("q", 6, "poisson", 150, 7)
    assert seen["enter"] == 150 and seen["link"] > 100


def test_a_message_token_on_boards_is_placed_from_their_event_records(ring):
    """The same on a ring of boards (virtual by default: the pytest plugin's ring): the harness's
    merged events place the toy's token at every entering node before its enter event."""
    ring.flash("toy")
    model = DashModel("toy", ring.n, "us")
    entered = []

    def listener(event):
        if event.ev == "enter":
            entered.append((event.node, model.token_place()))
        model.apply(event)

    run = ring.make_run(ring.ports, "toy", make_workload("sequential", ring.n, 8, seed=2), seed=2, listener=listener)
    try:
        run.connect()
        report = run.run()
    finally:
        run.close()
    assert report["ok"] and report["served"] == 8, report["violations"]
    assert entered == [(node, ("node", node)) for node, _ in entered] and len(entered) == 8
    assert sum(model.token_sends) > 0 and model.in_flight() == (0, 0)


def test_the_screen_shows_a_token_message_on_its_way():
    meta = header("toy", 5, "sim", "hop")
    tok = {"mkind": 1, "src": 0, "dst": 3, "seq": 0, "epoch": 0}
    events = [Event(0, "req", 3),
              Event(0, "send", 3, 3, "msg", {"mkind": 0, "src": 3, "dst": 255, "hop": 1, "seq": 0, "epoch": 0, "fwd": False}),
              Event(1, "recv", 4, 3, "msg", {"mkind": 0, "src": 3, "dst": 255, "hop": 1, "seq": 0, "epoch": 0}),
              Event(1, "send", 4, 4, "msg", {"mkind": 0, "src": 3, "dst": 255, "hop": 2, "seq": 0, "epoch": 0, "fwd": True}),
              Event(2, "recv", 0, 4, "msg", {"mkind": 0, "src": 3, "dst": 255, "hop": 2, "seq": 0, "epoch": 0}),
              Event(2, "send", 0, 0, "msg", {"mkind": 0, "src": 3, "dst": 255, "hop": 3, "seq": 0, "epoch": 0, "fwd": True}),
              Event(2, "send", 0, 0, "msg", dict(tok, hop=1, fwd=False))]
    console, dash, text = _replayed(meta, events, 100, 30)
    assert "token on link 0→1 to node 3" in text
    assert re.search(r"╭▶ 0 ──●─▶ 1 ────▶ 2 ────▶ 3 ────▶ 4 ────▶╮", text)
    assert "in flight: 1 token, 1 request" in text  # and the broadcast, 2 hops from home
    assert re.search(r"req→\s+1\s+0\s+0\s+1\s+1", text)  # its hop frames per link, from the descriptor's kind
    model = dash.model
    model.apply(Event(3, "recv", 1, 0, "msg", dict(tok, hop=1)))
    assert model.token_place() == ("node", 1) and model.token_dst == 3
    console.print(dash.render())
    assert "token at node 1, passing on to node 3" in console.export_text()
    model.apply(Event(3, "send", 1, 1, "msg", dict(tok, hop=2, fwd=True)))
    model.apply(Event(4, "recv", 2, 1, "msg", dict(tok, hop=2)))
    model.apply(Event(4, "send", 2, 2, "msg", dict(tok, hop=3, fwd=True)))
    model.apply(Event(5, "recv", 3, 2, "msg", dict(tok, hop=3)))
    model.apply(Event(5, "enter", 3))
    assert model.token_place() == ("node", 3) and model.token_dst is None
    assert model.token_sends == [1, 1, 1, 0, 0] and model.latencies == [5]
    dash.kind_filter = "token"  # the log's token filter finds the token's message frames
    console.print(dash.render())
    screen = console.export_text().split("\n")
    start = next(i for i, line in enumerate(screen) if line.startswith(" log · token"))
    lines = [line.strip() for line in screen[start + 1:-2] if line.strip()]
    assert len(lines) == 6 and all(" msg 1 " in line for line in lines)
    assert lines[-2].endswith("send →3   msg 1 0→3 fwd seq=0") and lines[-1].endswith("recv ←2   msg 1 0→3 seq=0")


def test_a_token_lost_on_a_wire_leaves_the_picture_and_a_new_one_takes_its_place():
    """A ring trace's "lost" event (the next frame on the wire showed the gap): the token shown
    on that link is gone, and no longer counted in flight; a token made again is shown as usual,
    and a loss learnt of after it does not move it."""
    meta = header("wt", 4, "ring", "us")
    tok = {"mkind": 0, "src": 1, "dst": 3, "hop": 1, "seq": 4, "epoch": 0, "fwd": False}
    events = [Event(0, "send", 1, 1, "msg", dict(tok)),
              Event(90, "lost", 1, 1, "msg", dict(tok), {"sent_t": 0})]
    console, dash, text = _replayed(meta, events, 100, 30)
    assert "token lost on link 1→2, none seen since" in text
    assert re.search(r"╭▶ 0 ────▶ 1 ──×─▶ 2 ────▶ 3 ────▶╮", text)
    model = dash.model
    assert model.token_place() == ("lost", 1) and model.in_flight() == (0, 0) and model.token_lost == [0, 1, 0, 0]
    model.apply(Event(150, "regen", 2, None, "token", {"seq": 1}))
    model.apply(Event(160, "send", 2, 2, "msg", dict(tok, src=2, dst=3)))
    model.apply(Event(200, "regen", 0, None, "token", {"seq": 1}))
    model.apply(Event(210, "send", 0, 0, "msg", dict(tok, src=0, dst=2)))
    model.apply(Event(220, "lost", 2, 2, "msg", dict(tok, src=2, dst=3), {"sent_t": 160}))  # seen after the next one's send
    assert model.token_place() == ("link", 0) and model.in_flight() == (1, 0)
    assert model.checker.soft_report()["tokens_lost"] == 2


def _log_lines(console, dash):
    console.print(dash.render())
    text = console.export_text()
    return text.split(" log")[1].split("\n")[1:-2]


def test_keys_filter_the_log(traces):
    meta, events = read(traces[("d", 5)])
    console = recording_console(120, 40)
    dash = Dashboard(console, events, meta, speed=None)
    dash.run()
    console.export_text()  # drop the final frame
    for key in "2\n":
        dash.on_key(key)
    assert dash.node_filter == 2
    lines = [line for line in _log_lines(console, dash) if line.strip()]
    assert len(lines) > 10 and all(" n2 " in line for line in lines)
    dash.on_key("k")  # kinds: all -> req -> send
    dash.on_key("k")
    lines = [line for line in _log_lines(console, dash) if line.strip()]
    assert lines and all(" n2 " in line and " send " in line for line in lines)
    dash.on_key("c")
    assert dash.node_filter is None and dash.kind_filter == "all"
    for key in "9\n":  # not a node of this ring: no filter
        dash.on_key(key)
    assert dash.node_filter is None
    dash.on_key("N")
    assert dash.node_filter == 4
    dash.on_key("n")
    assert dash.node_filter == 0


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def sleep(self, dt):
        self.now += max(dt, 0.001)


def test_paced_replay_pause_speed_and_quit(traces):
    """At speed 1 a simulator trace plays 10 hops a second; pause stops it; q quits before the end."""
    meta, events = read(traces[("d", 5)])
    clock = FakeClock()
    turns = [[]] * 30 + [[" "]] + [[]] * 30 + [[" ", "+"]] + [[]] * 20 + [["q"]]
    dash = Dashboard(recording_console(80, 24), events, meta, keys=ScriptedKeys(turns), speed=1.0,
                     clock=clock, sleep=clock.sleep)
    seen = []
    real_on_key = dash.on_key

    def on_key(key):
        seen.append((key, dash.model.t, clock.now))
        real_on_key(key)

    dash.on_key = on_key
    model = dash.run()
    assert dash.quit and not dash.finished
    assert dash.speed == 2.0
    (_, t_pause, c_pause), (_, t_resume, c_resume) = seen[0], seen[1]
    assert c_resume > c_pause and t_resume == t_pause  # nothing played while paused
    assert 0 < model.events < len(events)
    # about 10 hops per second of (fake) time before the pause
    first_t = events[0].t
    assert abs((t_pause - first_t) - 10 * c_pause) <= 2


def test_live_feed_from_a_thread_matches_the_simulators_report():
    feed = FeedSource(max_buffered=1000)
    result = {}

    def work():
        result["report"] = simulate("q", 7, "poisson", requests=300, seed=2, listener=feed)
        feed.finish()

    thread = threading.Thread(target=work)
    thread.start()
    dash = Dashboard(recording_console(80, 24), feed, header("q", 7, "sim", "hop"), speed=None)
    model = dash.run()
    thread.join()
    r = result["report"]
    assert dash.finished
    assert model.checker.report()["messages"] == r["messages"]
    assert model.checker.served == r["served"] == 300
    assert model.checker.max_service == r["max_service_traffic"]


def test_frame_counters_from_the_harness_are_shown(traces):
    meta, events = read(traces[("d", 5)])
    console = recording_console(80, 24)
    Dashboard(console, events, meta, speed=None, stats=lambda: {"corrupt": 2, "events lost": 0}).run()
    assert re.search(r"frames\s+corrupt 2  events lost 0", console.export_text())


def test_restart_output_is_not_garbage_on_the_dashboard(traces):
    """A fault-free run showed "garbage lines 36": the boards' restart output (issue 18, item 4)."""
    from picoring.cli.dash import frame_counters
    from picoring.ring.hostlink import LineParser

    from test_hostlink import RESTART_OUTPUT

    parsers = [LineParser(board=i, size=2) for i in range(2)]
    for p in parsers:
        p.feed(RESTART_OUTPUT)
    parsers[1].feed(b"line noise\n")
    counters = frame_counters(parsers, [{}, {"crc": 1}])
    assert counters == {"corrupt": 1, "dropped": 0, "lost": 0, "garbage lines": 1, "restart lines": 12}
    meta, events = read(traces[("d", 5)])
    console = recording_console(100, 24)
    dash = Dashboard(console, events, meta, speed=None, stats=lambda: counters)
    dash.run()
    # what the count is, said in a row of its own (issue 37, item 22: "boot banner 36" was not explained)
    screen = console.export_text()
    assert re.search(r"frames\s+corrupt 1  dropped 0  lost 0  garbage lines 1\s*\n", screen)
    assert re.search(r"restarts\s+12 lines of MicroPython's banner as boards restarted: no fault", screen)
    text = dash._frame_stats()
    red = {text.plain[span.start:span.end] for span in text.spans if "red" in str(span.style)}
    assert red == {"corrupt 1", "garbage lines 1"}  # the banner is no alarm


def test_a_paused_live_view_says_the_ring_runs_on(traces):
    """Pausing a live ring freezes the screen only: the title and the key line say so, and
    the events keep being counted (issue 37, item 22). A replay's pause stops the replay."""
    meta, events = read(traces[("d", 5)])
    feed = FeedSource(max_buffered=100_000)
    for e in events[:50]:
        feed(e)
    dash = Dashboard(recording_console(80, 24), feed, dict(meta, source="virtual"), speed=None)
    dash.on_key(" ")
    dash.pump()
    assert dash.model.events == 50  # counted while paused
    assert "▮▮ view paused, ring runs on" in dash._title_line(80).plain
    assert dash._footer(80).plain.startswith("space resume view n/N node")
    dash.on_key(" ")
    assert dash._footer(80).plain.startswith("space pause view n/N node")
    paced = FeedSource(max_buffered=100_000)  # dash --sim at a speed: the playback waits, so does the feed
    for source, speed in ((events, 1.0), (paced, 1.0)):
        replay = Dashboard(recording_console(80, 24), source, meta, speed=speed)
        replay.on_key(" ")
        assert "▮▮ paused" in replay._title_line(80).plain and "runs on" not in replay._title_line(80).plain
        assert replay._footer(80).plain.startswith("space resume n/N node")


def test_no_keys_without_a_terminal():
    with TerminalKeys(io.StringIO()) as keys:
        assert not keys.interactive and keys.read() == []


def test_dash_command_replays_a_trace(traces, capsys):
    path = traces[("q", 6)]
    assert main(["dash", "--replay", str(path), "--speed", "0", "--exit"]) == 0
    out = capsys.readouterr().out
    _, r = check_trace(path)
    assert "{:,} (token".format(r["messages"]["total"]) in out  # the final screen
    assert "OK" in out  # then the checker's report


def test_dash_on_ports_that_are_not_there_is_a_clear_error(capsys):
    from picoring.cli.main import main

    status = main(["dash", "--ports", "/dev/nonexistent-picoring0,/dev/nonexistent-picoring1", "-k", "1", "--exit"])
    assert status == 2
    assert "/dev/nonexistent-picoring0" in capsys.readouterr().err


@pytest.mark.parametrize("width", [80, 120])
def test_the_fram_counter_is_shown_against_the_entries(width):
    # --resource fram (docs/fram.md): the counter's set, each section's read and write, the count
    def cs(t, node, read, wrote):
        return [Event(t, "req", node), Event(t + 1, "enter", node, payload={"seq": read + 1, "epoch": 1}),
                Event(t + 2, "res", node, extra={"op": "read", "value": read}),
                Event(t + 3, "res", node, extra={"op": "write", "value": wrote}), Event(t + 4, "exit", node)]

    meta = header("q", 3, "ring", "us", resource="fram")
    good = [Event(0, "res", 0, extra={"op": "set", "value": 0})] + cs(10, 1, 0, 1) + cs(20, 2, 1, 2)
    for events, want in ((good, "FRAM        counter 2 / entries 2 (last written)"),
                         (good + [Event(30, "res", 0, extra={"op": "count", "value": 2})], "counter 2 / entries 2"),
                         (good + cs(40, 0, 1, 2) + [Event(50, "res", 0, extra={"op": "count", "value": 2})],
                          "counter 2 / entries 3  lost 1")):
        console = recording_console(width, 30)
        Dashboard(console, events, meta, speed=None).run()
        text = console.export_text()
        assert re.search(r"FRAM\s+" + re.escape(want.split("FRAM", 1)[-1].strip()), text), text
    assert "FRAM write 2" in text and "(last written)" not in text
