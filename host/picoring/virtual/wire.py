"""One UART link of the virtual ring: board i TX -> board i+1 RX, paced like a real UART.

A Wire is pure bookkeeping with the clock passed in (no I/O, no threads), so the
pacing and the fault hooks can be tested without ptys. The ring's relay loop
feeds it the bytes board i wrote (`send`) and asks it which bytes will have
arrived at board i+1 by a time, with their arrival times (`take_records`; `take_due`:
the bytes arrived by now), and when the next frame will have (`next_due`).

Timing: a UART sends 10 bits per byte (start + 8 data + stop), back to back
while it has data, so byte k of a burst that starts at t arrives at
t + (k + 1) * 10 / baud. A byte never arrives early: the relay gives the receiver
a frame's bytes shortly before (virtual/board.py, RX_LEAD_S) with the arrival of
the frame's last byte, and the receiver reads none of them before then
(firmware/hal_unix.py, PipeUart).

Fault hooks (for the fault-injection issue): `cut` (implemented: bytes sent
while cut, and bytes in flight when cut, are lost), `delay` (seconds of extra
latency added to every byte, implemented), and `transform`, a callable
bytes -> bytes applied to every chunk as it enters the wire: a later drop or
corrupt fault is a transform. Counters: bytes_in, bytes_out, bytes_dropped
(cut or removed by transform), bytes_overrun (the receiver's buffer was full).

Fault injection (docs/faults.md): `faults`, a WireFaults made by a FaultPlan from
a SPEC string such as "corrupt=0.01,drop=0.005,delay=0.002:5ms,cut=2@3s:500ms,seed=7",
drops frames or bytes, flips bits, holds frames back and cuts the wire for a while,
seeded, with its own counters (`counters()["faults"]`). The plan's board faults
(restart, unplug) are carried out by the VirtualRing, not by a wire.
"""

import math
import random
from collections import deque

BITS_PER_BYTE = 10  # start bit + 8 data bits + stop bit, no parity
RECORD_MAX = 1024   # bytes in one record of take_records (the receiver's pipe holds 4 KB)


class Histogram:
    """Durations counted in buckets of 1 us below 100 us, 10 us below 1 ms, 100 us below 10 ms,
    and one from 10 ms up: constant time and memory, however long the ring runs. `sparse()`
    is what status() carries: [[bucket, count], ...] for the buckets counted."""

    __slots__ = ("counts",)
    SIZE = 281

    def __init__(self):
        self.counts = [0] * self.SIZE

    def add(self, seconds):
        us = int(seconds * 1e6 + 1e-3)  # (+1 ns: 12 us computed as 11.99999 is 12)
        if us < 100:
            k = us if us > 0 else 0
        elif us < 1000:
            k = 90 + us // 10
        elif us < 10000:
            k = 180 + us // 100
        else:
            k = 280
        self.counts[k] += 1

    def sparse(self):
        return [[k, c] for k, c in enumerate(self.counts) if c]


def bucket_us(k):
    """(low, high) in us of Histogram bucket k (high None: no upper end)."""
    if k < 100:
        return k, k + 1
    if k < 190:
        return (k - 90) * 10, (k - 89) * 10
    if k < 280:
        return (k - 180) * 100, (k - 179) * 100
    return 10000, None


def histogram_since(now, before):
    """The counts added between two sparse() readings of one Histogram: {bucket: count}."""
    out = {k: c for k, c in now}
    for k, c in before or ():
        out[k] = out.get(k, 0) - c
    return {k: c for k, c in out.items() if c > 0}


def histogram_percentile(counts, q):
    """The upper end in us of the bucket that holds the q-quantile (0 < q <= 1) of {bucket: count}
    (so the q-quantile is at most that), the lower end for the last bucket; None if empty."""
    total = sum(counts.values())
    if not total:
        return None
    seen = 0
    for k in sorted(counts):
        seen += counts[k]
        if seen >= q * total:
            low, high = bucket_us(k)
            return high if high is not None else low
    return None


