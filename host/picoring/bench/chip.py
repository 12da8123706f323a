"""picoring bench chip: what the node loop costs on an RP2040, per frame, for S, Q and D.

Runs tests/mp_node_bench.py (a ring of node loops in one MicroPython, wired by in-memory
UART stand-ins with a Pico UART's any() and readinto(buf, n)) on an emulated Pico through
the rp2040 tools' `exec` (upstream MicroPython for the Pico, chip time counted in cycles;
see ../shared/rp2040/README.md), twice per protocol:

1. measured: chip microseconds per frame spent in passes that did work (receive, protocol,
   forward, log), and heap bytes allocated per frame with the collector off;
2. under micropython.heap_lock(): thousands of frames forwarded and logged must raise no
   MemoryError (an allocation would).

S keeps its token moving without requests; Q and D get the adversarial workload (a request
at the node behind the resting token whenever the ring is quiet), so both the request
messages and the token travel n - 1 hops; so do the protocols of messages (toy, sk, ra: a
broadcast round and the token routed n - 1 hops). For a protocol whose token is a message
(its node sends it with _give(j)) a third run routes the resting token alone to the node
behind it: the chip time of a hop that only passes the token on (its protocol not woken),
and of the hop that delivers it (the protocol takes the token's arrays in). Last, the heap
a board uses after start (main.py's build(), the UART and the node loop, started) for
rings of MEMORY_SIZES boards. The whole-ring figures on real wires come from
../shared/rp2040/bench (hop rate and turnaround against a minimal relay).
"""

import json
import os
import subprocess
import tempfile
from pathlib import Path

from .ring import _node_bench_script

PROTOCOLS = ("s", "q", "d")
N_BOARDS = 3
MEMORY_SIZES = (16, 32)

# On the chip: main.py's own build() (its last line, main(), left out), for each ring size a
# board at position 0 of that size started as main() starts it, its heap measured after a
# collection, then dropped before the next. loop_bytes: what building and starting the
# protocol node and the node loop allocated; heap_used and heap_free: the whole heap then
# (the modules, imported from sources compiled on the board, and the UART's buffers, which
# the rp2 port keeps from the first open: .mpy files would leave a little more free).
MEMORY_SCRIPT = r"""
import gc, json
src = open('main.py').read()
g = {'__name__': 'picoring_main'}
exec(src[:src.rindex('main()')], g)
import hal, hal_rp2, node, protocol
protocol.load(%(protocol)r)  # every module a board imports, before the first measure
out = {}
for n in %(sizes)r:
    cfg = g['check_config']({'position': 0, 'size': n, 'protocol': %(protocol)r, 'baud': 1000000})
    board = hal.open_board(cfg)
    gc.collect()
    a0 = gc.mem_alloc()
    loop = g['build'](cfg, board)
    loop.start(boot=True)
    gc.collect()
    out[n] = {'loop_bytes': gc.mem_alloc() - a0, 'heap_used': gc.mem_alloc(), 'heap_free': gc.mem_free()}
    loop = board = None
    gc.collect()
print('MEMORY ' + json.dumps(out))
"""


class ChipBenchError(RuntimeError):
    pass


def find_rp2040(explicit=None):
    """The rp2040 tools' folder: --rp2040, $PICORING_RP2040, or ../shared/rp2040 beside
    the source tree. None when there is none (no emulated Picos on this machine)."""
    for cand in (explicit, os.environ.get("PICORING_RP2040")):
        if cand:
            path = Path(cand)
            if not (path / "exec").is_file():
                raise ChipBenchError("%s: not the rp2040 tools (no exec command in it)" % path)
            return path
    here = Path(__file__).resolve()
    for parent in here.parents:
        cand = parent.parent / "shared" / "rp2040"
        if (cand / "exec").is_file():
            return cand
    return None


EMULATED = "emulated"  # rp2040: picoring's own emulated Pico (picoring.emulated), not the rp2040 tools


