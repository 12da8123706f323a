"""Copy files to a MicroPython board and run code on it, through mpremote.

We run mpremote's command line (`python -m mpremote connect PORT resume ...`, by way of
picoring.ring.mpremote_run, which only makes it print a copy's progress on a pipe too)
rather than its Python API: the command line is mpremote's stable interface
(its transport classes are internal and change between releases), a board
that stops answering can always be ended by killing the subprocess (so every
call has a real timeout), and a hung transport cannot take our process with it.
The cost is ~0.2 s of start-up per call, so each function chains its steps
into one invocation with `+`.

Always `resume`: no soft reset. A Pico does not need one to take new files
(deploy then reset the board), and on a virtual board (unix port) the raw
REPL's soft reset hangs the process. `resume` still sends Ctrl-C first, so
running firmware must turn byte 0x03 into KeyboardInterrupt (ours does).

The firmware goes one way to every board, a Pico, an emulated Pico or a virtual board
(copy_firmware, for `picoring flash` and the virtual deploy alike): only the config's
protocol module of the protocol modules, as .mpy where the board loads them, and only the
files whose SHA-256 differs from the board's. mpremote's `fs cp` writes a file in 256-byte
chunks, one raw-REPL exec each: what is not copied is most of what a deploy saves.
"""

import ast
import concurrent.futures
import functools
import hashlib
import importlib.metadata
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import types
from pathlib import Path

from ..clock import WALL
from . import mpy

DEFAULT_TIMEOUT = 30.0
COPY_TIMEOUT = 60.0  # a whole firmware copy's quiet timeout (flash's default)
CONFIG_NAME = "picoring.json"
COPY_AT_ONCE = 8  # mpremote sessions at once: a 32-board ring is copied in four rounds


def _firmware_dir():
    try:
        from .. import firmware  # installed as picoring.firmware (pyproject's package-dir)
        return Path(firmware.__file__).resolve().parent
    except ImportError:
        return Path(__file__).resolve().parents[3] / "firmware"  # beside host/


FIRMWARE_DIR = _firmware_dir()


def firmware_files(folder=None, protocol=None):
    """The files a board gets: every *.py in firmware/, except __init__.py (a host-side package marker);
    with protocol, of the protocol modules (proto_*.py) only that protocol's (firmware/protocol.py REGISTRY)."""
    folder = Path(folder) if folder is not None else FIRMWARE_DIR
    files = sorted(p for p in folder.glob("*.py") if p.name != "__init__.py")
    if protocol is not None:
        from ..firmware.protocol import module_name

        keep = module_name(protocol) + ".py"
        files = [p for p in files if not p.name.startswith("proto_") or p.name == keep]
    return files


FIRMWARE_FILES = firmware_files()

# The PyPI distribution whose adafruit_bus_device package a board with --resource fram needs in
# its lib/ (firmware/fram.py). Copied from the installed files as they are: it runs unchanged
# on MicroPython (docs/fram.md); no copy of it lives in this repository.
BUS_DEVICE_DIST = "adafruit-circuitpython-busdevice"
BUS_DEVICE_PACKAGE = "adafruit_bus_device"


def bus_device_files():
    """(local paths, names on the board) of the adafruit_bus_device package's modules, found
    through the installed distribution's file list (importing it on the host would import
    Blinka's busio). Raises DeployError when it is not installed."""
    try:
        dist = importlib.metadata.distribution(BUS_DEVICE_DIST)
    except importlib.metadata.PackageNotFoundError:
        raise DeployError("--resource fram: the boards need the %s package from the PyPI distribution %s, which is "
                          "not installed here (pip install 'picoring[fram]')" % (BUS_DEVICE_PACKAGE, BUS_DEVICE_DIST))
    found = sorted((f for f in dist.files or () if f.parts[0] == BUS_DEVICE_PACKAGE and f.suffix == ".py"),
                   key=lambda f: f.parts)
    paths = [Path(dist.locate_file(f)) for f in found]
    if not any(f.name == "i2c_device.py" for f in found) or not all(p.is_file() for p in paths):
        raise DeployError("%s %s is installed but its %s/i2c_device.py is not there: reinstall it"
                          % (BUS_DEVICE_DIST, dist.version, BUS_DEVICE_PACKAGE))
    return paths, ["lib/" + "/".join(f.parts) for f in found]


