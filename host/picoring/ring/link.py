"""One board's USB link, as the harness and flash use it: BoardLink (the serial port, its
reader thread, commands and their replies, reconnecting after an unplug), LinkNotice (what
happened to a link), the boards' clock rates, and HarnessError, the error every layer
above reports a board or port problem with."""

import collections
import os
import queue
import threading
import time

try:
    import fcntl
except ImportError:  # Windows: pyserial's own (wall-time) write timeout
    fcntl = None

from .. import fdwait
from ..clock import WALL
from .hostlink import CTRL_C, REPL_REASONS, LineParser, Reply, TickUnwrapper, encode_command
from .ports import busy_message, is_lock_error

try:
    import serial
except ImportError:  # pragma: no cover
    serial = None


class HarnessError(RuntimeError):
    """A problem with the boards or the ports; the message names the port."""


# A command's reply, on a real Pico: it answers within milliseconds; this is how long a silent
# board is waited for. Not 3 s, nor 10: a virtual board's USB link is a pty, and a pty's bytes
# wait for the kernel's tty worker; under two busy loops 3084 state queries took 1 ms median,
# 8 ms at the 99th percentile and 7.9 s at most (a 60 s loop of !status on a ring of 4), and 10.7 s was seen
# at load 9. A board that says something else instead (a REPL's echo and prompt, a traceback) is
# given up on sooner, after REPLY_NOT_FIRMWARE_S: it is not running the firmware; 10 s on a ring
# whose host may be loaded (a stall-aware clock: an emulated Pico under load took over 10 s from
# its boot banner to its hello, so a banner is not such a sign), 3 s on real boards.
REPLY_TIMEOUT_S = 30.0
REPLY_NOT_FIRMWARE_S = 3.0
REPLY_NOT_FIRMWARE_LOADED_S = 10.0
# A write that cannot go out this long: the board does not read. Not 2 s: a busy machine was seen
# to stop every pty of a virtual ring (its relay, the boards, the host's writes) for 2 to 4 s, and
# pyserial may report a timeout for a write that went out, so a timed-out write cannot be retried.
WRITE_TIMEOUT_S = 30.0
# A reply queues behind what the board said before it (a board logging events at full speed, read
# by a host that is slow under load, was seen to put 10 s of backlog before its reply). So the
# reply timeout counts from the link's last byte, not from the command, while the link keeps
# talking, up to this many times the timeout: a board that never answers but never stops
# talking either is still found.
REPLY_BACKLOG_FACTOR = 6


HELLO_PROMPT_S = 0.5  # events without a hello for this long: its hello went nowhere (wait_hello)
RATE_WITHIN = 0.05  # a clock rate is taken once the pings' round trips leave it this unsure at most
CLOCK_KEPT = 8  # clock samples kept from a run's start and from its latest pings (BoardLink.clock_rate)
RATE_GIVE_UP_S = 3.0  # (of the links' clock: time in which the serial ports delivered) then the surest rate so far


def clock_rates(links, span_s=0.1, within=RATE_WITHIN, give_up_s=RATE_GIVE_UP_S, clock=WALL):
    """How fast each board's clock runs against the host's (board us per host us): about 1 on
    a real Pico; below 1 on an emulated one that this machine cannot keep in real time (3 busy
    emulated Picos: 0.2 on an idle 2-core machine, 0.02 to 0.05 seen on a busy one). None for
    a board that does not answer pings.

    A ping's midpoint is its board tick's host time only to within half its round trip, and a
    loaded machine's tty worker holds answers back for seconds: two pings 0.1 s apart, one of
    them held up, once gave a rate 40 times too low, and the run's stall limit became 61 s
    where 1.5 s was asked. So pings go on, span_s apart, until two of them give the rate to
    within `within` (relative), or give_up_s of the clock's time has passed: then the surest
    pair's rate."""
    samples = [[s] if s else None for s in (link.clock_sample() for link in links)]
    rates = [None] * len(links)
    deadline = clock.deadline(give_up_s)
    todo = [i for i, s in enumerate(samples) if s]
    while todo:
        time.sleep(span_s)
        for i in list(todo):
            s = links[i].clock_sample()
            if s is not None:
                samples[i].append(s)
            best = surest_rate(samples[i])
            if s is None or (best is not None and best[0] <= within) or deadline.expired():
                rates[i] = best[1] if best is not None else None
                todo.remove(i)
    return rates


