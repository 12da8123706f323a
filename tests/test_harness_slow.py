"""The harness on a slow or frozen machine: late answers, stale replies, lost events after a USB
outage. No boards: the RingRun loop's pieces are driven directly."""

import queue

from picoring import harness
from picoring.harness import BoardLink
from picoring.hostlink import Reply


def test_a_reply_received_before_the_command_never_answers_it():
    # BoardLink.replies keeps every reply the board sent; an old !flush reply (the run's own,
    # whose answer the loop read from the inbox) must not stand for a later command's.
    link = BoardLink(0, "fake", queue.Queue())
    link.replies.put((harness.now_us() - 1000, Reply(0, "flush", "")))  # stale
    sent = []

    def write(data):
        sent.append(data)
        link.replies.put((harness.now_us() + 1, Reply(0, "flush", "fresh")))

    link.write = write
    t, reply = link.command("flush", timeout=1.0)
    assert sent == [b"!flush\n"] and reply.text == "fresh"


def test_requests_written_after_the_state_query_are_not_failed_by_its_answer():
    # After a USB outage the host asks the board's !status and !flush without waiting, and the
    # run loop goes on writing requests meanwhile. The board answers for what it had when it
    # read !status: a request written after it (counted in "after") is not in that answer and
    # must not be failed as lost (it was, and the board then refused the next request as one
    # too many: the host's count stayed at 1 forever, a false "ring stalled").
    from picoring.harness import RingRun, UNSEEN_IN_OUTAGE
    from picoring.workload import make_workload

    run = RingRun(["p0", "p1", "p2"], "q", make_workload("poisson", 3, 1, seed=0))
    run.links = [BoardLink(i, p, run.inbox, 3) for i, p in enumerate(run.ports)]
    outstanding = [0, 0, 1]
    status = {"pend": 0, "cs": 0}
    assert run._resync(2, status, outstanding, 0, after=1) == 0 and outstanding == [0, 0, 1]
    # one from before the query that the board no longer has: its events were lost
    outstanding = [0, 0, 2]
    assert run._resync(2, status, outstanding, 0, after=1) == 1 and outstanding == [0, 0, 1]
    assert any(UNSEEN_IN_OUTAGE in n for n in run.notices)


def test_a_receive_waits_for_its_send_while_the_sender_has_not_been_heard_past_it():
    # A busy machine held one board's USB output back for seconds while the next board's came
    # through: the merger forced that board's receives after 2 s of wall time, without their
    # sends ("order", unexplained: the run not OK). A send is only taken for lost once its
    # board has been heard from past the receive's time (a later event, or a pong).
    from picoring.harness import CausalMerger
    from picoring.hostlink import BoardEvent

    merger = CausalMerger(3)
    merger.push(1, 1_000, BoardEvent(1, 0, 0, "recv", link=0, kind="token"))
    merger.push(0, 0, BoardEvent(0, 0, 0, "enter"))
    assert [e.ev for _, e in merger.release(5_000_000)] == ["enter"]  # 5 s later: board 0 silent since
    assert merger.forced == 0
    merger.push(0, 500, BoardEvent(0, 1, 0, "send", link=0, kind="token"))  # it was only late
    assert [e.ev for _, e in merger.release(5_100_000)] == ["send", "recv"] and merger.forced == 0
    # board 0 heard from well past a receive whose send never comes: that send was lost
    merger.push(1, 2_000_000, BoardEvent(1, 1, 0, "recv", link=0, kind="token"))
    merger.hear(0, 2_500_000)
    assert [e.ev for _, e in merger.release(5_200_000)] == ["recv"] and merger.forced == 1
