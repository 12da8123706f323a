"""The host's side of a virtual ring's USB links: the USB thread, which alone reads the host
ports' ptys (boards.py's module doc says why), and what the relay does with their events and
with a board's output for its host. A part of VirtualRing (boards.py), kept apart: it changes
when the USB link's behaviour does, the relay's wires and board faults when theirs do. It works
on the ring's boards, locks, queues and wake-up pipes, which VirtualRing makes."""

import os
import queue
import sys
import time

from .. import fdwait
from .board import TAIL, look_at_host_port, read_all, read_host, read_host_all, write_some

_LOOK_S = 0.02  # how often the USB thread looks for a host opening or closing a port
# A host that opened a port gets the board's output once it has flushed its input (HostPort),
# or after this long: a host that never flushes (cat, a terminal) is not kept waiting.
_HOST_FLUSH_WAIT_S = 1.0


class HostSide:
    """VirtualRing's USB side (module doc); its methods run on the relay thread unless said."""

    def _board_to_host(self, b, data):
        if not data:
            return
        b.usb_from_board += len(data)
        b._record_output(data)
        if not b.usb_present():  # unplugged: nobody can hear it
            b.usb_dropped += len(data)
            return
        if not b.host_attached:
            if b.hold_until is not None and len(b._held) + len(data) <= TAIL:
                b._held += data  # just powered on: kept for the host that is reconnecting
            else:
                b.usb_dropped += len(data)
            return
        b._to_host += data
        self._flush_to_host(b)

    @staticmethod
    def _flush_to_host(b):
        """As much of the board's queued output as the host's pty takes now."""
        if b.awaiting_flush_until is not None:
            return  # the host would throw it away (_attach_host)
        sent = write_some(b._host.fd, b._to_host)
        if sent:
            del b._to_host[:sent]

    def _attach_host(self, b, now):
        """A host opened the port. What the board says from now on (and what it said just after
        a power cycle, held for it) is queued for the host, and written once the host has flushed
        its input: pyserial flushes in open(), after the open that the USB thread saw, and would
        throw away what came before (HostPort)."""
        b.host_attached = True
        b._to_host += b._held
        b._held.clear()
        b.hold_until = None
        b.awaiting_flush_until = now + _HOST_FLUSH_WAIT_S

    def _host_ready(self, b):
        """The host has flushed its input (or wrote, or waited long enough): it gets the output."""
        if b.awaiting_flush_until is not None:
            b.awaiting_flush_until = None
            self._flush_to_host(b)

    # -- the USB thread: the host ports' reader (boards.py's module doc) --------------

    def _usb_main(self):
        try:
            self._usb_loop()
        except Exception as e:  # noqa: BLE001 - said, and the relay goes on (the wires need no USB)
            if not self._stopping:
                print("picoring virtual ring: USB thread failed: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        finally:
            self._close_retired()

    def _usb_loop(self):
        """Read what hosts write to the boards' ports, see hosts open and close them, and drain a
        reset board's port; each as an event for the relay. Everything here may wait for the
        kernel's tty worker (seconds on a loaded machine): only this thread waits."""
        last_look = 0.0
        while not self._stopping:
            self._close_retired()
            ports = [(b, b._host) for b in self.boards if b._host is not None and not b._host.retired]
            for b, p in ports:
                if p.drain:
                    p.drain = False
                    if not p.opened and look_at_host_port(p.fd)[0]:
                        # A host that opened the port and flushed it before a reset (flash: open,
                        # then restart): its open is said first, or the relay takes the flush read
                        # here for an earlier one and waits _HOST_FLUSH_WAIT_S for another.
                        p.opened = True
                        self._usb_event("opened", b, p)
                    data, flushed = read_host_all(p.fd)
                    data, p.early = p.early + data, b""
                    self._usb_event("drained", b, p, len(data))
                    if flushed:
                        self._usb_event("flushed", b, p)
                    p.drained.set()
            reading = [(b, p) for b, p in ports if p.opened]
            ready, _ = fdwait.wait([p.fd for _, p in reading] + [self._usb_wake_r], (), _LOOK_S)
            read_all(self._usb_wake_r)
            for b, p in reading:
                if p.fd not in ready or p.retired:
                    continue
                try:
                    data, flushed = read_host(p.fd)
                except BlockingIOError:
                    continue
                except OSError:  # EIO: the last user of usb_path closed it
                    p.opened = False
                    b._forget_unread(p)
                    self._usb_event("hungup", b, p)
                    continue
                if flushed:
                    self._usb_event("flushed", b, p)
                if data:
                    self._usb_event("data", b, p, data, True)
            now = time.monotonic()
            if now - last_look >= _LOOK_S:
                last_look = now
                for b, p in ports:
                    if p.opened or p.retired:
                        continue
                    is_open, pending = look_at_host_port(p.fd)
                    if is_open:
                        p.opened = True
                        self._usb_event("opened", b, p)
                        if p.early:  # it wrote before this look saw it (_forget_unread)
                            self._usb_event("data", b, p, p.early, True)
                            p.early = b""
                    elif pending or p.early:
                        # A host that opened the port, wrote and closed it between two looks
                        # (echo '!status' > usb0): what it wrote reaches the board, as on a Pico.
                        data, _ = read_host_all(p.fd)  # (a status of its flush: nobody's now)
                        data, p.early = p.early + data, b""
                        if data:
                            self._usb_event("data", b, p, data, False)

    def _usb_event(self, kind, board, port, *rest):
        self._usb_events.put((kind, board, port) + rest)
        self._wake()

    def _retire(self, port):
        """Hand a HostPort no longer in use to the USB thread, which closes it (HostPort)."""
        if port is None:
            return
        port.retired = True
        port.drained.set()  # nobody drains a retired port: nobody waits for it
        with self._lock:
            self._retired.append(port)
        self._wake_usb()

    def _close_retired(self):
        with self._lock:
            ports, self._retired = self._retired, []
        for port in ports:
            try:
                os.close(port.fd)
            except OSError:
                pass

    def _take_usb_events(self):
        """What the USB thread saw on the host ports (_usb_loop), in its order."""
        now = time.monotonic()
        while True:
            try:
                kind, b, port, *rest = self._usb_events.get_nowait()
            except queue.Empty:
                return
            if port is not b._host:  # a port unplugged or replaced since: nobody's now
                if kind == "data":
                    b.usb_dropped += len(rest[0])
                continue
            if kind == "opened":
                self._attach_host(b, now)
            elif kind == "flushed":
                self._host_ready(b)
            elif kind == "hungup":
                b._detach_host()
            elif kind == "drained":
                b.usb_dropped += rest[0]
                b.discard_host = False
            elif b.discard_host:  # data the host sent before the board's reset
                b.usb_dropped += len(rest[0])
            else:
                data, host_there = rest  # host_there: False for a host gone before the USB thread looked
                if host_there:
                    if not b.host_attached:  # it wrote: it has the port open
                        self._attach_host(b, now)
                    self._host_ready(b)  # and its open, flush included, is over
                b.usb_to_board += len(data)
                b.usb_dropped += len(data) - write_some(b._usb_rx_relay, data)