class Wire:
    __slots__ = ("index", "baud", "byte_time", "cut", "delay", "transform", "faults",
                 "bytes_in", "bytes_out", "bytes_dropped", "bytes_overrun", "lateness",
                 "_chunks", "_idle_at", "_queued", "_last_out")

    def __init__(self, index, baud, paced=True):
        """paced=False: no wire time (byte_time 0), every byte arrives as soon as the relay
        passes it on; faults, delays and cuts still apply. For tests that want a ring as fast
        as the processes can make it, not a UART's timing."""
        if baud <= 0:
            raise ValueError("baud must be positive, got %r" % (baud,))
        self.index = index
        self.baud = baud
        self.byte_time = BITS_PER_BYTE / baud if paced else 0.0
        self.cut = False
        self.delay = 0.0
        self.transform = None
        self.faults = None  # WireFaults (FaultPlan.for_wire)
        self.bytes_in = 0
        self.bytes_out = 0
        self.bytes_dropped = 0
        self.bytes_overrun = 0
        # How long after its arrival (its last bit on the line) each frame's end was given to the
        # receiver: the relay's own lateness; 0 when given ahead (take_records).
        self.lateness = Histogram()
        # Each chunk: [time its first byte starts on the wire, data, bytes already released,
        #              fault cuts started when it was sent (a later cut loses the rest of it)].
        self._chunks = deque()
        self._idle_at = 0.0  # when the sender's shift register is free again
        self._queued = 0
        self._last_out = 0  # the last byte released (does a 00 at the start of a chunk end a frame?)

    # -- fault controls ------------------------------------------------------

    def set_cut(self, cut=True):
        """Cut (or mend) the wire. Cutting loses the bytes in flight, as pulling a cable would."""
        self.cut = bool(cut)
        if self.cut:
            self.bytes_dropped += self._queued
            self._chunks.clear()
            self._queued = 0

    def sender_lost(self, now):
        """Board i lost power at `now`: the bytes that had not started on the line (its TX FIFO)
        are gone; the ones already on it still arrive, as on a real UART. Returns how many were lost."""
        lost = 0
        kept = deque()
        end = now
        for start, data, released, epoch in self._chunks:
            # byte k goes out at start + k * byte_time (a delayed frame has not started yet)
            started = self._bytes_by(now - start, len(data)) + 1 if now >= start else 0
            started = max(released, min(len(data), started))
            lost += len(data) - started
            if started > released:
                kept.append([start, data[:started], released, epoch])
                end = start + started * self.byte_time
        self._chunks = kept
        self._idle_at = end
        self._queued -= lost
        self.bytes_dropped += lost
        return lost

    # -- data path -----------------------------------------------------------

    def send(self, data, now):
        """Board i wrote `data` to its TX at time `now` (seconds, monotonic)."""
        self.bytes_in += len(data)
        if self.transform is not None:
            out = self.transform(data)
            self.bytes_dropped += max(0, len(data) - len(out))
            data = out
        if self.cut:
            self.bytes_dropped += len(data)
            return
        faults = self.faults
        if faults is None:
            segments = ((data, 0.0),)
            epoch = 0
        else:
            if faults.cut_now(now):
                faults.cut_bytes += len(data)
                self.bytes_dropped += len(data)
                return
            epoch = faults.cuts_started
            segments = faults.apply(data)
            kept = sum(len(d) for d, _ in segments)
            self.bytes_dropped += len(data) - kept
        for data, hold in segments:
            if not data:
                continue
            start = max(now + hold, self._idle_at)
            self._idle_at = start + len(data) * self.byte_time
            self._chunks.append([start, bytes(data), 0, epoch])
            self._queued += len(data)

    def next_due(self):
        """When the relay should next release bytes (take_due), or None: the arrival of the
        byte that ends the next frame, else of the first chunk's last byte. A frame is
        00 | COBS | 00 (docs/frames.md), and a board does nothing with a frame before its last
        byte: waking for every byte (or every 100 us, as the relay did) delivered a frame's
        end up to 110 us late, two thirds of a token frame's wire time at 1 Mbaud. The bytes
        before it come with it, late; no byte ever comes before its time."""
        if not self._chunks:
            return None
        start, data, released, _ = self._chunks[0]
        end = self._frame_end(data, released, len(data))
        if end < 0:
            end = len(data) - 1
        return start + (end + 1) * self.byte_time + self.delay

    def take_due(self, now):
        """The bytes that have fully arrived at board i+1 by `now` (b"" if none)."""
        return b"".join(data for data, _, _ in self.take_records(now, now))

    def take_records(self, now, until):
        """The bytes that will have fully arrived at board i+1 by `until` (>= now), as records
        [(bytes, arrival of its last byte, whether that byte ends a frame)], one per frame end (a
        00 after a non-zero byte: a frame's opening 00 goes with the frame) and one for the
        bytes after the last, at most RECORD_MAX bytes each. The relay gives them to the
        receiver up to `until - now` ahead of their time, with their times, and the receiver
        holds each record until then (firmware/hal_unix.py, PipeUart): so the relay, not the
        receiver, waits out its own wake-up. A fault that begins after `now` must not find a byte it loses already given:
        the caller puts `until` no later than the next one (next_fault_at, and the sender's
        next power cycle). The lateness counted is the relay's: how late each frame end was
        given after its arrival (0 when given early)."""
        chunks = self._chunks
        faults = self.faults
        if faults is not None and chunks:
            faults.cut_now(now)
            while chunks and chunks[0][3] != faults.cuts_started:
                # A cut began after this chunk went onto the wire: what had not arrived is lost.
                _, data, released, _ = chunks.popleft()
                lost = len(data) - released
                faults.cut_bytes += lost
                self.bytes_dropped += lost
                self._queued -= lost
        records = []
        bt = self.byte_time
        delay = self.delay
        while chunks:
            chunk = chunks[0]
            start, data, released, _ = chunk
            arrived = self._bytes_by(until - delay - start, len(data))
            if arrived <= released:
                break
            arrived = min(arrived, len(data))
            base = start + delay
            at = released
            while at < arrived:
                # the record ends after the next frame end, else with the bytes arrived
                end = self._frame_end(data, at, arrived) + 1
                ends_frame = 0 < end <= at + RECORD_MAX
                if not ends_frame:
                    end = min(arrived, at + RECORD_MAX)
                piece = data[at:end]
                arrival = base + end * bt
                records.append((piece, arrival, ends_frame))
                if ends_frame:
                    self.lateness.add(max(0.0, now - arrival))
                self._queued -= len(piece)
                self._last_out = piece[-1]
                at = end
            if arrived >= len(data):
                chunks.popleft()
            else:
                chunk[2] = arrived
                break
        return records

    def _frame_end(self, data, at, stop):
        """Where in data[at:stop] the first frame ends (a 00 after a non-zero byte, counting the
        last byte released before data), or -1. A 00 after a 00 is an idle line or the next
        frame's opening 00."""
        end = data.find(b"\x00", at, stop)
        while end >= 0:
            if data[end - 1] if end > 0 else self._last_out:
                return end
            end = data.find(b"\x00", end + 1, stop)
        return -1

    def next_fault_at(self):
        """When the next fault cut of this wire begins (monotonic), or None."""
        return self.faults.next_cut_at() if self.faults is not None else None

    def _bytes_by(self, elapsed, size):
        """How many bytes of a chunk of `size` have fully arrived `elapsed` s after it started."""
        if self.byte_time:
            return int(elapsed / self.byte_time + 1e-9)
        return size if elapsed >= 0 else 0

    def queued(self):
        """Bytes on the wire, not yet arrived."""
        return self._queued

    def delivered(self, count):
        self.bytes_out += count

    def overrun(self, count):
        self.bytes_overrun += count

    def counters(self):
        out = {"wire": self.index, "baud": self.baud, "cut": self.cut,
               "bytes_in": self.bytes_in, "bytes_out": self.bytes_out,
               "bytes_dropped": self.bytes_dropped, "bytes_overrun": self.bytes_overrun,
               "in_flight": self._queued, "lateness_us": self.lateness.sparse()}
        if self.faults is not None:
            out["faults"] = self.faults.counters()
        return out


