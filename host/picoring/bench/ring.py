"""`picoring bench ring`: how fast the real firmware moves a token on a virtual ring.

Four measurements, all on this machine:

1. firmware ring: n = 5 virtual boards with the real firmware
   deployed the real way (deploy.deploy_virtual: mpremote over the boards' USB
   ptys), protocol S (the token circulates without requests, forever). Token
   hops per second = the boards' `!status` tx_frames summed over the ring,
   before and after an interval, over the host time between the two status
   rounds (cross-checked with the relay's wire byte counters). Event logging
   to the host off (`!log 0`) and on (`!log 1`): with it on, the host reads
   every board's event lines through the harness's own BoardLink (pyserial +
   LineParser, one reader thread per board) and counts lost events.
   At 115200 baud the wire bounds the rate (a 12-byte token frame, firmware/frame.py TOKEN_WIRE: 1.04 ms);
   at higher bauds the wire is no longer the limit.
2. minimal ring: the same kind of ring at the same baud, each board running the
   least MicroPython can do per hop (wait in poll, read a whole token frame
   from its UART pty, write it on). Same relay, same pacing: the ratio
   firmware / minimal is the cost of the firmware itself.
3. direct pair ("the limit"): two MicroPython processes bouncing a token
   frame over one pty pair, no relay, no pacing: the raw hop rate of a minimal
   two-process pty relay on this machine. ratio = firmware ring (log off, the
   highest baud measured) / direct pair.
4. node loop: tests/mp_node_bench.py under the micropython binary (in-memory
   stand-in wires, no I/O): time per message in NodeLoop.step() and bytes
   allocated per message in steady state, with logging off and on, on a
   Pico-like heap (-X heapsize=320k: the 64-bit port compiles the sources), plus a micropython.heap_lock() run that
   names the first allocation in the steady state, if any.

For each ring, where a hop's time goes, from the relay's own counts over the same intervals
(docs/virtual.md): how late it delivered each frame's end after the frame's last bit, and each
board's turnaround, from a frame's delivery to its next write (p50 and p99).

Both rings run as `run --virtual` runs its ring: in a process of their own (a supervisor,
virtual/remote.py), so the relay's figures are that process's CPU (relay and USB threads).

Rates are medians of repeated intervals (log on and off interleaved); the
machine is shared and noisy, so read ratios and medians, not single figures.
"""

import json
import os
import platform
import queue
import select
import statistics
import subprocess
import sys
import tempfile
import time
import tty
from pathlib import Path

from ..firmware.frame import TOKEN_WIRE, Encoder
from ..virtual.wire import histogram_percentile, histogram_since
from ..ring.deploy import FIRMWARE_DIR

COUNTER_MASK = 0x3FFFFFFF  # firmware counters wrap at 2**30 (docs/hostlink.md)
FRAME_BYTES = TOKEN_WIRE  # a token frame on the wire (docs/frames.md): the relay moves frames this long
BITS_PER_BYTE = 10
N_BOARDS = 5
# (quick, full)
BAUDS = ((1_000_000,), (115_200, 1_000_000, 100_000_000))
INTERVAL_S = (0.5, 0.75)
REPEATS = (1, 3)
NODE_ROUNDS = (400, 2000)  # mp_node_bench rounds (n = 5: about 5 messages a round)
NODE_REPEATS = (1, 3)
# The unix port's heap for the node loop: of a Pico's order, but this port is 64-bit and compiles the
# firmware from source (a Pico loads .mpy files), so the same firmware needs more; 192k stopped
# building it once the 12-byte token's codec grew frame.py, 256k once the firmware's names outgrew
# a qstr pool (as tests/test_board_micropython.py's BOARD_HEAP). A Pico's own heap is measured on
# the emulated chip (bench chip, tests/test_rp2040.py).
PICO_HEAP = "320k"
SETTLE_S = 0.25  # after switching logging or starting a ring, before an interval starts

