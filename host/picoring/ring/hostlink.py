"""Host side of the board's USB host link (docs/hostlink.md): pure codec, no I/O.

A board sends text lines: ``*<base64>`` carries a batch of 16-byte event
records, ``!<word> <text>`` is a reply or notice. Anything else (REPL output,
tracebacks, line noise) is counted as garbage with a reason and skipped. Lines
may end in ``\\n`` or ``\\r\\n`` (a Pico's stdout turns one into the other).

Use it over pyserial like this::

    parser = LineParser(board=2, size=5)
    for item in parser.feed(port.read(port.in_waiting or 1)):
        if isinstance(item, BoardEvent): ...
        else: ...  # a Reply
"""

import binascii
import struct

from ..check.trace import Event

RECORD_SIZE = 16
RECORD_FORMAT = "<HIBBHIH"  # eseq, tick, code, aux, count, seq, epoch
TICK_PERIOD = 1 << 30  # board ticks are ticks_us() mod 2**30 (the Pico's own period)
SEQ_PERIOD = 1 << 16

EV_NAMES = {1: "req", 2: "send", 3: "recv", 4: "enter", 5: "exit", 6: "bad", 7: "drop", 8: "reject", 9: "boot",
            10: "regen", 11: "discard", 12: "timeout", 13: "hosterr", 14: "gap", 15: "res"}
KIND_NAMES = {0: None, 1: "token", 2: "request", 5: "claim", 6: "again", 7: "msg", 8: "msg"}
MSG_FORWARDED = 8  # kind nibble of a send record: a hop frame of a message sent elsewhere
BAD_REASONS = ("crc", "len", "cobs", "kind")
# aux of a timeout event (firmware node.TIMEOUT_*) and of a hosterr event (node.HOSTERR_*)
TIMEOUT_REASONS = {1: "join", 2: "claim", 3: "again"}
HOSTERR_REASONS = {1: "not a command", 2: "too long", 3: "not text", 4: "unknown command", 5: "bad arguments"}
# aux of a res event (firmware hostlink.RES_*): what was done to the shared counter (docs/fram.md)
RES_OPS = {1: "read", 2: "write", 3: "count", 4: "set"}
# Ring events that go into the trace (the rest are about one board and its links).
TRACE_EVENTS = ("req", "send", "recv", "enter", "exit", "regen", "discard", "timeout", "res",
                "fail", "notice")  # the last two are the host's: a request failed, a board restarted, ...

# Commands a board understands (the first word after "!").
COMMANDS = ("r", "req", "status", "ping", "log", "ver", "zero", "flush", "cs", "stop", "probe", "res")

_MAX_LINE = 1024
# What MicroPython's REPL prints when a board (re)starts: not picoring lines, but no fault
# either. A restart by the host (Ctrl-C, then Ctrl-D) also interrupts main.py, whose
# traceback ends in KeyboardInterrupt (counted as REPL_INTERRUPTED).
_BANNER_STARTS = ("MicroPython ", 'Type "help()" for more information', "MPY: soft reboot",
                  "Use Ctrl-D to exit", "raw REPL; CTRL-B to exit")
BOOT_BANNER = "boot banner"
REPL_INTERRUPTED = "Ctrl-C traceback"
REPL_REASONS = (BOOT_BANNER, REPL_INTERRUPTED)  # expected at a restart; every other reason is noise
_MAX_TRACEBACK = 64  # lines held back until a traceback's last line says what it was


class HostLinkError(ValueError):
    """A command that cannot be encoded."""


