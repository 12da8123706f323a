"""The names a token hop looks up, per protocol, most frequent first: firmware/qstrs.py's table.

A ring of three node loops in memory (CPython, the firmware's native twins of the board's viper
functions: the same attribute and global names), its wires handing over a few bytes a read as a
UART does, so that frames land in pieces and the loop's finishing path runs as on a board; boards
0 and 1 ask for the critical section at random. Every LOAD_ATTR, STORE_ATTR, LOAD_METHOD and
LOAD_GLOBAL the traced passes execute in firmware code is counted (sys.settrace opcode events), per
frame sent, idle passes included: what a board looks up while it waits for a frame takes the cache's
slots as much as the hop's own lookups (ranking the passes that read or sent a frame first, as
71016aa did, made sk's passed-on hop 186 -> 208 us: docs/performance.md).
Left out: names a board never looks up (a module's own const() names, which MicroPython inlines;
CPython's builtins; the pure-Python twins' own helpers); this module's own lookups are not counted. Added: what
only a board's own code looks up (BOARD_ONLY: the USB link's poll, the log's line encoder), as once
a frame.

    python tests/hot_names.py            # print each protocol's names with their counts a hop
    python tests/hot_names.py --write    # rewrite the table in firmware/qstrs.py

tests/test_qstrs.py checks that the table holds the trace's HOT_TOP most frequent names (the table
holds qstrs.SLOTS: room for ties ordered otherwise by another CPython), so a hop that starts to look
up a new name often fails it until the table is written again.
"""

import builtins
import collections
import dis
import random
import re
import sys
from pathlib import Path

FIRMWARE = Path(__file__).resolve().parent.parent / "firmware"
if str(FIRMWARE) not in sys.path:
    sys.path.insert(0, str(FIRMWARE))

import node as fw_node  # noqa: E402
import protocol  # noqa: E402
import qstrs  # noqa: E402

HOT_TOP = 48  # the trace's most frequent names that must be in the table (the test; it holds qstrs.SLOTS)
PASSES = 200  # traced passes of each board at least, after 600 to warm up; more until MIN_FRAMES
MIN_FRAMES = 200  # frames sent in the traced passes (a slow walk, a resting token), within MAX_PASSES
MAX_PASSES = 1500
_OPS = {"LOAD_ATTR", "STORE_ATTR", "LOAD_METHOD", "LOAD_GLOBAL", "STORE_GLOBAL"}
_GLOBAL_OPS = {"LOAD_GLOBAL", "STORE_GLOBAL"}
# Looked up by a board's code that the CPython twins do not run: hal.StreamHost.read_byte (the
# USB link, looked at after every token passed on), EventLog.flush_one's line encoder and the
# node loop's run() (its pass: step).
BOARD_ONLY = ("_poll", "ipoll", "select", "POLLIN", "_line", "_line_views", "running", "step")
# The token frame's handler (S's, Q's, D's on_token) runs on every hop the bench times, at a board
# that passes the token on; in this workload the token rests or goes to a requester as often, and
# the idle passes' names outnumber its own: Q's open_epoch and n fell outside the table, and its
# hop was 115.8 us on the emulated ring against 110.5 with them placed (docs/performance.md).
# Every name it looks up counts at least once a frame.
ON_EVERY_HOP = ("on_token",)


class _TrickleUart:
    """A UART in memory that hands over at most 3 bytes a read, as the frames land on a board."""

    def __init__(self):
        self._wire_bytes = bytearray()
        self._wire_next = None
        self._wire_piece = 3

    def any(self):
        return min(len(self._wire_bytes), self._wire_piece)

    def readinto(self, buf, n=-1):
        n = min(len(buf), len(self._wire_bytes), self._wire_piece, n if n >= 0 else len(buf))
        buf[:n] = self._wire_bytes[:n]
        del self._wire_bytes[:n]
        return n

    def write(self, data):
        self._wire_next._wire_bytes += data
        return len(data)


class _Host:
    def read_byte(self):
        return -1

    def write(self, data):
        return len(data)


def _consts(module):
    """The names module (a firmware module's name) defines with const(): inlined on a board."""
    path = FIRMWARE / (module.rsplit(".", 1)[-1] + ".py")
    if not path.exists():
        return set()
    return set(re.findall(r"^(\w+) = const\(", path.read_text(), re.M))


