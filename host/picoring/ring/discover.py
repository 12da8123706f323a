"""`picoring discover`: which port sits at which ring position.

Every board sends a probe frame (firmware command `!probe ID`, frame kind 4) on
its UART TX; the firmware of the board wired to that TX answers `!probed ID`
on its USB serial. That gives each board's successor, whatever the boards'
configured positions are: probes are not protocol frames, so a board with a
stale or provisional config answers them too. Boards that do not run the
current firmware with a usable config get it first, with a provisional config
(position = the order given, protocol q, which keeps the token still while we
probe). The order found is saved as a ring file, by USB serial number (virtual
boards by their path), for `flash` and `run`.
"""

import queue
import time

from . import boarddefs
from . import flash as flashmod
from ..clock import WALL
from .link import HarnessError, drain
from .hostlink import encode_command
from .ports import write_ring_file


class WiringError(RuntimeError):
    """The probes show a ring that is not one cycle; the message says which wire to check."""


# A probe window in the boards' time runs at least this fast in wall time: a ring whose pace
# reads 0 (its clock's keeper stands still, or is gone) still ends its window, 100 times late
# at most (link.slowness's bound).
_SLOWEST_PACE = 0.01


def successors(links, timeout=5.0, clock_rate=None):
    """Send one probe from every board at once; returns succ: sender index -> receiver index
    (None when the probe arrived nowhere) and the receivers of every probe.

    timeout counts the boards' time where the ring has a count of its own (clock_rate: an
    emulated ring's chip time, a virtual ring's clock, per wall second; ringrate.py): a probe
    on a machine that leaves the boards' processes waiting to run arrives late, not never
    (a flash's ring check under a loaded suite found a wire that reached "none of the boards")."""
    n = len(links)
    arrivals = {i: [] for i in range(n)}
    inbox = links[0].inbox
    for link in links:
        link.command("ver", timeout=timeout)  # the link answers both ways before any probe is sent
    drain(inbox)
    for i, link in enumerate(links):
        link.write(encode_command("probe", i + 1))
    clock = links[0].clock
    waited = 0.0  # of the boards' time
    last = clock.now()
    acked = set()
    got = 0
    while waited < timeout and (got < n or len(acked) < n):
        try:
            b, _, item = inbox.get(timeout=0.05)
        except queue.Empty:
            item = None
        now = clock.now()
        pace = clock_rate() if clock_rate is not None else None
        waited += (now - last) * (1.0 if pace is None else min(1.0, max(_SLOWEST_PACE, pace)))
        last = now
        if item is None:
            continue
        if isinstance(item, HarnessError):
            raise item
        word = getattr(item, "word", None)
        if word == "probe":
            acked.add(b)
        elif word == "probed":
            try:
                pid = int(item.text.split()[0])
            except (ValueError, IndexError):
                continue
            if 1 <= pid <= n:
                arrivals[pid - 1].append(b)
                got += 1
        elif word == "err":
            raise HarnessError("%s: board error: %s" % (links[b].port, item.text))
    if got >= n and len(acked) == n:
        time.sleep(0.2)  # a probe that arrived twice would show up now (two receivers: a short)
        while True:
            try:
                b, _, item = inbox.get_nowait()
            except queue.Empty:
                break
            if getattr(item, "word", None) == "probed":
                pid = int(item.text.split()[0])
                if 1 <= pid <= n:
                    arrivals[pid - 1].append(b)
    missing_ack = [links[i].port for i in range(n) if i not in acked]
    if missing_ack:
        raise HarnessError("%s did not answer !probe (is its firmware older than %s?)"
                           % (", ".join(missing_ack), flashmod.firmware_version()))
    return arrivals