class BoardEvent:
    """One event from a board. payload is a dict for token frames, else None;
    aux holds the bad-frame reason ("crc", ...) for ev == "bad", the number of
    lost events for ev == "drop", {"lost", "lseq", "first"} for ev == "gap" (frames lost on its
    link in; first: the board's first frame since it started, lost unknown)."""

    __slots__ = ("board", "seq", "tick_us", "ev", "link", "kind", "payload", "aux", "lost_in_outage", "lseq",
                 "after_sender_flushed")

    def __init__(self, board, seq, tick_us, ev, link=None, kind=None, payload=None, aux=None):
        # events of this board lost just before this one while its USB link was down (LineParser)
        self.lost_in_outage = None
        self.lseq = None  # a send's link sequence byte, where the host counts them (RingRun)
        # a receive (or gap) that reached the host after its sender's last flush at the run's
        # end: its send may have been made after that flush, past the trace's end (RingRun._finish)
        self.after_sender_flushed = False
        self.board = board
        self.seq = seq
        self.tick_us = tick_us
        self.ev = ev
        self.link = link
        self.kind = kind
        self.payload = payload
        self.aux = aux

    def to_trace(self, t):
        """The trace.Event of this event at host time t (None for board-only events)."""
        if self.ev not in TRACE_EVENTS:
            return None
        extra = self.aux if self.ev in ("discard", "timeout", "res", "fail", "notice") else None
        return Event(t, self.ev, self.board, self.link if self.ev in ("send", "recv") else None, self.kind,
                     self.payload, extra)

    def __eq__(self, other):
        return isinstance(other, BoardEvent) and all(getattr(self, k) == getattr(other, k) for k in self.__slots__)

    def __repr__(self):
        return "BoardEvent(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self.__slots__ if getattr(self, k) is not None)


class Reply:
    """A "!word text" line; fields parses its key=value words."""

    __slots__ = ("board", "word", "text", "fields")

    def __init__(self, board, word, text):
        self.board = board
        self.word = word
        self.text = text
        self.fields = {}
        for part in text.split():
            k, sep, v = part.partition("=")
            if sep:
                self.fields[k] = int(v) if _is_int(v) else v

    def __repr__(self):
        return "Reply(board=%r, word=%r, text=%r)" % (self.board, self.word, self.text)


def _is_int(s):
    return s[1:].isdigit() if s[:1] == "-" else s.isdigit()


def encode_command(word, *args):
    """The bytes of one command line, e.g. encode_command("ping", 7) == b"!ping 7\\n"."""
    if word not in COMMANDS:
        raise HostLinkError("unknown command %r (known: %s)" % (word, ", ".join(COMMANDS)))
    text = " ".join([word] + [str(a) for a in args])
    if any(not (32 < ord(c) < 127) for c in text.replace(" ", "")) or len(text) > 70:
        raise HostLinkError("command %r must be printable ASCII, at most 70 characters" % text)
    return ("!" + text + "\n").encode("ascii")


REQUEST = b"!r\n"  # the request command, ready made
CTRL_C = b"\x03"  # stops the node loop (KeyboardInterrupt on the board)


