"""The detached supervisor behind `picoring virtual up|status|reset|down`.

`up` starts `python -m picoring.virtual.supervisor` in a new session (so it outlives
the command and the terminal); it owns a VirtualRing and answers one JSON line
per connection on a unix socket in the state directory. Files there:

  state.json       supervisor pid, baud, boards (pid, usb, uart, fs_dir); written when the ring is up
  control.sock     the supervisor's socket (status, reset, power, unplug, plug, cut, faults,
                   wait_output, down)
  usb<i>           board i's USB port: a symlink to its pty, gone while unplugged
  supervisor.lock  flock-ed by the supervisor for its whole life: the authority on "is a ring up"
  supervisor.log   its stdout/stderr
  board<i>/        board i's filesystem (kept by `down`, as a Pico keeps its flash)

The boards die with the supervisor (PR_SET_PDEATHSIG), so killing it, even with
SIGKILL, leaves no micropython process behind; `down` also kills any board pid
in state.json that survived. A supervisor started for one command (`run --virtual`,
`bench ring`: remote.RemoteRing) dies with that command's process in turn (--parent-pid).
"""

import argparse
import errno
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from .. import ttystall
from .boards import VirtualBoardError, VirtualRing, find_micropython, write_state

STATE = "state.json"
SOCKET = "control.sock"
LOCK = "supervisor.lock"
LOG = "supervisor.log"
_STILL_AT_WORK_S = 1.0  # how often a request under way says so to its client (_still_at_work)
REQUEST_TIMEOUT_S = 15.0  # how long a client waits for the supervisor's answer (its progress restarts it)
CLOCK = ttystall.STALL  # the clock of a virtual ring's waits (picoring.clock): its boards' ports are ptys


class NoRingError(VirtualBoardError):
    """No virtual ring is up in this state directory."""


def default_state_dir():
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "picoring" / "virtual"
    return Path.home() / ".cache" / "picoring" / "virtual"


# -- the supervisor process --------------------------------------------------

def _lock(state_dir):
    """Take the supervisor lock (kept open for the life of the process), or None if held."""
    fd = os.open(state_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EACCES):
            return None
        raise
    return fd


def _state_of(ring, started):
    return {"supervisor_pid": os.getpid(), "baud": ring.baud, "paced": ring.paced, "n": ring.n, "started": started,
            "micropython": ring.micropython, "dir": str(ring.workdir),
            "boards": [{"index": b.index, "pid": b.pid, "usb": b.usb_path, "uart": b.uart,
                        "fs_dir": b.fs_dir} for b in ring.boards]}


def _die_with(parent_pid):
    """SIGTERM to this process when parent_pid (which started it) ends, on Linux."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (ImportError, OSError, AttributeError):
        return  # not Linux: the command's own clean-up (RemoteRing.stop) still applies
    if os.getppid() != parent_pid:  # it ended before prctl took effect
        os.kill(os.getpid(), signal.SIGTERM)


def supervise(state_dir, n, baud, heapsize=None, faults=None, paced=True, parent_pid=None, remove_dir=False):
    """Run a ring until `down` or a signal. Exit status 0, or 3 if a ring is already up here.
    parent_pid: stop when that process ends (it started this one); remove_dir: then remove
    state_dir too (a temporary ring's)."""
    state_dir = Path(state_dir)
    state_dir.mkdir(parents=True, exist_ok=True)
    lock = _lock(state_dir)
    if lock is None:
        print("a virtual ring is already up in %s" % state_dir, file=sys.stderr)
        return 3
    sock_path = state_dir / SOCKET
    stop = []

    def on_signal(signum, frame):
        stop.append(signum)

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, on_signal)
    if parent_pid is not None:
        _die_with(parent_pid)
    ring = VirtualRing(n, baud=baud, workdir=state_dir, heapsize=heapsize, faults=faults, paced=paced)
    server = None
    try:
        ring.start()
        if sock_path.exists():
            sock_path.unlink()
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(str(sock_path))
        server.listen(8)
        server.settimeout(0.2)
        started = time.time()
        state = _state_of(ring, started)
        write_state(state_dir / STATE, state)
        print("supervisor %d: ring of %d up at %d baud" % (os.getpid(), n, baud), flush=True)
        while not stop:
            if not ring.running():
                print("supervisor: the ring stopped: %s" % (ring._error or "?"), file=sys.stderr, flush=True)
                return 1
            try:
                conn, _ = server.accept()
            except socket.timeout:
                conn = None
            except InterruptedError:
                continue
            if conn is not None:
                with conn:
                    if _serve(conn, ring) == "down":
                        break
            fresh = _state_of(ring, started)
            if fresh != state:  # a reset or a self-restart changed a pid
                state = fresh
                write_state(state_dir / STATE, state)
        return 0
    finally:
        try:
            ring.stop()
        finally:
            if server is not None:
                server.close()
            for name in (SOCKET, STATE):
                try:
                    (state_dir / name).unlink()
                except FileNotFoundError:
                    pass
            print("supervisor %d: stopped" % os.getpid(), flush=True)
            if remove_dir and parent_pid is not None and os.getppid() != parent_pid:
                # The command that started it is gone (killed: it could not clean up): its
                # temporary ring goes too.
                shutil.rmtree(state_dir, ignore_errors=True)