# The minimal relay, in MicroPython: nothing but wait, read a whole frame, write it on.
# Store-and-forward like the firmware (it decodes a whole frame before forwarding);
# a byte-by-byte relay would pipeline a frame through all boards at once.
MINIMAL_RELAY = r'''
# Minimal relay (picoring bench ring): wait in poll (as the firmware's idle
# does on a virtual board), read until a whole token frame is in, write it on.
import select
import sys
import termios
import time

FRAME = @FRAME@  # a token frame of the firmware's (picoring bench ring fills it in)
FRAME_LEN = len(FRAME)


def run(path, first, secs):
    if path == "-":  # stdin/stdout (one end of a pty pair)
        rx = sys.stdin.buffer
        tx = sys.stdout.buffer
        src = sys.stdin
    elif isinstance(path, list):  # a virtual ring's UART fds, RX and TX, read as the firmware does
        import hal_unix  # (its RX comes in timed records: PipeUart)

        rx = tx = hal_unix.PipeUart(path[0], path[1])
        src = rx.fileno()
        sys.stdout.write("!ready\n")
    else:  # a pty slave, raw, VMIN=0 VTIME=0: reads never block (as firmware/hal_unix.py)
        f = open(path, "r+b")
        fd = f.fileno()
        termios.setraw(fd)
        a = termios.tcgetattr(fd)
        a[6][6] = 0
        a[6][5] = 0
        termios.tcsetattr(fd, termios.TCSANOW, a)
        rx = tx = f
        src = fd
        sys.stdout.write("!ready\n")
    p = select.poll()
    p.register(src, select.POLLIN)
    ipoll = p.ipoll
    buf = bytearray(FRAME_LEN)
    mv = memoryview(buf)
    parts = [mv[k:] for k in range(FRAME_LEN)]
    rd = rx.readinto
    wr = tx.write
    have = 0
    frames = 0
    if first:
        time.sleep(0.2)  # let the other end start
        wr(FRAME)
    t0 = time.ticks_us()
    while True:
        for _ in ipoll(1):
            break
        n = rd(parts[have])
        if n:
            have += n
            if have < FRAME_LEN:
                continue
            have = 0
            wr(buf)
            frames += 1
            if secs and frames & 63 == 0 and time.ticks_diff(time.ticks_us(), t0) >= secs * 1000000:
                break
    sys.stderr.write("%d %d\n" % (frames, time.ticks_diff(time.ticks_us(), t0)))


if __name__ == "__main__":
    run(sys.argv[1], sys.argv[2] == "1", float(sys.argv[3]) if len(sys.argv) > 3 else 0)
'''.replace("@FRAME@", repr(bytes(Encoder().token(1, 0, 1, 1))))


class BenchError(RuntimeError):
    pass


# -- CPU accounting ------------------------------------------------------------

_CLK_TCK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_s(stat_path):
    """utime + stime of a process or thread from /proc (seconds), or None."""
    try:
        with open(stat_path) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK
    except (OSError, IndexError, ValueError):
        return None


def _pid_cpu(pids):
    vals = [_cpu_s("/proc/%d/stat" % p) for p in pids if p]
    return None if any(v is None for v in vals) else sum(vals)


def _thread_cpu(threads):
    vals = []
    for t in threads:
        tid = getattr(t, "native_id", None)
        if tid is None:
            return None
        vals.append(_cpu_s("/proc/self/task/%d/stat" % tid))
    return None if any(v is None for v in vals) else sum(vals)


def _delta(a, b):
    return None if a is None or b is None else b - a


def _per_hop_us(cpu, hops):
    return None if cpu is None or not hops else cpu / hops * 1e6


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


# -- 1. the firmware ring ------------------------------------------------------

def _hop_timing(status):
    """The relay's lateness histograms (all wires) and the boards' turnaround histograms, as
    sparse readings, from a ring's status: read at an interval's ends (_hop_split)."""
    return ([w.get("lateness_us", []) for w in status["wires"]],
            [b.get("turnaround_us", []) for b in status["boards"]])


def _hop_split(a, b, into):
    """Add what the ring counted between timing readings a and b to `into`
    ({"lateness": {bucket: count}, "turnaround": {...}}), summed over wires and boards."""
    for key, before, after in (("lateness", a[0], b[0]), ("turnaround", a[1], b[1])):
        counts = into.setdefault(key, {})
        for x, y in zip(before, after):
            for k, c in histogram_since(y, x).items():
                counts[k] = counts.get(k, 0) + c


