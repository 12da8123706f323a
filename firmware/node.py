# The node loop: one protocol node, its UART link and its host link.
#
# Never blocks: each pass polls the UART (frames -> protocol), ends a critical
# section whose time is up, polls the host link (commands), and flushes event
# batches when nothing else is going on. Frames are forwarded first and logged
# after (ARCHITECTURE.md: logging before forwarding costs more than half the
# hop rate at 1 Mbaud). Nothing is allocated per message in steady state.

import protocol
import frame
import hostlink
from hostlink import EV_REQ, EV_SEND, EV_RECV, EV_ENTER, EV_EXIT, EV_BAD, EV_REJECT, EV_BOOT

try:
    from micropython import const
except ImportError:  # CPython

    def const(value):
        return value


FIRMWARE_VERSION = "0.2.0"  # 0.2.0: !probe / !probed (discovery), baud= in !ver

_SEND_TOKEN = const(1)  # protocol.SEND_TOKEN
_SEND_REQUEST = const(2)  # protocol.SEND_REQUEST
_ENTER_CS = const(4)  # protocol.ENTER_CS
_TOKEN = const(1)  # frame.TOKEN
_REQUEST = const(2)  # frame.REQUEST
_BAD = const(3)  # frame.BAD
_PROBE = const(4)  # frame.PROBE
_IDLE_HOST_EVERY = const(32)  # busy passes between two host polls

# The copies above are compile-time constants (const() is inlined only for names
# defined in this module); they must not drift from their sources.
if (protocol.SEND_TOKEN, protocol.SEND_REQUEST, protocol.ENTER_CS) != (_SEND_TOKEN, _SEND_REQUEST, _ENTER_CS) or (
        frame.TOKEN, frame.REQUEST, frame.BAD, frame.PROBE) != (_TOKEN, _REQUEST, _BAD, _PROBE):
    raise ImportError("node.py's protocol/frame constants disagree with protocol.py/frame.py")

_CMD_R = const(114)  # "!r": the request command, parsed without allocating