def _still_at_work(conn):
    """progress() for ring calls: a space now and then tells the client that a slow call (a
    board's fork and exec on a loaded machine) is under way; JSON ignores it before the reply."""
    last = [time.monotonic()]

    def progress():
        now = time.monotonic()
        if now - last[0] >= _STILL_AT_WORK_S:
            last[0] = now
            try:
                conn.sendall(b" ")
            except OSError:
                pass  # the client left: the call goes on, its reply goes nowhere

    return progress


def _serve(conn, ring):
    conn.settimeout(5.0)
    progress = _still_at_work(conn)
    with ring.reporting_progress(progress):
        return _serve_request(conn, ring, progress)


def _serve_request(conn, ring, progress):
    try:
        request = json.loads(_read_line(conn))
        cmd = request.get("cmd")
        if cmd == "status":
            reply = {"ok": True, "status": ring.status()}
        elif cmd == "snapshot":
            reply = {"ok": True, "text": ring.snapshot_text()}
        elif cmd == "reset":
            i = int(request["board"])
            ring.reset(i, run_main=not request.get("repl", False))
            reply = {"ok": True, "board": ring.boards[i].info()}
        elif cmd == "power":
            i = int(request["board"])
            ring.power_cycle(i, off=float(request.get("off", 0.0)))
            reply = {"ok": True, "board": ring.boards[i].info()}
        elif cmd == "unplug":
            i = int(request["board"])
            seconds = request.get("seconds")
            ring.unplug(i, None if seconds is None else float(seconds))
            reply = {"ok": True, "board": ring.boards[i].info()}
        elif cmd == "plug":
            i = int(request["board"])
            ring.plug(i)
            reply = {"ok": True, "board": ring.boards[i].info()}
        elif cmd == "cut":
            ring.cut(int(request["wire"]), bool(request.get("cut", True)))
            reply = {"ok": True, "wire": ring.wire(int(request["wire"])).counters()}
        elif cmd == "faults":
            ring.set_faults(request.get("spec"))
            reply = {"ok": True, "faults": ring.status()["faults"]}
        elif cmd == "wait_output":
            board = ring.boards[int(request["board"])]
            try:
                output = _wait_output(board, request["marker"].encode("latin-1"), float(request.get("timeout", 10.0)),
                                      progress)
            except VirtualBoardError as e:  # with what the ring was doing (a relay stuck, a board dead...)
                raise VirtualBoardError("%s\n%s" % (e, ring.snapshot_text())) from None
            reply = {"ok": True, "output": output.decode("latin-1")}
        elif cmd == "down":
            reply = {"ok": True}
        else:
            reply = {"ok": False, "error": "unknown command %r" % (cmd,)}
    except VirtualBoardError as e:
        reply = {"ok": False, "error": str(e)}
        cmd = None
    except (ValueError, KeyError, IndexError, OSError) as e:
        reply = {"ok": False, "error": "%s: %s" % (type(e).__name__, e)}
        cmd = None
    try:
        conn.sendall(json.dumps(reply).encode() + b"\n")
    except OSError:
        pass
    return cmd