def _hop_percentiles(split):
    """{"lateness_us": {"p50": .., "p99": ..}, "turnaround_us": {...}}: upper ends of the buckets."""
    return {key + "_us": {"p50": histogram_percentile(split.get(key, {}), 0.5),
                          "p99": histogram_percentile(split.get(key, {}), 0.99),
                          "count": sum(split.get(key, {}).values())}
            for key in ("lateness", "turnaround")}


def firmware_ring(baud, n=N_BOARDS, interval=1.0, repeats=3, log=None):
    from ..ring import deploy
    from ..ring.link import BoardLink, drain
    from ..ring.hostlink import encode_command
    from ..virtual.remote import RemoteRing

    out = {"baud": baud, "n": n, "wire_limit_hops_per_s": baud / (BITS_PER_BYTE * FRAME_BYTES)}
    with RemoteRing(n, baud=baud) as ring:
        t0 = time.monotonic()
        deploy.deploy_virtual(ring, {"protocol": "s", "cs_us": 0})  # one fresh token: board 0 starts last
        out["setup_s"] = round(time.monotonic() - t0, 2)
        inbox = queue.Queue()
        links = []
        try:
            for i, b in enumerate(ring.boards):
                links.append(BoardLink(i, b.usb_path, inbox, n, clock=ring.clock).open())
            pids = [b.pid for b in ring.boards]
            readers = [lk._thread for lk in links]

            def snapshot():
                for lk in links:
                    lk.write(encode_command("status"))
                replies = [lk.wait_reply("status") for lk in links]
                st = ring.status()
                return {
                    "t": sum(t for t, _ in replies) / len(replies) / 1e6,
                    "tx": [r.fields["tx_frames"] for _, r in replies],
                    "rx": sum(r.fields["rx_frames"] for _, r in replies),
                    "bad": sum(r.fields["bad"] for _, r in replies),
                    "errors": sum(r.fields["errors"] for _, r in replies),
                    "dropped": sum(r.fields["dropped"] for _, r in replies),
                    "wire": sum(w["bytes_out"] for w in st["wires"]),
                    "usb_dropped": sum(b["usb_dropped"] for b in st["boards"]),
                    "events": sum(lk.parser.events for lk in links),
                    "missing": sum(lk.parser.missing for lk in links),
                    "board_cpu": _pid_cpu(pids),
                    "relay_cpu": _pid_cpu([ring.supervisor_pid]),
                    "reader_cpu": _thread_cpu(readers),
                    "timing": _hop_timing(st),
                }

            samples = {"off": [], "on": []}
            splits = {"off": {}, "on": {}}
            for r in range(repeats):
                for mode in (("off", "on") if r % 2 == 0 else ("on", "off")):
                    for lk in links:
                        lk.command("log", 1 if mode == "on" else 0)
                    time.sleep(SETTLE_S)
                    drain(inbox)
                    a = snapshot()
                    time.sleep(interval)
                    b = snapshot()
                    drain(inbox)
                    dt = b["t"] - a["t"]
                    _hop_split(a["timing"], b["timing"], splits[mode])
                    # the boards' counters wrap at 2**30 (no long ints on a Pico)
                    hops = sum((y - x) & COUNTER_MASK for x, y in zip(a["tx"], b["tx"]))
                    s = {
                        "seconds": round(dt, 4),
                        "hops": hops,
                        "hops_per_s": hops / dt,
                        "wire_hops_per_s": (b["wire"] - a["wire"]) / FRAME_BYTES / dt,
                        "events_to_host": b["events"] - a["events"],
                        "events_lost": (b["missing"] - a["missing"]) + (b["dropped"] - a["dropped"]),
                        "usb_bytes_dropped": b["usb_dropped"] - a["usb_dropped"],
                        "bad_frames": b["bad"] - a["bad"],
                        "protocol_errors": b["errors"] - a["errors"],
                        "board_cpu_us_per_hop": _per_hop_us(_delta(a["board_cpu"], b["board_cpu"]), hops),
                        "relay_cpu_us_per_hop": _per_hop_us(_delta(a["relay_cpu"], b["relay_cpu"]), hops),
                        "reader_cpu_us_per_hop": _per_hop_us(_delta(a["reader_cpu"], b["reader_cpu"]), hops),
                    }
                    cpu = [_delta(a[k], b[k]) for k in ("board_cpu", "relay_cpu", "reader_cpu")]
                    s["cores_busy"] = None if None in cpu else sum(cpu) / dt
                    samples[mode].append(s)
                    if log:
                        log("firmware ring %d baud, log %s: %.0f hops/s" % (baud, mode, s["hops_per_s"]))
        finally:
            for lk in links:
                lk.close()
    for mode in ("off", "on"):
        ss = samples[mode]
        out["log_" + mode] = {
            "hops_per_s": _median(s["hops_per_s"] for s in ss),
            "samples_hops_per_s": [round(s["hops_per_s"], 1) for s in ss],
            "wire_hops_per_s": _median(s["wire_hops_per_s"] for s in ss),
            "board_cpu_us_per_hop": _median(s["board_cpu_us_per_hop"] for s in ss),
            "relay_cpu_us_per_hop": _median(s["relay_cpu_us_per_hop"] for s in ss),
            "reader_cpu_us_per_hop": _median(s["reader_cpu_us_per_hop"] for s in ss),
            "cores_busy": _median(s["cores_busy"] for s in ss),
            "events_to_host": sum(s["events_to_host"] for s in ss),
            "events_lost": sum(s["events_lost"] for s in ss),
            "usb_bytes_dropped": sum(s["usb_bytes_dropped"] for s in ss),
            "bad_frames": sum(s["bad_frames"] for s in ss),
            "protocol_errors": sum(s["protocol_errors"] for s in ss),
        }
        out["log_" + mode].update(_hop_percentiles(splits[mode]))
    off, on = out["log_off"]["hops_per_s"], out["log_on"]["hops_per_s"]
    out["log_on_over_off"] = on / off if off else None
    return out




