"""Host-link codec: the host side (picoring.ring.hostlink) against the firmware's own
encoder (firmware/hostlink.py run under CPython), garbage, gaps and drops."""

import importlib.util

import pytest

from picoring.ring import hostlink as hl
from picoring.check.trace import Event

from conftest import FIRMWARE


def _firmware_hostlink():
    spec = importlib.util.spec_from_file_location("fw_hostlink", FIRMWARE / "hostlink.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


fw = _firmware_hostlink()


def flushed_lines(log, per_line=12):
    lines = []
    while True:
        parts = []
        if not log.flush_one(parts.append, per_line):
            return lines
        lines.append(b"".join(parts))


def test_encode_commands():
    assert hl.encode_command("ping", 7) == b"!ping 7\n"
    assert hl.encode_command("log", 0) == b"!log 0\n"
    assert hl.REQUEST == b"!r\n"
    with pytest.raises(hl.HostLinkError):
        hl.encode_command("reboot")
    with pytest.raises(hl.HostLinkError):
        hl.encode_command("ping", "a\x03b")


def test_events_round_trip_from_firmware_log():
    ticks = iter(range(100, 10000, 10))
    log = fw.EventLog(lambda: next(ticks), capacity=16)
    log.record(fw.EV_REQ, 0, 0, 0, 0, 0)
    log.record(fw.EV_SEND, 2, 0, 0, 0, 0)
    log.record(fw.EV_RECV, 1, 1, 4, 70000, 3, tick=5)
    log.record(fw.EV_ENTER, 0, 0, 0, 70001, 0)
    log.record(fw.EV_BAD, 0, 0, 1, 0, 0)
    lines = flushed_lines(log)
    assert len(lines) == 1 and lines[0].startswith(b"*") and lines[0].endswith(b"\n")
    assert all(32 <= c < 127 for c in lines[0][:-1])
    p = hl.LineParser(board=1, size=3)
    evs = p.feed(lines[0].replace(b"\n", b"\r\n"))  # a Pico's line end
    assert [e.ev for e in evs] == ["req", "send", "recv", "enter", "bad"]
    assert [e.seq for e in evs] == [0, 1, 2, 3, 4]
    assert evs[1].kind == "request" and evs[1].link == 1
    assert evs[2] == hl.BoardEvent(1, 2, 5, "recv", 0, "token", {"count": 4, "state": 1, "seq": 70000, "epoch": 3})
    assert evs[4].aux == "crc"
    assert p.missing == 0 and p.garbage == {}
    assert evs[2].to_trace(12.5) == Event(12.5, "recv", 1, 0, "token", {"count": 4, "state": 1, "seq": 70000, "epoch": 3})
    assert evs[4].to_trace(1) is None


def test_full_ring_drops_are_reported_and_seen_as_a_gap():
    log = fw.EventLog(lambda: 1, capacity=8)
    for k in range(11):
        log.record(fw.EV_SEND, 1, 0, k, 0, 0)
    assert log.dropped_total == 3
    p = hl.LineParser(board=0, size=2)
    evs = []
    for line in flushed_lines(log, 5):
        evs += p.feed(line)
    log.record(fw.EV_EXIT, 0, 0, 0, 0, 0)
    for line in flushed_lines(log):
        evs += p.feed(line)
    assert [e.payload["count"] for e in evs if e.ev == "send"] == list(range(8))
    drop = [e for e in evs if e.ev == "drop"]
    assert len(drop) == 1 and drop[0].aux == 3 and drop[0].seq == 11
    assert p.gaps == [(8, 11, 3)] and p.missing == 3 and p.reported_dropped == 3
    assert evs[-1].ev == "exit" and evs[-1].seq == 12


def test_garbage_lines_are_counted_with_reasons_never_raised():
    p = hl.LineParser(board=0, size=2)
    data = (b"MicroPython v1.29 on 2026; linux\r\n>>> \r\n"
            b"*AAAA\n"  # base64 of 3 bytes: not whole records
            b"*!!!!\n"
            b"*abc\n"
            b"\xff\xfe\n"
            b"Traceback (most recent call last):\n"
            b"!\n"
            b"!pong 42 123456\r\n"
            b"!status pos=0 tok=1 bad=0\n")
    items = p.feed(data[:17]) + p.feed(data[17:])
    assert [type(i).__name__ for i in items] == ["Reply", "Reply"]
    assert items[0].word == "pong" and items[0].text == "42 123456"
    assert items[1].fields == {"pos": 0, "tok": 1, "bad": 0}
    # the bare REPL prompt is stripped, not counted
    # MicroPython's banner is named as such; a traceback cut short by a picoring line is a traceback
    assert p.garbage == {"boot banner": 1, "traceback": 1, "bad record": 1, "bad base64": 1, "bad base64 length": 1,
                         "not ascii": 1, "empty reply": 1}


# What a virtual board prints when the harness restarts it (Ctrl-C, then Ctrl-D): main.py's
# traceback, then the banner (seen in a fault-free run's dash as "garbage lines 36").
RESTART_OUTPUT = (b"Traceback (most recent call last):\r\n"
                  b'  File "main.py", line 169, in <module>\r\n'
                  b'  File "/tmp/picoring-virtual-x/board0/hostlink.py", line 357, in poll\r\n'
                  b"KeyboardInterrupt: \r\n"
                  b"MicroPython 9458e3a23f on 2026-07-05; linux [GCC 14.2.1] version\r\n"
                  b'Type "help()" for more information.\r\n'
                  b">>> !hello fw=0.1.0 proto=q pos=0 n=3\r\n")


def test_restart_output_is_told_apart_from_noise():
    p = hl.LineParser(board=0, size=3)
    items = [i for k in range(0, len(RESTART_OUTPUT), 7) for i in p.feed(RESTART_OUTPUT[k:k + 7])]
    assert [i.word for i in items] == ["hello"]
    assert p.garbage == {"Ctrl-C traceback": 4, "boot banner": 2}
    assert set(p.garbage) <= set(hl.REPL_REASONS)
    # a traceback that ends in another exception is a crash, not a restart
    p.feed(b"Traceback (most recent call last):\n  File \"node.py\", line 1, in run\nMemoryError: \nboom\n")
    assert p.garbage == {"Ctrl-C traceback": 4, "boot banner": 2, "traceback": 3, "not a picoring line": 1}


def test_first_line_after_a_repl_prompt_is_read():
    # a board restarted from its REPL prints its hello right after ">>> "
    p = hl.LineParser()
    (hello,) = p.feed(b">>> !hello fw=0.1.0 proto=q pos=1 n=3\n")
    assert hello.word == "hello" and hello.fields["pos"] == 1
    assert p.board == 1 and p.size == 3


def test_a_repl_prompt_is_counted_when_it_comes_whole():
    # A board at its REPL answers Ctrl-C with a new prompt and no line (RingRun.restart_ring)
    p = hl.LineParser()
    p.feed(b"\r\n>>")
    assert p.prompts == 0
    p.feed(b"> ")
    assert p.prompts == 1
    p.feed(b"\r\n>>> ")
    assert p.prompts == 2
    p.feed(b"!hello fw=0.1.0 proto=q pos=1 n=3\n")  # what it says next is not another prompt
    assert p.prompts == 2


def test_bad_event_code_is_garbage():
    import base64
    rec = bytes(16)  # event code 0: unknown
    p = hl.LineParser(board=0)
    assert p.feed(b"*" + base64.b64encode(rec) + b"\n") == []
    assert p.garbage == {"bad record": 1}


def test_hello_sets_board_and_restarts_numbering():
    log = fw.EventLog(lambda: 1)
    log.record(fw.EV_BOOT, 0, 2, 5, 0, 0)
    log.record(fw.EV_REQ, 0, 0, 0, 0, 0)
    line = flushed_lines(log)[0]
    p = hl.LineParser()
    items = p.feed(b"!hello fw=0.1.0 proto=d pos=2 n=5\n" + line + b"!hello fw=0.1.0 proto=d pos=2 n=5\n" + line)
    assert p.board == 2 and p.size == 5 and p.missing == 0
    boot = items[1]
    assert boot.ev == "boot" and boot.aux == {"position": 2, "size": 5}


def test_tick_unwrapper():
    u = hl.TickUnwrapper()
    top = hl.TICK_PERIOD - 10
    assert [u(t) for t in (top, top + 5, 3, 2, 100)] == [top, top + 5, top + 13, top + 12, top + 110]


def test_events_lost_while_the_port_was_away_are_told_apart():
    # The board runs on while its USB link is down, and what it says meanwhile goes nowhere.
    log = fw.EventLog(lambda: 1, capacity=16)
    for k in range(6):
        log.record(fw.EV_SEND, 1, 0, k, 0, 0)
    lines = flushed_lines(log, 2)
    p = hl.LineParser(board=0, size=2)
    evs = p.feed(lines[0])  # events 0, 1
    p.cut()  # the port went away: lines[1] (events 2, 3) never arrive
    evs += p.feed(lines[2])  # back: events 4, 5
    assert [e.seq for e in evs] == [0, 1, 4, 5]
    assert evs[2].lost_in_outage == 2 and evs[3].lost_in_outage is None
    assert p.missing == p.missing_in_outages == 2
    # A board that says nothing after the outage: only its own count tells (eseq - pending).
    p.cut()
    assert p.expect_next(9) == 3 and p.missing_in_outages == 5 and p.missing == 5
    assert p.expect_next(9) == 0 and p.expect_next(8) == 0  # (later events arrived meanwhile)