def _wait_output(board, marker, timeout, progress):
    """board.wait_output, in slices, saying between them that the supervisor is at work."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        try:
            return board.wait_output(marker, min(max(left, 0.0), 1.0))
        except VirtualBoardError as e:
            if left <= 1.0:
                raise VirtualBoardError("%s (%.1fs in all)" % (e, timeout)) from None
        progress()


def _read_line(conn, limit=65536, deadline=None):
    """One line from a socket (limit: bytes at most, None: any). deadline: a picoring.clock.Deadline;
    a recv that times out before it has expired is waited through, and any bytes received
    restart it (the supervisor's spaces while it is at work: _still_at_work)."""
    data = b""
    while not data.endswith(b"\n"):
        try:
            chunk = conn.recv(4096)
        except socket.timeout:
            if deadline is None or deadline.expired():
                raise
            continue
        if not chunk:
            break
        if deadline is not None:
            deadline.restart()
        data += chunk
        if limit is not None and len(data) > limit:
            raise ValueError("request too long")
    return data.decode()


# -- the client side (what the CLI calls) ------------------------------------

def read_state(state_dir):
    try:
        return json.loads((Path(state_dir) / STATE).read_text())
    except FileNotFoundError:
        return None


def is_up(state_dir):
    """True if a supervisor holds the lock in state_dir."""
    state_dir = Path(state_dir)
    if not (state_dir / LOCK).exists():
        return False
    fd = _lock(state_dir)
    if fd is None:
        return True
    os.close(fd)
    return False


def request(state_dir, message, timeout=REQUEST_TIMEOUT_S, clock=CLOCK):
    """Send one command to the supervisor and return its reply (a dict with "ok"). clock: what
    the timeout counts."""
    sock_path = Path(state_dir) / SOCKET
    if not is_up(state_dir):
        raise NoRingError("no virtual ring is up in %s (start one with: picoring virtual up -n N)" % state_dir)
    # Its answer may wait on its boards' ptys: the wait counts only time in which the machine's
    # serial ports delivered (ttystall; 'did not answer within 15.0 s' in a loaded suite run).
    deadline = clock.deadline(timeout)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(min(timeout, 0.5))
        try:
            s.connect(str(sock_path))
            s.sendall(json.dumps(message).encode() + b"\n")
            line = _read_line(s, limit=None, deadline=deadline)
        except socket.timeout:
            raise VirtualBoardError("the virtual ring supervisor (%s) did not answer within %.1fs%s"
                                    % (sock_path, timeout, deadline.not_counted()))
        except OSError as e:
            raise VirtualBoardError("cannot reach the virtual ring supervisor at %s: %s" % (sock_path, e))
    if not line:
        raise VirtualBoardError("the virtual ring supervisor (%s) closed the connection without answering" % sock_path)
    reply = json.loads(line)
    if not reply.get("ok"):
        raise VirtualBoardError("virtual ring in %s: %s" % (state_dir, reply.get("error")))
    return reply


def up(state_dir, n, baud=115200, heapsize=None, timeout=30.0, faults=None, paced=True, attached=False,
       temporary=False):
    """Start a detached supervisor with a ring of n boards; return its state once it is up.
    faults: a fault SPEC for every wire (docs/faults.md), checked here before anything starts.
    paced=False: wires without wire time (virtual.wire.Wire), for tests. attached: it stops
    when this process ends (a ring for one command, remote.RemoteRing), and if temporary, it
    then removes state_dir."""
    from .wire import FaultPlan

    state_dir = Path(state_dir)
    if n < 1:
        raise ValueError("-n must be at least 1")
    plan = FaultPlan.coerce(faults)
    if plan is not None:
        plan.check(n)
    find_micropython()  # fail here, with the install hint, rather than in the log
    state_dir.mkdir(parents=True, exist_ok=True)
    if is_up(state_dir):
        state = read_state(state_dir) or {}
        raise VirtualBoardError("a virtual ring is already up in %s (supervisor pid %s); stop it with: picoring virtual down"
                                % (state_dir, state.get("supervisor_pid", "?")))
    _remove_stale(state_dir)
    env = dict(os.environ)
    package_parent = str(Path(__file__).resolve().parent.parent.parent)
    env["PYTHONPATH"] = package_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    # -X faulthandler: a supervisor that does not come up is made to print where it is (below)
    cmd = [sys.executable, "-X", "faulthandler", "-m", "picoring.virtual.supervisor", "--dir", str(state_dir), "-n", str(n), "--baud", str(baud)]
    if heapsize:
        cmd += ["--heapsize", str(heapsize)]
    if plan is not None:
        cmd += ["--faults", plan.describe()]
    if not paced:
        cmd += ["--unpaced"]
    if attached:
        cmd += ["--parent-pid", str(os.getpid())] + (["--remove-dir"] if temporary else [])
    with open(state_dir / LOG, "ab") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, close_fds=True, env=env)
    deadline = CLOCK.deadline(timeout)  # (a machine stalling its ttys stalls making processes too)
    try:
        while True:
            state = read_state(state_dir)
            if state and state.get("supervisor_pid") == proc.pid:
                return state
            if proc.poll() is not None:
                raise VirtualBoardError("the virtual ring supervisor exited with status %d before the ring was up: %s "
                                        "(its log: %s)" % (proc.returncode, _last_words(_log_tail(state_dir)),
                                                           state_dir / LOG))
            if deadline.expired():
                stopped = _abort_showing_stacks(proc)
                where = _where_from_log(_log_tail(state_dir, 40)) if stopped else "it did not stop on SIGABRT (killed)"
                raise VirtualBoardError("the virtual ring was not up after %.1fs%s (log: %s); %s"
                                        % (timeout, deadline.not_counted(), state_dir / LOG, where))
            time.sleep(0.02)
    except BaseException:
        # Interrupted (Ctrl-C, kill -TERM of the command) while the supervisor starts: it stops
        # now, not when this process ends, so that the caller's cleanup (a temporary ring's
        # folder removed) is not undone by a supervisor still writing its files there.
        _stop_started(proc)
        raise