# -- 2. the minimal ring (same VirtualRing, minimal relay on every board) ---------

def minimal_ring(baud, n=N_BOARDS, interval=1.0, repeats=3, log=None):
    from ..virtual.remote import RemoteRing

    out = {"baud": baud, "n": n}
    rates, board_us, relay_us, cores = [], [], [], []
    with RemoteRing(n, baud=baud) as ring:
        # Written straight into each board's filesystem: this is not the firmware, and
        # how it got there does not change its rate.
        for b in ring.boards:
            Path(b.fs_dir, "relay.py").write_text(MINIMAL_RELAY)
            Path(b.fs_dir, "main.py").write_text(  # (hal_unix: from the firmware's folder)
                "import sys\nsys.path.append(%r)\nimport relay\nrelay.run(%r, %r, 0)\n"
                % (str(FIRMWARE_DIR), b.uart, b.index == 0))
        for i in list(range(1, n)) + [0]:
            ring.reset(i)
            ring.boards[i].wait_output(b"!ready", 10)
        time.sleep(SETTLE_S + 0.2)  # board 0 sends its frame 0.2 s after it starts
        pids = [b.pid for b in ring.boards]
        split = {}
        for _ in range(repeats):
            c0, r0 = _pid_cpu(pids), _pid_cpu([ring.supervisor_pid])
            st0, t0 = ring.status(), time.monotonic()
            time.sleep(interval)
            st1, t1 = ring.status(), time.monotonic()
            c1, r1 = _pid_cpu(pids), _pid_cpu([ring.supervisor_pid])
            w0, w1 = (sum(w["bytes_out"] for w in st["wires"]) for st in (st0, st1))
            _hop_split(_hop_timing(st0), _hop_timing(st1), split)
            hops = (w1 - w0) / FRAME_BYTES
            rates.append(hops / (t1 - t0))
            board_us.append(_per_hop_us(_delta(c0, c1), hops))
            relay_us.append(_per_hop_us(_delta(r0, r1), hops))
            cpu = [_delta(c0, c1), _delta(r0, r1)]
            cores.append(None if None in cpu else sum(cpu) / (t1 - t0))
            if log:
                log("minimal ring %d baud: %.0f hops/s" % (baud, rates[-1]))
        if not all(b.alive() for b in ring.boards):
            raise BenchError("a minimal-relay board died: %r" % ring.boards[0].wait_output(b"", 0.1)[-300:])
    out.update(hops_per_s=_median(rates), samples_hops_per_s=[round(r, 1) for r in rates],
               board_cpu_us_per_hop=_median(board_us), relay_cpu_us_per_hop=_median(relay_us),
               cores_busy=_median(cores), **_hop_percentiles(split))
    return out


