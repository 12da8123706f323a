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
from frame import scan, token as encode_token, message as encode_message, request as encode_request, seal
from frame import _CRC_TABLE  # the reseal of a landing message (_finish_frame_viper)
from hostlink import record_fields, record_token
from protocol import sends
from array import array
from hostlink import EV_REQ, EV_SEND, EV_RECV, EV_ENTER, EV_EXIT, EV_BAD, EV_REJECT, EV_BOOT
from hostlink import EV_REGEN, EV_DISCARD, EV_TIMEOUT, EV_HOSTERR, EV_GAP, EV_RES
from hostlink import RES_READ, RES_WRITE, RES_COUNT, RES_SET

try:
    from micropython import const
    import micropython
except ImportError:  # CPython

    def const(value):
        return value

    class micropython:
        """@micropython.native is the compiler's on MicroPython; a no-op here."""

        @staticmethod
        def native(f):
            return f



FIRMWARE_VERSION = "0.8.2"  # 0.8.2: no idle bytes in front of a message frame (they made a frame look like an idle line while its first bytes landed); 0.8.1: idle bytes in front of a message frame, so that it is whole 4-byte words (docs/frames.md); 0.8.0: message kinds of variable length (BS's token carries only its live served entries); 0.7.0: the token frame in 12 bytes (docs/frames.md); 0.6.0: lost frames counted by the receiver (gap events), hello again at the first host line; 0.5.0: the protocol layer (MSG frames, a module per protocol); 0.4.0: viper codec, 30-bit counters; 0.3.0: token recovery; 0.2.0: !probe

_SEND_TOKEN = const(1)  # protocol.SEND_TOKEN
_SEND_REQUEST = const(2)  # protocol.SEND_REQUEST
_ENTER_CS = const(4)  # protocol.ENTER_CS
_SEND_CLAIM = const(8)  # protocol.SEND_CLAIM
_SEND_AGAIN = const(16)  # protocol.SEND_AGAIN
_REGENERATED = const(32)  # protocol.REGENERATED
_DISCARDED = const(64)  # protocol.DISCARDED
_SEND_MSG = const(128)  # protocol.SEND_MSG
_BROADCAST = const(0xFF)  # protocol.BROADCAST, frame.BROADCAST
_MSG_KINDS = const(16)  # protocol.MSG_KINDS
_TOKEN = const(1)  # frame.TOKEN
_REQUEST = const(2)  # frame.REQUEST
_BAD = const(3)  # frame.BAD
_PROBE = const(4)  # frame.PROBE
_CLAIM = const(5)  # frame.CLAIM
_AGAIN = const(6)  # frame.AGAIN
_MSG = const(7)  # frame.MSG
_MSG_HEAD_CRC = const(7)  # frame.MSG_HEAD + 2 crc bytes: a MSG frame's raw length is its payload's + this
_MSG_WIRE_EXTRA = const(10)  # frame.MSG_WIRE_EXTRA
_MSG_HEAD = const(5)  # frame.MSG_HEAD
_GAP = const(8)  # frame.GAP: or-ed into a frame's kind when frames were lost before it
_LSEQ_AT = const(256)  # frame._LSEQ_AT: the encoder's next link sequence byte
_HOUSEKEEPING_EVERY = const(8)  # passes between two looks at the host link and the timeouts
_STARVED = const(64)  # passes the chores may wait for a frame to end
_SPIN = const(24)  # idle polls of the UART between two passes (about 0.25 ms on a Pico)
_TOKEN_TAKEN = const(16)  # _finish_frame's kind for a token it gave the protocol: its tick and action in _taken
_MSG_TAKEN = const(17)  # _finish_frame's kind for a message it passed on: its tick in _taken
_MSG_DELIVERED = const(18)  # _finish_frame's kind for a message for this node it gave the protocol: its tick, action and send tick in _taken
_STILL_READ_US = const(50_000)  # a virtual board's protocol clock reads its ring's stillness this often
# A frame's first bytes, written alone, then the rest: uart.write on the rp2 port puts all it is given
# into the driver's ring buffer before it starts the UART (about a microsecond a byte on a Pico), so
# those bytes are on the wire at once, and the second write ends while they go out (4 bytes at 1 Mbaud:
# 40 us; at a rate where it would not, the frame has a pause, which no decoder minds). Issue 41: a
# 21-byte message's first byte went out 25 us after the write began, a token's 16.
_HEAD_BYTES = const(4)
_FINISH_MAX = const(300)  # bytes step() reads at most while waiting for a frame's end (> any frame)
_COUNT_MASK = const(0x3FFFFFFF)  # counters wrap at 2**30: a larger int is a heap object on rp2
# The protocol clock's tick (NodeLoop._clk) is kept modulo 2**30 too (_COUNT_MASK), whatever the
# port's ticks period (rp2's is 2**30, the unix port's 2**62): a difference of two ticks masked
# so is theirs as long as it is below 2**29 (about 9 minutes), and one of 2**29 (0x20000000) or
# more is taken as negative (a tick read before the last one counted), as ticks_diff would.
# (No constant of its own: two names more in this module, unused by S's code, made S's chip hop
# 465.5 -> 481.9 us, docs/performance.md.)
# Indices into frame.Decoder.st and hostlink.EventLog.st (imported names are global
# lookups at every use; const() names of this module are inlined).
_F_STATE = const(13)
_F_COUNT = const(14)
_F_SEQ = const(15)
_F_EPOCH = const(16)
_F_ORIGIN = const(17)
_F_JOIN = const(18)
_F_NONCE = const(19)
_F_PROBE = const(20)
_F_SRC = const(23)
_F_DST = const(24)
_F_MLEN = const(25)
_F_LSEQ = const(21)
_S_GAP = const(27)
_S_LOST = const(28)
_S_REF_SEQ = const(29)  # frame.S_REF_SEQ: what a token frame's low bits of seq are read against
_S_REF_EPOCH = const(30)  # frame.S_REF_EPOCH
_S_FRAMES = const(6)
_S_BAD_REASON = const(8)
_S_BAD = const(7)
_S_LAST_BAD = const(12)
_L_PENDING = const(1)
_POS = const(0)
_END = const(1)
_CODE = const(4)  # frame.S_CODE: 0xFF between frames
_S_LEN = const(2)  # frame.S_LEN: decoded bytes of the frame under way

# Event record codes of the hot path (ev | kind << 4, hostlink.EV_* and frame kinds).
_CODE_SEND_TOKEN = const(0x12)
_CODE_RECV_TOKEN = const(0x13)
_CODE_SEND_REQUEST = const(0x22)
_CODE_RECV_REQUEST = const(0x23)
# MSG frames: sent as a new (logical) message here, received, or passed on (a hop
# frame of a message sent elsewhere: kind nibble 8, docs/hostlink.md).
_CODE_SEND_MSG = const(0x72)
_CODE_RECV_MSG = const(0x73)
_CODE_FWD_MSG = const(0x82)

# The copies above are compile-time constants (const() is inlined only for names
# defined in this module); they must not drift from their sources.
if (protocol.SEND_TOKEN, protocol.SEND_REQUEST, protocol.ENTER_CS, protocol.SEND_CLAIM, protocol.SEND_AGAIN,
        protocol.REGENERATED, protocol.DISCARDED, protocol.SEND_MSG, protocol.BROADCAST, protocol.MSG_KINDS) != (
        _SEND_TOKEN, _SEND_REQUEST, _ENTER_CS, _SEND_CLAIM, _SEND_AGAIN, _REGENERATED, _DISCARDED, _SEND_MSG,
        _BROADCAST, _MSG_KINDS) or (
        frame.TOKEN, frame.REQUEST, frame.BAD, frame.PROBE, frame.CLAIM, frame.AGAIN, frame.MSG, frame.BROADCAST,
        frame.MSG_HEAD + 2, frame.MSG_WIRE_EXTRA, frame.MSG_HEAD, frame.GAP, frame.LSEQ_AT, frame.F_LSEQ, frame.S_GAP, frame.S_LOST) != (
        _TOKEN, _REQUEST, _BAD, _PROBE, _CLAIM, _AGAIN, _MSG, _BROADCAST, _MSG_HEAD_CRC, _MSG_WIRE_EXTRA, _MSG_HEAD, _GAP,
        _LSEQ_AT, _F_LSEQ, _S_GAP, _S_LOST) or (
        frame.F_SRC, frame.F_DST, frame.F_MLEN, frame.S_FRAMES, frame.S_BAD_REASON, frame.S_REF_SEQ,
        frame.S_REF_EPOCH) != (_F_SRC, _F_DST, _F_MLEN, _S_FRAMES, _S_BAD_REASON, _S_REF_SEQ, _S_REF_EPOCH) or (
        EV_SEND | (_MSG << 4), EV_RECV | (_MSG << 4), EV_SEND | ((_MSG + 1) << 4)) != (
        _CODE_SEND_MSG, _CODE_RECV_MSG, _CODE_FWD_MSG) or (
        EV_SEND | (_TOKEN << 4), EV_RECV | (_TOKEN << 4), EV_SEND | (_REQUEST << 4), EV_RECV | (_REQUEST << 4)) != (
        _CODE_SEND_TOKEN, _CODE_RECV_TOKEN, _CODE_SEND_REQUEST, _CODE_RECV_REQUEST) or (
        frame.F_STATE, frame.F_COUNT, frame.F_SEQ, frame.F_EPOCH, frame.F_ORIGIN, frame.F_JOIN, frame.F_NONCE,
        frame.F_PROBE, frame.S_BAD, frame.S_LAST_BAD, hostlink.L_PENDING, frame.S_POS, frame.S_END, frame.S_CODE,
        frame.S_LEN) != (
        _F_STATE, _F_COUNT, _F_SEQ, _F_EPOCH, _F_ORIGIN, _F_JOIN, _F_NONCE, _F_PROBE, _S_BAD, _S_LAST_BAD, _L_PENDING,
        _POS, _END, _CODE, _S_LEN):
    raise ImportError("node.py's protocol/frame constants disagree with protocol.py/frame.py")