# -- fault injection -----------------------------------------------------------
#
# A FaultPlan is parsed from a SPEC string (docs/faults.md) and gives each wire its own
# WireFaults: seeded random streams, one per fault kind, so that each fault's pattern is a
# function of the byte (or frame) index on that wire alone, whatever the timing of the run.

FAULT_KINDS = ("corrupt", "corruptframe", "drop", "dropbyte", "delay", "cut")  # per wire
BOARD_FAULTS = ("restart", "unplug")  # timed, per board; the VirtualRing carries them out
# rogue=B: board B enters its critical section without the token (the deliberately unsafe mode
# that shows the audits catch an overlap, docs/fram.md). Firmware, not wire: set in the board's
# config when it is deployed (picoring run --virtual), not carried out by the ring.
DEPLOY_FAULTS = ("rogue",)
_SPEC_KEYS = FAULT_KINDS + BOARD_FAULTS + DEPLOY_FAULTS + ("seed",)
_UNITS = (("us", 1e-6), ("ms", 1e-3), ("s", 1.0))


def _fail(msg):
    raise ValueError("faults: " + msg)


def _prob(text, item):
    t = text.strip()
    scale = 1.0
    if t.endswith("%"):
        t, scale = t[:-1], 0.01
    try:
        p = float(t) * scale
    except ValueError:
        _fail("%r in %r is not a probability (a number from 0 to 1, or a percentage like 1%%)" % (text, item))
    if not 0.0 <= p <= 1.0 or p != p:
        _fail("%r in %r is not a probability: it must be between 0 and 1" % (text, item))
    return p