# -- 3. the direct pair: two processes, one pty pair, nothing in between ------------

READY_TIMEOUT_S = 60.0  # a MicroPython process starting on a loaded machine


def _wait_ready(proc, timeout):
    """Until proc's first line is !ready (the minimal relay has set its pty raw)."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else b""
    if not line.startswith(b"!ready"):
        raise BenchError("direct pty pair: the relay did not get ready within %.0f s (it said %r)" % (timeout, line))


def direct_pair(micropython, interval=1.0, repeats=3, log=None):
    rates, cpu_us, cores = [], [], []
    with tempfile.TemporaryDirectory(prefix="picoring-bench-") as tmp:
        script = Path(tmp, "relay.py")
        script.write_text(MINIMAL_RELAY)
        for _ in range(repeats):
            master, slave = os.openpty()
            tty.setraw(slave)
            tty.setraw(master)
            os.set_blocking(master, False)
            b = a = None
            try:
                b = subprocess.Popen([micropython, str(script), os.ttyname(slave), "0"],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                # A's first frame must find B's pty raw: MicroPython's termios.setraw
                # flushes the input queue (TCSAFLUSH), so a frame sent before it is lost
                # and A waits for an answer forever. B says !ready after setraw.
                _wait_ready(b, READY_TIMEOUT_S)
                a = subprocess.Popen([micropython, str(script), "-", "1", str(interval)],
                                     stdin=master, stdout=master, stderr=subprocess.PIPE)
                err = a.stderr.read()
                _, _, ru_a = os.wait4(a.pid, 0)
                a.returncode = 0
                b.kill()
                _, _, ru_b = os.wait4(b.pid, 0)
                b.returncode = -9
            finally:
                for p in (a, b):
                    if p is not None and p.returncode is None:
                        p.kill()
                        p.wait()
                os.close(master)
                os.close(slave)
            try:
                frames, us = map(int, err.split()[-2:])
            except ValueError:
                raise BenchError("direct pty pair: unexpected output %r" % err[-300:]) from None
            hops = 2 * frames  # A counts round trips: one hop A->B, one B->A
            rates.append(hops / (us / 1e6))
            cpu = ru_a.ru_utime + ru_a.ru_stime + ru_b.ru_utime + ru_b.ru_stime
            cpu_us.append(cpu / hops * 1e6)  # includes start-up and A's 0.2 s wait: an upper bound
            cores.append(cpu / (us / 1e6))
            if log:
                log("direct pty pair: %.0f hops/s" % rates[-1])
    return {"processes": 2, "hops_per_s": _median(rates), "samples_hops_per_s": [round(r, 1) for r in rates],
            "cpu_us_per_hop": _median(cpu_us), "cores_busy": _median(cores)}


# -- 4. the node loop under MicroPython (tests/mp_node_bench.py) --------------------

def _node_bench_script():
    here = Path(__file__).resolve()
    for parent in here.parents:
        cand = parent / "tests" / "mp_node_bench.py"
        if cand.is_file():
            return cand
    return None


def _mp_run(micropython, args, heap, timeout=120):
    cmd = [micropython, "-X", "heapsize=%s" % heap, *[str(a) for a in args]]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def _mp_json(micropython, args, heap):
    rc, out, err = _mp_run(micropython, args, heap)
    if rc != 0:
        raise BenchError("mp_node_bench %s failed: %s" % (" ".join(map(str, args[1:])), (err or out).strip()[-400:]))
    return json.loads(out.strip().splitlines()[-1])


def _first_allocation(micropython, script, fw, rounds, log_on):
    """heap_lock() over the steady state: None when nothing allocates, else where it did."""
    rc, out, err = _mp_run(micropython, [script, fw, "s", N_BOARDS, rounds, int(log_on), 1, "lock"], PICO_HEAP)
    if rc == 0 and "no allocation" in out:
        return None
    text = (out + "\n" + err).strip()  # the unix port prints tracebacks on stdout
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    where = [ln[5:] for ln in lines if ln.startswith("File ")]
    last = lines[-1] if lines else "exit status %d" % rc
    return "%s: %s" % (" <- ".join(reversed(where)) or "?", last)


def node_loop(micropython, rounds=2000, repeats=3, log=None):
    script = _node_bench_script()
    if script is None:
        return {"skipped": "tests/mp_node_bench.py not found (picoring is not installed from its source tree)"}
    fw = str(FIRMWARE_DIR)
    base = [str(script), fw, "s", N_BOARDS, rounds]
    off, on = [], []
    for _ in range(repeats):
        # log off: nothing allocates, the GC never runs; gc.disable() is harmless.
        off.append(_mp_json(micropython, base + [0, 1], PICO_HEAP))
        # log on, Pico-like heap, GC on: the steady state a board lives in (GC time included).
        on.append(_mp_json(micropython, base + [1, 1, "x", "gcon"], PICO_HEAP))
        if log:
            log("node loop: %.1f us/msg log off, %.1f log on" % (off[-1]["busy_us_per_frame"], on[-1]["busy_us_per_frame"]))
    # Bytes allocated per message with logging on: gc disabled, a heap big enough to hold it all.
    alloc_on = _mp_json(micropython, base + [1, 1], "8m")
    return {
        "heap": PICO_HEAP,
        "rounds": rounds,
        "messages_per_run": off[0]["frames"],
        "us_per_msg_log_off": _median(r["busy_us_per_frame"] for r in off),
        "us_per_msg_log_on": _median(r["busy_us_per_frame"] for r in on),
        "samples_us_per_msg_log_off": [round(r["busy_us_per_frame"], 2) for r in off],
        "samples_us_per_msg_log_on": [round(r["busy_us_per_frame"], 2) for r in on],
        "alloc_bytes_per_msg_log_off": _median(r["alloc_per_frame"] for r in off),
        "alloc_bytes_per_msg_log_on": alloc_on["alloc_per_frame"],
        "first_allocation_log_off": _first_allocation(micropython, str(script), fw, rounds, False),
        "first_allocation_log_on": _first_allocation(micropython, str(script), fw, rounds, True),
    }


# -- the bench -------------------------------------------------------------------

def micropython_version(micropython):
    try:
        code = "import sys; print('.'.join(str(x) for x in sys.implementation.version), sys.version.split('; ')[-1])"
        p = subprocess.run([micropython, "-c", code], capture_output=True, text=True, timeout=10)
        return p.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def machine_note(micropython):
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        usable = os.cpu_count()
    try:
        load = os.getloadavg()[0]
    except OSError:  # pragma: no cover
        load = None
    return {
        "python": "%s %s" % (platform.python_implementation(), platform.python_version()),
        "micropython": micropython_version(micropython),
        "micropython_path": micropython,
        "cpus": os.cpu_count(),
        "cpus_usable": usable,
        "loadavg_1min_at_start": load,
        "machine": platform.machine(),
        "platform": platform.platform(terse=True),
    }


def run_bench(quick=False, log=None, bauds=None):
    from ..virtual.boards import find_micropython

    q = 0 if quick else 1
    micropython = find_micropython()
    bauds = tuple(bauds or BAUDS[q])
    interval, repeats = INTERVAL_S[q], REPEATS[q]
    t_start = time.monotonic()
    machine = machine_note(micropython)
    rings = []
    for baud in bauds:
        fw = firmware_ring(baud, interval=interval, repeats=repeats, log=log)
        mini = minimal_ring(baud, interval=interval, repeats=repeats, log=log)
        fw["minimal_ring"] = mini
        fw["ratio_vs_minimal_ring"] = (fw["log_off"]["hops_per_s"] / mini["hops_per_s"]) if mini["hops_per_s"] else None
        fw["minimal_ring_over_wire_limit"] = mini["hops_per_s"] / fw["wire_limit_hops_per_s"]
        fw["log_off_over_wire_limit"] = fw["log_off"]["hops_per_s"] / fw["wire_limit_hops_per_s"]
        rings.append(fw)
    direct = direct_pair(micropython, interval=interval, repeats=repeats, log=log)
    node = node_loop(micropython, rounds=NODE_ROUNDS[q], repeats=NODE_REPEATS[q], log=log)
    head = rings[-1]  # the highest baud: the wire bounds it least
    limit = direct["hops_per_s"]
    result = {
        "command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]),
        "quick": quick,
        "machine": machine,
        "n": N_BOARDS,
        "protocol": "s",
        "timing": "medians of %d interval(s) of %.2f s each (log off and on interleaved); node loop: "
                  "median of %d run(s) of %d rounds" % (repeats, interval, NODE_REPEATS[q], NODE_ROUNDS[q]),
        "headline_baud": head["baud"],
        "hops_per_s_log_off": head["log_off"]["hops_per_s"],
        "hops_per_s_log_on": head["log_on"]["hops_per_s"],
        "relay_limit_hops_per_s": limit,
        "ratio": head["log_off"]["hops_per_s"] / limit if limit else None,
        "ratio_log_on": head["log_on"]["hops_per_s"] / limit if limit else None,
        "ratio_vs_minimal_ring": head["ratio_vs_minimal_ring"],
        "node_loop_us_per_msg": node.get("us_per_msg_log_off"),
        "node_loop_us_per_msg_log_on": node.get("us_per_msg_log_on"),
        "alloc_bytes_per_msg": node.get("alloc_bytes_per_msg_log_off"),
        "alloc_bytes_per_msg_log_on": node.get("alloc_bytes_per_msg_log_on"),
        "rings": rings,
        "direct_pair": direct,
        "node_loop": node,
        "seconds": round(time.monotonic() - t_start, 1),
    }
    return result


def _f(x, fmt="{:,.0f}"):
    return "-" if x is None else fmt.format(x)


def _hop_line(r):
    """Where a hop's time goes at one baud: the wire, the relay's lateness, the boards' turnaround."""
    def pair(d):
        return "%s/%s" % (_f(d.get("p50")), _f(d.get("p99")))

    off, on, mini = r["log_off"], r["log_on"], r["minimal_ring"]
    parts = ["a hop at %s baud: %s us of wire (the token frame)" % ("{:,}".format(r["baud"]),
                                                                     _f(1e6 / r["wire_limit_hops_per_s"]))]
    parts.append("the relay delivers a frame's end p50/p99 %s us after its last bit (log off; log on %s; minimal %s)"
                 % tuple(pair(x.get("lateness_us", {})) for x in (off, on, mini)))
    parts.append("a board writes the token on p50/p99 %s us after it was delivered (log off; log on %s; minimal "
                 "relay %s)" % tuple(pair(x.get("turnaround_us", {})) for x in (off, on, mini)))
    return "; ".join(parts) + " (bucket upper ends)"