class NodeLoop:
    """Runs one node. uart/host/led/clock are passed in (hal.Board or stand-ins)."""

    def __init__(self, node, uart, host, ticks_us, ticks_diff, cs_us=0, led=None, info=None, log_capacity=64, rxbuf=64):
        self.node = node
        self.uart = uart
        self.link = hostlink.HostLink(host)
        self.log = hostlink.EventLog(ticks_us, log_capacity)
        self.ticks_us = ticks_us
        self.ticks_diff = ticks_diff
        self.cs_us = cs_us
        self.led = led
        self.info = info or {}
        self.enc = frame.Encoder()
        self.dec = frame.Decoder()
        self.rx = bytearray(rxbuf)
        self._cs_start = 0
        self._led_on = -1
        self.running = False
        self.tx_frames = 0
        self.rx_bytes = 0
        self.requests = 0
        self.rejected = 0
        self.passes = 0
        self._commands = {
            "r": self._cmd_request,
            "req": self._cmd_request,
            "status": self._cmd_status,
            "ping": self._cmd_ping,
            "log": self._cmd_log,
            "ver": self._cmd_version,
            "zero": self._cmd_zero,
            "flush": self._cmd_flush,
            "cs": self._cmd_cs,
            "stop": self._cmd_stop,
            "probe": self._cmd_probe,
        }

    # -- the loop --------------------------------------------------------

    def start(self, give_token=False):
        """Announce the board; the first node takes the token."""
        self.running = True
        n = self.node
        self.link.reply("hello " + self._version_text())
        self.log.record(EV_BOOT, 0, n.index, n.n, 0, 0)
        if give_token:
            self._act(n.give_token(), self.ticks_us())
        self._show()

    def run(self, give_token=False, idle=None):
        """Loop until "!stop", the host going away, or KeyboardInterrupt (raised).

        idle: optional callable, called after a pass that did nothing with no
        event left to send; it may wait briefly for input (a virtual board
        sleeps in poll() there instead of spinning a host core)."""
        self.start(give_token)
        log = self.log
        try:
            while self.running:
                if not self.step() and idle is not None and not log.pending:
                    idle()
        finally:
            self.running = False
            if self.led is not None:
                self.led.value(0)
        try:
            while self.log.flush_one(self.link.write):
                pass
        except OSError:
            pass
        self.link.reply("bye")

    def step(self):
        """One pass of the loop; returns True when it did any work."""
        busy = False
        n = self.uart.readinto(self.rx)
        if n:
            t = self.ticks_us()
            self.rx_bytes += n
            dec = self.dec
            dec.feed(self.rx, n)
            while True:
                k = dec.next()
                if not k:
                    break
                self._on_frame(k, t)
            busy = True
        node = self.node
        if node.in_cs:
            t = self.ticks_us()
            if self.ticks_diff(t, self._cs_start) >= self.cs_us:
                a = node.exit_cs()
                self._act(a, t, EV_EXIT)
                busy = True
        self.passes += 1
        if not busy or self.passes & (_IDLE_HOST_EVERY - 1) == 0:
            ln = self.link.poll()
            if ln:
                self._command(ln)
            elif self.link.closed:
                self.running = False
        log = self.log
        if log.pending and (not busy or log.pending >= log.half):
            log.flush_one(self.link.write)
        return busy

    def _on_frame(self, k, t):
        node = self.node
        dec = self.dec
        if k == _TOKEN:
            a = node.on_token(dec.count, dec.state, dec.seq, dec.epoch)
            self._act(a, t, EV_RECV, _TOKEN)
        elif k == _REQUEST:
            a = node.on_request()
            self._act(a, t, EV_RECV, _REQUEST)
        elif k == _PROBE:
            # Discovery only: reported to the host, not forwarded, not an event.
            self.link.reply("probed %d" % dec.probe)
        else:
            self.log.record(EV_BAD, 0, dec.last_bad, dec.bad, 0, 0, t)

    def _act(self, a, t, ev=0, kind=0):
        """Carry out the actions of a protocol handler, then log the event that
        caused them (ev at tick t) and the frames sent."""
        node = self.node
        dec = self.dec
        sent = 0
        if a & _SEND_TOKEN:
            self.uart.write(self.enc.token(node.count, node.state, node.seq, node.epoch))
            sent = _TOKEN
        elif a & _SEND_REQUEST:
            self.uart.write(self.enc.request())
            sent = _REQUEST
        if a & _ENTER_CS:
            self._cs_start = t
        log = self.log
        if ev:
            if ev == EV_RECV and kind == _TOKEN:
                log.record(EV_RECV, _TOKEN, dec.state, dec.count, dec.seq, dec.epoch, t)
            else:
                log.record(ev, kind, 0, 0, 0, 0, t)
        if sent:
            self.tx_frames += 1
            if sent == _TOKEN:
                log.record(EV_SEND, _TOKEN, node.state, node.count, node.seq, node.epoch)
            else:
                log.record(EV_SEND, _REQUEST, 0, 0, 0, 0)
        if a & _ENTER_CS:
            log.record(EV_ENTER, 0, 0, 0, node.seq, 0, t)
        if a or ev == EV_EXIT:
            self._show()

    def _show(self):
        """LED on while the token is here (resting or in the critical section)."""
        if self.led is None:
            return
        on = 1 if self.node.has_token or self.node.in_cs else 0
        if on != self._led_on:
            self._led_on = on
            self.led.value(on)

    def request(self):
        """A local request (from the host, or a test)."""
        node = self.node
        t = self.ticks_us()
        if node.busy():
            self.rejected += 1
            self.log.record(EV_REJECT, 0, 0, 0, 0, 0, t)
            return
        self.requests += 1
        self._act(node.request(), t, EV_REQ)

    # -- commands --------------------------------------------------------

    def _command(self, ln):
        line = self.link.line
        if ln == 2 and line[1] == _CMD_R:
            self.request()  # the hot command: no allocation
            return
        try:
            words = bytes(line[1:ln]).decode().split()
        except UnicodeError:
            words = ()
        if not words:
            self.link.bad_lines += 1
            return
        handler = self._commands.get(words[0])
        if handler is None:
            self.link.reply("err unknown command %r" % words[0])
            return
        try:
            handler(words[1:])
        except (ValueError, IndexError) as e:
            self.link.reply("err %s: %s" % (words[0], e))

    def _cmd_request(self, args):
        self.request()

    def _cmd_ping(self, args):
        # The tick is taken last so the host can pair it with its receive time.
        self.link.reply("pong %s %d" % (args[0] if args else "-", self.ticks_us() & hostlink.TICK_MASK))

    def _cmd_log(self, args):
        if args:
            self.log.enabled = args[0] not in ("0", "off")
        self.link.reply("log %d" % self.log.enabled)

    def _version_text(self):
        n = self.node
        import sys

        return "fw=%s proto=%s pos=%d n=%d cs_us=%d board=%s baud=%s tick_mask=%d rec=%d cap=%d mp=%s" % (
            FIRMWARE_VERSION,
            n.name,
            n.index,
            n.n,
            self.cs_us,
            self.info.get("board", "?"),
            self.info.get("baud", "?"),
            hostlink.TICK_MASK,
            hostlink.RECORD_SIZE,
            self.log.capacity,
            ".".join(str(x) for x in sys.implementation.version[:3]),
        )

    def _cmd_version(self, args):
        self.link.reply("ver " + self._version_text())

    def status_text(self):
        n = self.node
        d = self.dec
        return "pos=%d tok=%d cs=%d pend=%d count=%d state=%d seq=%d epoch=%d flag=%d errors=%d rx_frames=%d tx_frames=%d rx_bytes=%d bad=%d bad_crc=%d bad_len=%d bad_cobs=%d bad_kind=%d bad_lines=%d req=%d rej=%d eseq=%d pending=%d dropped=%d log=%d" % (
            n.index,
            n.has_token,
            n.in_cs,
            n.pending,
            n.count,
            n.state,
            n.seq,
            n.epoch,
            n.flag,
            n.errors,
            d.frames,
            self.tx_frames,
            self.rx_bytes,
            d.bad,
            d.bad_counts[0],
            d.bad_counts[1],
            d.bad_counts[2],
            d.bad_counts[3],
            self.link.bad_lines,
            self.requests,
            self.rejected,
            self.log.eseq,
            self.log.pending,
            self.log.dropped_total,
            self.log.enabled,
        )

    def _cmd_status(self, args):
        self.link.reply("status " + self.status_text())

    def _cmd_zero(self, args):
        # Counters only: the protocol state and the event numbering stay as they are.
        self.dec.reset_counters()
        self.tx_frames = 0
        self.rx_bytes = 0
        self.requests = 0
        self.rejected = 0
        self.link.bad_lines = 0
        self.node.errors = 0
        self.log.dropped_total = 0
        self.link.reply("zero")

    def _cmd_flush(self, args):
        while self.log.flush_one(self.link.write):
            pass
        self.link.reply("flush")

    def _cmd_cs(self, args):
        if args:
            v = int(args[0])
            if v < 0:
                raise ValueError("cs_us must be >= 0")
            self.cs_us = v
        self.link.reply("cs %d" % self.cs_us)

    def _cmd_probe(self, args):
        # Sends a probe frame on the UART; the board it reaches answers "!probed ID".
        pid = int(args[0])
        if not 0 <= pid <= 0xFFFF:
            raise ValueError("probe id must be 0..65535")
        self.uart.write(self.enc.probe(pid))
        self.link.reply("probe %d" % pid)

    def _cmd_stop(self, args):
        self.running = False