def _stop_started(proc, timeout=10.0):
    """Stop a supervisor that up() started and gave up on (its boards die with it)."""
    if proc.poll() is None:
        proc.terminate()  # its signal handler stops the ring; before it has one, SIGTERM ends it
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def status(state_dir, timeout=REQUEST_TIMEOUT_S):
    return request(state_dir, {"cmd": "status"}, timeout)["status"]


def snapshot(state_dir, timeout=REQUEST_TIMEOUT_S):
    """The ring as it is now, for a failure's report (VirtualRing.snapshot_text)."""
    return request(state_dir, {"cmd": "snapshot"}, timeout)["text"]


def reset(state_dir, board, repl=False, timeout=REQUEST_TIMEOUT_S):
    return request(state_dir, {"cmd": "reset", "board": board, "repl": repl}, timeout)["board"]


def power_cycle(state_dir, board, off=0.0, timeout=REQUEST_TIMEOUT_S):
    return request(state_dir, {"cmd": "power", "board": board, "off": off}, timeout)["board"]


def unplug(state_dir, board, seconds=None, timeout=REQUEST_TIMEOUT_S):
    return request(state_dir, {"cmd": "unplug", "board": board, "seconds": seconds}, timeout)["board"]


def plug(state_dir, board, timeout=REQUEST_TIMEOUT_S):
    return request(state_dir, {"cmd": "plug", "board": board}, timeout)["board"]


def cut(state_dir, wire, is_cut=True, timeout=REQUEST_TIMEOUT_S):
    return request(state_dir, {"cmd": "cut", "wire": wire, "cut": is_cut}, timeout)["wire"]


def set_faults(state_dir, spec, timeout=REQUEST_TIMEOUT_S):
    """Replace the ring's faults (a SPEC, None for none); the plan's clock starts now."""
    return request(state_dir, {"cmd": "faults", "spec": spec}, timeout)["faults"]