def _duration(text, item):
    t = text.strip()
    for unit, scale in _UNITS:
        if t.endswith(unit):
            num = t[:-len(unit)]
            if unit == "s" and num.endswith(("m", "u")):
                continue
            try:
                v = float(num) * scale
            except ValueError:
                break
            if v < 0 or v != v or v == float("inf"):
                break
            return v
    _fail("%r in %r is not a duration (a number with a unit: us, ms or s, e.g. 5ms)" % (text, item))


def _board_at(value, item, what):
    """B@T[:D] of a board fault: (board, at seconds, D text or None)."""
    board, at_sign, rest = value.partition("@")
    board = board.strip()
    if not at_sign or not board:
        _fail("%r: %s needs BOARD@TIME, e.g. %s" % (item, what, "restart=1@3s" if what == "restart" else "unplug=1@3s:2s"))
    if not board.isdigit():
        _fail("%r: %r is not a board number" % (item, board))
    at, colon, length = rest.partition(":")
    return int(board), _duration(at, item), length if colon else None


def _fmt_duration(s):
    if s >= 1 and s == int(s):
        return "%ds" % s
    if s * 1e3 >= 1 and abs(s * 1e3 - round(s * 1e3)) < 1e-9:
        return "%dms" % round(s * 1e3)
    return "%gus" % (s * 1e6)