_CMD_R = const(114)  # "!r": the request command, parsed without allocating

# Why a host line was refused (aux of an EV_HOSTERR event; hostlink.HostLink.last_bad 1, 2).
HOSTERR_NOT_COMMAND = const(1)  # a line not starting with "!"
HOSTERR_TOO_LONG = const(2)
HOSTERR_NOT_TEXT = const(3)
HOSTERR_UNKNOWN = const(4)
HOSTERR_BAD_ARGS = const(5)

# Timeout kinds (aux of an EV_TIMEOUT event).
TIMEOUT_JOIN = const(1)  # a fresh board asked again for the ring's epoch
TIMEOUT_CLAIM = const(2)  # the starter claimed the first token again
TIMEOUT_AGAIN = const(3)  # a waiting request was re-announced and a new token claimed


def _handler(node, name):
    """The protocol's handler `name` as its class's function, called with the node (bind_hot):
    a bound method's call copies its arguments once more (1.5 us on a Pico), and a method looked
    up on the node first misses its instance's map of some thirty attributes (14 us more a call,
    issue 41). None for a node that has its own (a test's stand-in) or whose class has none: the
    caller then calls through the node."""
    if name in getattr(node, "__dict__", ()):
        return None
    return getattr(type(node), name, None)


_taken = [0, 0, 0]  # (tick, action, the send's tick) of the frame _finish_frame took; step reads it at once


def _message_views(mv, sizes, least):
    """views[m]: what a board writes for a MSG frame with m payload bytes (m + MSG_WIRE_EXTRA
    on the wire), encoded at the start of the buffer mv, for every length m a declared kind
    allows (None for the others), as the pair of views written one after the other: its
    first _HEAD_BYTES, then the rest. Nothing in front of the frame's delimiter: idle bytes
    there (0.8.1 made every write whole 4-byte words) are read as an idle line, and the next
    board's loop then ran its chores while the frame landed (docs/frames.md)."""
    top = -1
    for k in range(_MSG_KINDS):
        if sizes[k] != 255 and sizes[k] > top:
            top = sizes[k]
    views = [None] * (top + 1)
    head = mv[:_HEAD_BYTES]
    for k in range(_MSG_KINDS):
        if sizes[k] != 255:
            for m in range(least[k], sizes[k] + 1):
                if views[m] is None:
                    views[m] = (head, mv[_HEAD_BYTES:m + _MSG_WIRE_EXTRA])
    return views


@micropython.native
def _msg_bad(st, n, node):
    """A MSG frame the protocol does not declare (kind, size), or with a source or a
    destination outside the ring of n. (NodeLoop._on_msg has it inline: keep them alike.)"""
    mk = st[_F_STATE]
    src = st[_F_SRC]
    dst = st[_F_DST]
    return (mk >= _MSG_KINDS or (st[_F_MLEN] != node.msg_sizes[mk] and _len_bad(node, mk, st[_F_MLEN]))
            or src >= n or src == dst or (dst >= n and dst != _BROADCAST))


def _len_bad(node, mk, m):
    """A MSG frame's payload of m bytes, not the most that kind mk declares (msg_sizes, a
    fixed kind's only size), is outside its declared least..most: a fixed kind's wrong size,
    an undeclared kind's (NO_SIZE), or a variable kind's out of range. Looked at only after
    that compare, so that a fixed kind's frame costs what it did before variable kinds."""
    return m < node.msg_least[mk] or m > node.msg_sizes[mk]


@micropython.native
def _pass_msg_on(raw, eraw, st, mout, write, views):
    """The same bytes on, with this link's sequence byte (the receiver counts lost frames
    by it: frame.S_GAP) and so a CRC of its own; written through the view of its length."""
    raw[1] = eraw[_LSEQ_AT]
    eraw[_LSEQ_AT] = (raw[1] + 1) & 0xFF
    m = st[_F_MLEN]
    seal(raw, m + _MSG_HEAD, mout)
    head, rest = views[m]
    write(head)
    write(rest)