def run_on_chip(rp2040, script_text, firmware_dir, timeout_s=120):
    """Run a script on one emulated Pico with the firmware's files uploaded; returns
    (exit status, stdout, stderr). timeout_s is chip time (the rp2040 tools; picoring's own
    emulated Pico takes it as wall seconds without output)."""
    if rp2040 == EMULATED:
        from ..emulated.script import run_script

        status, out, err, _chip_s = run_script(script_text, firmware_dir, timeout_s=max(timeout_s, 600))
        return status, out, err
    with tempfile.TemporaryDirectory(prefix="picoring-chip-") as tmp:
        script = Path(tmp, "chip_script.py")
        script.write_text(script_text)
        p = subprocess.run([str(rp2040 / "exec"), str(script), "--upload", str(firmware_dir),
                            "--timeout", str(timeout_s)], capture_output=True, text=True, timeout=1800)
    return p.returncode, p.stdout, p.stderr


def node_bench_on_chip(rp2040, protocol, rounds, lock=False, firmware_dir=None, n=N_BOARDS):
    """One mp_node_bench run on an emulated Pico: its JSON result, or for lock=True the
    line that says nothing was allocated (ChipBenchError with the traceback otherwise).
    protocol: a registered one, or P-route (mp_node_bench.py: the token routed alone)."""
    from ..ring.deploy import FIRMWARE_DIR

    script = _node_bench_script()
    if script is None:
        raise ChipBenchError("tests/mp_node_bench.py not found (picoring is not installed from its source tree)")
    argv = ["", "/", protocol, str(n), str(rounds), "1", "1"] + (["lock"] if lock else [])
    text = "BENCH_ARGV = %r\n" % argv + script.read_text()
    rc, out, err = run_on_chip(rp2040, text, firmware_dir or FIRMWARE_DIR)
    if rc != 0:
        raise ChipBenchError("%s on the emulated Pico: exit status %d: %s" % (
            protocol, rc, (err or out).strip()[-600:]))
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if lock:
        if not lines or not lines[-1].startswith("no allocation"):
            raise ChipBenchError("%s under heap_lock: unexpected output %r" % (protocol, out[-300:]))
        return lines[-1]
    return json.loads(lines[-1])


def memory_on_chip(rp2040, protocol, sizes=MEMORY_SIZES, firmware_dir=None):
    """The heap a board running `protocol` uses after start, per ring size: {n: {loop_bytes
    (the protocol node and the node loop, started), heap_used, heap_free}}."""
    from ..ring.deploy import FIRMWARE_DIR

    rc, out, err = run_on_chip(rp2040, MEMORY_SCRIPT % {"sizes": tuple(sizes), "protocol": protocol},
                               firmware_dir or FIRMWARE_DIR)
    lines = [ln for ln in out.splitlines() if ln.startswith("MEMORY ")]
    if rc != 0 or not lines:
        raise ChipBenchError("%s: memory after start on the emulated Pico: exit status %d: %s" % (
            protocol, rc, (err or out).strip()[-600:]))
    return {int(k): v for k, v in json.loads(lines[-1][7:]).items()}


def token_is_a_message(protocol):
    """True for a protocol whose token travels as a message its node sends with _give(j)
    (toy, sk, ra): mp_node_bench.py can route it alone (P-route)."""
    from ..firmware import protocol as fw

    cls = fw.load(protocol)
    return hasattr(cls, "_give") and bool(cls(0, 2).message_sizes(2))