def resource_files(config):
    """(local paths, names on the board) of what the config's shared resource needs besides the
    firmware: adafruit_bus_device in lib/ for "resource": "fram", else nothing."""
    if (config or {}).get("resource") == "fram":
        return bus_device_files()
    return [], []


def make_dirs_code(names):
    """Code that makes the folders the names on the board need (lib/, lib/PACKAGE/) where they
    are missing: mpremote's cp does not make them."""
    dirs = []
    for name in names:
        parts = name.split("/")[:-1]
        for k in range(1, len(parts) + 1):
            d = "/".join(parts[:k])
            if d not in dirs:
                dirs.append(d)
    return "import os\nfor d in %r:\n try:\n  os.mkdir(d)\n except OSError:\n  pass\n" % (dirs,) if dirs else ""


class DeployError(RuntimeError):
    """mpremote could not do what was asked on a port; the message names the port.

    stdout: what mpremote printed before it failed (e.g. the `cp` lines of the files
    it got to), so a caller can say what state the board was left in."""

    def __init__(self, message, stdout=b""):
        super().__init__(message)
        self.stdout = stdout or b""


def _check_port(port):
    if port.startswith("/") and not os.path.exists(port):
        raise DeployError("port not found: %s" % port)


def mpremote(port, args, timeout=DEFAULT_TIMEOUT, what="mpremote", clock=WALL):
    """Run `mpremote connect PORT resume ARGS...`; return its stdout (bytes) or raise DeployError.

    timeout: how long mpremote may go without printing anything. A copy of ten files prints a
    line per file, and through a slow path (a loaded machine, an RFC 2217 server) the whole copy
    once took longer than a budget meant for one board that does not answer: a board that
    answers slowly but steadily is not a board that does not answer. clock: what the timeout
    counts (picoring.clock)."""
    _check_port(port)
    # mpremote knows a pty only by its /dev/pts/ name (and is 8x slower on one it takes for
    # a USB serial port); a virtual board's port is a symlink to one, as /dev/serial/by-id/
    # names are to /dev/ttyACM*. Give it the device itself.
    device = os.path.realpath(port) if port.startswith("/") else port
    # mpremote_run: mpremote itself, with a copy's progress printed after every chunk (a sign of
    # life for the quiet timeout: see its docstring), taken out of stdout again below
    cmd = [sys.executable, "-m", "picoring.ring.mpremote_run", "connect", device, "resume", *args]
    proc = _run_watched(cmd, timeout, clock)
    proc.stdout = strip_progress(proc.stdout)
    if proc.timed_out:
        raise DeployError("%s on %s: no answer within %.1fs%s%s (is it a MicroPython board, and does its firmware "
                          "stop on Ctrl-C?)" % (what, port, timeout, proc.not_counted,
                                                " (after %.1f s of progress)" % proc.progress_s if proc.progress_s >= 1 else ""),
                          proc.stdout)
    if proc.returncode == 0:
        return proc.stdout
    err = (proc.stderr or b"").decode(errors="replace").strip()
    out = (proc.stdout or b"").decode(errors="replace").strip()
    if "failed to access" in err:
        raise DeployError("%s: cannot open %s (missing, or in use by another program)" % (what, port), proc.stdout)
    if "could not enter raw repl" in err:
        raise DeployError("%s: %s did not answer as a MicroPython REPL (not a MicroPython board, or its firmware "
                          "ignores Ctrl-C)" % (what, port), proc.stdout)
    raise DeployError("%s on %s failed (mpremote status %d): %s"
                      % (what, port, proc.returncode, (err or out)[-2000:] or "no message"), proc.stdout)