def surest_rate(samples):
    """(relative uncertainty, rate) of the pair of clock samples (host us, board us, rtt us)
    that gives the board's clock rate most surely, or None if no pair gives one."""
    best = None
    for k, (h1, b1, r1) in enumerate(samples):
        for h2, b2, r2 in samples[k + 1:]:
            span = h2 - h1
            if span <= 0 or b2 <= b1:
                continue
            unsure = (r1 + r2) / 2 / span  # each midpoint is off by up to half its round trip
            if best is None or unsure < best[0]:
                best = (unsure, (b2 - b1) / span)
    return best


def slowness(rates):
    """How many times longer than on a real Pico a wait for the boards should be: the inverse of
    the slowest measured clock rate (clock_rates), never below 1 (a real board) nor above 100
    (1/57 was measured on a 2-core machine running 3 other test suites). Boot and ring-forming
    deadlines are chip-time budgets; on emulated Picos chip time runs slower than wall time
    when this machine is busy, and a deadline in wall time that assumed a real board would
    fire while the boards are still making progress."""
    rates = [r for r in rates if r]
    return min(100.0, max(1.0, 1.0 / min(rates))) if rates else 1.0


def now_us():
    return time.monotonic_ns() // 1000


RECONNECT_S = 0.2  # how often a link whose port went away tries to open it again
# close() waits this long for the reader thread to end. A read of a pty can wait seconds for the
# kernel's tty worker on a loaded machine, and the port's lock (opened exclusive) is held until
# that read returns, whoever closes the port meanwhile: a close() that gave up after 1 s let the
# next open of the same port fail as "port busy" (discover's reopen after its flash, under two
# busy loops). The reader sees the stop within one read.
CLOSE_WAIT_S = 30.0


class LinkNotice:
    """The link itself changed, not the board's output: word "disconnected" (the port went
    away: a cable pulled, a board that reboots) or "reconnected" (the same port opened
    again); text says why. Put into the inbox like a Reply."""

    __slots__ = ("board", "word", "text")

    def __init__(self, board, word, text):
        self.board = board
        self.word = word
        self.text = text

    def __repr__(self):
        return "LinkNotice(%r, %r, %r)" % (self.board, self.word, self.text)


