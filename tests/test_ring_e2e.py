"""End to end on a ring of boards, through the picoring pytest plugin's `ring`
fixture: virtual boards by default (--ring-virtual N), real ones with
--ring-ports P1,P2,... or --ring-file ring.json, and the tests do not change.
The firmware is flashed with mpremote (picoring flash's path), the boards are
driven by the harness over their USB serial, and every run is checked like a
simulation. Each board's serial traffic is in the report of a failed test."""

import json

import pytest

from picoring.cli.main import main
from picoring.ring.harness import RingRun
from picoring.ring.link import HarnessError
from picoring.sim.simulate import simulate
from picoring.sim.workload import make_workload
from conftest import wait_for, why_not_ok


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["q", "d"])
@pytest.mark.parametrize("workload", ["sequential", "adversarial"])
def test_exact_counts_match_the_simulator(ring, protocol, workload):
    n = ring.n
    report = ring.run(protocol, workload, 12, seed=3)
    assert report["ok"], why_not_ok(report)
    assert report["served"] == 12 and report["events_lost"] == 0
    sim = simulate(protocol, n, workload, requests=12, seed=3)
    assert report["messages"] == sim["messages"]
    assert report["max_service_traffic"] == sim["max_service_traffic"]
    if workload == "adversarial":
        per_request = n if protocol == "q" else 2 * n - 1
        assert report["messages"]["total"] == 12 * per_request


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["s", "q", "d"])
def test_poisson_all_served_within_bounds(ring, protocol):
    report = ring.run(protocol, "poisson", 40, seed=1, rate=0.3)
    assert report["ok"], why_not_ok(report)
    assert report["served"] == report["requests"] == 40
    assert report["safety_violations"] == 0
    if protocol == "s":
        assert report["quiescent"] is None and report["messages"]["request"] == 0
    else:
        assert report["quiescent"] is True


@pytest.mark.slow
def test_ring_order_is_checked(ring):
    ring.flash("q")
    ports = list(ring.ports)
    ports[0], ports[1] = ports[1], ports[0]
    run = ring.make_run(ports, "q", make_workload("sequential", ring.n, 1))
    try:
        with pytest.raises(HarnessError, match="ring position 1 but was given as port #0"):
            run.connect()
    finally:
        run.close()


@pytest.mark.slow
def test_wrong_protocol_is_a_clear_error(ring):
    ring.flash("d")
    run = ring.make_run(ring.ports, "q", make_workload("sequential", ring.n, 1))
    try:
        with pytest.raises(HarnessError, match="runs protocol 'd', this run asks for 'q'"):
            run.connect()
    finally:
        run.close()


def test_not_a_port():
    run = RingRun(["/dev/nonexistent-picoring0", "/dev/nonexistent-picoring1"], "q", make_workload("sequential", 2, 1))
    with pytest.raises(HarnessError, match="/dev/nonexistent-picoring0: cannot open"):
        run.connect()
    run.close()


@pytest.mark.slow
def test_run_command_writes_a_trace_that_check_agrees_with(ring, tmp_path, capsys):
    # `picoring run --ports` restarts the boards as it would real ones: Ctrl-C, Ctrl-D over USB.
    ring.flash("d")
    trace = tmp_path / "ring.jsonl"
    status = main(["run", "--ports", ",".join(ring.ports), "-p", "d", "-w", "sequential", "-k", "6", "--seed", "2",
                   "--trace", str(trace), "--json"])
    live = json.loads(capsys.readouterr().out)
    assert status == 0, live["violations"]
    assert live["messages"]["total"] == simulate("d", ring.n, "sequential", requests=6, seed=2)["messages"]["total"]
    assert main(["check", str(trace), "--json"]) == 0
    offline = json.loads(capsys.readouterr().out)
    for key in ("messages", "served", "max_service_traffic", "safety_violations"):
        assert offline[key] == live[key]