# mpremote.commands.show_progress_bar's bar ("\r ... copying  42% [########------------]") and
# the blank that clears it at the end of a file ("\r" spaces "\r")
_PROGRESS = re.compile(rb"\r \.\.\. [a-z]+ +\d+% \[[#-]*\]|\r +\r")


def strip_progress(out):
    """mpremote's stdout without its progress bars: what it prints when no bar is drawn."""
    return _PROGRESS.sub(b"", out) if b"\r" in out else out


def _run_watched(cmd, quiet_timeout, clock=WALL):
    """Run cmd to its end; kill it once it has printed nothing for quiet_timeout s. Returns its
    returncode, stdout, stderr, timed_out, and progress_s (how long it went on printing)."""
    # PYTHONUNBUFFERED: its progress lines as they happen, not at exit. PICORING_MPREMOTE_WATCHED:
    # mpremote_run leaves the waits on a board to this one (its docstring says why).
    env = dict(os.environ, PYTHONUNBUFFERED="1", PICORING_MPREMOTE_WATCHED="1")
    # Quiet: by the clock given, for a virtual board a stall-aware one, so that a board that is
    # only held up by a loaded machine's tty worker (mpremote silent for 30 s under two busy
    # loops, the copy going on afterwards) is not taken for one that does not answer.
    quiet = clock.deadline(quiet_timeout)
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    out, err = bytearray(), bytearray()
    heard = [time.monotonic()]

    def pump(stream, into):
        for chunk in iter(lambda: stream.read1(4096), b""):
            into += chunk
            heard[0] = time.monotonic()
            quiet.restart()

    pumps = [threading.Thread(target=pump, args=a, daemon=True) for a in ((proc.stdout, out), (proc.stderr, err))]
    for t in pumps:
        t.start()
    start = time.monotonic()
    timed_out = False
    while True:
        try:
            proc.wait(timeout=max(0.01, min(0.5, quiet.left())))
            break
        except subprocess.TimeoutExpired:
            if quiet.expired():
                proc.kill()
                proc.wait()
                timed_out = True
                break
    for t, stream in zip(pumps, (proc.stdout, proc.stderr)):
        t.join(5.0)
        if not t.is_alive():  # (one still reading keeps its pipe: closing it under a read is unsafe)
            stream.close()
    return types.SimpleNamespace(returncode=proc.returncode, stdout=bytes(out), stderr=bytes(err),
                                 timed_out=timed_out, progress_s=heard[0] - start, not_counted=quiet.not_counted())


def copy_files(port, files, dest_names=None, timeout=DEFAULT_TIMEOUT, before=None, after=None, clock=WALL):
    """Copy local files to the board's filesystem root (as dest_names, default their own names).

    mpremote's `fs cp` compares SHA-256 hashes and skips a file the board already
    has ("Up to date: NAME"). Returns {"copied": [names], "up_to_date": [names],
    "output": mpremote's stdout}. before, after: mpremote arguments to run first and
    last in the same session (e.g. ["exec", code]), to save a connection."""
    files = [Path(f) for f in files]
    if dest_names is None:
        dest_names = [f.name for f in files]
    if len(dest_names) != len(files):
        raise ValueError("%d files but %d destination names" % (len(files), len(dest_names)))
    for f in files:
        if not f.is_file():
            raise DeployError("copy to %s: no such local file: %s" % (port, f))
    if not files and not before and not after:
        return {"copied": [], "up_to_date": [], "output": b""}
    args = list(before or [])
    for f, name in zip(files, dest_names):
        if args:
            args.append("+")
        args += ["fs", "cp", str(f), ":" + name]
    if after:
        args += (["+"] if args else []) + list(after)
    out = mpremote(port, args, timeout, what="copy %d file(s)" % len(files), clock=clock)
    started, up_to_date = copy_progress(out)
    return {"copied": [n for n in started if n not in up_to_date], "up_to_date": up_to_date, "output": out}