def decode_records(board, data, size=None):
    """BoardEvents of a run of 16-byte records (bytes). size (ring size) fills in link."""
    if len(data) % RECORD_SIZE:
        raise ValueError("%d bytes is not a whole number of %d-byte records" % (len(data), RECORD_SIZE))
    out = []
    for off in range(0, len(data), RECORD_SIZE):
        eseq, tick, code, aux, count, seq, epoch = struct.unpack_from(RECORD_FORMAT, data, off)
        ev = EV_NAMES.get(code & 0x0F)
        kind = KIND_NAMES.get(code >> 4, "?")
        if ev is None or kind == "?":
            raise ValueError("record %d: unknown event code 0x%02x" % (off // RECORD_SIZE, code))
        link = None
        payload = None
        extra = None
        if ev in ("send", "recv"):
            if kind is None:
                raise ValueError("record %d: %s without a frame kind" % (off // RECORD_SIZE, ev))
            if size:
                link = board if ev == "send" else (board - 1) % size
            if kind == "token":
                payload = {"count": count, "state": aux, "seq": seq, "epoch": epoch}
            elif kind == "claim":
                payload = {"epoch": epoch, "origin": count, "join": aux, "seq": seq}
            elif kind == "again":
                payload = {"origin": count}
            elif kind == "msg":
                payload = _msg_payload(board, ev, code >> 4, aux, count, seq, epoch, size)
        elif ev in ("regen", "discard"):
            payload = {"count": count, "state": aux if ev == "regen" else 0, "seq": seq, "epoch": epoch}
            if ev == "discard":
                extra = {"fresh": bool(aux)}
        elif ev == "timeout":
            extra = {"why": TIMEOUT_REASONS.get(aux, aux), "gen_ms": count, "epoch": epoch}
        elif ev == "hosterr":
            extra = HOSTERR_REASONS.get(aux, aux)
        elif ev == "res":
            # the counter's value (mod 2**30), or the errno of an access that failed
            extra = {"op": RES_OPS.get(aux, aux)}
            if count:
                extra["errno"] = count
            else:
                extra["value"] = seq
        elif ev == "bad":
            extra = BAD_REASONS[aux] if aux < len(BAD_REASONS) else aux
        elif ev == "drop":
            extra = seq
        elif ev == "gap":
            # frames lost on the link into this board just before the frame with link
            # sequence byte lseq (firmware frame.S_GAP): bad ones, or ones that vanished
            extra = {"lost": count, "lseq": aux, "first": count == 0}
            if size:
                link = (board - 1) % size
        elif ev == "enter":
            payload = {"seq": seq, "epoch": epoch}
        elif ev == "boot":
            extra = {"position": aux, "size": count}
        out.append(BoardEvent(board, eseq, tick, ev, link, kind, payload, extra))
    return out


def _msg_payload(board, ev, kind, aux, count, seq, epoch, size):
    """A MSG frame's record (docs/hostlink.md): mkind, src, dst (255: all), the first six
    payload bytes as seq and epoch; a send says whether it is a new logical message (fwd
    False) or a hop frame passed on (fwd True); hop: which hop of the message's way this
    frame is (1: the sender's), where the ring size is known."""
    src, dst = count & 0xFF, count >> 8
    payload = {"mkind": aux, "src": src, "dst": dst, "seq": seq, "epoch": epoch}
    if ev == "send":
        payload["fwd"] = kind == MSG_FORWARDED
    if size:
        payload["hop"] = (board - src) % size + 1 if ev == "send" else (board - src - 1) % size + 1
    return payload


class LineParser:
    """Turns a board's output into BoardEvents and Replies; never raises on input.

    received    bytes fed in all (a board that said anything at all)
    garbage     {reason: count} of skipped lines; the REPL_REASONS ones (MicroPython's
                banner, the traceback of a Ctrl-C) are what a restart prints, not noise
    missing     events lost between the board and here, from gaps in the event
                numbers (includes the ones the board reported as dropped)
    reported_dropped  sum of the board's drop records
    gaps        [(expected_seq, got_seq, missing)] in arrival order
    missing_in_outages  the part of missing lost while the port was away (the gap that
                follows a cut()): the board ran on and its output had nowhere to go
    """

    def __init__(self, board=None, size=None):
        self.board = board
        self.size = size
        self.garbage = {}
        self.garbage_lines = []  # the last few skipped lines, for error messages
        self.missing = 0
        self.reported_dropped = 0
        self.gaps = []
        self.missing_in_outages = 0
        self._cut = False
        self.events = 0
        self.received = 0
        self._next_seq = None
        self.inc = None  # the incarnation number of the board's last hello
        self._partial = b""
        self._traceback = None  # lines of a traceback whose last line has not come yet
        self.prompts = 0  # REPL prompts seen: a board waiting at its REPL prints no line

    def _skip(self, reason, line):
        self.garbage[reason] = self.garbage.get(reason, 0) + 1
        self.garbage_lines.append((reason, line[:80]))
        del self.garbage_lines[:-10]

    def feed(self, data):
        """Parse a chunk of bytes; keeps an unfinished line for the next call."""
        self.received += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        if data and self._partial.endswith(b">>> "):
            self.prompts += 1  # (it is left unfinished: the prompt has no line end)
        if len(self._partial) > _MAX_LINE:
            self._skip("too long", self._partial)
            self._partial = b""
        out = []
        for line in lines:
            out.extend(self.feed_line(line))
        return out

    def cut(self):
        """The stream broke (the port went away): an unfinished line is dropped, counted as
        garbage, so that it is not glued to what comes when the port is back."""
        self._cut = True
        self._end_traceback("traceback")
        if self._partial:
            self._skip("cut off", self._partial)
            self._partial = b""

    def feed_line(self, line):
        """Parse one line (bytes or str, with or without its line end)."""
        if isinstance(line, bytes):
            try:
                line = line.decode("ascii")
            except UnicodeDecodeError:
                self._skip("not ascii", line)
                return []
        line = line.rstrip("\r\n")
        # REPL noise can share a line with a record ("\r\n" split by "\r" alone).
        line = line.rsplit("\r", 1)[-1]
        # A board restarted from its REPL prints its first line after the prompt.
        while line[:4] in (">>> ", "... "):
            line = line[4:]
        if not line:
            return []
        if line[0] in "*!":
            self._end_traceback("traceback")  # cut short: a picoring line came first
        if line[0] == "*":
            return self._batch(line)
        if line[0] == "!":
            word, _, text = line[1:].partition(" ")
            if not word:
                self._skip("empty reply", line)
                return []
            reply = Reply(self.board, word, text)
            if word == "hello":
                return [self._on_hello(reply)]
            return [reply]
        self._other_line(line)
        return []

    def _other_line(self, line):
        """REPL output: a traceback is held until its last line (the exception) says whether it
        was a Ctrl-C; MicroPython's banner is counted as such; anything else is noise."""
        if self._traceback is not None:
            self._traceback.append(line)
            if not line.startswith(" "):
                self._end_traceback(REPL_INTERRUPTED if line.startswith("KeyboardInterrupt") else "traceback")
            elif len(self._traceback) >= _MAX_TRACEBACK:
                self._end_traceback("traceback")
        elif line.startswith("Traceback (most recent call last):"):
            self._traceback = [line]
        elif line.startswith(_BANNER_STARTS):
            self._skip(BOOT_BANNER, line)
        else:
            self._skip("not a picoring line", line)

    def _end_traceback(self, reason):
        if self._traceback is not None:
            for held in self._traceback:
                self._skip(reason, held)
            self._traceback = None

    def _on_hello(self, reply):
        """A (re)started board numbers its events from 0 again. It says hello at boot and
        again before it answers its first host line (the first may have gone nowhere: a
        Pico's USB serial drops output while no host has the port open): a hello of the
        incarnation already greeted (its inc, a number drawn at boot) is only that
        repetition, returned as an "again" reply, which nothing waits for."""
        inc = reply.fields.get("inc")
        if inc is not None and inc == self.inc:
            return Reply(self.board, "again", reply.text)
        self.inc = inc
        self._next_seq = None
        if self.board is None and isinstance(reply.fields.get("pos"), int):
            self.board = reply.fields["pos"]
        if self.size is None and isinstance(reply.fields.get("n"), int):
            self.size = reply.fields["n"]
        return reply

    def _batch(self, line):
        body = line[1:]
        if len(body) % 4:
            self._skip("bad base64 length", line)
            return []
        try:
            data = binascii.a2b_base64(body.encode("ascii"), strict_mode=True)
        except (binascii.Error, ValueError):
            self._skip("bad base64", line)
            return []
        try:
            events = decode_records(self.board, data, self.size)
        except ValueError:
            self._skip("bad record", line)
            return []
        for e in events:
            self._check_seq(e)
        self.events += len(events)
        return events

    def expect_next(self, seq):
        """The board says the next event it sends will be number seq (its eseq less its
        pending records): a shortfall here is events that never arrived and that no later
        event has shown as a gap yet. Returns how many (counted in missing)."""
        if self._next_seq is None:
            return 0
        short = (seq - self._next_seq) % SEQ_PERIOD
        if not short or short >= SEQ_PERIOD // 2:  # (behind: later events have come meanwhile)
            return 0
        self.gaps.append((self._next_seq, seq, short))
        self.missing += short
        if self._cut:
            self.missing_in_outages += short
        self._next_seq = seq
        return short

    def _check_seq(self, e):
        if e.ev == "boot" and e.seq == 0:
            self._next_seq = None  # restarted without a hello line seen
        if e.ev == "drop":
            self.reported_dropped += e.aux
        if self._next_seq is not None and e.seq != self._next_seq:
            missing = (e.seq - self._next_seq) % SEQ_PERIOD
            self.gaps.append((self._next_seq, e.seq, missing))
            self.missing += missing
            if self._cut:
                self.missing_in_outages += missing
                e.lost_in_outage = missing
        self._cut = False
        self._next_seq = (e.seq + 1) % SEQ_PERIOD


class TickUnwrapper:
    """Board ticks (mod 2**30 us) to a monotonic microsecond count.

    Correct while consecutive ticks are less than half a period (~9 minutes)
    apart; ping the board more often than that when it is otherwise silent.
    """

    def __init__(self, period=TICK_PERIOD):
        self.period = period
        self._last = None
        self._value = 0

    def __call__(self, tick):
        if self._last is None:
            self._last = self._value = tick
            return tick
        diff = (tick - self._last) % self.period
        if diff >= self.period // 2:
            diff -= self.period  # slightly older than the last one
        self._last = tick
        self._value += diff
        return self._value