@pytest.mark.slow
def test_run_command_with_a_fresh_virtual_ring(tmp_path, capsys):
    status = main(["run", "--virtual", "3", "-p", "q", "-w", "sequential", "-k", "4", "--json"])
    live = json.loads(capsys.readouterr().out)
    assert status == 0, live["violations"]
    assert live["served"] == 4


@pytest.mark.slow
def test_an_s_run_starts_from_a_consistent_cut(ring):
    # S's token never rests: a run that threw away the start-up's events cut it in half (a
    # receive kept, its send dropped), and the merger then placed receives by clock estimates
    # (causal_forced was 60 to 90 here). From the boards' boot on there are no half messages.
    report = ring.run("s", "poisson", 50, seed=5)
    assert report["ok"], why_not_ok(report)
    # (a loaded machine may add an explained condition, "slow": never one of order)
    assert report["causal_forced"] == 0 and [c for c in report["run_conditions"] if c["kind"] == "order"] == []


@pytest.mark.slow
def test_start_up_claims_do_not_pair_the_links(ring):
    # The boards restart one after another, and a board that is stopped or booting loses the
    # claims the restarted ones send it: counted as sent since their boot, never received.
    # They put the link counts off (here 1 and 2 frames on links 1 and 2, every run), so each
    # receive was paired with an earlier send and placed by clock estimate: on emulated Picos,
    # whose clocks drift from the host's, a request then counted a hop of the token before it
    # (max service traffic 4, the simulator's 3). At rest every frame sent has been received.
    report = ring.run("q", "adversarial", 6, seed=3)
    assert report["ok"], why_not_ok(report)
    assert report["quiescent"] is True
    assert report["unreceived_sends"] == [0] * ring.n and report["causal_forced"] == 0
    # (a loaded machine may add an explained condition: the boards' pings answered late, "slow")
    assert [c for c in report["run_conditions"] if c["kind"] == "order"] == []


def test_a_receive_placed_without_its_send_is_a_run_condition():
    from picoring.ring.merge import CausalMerger
    from picoring.ring.hostlink import BoardEvent

    merger = CausalMerger(3)
    merger.push(1, 10, BoardEvent(1, 0, 0, "recv", link=0, kind="token"))  # its send was lost
    merger.push(1, 20, BoardEvent(1, 1, 0, "send", link=1, kind="token"))
    merger.push(0, 5, BoardEvent(0, 0, 0, "enter"), counted=False)  # pairs links only: not released
    out = merger.release(100, final=True)
    assert [e.ev for _, e in out] == ["recv", "send"]
    assert merger.forced == 1 and merger.forced_links == [1, 0, 0]


def test_a_restarted_boards_events_wait_for_a_sample_of_its_new_clock():
    # A Pico that power-cycles counts its microseconds from 0 again: placed with the offset of
    # its previous incarnation, its events landed seconds before the frames that caused them.
    from picoring.ring.link import BoardLink
    from picoring.ring.hostlink import BoardEvent, Reply

    run = RingRun(["a", "b", "c"], "q", make_workload("sequential", 3, 1))
    run.links = [BoardLink(i, port, run.inbox, 3) for i, port in enumerate(run.ports)]
    run.begin(0)
    stream = run.streams[2]
    link = run.links[2]
    link.unwrap(5_000_000)
    link.offset = 4_000_000  # board ahead of the host by 4 s
    stream.place(1_000_000, BoardEvent(2, 1, 5_000_000, "send", link=2, kind="token"))
    run._restarted(2, 1_100_000, t_rx=1_100_000)
    assert link.offset is None  # the old incarnation's offset says nothing about the new clock
    stream.place(1_101_000, BoardEvent(2, 1, 1_000, "recv", link=1, kind="token"))  # 1 ms after its boot
    assert [e.ev for _, e, _ in run.merger.queues[2]] == ["send"]  # the rest waits for the clock
    stream.clock_sample(1_102_500, Reply(2, "pong", "7 2000"), 1_090_000)  # a ping sent before the hello
    assert link.offset is None and stream.unplaced
    stream.clock_sample(1_102_500, Reply(2, "pong", "8 2000"), 1_101_500)  # tick 2000 at host 1_102_000
    placed = [(t, e.ev) for t, e, _ in run.merger.queues[2]]
    assert placed == [(1_000_000, "send"), (1_100_000, "notice"), (1_101_000, "recv")]