def copy_progress(out):
    """From mpremote's stdout: (names whose copy started, names found up to date)."""
    started, up_to_date = [], []
    for line in (out or b"").decode(errors="replace").splitlines():
        if line.startswith("cp ") and " :" in line:
            started.append(line.rsplit(" :", 1)[1].strip())
        elif line.startswith("Up to date:"):
            up_to_date.append(line.split(":", 1)[1].strip())
    return started, up_to_date


def write_file(port, name, data, timeout=DEFAULT_TIMEOUT, clock=WALL):
    """Write bytes to file `name` on the board (e.g. its config, picoring.json)."""
    with tempfile.TemporaryDirectory(prefix="picoring-deploy-") as tmp:
        local = Path(tmp) / os.path.basename(name)
        local.write_bytes(data)
        copy_files(port, [local], [name], timeout, clock=clock)


def list_files(port, timeout=DEFAULT_TIMEOUT, clock=WALL):
    """Names in the board's filesystem root, sorted."""
    marker = "@@picoring-ls@@"
    out = exec_code(port, "import os\nprint(%r, repr(sorted(os.listdir())))" % marker, timeout, clock)
    for said in marked(out, marker):
        return ast.literal_eval(said.strip())
    raise DeployError("list files on %s: unexpected answer %r" % (port, out[-200:]))


def marked(out, mark):
    """What the board printed after `mark` on each line that starts with it (the code a deploy
    runs on the board marks its answers, so that the REPL's other output is left aside)."""
    for line in (out or b"").decode(errors="replace").splitlines():
        if line.startswith(mark):
            yield line[len(mark):]


def exec_code(port, code, timeout=DEFAULT_TIMEOUT, clock=WALL):
    """Run Python code on the board in its REPL; return what it printed (bytes).

    An exception on the board is a DeployError carrying its traceback."""
    return mpremote(port, ["exec", code], timeout, what="exec", clock=clock)


exec = exec_code  # noqa: A001 - the brief's name, as deploy.exec(port, code)


def deploy_board(port, config=None, files=None, timeout=DEFAULT_TIMEOUT, before=None, names=None, after=None,
                 clock=WALL):
    """Copy the firmware (default FIRMWARE_FILES and what the config's resource needs,
    resource_files; names: their names on the board, default their own) and, if given, the
    config dict as picoring.json, in one mpremote session. The board runs it after its next
    reset. Returns copy_files' summary."""
    if files is None:
        extra, extra_names = resource_files(config)
        files = list(FIRMWARE_FILES) + extra
        names = [f.name for f in FIRMWARE_FILES] + extra_names
    files = list(files)
    names = [Path(f).name for f in files] if names is None else list(names)
    dirs = make_dirs_code(names)
    if dirs:
        before = ["exec", dirs] + (["+"] + list(before) if before else [])
    with tempfile.TemporaryDirectory(prefix="picoring-deploy-") as tmp:
        if config is not None:
            cfg = Path(tmp) / CONFIG_NAME
            cfg.write_bytes(config_bytes(config))
            files.append(cfg)
            names.append(CONFIG_NAME)
        return copy_files(port, files, names, timeout, before=before, after=after, clock=clock)


def config_bytes(config):
    """picoring.json's bytes on a board, as deploy_board writes them (flash compares their hash)."""
    return json.dumps(config, sort_keys=True).encode()


