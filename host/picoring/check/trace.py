"""The trace: one event record type, a JSON-lines writer and a reader.

Format version 2 (docs/trace-format.md): the first line is a header
``{"v": 2, "ev": "meta", ...}``; every other line is one event with the keys
``t`` (time), ``ev`` (req, send, recv, enter, exit, end) and ``node``; frame
events add ``link`` and ``kind`` (token or request) and, for tokens,
``payload`` (count, state, seq, epoch). The simulator and the board harness
write the same format; the checker and pandas (``read_json(lines=True)``)
read it.
"""

import json
import os

TRACE_VERSION = 2
# Version 3: a run with a shared resource (--resource fram, docs/fram.md) adds res events and
# says so in its header ("resource"); a trace without one is written as version 2, which it is.
RESOURCE_TRACE_VERSION = 3
READS_VERSIONS = (1, 2, 3)  # version 2 adds the recovery events and frame kinds; 1 is a subset; 3 res
EVENT_KINDS = ("req", "send", "recv", "enter", "exit", "end",
               "regen", "discard", "timeout", "fail", "notice",  # these five: version 2
               "lost",  # a frame a ring's wire lost (version 2 on: docs/trace-format.md)
               "res")  # version 3
FRAME_KINDS = ("token", "request", "claim", "again", "msg")  # msg: a protocol layer message (docs/frames.md)


class TraceError(ValueError):
    """A trace that cannot be read; the message names the file and line."""


class Event:
    """One thing that happened in the ring."""

    __slots__ = ("t", "ev", "node", "link", "kind", "payload", "extra")

    def __init__(self, t, ev, node=None, link=None, kind=None, payload=None, extra=None):
        self.t = t
        self.ev = ev
        self.node = node
        self.link = link
        self.kind = kind
        self.payload = payload
        self.extra = extra

    def to_dict(self):
        d = {"t": self.t, "ev": self.ev}
        if self.node is not None:
            d["node"] = self.node
        if self.link is not None:
            d["link"] = self.link
        if self.kind is not None:
            d["kind"] = self.kind
        if self.payload is not None:
            d["payload"] = self.payload
        if self.extra:
            d.update(self.extra)
        return d

    @classmethod
    def from_dict(cls, d):
        extra = {k: v for k, v in d.items() if k not in _CORE_KEYS}
        return cls(d.get("t"), d.get("ev"), d.get("node"), d.get("link"), d.get("kind"), d.get("payload"), extra or None)

    def __eq__(self, other):
        return isinstance(other, Event) and self.to_dict() == other.to_dict()

    def __repr__(self):
        return "Event(%s)" % ", ".join("%s=%r" % kv for kv in self.to_dict().items())


_CORE_KEYS = frozenset(("t", "ev", "node", "link", "kind", "payload"))


def header(protocol, n, source, time_unit, **info):
    """The meta record that starts every trace (version 3 when info names a resource)."""
    v = RESOURCE_TRACE_VERSION if info.get("resource") else TRACE_VERSION
    d = {"v": v, "ev": "meta", "protocol": protocol, "n": n, "source": source, "time_unit": time_unit}
    d.update(info)
    return d


class TraceWriter:
    """Writes events as JSON lines; callable with an Event (a listener)."""

    def __init__(self, path_or_file, meta):
        if hasattr(path_or_file, "write"):
            self._file = path_or_file
            self._owned = False
        else:
            self._file = open(path_or_file, "w", encoding="utf-8")
            self._owned = True
        self.path = getattr(self._file, "name", None)
        self._write_line(meta)

    def _write_line(self, d):
        self._file.write(json.dumps(d, separators=(",", ":")))
        self._file.write("\n")

    def __call__(self, event):
        self._write_line(event.to_dict())

    write = __call__

    def close(self):
        if self._owned and not self._file.closed:
            self._file.close()
        elif not self._owned:
            self._file.flush()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class TraceReader:
    """Iterates over the events of a trace file; ``meta`` holds its header.

    progress, if given: progress(bytes read, the file's size) every PROGRESS_EVERY events
    (a 191 MB trace takes 20-50 s to check or report)."""

    PROGRESS_EVERY = 1 << 14

    def __init__(self, path, progress=None):
        self.path = str(path)
        try:
            self._file = open(self.path, encoding="utf-8")
        except OSError as e:
            raise TraceError("%s: cannot open trace: %s" % (self.path, e.strerror or e)) from None
        self._progress = progress
        self._lineno = 0
        first = self._next_record()
        if first is None:
            raise TraceError("%s: empty trace (no header line)" % self.path)
        if first.get("ev") != "meta":
            raise TraceError("%s:1: first line must be the header {\"v\": %d, \"ev\": \"meta\", ...}" % (self.path, TRACE_VERSION))
        if first.get("v") not in READS_VERSIONS:
            raise TraceError("%s:1: trace format version %r, this picoring reads versions %s"
                             % (self.path, first.get("v"), ", ".join(map(str, READS_VERSIONS))))
        for key in ("protocol", "n"):
            if key not in first:
                raise TraceError("%s:1: header lacks %r" % (self.path, key))
        self.meta = first

    def _next_record(self):
        while True:
            line = self._readline()
            if not line:
                return None
            self._lineno += 1
            if not line.strip():
                continue
            try:
                d = json.loads(line)
            except ValueError as e:
                raise TraceError("%s:%d: not JSON: %s" % (self.path, self._lineno, e)) from None
            if not isinstance(d, dict):
                raise TraceError("%s:%d: a trace line must be a JSON object" % (self.path, self._lineno))
            return d

    def _readline(self):
        try:
            return self._file.readline()
        except UnicodeDecodeError as e:  # a binary file, or a trace cut mid-character
            # (the file is decoded in blocks, so the line number would be a guess)
            raise TraceError("%s: not a text trace (byte 0x%02x is not UTF-8); a trace is JSON lines"
                             % (self.path, e.object[e.start])) from None

    @property
    def lineno(self):
        return self._lineno

    def __iter__(self):
        n = self.meta["n"]
        progress = self._progress
        if progress is not None:
            size = os.fstat(self._file.fileno()).st_size
            raw = self._file.buffer  # its position: what the text layer has read (a block ahead at most)
            countdown = self.PROGRESS_EVERY
        while True:
            d = self._next_record()
            if d is None:
                if progress is not None:
                    progress(size, size)
                return
            if progress is not None:
                countdown -= 1
                if not countdown:
                    countdown = self.PROGRESS_EVERY
                    progress(raw.tell(), size)
            ev = d.get("ev")
            if ev not in EVENT_KINDS:
                raise TraceError("%s:%d: unknown event %r" % (self.path, self._lineno, ev))
            node = d.get("node")
            if ev not in ("end", "notice") and (not isinstance(node, int) or not 0 <= node < n):
                raise TraceError("%s:%d: node %r is not in 0..%d" % (self.path, self._lineno, node, n - 1))
            if ev in ("send", "recv", "lost") and d.get("kind") not in FRAME_KINDS:
                raise TraceError("%s:%d: frame kind %r is not one of %s"
                                 % (self.path, self._lineno, d.get("kind"), ", ".join(FRAME_KINDS)))
            yield Event.from_dict(d)

    def close(self):
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
