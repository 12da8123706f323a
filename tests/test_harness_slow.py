"""The harness on a slow or frozen machine: late answers, stale replies, lost events after a USB
outage. No boards: the RingRun loop's pieces are driven directly."""

import queue

from picoring.ring.hostlink import Reply
from picoring.ring.link import BoardLink, now_us


def test_a_reply_received_before_the_command_never_answers_it():
    # BoardLink.replies keeps every reply the board sent; an old !flush reply (the run's own,
    # whose answer the loop read from the inbox) must not stand for a later command's.
    link = BoardLink(0, "fake", queue.Queue())
    link.replies.put((now_us() - 1000, Reply(0, "flush", "")))  # stale
    sent = []

    def write(data):
        sent.append(data)
        link.replies.put((now_us() + 1, Reply(0, "flush", "fresh")))

    link.write = write
    t, reply = link.command("flush", timeout=1.0)
    assert sent == [b"!flush\n"] and reply.text == "fresh"


def test_requests_written_after_the_state_query_are_not_failed_by_its_answer():
    # After a USB outage the host asks the board's !status and !flush without waiting, and the
    # run loop goes on writing requests meanwhile. The board answers for what it had when it
    # read !status: a request written after it (counted in "after") is not in that answer and
    # must not be failed as lost (it was, and the board then refused the next request as one
    # too many: the host's count stayed at 1 forever, a false "ring stalled").
    from picoring.ring.harness import RingRun, UNSEEN_IN_OUTAGE
    from picoring.sim.workload import make_workload

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
    from picoring.ring.merge import CausalMerger
    from picoring.ring.hostlink import BoardEvent

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


def test_a_request_is_placed_after_what_the_host_had_seen_when_it_wrote_it():
    # Emulated Picos in CI: the adversarial workload waited for the token to rest, then asked
    # board 0. Board 0's clock estimate (its clock drifts from the host's between pings) put
    # its req before the token's last hop, received at board 2 earlier, and that hop was
    # counted as the request's service traffic (4, where the simulator has 3). The host read
    # that hop before it wrote the request: the req is placed after it.
    from picoring.ring.harness import RingRun
    from picoring.ring.hostlink import BoardEvent
    from picoring.sim.workload import make_workload

    run = RingRun(["p0", "p1", "p2"], "d", make_workload("adversarial", 3, 1, seed=0))
    run.links = [BoardLink(i, p, run.inbox, 3) for i, p in enumerate(run.ports)]
    for link in run.links:
        link.offset = 0
    run.t0 = 0
    run._place(1, None, BoardEvent(1, 0, 1_000, "send", link=1, kind="token"))
    run._place(2, None, BoardEvent(2, 0, 1_200, "recv", link=1, kind="token"))
    run.req_floors[0].append(run.merger.latest)  # what inject() does when it writes the request
    run._place(0, None, BoardEvent(0, 0, 1_100, "req"))  # its clock says: before that recv
    run._place(0, None, BoardEvent(0, 1, 1_150, "send", link=0, kind="request"))
    order = [(e.board, e.ev) for _, e in run.merger.release(10_000_000, final=True)]
    assert order == [(1, "send"), (2, "recv"), (0, "req"), (0, "send")]
    # without a floor (a request the host did not write, or one of a restarted board) the clock decides
    run._place(0, None, BoardEvent(0, 2, 500, "req"))
    assert [e.ev for _, e in run.merger.release(10_000_000, final=True)] == ["req"]


def test_the_link_says_disconnected_before_reconnected_when_a_writer_finds_the_loss():
    # A power-cycled virtual board's port is back within microseconds. When the run loop's
    # write found the port gone, the reader thread reopened it and queued "reconnected" while
    # the writer was still closing the old port; "disconnected" came second (seen in CI).
    import threading

    reopened = threading.Event()

    class Gone:
        write_timeout = None
        in_waiting = 0

        def read(self, k):
            reopened.wait(0.01)
            return b""

        def write(self, data):
            raise OSError(5, "Input/output error")

        def close(self):
            reopened.wait(2.0)  # the old code queued its notice only after this

    class Back(Gone):
        def close(self):
            pass

    inbox = queue.Queue()
    link = BoardLink(0, "fake", inbox)
    ports = [Gone(), Back()]

    def open_port():
        ser = ports.pop(0)
        if isinstance(ser, Back):
            reopened.set()
        return ser

    link._open_port = open_port
    link.open()
    try:
        link.write(b"!r\n")
        words = [inbox.get(timeout=5)[2].word for _ in range(2)]
    finally:
        link.close()
    assert words == ["disconnected", "reconnected"]