def board_config(config, index, uart, n, baud, i2c=None, stood_still=None):
    """The config for virtual board `index` of n: `config` (a dict for every board, or a list
    with one per board) with {"virtual": {"uart": uart}} added (and "i2c": the ring's FRAM
    image, for a config with a resource), and the ring's own facts (firmware/main.py's
    "position", "size", "baud") filled in where the caller left them out."""
    if isinstance(config, (list, tuple)):
        config = config[index]
    cfg = json.loads(json.dumps(config or {}))  # a deep copy that is certainly JSON
    cfg.setdefault("virtual", {})["uart"] = uart
    if stood_still is not None:
        cfg["virtual"]["stood_still"] = str(stood_still)  # the ring's clock (virtual/ringclock.py, RingStoodStill)
    if cfg.get("resource") and i2c is not None:
        cfg["virtual"]["i2c"] = str(i2c)
    cfg.setdefault("position", index)
    cfg.setdefault("size", n)
    cfg.setdefault("baud", baud)
    return cfg


def start_order(n, protocol=None):
    """The other boards first, the position that makes the token last (0, or the protocol's
    holder option): a token must not reach a board that is still stopped or being deployed."""
    first = 0
    if protocol:
        from ..check.registry import first_holder

        first = first_holder(protocol)
    return [i for i in range(n) if i != first] + [first]


def _protocol_of(config):
    """The protocol of a config for every board, or of a list of one per board."""
    if isinstance(config, (list, tuple)):
        config = config[0] if config else None
    return (config or {}).get("protocol")


# -- the firmware in the form a board takes: one path for Picos and virtual boards -------------

ID_MARK = "@@picoring-id"
RM_MARK = "@@picoring-rm"
# Runs on the board before the copy: proves it is a MicroPython REPL and says what it is,
# with the .mpy files it loads (sys.implementation._mpy, '-' if it does not say).
ID_CODE = ("import sys\n"
           "try:\n import machine, binascii\n uid = binascii.hexlify(machine.unique_id()).decode()\n"
           "except Exception:\n uid = '-'\n"
           "print(%r, sys.implementation.name, sys.platform, '.'.join(str(x) for x in sys.implementation.version[:3]), uid, "
           "getattr(sys.implementation, '_mpy', '-'))"
           % ID_MARK)


HASH_MARK = "@@picoring-sha"
# Runs with ID_CODE in the same session: the SHA-256 of every file on the board, so that a deploy
# copies only what differs and, with nothing to copy, opens no second session.
HASH_CODE = ("import os, hashlib, binascii\n"
             "def _sha(d):\n"
             " for e in os.ilistdir(d or '.'):\n"
             "  p = d + '/' + e[0] if d else e[0]\n"
             "  if e[1] == 0x4000:\n"
             "   _sha(p)\n"
             "   continue\n"
             "  h = hashlib.sha256()\n"
             "  with open(p, 'rb') as f:\n"
             "   while True:\n"
             "    b = f.read(1024)\n"
             "    if not b:\n"
             "     break\n"
             "    h.update(b)\n"
             "  print(%r, binascii.hexlify(h.digest()).decode(), p)\n"
             "_sha('')\n" % HASH_MARK)


def board_hashes(out):
    """{name: SHA-256 hex} from HASH_CODE's output."""
    found = {}
    for said in marked(out, HASH_MARK):
        parts = said.split(None, 1)
        if len(parts) == 2:
            found[parts[1].strip()] = parts[0]
    return found


def remove_code(names):
    """Code that deletes these files from the board's root where they exist, and prints which."""
    return ("import os\nr = []\nfor n in %r:\n try:\n  os.remove(n)\n  r.append(n)\n except OSError:\n  pass\n"
            "print(%r, ' '.join(r))" % (list(names), RM_MARK))


def removed_names(out):
    for said in marked(out, RM_MARK):
        return said.split()
    return []


def _digest(path, digests):
    """path's SHA-256, from digests when an earlier board of the deploy has read it."""
    found = digests.get(path)
    if found is None:
        found = digests[path] = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    return found