class BoardLink:
    """One board's USB serial: a pyserial port, a reader thread, a line parser.

    Everything the board says goes into the shared `inbox` queue as
    (board index, host receive time in us, BoardEvent or Reply). When the port goes
    away (unplugged, the board power-cycled) the link does not die: it puts a
    LinkNotice("disconnected") into the inbox, drops what is written meanwhile
    (counted in writes_dropped), opens the same port again every RECONNECT_S and,
    once it is back, puts a LinkNotice("reconnected") and goes on reading.
    """

    def __init__(self, index, port, inbox, size=None, clock=WALL):
        """clock: what its waits count (picoring.clock): wall time for a real board."""
        self.index = index
        self.clock = clock
        self.port = port
        self.inbox = inbox
        self.parser = LineParser(board=index, size=size)
        self.unwrap = TickUnwrapper()
        self.offset = None  # board us - host us, from pings; None: not known for this incarnation
        self.rtt = None
        self.booted_at = 0  # host us of this incarnation's hello: older pings say nothing of its clock
        # (host us, board us, rtt us) of this incarnation's first and latest good clock samples:
        # how fast its clock ran against the host's over a run (clock_rate)
        self._early, self._late = [], collections.deque(maxlen=CLOCK_KEPT)
        self.replies = queue.Queue()
        self._stop = threading.Event()
        self._thread = None
        self._lock = threading.Lock()  # guards swapping self.serial against writers
        self.serial = None
        self._write_fd = (None, None)  # (port, its fd if _write_all writes it): looked at once per port
        self.connected = False
        self.disconnects = 0
        self.reconnects = 0
        self.writes_dropped = 0  # writes while the port was gone (bytes: bytes_dropped)
        self.bytes_dropped = 0
        self.tap = None  # tap(index, "rx"|"tx", bytes): a copy of the traffic (the pytest plugin's log)
        self.last_rx = 0.0  # clock.now() of the last bytes read: a reply may queue behind them
        self.slowness = 1.0  # wall time per board time (slowness()): scales the default reply timeout

    def _open_port(self):
        if serial is None:
            raise HarnessError("pyserial is not installed")
        local = "://" not in self.port
        try:
            kw = {"baudrate": 115200, "timeout": 0.02, "write_timeout": WRITE_TIMEOUT_S * self.slowness}
            if self.port.startswith("rfc2217://"):
                del kw["write_timeout"]  # pyserial 3.5's rfc2217 raises NotImplementedError for it
            if local and os.name == "posix":
                # flock: a second run (or mpremote, a terminal) on the same board fails here,
                # saying who has it, instead of both runs reading half of each other's lines
                kw["exclusive"] = True
            return fdwait.allow_high_fd(serial.serial_for_url(self.port, **kw))  # a ring of 200 boards
        except (serial.SerialException, OSError, ValueError, NotImplementedError) as e:
            if local and is_lock_error(e):
                raise HarnessError(busy_message(self.port)) from None
            raise HarnessError("%s: cannot open: %s" % (self.port, e)) from None

    def open(self):
        self.serial = self._open_port()
        self.connected = True
        self._thread = threading.Thread(target=self._read_loop, name="board%d-reader" % self.index, daemon=True)
        self._thread.start()
        return self

    def _read_loop(self):
        while not self._stop.is_set():
            ser = self.serial
            if ser is None:
                # A half line must not be glued to what the port says when it is back (cut here:
                # this thread is the parser's only user).
                self.parser.cut()
                # Try at once (a board that power-cycles is back within milliseconds), then
                # every RECONNECT_S until the port is there or the link is closed.
                if not self._reopen():
                    self._stop.wait(RECONNECT_S)
                continue
            try:
                data = ser.read(max(1, min(ser.in_waiting, 65536)))
            except (serial.SerialException, OSError, TypeError, AttributeError, ValueError) as e:
                # TypeError, AttributeError, ValueError: pyserial's port was closed under the
                # read (by close(), or by a writer that found the port gone)
                if not self._stop.is_set():
                    self._lost(ser, "on read", e)
                continue
            if not data:
                continue
            self.last_rx = self.clock.now()
            t = now_us()
            if self.tap is not None:
                self.tap(self.index, "rx", data)
            for item in self.parser.feed(data):
                if isinstance(item, Reply):
                    self.replies.put((t, item))
                self.inbox.put((self.index, t, item))

    def _lost(self, ser, when, error):
        """The port went away (once per loss, whoever notices first: the reader or a writer)."""
        with self._lock:
            if self.serial is not ser or ser is None:
                return
            self.serial = None
            self.connected = False
            self.disconnects += 1
            # Queued before the lock is let go: once serial is None the reader may reopen the
            # port at once (a power-cycled virtual board's path is back within microseconds),
            # and its "reconnected" must not overtake this notice when a writer found the loss.
            text = "%s: the port went away (%s: %s)" % (self.port, when, error)
            self.inbox.put((self.index, now_us(), LinkNotice(self.index, "disconnected", text)))
        try:
            ser.close()
        except Exception:
            pass

    def _reopen(self):
        """Open the same port again; False while it is not there."""
        try:
            ser = self._open_port()
        except HarnessError:
            return False
        with self._lock:
            if self._stop.is_set():
                ser.close()
                return True
            self.serial = ser
            self.connected = True
            self.reconnects += 1
            # under the lock, like _lost's notice: the two always reach the inbox in their order
            self.inbox.put((self.index, now_us(), LinkNotice(self.index, "reconnected", "%s: the port is back" % self.port)))
        return True

    def write(self, data):
        """Send data to the board; False if it went nowhere (the port is gone: dropped, counted)."""
        if self.tap is not None:
            self.tap(self.index, "tx", data)
        with self._lock:
            ser = self.serial
            if ser is None:  # the port is gone: what is sent now is lost, as on a pulled cable
                self.writes_dropped += 1
                self.bytes_dropped += len(data)
                return False
            try:
                if self._write_fd[0] is not ser:
                    self._write_fd = (ser, _nonblocking_fd(ser))
                fd = self._write_fd[1]
                if fd is not None:
                    self._write_all(fd, data)
                    return True
                if ser.write_timeout is not None and ser.write_timeout < WRITE_TIMEOUT_S * self.slowness:
                    # A slow board drains its USB input slowly too (an emulated Pico under load
                    # runs 5-50x slower than wall time): the deadline is in board time.
                    ser.write_timeout = WRITE_TIMEOUT_S * self.slowness
                ser.write(data)
                return True
            except serial.SerialTimeoutException as e:  # the port is there, the board does not read
                raise HarnessError("%s: write failed: %s" % (self.port, e)) from None
            except (serial.SerialException, OSError) as e:
                error = e
            self.writes_dropped += 1
            self.bytes_dropped += len(data)
        self._lost(ser, "on write", error)
        return False

    def _write_all(self, fd, data):
        """All of data to a local port, waiting while it takes none for WRITE_TIMEOUT_S of board
        time counted by the link's clock (a stall-aware one leaves out the time in which the
        serial ports delivered nothing). pyserial's write
        timeout is wall time: a loaded suite run failed "write failed: Write timeout" on a
        virtual board whose USB thread the machine held up (and once it fires, how much went
        is not known)."""
        deadline = self.clock.deadline(WRITE_TIMEOUT_S * self.slowness)
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(fd, view):]
            except BlockingIOError:
                pass
            if not view:
                return
            if deadline.expired():
                raise serial.SerialTimeoutException("Write timeout: %d of %d bytes not taken in %.1f s%s" % (
                    len(view), len(data), deadline.seconds, deadline.not_counted()))
            fdwait.wait((), [fd], min(0.1, max(deadline.left(), 0.001)))

    def command(self, word, *args, expect=None, timeout=None):
        """Send a command and wait for the reply line that starts with `expect` (a reply that
        reached the host before the command was sent never answers it). A command that went
        nowhere (the port is gone) fails at once: no board has it to answer, even if the port
        comes back (the end of a run once waited REPLY_TIMEOUT_S for each such link's flush and
        status)."""
        expect = expect or word
        sent = now_us()
        if not self.write(encode_command(word, *args)):
            raise HarnessError("%s: no %r reply: the port is gone, the command went nowhere (disconnected %d times)"
                               % (self.port, expect, self.disconnects))
        return self.wait_reply(expect, timeout, since=sent)

    def wait_reply(self, word, timeout=None, since=None, done=None):
        """The next reply line `word`; timeout in seconds, by default REPLY_TIMEOUT_S of board time.
        since: host us; replies received before it are stale (the reader keeps every reply, and
        the run loop sends commands whose replies it reads from the inbox instead).
        done: a callable; once it is true the wait ends without a reply: (None, None)."""
        if timeout is None:
            timeout = REPLY_TIMEOUT_S * self.slowness
        not_firmware = min(timeout, self.not_firmware_s() * self.slowness)
        # Measured by the link's clock: a loaded machine's tty worker once held a virtual
        # board's prompt answer back for 7.7 s, which a stall-aware clock leaves out.
        clock = self.clock
        start = clock.now()
        stalled0 = clock.stalled()
        cap = start + max(timeout, not_firmware * REPLY_BACKLOG_FACTOR)
        garbage_before = sum(self.parser.garbage.values())  # what it said earlier is not the answer
        noise_before = self._noise()
        events_before = self.parser.events
        while True:
            if done is not None and done():
                return None, None
            now = clock.now()
            limit = not_firmware if self._noise() > noise_before else timeout
            deadline = min(cap, max(start, self.last_rx) + limit)
            left = deadline - now
            if left <= 0:
                if not self.connected:
                    raise HarnessError("%s: no %r reply within %.1f s: the port is gone (disconnected %d times)"
                                       % (self.port, word, now - start, self.disconnects))
                # Only the lines since the command: the REPL banner of the run's own Ctrl-C at its
                # start once made a board that was merely slow look as if it had left the firmware.
                new = min(sum(self.parser.garbage.values()) - garbage_before, 3)
                seen = ", ".join("%s: %r" % g for g in self.parser.garbage_lines[-new:]) if new > 0 else ""
                how = "within %.1f s%s" % (now - start, clock.not_counted(clock.stalled() - stalled0))
                if deadline >= cap:
                    how += ", while it kept sending (%d events)" % (self.parser.events - events_before)
                elif now - start > limit + 1:
                    how += " (the last %.1f s quiet)" % limit
                raise HarnessError(
                    "%s: no %r reply %s (is it a picoring board running the firmware? %s)"
                    % (self.port, word, how, ("it sent: " + seen) if seen else "it sent nothing readable"))
            try:
                t, reply = self.replies.get(timeout=min(left, 0.1))  # (what it says may shorten the wait)
            except queue.Empty:
                continue
            if since is not None and t < since:
                continue
            if reply.word == word:
                return t, reply
            if reply.word == "err":
                raise HarnessError("%s: board error: %s" % (self.port, reply.text))

    def wait_hello(self, timeout=None):
        """(host us, Reply) of the board's hello after a restart. What a board says before the
        host has its port open goes nowhere (a Pico's USB serial; a virtual board whose ring has
        not yet seen the host open it, seconds late under load: flash once waited 60 s while the
        board sent 46 events and no hello). The firmware says hello again before it answers
        its first host line (NodeLoop.start): once the board is seen running the firmware (its
        events come) and no hello has come for HELLO_PROMPT_S, a command asks for it; again
        after twice as long each time, as the prompt may go where the hello went (a port being
        opened again, seen late by a loaded machine)."""
        events = self.parser.events
        running_since, wait = None, HELLO_PROMPT_S

        def ask_while_running():
            nonlocal running_since, wait
            if self.parser.events > events:
                now = self.clock.now()
                if running_since is None:
                    running_since = now
                elif now - running_since >= wait:
                    running_since, wait = now, 2 * wait
                    self.write(encode_command("ver"))
            return False

        return self.wait_reply("hello", timeout, done=ask_while_running)

    def not_firmware_s(self):
        """How long a board that says things no firmware says gets to answer (before slowness)."""
        return REPLY_NOT_FIRMWARE_LOADED_S if self.clock.stall_aware else REPLY_NOT_FIRMWARE_S

    def _noise(self):
        """Lines so far that no board running the firmware prints, even restarting (a REPL's
        prompt and echo, a traceback other than a Ctrl-C's; not the boot banner)."""
        return sum(k for reason, k in self.parser.garbage.items() if reason not in REPL_REASONS)

    def ping(self, token):
        """One clock sample: (rtt us, offset us) with offset = board - host."""
        t0 = now_us()
        t1, reply = self.command("ping", token, expect="pong")
        parts = reply.text.split()
        if len(parts) not in (2, 3) or parts[0] != str(token):  # (the event number: firmware 0.6.0)
            raise HarnessError("%s: bad pong %r" % (self.port, reply.text))
        tick = self.unwrap(int(parts[1]))
        return t1 - t0, tick - (t0 + t1) // 2

    def align(self, samples=8):
        """Estimate the clock offset from the ping with the smallest round trip."""
        best = None
        for k in range(samples):
            rtt, offset = self.ping(k)
            if best is None or rtt < best[0]:
                best = (rtt, offset)
        self.rtt, self.offset = best
        return best

    def clock_sample(self, timeout=3.0):
        """(host us, board us, round trip us) at one ping's midpoint; None if the board does not
        answer pings (it is not running the firmware)."""
        try:
            t0 = now_us()
            t1, reply = self.command("ping", 90, expect="pong", timeout=timeout)
            return (t0 + t1) // 2, self.unwrap(int(reply.text.split()[1])), t1 - t0
        except (HarnessError, ValueError, IndexError):
            return None

    def host_time(self, tick):
        """Host us of a board tick (mod 2**30), through this board's unwrapper."""
        return self.unwrap(tick) - self.offset

    def board_restarted(self, at=None):
        """The board said hello again (host us `at`): its clock started over (its event
        numbering too, which the parser follows by itself on the hello line), so the
        offset of the previous incarnation says nothing about it (a Pico counts from 0)."""
        self.unwrap = TickUnwrapper()
        self.offset = None
        self.rtt = None
        self.booted_at = now_us() if at is None else at
        self._early, self._late = [], collections.deque(maxlen=CLOCK_KEPT)

    def clock_sampled(self, host_us, board_us, rtt_us):
        """A good clock sample (a ping's answer that came quickly), for clock_rate."""
        if len(self._early) < CLOCK_KEPT:
            self._early.append((host_us, board_us, rtt_us))
        else:
            self._late.append((host_us, board_us, rtt_us))

    def clock_rate(self, within=RATE_WITHIN / 10):
        """Board us per host us over this incarnation's clock samples, from their surest pair
        (surest_rate: mostly a quick answer among the first ones and one among the latest);
        None while it is more unsure than `within` (each midpoint is off by up to half its
        round trip: on a loaded machine a "good" answer can take a second). 1 within a few ppm
        for a real Pico and a virtual board; an emulated Pico's chip time runs slower than wall
        time on a busy machine."""
        best = surest_rate(self._early + list(self._late))
        return best[1] if best is not None and best[0] <= within else None

    def counters(self):
        return {"connected": self.connected, "disconnects": self.disconnects, "reconnects": self.reconnects,
                "writes_dropped": self.writes_dropped, "bytes_dropped": self.bytes_dropped}

    def close(self):
        """Stop the reader and close the port; returns once the port is free for the next user."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(CLOSE_WAIT_S)
        with self._lock:
            ser, self.serial = self.serial, None
            self.connected = False
        if ser is not None:
            try:
                ser.close()
            except Exception:
                pass


def _nonblocking_fd(ser):
    """The fd of a local port opened non-blocking (pyserial's posix Serial), which BoardLink
    writes itself; None for any other port (RFC 2217, Windows: pyserial's own write)."""
    fd = getattr(ser, "fd", None)
    if fd is None or fcntl is None:
        return None
    return fd if fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_NONBLOCK else None


def stop_firmware(links, timeout=None):
    """Stop every board's firmware (Ctrl-C to all, then each says "!stopped"; a board already at
    its REPL prints a fresh prompt instead): each then waits at its REPL. HarnessError if one
    says neither within timeout (BoardLink.wait_reply's default)."""
    sent = now_us()
    prompts = [link.parser.prompts for link in links]
    for link in links:
        link.write(CTRL_C)
    for link, before in zip(links, prompts):
        link.wait_reply("stopped", timeout, since=sent, done=lambda: link.parser.prompts > before)


def drain(q):
    """Empty a queue without waiting (what is in it is stale)."""
    while True:
        try:
            q.get_nowait()
        except queue.Empty:
            return
