"""Where the paper's claims fail on its own rules: the smallest schedules,
kept as tests (docs/bounds.md explains each one and the correction)."""

from conftest import why_not_ok
from picoring.check.checker import bounds_for, paper_bounds_for
from picoring.sim.simulate import simulate
from picoring.sim.workload import Schedule

# n = 2, critical sections of length 0: node 1 asks at t=0, node 0 at t=1.
TWO_NODE = [(0, 1), (1, 0)]


def run(protocol, n, schedule, cs_time=0, **kw):
    return simulate(protocol, n, Schedule(n, schedule), cs_time=cs_time, **kw)


def test_d_as_printed_never_goes_quiet():
    # Node 0's request message is still travelling when T serves node 0; it
    # reaches T at rest, rule 2 makes T active, and rule 4 passes an active T
    # that finds no pending request on and on.
    report = run("d-literal", 2, TWO_NODE)
    assert report["served"] == 2
    assert report["quiescent"] is False
    assert not report["ok"]
    kinds = {v["kind"] for v in report["violations"]}
    assert kinds == {"quiescence", "bound"}  # and the 2n-per-request bound goes with it
    assert report["schedule"] == [{"t": 0, "node": 1}, {"t": 1, "node": 0}]


def test_the_report_of_d_as_printed_names_the_documented_finding():
    import io

    from rich.console import Console

    from picoring.check.report import print_report

    console = Console(record=True, width=200, file=io.StringIO())
    print_report(run("d-literal", 2, TWO_NODE), console)
    text = console.export_text()
    assert ("quiescence, a documented finding: docs/bounds.md, finding 1: a stale request message wakes the resting "
            "token, and rule 4 passes it on for ever") in text
    assert "CHECK FAILED" in text  # the run itself still fails its checks (compare reports it as expected)


def test_d_literal_livelock_grows_with_the_horizon_it_is_given():
    # the token keeps moving: more time, more messages
    events = []
    run("d-literal", 2, TWO_NODE, listener=events.append)
    last = [e for e in events if e.ev == "send"][-1]
    assert last.kind == "token" and last.payload["state"] == 1  # an active token, forever


def test_corrected_d_goes_quiet_on_the_same_schedule():
    report = run("d", 2, TWO_NODE)
    assert report["ok"], why_not_ok(report)
    assert report["quiescent"] is True
    assert report["messages"]["total"] <= 2 * 2 * 2


def test_q_service_traffic_exceeds_the_printed_bound_at_n2():
    # Node 1 asks (1 message); node 0 holds T, counts it and passes T (1);
    # node 0 asks again while T is on the wire (1): 3 messages between node 1's
    # request and its token, the printed bound 3/2 n^2 - 5/2 n + 1 is 2.
    report = run("q", 2, TWO_NODE)
    assert paper_bounds_for("q", 2)[1] == 2
    assert report["max_service_traffic"] == 3
    assert report["over_paper_service_bound"] == 1
    assert report["ok"]  # within the corrected bound (5n^2 - 5n + 2) / 2 = 6
    assert bounds_for("q", 2)[1] == 6


def test_q_service_traffic_exceeds_the_printed_bound_at_n3():
    report = run("q", 3, [(0, 2), (1, 0), (1, 1), (3, 1), (4, 2)])
    assert paper_bounds_for("q", 3)[1] == 7
    assert report["max_service_traffic"] == 10
    assert report["ok"] and bounds_for("q", 3)[1] == 16


def test_d_service_traffic_exceeds_3n_minus_3():
    # Node 1 is served on T's way to node 0 and asks again: its second request
    # message crosses edges that its first one crossed, after T reset their M flags.
    schedule = [(0, 2), (4, 0), (4, 1), (5, 1)]
    for protocol in ("d", "d-literal"):
        report = run(protocol, 3, schedule)
        assert report["max_service_traffic"] == 7 == 3 * 3 - 2
        assert report["max_service_request"]["node"] == 0
        assert report["over_paper_service_bound"] == 1
    assert report["quiescent"] is False  # d-literal livelocks here too
    assert run("d", 3, schedule)["ok"]  # within the corrected bound 3n - 2


def test_d_total_exceeds_2n_per_request_even_corrected():
    # Node 0 asks right after an active T left it; its request message follows
    # T around (T resets every M flag ahead of it, so nothing stops the message),
    # node 0 is served by the check tour, then the stale message wakes T at
    # rest and T searches n - 1 hops for nobody.
    report = run("d", 5, [(0, 4), (1, 0)])
    assert report["messages"] == {"total": 21, "token": 12, "request": 9}
    assert report["over_paper_total_bound"] is True  # 21 > 2n * 2 = 20
    assert report["quiescent"] is True
    assert report["ok"]  # the checked (empirical) bound is 3n per request


def test_a_report_over_a_printed_bound_says_which_bound_was_checked_and_why():
    """Next to "requests over the paper's printed bound": the bound checked instead, and a line
    under the table with where the printed one is printed and why it does not hold (the
    descriptor's "why")."""
    import io

    from rich.console import Console

    from picoring.check.report import print_report

    console = Console(record=True, width=80, file=io.StringIO())
    print_report(run("q", 3, [(0, 2), (1, 0), (1, 1), (3, 1), (4, 2)]), console)
    text = " ".join(console.export_text().split())
    assert "printed 7; checked 16 ¹" in text
    assert ("¹ service traffic: the paper's 7 (Thm 3.1 / section 3) does not hold: the proof misses requests made "
            "while T is on the wire, requests made again, and stale request messages (docs/bounds.md, finding 2); "
            "the run is checked against 16 instead") in text
    console = Console(record=True, width=80, file=io.StringIO())
    print_report(run("d", 5, [(0, 4), (1, 0)]), console)  # finding 4: 21 messages for 2 requests > 2n each
    text = " ".join(console.export_text().split())
    assert "printed 10; checked 15 ¹" in text and "printed 12; checked 13 ²" in text
    assert "¹ messages per request: the paper's 10 (Thm 4.1) does not hold: a request message that follows T" in text
    assert "² service traffic: the paper's 12 (Thm 4.1) does not hold: T resets the flags it passes" in text