def copy_firmware(port, cfg, files, compiler, no_compiler="no mpy-cross", timeout=COPY_TIMEOUT, cache=None, log=None,
                  what="", clock=WALL, digests=None, expect=None):
    """One board: ask it what it is and which .mpy it loads (one mpremote session), then copy the
    firmware in the form it takes (picoring.ring.mpy.select), its config as picoring.json, and delete
    the stale other form of each module (a second session). cfg None: no picoring.json (a board
    that only runs scripts: emulated.script.ScriptPico). Returns (copy_files' summary with
    "removed" added, identity, selection); a board that is not MicroPython gets nothing (summary
    None). digests: {path: SHA-256} shared by the boards of one deploy, so that each file is read
    and hashed once, not once a board. Raises DeployError.

    expect: the _mpy the board is known to say (a virtual board: the unix port's, unix_port_tag).
    The copy then goes in the session that identifies it, mpremote's own hash check skipping
    the files it has: a session less (0.1 s of a fresh ring of 3's 1.1 s deploy at load 4, about
    0.5 s at load 10, where an mpremote start waits for a core). A board that says
    otherwise gets the two sessions after all, which put the form it takes on it. Only for
    boards known to be MicroPython: the files are written before the board has said what it is."""
    log = log or (lambda text: None)
    digests = {} if digests is None else digests
    t0 = time.monotonic()
    files = list(FIRMWARE_FILES if files is None else files)
    extra, extra_names = resource_files(cfg)  # adafruit_bus_device in lib/ for --resource fram
    names = [Path(f).name for f in files] + extra_names
    where = " (%s)" % what if what else ""
    removed_first = []  # by a copy in the form expected, when the board then said otherwise
    if expect is not None:
        sel = mpy.select(files + extra, expect, compiler, cache, no_compiler=no_compiler, names=names)
        summary = deploy_board(port, cfg, sel["files"], timeout, before=["exec", ID_CODE], names=sel["names"],
                               after=["exec", remove_code(sel["remove"])], clock=clock)
        ident = identity(summary["output"])
        if ident and ident["implementation"] == "micropython" and ident.get("mpy") == str(expect):
            summary["removed"] = removed_names(summary["output"])
            log("copied %d of %d files in the session that identified it, as expected (%.1f s)%s"
                % (len(summary["copied"]), len(sel["names"]) + (cfg is not None), time.monotonic() - t0, where))
            return summary, ident, sel
        log("it says %s, not the expected _mpy %d: copying again in the form it takes"
            % ("_mpy %s" % ident.get("mpy") if ident else "nothing", expect))
        removed_first = removed_names(summary["output"])
    out = exec_code(port, ID_CODE + "\n" + HASH_CODE, timeout, clock)
    ident, on_board = identity(out), board_hashes(out)
    if ident and ident["implementation"] != "micropython":
        return None, ident, None
    tag = ident.get("mpy") if ident else None
    tag = int(tag) if tag and tag.isdigit() else None
    sel = mpy.select(files + extra, tag, compiler, cache, board_version=ident["version"] if ident else None,
                     no_compiler=no_compiler, names=names)
    for note in sel["notes"]:
        log(note)
    form = ("%d modules as .mpy %s" % (len(sel["compiled"]), mpy.tag_text(mpy.decode_tag(tag)))
            if sel["compiled"] else "sources")
    wanted = dict(zip(sel["names"], (_digest(f, digests) for f in sel["files"])))
    if cfg is not None:
        wanted[CONFIG_NAME] = hashlib.sha256(config_bytes(cfg)).hexdigest()
    same = sorted(name for name, digest in wanted.items() if on_board.get(name) == digest)
    stale = [name for name in sel["remove"] if name in on_board]
    if len(same) == len(wanted) and not stale:
        log("up to date: its %d files have the same SHA-256 (%.1f s)%s" % (len(same), time.monotonic() - t0, where))
        return {"copied": [], "up_to_date": same, "removed": removed_first, "output": out}, ident, sel
    todo = [(f, name) for f, name in zip(sel["files"], sel["names"]) if name not in same]
    new_cfg = cfg is not None and CONFIG_NAME not in same
    log("copying %d of %d files: the firmware (%s)%s%s" % (
        len(todo) + new_cfg, len(wanted), form, " and picoring.json" if new_cfg else "", where))
    summary = deploy_board(port, cfg if new_cfg else None, [f for f, _ in todo], timeout,
                           names=[name for _, name in todo], after=["exec", remove_code(stale)], clock=clock)
    summary["up_to_date"] = sorted(set(summary["up_to_date"]) | set(same))
    summary["removed"] = removed_first + [n for n in removed_names(summary["output"]) if n not in removed_first]
    log("copied in %.1f s" % (time.monotonic() - t0))
    return summary, ident, sel