def ring_order(labels, arrivals, first=0):
    """The ring order (indices) from the probe arrivals, starting at `first`; WiringError if the
    boards do not form one ring."""
    n = len(labels)
    problems = []
    succ = {}
    for i in range(n):
        got = sorted(set(arrivals.get(i, [])))
        if not got:
            problems.append("the TX (GP0) of %s reaches none of the boards: check its wire to the next board's RX "
                            "(GP1), and the common ground" % labels[i])
        elif len(got) > 1:
            problems.append("the TX of %s reaches %d boards (%s): one TX must go to exactly one RX"
                            % (labels[i], len(got), ", ".join(labels[j] for j in got)))
        elif got[0] == i:
            problems.append("%s hears its own TX: its GP0 is wired to its own GP1" % labels[i])
        else:
            succ[i] = got[0]
    preds = {}
    for i, j in succ.items():
        preds.setdefault(j, []).append(i)
    for j, ps in preds.items():
        if len(ps) > 1:
            problems.append("the RX (GP1) of %s hears %s: two TX wires join there" % (labels[j], " and ".join(labels[i] for i in ps)))
    if problems:
        raise WiringError("the boards do not form a ring:\n  " + "\n  ".join(problems))
    order = [first]
    while len(order) < n:
        nxt = succ[order[-1]]
        if nxt == first:
            rest = [labels[i] for i in range(n) if i not in order]
            raise WiringError("the boards form more than one ring: %s is a ring of %d; %s are wired apart from it"
                              % (" -> ".join(labels[i] for i in order + [first]), len(order), ", ".join(rest)))
        order.append(nxt)
    if succ[order[-1]] != first:  # pragma: no cover - a permutation closes
        raise WiringError("the ring does not close at %s" % labels[first])
    return order


def check_ring(targets, timeout=5.0, tap=None, clock=WALL, clock_rate=None):
    """After a flash (positions in the order of targets): every board's probe must reach the
    board at the next position, the last one's the first. Raises WiringError naming each TX
    that goes elsewhere; a TX that reaches none of the boards given most often means a board
    wired into the ring was left out. Returns the seconds it took. timeout, clock_rate: as
    successors takes them."""
    n = len(targets)
    t0 = time.monotonic()
    inbox = queue.Queue()
    links = []
    try:
        links = [flashmod.open_link(i, t, inbox, tap, clock) for i, t in enumerate(targets)]
        arrivals = successors(links, timeout, clock_rate)
    finally:
        for link in links:
            link.close()
    wrong, lost = [], False
    for i in range(n):
        got = sorted(set(arrivals[i]))
        want = (i + 1) % n
        if got == [want]:
            continue
        if not got:
            lost = True
            where = "none of the %d boards given" % n
        else:
            where = " and ".join("%s (position %d)" % (targets[j].label(), j) for j in got)
        wrong.append("the TX of %s (position %d) reaches %s, not %s (position %d)"
                     % (targets[i].label(), i, where, targets[want].label(), want))
    if wrong:
        hint = ("\nIf more boards are wired into the ring than were given, flash them all, in ring order "
                "(picoring discover finds the order and writes ring.json). " if lost else "\n")
        raise WiringError("the boards as given do not form a ring of %d:\n  %s%sCheck the wiring (picoring wiring -n N "
                          "draws it)." % (n, "\n  ".join(wrong), hint))
    return round(time.monotonic() - t0, 2)


SILENT = "silent"  # current_firmware: nothing at all came back
SILENT_GRACE_S = 10.0


def _judge_hello(target, link, fw, deadline, waited_s):
    """None if the board says hello with the current firmware and a usable config before
    deadline, else why not (waited_s: the seconds it has had since its restart, for the text)."""
    try:
        hello = flashmod.wait_hello(link, max(0.2, deadline - link.clock.now()))
    except HarnessError:
        return "no picoring firmware answered within %gs" % waited_s
    if hello.get("fw") != fw:
        return "it runs picoring firmware %s, not %s" % (hello.get("fw"), fw)
    if target.virtual and hello.get("board") != "virtual":
        return "its config is not a virtual board's"
    return None