def _looked_up(op, name, module, consts):
    """False for a lookup no board makes: a module's own const() read as a global, a builtin,
    a pure-Python twin's helper (*_py). (This module's own lookups are not counted at all: the
    tracer counts firmware code only.)"""
    if op in _GLOBAL_OPS and name in consts.setdefault(module, _consts(module)):
        return False
    return not (name.endswith("_py") or hasattr(builtins, name))


def ring_of_loops(spec, n=3):
    """n started node loops of protocol spec on trickling wires, board 0 with the token."""
    t = [0]

    def ticks():
        t[0] = (t[0] + 37) & 0x3FFFFFFF
        return t[0]

    uarts = [_TrickleUart() for _ in range(n)]
    for i in range(n):
        uarts[i]._wire_next = uarts[(i + 1) % n]
    loops = [fw_node.NodeLoop(protocol.make_node(spec, i, n), uarts[i], _Host(), ticks, lambda a, b: a - b)
             for i in range(n)]
    for i, lp in enumerate(loops):
        lp.start(give_token=i == 0)
    return loops


def trace(spec, n=3, seed=1):
    """[(name, lookups a frame sent)] of protocol spec's ring, most frequent first (ties by name)."""
    _loops = ring_of_loops(spec, n)
    _rng = random.Random(seed)

    def drive(passes):
        for _ in range(passes):
            for i, lp in enumerate(_loops):
                if i < 2 and not lp.node.pending and not lp.node.in_cs and _rng.random() < 0.05:
                    lp.request()
                lp.step()

    counts = collections.Counter()
    every_hop = set()  # (op, name, module) looked up in an ON_EVERY_HOP handler
    found = {}
    names = {}
    modules = {p.stem for p in FIRMWARE.glob("*.py")}

    def tracer(frame, event, arg):
        frame.f_trace_opcodes = True
        if event == "opcode":
            ops = found.get(frame.f_code)
            if ops is None:
                ops = found[frame.f_code] = {i.offset: i.opname for i in dis.get_instructions(frame.f_code)
                                             if i.opname in _OPS}
                names[frame.f_code] = {i.offset: i.argval for i in dis.get_instructions(frame.f_code)}
            op = ops.get(frame.f_lasti)
            module = frame.f_globals.get("__name__", "")
            if op is not None and module.rsplit(".", 1)[-1] in modules:
                counts[(op, names[frame.f_code][frame.f_lasti], module)] += 1
                if frame.f_code.co_name in ON_EVERY_HOP:
                    every_hop.add((op, names[frame.f_code][frame.f_lasti], module))
        return tracer

    drive(600)
    sent = sum(lp.tx_frames for lp in _loops)
    passes = 0
    sys.settrace(tracer)
    try:
        while passes < PASSES or (sum(lp.tx_frames for lp in _loops) - sent < MIN_FRAMES and passes < MAX_PASSES):
            drive(1)
            passes += 1
    finally:
        sys.settrace(None)
    frames = max(1, sum(lp.tx_frames for lp in _loops) - sent)
    consts = {}

    per_name = collections.Counter()
    for (op, name, module), c in counts.items():
        if _looked_up(op, name, module, consts):
            per_name[name] += c / frames
    for op, name, module in every_hop:
        if _looked_up(op, name, module, consts):
            per_name[name] = max(per_name[name], 1.0)
    for name in BOARD_ONLY:
        per_name[name] = max(per_name[name], 1.0)
    return sorted(per_name.items(), key=lambda kc: (-kc[1], kc[0]))


def table():
    """{protocol: its names, most frequent first, at most qstrs.SLOTS} for every registered one."""
    return {name: [k for k, _ in trace(name)][:qstrs.SLOTS] for name in sorted(protocol.REGISTRY)}


def write_table(path=FIRMWARE / "qstrs.py"):
    text = path.read_text()
    lines = ["HOT = {  # (tests/hot_names.py --write)"]
    for name, names in table().items():
        words = " ".join(names)
        chunks = re.findall(r".{1,90}(?:\s|$)", words + " ")
        lines.append("    %r: (" % name)
        lines.extend("        %r" % c for c in chunks)
        lines[-1] += "),"
    lines.append("}")
    start = text.index("HOT = {")
    end = text.index("\n}\n", start) + 3
    path.write_text(text[:start] + "\n".join(lines) + "\n" + text[end:])


if __name__ == "__main__":
    if "--write" in sys.argv[1:]:
        write_table()
    else:
        for name in sorted(protocol.REGISTRY):
            print(name, " ".join("%s:%.2f" % kc for kc in trace(name)))