def run(quick=False, log=None, rp2040=None, protocols=PROTOCOLS, n=N_BOARDS):
    tools = EMULATED if rp2040 == EMULATED else find_rp2040(rp2040)
    if tools is None:
        raise ChipBenchError("no emulated Picos: the rp2040 tools (../shared/rp2040) are not on this machine; "
                             "give --rp2040 DIR or set PICORING_RP2040")
    rounds = 200 if quick else 600
    lock_rounds = 400 if quick else 2000
    out = {"boards": n, "rounds": rounds, "memory_sizes": list(MEMORY_SIZES), "protocols": {}}
    for p in protocols:
        if log:
            log("bench chip: %s, measuring on an emulated Pico" % p)
        m = node_bench_on_chip(tools, p, rounds, n=n)
        if log:
            log("bench chip: %s, %d rounds under heap_lock" % (p, lock_rounds))
        try:
            locked = node_bench_on_chip(tools, p, lock_rounds, lock=True, n=n)
        except ChipBenchError as e:
            locked = "FAILED: %s" % e
        routed = {}
        if token_is_a_message(p):
            if log:
                log("bench chip: %s, the token routed alone" % p)
            routed = node_bench_on_chip(tools, p + "-route", rounds, n=n)
        if log:
            log("bench chip: %s, memory after start at n = %s" % (p, ", ".join(map(str, MEMORY_SIZES))))
        memory = memory_on_chip(tools, p)
        out["protocols"][p] = {
            "frames": m["frames"],
            "chip_us_per_frame": round(m["busy_us_per_frame"], 1),
            "chip_us_per_pass": round(m["pass_us"], 1) if m.get("pass_us") is not None else None,
            "passes": m.get("passes", 0),
            "alloc_bytes_per_frame": m["alloc_per_frame"],
            "heap_lock": locked,
            "usb_bytes_per_frame": round(m["host_bytes"] / m["frames"], 1),
            # the token routed alone: a hop passed on, the hop that delivers it (None: not a message)
            "chip_us_per_routed_hop": _round(routed.get("fwd_us")),
            "chip_us_per_token_delivered": _round(routed.get("deliver_us")),
            "routed_alloc_bytes": routed.get("alloc_bytes", 0),
            "memory": memory,
        }
    rows = out["protocols"].values()
    out["ok"] = all(r["alloc_bytes_per_frame"] == 0 and r["routed_alloc_bytes"] == 0
                    and r["heap_lock"].startswith("no allocation") for r in rows)
    return out


def _round(x):
    return None if x is None else round(x, 1)


def print_table(result, console=None):
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = Table(title="node loop on an emulated RP2040 (rp2 port, chip time): %d boards in one chip, in-memory wires"
                    % result["boards"])
    for col in ("protocol", "frames", "chip us per frame", "chip us per frame passed on", "heap bytes per frame",
                "under heap_lock", "USB bytes per frame"):
        t.add_column(col, justify="right" if col != "under heap_lock" else "left")
    for p, r in result["protocols"].items():
        per_pass = "-" if r["chip_us_per_pass"] is None else "%.1f (%d)" % (r["chip_us_per_pass"], r["passes"])
        t.add_row(p, str(r["frames"]), "%.1f" % r["chip_us_per_frame"], per_pass, "%g" % r["alloc_bytes_per_frame"],
                  "ok" if r["heap_lock"].startswith("no allocation") else r["heap_lock"],
                  "%.1f" % r["usb_bytes_per_frame"])
    console.print(t)
    sizes = result.get("memory_sizes", [])
    m = Table(title="the token routed alone, and a board's heap after start (main.py's build, UART, node loop)")
    m.add_column("protocol")
    m.add_column("chip us per routed hop passed on", justify="right")
    m.add_column("chip us per token delivered", justify="right")
    for n in sizes:
        m.add_column("n=%d: node loop / heap used / free, bytes" % n, justify="right")
    for p, r in result["protocols"].items():
        mem = r.get("memory", {})
        m.add_row(p, "-" if r.get("chip_us_per_routed_hop") is None else "%.1f" % r["chip_us_per_routed_hop"],
                  "-" if r.get("chip_us_per_token_delivered") is None else "%.1f" % r["chip_us_per_token_delivered"],
                  *["%d / %d / %d" % (mem[n]["loop_bytes"], mem[n]["heap_used"], mem[n]["heap_free"]) if n in mem
                    else "-" for n in sizes])
    console.print(m)
    console.print("chip us per frame: the loop passes that did work (receive, protocol, forward, log; for Q and D "
                  "also the critical sections) divided by the frames sent. Passed on: the passes that forwarded one "
                  "frame (token or request message) and began or ended no critical section, as a Pico spends them "
                  "(count in brackets). Both include the in-memory wire's copy; under heap_lock: thousands of frames "
                  "with the heap locked.")


def main(args):
    from .common import run_command

    try:
        protocols = (args.protocol,) if getattr(args, "protocol", None) else PROTOCOLS
        n = getattr(args, "n", None) or N_BOARDS
        where = EMULATED if getattr(args, "emulated", False) else getattr(args, "rp2040", None)
        return run_command(args, lambda quick, log: run(quick, log, where, protocols, n), print_table)
    except ChipBenchError as e:
        print("picoring bench chip: %s" % e)
        return 2
