"""picoring bench chip: what the node loop costs on an RP2040, per frame and per token hop,
for every protocol that has a token (HOP_PROTOCOLS; -p P for one).

Runs tests/mp_node_bench.py (a ring of node loops in one MicroPython, wired by in-memory
UART stand-ins with a Pico UART's any() and readinto(buf, n)) on an emulated Pico through
the rp2040 tools' `exec` (upstream MicroPython for the Pico, chip time counted in cycles;
see ../shared/rp2040/README.md; the .py sources), or with --emulated on picoring's own
(the firmware as `picoring flash` puts it on a Pico: .mpy), twice per protocol:

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

# Every registered protocol whose token hops, in the table's order. Left out: d-literal (D as
# printed: NodeD's on_token, so D's hop), random (no token), and the layer's toy (a test
# protocol; `-p toy` still measures it).
HOP_PROTOCOLS = ("s", "q", "d", "sk", "ra", "raymond", "nt", "dag", "bs", "wt")
PROTOCOLS = HOP_PROTOCOLS
# The spec a protocol is benched with, where its defaults would keep its token from hopping in
# the bench's rounds: the wandering token holds it Delta_skip (1 ms) at each node; with skip=0
# a node sends it on in the pass that received it, as S's does.
BENCH_SPEC = {"wt": "wt:skip=0"}
N_BOARDS = 3
MEMORY_SIZES = (16, 32)

# On the chip: main.py's own build() (its last line, main(), left out), for each ring size a
# board at position 0 of that size started as main() starts it, its heap measured after a
# collection, then dropped before the next. loop_bytes: what building and starting the
# protocol node and the node loop allocated; heap_used and heap_free: the whole heap then
# (the modules, and the UART's buffers, which the rp2 port keeps from the first open; the
# modules from .mpy on picoring's own emulated Pico, as flashed, from sources compiled on the
# board with the rp2040 tools' exec, which leaves a little less free).
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
    (exit status, stdout, stderr). timeout_s is chip time (the rp2040 tools: the script's; picoring's
    own emulated Pico: without output). On picoring's own emulated Pico the files go as `picoring
    flash` puts them on a Pico (.mpy, main.py a source: ScriptPico), so the figures are the
    flashed firmware's; the rp2040 tools' exec copies the .py sources, which the board compiles."""
    if rp2040 == EMULATED:
        from ..emulated.script import run_script

        status, out, err, _chip_s = run_script(script_text, firmware_dir, timeout_s=timeout_s)
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


# mp_node_bench.py once per argument list in one exec script (one boot, one upload); each run's
# last line (its JSON, or "no allocation ...") is followed by "RUN END i", a run that raised by
# "RUN FAILED i" and its traceback. The firmware's modules are imported first, each after a
# collection: on the rp2040 tools the board compiles their sources, and node.py's compile needs
# blocks of kilobytes, which the bench's own compiled source and a run's leftovers had cut up (ra's
# runs failed at `import node`, "allocating 4168 bytes"). Imported in mp_node_bench's order, so the
# runs see the modules as before.
RUNS_SCRIPT = r"""
import gc, sys
for name in ('frame', 'protocol', 'node'):
    gc.collect()
    __import__(name)
gc.collect()
SRC = %(src)r
for i, args in enumerate(%(runs)r):
    try:
        exec(SRC, {'BENCH_ARGV': ['mp_node_bench.py', '/'] + args, '__name__': 'mp_node_bench'})
    except Exception as e:
        print('RUN FAILED %%d' %% i)
        sys.print_exception(e, sys.stdout)
    print('RUN END %%d' %% i)
"""


# What mp_node_bench.py imports on the chip besides the protocol's own module (graphs: the
# logical trees and graphs of raymond and dag). Uploading only these: the rp2040 tools copy
# each file through the raw REPL, a minute and more of wall time for the whole firmware.
NODE_BENCH_MODULES = ("node", "protocol", "frame", "hostlink", "graphs")


