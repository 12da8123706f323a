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
messages and the token travel n - 1 hops. The whole-ring figures on real wires come from
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


def run_on_chip(rp2040, script_text, firmware_dir, timeout_s=120):
    """Run a script on one emulated Pico with the firmware's files uploaded; returns
    (exit status, stdout, stderr). timeout_s is chip time."""
    with tempfile.TemporaryDirectory(prefix="picoring-chip-") as tmp:
        script = Path(tmp, "chip_script.py")
        script.write_text(script_text)
        p = subprocess.run([str(rp2040 / "exec"), str(script), "--upload", str(firmware_dir),
                            "--timeout", str(timeout_s)], capture_output=True, text=True, timeout=1800)
    return p.returncode, p.stdout, p.stderr


def node_bench_on_chip(rp2040, protocol, rounds, lock=False, firmware_dir=None):
    """One mp_node_bench run on an emulated Pico: its JSON result, or for lock=True the
    line that says nothing was allocated (ChipBenchError with the traceback otherwise)."""
    from ..ring.deploy import FIRMWARE_DIR

    script = _node_bench_script()
    if script is None:
        raise ChipBenchError("tests/mp_node_bench.py not found (picoring is not installed from its source tree)")
    argv = ["", "/", protocol, str(N_BOARDS), str(rounds), "1", "1"] + (["lock"] if lock else [])
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


def run(quick=False, log=None, rp2040=None, protocols=PROTOCOLS):
    tools = find_rp2040(rp2040)
    if tools is None:
        raise ChipBenchError("no emulated Picos: the rp2040 tools (../shared/rp2040) are not on this machine; "
                             "give --rp2040 DIR or set PICORING_RP2040")
    rounds = 200 if quick else 600
    lock_rounds = 400 if quick else 2000
    out = {"boards": N_BOARDS, "rounds": rounds, "protocols": {}}
    for p in protocols:
        if log:
            log("bench chip: %s, measuring on an emulated Pico" % p)
        m = node_bench_on_chip(tools, p, rounds)
        if log:
            log("bench chip: %s, %d rounds under heap_lock" % (p, lock_rounds))
        try:
            locked = node_bench_on_chip(tools, p, lock_rounds, lock=True)
        except ChipBenchError as e:
            locked = "FAILED: %s" % e
        out["protocols"][p] = {
            "frames": m["frames"],
            "chip_us_per_frame": round(m["busy_us_per_frame"], 1),
            "chip_us_per_pass": round(m["pass_us"], 1) if m.get("pass_us") is not None else None,
            "passes": m.get("passes", 0),
            "alloc_bytes_per_frame": m["alloc_per_frame"],
            "heap_lock": locked,
            "usb_bytes_per_frame": round(m["host_bytes"] / m["frames"], 1),
        }
    rows = out["protocols"].values()
    out["ok"] = all(r["alloc_bytes_per_frame"] == 0 and r["heap_lock"].startswith("no allocation") for r in rows)
    return out


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
    console.print("chip us per frame: the loop passes that did work (receive, protocol, forward, log; for Q and D "
                  "also the critical sections) divided by the frames sent. Passed on: the passes that forwarded one "
                  "frame (token or request message) and began or ended no critical section, as a Pico spends them "
                  "(count in brackets). Both include the in-memory wire's copy; under heap_lock: thousands of frames "
                  "with the heap locked.")


def main(args):
    from .common import run_command

    try:
        return run_command(args, lambda quick, log: run(quick, log, getattr(args, "rp2040", None)), print_table)
    except ChipBenchError as e:
        print("picoring bench chip: %s" % e)
        return 2
