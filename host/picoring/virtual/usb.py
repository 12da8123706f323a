"""The host's side of a virtual ring's USB links: UsbSide, the USB thread, which alone reads the
host ports' ptys (boards.py's module doc says why), and the events it hands to the relay
(VirtualRing, boards.py), which applies them to the boards (VirtualBoard's host side: its
output for the host, the host's for it). Kept apart from the relay's wires and board faults: it
changes when the USB link's behaviour does."""

import os
import queue
import sys
import threading
import time

from .. import fdwait
from .board import WakePipe, look_at_host_port, read_host, read_host_all

_LOOK_S = 0.02  # how often the USB thread looks for a host opening or closing a port
# A host that opened a port gets the board's output once it has flushed its input (HostPort),
# or after this long: a host that never flushes (cat, a terminal) is not kept waiting.
_HOST_FLUSH_WAIT_S = 1.0


class UsbSide:
    """A virtual ring's USB side (module doc). boards: the ring's boards (the list it fills as
    it starts); wake_relay(): wakes the relay, which then calls take_events(); stopping(): the
    ring is stopping (its relay may stop it first, on an error).

    start() and stop() from the ring's owner; retire() from any thread; take_events() on the
    relay thread."""

    def __init__(self, boards, wake_relay, stopping):
        self.boards = boards
        self._wake_relay = wake_relay
        self._stopping = stopping
        self._events = queue.Queue()
        self._lock = threading.Lock()  # guards _retired
        self._retired = []  # host ports to close (on the USB thread: it alone reads them)
        self._wake_pipe = None
        self.thread = None

    def start(self):
        self._wake_pipe = WakePipe()
        self.thread = threading.Thread(target=self._main, name="picoring-virtual-usb", daemon=True)
        self.thread.start()

    def wake(self):
        if self._wake_pipe is not None:
            self._wake_pipe.poke()

    def close(self):
        """After the thread ended: the host ports still to close, and the wake-up pipe."""
        self._close_retired()
        if self._wake_pipe is not None:
            self._wake_pipe.close()

    def retire(self, port):
        """Hand a HostPort no longer in use to the USB thread, which closes it (HostPort)."""
        if port is None:
            return
        port.retired = True
        port.drained.set()  # nobody drains a retired port: nobody waits for it
        with self._lock:
            self._retired.append(port)
        self.wake()

    def _close_retired(self):
        with self._lock:
            ports, self._retired = self._retired, []
        for port in ports:
            try:
                os.close(port.fd)
            except OSError:
                pass

    # -- the USB thread: the host ports' reader (boards.py's module doc) --------------

    def _main(self):
        try:
            self._loop()
        except Exception as e:  # noqa: BLE001 - said, and the relay goes on (the wires need no USB)
            if not self._stopping():
                print("picoring virtual ring: USB thread failed: %s: %s" % (type(e).__name__, e), file=sys.stderr)
        finally:
            self._close_retired()

    def _loop(self):
        """Read what hosts write to the boards' ports, see hosts open and close them, and drain a
        reset board's port; each as an event for the relay. Everything here may wait for the
        kernel's tty worker (seconds on a loaded machine): only this thread waits."""
        last_look = 0.0
        while not self._stopping():
            self._close_retired()
            ports = [(b, b.host_port) for b in self.boards if b.host_port is not None and not b.host_port.retired]
            for b, p in ports:
                if p.drain:
                    p.drain = False
                    if not p.opened and look_at_host_port(p.fd)[0]:
                        # A host that opened the port and flushed it before a reset (flash: open,
                        # then restart): its open is said first, or the relay takes the flush read
                        # here for an earlier one and waits _HOST_FLUSH_WAIT_S for another.
                        p.opened = True
                        self._event("opened", b, p)
                    data, flushed = read_host_all(p.fd)
                    data, p.early = p.early + data, b""
                    self._event("drained", b, p, len(data))
                    if flushed:
                        self._event("flushed", b, p)
                    p.drained.set()
            reading = [(b, p) for b, p in ports if p.opened]
            ready, _ = fdwait.wait([p.fd for _, p in reading] + [self._wake_pipe.r], (), _LOOK_S)
            self._wake_pipe.drain()
            for b, p in reading:
                if p.fd not in ready or p.retired:
                    continue
                try:
                    data, flushed = read_host(p.fd)
                except BlockingIOError:
                    continue
                except OSError:  # EIO: the last user of usb_path closed it
                    p.opened = False
                    b.forget_unread(p)
                    self._event("hungup", b, p)
                    continue
                if flushed:
                    self._event("flushed", b, p)
                if data:
                    self._event("data", b, p, data, True)
            now = time.monotonic()
            if now - last_look >= _LOOK_S:
                last_look = now
                for b, p in ports:
                    if p.opened or p.retired:
                        continue
                    is_open, pending = look_at_host_port(p.fd)
                    if is_open:
                        p.opened = True
                        self._event("opened", b, p)
                        if p.early:  # it wrote before this look saw it (forget_unread)
                            self._event("data", b, p, p.early, True)
                            p.early = b""
                    elif pending or p.early:
                        # A host that opened the port, wrote and closed it between two looks
                        # (echo '!status' > usb0): what it wrote reaches the board, as on a Pico.
                        data, _ = read_host_all(p.fd)  # (a status of its flush: nobody's now)
                        data, p.early = p.early + data, b""
                        if data:
                            self._event("data", b, p, data, False)

    def _event(self, kind, board, port, *rest):
        self._events.put((kind, board, port) + rest)
        self._wake_relay()

    # -- on the relay thread -----------------------------------------------------------

    def take_events(self):
        """What the USB thread saw on the host ports (_loop), in its order, applied to the boards."""
        now = time.monotonic()
        while True:
            try:
                kind, b, port, *rest = self._events.get_nowait()
            except queue.Empty:
                return
            if port is not b.host_port:  # a port unplugged or replaced since: nobody's now
                if kind == "data":
                    b.usb_dropped += len(rest[0])
                continue
            if kind == "opened":
                b.attach_host(now, _HOST_FLUSH_WAIT_S)
            elif kind == "flushed":
                b.host_ready()
            elif kind == "hungup":
                b.detach_host()
            elif kind == "drained":
                b.usb_dropped += rest[0]
                b.discard_host = False
            elif b.discard_host:  # data the host sent before the board's reset
                b.usb_dropped += len(rest[0])
            else:
                data, host_there = rest  # host_there: False for a host gone before the USB thread looked
                if host_there:
                    if not b.host_attached:  # it wrote: it has the port open
                        b.attach_host(now, _HOST_FLUSH_WAIT_S)
                    b.host_ready()  # and its open, flush included, is over
                b.from_host(data)