def node_bench_runs_on_chip(rp2040, runs, firmware_dir=None):
    """mp_node_bench.py with each argument list of runs ([protocol, n, rounds, log, flush, lock|x,
    ...]) in one boot of an emulated Pico: per run, its JSON result, the "no allocation" line,
    or "FAILED: " and the traceback's last line. Only the modules the runs import are uploaded
    (each protocol's, and NODE_BENCH_MODULES)."""
    import shutil

    from ..firmware.protocol import module_name
    from ..ring.deploy import FIRMWARE_DIR

    script = _node_bench_script()
    if script is None:
        raise ChipBenchError("tests/mp_node_bench.py not found (picoring is not installed from its source tree)")
    text = RUNS_SCRIPT % {"src": script.read_text(), "runs": [list(map(str, r)) for r in runs]}
    src = Path(firmware_dir or FIRMWARE_DIR)
    names = set(NODE_BENCH_MODULES) | {module_name(str(r[0]).rsplit("-route", 1)[0]) for r in runs}
    with tempfile.TemporaryDirectory(prefix="picoring-chip-fw-") as up:
        for name in sorted(names):
            shutil.copy(src / (name + ".py"), Path(up, name + ".py"))
        rc, out, err = run_on_chip(rp2040, text, up, timeout_s=120 * len(runs))
    results, lines = [], []
    for ln in out.splitlines():
        if ln.startswith("RUN END "):
            body = [x for x in lines if x.strip()]
            if "RUN FAILED %d" % len(results) in body:
                at = body.index("RUN FAILED %d" % len(results))
                results.append("FAILED: " + (body[-1] if len(body) > at + 1 else "?"))
            elif body and body[-1].startswith("{"):
                results.append(json.loads(body[-1]))
            else:
                results.append(body[-1] if body else "FAILED: no output")
            lines = []
        else:
            lines.append(ln)
    if rc != 0 or len(results) != len(runs):
        raise ChipBenchError("%s on the emulated Pico: exit status %d: %s" % (
            runs[0][0], rc, (err or out).strip()[-600:]))
    return results


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
    (toy, sk, ra, raymond, nt, dag): mp_node_bench.py can route it alone (P-route)."""
    import inspect

    from ..firmware import protocol as fw

    cls = fw.load(protocol)
    give = getattr(cls, "_give", None)
    return (give is not None and bool(cls(0, 2).message_sizes(2))
            and len(inspect.signature(give).parameters) == 2)  # (self, j): bs's takes a lend too


def token_hop(m, routed):
    """(chip us, chip us to the send, how many, what it is) of a protocol's token hop, like for
    like with S's: a pass that took the token in and sent it on as one frame, no critical section
    begun or ended; the whole pass, and the pass up to the frame's send (the hop's own time: what
    follows, the log records and any chores, runs while the token is elsewhere). m: the run with
    its own workload; routed: the P-route run ({} for none)."""
    for run, key, count, how in ((m, "tok", "toks", "token frame in, token frame on"),
                                 (m, "relay", "relays", "token message taken in and sent on"),
                                 (routed, "fwd", "fwds", "token message passed on (protocol not woken)")):
        if run.get(key + "_us") is not None:
            return run[key + "_us"], run.get(key + "_send_us"), run[count], how
    return None, None, 0, "no token hop in the run"


def run(quick=False, log=None, rp2040=None, protocols=PROTOCOLS, n=N_BOARDS, memory=False, firmware_dir=None):
    """firmware_dir: another firmware folder to measure (an older commit's, for a before/after)."""
    tools = EMULATED if rp2040 == EMULATED else find_rp2040(rp2040)
    if tools is None:
        raise ChipBenchError("no emulated Picos: the rp2040 tools (../shared/rp2040) are not on this machine; "
                             "give --rp2040 DIR or set PICORING_RP2040")
    rounds = 200 if quick else 600
    lock_rounds = 400 if quick else 2000
    out = {"boards": n, "rounds": rounds, "memory_sizes": list(MEMORY_SIZES) if memory else [], "protocols": {}}
    for p in protocols:
        spec = BENCH_SPEC.get(p, p)
        routes = token_is_a_message(p)
        runs = [[spec, n, rounds, 1, 1], [spec, n, lock_rounds, 1, 1, "lock"]]
        if routes:  # the token routed alone: a hop passed on, the hop that delivers it
            runs += [[spec + "-route", n, rounds, 1, 1], [spec + "-route", n, lock_rounds, 1, 1, "lock"]]
        if log:
            log("bench chip: %s, %d runs on an emulated Pico (measured, %d rounds under heap_lock%s)"
                % (spec, len(runs), lock_rounds, "; the token routed alone, both" if routes else ""))
        res = node_bench_runs_on_chip(tools, runs, firmware_dir)
        m, locked = res[0], res[1]
        if not isinstance(m, dict):
            raise ChipBenchError("%s on the emulated Pico: %s" % (spec, m))
        routed, routed_locked = {}, None
        if routes:
            if not isinstance(res[2], dict):
                raise ChipBenchError("%s-route on the emulated Pico: %s" % (spec, res[2]))
            routed, routed_locked = res[2], res[3]
        mem = {}
        if memory:
            if log:
                log("bench chip: %s, memory after start at n = %s" % (p, ", ".join(map(str, MEMORY_SIZES))))
            mem = memory_on_chip(tools, p, firmware_dir=firmware_dir)
        hop_us, send_us, hops, how = token_hop(m, routed)
        fwd = routed.get("fwd_us") if routes else m.get("fwd_us")
        out["protocols"][p] = {
            "spec": spec,
            "frames": m["frames"],
            "chip_us_per_frame": round(m["busy_us_per_frame"], 1),
            "chip_us_per_pass": round(m["pass_us"], 1) if m.get("pass_us") is not None else None,
            "passes": m.get("passes", 0),
            "alloc_bytes_per_frame": m["alloc_per_frame"],
            "heap_lock": locked,
            "usb_bytes_per_frame": round(m["host_bytes"] / m["frames"], 1),
            # the token's hop, like for like with S's (token_hop), and a request frame passed on
            "chip_us_per_token_hop": _round(hop_us),
            "chip_us_to_token_send": _round(send_us),
            "token_hops": hops,
            "token_hop": how,
            # a request frame taken in and one frame sent (Q, D at n = 3: the resting token woken and sent)
            "chip_us_per_request_passed_on": _round(m.get("req_us")),
            # the token routed alone: a hop passed on, the hop that delivers it (None: not a message)
            "chip_us_per_routed_hop": _round(fwd),
            "chip_us_per_token_delivered": _round(routed.get("deliver_us")),
            "routed_alloc_bytes": routed.get("alloc_bytes", 0),
            "routed_heap_lock": routed_locked,
            "memory": mem,
        }
    s = out["protocols"].get("s", {})
    # (key, its ratio, S's figure it is held against: the token hop's, or the same to its send)
    for key, to, s_key in (("chip_us_per_token_hop", "token_hop_to_s", "chip_us_per_token_hop"),
                           ("chip_us_to_token_send", "token_send_to_s", "chip_us_to_token_send"),
                           ("chip_us_per_routed_hop", "routed_hop_to_s", "chip_us_per_token_hop"),
                           ("chip_us_per_token_delivered", "token_delivered_to_s", "chip_us_per_token_hop")):
        s_hop = s.get(s_key)
        for r in out["protocols"].values():
            h = r[key]
            r[to] = round(h / s_hop, 3) if h is not None and s_hop else None
    rows = out["protocols"].values()
    out["ok"] = all(r["alloc_bytes_per_frame"] == 0 and r["routed_alloc_bytes"] == 0
                    and _locked_ok(r["heap_lock"]) and (r["routed_heap_lock"] is None or _locked_ok(r["routed_heap_lock"]))
                    for r in rows)
    return out


def _locked_ok(line):
    return isinstance(line, str) and line.startswith("no allocation")


def _round(x):
    return None if x is None else round(x, 1)


def _us(x):
    return "-" if x is None else "%.1f" % x


def _lock_text(r):
    ok = _locked_ok(r["heap_lock"]) and (r.get("routed_heap_lock") is None or _locked_ok(r["routed_heap_lock"]))
    if ok:
        return "ok"
    return r["heap_lock"] if not _locked_ok(r["heap_lock"]) else "routed: %s" % r["routed_heap_lock"]


def print_table(result, console=None):
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = Table(title="node loop on an emulated RP2040 (rp2 port, chip time): %d boards in one chip, in-memory wires"
                    % result["boards"])
    for col in ("protocol", "token hop, chip us", "to S's", "up to its send", "to S's", "the token hop",
                "token passed on, routed", "to S's",
                "token delivered", "to S's", "request in, one frame out", "chip us per frame", "heap bytes per frame",
                "under heap_lock", "USB bytes per frame"):
        t.add_column(col, justify="left" if col in ("protocol", "the token hop", "under heap_lock") else "right")

    def ratio(x):
        return "-" if x is None else "%.3f" % x

    for p, r in result["protocols"].items():
        t.add_row(r.get("spec", p),
                  _us(r.get("chip_us_per_token_hop")) + (" (%d)" % r["token_hops"] if r.get("token_hops") else ""),
                  ratio(r.get("token_hop_to_s")), _us(r.get("chip_us_to_token_send")), ratio(r.get("token_send_to_s")),
                  r.get("token_hop", "-"),
                  _us(r.get("chip_us_per_routed_hop")), ratio(r.get("routed_hop_to_s")),
                  _us(r.get("chip_us_per_token_delivered")), ratio(r.get("token_delivered_to_s")),
                  _us(r.get("chip_us_per_request_passed_on")), "%.1f" % r["chip_us_per_frame"],
                  "%g" % r["alloc_bytes_per_frame"], _lock_text(r), "%.1f" % r["usb_bytes_per_frame"])
    console.print(t)
    console.print("Token hop: the loop passes that took the token in and sent it on as one frame, no critical "
                  "section begun or ended (count in brackets), as S's token hop; for a token that only travels to "
                  "the node it is sent to (sk, ra, nt, dag) the hop that passes it on. Up to its send: the same "
                  "passes timed to the end of the frame's write, the hop's own time (the log records and any "
                  "chores after it run while the token is elsewhere). Routed (P-route: the token "
                  "sent alone to the node behind its holder): a node between passes it on without waking its "
                  "protocol, the last one delivers it (the protocol takes it in, nobody waits). Request in, one "
                  "frame out: Q and D at n = 3, the resting token woken by a request and sent on. Chip us per frame: every pass that did work (Q, D, the message protocols: under the "
                  "adversarial workload, critical sections included) divided by the frames sent. All include the "
                  "logging and the in-memory wire's copy; under heap_lock: hundreds of rounds with the heap locked "
                  "(also the routed token's).")
    sizes = result.get("memory_sizes", [])
    if not sizes:
        return
    m = Table(title="a board's heap after start (main.py's build, UART, node loop)")
    m.add_column("protocol")
    m.add_column("chip us per routed hop passed on", justify="right")
    for n in sizes:
        m.add_column("n=%d: node loop / heap used / free, bytes" % n, justify="right")
    for p, r in result["protocols"].items():
        mem = r.get("memory", {})
        m.add_row(p, _us(r.get("chip_us_per_routed_hop")),
                  *["%d / %d / %d" % (mem[n]["loop_bytes"], mem[n]["heap_used"], mem[n]["heap_free"]) if n in mem
                    else "-" for n in sizes])
    console.print(m)


def main(args):
    from .common import run_command

    try:
        # -p: one spec or several, ";"-joined by the command's check (cli/common.py)
        protocols = tuple(args.protocol.split(";")) if getattr(args, "protocol", None) else PROTOCOLS
        n = getattr(args, "n", None) or N_BOARDS
        where = EMULATED if getattr(args, "emulated", False) else getattr(args, "rp2040", None)
        memory = getattr(args, "memory", False)
        return run_command(args, lambda quick, log: run(quick, log, where, protocols, n, memory), print_table)
    except ChipBenchError as e:
        print("picoring bench chip: %s" % e)
        return 2