class FaultPlan:
    """What to inject on the wires of a ring: parsed from a SPEC string (docs/faults.md).

    FaultPlan.parse("corrupt=0.01,drop=0.005,dropbyte=0.001,delay=0.002:5ms,cut=2@3s:500ms,seed=7")

    settings[None] are the defaults for every wire, settings[i] overrides for wire i:
      corrupt, drop, dropbyte  probabilities (per byte, per frame, per byte)
      delay                    (probability per frame, seconds)
      corruptframe             probability per frame
      cut                      (cuts per second, seconds) or None
    cuts: timed cuts [(wire or None for every wire, at seconds, for seconds)].
    restarts: [(board, at seconds, seconds off)]: power cycles.
    unplugs: [(board, at seconds, for seconds)]: USB links pulled.
    rogues: [board]: boards deployed to enter their critical sections without the token.
    """

    def __init__(self, seed=0):
        self.seed = seed
        self.settings = {None: {}}
        self.cuts = []
        self.restarts = []
        self.unplugs = []
        self.rogues = []

    @classmethod
    def coerce(cls, faults):
        """A FaultPlan from a plan, a SPEC string, or None (None and "" give None)."""
        if faults is None or isinstance(faults, FaultPlan):
            return faults
        if isinstance(faults, str):
            plan = cls.parse(faults)
            return plan if plan.active() else None
        raise TypeError("faults must be a SPEC string or a FaultPlan, not %r" % (type(faults).__name__,))

    @classmethod
    def parse(cls, spec):
        plan = cls()
        seen = set()
        items = [s.strip() for s in (spec or "").split(",")]
        if items == [""] or items == ["none"]:
            return plan
        for item in items:
            if not item:
                _fail("empty item in %r (items are separated by single commas)" % spec)
            key, eq, value = item.partition("=")
            key = key.strip()
            if not eq:
                _fail("%r is not KEY=VALUE (e.g. corrupt=0.01)" % item)
            wire = None
            if key.startswith("wire") and "." in key:
                head, _, key = key.partition(".")
                if not head[4:].isdigit():
                    _fail("%r: a wire is named wireI with I a number (wire 0 runs from board 0 to board 1)" % item)
                wire = int(head[4:])
                if key == "seed":
                    _fail("%r: the seed is for the whole ring, not one wire" % item)
                if key in BOARD_FAULTS + DEPLOY_FAULTS:
                    _fail("%r: %s is a fault of a board, not of a wire (%s=B...: B is the board)" % (item, key, key))
            if key not in _SPEC_KEYS:
                _fail("%r is not a fault (known: %s)" % (key, ", ".join(_SPEC_KEYS)))
            if key == "restart":
                board, at, off = _board_at(value, item, key)
                plan.restarts.append((board, at, _duration(off, item) if off is not None else 0.0))
                continue
            if key == "rogue":
                if not value.strip().isdigit():
                    _fail("%r: rogue needs a board number, e.g. rogue=2" % item)
                if int(value) in plan.rogues:
                    _fail("%r is given twice" % item)
                plan.rogues.append(int(value))
                continue
            if key == "unplug":
                board, at, length = _board_at(value, item, key)
                if length is None:
                    _fail("%r: unplug needs BOARD@TIME:DURATION, e.g. unplug=1@3s:2s" % item)
                plan.unplugs.append((board, at, _duration(length, item)))
                continue
            if key != "cut" or "@" not in value:
                if (wire, key) in seen:
                    _fail("%r is given twice" % (key if wire is None else "wire%d.%s" % (wire, key)))
                seen.add((wire, key))
            target = plan.settings.setdefault(wire, {})
            if key == "seed":
                try:
                    plan.seed = int(value)
                except ValueError:
                    _fail("seed=%s: the seed must be an integer" % value)
            elif key in ("corrupt", "corruptframe", "drop", "dropbyte"):
                target[key] = _prob(value, item)
            elif key == "delay":
                p, colon, d = value.partition(":")
                if not colon:
                    _fail("%r: delay needs PROBABILITY:DURATION, e.g. delay=0.01:5ms" % item)
                target[key] = (_prob(p, item), _duration(d, item))
            else:  # cut
                when, colon, d = value.partition(":")
                if not colon:
                    _fail("%r: cut needs RATE/s:DURATION (e.g. cut=0.2/s:500ms) or [WIRE]@TIME:DURATION (e.g. cut=2@3s:500ms)" % item)
                length = _duration(d, item)
                if "@" in when:
                    w, _, at = when.partition("@")
                    w = w.strip()
                    if w and not w.isdigit():
                        _fail("%r: %r is not a wire number" % (item, w))
                    if w and wire is not None and int(w) != wire:
                        _fail("%r names two wires" % item)
                    plan.cuts.append((int(w) if w else wire, _duration(at, item), length))
                else:
                    r = when.strip()
                    if r.endswith("/s"):
                        r = r[:-2]
                    try:
                        rate = float(r)
                    except ValueError:
                        rate = -1.0
                    if not rate >= 0 or rate == float("inf"):
                        _fail("%r: %r is not a rate (cuts per second, e.g. 0.2/s)" % (item, when))
                    target[key] = (rate, length)
        for w in [w for w, v in plan.settings.items() if w is not None and not v]:
            del plan.settings[w]  # wire0.cut=@...: a timed cut, no settings of its own
        return plan

    def active(self):
        return (bool(self.cuts or self.restarts or self.unplugs or self.rogues)
                or any(v for s in self.settings.values() for v in s.values()))

    def check(self, n):
        """ValueError if the plan names a wire or a board a ring of n does not have."""
        wires = [w for w in self.settings if w is not None] + [c[0] for c in self.cuts if c[0] is not None]
        for w in wires:
            if not 0 <= w < n:
                _fail("wire%d does not exist: a ring of %d has wires 0..%d (wire i runs from board i to board i+1)"
                      % (w, n, n - 1))
        for key, events in (("restart", self.restarts), ("unplug", self.unplugs)):
            for b, _, _ in events:
                if not 0 <= b < n:
                    _fail("%s=%d@...: board %d does not exist: a ring of %d has boards 0..%d" % (key, b, b, n, n - 1))
        for b in self.rogues:
            if not 0 <= b < n:
                _fail("rogue=%d: board %d does not exist: a ring of %d has boards 0..%d" % (b, b, n, n - 1))
        return self

    def board_events(self):
        """The timed board faults, in time order: [(at seconds, "restart"|"unplug", board, seconds)]
        (seconds: how long the board stays off, or its USB link unplugged)."""
        return sorted([(at, "restart", b, off) for b, at, off in self.restarts]
                      + [(at, "unplug", b, length) for b, at, length in self.unplugs])

    def for_wire(self, i, t0):
        """The WireFaults of wire i, with its clock starting at t0 (time.monotonic())."""
        s = dict(self.settings[None])
        s.update(self.settings.get(i, {}))
        cuts = [(at, length) for w, at, length in self.cuts if w is None or w == i]
        return WireFaults(i, s, cuts, self.seed, t0)

    def describe(self):
        """The canonical SPEC of this plan (parse(describe()) gives the same plan)."""
        parts = []

        def fmt(prefix, key, v):
            if key == "delay":
                return "%s%s=%g:%s" % (prefix, key, v[0], _fmt_duration(v[1]))
            if key == "cut":
                return "%s%s=%g/s:%s" % (prefix, key, v[0], _fmt_duration(v[1]))
            return "%s%s=%g" % (prefix, key, v)

        for wire in [None] + sorted(w for w in self.settings if w is not None):
            for key in FAULT_KINDS:
                v = self.settings.get(wire, {}).get(key)
                if v:
                    parts.append(fmt("" if wire is None else "wire%d." % wire, key, v))
        for w, at, length in self.cuts:
            parts.append("cut=%s@%s:%s" % ("" if w is None else w, _fmt_duration(at), _fmt_duration(length)))
        for b, at, off in self.restarts:
            parts.append("restart=%d@%s%s" % (b, _fmt_duration(at), ":" + _fmt_duration(off) if off else ""))
        for b, at, length in self.unplugs:
            parts.append("unplug=%d@%s:%s" % (b, _fmt_duration(at), _fmt_duration(length)))
        for b in self.rogues:
            parts.append("rogue=%d" % b)
        parts.append("seed=%d" % self.seed)
        return ",".join(parts)


