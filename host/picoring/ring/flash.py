"""`picoring flash`: put the firmware and each board's config on a ring of boards.

For every board (deploy.copy_firmware, the copy `picoring virtual deploy` and
`run --virtual` make too): check it is a MicroPython REPL, ask which .mpy files it
loads (sys.implementation._mpy) and the SHA-256 of the files it has; then, in one
more mpremote session, copy the firmware files that differ (only the protocol's own
module of the protocol modules) and its picoring.json (position, size, protocol,
baud, and the pins from boards/<board>.toml), and delete the stale other form of
each module. The firmware goes as .mpy compiled by mpy-cross for the board where it
loads them (boot then skips ~1 s of compiling on a Pico; a virtual board, the unix
port, loads x64 .mpy), as .py sources otherwise, saying why (picoring.ring.mpy).
main.py is always a source. Then restart every board into the firmware (a virtual
board through its ring, a real one by Ctrl-C, Ctrl-B, Ctrl-D over its USB serial: a
soft reset, which keeps the USB port and runs main.py) and confirm that it says
`!hello` with the expected firmware version and config, and answers `!ver` the same.

Everything that can be checked before touching a board is checked first (two
boards at one position, the same board twice, a missing or busy port), so a
bad command line changes nothing. A failure later says which board failed and
what state every board is left in.
"""

import queue
import re
import time

from ..check import registry
from ..clock import WALL
from . import boarddefs
from . import deploy
from .link import BoardLink, HarnessError, clock_rates, drain, slowness
from .hostlink import CTRL_C
from .ports import PortError, busy_message, is_lock_error

PROTOCOLS = registry.names()  # every registered protocol (firmware/protocol.py REGISTRY)
COPY_TIMEOUT = deploy.COPY_TIMEOUT

CONFIRM_TIMEOUT = 20.0


class _CopyFailed(Exception):
    """One board's copy failed (flash() reports it, with every board's state)."""


class FlashError(RuntimeError):
    """Flashing failed; the message names the board and the state every board is left in."""

    def __init__(self, message, states=None):
        super().__init__(message)
        self.states = states or []


def firmware_version(folder=None):
    """FIRMWARE_VERSION of the firmware that flash copies (read from node.py, not imported:
    the firmware's imports are the board's, not the host's)."""
    path = (deploy.FIRMWARE_DIR if folder is None else folder) / "node.py"
    m = re.search(r'^FIRMWARE_VERSION\s*=\s*"([^"]+)"', path.read_text(), re.M)
    if not m:
        raise FlashError("%s: no FIRMWARE_VERSION" % path)
    return m.group(1)


def check_port(target):
    """A local port must exist and not be held by another program (mpremote and picoring
    open ports with an exclusive lock, as most serial terminals do)."""
    if target.is_url:
        return
    import serial

    try:
        s = serial.Serial(target.port, exclusive=True)
    except serial.SerialException as e:
        text = str(e)
        if is_lock_error(e):
            raise PortError(busy_message(target.port)) from None
        if "No such file" in text or "could not open port" in text and "No such" in text:
            raise PortError("port not found: %s" % target.port) from None
        raise PortError("%s: cannot open: %s" % (target.label(), text)) from None
    s.close()


def make_config(target, position, n, protocol, board, baud=None, cs_us=0, regen_ms=None, resource=None,
                cs_hold_us=0, drop_rx=None):
    """The picoring.json of one board (firmware/main.py's keys). resource "fram": the
    critical sections share the I2C FRAM on the bus of the board file's [i2c] (docs/fram.md).
    drop_rx (probability, seed): the board loses received frames (hal.LossyUart, docs/faults.md)."""
    cfg = {"position": position, "size": n, "protocol": protocol, "baud": baud or board["baud"], "cs_us": cs_us}
    if regen_ms is not None:
        cfg["regen_ms"] = regen_ms  # base token-regeneration timeout (docs/recovery.md)
    if drop_rx:
        cfg["drop_rx"] = [int(round(drop_rx[0] * 1000000)), int(drop_rx[1])]  # per million, as the board draws
    cfg.update(boarddefs.config_for(board))
    if resource is not None:
        cfg.update(resource=resource, cs_hold_us=cs_hold_us)
        if not target.virtual:
            cfg["i2c"] = boarddefs.i2c_config(board)
    if target.virtual:
        cfg["virtual"] = {"uart": target.virtual_uart}
        if target.virtual_stood_still is not None:
            cfg["virtual"]["stood_still"] = target.virtual_stood_still  # the ring's clock (virtual/boards.py)
        if resource is not None:
            cfg["virtual"]["i2c"] = target.virtual_i2c
        cfg["board"] = "virtual"
    return cfg