def current_firmware(targets, links, fw, timeout, clock=WALL):
    """Restart every board; for each, None if it comes up with the current firmware and a
    usable config (its !hello), else why not (a few words)."""
    why = ["it did not restart"] * len(targets)
    restarted = []
    for i, (t, link) in enumerate(zip(targets, links)):
        try:
            flashmod.restart(link, t)
        except Exception:
            continue
        restarted.append(i)
    deadline = clock.now() + timeout  # one wait for all: a board without firmware never says hello
    for i in restarted:
        why[i] = _judge_hello(targets[i], links[i], fw, deadline, timeout)
    # A board without the firmware still says something at a restart (its REPL's banner or
    # prompt); one that has said nothing at all is not judged yet: a port with no board, or a
    # machine too busy to pass its words on (under load a virtual board's pty was silent for
    # more than the 6 s and discover reflashed boards that ran the firmware). Silent ones get
    # SILENT_GRACE_S more, then are SILENT; a virtual board is there by construction.
    grace_end = clock.now() + SILENT_GRACE_S
    for i in restarted:
        if why[i] is not None and not links[i].parser.received:
            why[i] = _judge_hello(targets[i], links[i], fw, grace_end, timeout + SILENT_GRACE_S)
            if why[i] is not None and not links[i].parser.received and not targets[i].virtual:
                why[i] = SILENT
    return why


def discover(targets, board=boarddefs.DEFAULT_BOARD, baud=None, first=0, probe_timeout=5.0, hello_timeout=6.0,
             reflash="auto", tap=None, log=None, clock=WALL, clock_rate=None):
    """Find the ring order of targets. Returns (ordered targets, info dict). Boards that do not
    answer with the current firmware get it with a provisional config (said on log); a port
    where nothing at all answers within hello_timeout is an error before anything is flashed.
    clock: what the waits on the boards count (picoring.clock); clock_rate: the ring's own
    count, for the probes' window (successors)."""
    log = log or (lambda text: None)
    n = len(targets)
    flashmod.plan(targets)
    for t in targets:
        flashmod.check_port(t)
    fw = flashmod.firmware_version()
    info = {"reflashed": False}
    t0 = time.monotonic()
    links = []
    try:
        inbox = queue.Queue()
        links = [flashmod.open_link(i, t, inbox, tap, clock) for i, t in enumerate(targets)]
        if reflash == "auto":
            why = current_firmware(targets, links, fw, hello_timeout, clock)
        else:
            why = [None if reflash is False else "asked to (--reflash)"] * n
        silent = [t.label() for t, reason in zip(targets, why) if reason == SILENT]
        if silent:
            raise HarnessError("%s: no board answered within %gs (nothing at all came back after a restart): is a "
                               "board plugged in there (picoring boards lists them), and does its program stop on "
                               "Ctrl-C?" % (", ".join(silent), hello_timeout + SILENT_GRACE_S))
        if any(why):
            for link in links:
                link.close()
            links = []
            log("%s.\nSo discover flashes picoring firmware %s with a provisional config (protocol q, positions in "
                "the order given) to all %d board(s), so that they answer probes; `picoring flash` writes the real "
                "config afterwards." % ("; ".join("%s: %s" % (t.label(), r) for t, r in zip(targets, why) if r), fw, n))
            flashmod.flash(targets, "q", baud=baud, board=board, tap=tap, log=log, clock=clock)
            info["reflashed"] = True
            inbox = queue.Queue()
            links = [flashmod.open_link(i, t, inbox, tap, clock) for i, t in enumerate(targets)]
        info["prepare_s"] = round(time.monotonic() - t0, 2)
        t1 = time.monotonic()
        arrivals = successors(links, probe_timeout, clock_rate)
        info["probe_s"] = round(time.monotonic() - t1, 2)
    finally:
        for link in links:
            link.close()
    order = ring_order([t.label() for t in targets], arrivals, first)
    info["seconds"] = round(time.monotonic() - t0, 2)
    return [targets[i] for i in order], info


def save(path, ordered, board):
    return write_ring_file(path, ordered, {"board": board})