def identity(out):
    """ID_CODE's answer: {"implementation", "platform", "version", "unique_id", "mpy"}, or None."""
    for said in marked(out, ID_MARK):
        parts = said.split()
        if len(parts) in (4, 5):
            return dict(zip(("implementation", "platform", "version", "unique_id", "mpy"), parts))
    return None


def deploy_boards(copies, files, timeout, clock):
    """Deploy each (port, config) of copies, every board at once. With files None, the firmware of
    the config's protocol, as `picoring flash` copies it (copy_firmware: only that protocol's
    module, .mpy where the board loads them, only what differs); else files as they are
    (deploy_board: e.g. a test's own main.py). Once every copy has ended, the first one's error,
    in board order, is raised (the boards after it are copied too: each is left in a known state)."""
    if files is not None:
        def copy(port, cfg):
            return deploy_board(port, cfg, files, timeout, clock=clock)
    else:
        firmware = {}  # protocol -> its files; an unknown protocol is said before any copy starts
        for _, cfg in copies:
            protocol = cfg.get("protocol")
            if protocol not in firmware:
                try:
                    firmware[protocol] = firmware_files(protocol=protocol)  # (None: every module)
                except ValueError as e:
                    raise DeployError(str(e)) from None
        compiler, no_compiler = find_compiler()
        digests = {}
        expect = unix_port_tag()  # every board of a virtual ring runs it

        def copy(port, cfg):
            summary, ident, _ = copy_firmware(port, cfg, firmware[cfg.get("protocol")], compiler, no_compiler, timeout,
                                              clock=clock, digests=digests, expect=expect)
            if summary is None:
                raise DeployError("%s runs %s, not MicroPython" % (port, ident["implementation"]))
            return summary
    return [f.result() for f in at_once([lambda port=port, cfg=cfg: copy(port, cfg) for port, cfg in copies])]


@functools.lru_cache(maxsize=None)
def find_compiler():
    """mpy.find_compiler(), asked once a process (it runs `mpy-cross --version`): a virtual ring
    is deployed again for each protocol of a `demo` or `compare`."""
    return mpy.find_compiler()


@functools.lru_cache(maxsize=None)
def unix_port_tag():
    """The sys.implementation._mpy of the unix port virtual boards run (virtual.board's
    find_micropython), asked of it once a process; None if it does not say."""
    from ..virtual.board import VirtualBoardError, find_micropython

    try:
        proc = subprocess.run([find_micropython(), "-c", "import sys\nprint(getattr(sys.implementation, '_mpy', '-'))"],
                              stdin=subprocess.DEVNULL, capture_output=True, timeout=DEFAULT_TIMEOUT)
    except (VirtualBoardError, OSError, subprocess.SubprocessError):
        return None
    text = proc.stdout.decode(errors="replace").strip()
    return int(text) if proc.returncode == 0 and text.isdigit() else None


def at_once(copies, name="deploy"):
    """Call each of copies (one board's copy each) in a thread of its own, up to COPY_AT_ONCE at a
    time: each board has its own USB port and mpremote session, and one after the other the
    copies were most of every `run --virtual` and `flash` (a ring of 3 took 6 to 20 s of a 36 s
    test). Returns their futures, every one done, in the order given."""
    if not copies:
        return []
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(len(copies), COPY_AT_ONCE),
                                               thread_name_prefix=name) as pool:
        return [pool.submit(copy) for copy in copies]