def print_table(result, console=None):
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=max(Console().width, 132))
    m = result["machine"]
    t = Table(title="picoring bench ring: token hops per second, virtual ring of %d (protocol S, firmware deployed "
                    "with mpremote)" % result["n"], header_style="bold")
    for col in ("baud", "wire limit hops/s", "log off hops/s", "log on hops/s", "on/off", "minimal ring hops/s",
                "fw/minimal", "board CPU us/hop off/on", "relay CPU us/hop off/on", "cores busy off/on",
                "events to host / lost"):
        t.add_column(col, justify="right")
    for r in result["rings"]:
        off, on, mini = r["log_off"], r["log_on"], r["minimal_ring"]
        t.add_row(
            "{:,}".format(r["baud"]), _f(r["wire_limit_hops_per_s"]),
            _f(off["hops_per_s"]), _f(on["hops_per_s"]), _f(r["log_on_over_off"], "{:.2f}"),
            _f(mini["hops_per_s"]), _f(r["ratio_vs_minimal_ring"], "{:.2f}"),
            "%s/%s" % (_f(off["board_cpu_us_per_hop"]), _f(on["board_cpu_us_per_hop"])),
            "%s/%s" % (_f(off["relay_cpu_us_per_hop"]), _f(on["relay_cpu_us_per_hop"])),
            "%s/%s" % (_f(off["cores_busy"], "{:.2f}"), _f(on["cores_busy"], "{:.2f}")),
            "%s/%s" % ("{:,}".format(on["events_to_host"]), on["events_lost"]),
        )
    console.print(t)
    d = result["direct_pair"]
    console.print("limit: minimal two-process pty relay (2 micropython processes, one pty pair, poll + read + write "
                  "of a %d-byte frame, no relay, no pacing): [bold]%s hops/s[/] (samples %s, %s CPU us/hop)"
                  % (FRAME_BYTES, _f(d["hops_per_s"]), d["samples_hops_per_s"], _f(d["cpu_us_per_hop"], "{:.1f}")))
    console.print("ratio firmware ring / limit at %s baud: [bold]%s[/] log off, %s log on; firmware / minimal ring "
                  "(same relay and pacing): %s"
                  % ("{:,}".format(result["headline_baud"]), _f(result["ratio"], "{:.3f}"),
                     _f(result["ratio_log_on"], "{:.3f}"), _f(result["ratio_vs_minimal_ring"], "{:.2f}")))
    head = result["rings"][-1]
    console.print("of the wire limit at %s baud: [bold]%s[/] log off, %s log on, %s the minimal ring"
                  % (("{:,}".format(head["baud"]),) + tuple(
                      _f(hops / head["wire_limit_hops_per_s"] if hops is not None else None, "{:.0%}")
                      for hops in (head["log_off"]["hops_per_s"], head["log_on"]["hops_per_s"],
                                   head["minimal_ring"]["hops_per_s"]))))
    for r in result["rings"]:
        console.print(_hop_line(r), highlight=False, soft_wrap=True)  # (one line, for grep)
    nl = result["node_loop"]
    if "skipped" in nl:
        console.print("node loop: skipped: %s" % nl["skipped"])
    else:
        console.print("node loop under MicroPython (tests/mp_node_bench.py, -X heapsize=%s, in-memory wires): "
                      "[bold]%s us/message[/] log off, %s us log on (GC included); allocated per message in steady "
                      "state: [bold]%s bytes[/] log off, %s bytes log on"
                      % (nl["heap"], _f(nl["us_per_msg_log_off"], "{:.1f}"), _f(nl["us_per_msg_log_on"], "{:.1f}"),
                         _f(nl["alloc_bytes_per_msg_log_off"], "{:.1f}"), _f(nl["alloc_bytes_per_msg_log_on"], "{:.1f}")))
        console.print("heap_lock() over the steady state: log off: %s; log on: %s"
                      % (nl["first_allocation_log_off"] or "no allocation",
                         nl["first_allocation_log_on"] or "no allocation"), highlight=False)
    console.print("command: %s" % result["command"], highlight=False)
    console.print("machine: %s, MicroPython %s, %s cores (%s usable), load %s at start, %s; %s; %.0f s"
                  % (m["python"], m["micropython"], m["cpus"], m["cpus_usable"], _f(m["loadavg_1min_at_start"], "{:.2f}"),
                     m["machine"], result["timing"], result["seconds"]), highlight=False)
    console.print("wire limit = baud / %d (a %d-byte token frame, 10 bits a byte). Board CPU: the 5 board "
                  "processes; relay CPU: the ring's relay thread; host reader CPU with log on (BoardLink threads): "
                  "%s us/hop. cores busy: this bench's own CPU (boards + this process) per second of wall time; one token is "
                  "in flight, so a hop's latency (wire pacing, relay and board wake-ups) sets the rate, and load from "
                  "other processes (load average above) lengthens every wake-up."
                  % (BITS_PER_BYTE * FRAME_BYTES, FRAME_BYTES,
                     " ".join(_f(r["log_on"]["reader_cpu_us_per_hop"]) for r in result["rings"])), highlight=False)


def main(args):
    from .common import run_command

    return run_command(args, run_bench, print_table)