def plan(targets, positions=None):
    """Check the ring before touching anything; returns the positions."""
    n = len(targets)
    if n < 2:
        raise FlashError("a ring needs at least 2 boards, got %d" % n)
    positions = list(range(n)) if positions is None else list(positions)
    if len(positions) != n:
        raise FlashError("%d boards but %d positions" % (n, len(positions)))
    seen = {}
    for t, p in zip(targets, positions):
        if not isinstance(p, int) or not 0 <= p < n:
            raise FlashError("%s: position %r is not in 0..%d" % (t.label(), p, n - 1))
        if p in seen:
            raise FlashError("two boards have the same position %d: %s and %s" % (p, seen[p].label(), t.label()))
        seen[p] = t
    keys = {}
    for t in targets:
        if t.key in keys:
            raise FlashError("%s is given twice: a board has one ring position" % t.label())
        keys[t.key] = t
    return positions


# -- restarting boards and reading what they say -----------------------------

def open_link(index, target, inbox=None, tap=None, clock=WALL):
    link = BoardLink(index, target.port, inbox if inbox is not None else queue.Queue(), clock=clock)
    link.tap = tap
    try:
        return link.open()
    except HarnessError as e:
        raise PortError(str(e)) from None


def restart(link, target):
    """Restart one board into main.py: its ring's reset for a virtual board, else a soft reset
    through the REPL (Ctrl-C stops the firmware, Ctrl-B leaves a raw REPL, Ctrl-D soft-resets)."""
    drain(link.replies)
    if target.resetter is not None:
        target.reset()
        return
    link.write(b"\r" + CTRL_C + CTRL_C)
    time.sleep(0.1)
    link.write(b"\x02")
    time.sleep(0.1)
    link.write(b"\x04")


def wait_hello(link, timeout):
    _, hello = link.wait_hello(timeout)  # (the parser restarts event numbering on it)
    return hello.fields


def expected_fields(cfg, fw):
    return {"fw": fw, "proto": cfg["protocol"], "pos": cfg["position"], "n": cfg["size"], "cs_us": cfg["cs_us"],
            "board": cfg["board"], "baud": cfg["baud"]}


def confirm(link, cfg, fw, timeout):
    """Check the board's !hello and !ver against its config; returns the !ver fields."""
    hello = wait_hello(link, timeout)
    for attempt in range(3):
        # Asked up to three times: on a loaded host, a virtual board was once seen to lose a
        # command sent right after its !hello (cause not found; a lost line costs one retry).
        try:
            _, ver = link.command("ver", timeout=timeout / 3)
            break
        except HarnessError:
            if attempt == 2:
                raise
    want = expected_fields(cfg, fw)
    for what, fields in (("!hello", hello), ("!ver", ver.fields)):
        wrong = ["%s=%s (expected %s)" % (k, fields.get(k), v) for k, v in want.items() if fields.get(k) != v]
        if wrong:
            raise HarnessError("%s: its %s says %s" % (link.port, what, ", ".join(wrong)))
    return ver.fields


# -- flash -------------------------------------------------------------------

def _state_text(states):
    return "; ".join("%s: %s" % (s["label"], s["state"]) for s in states)