class _Hits:
    """Bernoulli(p) trials drawn as geometric gaps: one random number per hit, not per trial."""

    __slots__ = ("p", "rng", "left", "_log1mp")

    def __init__(self, p, rng):
        self.p = p
        self.rng = rng
        self._log1mp = math.log1p(-p) if 0 < p < 1 else None
        self.left = self._gap()

    def _gap(self):
        if self.p >= 1:
            return 0
        u = self.rng.random()
        return int(math.log1p(-u) / self._log1mp)

    def hit(self):
        if self.left:
            self.left -= 1
            return False
        self.left = self._gap()
        return True


class WireFaults:
    """The faults of one wire, applied by Wire.send / Wire.take_due.

    A frame, for drop, delay and corruptframe, is a run of non-zero bytes (link frames are
    00-delimited): dropping one removes its bytes and leaves the delimiters, so the receiver
    sees an idle line, not a bad frame. Counters: see counters().
    """

    def __init__(self, index, settings, cuts, seed, t0):
        self.index = index
        self.t0 = t0

        def rng(kind):
            return random.Random("picoring-faults/%d/%d/%s" % (seed, index, kind))

        p = settings.get("corrupt", 0.0)
        self._corrupt = _Hits(p, rng("corrupt")) if p else None
        self._bit_rng = rng("bit")
        p = settings.get("corruptframe", 0.0)
        self._corruptframe = _Hits(p, rng("corruptframe")) if p else None
        self._frame_bit_rng = rng("framebit")
        p = settings.get("dropbyte", 0.0)
        self._dropbyte = _Hits(p, rng("dropbyte")) if p else None
        p = settings.get("drop", 0.0)
        self._drop = _Hits(p, rng("drop")) if p else None
        delay = settings.get("delay")
        self._delay = _Hits(delay[0], rng("delay")) if delay and delay[0] else None
        self.delay_s = delay[1] if delay else 0.0
        self._per_byte = bool(self._corrupt or self._corruptframe or self._dropbyte or self._drop or self._delay)
        # Cut windows (start, end) in seconds since t0: the timed ones, and the random ones
        # generated lazily (a Poisson process of `rate` cuts per second, each `length` long).
        self._timed = sorted(cuts)
        cut = settings.get("cut")
        self._cut_rng = rng("cut")
        self._cut_rate, self._cut_len = cut if cut and cut[0] > 0 else (0.0, 0.0)
        self._next_random = self._cut_rng.expovariate(self._cut_rate) if self._cut_rate else None
        self._windows = []  # started windows not yet over: (start, end)
        self.cuts_started = 0
        self._in_frame = False
        self._dropping = False
        self._hit_frame = False
        self._next_hit = False
        # counters
        self.frames = 0           # frames that entered the wire
        self.frames_dropped = 0
        self.bytes_dropped = 0    # single bytes dropped (dropbyte), not counting dropped frames
        self.corrupted = 0        # bytes with a bit flipped
        self.frames_corrupted = 0 # frames spoiled by a corrupted byte (of theirs, or a 00 around them)
        self.delayed = 0
        self.cut_bytes = 0        # bytes lost to a fault cut (sent while cut, or in flight when it began)

    # -- cuts --
    def _advance(self, now):
        """Start every cut window that has begun by `now`; drop the ones that are over."""
        t = now - self.t0
        while self._timed and self._timed[0][0] <= t:
            at, length = self._timed.pop(0)
            self._windows.append((at, at + length))
            self.cuts_started += 1
        while self._next_random is not None and self._next_random <= t:
            start = self._next_random
            self._windows.append((start, start + self._cut_len))
            self.cuts_started += 1
            self._next_random = start + self._cut_len + self._cut_rng.expovariate(self._cut_rate)
        if self._windows:
            self._windows = [w for w in self._windows if w[1] > t]
        return t

    def next_cut_at(self):
        """When the next cut window not yet started begins (monotonic), or None."""
        starts = [self.t0 + self._timed[0][0]] if self._timed else []
        if self._next_random is not None:
            starts.append(self.t0 + self._next_random)
        return min(starts) if starts else None

    def cut_now(self, now):
        """True while a fault cut is on at `now`. Also counts the cuts started by then."""
        t = self._advance(now)
        return any(a <= t for a, _ in self._windows)

    # -- bytes --
    def apply(self, data):
        """The segments [(bytes, extra hold seconds)] that go onto the wire for `data`."""
        if not self._per_byte:
            return [(data, 0.0)]
        segs = []
        out = bytearray()
        hold = 0.0
        corrupt, dropbyte, drop, delay = self._corrupt, self._dropbyte, self._drop, self._delay
        corruptframe = self._corruptframe
        flip_at = -1  # index in data of the byte corruptframe flips a bit of
        for i, b in enumerate(data):
            ends = False  # this 00 ends a frame (else it is idle or the next frame's leading 00)
            if b:
                if not self._in_frame:
                    self._in_frame = True
                    self._hit_frame = self._next_hit
                    self._next_hit = False
                    self.frames += 1
                    if corruptframe is not None and corruptframe.hit():
                        # One byte of the frame, among those in this chunk (a board writes a frame
                        # whole, so that is all of it); drawn for every hit frame, dropped or not,
                        # so the Nth frame's flip does not depend on the other faults.
                        end = data.find(0, i)
                        length = (end if end >= 0 else len(data)) - i
                        rng = self._frame_bit_rng
                        flip_at = i + int(rng.random() * length)
                        flip_pick = rng.random()
                    self._dropping = drop is not None and drop.hit()
                    if self._dropping:
                        self.frames_dropped += 1
                    elif delay is not None and delay.hit():
                        self.delayed += 1
                        if out:
                            segs.append((bytes(out), hold))
                            out = bytearray()
                        hold = self.delay_s
                if self._dropping:
                    continue
            elif self._in_frame:
                ends = True
                self._in_frame = False
                if self._dropping:
                    self._dropping = False
            if dropbyte is not None and dropbyte.hit():
                self.bytes_dropped += 1
                continue
            if i == flip_at:
                # A bit whose flip leaves the byte non-zero: a 00 would split the frame in two.
                bits = [k for k in range(8) if b ^ (1 << k)]
                b ^= 1 << bits[int(flip_pick * len(bits))]
                self.corrupted += 1
                if not self._hit_frame:
                    self._hit_frame = True
                    self.frames_corrupted += 1
            if corrupt is not None and corrupt.hit():
                b ^= 1 << self._bit_rng.randrange(8)
                self.corrupted += 1
                if ends or self._in_frame:  # a byte of the frame, or the 00 that ends it
                    if not self._hit_frame:
                        self._hit_frame = True
                        self.frames_corrupted += 1
                elif not self._next_hit:    # a 00 before a frame: the next frame is spoiled
                    self._next_hit = True
                    self.frames_corrupted += 1
            out.append(b)
        if out:
            segs.append((bytes(out), hold))
        return segs

    def counters(self):
        return {"frames": self.frames, "frames_dropped": self.frames_dropped, "bytes_dropped": self.bytes_dropped,
                "corrupted": self.corrupted, "frames_corrupted": self.frames_corrupted, "delayed": self.delayed,
                "cuts": self.cuts_started, "cut_bytes": self.cut_bytes}


def describe_injected(c):
    """One line of what a wire's faults did, from WireFaults.counters()."""
    parts = []
    if c["corrupted"]:
        parts.append("%d bytes corrupted in %d frames" % (c["corrupted"], c["frames_corrupted"]))
    if c["frames_dropped"]:
        parts.append("%d frames dropped" % c["frames_dropped"])
    if c["bytes_dropped"]:
        parts.append("%d single bytes dropped" % c["bytes_dropped"])
    if c["delayed"]:
        parts.append("%d frames delayed" % c["delayed"])
    if c["cuts"]:
        parts.append("%d cuts (%d bytes lost)" % (c["cuts"], c["cut_bytes"]))
    text = ", ".join(parts) or "nothing injected"
    return text + (" (of %d frames)" % c["frames"] if c["frames"] else "")