def test_a_link_whose_sender_lost_sends_is_placed_by_time_not_by_a_wrong_pairing():
    # Board 0's USB link was down: its sends on link 0 are lost in unknown number. Pairing by
    # counts would hold board 1's receives for board 0's next sends (a ring round late).
    from picoring.ring.merge import CausalMerger
    from picoring.ring.hostlink import BoardEvent

    merger = CausalMerger(3)
    merger.unpair(0)
    merger.push(1, 10, BoardEvent(1, 0, 0, "recv", link=0, kind="token"))
    merger.push(1, 11, BoardEvent(1, 1, 0, "enter"))
    merger.push(0, 50, BoardEvent(0, 0, 0, "send", link=0, kind="token"))
    out = merger.release(1_000_000)
    assert [(t, e.ev) for t, e in out] == [(10, "recv"), (11, "enter"), (50, "send")]
    assert merger.forced_links == [1, 0, 0]  # reported: its order is a clock estimate


class _HeldWrites:
    """What the host writes to one board held back for `seconds`, then passed on in order: the
    kernel's tty worker standing still on that board's USB input."""

    def __init__(self, link, seconds):
        import threading

        self.write = link.write
        self.lock = threading.Lock()
        self.held = []
        self.released = False
        link.write = self
        threading.Timer(seconds, self.release).start()

    def __call__(self, data):
        """As BoardLink.write: True once the data is on its way (held back counts: it goes out)."""
        with self.lock:
            if self.released:
                return self.write(data)
            self.held.append(data)
            return True

    def release(self):
        with self.lock:
            for data in self.held:
                self.write(data)
            self.released = True


@pytest.mark.slow
def test_a_board_whose_ctrl_c_comes_late_is_stopped_before_the_others_start(ring):
    # Loaded suite at 29de4bf: one board's USB input stood still for seconds, and its Ctrl-C
    # reached it after the other boards had restarted. Still running, it answered their join
    # rounds with the old ring's epoch, so the restarted position 0 took the token for alive
    # and made none; the old token had died with the old boards ("the ring formed but did not
    # come to rest: 0 board(s) hold the token"). A ring restart starts no board before every
    # board has said it stopped.
    ring.flash("q")
    run = ring.make_run(ring.ports, "q", make_workload("adversarial", ring.n, 3, seed=1), resetter=None)
    try:
        run.connect()
        _HeldWrites(run.links[0], 3.0)
        run.restart_ring(timeout=run.restart_timeout_s * run.slowness)
        for link in run.links:
            link.align()
        report = run.run()
    finally:
        run.close()
    assert report["ok"], why_not_ok(report)
    assert report["served"] == 3


@pytest.mark.slow
def test_a_board_left_at_its_repl_is_restarted_into_the_firmware(ring):
    # Stopped by hand (Ctrl-C in a terminal): at its REPL a board says no "!stopped" when the
    # next run stops the ring; its fresh prompt tells the harness it is not running.
    import queue

    from picoring.ring.link import BoardLink

    ring.flash("q")
    link = BoardLink(0, ring.ports[0], queue.Queue()).open()
    try:
        sent = link.parser.prompts
        link.write(b"\x03")
        link.wait_reply("stopped")
        wait_for(lambda: link.parser.prompts > sent, what="the REPL's prompt")
    finally:
        link.close()
    report = ring.run("q", "adversarial", 3, seed=1)
    assert report["ok"], why_not_ok(report)
    assert report["served"] == 3