def flash(targets, protocol, baud=None, board=boarddefs.DEFAULT_BOARD, positions=None, cs_us=0, files=None, regen_ms=None,
          copy_timeout=COPY_TIMEOUT, confirm_timeout=CONFIRM_TIMEOUT, tap=None, log=None, mpy=True, mpy_cache=None,
          resource=None, cs_hold_us=0, drop_rx=None, clock=WALL, clock_rate=None):
    """Flash and configure targets (positions[i] is targets[i]'s ring position, default i).
    resource "fram": the boards share an I2C FRAM (docs/fram.md); each also gets the
    adafruit_bus_device package in its lib/, from the installed PyPI distribution.
    drop_rx (probability, seed): the fault that makes every board lose received frames.

    Returns one dict per board: port, serial, position, config, copied, up_to_date,
    removed (stale files deleted), compiled (modules sent as .mpy), notes (why a module went
    as source), identity (implementation, platform, version, unique id, mpy), ver (its !ver
    fields), copy_s, confirm_s. mpy=False copies sources to every board. clock: what the waits on
    the boards count (picoring.clock). clock_rate: the ring's own count of its boards' time
    against wall time, as RingRun's (ringrate.clock_rate_for_ports; None: real boards), which
    the boot deadlines scale by from the first board on. Raises FlashError (or PortError before
    anything was touched)."""
    log = log or (lambda text: None)
    try:
        protocol = registry.spec(protocol)
    except ValueError as e:
        raise FlashError(str(e)) from None
    bdef = boarddefs.load(board) if isinstance(board, str) else board
    if files is None:
        files = deploy.firmware_files(protocol=protocol)  # only its own protocol module
    positions = plan(targets, positions)
    if resource is not None:
        try:
            deploy.resource_files({"resource": resource})  # not installed: said before any board is touched
            if any(not t.virtual for t in targets):
                boarddefs.i2c_config(bdef)
        except (deploy.DeployError, boarddefs.BoardDefError) as e:
            raise FlashError(str(e)) from None
    for t in targets:
        check_port(t)
    fw = firmware_version()
    n = len(targets)
    states = [{"label": t.label(), "state": "not touched"} for t in targets]
    results = [None] * n
    compiler, no_compiler = None, "not asked to compile (--no-mpy)"
    if mpy:
        compiler, no_compiler = deploy.find_compiler()
        if compiler is None:
            log("no .mpy: %s" % no_compiler)

    def fail(i, message):
        raise FlashError("%s: %s. State of the boards: %s" % (targets[i].label(), message, _state_text(states)), states)

    # Virtual boards start from their REPL, as deploy_virtual does, so a broken firmware
    # cannot stop the copy; a Pico's firmware stops on mpremote's Ctrl-C.
    for i, t in enumerate(targets):
        if t.resetter is not None:
            try:
                t.reset(run_main=False)
            except Exception as e:
                fail(i, "cannot restart it into its REPL: %s" % e)
            states[i]["state"] = "stopped (REPL)"

    digests = {}  # each firmware file hashed once for every board (copy_firmware)

    def copy_one(i):
        """Board i's firmware and config; its state and result set. Raises _CopyFailed."""
        t = targets[i]
        cfg = make_config(t, positions[i], n, protocol, bdef, baud, cs_us, regen_ms, resource, cs_hold_us, drop_rx)
        t0 = time.monotonic()
        try:
            summary, ident, sel = deploy.copy_firmware(t.port, cfg, files, compiler, no_compiler, copy_timeout, mpy_cache,
                                                       log=lambda text: log("%s: %s" % (t.label(), text)),
                                                       what="position %d" % positions[i], clock=clock, digests=digests)
            if ident and ident["implementation"] != "micropython":
                states[i]["state"] = "not changed"
                raise _CopyFailed("runs %s, not MicroPython" % ident["implementation"])
        except deploy.DeployError as e:
            started, same = deploy.copy_progress(e.stdout)
            if not started:
                states[i]["state"] = "not changed (the copy did not start)"
            else:
                done = [x for x in started[:-1] if x not in same]
                states[i]["state"] = ("partly copied: %s written, failed during %s; the old firmware or a mix is "
                                      "on it: flash it again" % (", ".join(done) or "nothing", started[-1]))
            raise _CopyFailed("copy failed: %s" % e) from None
        states[i]["state"] = "files copied (%d new, %d up to date), not restarted" % (
            len(summary["copied"]), len(summary["up_to_date"]))
        results[i] = {"port": t.port, "serial": t.serial_number, "position": positions[i], "config": cfg,
                      "copied": summary["copied"], "up_to_date": summary["up_to_date"], "identity": ident,
                      "removed": summary["removed"], "compiled": sel["compiled"], "notes": sel["notes"],
                      "copy_s": round(time.monotonic() - t0, 2)}

    # Boards copied at once (up to deploy.COPY_AT_ONCE): each has its own USB link and mpremote
    # session, and the copy is most of a flash (about 11 s a board on emulated Picos, one after
    # the other before). A failure is reported once every copy has ended, so the states it
    # lists are final.
    copies = deploy.at_once([lambda i=i: copy_one(i) for i in range(n)], name="flash")
    for i, copy in enumerate(copies):
        e = copy.exception()
        if isinstance(e, _CopyFailed):
            fail(i, str(e))
        elif e is not None:
            raise e
    # Start position 0 last: it creates the token, which should find the others running.
    # Each board that started is a clock for the next one's deadline: a board boots while the
    # boards started before it run the firmware, and on emulated Picos that load slows chip
    # time against wall time (harness.slowness); a real Pico's clock gives 1. So does the ring's own
    # count (clock_rate: an emulated ring's chip time), which the first board has no other
    # measure of: a loaded machine ran its boot at a twentieth of a Pico's speed ("no 'hello'
    # reply within 20.0 s" while it booted).
    index_of = {positions[i]: i for i in range(n)}
    rates = []
    for i in (index_of[p] for p in deploy.start_order(n, protocol)):
        t = targets[i]
        t0 = time.monotonic()
        link = open_link(positions[i], t, tap=tap, clock=clock)
        try:
            restart(link, t)
            ring_rate = [clock_rate()] if clock_rate is not None else []
            results[i]["ver"] = confirm(link, results[i]["config"], fw, confirm_timeout * slowness(rates + ring_rate))
            rates += clock_rates([link], clock=clock)
        except (HarnessError, PortError) as e:
            states[i]["state"] += "; did not start the firmware as configured"
            fail(i, "restarted but not confirmed: %s" % e)
        except Exception as e:
            fail(i, "restart failed: %s" % e)
        finally:
            link.close()
        states[i]["state"] = "flashed and confirmed"
        results[i]["confirm_s"] = round(time.monotonic() - t0, 2)
        log("%s: running firmware %s, position %d of %d, protocol %s" % (t.label(), fw, positions[i], n, protocol))
    return results
