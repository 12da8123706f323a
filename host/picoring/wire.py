"""One UART link of the virtual ring: board i TX -> board i+1 RX, paced like a real UART.

A Wire is pure bookkeeping with the clock passed in (no I/O, no threads), so the
pacing and the fault hooks can be tested without ptys. The ring's relay loop
feeds it the bytes board i wrote (`send`) and asks it which bytes are due at
board i+1 (`take_due`) and when the next one will be (`next_due`).

Timing: a UART sends 10 bits per byte (start + 8 data + stop), back to back
while it has data, so byte k of a burst that starts at t arrives at
t + (k + 1) * 10 / baud. A byte never arrives early; the relay may release it
up to its wake-up granularity late.

Fault hooks (for the fault-injection issue): `cut` (implemented: bytes sent
while cut, and bytes in flight when cut, are lost), `delay` (seconds of extra
latency added to every byte, implemented), and `transform`, a callable
bytes -> bytes applied to every chunk as it enters the wire: a later drop or
corrupt fault is a transform. Counters: bytes_in, bytes_out, bytes_dropped
(cut or removed by transform), bytes_overrun (the receiver's buffer was full).
"""

from collections import deque

BITS_PER_BYTE = 10  # start bit + 8 data bits + stop bit, no parity


class Wire:
    __slots__ = ("index", "baud", "byte_time", "cut", "delay", "transform",
                 "bytes_in", "bytes_out", "bytes_dropped", "bytes_overrun",
                 "_chunks", "_idle_at", "_queued")

    def __init__(self, index, baud):
        if baud <= 0:
            raise ValueError("baud must be positive, got %r" % (baud,))
        self.index = index
        self.baud = baud
        self.byte_time = BITS_PER_BYTE / baud
        self.cut = False
        self.delay = 0.0
        self.transform = None
        self.bytes_in = 0
        self.bytes_out = 0
        self.bytes_dropped = 0
        self.bytes_overrun = 0
        # Each chunk: [time its first byte starts on the wire, data, bytes already released].
        self._chunks = deque()
        self._idle_at = 0.0  # when the sender's shift register is free again
        self._queued = 0

    # -- fault controls ------------------------------------------------------

    def set_cut(self, cut=True):
        """Cut (or mend) the wire. Cutting loses the bytes in flight, as pulling a cable would."""
        self.cut = bool(cut)
        if self.cut:
            self.bytes_dropped += self._queued
            self._chunks.clear()
            self._queued = 0

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
        if not data:
            return
        start = max(now, self._idle_at)
        self._idle_at = start + len(data) * self.byte_time
        self._chunks.append([start, bytes(data), 0])
        self._queued += len(data)

    def next_due(self):
        """Arrival time of the next byte still on the wire, or None."""
        if not self._chunks:
            return None
        start, _, released = self._chunks[0]
        return start + (released + 1) * self.byte_time + self.delay

    def take_due(self, now):
        """The bytes that have fully arrived at board i+1 by `now` (b"" if none)."""
        out = []
        chunks = self._chunks
        while chunks:
            chunk = chunks[0]
            start, data, released = chunk
            arrived = int((now - self.delay - start) / self.byte_time + 1e-9)
            if arrived <= released:
                break
            if arrived >= len(data):
                out.append(data[released:] if released else data)
                chunks.popleft()
            else:
                out.append(data[released:arrived])
                chunk[2] = arrived
                break
        if not out:
            return b""
        got = b"".join(out)
        self._queued -= len(got)
        return got

    def queued(self):
        """Bytes on the wire, not yet arrived."""
        return self._queued

    def delivered(self, count):
        self.bytes_out += count

    def overrun(self, count):
        self.bytes_overrun += count

    def counters(self):
        return {"wire": self.index, "baud": self.baud, "cut": self.cut,
                "bytes_in": self.bytes_in, "bytes_out": self.bytes_out,
                "bytes_dropped": self.bytes_dropped, "bytes_overrun": self.bytes_overrun,
                "in_flight": self._queued}