def deploy_virtual(ring, config=None, files=None, timeout=DEFAULT_TIMEOUT):
    """The real deploy path, end to end, on a VirtualRing or a RemoteRing: every board is reset
    into its REPL (so deploy does not depend on the old firmware), gets the firmware and its
    config through mpremote on its USB pty (every board at once: deploy_boards, the copy of
    `picoring flash`), and once all are deployed they are reset to run main.py in start_order.
    With picoring's own firmware (files None), each waits for its hello before the next starts,
    so board 0's token finds every board listening."""
    for b in ring.boards:
        ring.reset(b.index, run_main=False)
    # what each copy needs, asked of the ring here, one board at a time (a RemoteRing has one
    # control channel); then the copies, every board at once
    copies = []
    for b in ring.boards:
        b.wait_output(b">>> ", timeout)
        copies.append((b.usb_path, board_config(config, b.index, b.uart, ring.n, ring.baud, ring.fram_image,
                                                   ring.ring_clock_file)))
    deploy_boards(copies, files, timeout, ring.clock)
    for i in start_order(ring.n, _protocol_of(config)):
        ring.reset(i)
        if files is None:
            ring.boards[i].wait_output(b"!hello", timeout)


def deploy_virtual_cli(state_dir, config=None, files=None, timeout=DEFAULT_TIMEOUT):
    """As deploy_virtual, for the ring that `picoring virtual up` started in state_dir."""
    from ..virtual import supervisor
    from ..virtual.ringclock import stood_still_file
    from .ports import fram_image

    state = supervisor.read_state(state_dir)
    if state is None or not supervisor.is_up(state_dir):
        raise DeployError("no virtual ring is up in %s (start one with: picoring virtual up -n N)" % state_dir)
    for b in state["boards"]:
        supervisor.reset(state_dir, b["index"], repl=True)
    copies = [(b["usb"], board_config(config, b["index"], b["uart"], state["n"], state["baud"], fram_image(state_dir),
                                          stood_still_file(state_dir)))
              for b in state["boards"]]
    deploy_boards(copies, files, timeout, supervisor.CLOCK)
    for i in start_order(state["n"], _protocol_of(config)):
        supervisor.reset(state_dir, i)
    return state


def start_virtual(n, protocol, baud=115200, cs_us=0, console=None, regen_ms=None, audit=False, resource=None,
                  cs_hold_us=0, rogue=()):
    """A fresh ring of n virtual boards in a process of its own (virtual.remote.RemoteRing: its
    relay does not share this process's interpreter lock with the host's link readers), with
    the firmware deployed through mpremote (the real deploy path), configured for protocol.
    audit: the boards share the counter
    file of picoring.check.audit, incremented across every critical section. resource
    "fram": they share the ring's FRAM instead, through adafruit_bus_device (docs/fram.md),
    holding it cs_hold_us after each read. rogue: the boards that enter their critical
    section without the token (the fault rogue=B: the deliberately unsafe mode)."""
    from ..check import audit as audit_file
    from ..virtual.remote import RemoteRing

    ring = RemoteRing(n, baud=baud)
    ring.start()
    try:
        if console is not None:
            console.print("deploying the firmware to %d virtual boards with mpremote..." % n)
        config = {"protocol": protocol, "cs_us": cs_us}
        if regen_ms is not None:
            config["regen_ms"] = regen_ms
        if resource is not None:
            config.update(resource=resource, cs_hold_us=cs_hold_us)
        elif audit:
            config["audit_file"] = audit_file.path(ring)
        deploy_virtual(ring, [dict(config, rogue=True) if i in rogue else config for i in range(n)])
    except BaseException:
        ring.stop()
        raise
    return ring
