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