class NodeLoop:
    """Runs one node. uart/host/led/clock are passed in (hal.Board or stand-ins)."""

    _clocked = False  # a clocked protocol's loop (protocol.py's header: Time) sets its own
    # A virtual board's ring_stood_still(): the microseconds so far in which its ring's processes
    # stood still (the host's scheduler ran others), or None (a Pico: nothing to leave out). Only
    # a board that has one has its other members (the hot path's lookups, as _clocked).
    _ring_stood_still = None

    def __init__(self, node, uart, host, ticks_us, ticks_diff, cs_us=0, led=None, info=None, log_capacity=64, rxbuf=64,
                 regen_us=500_000, retry_us=None, audit=None, nonce=0, rogue=False, ring_stood_still=None):
        self.node = node
        for name in getattr(node, "hot_constants", ()):  # protocol.Node.hot_constants (a stand-in may have none)
            setattr(node, name, getattr(node, name))
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
        # The hot path's objects, looked up once (each attribute or method lookup
        # costs a microsecond or two on a Pico). A uart without any() (test
        # stand-ins) is read by readinto(buf) alone.
        self._any = getattr(uart, "any", None)
        self._write = uart.write
        self._dst = self.dec.st
        self._draw = self.dec.raw
        self._eraw = self.enc._raw
        self._tout = self.enc.token_out
        # The protocol's token handler as a bound method, made once: node.on_token(...)
        # looks on_token up at every hop (a miss in the node's attribute table, then
        # its class's). A protocol without token frames (the toy) has none: a token
        # frame then raises AttributeError, as node.on_token(...) did.
        self._on_token = getattr(node, "on_token", None) or (lambda c, s, q, e: node.on_token(c, s, q, e))
        # MSG frames (new or passed on) go out of one buffer, through a view cut here
        # per payload length a declared kind can have (the wire length is the payload's
        # + 10: docs/frames.md), indexed by that length: a fixed kind's one, a variable
        # kind's least..most. The buffer is the loop's own (on the Encoder, one attribute
        # more cost S's hop 2.5 us on a Pico: measured, cause not found).
        out = bytearray(len(self.enc.msg_out))
        self._mout = memoryview(out)
        self._mfields = self.enc.msg_fields
        self._mviews = _message_views(self._mout, node.msg_sizes, node.msg_least)
        # The hop path's objects in two tuples, unpacked at the start of step() and
        # _finish_frame(): one lookup and an unpacking instead of a lookup per name (each
        # attribute lookup costs about 2 us on a Pico, its hash a software division; a
        # frame's first bytes waited behind 23 of them, issue 41).
        # and _on_msg and _on_request, bound once: looked up through the loop each is a miss in its
        # nearly full map (25 and 33 of 47 slots probed, about 13 and 16 us on a Pico:
        # tests/map_model.py) on every message delivered here, every request frame; a new
        # attribute would fill the map.
        self._rd = (self._any, uart.readinto, self.rx, rxbuf, scan, self._dst, self._draw, self._finish_frame,
                    self._on_msg, self._on_request)
        self._lbuf = self.log.buf
        self._lst = self.log.st
        self.bind_hot()
        self._countdown = 0
        self._no_fields = array("i", bytes(16))  # aux, count, seq, epoch of an event that has none
        self._cs_start = 0
        self._led_on = -1
        self.running = False
        self.tx_frames = 0
        self.rx_bytes = 0
        self.requests = 0
        self.rejected = 0
        # Recovery timing (docs/recovery.md). regen_us is the base regeneration
        # timeout (Delta_max of the wandering token); gen_us is this board's
        # current one: x1.5 on each token it regenerates, back 5% of the way to
        # the base on each token it receives. retry_us paces join rounds and the
        # starter's first claim (cheap, nothing to regenerate yet). 0: off.
        self.regen_us = regen_us
        self.gen_us = regen_us
        self.retry_us = retry_us if retry_us is not None else min(regen_us, 50_000 + 4_000 * node.n)
        # The wait before the next join round or first claim: x1.5 after each (capped). A claim
        # round that takes longer than the wait never completes: each retry makes a newer epoch,
        # and the older claim comes back stale (a busy machine freezing a virtual ring's ptys for
        # seconds kept position 0 from making the first token for minutes).
        self.retry_wait = self.retry_us
        self._watch = False  # node.waiting(), cached after every event
        self._wait_since = 0
        self.timeouts = 0
        # audit: optional object whose enter() and leave() run at the edges of every critical
        # section: a shared counter, read at entry and written at exit (main.SharedCounterFile
        # on virtual boards, fram.FramCounter on an I2C FRAM). What they return, a counter
        # value or -errno, is logged as a res event (None: nothing to log). One with read()
        # and write(v) also answers the host's !res command.
        self.audit = audit
        # rogue: the deliberately unsafe mode (fault rogue=B, docs/faults.md): a request is
        # served at once, without the token. Bound here, so the loop pays nothing for it.
        if rogue:
            self.request = lambda: _request_rogue(self)  # (a function of the module: no name more in the class)
        self.nonce = nonce  # this boot's incarnation number (protocol.Node.boot)
        # A clocked protocol (the wandering token, protocol.py's header) reads the time from
        # node.now, in milliseconds since the loop started (30 bits), set before each of its
        # handlers, and gets on_wake() once node.wake_at has come (looked at with the timeouts).
        # Only a clocked loop has its clock's members (the class's _clocked is False): each
        # member of the instance is in the way of the hot path's lookups (bench: 7 us a hop).
        if ring_stood_still is not None:
            self._ring_stood_still = ring_stood_still
            self._still_seen = ring_stood_still()  # what stood still before this boot is not this wait's
            self._still_wait = 0      # the _wait_since the credit below belongs to
            self._still_credit = 0    # us of this wait in which the ring stood still
            # whether the count last read is the relay's look at or after a tick (hal_unix's
            # RingStoodStill.current_since; a stand-in may have none: every read is current)
            self._still_current = getattr(ring_stood_still, "current_since", None)
        if getattr(node, "clocked", False):
            self._clocked = True
            self._housekeeping = self._housekeeping_clocked
            # the tick at which node.now's millisecond began, modulo 2**30 (_tick): an int array,
            # which the hop reads and writes through a pointer (an attribute, a ticks_diff call and
            # a store cost a walk's hop about 7 us on a Pico; issue 41)
            self._clk = array("i", [0])
            if ring_stood_still is not None:
                self._clk_still_seen = self._still_seen  # the stillness node.now has left out so far
                self._clk_still_at = 0  # the tick it was last read at
                self._due_for = -1  # the wake_at found due without the token (_generation_due)
                self._due_at = 0  # and the tick it was found due at
                self._clk_owed = 0  # us node.now is to stand still for once the token has gone (_hold_on_wall_time)
                self._housekeeping = self._housekeeping_ring_clocked
                # a virtual board's count also sees its own process's gaps, at the first read of
                # its clock after one, before a tick counts it (firmware/hal_unix.py, RingStoodStill)
                bind = getattr(ring_stood_still, "bind", None)
                if bind is not None:
                    bind(self.leave_out_stillness)
            self.bind_hot()  # again: the clock goes into _mhot (its place in the map kept: bound above)
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
            "res": lambda args: _cmd_res(self, args),
        }

    # -- the loop --------------------------------------------------------

    def start(self, give_token=False, boot=False):
        """Announce the board. give_token: the token starts here (a fault-free
        ring of stand-ins, set up all at once). boot: a real start; the board
        joins the ring (learns its epoch) and position 0 makes the first token
        by a claim, so a board that restarts never makes a second one."""
        self.running = True
        n = self.node
        self.link.reply("hello " + self._version_text())
        # A Pico's USB serial drops what it says while no host has the port open, as after a
        # power cycle: the first host line gets the hello again (inc tells it from a restart).
        self.link.greet = True
        self.log.record(EV_BOOT, 0, n.index, n.n, 0, 0)
        t = self.ticks_us()
        if self._clocked:
            self._clk[0] = t & _COUNT_MASK
            n.now = 0
        if give_token:
            self._act(n.give_token(), t)
        elif boot:
            self._act(n.boot(starter=n.index == n.first, nonce=self.nonce), t)  # first: the holder option, 0 by default
            self._wait_since = t
        self._show()

    def run(self, give_token=False, idle=None, boot=False):
        """Loop until "!stop", the host going away, or KeyboardInterrupt (raised).

        idle: optional callable, called after a pass that did nothing with no
        event left to send; it may wait briefly for input (a virtual board
        sleeps in poll() there instead of spinning a host core)."""
        self.start(give_token, boot)
        lst = self._lst
        dst = self._dst
        node = self.node
        ready = self._any
        # A method looked up through the loop is a miss in its attribute map before the class:
        # the map is nearly full and 'step' probes 46 of its 47 slots, about 21 us on a Pico,
        # every pass (tests/map_model.py). Looked up once.
        step = self.step
        try:
            while self.running:
                if step():
                    if ready is not None and dst[_CODE] != 0xFF:
                        # A frame is half read: its next bytes are on the wire (at
                        # 115200 baud a byte takes 87 us). Wait for them here rather
                        # than in a full pass that may still be running when they land.
                        k = _SPIN
                        while k and not ready():
                            k -= 1
                    continue
                if lst[_L_PENDING]:
                    continue
                if idle is not None:
                    idle()
                elif ready is not None and not node.in_cs:
                    # Nothing to do but wait for a frame: ask the UART in a tight
                    # loop (a full pass costs tens of microseconds on a Pico, and a
                    # frame that lands during one waits for it to end). Bytecode:
                    # Ctrl-C and the USB stack still get their turn.
                    k = _SPIN
                    while k and not ready():
                        k -= 1
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

    def bind_hot(self):
        """What a token hop needs once its frame has landed, in one tuple (self._rd, set in
        __init__, has the reading side). Call it again after replacing one of them (a
        test's stand-in)."""
        node = self.node
        on_token = _handler(node, "on_token") or (lambda n, c, s, q, e: n.on_token(c, s, q, e))
        on_message = _handler(node, "on_message") or (lambda n, k, s, b: n.on_message(k, s, b))
        # (the token frame's buffer, and its views written one after the other: _HEAD_BYTES)
        tv = memoryview(self._tout)
        self._fwd = (self.ticks_us, on_token, encode_token, self._eraw, self._tout, self._write, node, on_message,
                     tv[:_HEAD_BYTES], tv[_HEAD_BYTES:])
        # A message's (_on_msg, and _finish_frame once one is landing): one lookup for fourteen
        # names and attributes (about 2 us each on a Pico, more in the loop's nearly full map;
        # issue 41). The node's n, index and sizes never change.
        self._mhot = (self._dst, self._draw, self._lbuf, self._lst, self._mfields, self._mout, self._mviews,
                      encode_message, record_fields, node.n, node.index, node.msg_sizes, node.msg_least, _CRC_TABLE,
                      self._clk if self._clocked else None)

    @micropython.native
    def step(self):
        """One pass of the loop; returns True when it did any work.

        The hot path, written out in one native function (a Python call costs
        about 10 us on a Pico; native code keeps its state on the C stack, never
        the heap): read what the UART has, decode it, and pass a token that only
        goes through straight on, then log it. Everything rarer is a method call.
        A pass that finds nothing costs a few microseconds; the host link and the
        timeouts are looked at every _HOUSEKEEPING_EVERY passes."""
        busy = False
        sent = False  # a token went straight on in this pass: the chores' moment (below)
        ready, readinto, rx, rxlen, sc, st, draw, finish, on_msg, on_request = self._rd
        if ready is None:
            n = readinto(rx)
        else:
            n = ready()
            if n:
                n = readinto(rx, n if n < rxlen else rxlen)
        if n:
            busy = True
            st[_POS] = 0  # the bytes to scan
            st[_END] = n
            k = sc(rx, draw, st)
            if not k and ready is not None and (st[_CODE] != 0xFF or not rx[n - 1]):
                # A frame is half read: its next bytes are on the wire. Wait for them
                # here, in native code, and scan each as it lands: the frame's last
                # byte is then seen within a poll or two, where a bytecode pass of the
                # loop (tens of microseconds on a Pico) could have just begun when it
                # landed and delayed the hop by its whole length. Bounded (_SPIN polls
                # without a byte: about 0.1 ms on a Pico) for a line that goes quiet.
                # A read that ends on a delimiter that ended no frame has read the
                # first byte of one (the ring's line is silent between frames): the
                # decoder is between frames, but the chores must not start (a trace:
                # a read of the lone 00, then the chores, and the frame read after its
                # end; issue 41).
                k = finish(st)
                n += k >> 5  # the bytes it read
                k &= 31
            t = self.ticks_us() if k else 0  # (at a slow baud most reads end no frame)
            while k:
                if k == _TOKEN or k == _TOKEN_TAKEN:
                    if k == _TOKEN:
                        a = self._on_token(st[_F_COUNT], st[_F_STATE], st[_F_SEQ], st[_F_EPOCH])
                        if a == _SEND_TOKEN:
                            # Passed straight on: forward first (its first bytes alone: _HEAD_BYTES),
                            # then log.
                            _, _, encode, eraw, tout, write, node, _, thead, ttail = self._fwd
                            encode(eraw, tout, node)
                            write(thead)
                            write(ttail)
                    else:  # _finish_frame gave it to the protocol (and passed it on)
                        t = _taken[0]
                        a = _taken[1]
                    if a == _SEND_TOKEN:
                        sent = True
                        self.tx_frames = (self.tx_frames + 1) & _COUNT_MASK
                        record_fields(self._lbuf, self._lst, _CODE_RECV_TOKEN, st, _F_STATE, t)
                        self._token_seen(t)
                        record_token(self._lbuf, self._lst, _CODE_SEND_TOKEN, self.node, self.ticks_us())
                    else:
                        self._act(a, t, EV_RECV, _TOKEN)
                elif k == _REQUEST:
                    on_request(t)
                elif k == _MSG:
                    on_msg(t)
                elif k == _MSG_TAKEN:  # _finish_frame passed it on: for another node, or to all
                    self._msg_passed(_taken[0])
                elif k == _MSG_DELIVERED:  # _finish_frame gave it to the protocol (and wrote what it sent)
                    self._delivered(_taken[0], _taken[1], _taken[2])
                else:
                    self._on_frame(k, t)
                k = sc(rx, draw, st)
            self.rx_bytes = (self.rx_bytes + n) & _COUNT_MASK  # after: the frames went first
        if self.node.in_cs and self._cs_due():
            busy = True
        # The slow chores (host link and timeouts; a batch line to the host) wait while
        # a frame is half read: a chore running when its last byte lands delays the hop
        # by its whole length (measured: +100 us a hop at 115200 baud on the boards
        # whose chores fell in step with the frames). Between frames, or every
        # _HOUSEKEEPING_EVERY passes however busy (a garbled line never idles). And right
        # after a token went straight on: its next visit is a round of the ring away, where a
        # chore begun a few passes later, at any phase, may still run when the next frame
        # begins to land; that frame's bytes are then read and scanned after its end (the p99
        # of S's hop at 1 Mbaud, 145-163 us; with the chores here 125-134: docs/performance.md,
        # "The p99 of S's hop").
        between = st[_CODE] == 0xFF
        self._countdown -= 1
        if (sent or self._countdown <= 0) and (between or self._countdown < -_STARVED):
            self._countdown = _HOUSEKEEPING_EVERY
            if self._housekeeping():
                busy = True
        if self._lst[_L_PENDING] and (((sent or not busy) and between) or self._lst[_L_PENDING] >= self.log.half):
            self.log.flush_one(self.link.write)  # an attribute: self._method would allocate a bound method
            if sent and between and self._lst[_L_PENDING]:
                # The batch stopped at the log ring's end (the hop's records straddle it once
                # every capacity / 2 hops when an odd number of records came before, e.g. a
                # start-up timeout's): the rest now, at the chores' moment, not in an idle pass
                # at any phase, where it ran into the next frame landing (S's p99 at 1 Mbaud on
                # the one board whose count was odd: 225-246 us against 114-151 on the others).
                self.log.flush_one(self.link.write)
        return busy

    @micropython.native
    def _finish_frame(self, st):
        """Poll the UART while a frame is half read (step); scan what lands into
        self.rx. A token frame that ends here is given to the protocol at once and,
        when it only goes through, passed on (step logs it: kind _TOKEN_TAKEN, its
        tick and the protocol's action in _taken); so is a message for another node
        (_MSG_TAKEN); a message for this node is given to the protocol, and what it
        sends at once written (_MSG_DELIVERED: step logs both, _delivered). Returns the
        kind of the frame that ended (0: none within _SPIN empty polls, or _FINISH_MAX
        bytes of a frame that does not end: line garbage) plus 32 x the bytes it read.
        On the chip: _finish_frame_viper, below."""
        ready, readinto, rx, rxlen, sc, st, draw, _, _, _ = self._rd
        # What a token hop needs, at hand before the frame's last byte (a lookup after
        # it delays the hop by a microsecond or more each).
        ticks_us, on_token, encode, eraw, tout, write, node, on_message, thead, ttail = self._fwd
        taken = _taken
        views = None  # what passing a message on needs, looked up once one is landing
        total = 0
        k = 0
        idle = _SPIN
        while idle and total < _FINISH_MAX:
            m = ready()
            if not m:
                idle -= 1
                continue
            m = readinto(rx, m if m < rxlen else rxlen)
            if not m:
                break
            total += m
            st[_POS] = 0
            st[_END] = m
            k = sc(rx, draw, st)
            if k == _TOKEN:
                t = ticks_us()
                a = on_token(node, st[_F_COUNT], st[_F_STATE], st[_F_SEQ], st[_F_EPOCH])
                if a == _SEND_TOKEN:
                    encode(eraw, tout, node)
                    write(thead)
                    write(ttail)
                taken[0] = t
                taken[1] = a
                k = _TOKEN_TAKEN
                break
            if views is None and (k == _MSG or draw[0] == _MSG):
                # A message is landing (draw[0], the kind, is this frame's once its first
                # byte is decoded, until then the last frame's: looked up for nothing at
                # worst). Unpacked from _on_msg's tuple: one lookup.
                _, _, _, _, fields, mout, views, menc, _, n, index, _, _, _, clk = self._mhot
            if k == _MSG:
                # A message for another node, or another node's broadcast: passed on at once
                # without waking the protocol, as _on_msg does (which takes any other message
                # up); _msg_passed then delivers a broadcast here too.
                d = st[_F_DST]
                if st[_F_SRC] == index or _msg_bad(st, n, node):
                    pass  # _on_msg takes it up (kind _MSG)
                elif (d != index and d < n) or d == _BROADCAST:
                    t = ticks_us()
                    _pass_msg_on(draw, eraw, st, mout, write, views)
                    taken[0] = t
                    k = _MSG_TAKEN
                elif d == index:
                    # For this node (a relay: the wandering token's visit, BS's rotation): given
                    # to the protocol here, as a token is, and what it sends at once written
                    # before anything is logged (step: _delivered), not after a return to step(),
                    # its dispatch and _on_msg's lookups (issue 41).
                    t = ticks_us()
                    if clk is not None:
                        self._tick(t)
                    a = on_message(node, st[_F_STATE], st[_F_SRC], draw)
                    if a == _SEND_MSG:
                        menc(eraw, mout, node, fields)
                        head, rest = views[node.out_len]
                        write(head)
                        write(rest)
                        taken[2] = ticks_us()
                    taken[0] = t
                    taken[1] = a
                    k = _MSG_DELIVERED
                break
            if k or st[_CODE] == 0xFF:
                break
            idle = _SPIN
        return k | (total << 5)

    @micropython.native
    def _token_seen(self, t):
        # A token seen: the wait starts again, the timeout decays towards its
        # base (wandering token, section 4.1).
        self._wait_since = t
        if self.gen_us != self.regen_us:
            # 5% of the excess; under 20 us it would never reach the base (and every
            # token would pay a division, a software routine on a Cortex-M0+): snap.
            d = self.gen_us - self.regen_us
            self.gen_us = self.regen_us if d < 20 else self.gen_us - d // 20
        self._watch = False

    @micropython.native
    def _on_request(self, t):
        node = self.node
        a = node.on_request()
        if a == _SEND_TOKEN:
            # The resting token woken by a request message (Q's and D's rule 2) and sent on at
            # once: what _act does for it, without its generic loops and log cases (a bytecode
            # call of tens of microseconds on a Pico, on the hop that starts each service).
            _, _, encode, eraw, tout, write, _, _, thead, ttail = self._fwd
            encode(eraw, tout, node)
            write(thead)
            write(ttail)
            self.tx_frames = (self.tx_frames + 1) & _COUNT_MASK
            lbuf = self._lbuf
            lst = self._lst
            record_fields(lbuf, lst, _CODE_RECV_REQUEST, self._no_fields, 0, t)
            record_token(lbuf, lst, _CODE_SEND_TOKEN, node, self.ticks_us())
            self._watch = node.fresh or node.starting or (node.pending and not node.has_token)  # (as _act)
            if self.led is not None:
                self._show()
            return
        if a != _SEND_REQUEST:
            self._act(a, t, EV_RECV, _REQUEST)
            return
        # The other hot path: a request message passed on (Q, D), its frame built by one viper
        # call on the encoder's buffers (Encoder.request and its _head in bytecode cost Q's
        # request hop 150 us of chip time more than S's token hop, issue 41); each name
        # looked up once.
        out = self.enc.request_out
        encode_request(self._eraw, out)
        self._write(out)
        self.tx_frames = (self.tx_frames + 1) & _COUNT_MASK
        lbuf = self._lbuf
        lst = self._lst
        none = self._no_fields
        record_fields(lbuf, lst, _CODE_RECV_REQUEST, none, 0, t)
        record_fields(lbuf, lst, _CODE_SEND_REQUEST, none, 0, self.ticks_us())

    @micropython.native
    def _on_msg(self, t):
        """A MSG frame (docs/frames.md): for this node, delivered to the protocol; for
        another, passed straight on without waking it (forward first, then log); a
        broadcast, both; a broadcast back at its sender, taken off the ring."""
        # The hop's objects from bind_hot's tuple and _mhot: two lookups for sixteen (about 2 us each;
        # encode: the token's, then the message's).
        ticks_us, on_token, encode, eraw, tout, write, node, on_message, thead, ttail = self._fwd
        st, draw, lbuf, lst, fields, mout, views, encode, record, n, index, sizes, least, _, _ = self._mhot
        mk = st[_F_STATE]
        src = st[_F_SRC]
        dst = st[_F_DST]
        # _msg_bad, inline: a call on every message delivered (11 us on a Pico, and its
        # subscripts again; issue 41). _finish_frame's messages passed on still call it.
        if (mk >= _MSG_KINDS or (st[_F_MLEN] != sizes[mk] and _len_bad(node, mk, st[_F_MLEN]))
                or src >= n or src == dst or (dst >= n and dst != _BROADCAST)):
            self._bad_msg(t)
            return
        if dst == index:
            # (_finish_frame delivers most: this is a message read whole by step())
            if self._clocked:
                self._tick(t)
            a = on_message(node, mk, src, draw)
            sent = 0
            if a == _SEND_MSG:  # forwarded first, then logged
                encode(eraw, mout, node, fields)
                head, rest = views[node.out_len]
                write(head)
                write(rest)
                sent = ticks_us()
            self._delivered(t, a, sent)
            return
        if src == index:
            record(lbuf, lst, _CODE_RECV_MSG, st, _F_STATE, t)
            return  # a broadcast back at its sender: taken off
        _pass_msg_on(draw, eraw, st, mout, write, views)
        self._msg_passed(t)  # logged, and a broadcast delivered, as one that _finish_frame passed on

    @micropython.native
    def _delivered(self, t, a, sent):
        """Log a message for this node that the protocol took (received at t; a: its action)
        and act on the rest: a message it sent at once (BS's rotation, the wandering token's
        walk: every hop of theirs) is written already, at tick sent. What _act does for the two
        actions a delivered token most often has, sending on or nothing (taken in, at rest or in
        the critical section), without its generic loops and log cases (a bytecode call of tens
        of microseconds on a Pico)."""
        st, draw, lbuf, lst, fields, mout, views, encode, record, n, index, sizes, least, _, _ = self._mhot
        if a == _SEND_MSG:
            self.tx_frames = (self.tx_frames + 1) & _COUNT_MASK
            record(lbuf, lst, _CODE_RECV_MSG, st, _F_STATE, t)
            record(lbuf, lst, _CODE_SEND_MSG, fields, 0, sent)
            if self.led is not None:
                self._show()
        else:
            record(lbuf, lst, _CODE_RECV_MSG, st, _F_STATE, t)
            if a:
                self._act(a, t)
                return
        node = self.node
        self._watch = node.fresh or node.starting or (node.pending and not node.has_token)  # (as _act)

    @micropython.native
    def _msg_passed(self, t):
        """Log a MSG frame that _finish_frame passed on (received at t); a broadcast, then
        delivered to the protocol as _on_msg delivers one (the same steps, in its order)."""
        self.tx_frames = (self.tx_frames + 1) & _COUNT_MASK
        st = self._dst
        record_fields(self._lbuf, self._lst, _CODE_RECV_MSG, st, _F_STATE, t)
        record_fields(self._lbuf, self._lst, _CODE_FWD_MSG, st, _F_STATE, self.ticks_us())
        if st[_F_DST] == _BROADCAST:
            _, _, _, _, _, _, node, on_message, _, _ = self._fwd
            if self._clocked:
                self._tick(t)
            a = on_message(node, st[_F_STATE], st[_F_SRC], self._draw)
            if a:
                self._act(a, t)
            else:
                # A broadcast taken in with nothing to do (sk's and ra's requests at every board
                # but the token's): all _act would do is this, after a bytecode call of tens of
                # microseconds on a Pico, which a token landing behind the request waits for.
                self._watch = node.fresh or node.starting or (node.pending and not node.has_token)

    def _bad_msg(self, t):
        """A MSG frame the protocol does not declare (kind, size) or with a source or
        destination outside the ring: dropped and counted as a bad frame (len or kind)."""
        st = self._dst
        mk = st[_F_STATE]
        why = frame.BAD_LEN if mk < _MSG_KINDS and self.node.msg_sizes[mk] != 255 and _len_bad(
            self.node, mk, st[_F_MLEN]) else frame.BAD_KIND
        st[_S_FRAMES] = (st[_S_FRAMES] - 1) & _COUNT_MASK  # the decoder counted it as valid
        st[_S_BAD] = (st[_S_BAD] + 1) & _COUNT_MASK
        st[_S_BAD_REASON + why] = (st[_S_BAD_REASON + why] + 1) & _COUNT_MASK
        st[_S_LAST_BAD] = why
        self.log.record(EV_BAD, 0, why, st[_S_BAD], 0, 0, t)
        st[_S_LOST] = (st[_S_LOST] + 1) & _COUNT_MASK  # its send is logged: a lost frame
        self.log.record(EV_GAP, 0, st[_F_LSEQ], 1, 0, 0, t)

    def _cs_due(self):
        """End the critical section when its time is up; True when it did."""
        t = self.ticks_us()
        if self.ticks_diff(t, self._cs_start) < self.cs_us:
            return False
        if self.audit is not None:
            _log_res(self.log, RES_WRITE, self.audit.leave())
        if self._clocked:
            self._tick(t)
        self._act(self.node.exit_cs(), t, EV_EXIT)
        return True

    @micropython.native
    def _tick(self, t):
        """node.now: the milliseconds since start, from the microsecond ticks (which wrap:
        only differences are taken). _clk[0] is the tick at which node.now's millisecond
        began, modulo 2**30 (_COUNT_MASK), so a tick within it changes nothing (issue 41: every
        message of the wandering token's walk comes here, and its attributes cost microseconds
        on a Pico). The node loop is the only writer of node.now."""
        clk = self._clk
        d = (t - clk[0]) & _COUNT_MASK
        if 1000 <= d < 0x20000000:
            k = d // 1000
            clk[0] = (t - (d - k * 1000)) & _COUNT_MASK
            node = self.node
            node.now = (node.now + k) & _COUNT_MASK

    @micropython.native
    def _housekeeping_clocked(self):
        """_housekeeping for a clocked protocol: its wake-up time first (set as the instance's
        _housekeeping at start, so that the others' loop pays nothing for it). Native, as _tick:
        in bytecode the two cost the loop's chores 47 us more than S's on a Pico, every
        _HOUSEKEEPING_EVERY passes (issue 41)."""
        node = self.node
        t = self.ticks_us()
        self._tick(t)
        w = node.wake_at
        if w >= 0 and ((node.now - w) & _COUNT_MASK) < 0x20000000:
            self._act(node.on_wake(), t)
            NodeLoop._housekeeping(self)
            return True
        return NodeLoop._housekeeping(self)

    def _housekeeping_ring_clocked(self):
        """_housekeeping_clocked on a virtual board: node.now leaves out the time its ring stood
        still (the loaded host ran other processes), as the layer's timeouts do
        (_stood_still_meanwhile). On wall time, a ring held up for longer than Delta_gen had every
        wandering-token component that saw no token make one of its own (a loaded run: two or
        more tokens 41% of the time, tests/test_wt.py). The stillness moves the tick node.now
        counts from, before it is counted (node.now never goes back). Read at most every
        _STILL_READ_US: the relay writes its clock every 100 ms, and a stall longer than that is
        read at the first look after it."""
        t = self.ticks_us()
        if self.ticks_diff(t, self._clk_still_at) >= _STILL_READ_US:
            self.leave_out_stillness(self._ring_stood_still(), t)
        node = self.node
        self._hold_on_wall_time(t, node.has_token)
        w = node.wake_at
        if w >= 0 and not node.has_token:
            self._tick(t)
            if ((node.now - w) & _COUNT_MASK) < 0x20000000 and not self._generation_due(t, w):
                return NodeLoop._housekeeping(self)
        return self._housekeeping_clocked()

    def _hold_on_wall_time(self, t, holding):
        """A stall counted on node.now before the count that holds it was read leaves node.now
        ahead of the ring's clock, and node.now stands still until the ring's clock catches up
        (leave_out_stillness: the tick it counts from is past t). Not while the token is here:
        its hold (Delta_skip) is timed on node.now and lasted as long, while the other boards'
        clocks ran and counted it (a loaded suite run: holds of 164 and 183 ms where Delta_skip
        is 2 ms, after the relay stood still; a component that had counted that stall as its own
        gap made a token). So while the token is here node.now runs, and what it stands still
        for waits (_clk_owed) until the token has gone."""
        clk = self._clk
        if holding:
            ahead = (clk[0] - t) & _COUNT_MASK
            if 0 < ahead < 0x20000000:
                clk[0] = t
                self._clk_owed += ahead
        elif self._clk_owed:
            clk[0] = (clk[0] + self._clk_owed) & _COUNT_MASK
            self._clk_owed = 0

    def _generation_due(self, t, w):
        """node.now has reached wake_at w with no token here (the wandering token's Delta_gen: a
        token is made): True once it has by the ring's clock as the relay counted it at or after
        the tick the wake was found due at. Before that, a stall that held the token up elsewhere
        may be missing from the count (the relay sees a board's run-queue wait once it is over, at
        its next look: up to 100 ms later), and node.now may have counted a stall that it now
        stands still for (a count read after the ticks that took it in): both made a component
        make a token while the ring's own was only late (a loaded suite run, issue 36: 62 ms
        after the board that held the token 227 ms ran again). A Pico has neither."""
        if self._due_for != w:
            self._due_for = w
            self._due_at = t
        self.leave_out_stillness(self._ring_stood_still(), t)
        current = self._still_current
        if current is not None and not current(self._due_at):
            return False
        # node.now less what it counted ahead of the ring's clock: while the tick it counts from
        # is past t, node.now stands still that long (_tick)
        ahead = (self._clk[0] - t) & _COUNT_MASK
        return ahead >= 0x20000000 or ((self.node.now - w) & _COUNT_MASK) * 1000 >= ahead

    def leave_out_stillness(self, still, t):
        """still: the ring's stood-still count read at tick t; what it grew by since the last
        read moves the tick node.now counts from, so node.now does not count it."""
        self._clk_still_at = t
        if still > self._clk_still_seen:
            clk = self._clk
            clk[0] = (clk[0] + still - self._clk_still_seen) & _COUNT_MASK
            self._clk_still_seen = still

    @micropython.native
    def _housekeeping(self):
        """The timeouts and the host link; True when it did any work."""
        busy = False
        if self._watch and self.regen_us:
            t = self.ticks_us()
            node = self.node
            if self.ticks_diff(t, self._wait_since) >= (self.retry_wait if node.fresh or node.starting else self.gen_us):
                # _watch is the layer's waiting() written out (the hop's events keep it cheaply);
                # a protocol that overrides waiting() has the last word here, where it is rare: the
                # wandering token's is False (its generation rule is its own), and without this a
                # component that waited Delta_min made the layer claim a second token
                if node.waiting():
                    self._timeout(t)
                    busy = True
                else:
                    self._watch = False
        ln = self.link.poll()
        if ln > 0:
            self._command(ln)
            busy = True
        elif ln < 0:
            self._host_error(HOSTERR_NOT_COMMAND if ln == -1 else HOSTERR_TOO_LONG)
        elif self.link.closed:
            self.running = False
        return busy

    def _on_frame(self, k, t):
        """The rare frames: claims, re-announced requests, probes, bad frames, and any
        frame after frames lost on the link (its link sequence byte skipped some)."""
        node = self.node
        st = self._dst
        if k & _GAP:
            # Before the frame's own events: the host pairs each link's receives with its
            # sends by count, and the lost ones are counted here (aux: this frame's lseq).
            self.log.record(EV_GAP, 0, st[_F_LSEQ], st[_S_GAP], 0, 0, t)
            k &= ~_GAP
            if k == _TOKEN:
                self._act(self._on_token(st[_F_COUNT], st[_F_STATE], st[_F_SEQ], st[_F_EPOCH]), t, EV_RECV, _TOKEN)
                return
            if k == _REQUEST:
                self._on_request(t)
                return
            if k == _MSG:
                self._on_msg(t)
                return
        if self._clocked:
            self._tick(t)
        if k == _CLAIM:
            a = node.on_claim(st[_F_EPOCH], st[_F_ORIGIN], st[_F_JOIN], st[_F_SEQ], st[_F_NONCE])
            if not node.fresh:
                # A token frame carries the low bits of seq and epoch, read against the last
                # token decoded (frame.py): after a claim, a join's answer above all (a board
                # that has just started has decoded no token of this ring), against what the
                # node now knows.
                st[_S_REF_SEQ] = node.seq
                st[_S_REF_EPOCH] = node.known_epoch
            self._act(a, t, EV_RECV, _CLAIM)
        elif k == _AGAIN:
            a = node.on_request_again(st[_F_ORIGIN])
            self._act(a, t, EV_RECV, _AGAIN)
        elif k == _PROBE:
            # Discovery only: reported to the host, not forwarded, not an event.
            self.link.reply("probed %d" % st[_F_PROBE])
        else:
            self.log.record(EV_BAD, 0, st[_S_LAST_BAD], st[_S_BAD], 0, 0, t)

    @micropython.native
    def _act(self, a, t, ev=0, kind=0):
        """Carry out the actions of a protocol handler, then log the event that
        caused them (ev at tick t) and the frames sent. Every action but a frame
        passed straight on comes here (the hot paths: step, _on_request)."""
        node = self.node
        st = self._dst
        uart = self.uart
        sent = sends(a)  # the frames, in wire order (protocol.ACTIONS)
        for b in sent:
            if b == _SEND_MSG:
                encode_message(self._eraw, self._mout, node, self._mfields)
                head, rest = self._mviews[node.out_len]
                uart.write(head)
                uart.write(rest)
            elif b == _SEND_TOKEN:
                _, _, encode, eraw, tout, _, _, _, thead, ttail = self._fwd
                encode(eraw, tout, node)
                uart.write(thead)
                uart.write(ttail)
            elif b == _SEND_REQUEST:
                uart.write(self.enc.request())
            elif b == _SEND_AGAIN:
                uart.write(self.enc.again(node.again_origin))
            else:
                uart.write(self.enc.claim(node.claim_epoch, node.claim_origin, node.claim_join, node.claim_seq,
                                          node.claim_nonce))
        if a & _ENTER_CS:
            self._cs_start = t
        log = self.log
        if ev == EV_RECV and kind == _TOKEN:  # (the hop: first, and tested once)
            log.record(EV_RECV, _TOKEN, st[_F_STATE], st[_F_COUNT], st[_F_SEQ], st[_F_EPOCH], t)
            if a & _DISCARDED:
                log.record(EV_DISCARD, _TOKEN, 1 if node.fresh else 0, st[_F_COUNT], st[_F_SEQ], st[_F_EPOCH], t)
            else:
                self._token_seen(t)
        else:
            if kind == _CLAIM:
                log.record(EV_RECV, _CLAIM, st[_F_JOIN], st[_F_ORIGIN], st[_F_SEQ], st[_F_EPOCH], t)
            elif kind == _AGAIN:
                log.record(EV_RECV, _AGAIN, 0, st[_F_ORIGIN], 0, 0, t)
            elif ev:
                log.record(ev, kind, 0, 0, 0, 0, t)
            if a & _DISCARDED:
                log.record(EV_DISCARD, _TOKEN, 0, 0, node.seq, node.epoch, t)  # a token message removed
        if a & _REGENERATED:
            self._wait_since = t
            # Each token this board makes makes it slower to make another (x1.5,
            # capped): the wandering token's rule against regeneration storms.
            self.gen_us = min(self.gen_us * 3 // 2, self.regen_us * 64)
            log.record(EV_REGEN, _TOKEN, node.state, node.count, node.seq, node.epoch, t)
        for b in sent:
            self.tx_frames = (self.tx_frames + 1) & _COUNT_MASK
            if b == _SEND_MSG:
                record_fields(self._lbuf, self._lst, _CODE_SEND_MSG, self._mfields, 0, self.ticks_us())
            elif b == _SEND_TOKEN:
                log.record(EV_SEND, _TOKEN, node.state, node.count, node.seq, node.epoch)
            elif b == _SEND_REQUEST:
                log.record(EV_SEND, _REQUEST, 0, 0, 0, 0)
            elif b == _SEND_AGAIN:
                log.record(EV_SEND, _AGAIN, 0, node.again_origin, 0, 0)
            else:
                log.record(EV_SEND, _CLAIM, node.claim_join, node.claim_origin, node.claim_seq, node.claim_epoch)
        if a & _ENTER_CS:
            log.record(EV_ENTER, 0, 0, 0, node.seq, node.epoch, t)
            if self.audit is not None:
                # the shared counter, read once the frames this entry sent are on their way
                # (no new local here: this method's frame stays as small as it was)
                _log_res(self.log, RES_READ, self.audit.enter())
        # node.waiting(), inline
        self._watch = node.fresh or node.starting or (node.pending and not node.has_token)
        if a or ev == EV_EXIT:
            self._show()

    def _timeout(self, t):
        """No token for the timeout while waiting (docs/recovery.md)."""
        if self._ring_stood_still is not None and self._stood_still_meanwhile(t):
            return
        node = self.node
        fired = self.retry_wait
        if node.fresh:
            why = TIMEOUT_JOIN
        elif node.pending:
            why = TIMEOUT_AGAIN
            fired = self.gen_us
        else:
            why = TIMEOUT_CLAIM
        if fired == self.retry_wait:
            self.retry_wait = min(self.retry_wait * 3 // 2, self.retry_us * 64)
        self.timeouts = (self.timeouts + 1) & _COUNT_MASK
        self._wait_since = t
        self.log.record(EV_TIMEOUT, 0, why, min(fired // 1000, 0xFFFF), node.seq, node.known_epoch, t)
        self._act(node.on_timeout(), t)

    def _stood_still_meanwhile(self, t):
        """A virtual board's timeout is over by its wall clock: True while the time its ring's
        processes stood still during the wait makes up the difference. A token a Pico passes on
        in microseconds can wait hundreds of milliseconds in a virtual ring whose processes the
        loaded host does not run (a hop of 335 ms was seen beside three busy loops): that is
        not a lost token, and regenerating it breaks the protocol's exact message counts. The
        wait is extended by at most its own length per look, so stillness from before the wait
        cannot put it off for long."""
        if self._still_wait != self._wait_since:
            self._still_wait = self._wait_since
            self._still_credit = 0
        elapsed = self.ticks_diff(t, self._wait_since)
        node = self.node
        limit = self.retry_wait if node.fresh or node.starting else self.gen_us
        if elapsed < limit + self._still_credit:
            return True
        now = self._ring_stood_still()
        more = now - self._still_seen
        self._still_seen = now
        if more > 0:
            self._still_credit = min(self._still_credit + more, elapsed)
            if elapsed < limit + self._still_credit:
                return True
        # Over: acted on once the count read is the relay's look at or after the tick the wait
        # ran out at (hal_unix's RingStoodStill.current_since: a stall that held the token up
        # reaches the count at the relay's first look after it)
        current = self._still_current
        return current is not None and not current(t - (elapsed - limit - self._still_credit))

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
            self.rejected = (self.rejected + 1) & _COUNT_MASK
            self.log.record(EV_REJECT, 0, 0, 0, 0, 0, t)
            return
        self.requests = (self.requests + 1) & _COUNT_MASK
        self._wait_since = t
        if self._clocked:
            self._tick(t)
        self._act(node.request(), t, EV_REQ)

    # -- commands --------------------------------------------------------

    def _command(self, ln):
        if self.link.greet:
            self.link.greet = False
            self.link.reply("hello " + self._version_text() + " rep=1")
        line = self.link.line
        if ln == 2 and line[1] == _CMD_R:
            self.request()  # the hot command: no allocation
            return
        try:
            words = bytes(line[1:ln]).decode().split()
        except UnicodeError:
            words = None
        if not words:
            self.link.bad_lines = (self.link.bad_lines + 1) & _COUNT_MASK
            self._host_error(HOSTERR_NOT_TEXT if words is None else HOSTERR_NOT_COMMAND)
            return
        handler = self._commands.get(words[0])
        if handler is None:
            self.link.reply("err unknown command %r" % words[0])
            self._host_error(HOSTERR_UNKNOWN)
            return
        try:
            handler(words[1:])
        except (ValueError, IndexError) as e:
            self.link.reply("err %s: %s" % (words[0], e))
            self._host_error(HOSTERR_BAD_ARGS)

    def _host_error(self, why):
        self.log.record(EV_HOSTERR, 0, why, self.link.bad_lines, 0, 0)

    def _cmd_request(self, args):
        self.request()

    def _cmd_ping(self, args):
        # The tick is taken last so the host can pair it with its receive time. The event
        # number after it: the events made before the pong may still be in the log (flushed
        # in batches), behind it on the USB link; the host waits for them before it takes
        # the pong for news of the board's sends.
        eseq = self.log.eseq
        self.link.reply("pong %s %d %d" % (args[0] if args else "-", self.ticks_us() & hostlink.TICK_MASK, eseq))

    def _cmd_log(self, args):
        if args:
            self.log.enabled = args[0] not in ("0", "off")
        self.link.reply("log %d" % self.log.enabled)

    def _version_text(self):
        n = self.node
        import sys

        return ("fw=%s proto=%s pos=%d n=%d cs_us=%d board=%s baud=%s tick_mask=%d rec=%d cap=%d mp=%s regen_us=%d inc=%d"
                " drop_rx=%d hot=%s") % (
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
            self.regen_us,
            self.nonce,
            getattr(self.uart, "ppm", 0),  # the fault drop_rx (hal.LossyUart): frames lost per million
            # main.place_hot_names: names interned / padding names / names sharing a cache slot
            self.info.get("hot", "-"),
        )

    def _cmd_version(self, args):
        self.link.reply("ver " + self._version_text())

    def status_text(self):
        n = self.node
        d = self.dec
        return ("pos=%d tok=%d cs=%d pend=%d count=%d state=%d seq=%d epoch=%d flag=%d errors=%d rx_frames=%d tx_frames=%d "
                "rx_bytes=%d bad=%d bad_crc=%d bad_len=%d bad_cobs=%d bad_kind=%d bad_lines=%d req=%d rej=%d eseq=%d "
                "pending=%d dropped=%d log=%d fresh=%d starting=%d known_epoch=%d regen=%d discarded=%d stale=%d "
                "timeouts=%d gen_ms=%d lost=%d") % (
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
            n.fresh,
            n.starting,
            n.known_epoch,
            n.regenerated,
            n.discarded,
            n.stale_counts,
            self.timeouts,
            self.gen_us // 1000,
            d.lost,
        )

    def _cmd_status(self, args):
        self.link.reply("status " + self.status_text())

    def _cmd_zero(self, args):
        # Counters only: the protocol state and the event numbering stay as they are.
        # A run starts here: the fault drop_rx (hal.LossyUart) loses frames from now on.
        arm = getattr(self.uart, "arm", None)
        if arm is not None:
            arm()
        self.dec.reset_counters()
        self.tx_frames = 0
        self.rx_bytes = 0
        self.requests = 0
        self.rejected = 0
        self.link.bad_lines = 0
        self.node.errors = 0
        self.log.dropped_total = 0
        self.timeouts = 0
        n = self.node
        n.regenerated = n.discarded = n.stale_counts = 0
        # The event number it zeroed at: the host counts this board's send events from there,
        # and after a USB outage tells from tx_frames how many of them never reached it.
        self.link.reply("zero %d" % self.log.eseq)

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


# The hop's poll-and-pass in viper on the boards (the class's native method is its twin).
try:
    @micropython.viper
    def _finish_frame_viper(self, st) -> int:
        """NodeLoop._finish_frame in viper, where the port has the emitter (CPython and the
        tests' pure runs keep the native twin; tests/test_node_loop.py's trickle runs compare
        both). Viper: the decoder's fields are read through a pointer (a subscript of the
        array costs 1.7 us in native code, and each chunk took 4-6 of them). Bounded
        like step()'s own polls, so the scheduler waits no longer than before."""
        ready, readinto, rx, rxlen, sc, st, draw, _, _, _ = self._rd
        # What a token hop needs, at hand before the frame's last byte (a lookup after
        # it delays the hop by a microsecond or more each).
        ticks_us, on_token, encode, eraw, tout, write, node, on_message, thead, ttail = self._fwd
        taken = _taken
        v = ptr32(st)
        r = ptr8(draw)
        cap = int(rxlen)
        named = 0  # what passing a message on needs, looked up once one is landing (1)
        index = 0
        n = 0
        mout = taken  # (objects until then: a viper local keeps its first type)
        views = taken
        fields = taken
        menc = taken
        clk = taken
        sizes = taken
        least = taken
        # A message for another node is resealed as it lands (3): its copy's CRC and COBS, with
        # this link's sequence byte, advanced over each piece but the last two bytes (its CRC,
        # perhaps); passing it on then costs its last bytes, not all of them (issue 41). The steps
        # are frame.seal_viper's, written out here (a call per piece is what this saves): keep
        # them alike; the trickle test compares the frames passed on with the twin's.
        o = ptr8(draw)  # the copy's COBS (mout's once one is begun: a viper local keeps its first type)
        rs = 0  # bytes resealed so far
        rc = 0  # their CRC
        rat = 0  # where the open COBS block's code goes
        rlq = 0  # the sequence byte in the copy
        total = 0
        k = 0
        idle = _SPIN
        while idle and total < _FINISH_MAX:
            m = int(ready())
            if not m:
                idle -= 1
                continue
            m = int(readinto(rx, m if m < cap else cap))
            if not m:
                break
            total += m
            v[_POS] = 0
            v[_END] = m
            k = int(sc(rx, draw, st))
            if k == _TOKEN:
                t = ticks_us()
                a = on_token(node, v[_F_COUNT], v[_F_STATE], v[_F_SEQ], v[_F_EPOCH])
                if int(a) == _SEND_TOKEN:
                    encode(eraw, tout, node)
                    write(thead)
                    write(ttail)
                taken[0] = t
                taken[1] = a
                k = _TOKEN_TAKEN
                break
            if not named and (k == _MSG or r[0] == _MSG):
                # A message is landing (draw[0], the kind, is this frame's once its first
                # byte is decoded, until then the last frame's: looked up for nothing at
                # worst).
                # One lookup and an unpacking (_on_msg's tuple): six lookups here took about 35 us
                # on the chip, while the frame's bytes piled up behind them (the second chunk
                # of a 22-byte message was read after its last byte had landed; issue 41).
                _, _, _, _, fields, mout, views, menc, _, ring, at, sizes, least, table, clk = self._mhot
                index = int(at)
                n = int(ring)
                ct = ptr16(table)
                named = 1
            if named and (k == 0 or k == _MSG) and r[0] == _MSG:
                # (3) up to the bytes that may be its CRC; once it has ended, up to its CRC. Begun
                # once its destination has landed and is another node or all, from another node:
                # begun before, a message for this node (the wandering token's every visit) paid for
                # it (its relay hop 240 -> 260 us).
                top = v[_S_LEN] - 2
                if k:
                    top = v[_F_MLEN] + _MSG_HEAD
                if top < rs:
                    rs = 0  # a frame that ended without a kind (line noise): this is another
                if rs < top and top >= 3 and r[4] != index and r[3] != index:
                    if rs == 0:
                        o = ptr8(mout)
                        o[0] = 0
                        rat = 1
                        rc = 0xFFFF
                        rlq = ptr8(eraw)[_LSEQ_AT]
                    while rs < top:
                        b = r[rs]
                        if rs == 1:
                            b = rlq
                        rc = ((rc << 8) & 0xFFFF) ^ ct[(rc >> 8) ^ b]
                        if b:
                            o[rs + 2] = b
                        else:
                            o[rat] = rs + 2 - rat
                            rat = rs + 2
                        rs += 1
            if k == _MSG:
                # A message for another node, or another node's broadcast: passed on at once
                # without waking the protocol, as _on_msg does (which takes any other message
                # up); _msg_passed then delivers a broadcast here too (sk's and ra's requests:
                # passed on by _on_msg after their last byte, 166 us, while a token landed
                # behind them). _msg_bad inline, on machine words (a native call and its
                # subscripts cost the passed-on hop about 20 us on a Pico; issue 41), and not
                # from this node (a broadcast back at its sender): _on_msg takes up what fails.
                d = v[_F_DST]
                mk = v[_F_STATE]
                m = v[_F_MLEN]
                src = v[_F_SRC]
                most = ptr8(sizes)
                if (src != index and mk < _MSG_KINDS and (m == most[mk] or (m >= ptr8(least)[mk] and m <= most[mk]))
                        and src < n and src != d):
                    if (d != index and d < n) or d == _BROADCAST:
                        t = ticks_us()
                        # _pass_msg_on, inline: a native call and its subscripts cost the passed-on
                        # hop about 10 us on a Pico (issue 41)
                        e = ptr8(eraw)
                        lseq = e[_LSEQ_AT]
                        r[1] = lseq
                        e[_LSEQ_AT] = (lseq + 1) & 0xFF
                        top = m + _MSG_HEAD
                        if rs == top and rlq == lseq:
                            # (3) resealed while it landed: its CRC's two bytes and the last code
                            b = rc >> 8
                            r[top] = b
                            if b:
                                o[top + 2] = b
                            else:
                                o[rat] = top + 2 - rat
                                rat = top + 2
                            b = rc & 0xFF
                            r[top + 1] = b
                            if b:
                                o[top + 3] = b
                            else:
                                o[rat] = top + 3 - rat
                                rat = top + 3
                            o[rat] = top + 4 - rat
                            o[top + 4] = 0
                        else:
                            seal(draw, top, mout)
                        head, rest = views[m]
                        write(head)
                        write(rest)
                        taken[0] = t
                        k = _MSG_TAKEN
                    elif d == index:
                        # For this node (a relay: the wandering token's visit, BS's rotation):
                        # given to the protocol here, as a token is, and what it sends at once
                        # written before anything is logged (step: _delivered), not after a return
                        # to step(), its dispatch and _on_msg's lookups and call (issue 41).
                        t = ticks_us()
                        if clk:
                            # _tick, inline (a clocked loop's: the wandering token's)
                            c = ptr32(clk)
                            dt = (int(t) - c[0]) & _COUNT_MASK
                            if dt >= 1000 and dt < 0x20000000:
                                q = dt // 1000
                                c[0] = (int(t) - (dt - q * 1000)) & _COUNT_MASK
                                node.now = (int(node.now) + q) & _COUNT_MASK
                        a = on_message(node, mk, src, draw)
                        if int(a) == _SEND_MSG:
                            menc(eraw, mout, node, fields)
                            head, rest = views[node.out_len]
                            write(head)
                            write(rest)
                            taken[2] = ticks_us()
                        taken[0] = t
                        taken[1] = a
                        k = _MSG_DELIVERED
                break
            if k or v[_CODE] == 0xFF:
                break
            idle = _SPIN
        return k | (total << 5)

    NodeLoop._finish_frame = _finish_frame_viper
except (SyntaxError, NameError, AttributeError):  # CPython (its micropython stub), a port without viper
    pass

# A message frame's delivery or pass in viper on the boards (the class's native _on_msg is its
# twin: CPython's; tests/test_layer.py, test_wt.py and test_sk_ra.py compare the node loop's runs
# under both).
try:
    @micropython.viper
    def _on_msg_viper(self, t):
        """NodeLoop._on_msg in viper, where the port has the emitter: the decoder's fields read
        through a pointer, the checks on machine words (in native code each subscript,
        comparison or operator is a runtime call of about a microsecond on a Pico, some twenty
        on a delivered message; issue 41). Same steps, same order."""
        ticks_us, on_token, encode, eraw, tout, write, node, on_message, thead, ttail = self._fwd
        st, draw, lbuf, lst, fields, mout, views, encode, record, ring, at, sizes, least, _, _ = self._mhot
        v = ptr32(st)
        mk = v[_F_STATE]
        src = v[_F_SRC]
        dst = v[_F_DST]
        n = int(ring)
        m = v[_F_MLEN]
        most = ptr8(sizes)
        if (mk >= _MSG_KINDS or (m != most[mk] and (m < ptr8(least)[mk] or m > most[mk]))
                or src >= n or src == dst or (dst >= n and dst != _BROADCAST)):
            self._bad_msg(t)
            return
        index = int(at)
        if dst == index:
            # (_finish_frame delivers most: this is a message read whole by step())
            if self._clocked:
                self._tick(t)
            a = on_message(node, mk, src, draw)
            sent = t  # (unused unless sent: a viper local keeps its first type)
            if int(a) == _SEND_MSG:  # forwarded first, then logged
                encode(eraw, mout, node, fields)
                head, rest = views[node.out_len]
                write(head)
                write(rest)
                sent = ticks_us()
            self._delivered(t, a, sent)
            return
        if src == index:
            record(lbuf, lst, _CODE_RECV_MSG, st, _F_STATE, t)
            return  # a broadcast back at its sender: taken off
        # _pass_msg_on, inline (as in _finish_frame_viper)
        r = ptr8(draw)
        e = ptr8(eraw)
        lseq = e[_LSEQ_AT]
        r[1] = lseq
        e[_LSEQ_AT] = (lseq + 1) & 0xFF
        seal(draw, m + _MSG_HEAD, mout)
        head, rest = views[m]
        write(head)
        write(rest)
        self.tx_frames = (int(self.tx_frames) + 1) & _COUNT_MASK
        record(lbuf, lst, _CODE_RECV_MSG, st, _F_STATE, t)
        record(lbuf, lst, _CODE_FWD_MSG, st, _F_STATE, ticks_us())
        if dst == _BROADCAST:
            # _msg_passed's delivery, inline (its lookup through the loop's nearly full map and its
            # call would be waited for by a token landing behind the broadcast)
            if self._clocked:
                self._tick(t)
            a = on_message(node, mk, src, draw)
            if a:
                self._act(a, t)
            elif node.fresh or node.starting or (node.pending and not node.has_token):  # (as _act)
                self._watch = True
            else:
                self._watch = False

    NodeLoop._on_msg = _on_msg_viper
except (SyntaxError, NameError, AttributeError):  # CPython (its micropython stub), a port without viper
    pass

# The shared resource's code, out of NodeLoop's class table (each name there is in the way
# of the lookups of every hop).

def _log_res(log, op, r):
    """A res event: op (hostlink.RES_*), the counter value, or the errno of a failed access
    (r < 0); nothing for None (an audit that logs nothing, or no write after a failed read).
    Values are logged mod 2**30 (the record's seq field; the host's !res reply has them whole)."""
    if r is None:
        return
    if r < 0:
        log.record(EV_RES, 0, op, -r, 0, 0)
    else:
        log.record(EV_RES, 0, op, 0, r & _COUNT_MASK, 0)


def _request_rogue(self):
    """request() of a rogue board (fault rogue=B): the critical section is entered at once,
    without the token and without telling the protocol, and left after cs_us (a busy wait:
    the board does nothing else meanwhile). Its entry carries the entry number of the last
    token the board saw, which the token never gave it: the checker, and the shared counter
    where there is one, must both catch it."""
    t = self.ticks_us()
    node = self.node
    log = self.log
    self.requests = (self.requests + 1) & _COUNT_MASK
    log.record(EV_REQ, 0, 0, 0, 0, 0, t)
    log.record(EV_ENTER, 0, 0, 0, node.seq, node.epoch, t)
    if self.audit is not None:
        _log_res(self.log, RES_READ, self.audit.enter())
    while self.ticks_diff(self.ticks_us(), t) < self.cs_us:
        pass
    if self.audit is not None:
        _log_res(self.log, RES_WRITE, self.audit.leave())
    log.record(EV_EXIT, 0, 0, 0, 0, 0)


def _cmd_res(self, args):
    # "!res": read the shared counter; "!res set V": write it (the host, before a run; never
    # while a critical section is in progress). Reply: "!res value=V errno=E" (V -1 when E).
    a = self.audit
    if a is None or not hasattr(a, "read"):
        raise ValueError("no shared resource on this board (picoring.json names none: flash with --resource fram)")
    if args and args[0] == "set":
        v = int(args[1])
        if not 0 <= v <= 0xFFFFFFFF:
            raise ValueError("the counter is 4 bytes: 0..4294967295")
        r = a.write(v)
        op = RES_SET
    elif args:
        raise ValueError("usage: !res, or !res set VALUE")
    else:
        r = a.read()
        op = RES_COUNT
    _log_res(self.log, op, r)
    self.link.reply("res value=%d errno=%d clocks=%d" % (r if r >= 0 else -1, -r if r < 0 else 0,
                                                         getattr(a, "bus_clocks", 0)))