def wait_output(state_dir, board, marker, timeout=10.0):
    """Until board wrote marker (bytes) to USB since its last (re)start (VirtualBoard.wait_output);
    returns its output so far (at most the last 4 KB)."""
    return request(state_dir, {"cmd": "wait_output", "board": board, "marker": marker.decode("latin-1"),
                               "timeout": timeout}, timeout + REQUEST_TIMEOUT_S)["output"].encode("latin-1")


def down(state_dir, timeout=10.0):
    """Stop the ring in state_dir. Returns False if none was up (nothing to do)."""
    state_dir = Path(state_dir)
    state = read_state(state_dir) or {}
    was_up = is_up(state_dir)
    if was_up:
        try:
            request(state_dir, {"cmd": "down"}, timeout)
        except VirtualBoardError:
            pass  # fall through to the signals below
        pid = state.get("supervisor_pid")
        if pid and not _wait_gone(pid, timeout):
            _kill(pid, signal.SIGTERM)
            if not _wait_gone(pid, 2.0):
                _kill(pid, signal.SIGKILL)
                _wait_gone(pid, 2.0)
        deadline = time.monotonic() + timeout
        while is_up(state_dir):  # the lock goes with the process
            if time.monotonic() > deadline:
                raise VirtualBoardError("the virtual ring supervisor in %s still holds its lock after %.1fs" % (state_dir, timeout))
            time.sleep(0.02)
    leftovers = _remove_stale(state_dir, state)
    return was_up or bool(leftovers)


def _remove_stale(state_dir, state=None):
    """Kill board processes a dead supervisor left in state.json and remove its files."""
    state = state if state is not None else (read_state(state_dir) or {})
    killed = []
    for b in state.get("boards", []):
        pid = b.get("pid")
        if pid and _is_micropython(pid):
            _kill(pid, signal.SIGKILL)
            killed.append(pid)
    for pid in killed:
        _wait_gone(pid, 2.0)
    for name in (STATE, SOCKET):
        try:
            (Path(state_dir) / name).unlink()
        except FileNotFoundError:
            pass
    return killed


def _is_micropython(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return b"micropython" in f.read()
    except OSError:
        return False


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is as good as gone
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_gone(pid, timeout):
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _kill(pid, sig):
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _abort_showing_stacks(proc, wait=5.0):
    """Stop a Python child started with -X faulthandler by SIGABRT, on which it writes every
    thread's stack to its stderr (the caller's log). False if it did not stop (then killed)."""
    proc.send_signal(signal.SIGABRT)
    try:
        proc.wait(wait)
        return True
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return False


def _where_from_log(text):
    """What a child stopped by _abort_showing_stacks said of where it was."""
    if "Current thread" in text or "Thread 0x" in text:
        return "where it was (its stacks, from its log):\n" + text
    return "it had printed nothing of its own when stopped (Python not yet running its code?)"


def _last_words(text):
    """What a log's last line says: the error ending a traceback (the traceback stays in the
    log), or the supervisor's own one-line message."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "it printed nothing"


def _log_tail(state_dir, lines=20):
    try:
        return "\n".join((Path(state_dir) / LOG).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def main(argv=None):
    p = argparse.ArgumentParser(prog="picoring.virtual.supervisor", description="supervisor of a virtual ring (started by picoring virtual up)")
    p.add_argument("--dir", required=True)
    p.add_argument("-n", type=int, required=True)
    p.add_argument("--baud", type=int, default=115200)
    p.add_argument("--heapsize")
    p.add_argument("--faults", help="fault SPEC for every wire (docs/faults.md)")
    p.add_argument("--unpaced", action="store_true", help="wires without wire time")
    p.add_argument("--parent-pid", type=int, help="stop when this process ends")
    p.add_argument("--remove-dir", action="store_true", help="with --parent-pid: then remove --dir too")
    args = p.parse_args(argv)
    try:
        return supervise(args.dir, args.n, args.baud, args.heapsize, args.faults, paced=not args.unpaced,
                         parent_pid=args.parent_pid, remove_dir=args.remove_dir)
    except VirtualBoardError as e:
        print("supervisor: %s" % e, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
