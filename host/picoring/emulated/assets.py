"""What an emulated Pico needs from outside the repository, found and checked before use:

- the MicroPython firmware for the Pico (a UF2 for the RP2040) and the RP2040 boot ROM image,
  both given by the user (option, environment or ~/.config/picoring/emulated.json);
- Node.js 20.6 or newer, and rp2040js (pinned) installed from npm on first use into a user
  cache folder.

Every failure is one EmulatedError line that says what is missing and what to do.
"""

import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

RP2040JS_VERSION = "1.4.1"
NODE_MIN = (20, 6)

# The files these were tested with (docs/emulated.md says where each comes from).
KNOWN_FIRMWARE = {
    "f0c4facbfde486d19340c9218d530723d0aaa6ace85c1337a1d8b9b47accaea3": "MicroPython v1.28.0 RPI_PICO",
}
KNOWN_BOOTROM = {
    "99f8a1f813ce3aa9415884de3fb6c5b962d3c6fa0394b05413ad3c7b3c39ec62": "RP2040 boot ROM B1 (rp2040js demo/bootrom.ts)",
}

UF2_MAGIC = (0x0A324655, 0x9E5D5157)
UF2_END_MAGIC = 0x0AB16F30
UF2_FLAG_FAMILY = 0x2000
UF2_FAMILIES = {0xE48BFF56: "RP2040", 0xE48BFF59: "RP2350 (Arm, secure)", 0xE48BFF5A: "RP2350 (RISC-V)",
                0xE48BFF5B: "RP2350 (Arm, non-secure)", 0xE48BFF57: "absolute (any RP chip)"}
RP2040_FAMILY = 0xE48BFF56
BOOTROM_BYTES = 16384

ENV_FIRMWARE = "PICORING_PICO_UF2"
ENV_BOOTROM = "PICORING_RP2040_BOOTROM"
ENV_CACHE = "PICORING_EMULATED_CACHE"


class EmulatedError(Exception):
    """A one-line, user-facing reason why emulated Picos cannot start."""


def config_file():
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "picoring" / "emulated.json"


def cache_dir():
    if os.environ.get(ENV_CACHE):
        return Path(os.environ[ENV_CACHE])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "picoring" / "emulated"


def _configured(explicit, env, key, what, option):
    """explicit, else $env, else the config file's key; an EmulatedError naming all three."""
    if explicit:
        return Path(explicit).expanduser()
    if os.environ.get(env):
        return Path(os.environ[env]).expanduser()
    cfg = config_file()
    if cfg.exists():
        try:
            value = json.loads(cfg.read_text()).get(key)
        except (ValueError, AttributeError) as e:
            raise EmulatedError("%s: not a JSON object (%s)" % (cfg, e))
        if value:
            return Path(value).expanduser()
    raise EmulatedError("emulated Picos need %s: give %s FILE, set %s, or put {\"%s\": \"FILE\"} in %s "
                        "(docs/emulated.md says where to get it)" % (what, option, env, key, cfg))


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def check_firmware(path):
    """The UF2's SHA-256, after checking that it is a UF2 whose blocks are all for the RP2040."""
    path = Path(path)
    if not path.is_file():
        raise EmulatedError("firmware %s: no such file" % path)
    data = path.read_bytes()
    if len(data) < 512 or len(data) % 512:
        raise EmulatedError("firmware %s: not a UF2 file (%d bytes, not a whole number of 512-byte blocks)"
                            % (path, len(data)))
    for off in range(0, len(data), 512):
        m0, m1, flags, _addr, size, _no, _count, family = struct.unpack_from("<8I", data, off)
        if (m0, m1) != UF2_MAGIC or struct.unpack_from("<I", data, off + 508)[0] != UF2_END_MAGIC:
            raise EmulatedError("firmware %s: not a UF2 file (block %d has no UF2 magic)" % (path, off // 512))
        if not flags & UF2_FLAG_FAMILY or family != RP2040_FAMILY:
            name = UF2_FAMILIES.get(family, "family 0x%08x" % family) if flags & UF2_FLAG_FAMILY else "no family"
            raise EmulatedError("firmware %s: a UF2 for %s, not for the RP2040 (a Pico 2's RP2350 is not emulated; "
                                "use the firmware for the Raspberry Pi Pico)" % (path, name))
        if size > 476:
            raise EmulatedError("firmware %s: block %d has a payload of %d bytes (UF2 allows 476)" % (path, off // 512, size))
    return hashlib.sha256(data).hexdigest()


def check_bootrom(path):
    """The boot ROM's SHA-256, after checking that it is 16 KB: a raw image (.bin) or a
    TypeScript/JavaScript array of 4096 32-bit words (rp2040js's demo/bootrom.ts)."""
    path = Path(path)
    if not path.is_file():
        raise EmulatedError("boot ROM %s: no such file" % path)
    data = path.read_bytes()
    if len(data) != BOOTROM_BYTES:
        words = re.findall(rb"0x[0-9a-fA-F]{1,8}", data.split(b"Uint32Array", 1)[-1])
        if len(words) != BOOTROM_BYTES // 4:
            raise EmulatedError("boot ROM %s: neither a 16 KB image nor an array of 4096 32-bit words (found %d)"
                                % (path, len(words)))
    return hashlib.sha256(data).hexdigest()


def resolve_files(firmware=None, bootrom=None):
    """{"firmware": path, "bootrom": path, "firmware_sha256": ..., "bootrom_sha256": ..., "notes": [...]}."""
    fw = _configured(firmware, ENV_FIRMWARE, "firmware", "MicroPython's firmware for the Pico (a .uf2)", "--firmware")
    rom = _configured(bootrom, ENV_BOOTROM, "bootrom", "the RP2040 boot ROM image", "--bootrom")
    fw_sum, rom_sum = check_firmware(fw), check_bootrom(rom)
    notes = []
    if fw_sum not in KNOWN_FIRMWARE:
        notes.append("firmware %s (SHA-256 %s) is not the tested MicroPython v1.28.0: emulated timing and gaps may "
                     "differ" % (fw, fw_sum[:16]))
    if rom_sum not in KNOWN_BOOTROM:
        notes.append("boot ROM %s (SHA-256 %s) is not the tested B1 image" % (rom, rom_sum[:16]))
    return {"firmware": str(fw.resolve()), "bootrom": str(rom.resolve()), "firmware_sha256": fw_sum,
            "bootrom_sha256": rom_sum, "notes": notes}


def node_command():
    """The node executable, checked to be 20.6 or newer."""
    node = os.environ.get("PICORING_NODE") or shutil.which("node")
    if not node:
        raise EmulatedError("emulated Picos need Node.js %d.%d or newer: node is not on PATH (install it, or set "
                            "PICORING_NODE)" % NODE_MIN)
    try:
        out = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError as e:
        raise EmulatedError("emulated Picos need Node.js: cannot run %s (%s)" % (node, e))
    m = re.match(r"v(\d+)\.(\d+)", out)
    if not m or (int(m.group(1)), int(m.group(2))) < NODE_MIN:
        raise EmulatedError("emulated Picos need Node.js %d.%d or newer; %s is %s" % (NODE_MIN + (node, out or "?")))
    return node


_NET_ERRORS = re.compile(r"ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|ENETUNREACH|EHOSTUNREACH|"
                         r"socket hang up|network|proxy", re.I)


def rp2040js_modules(say=None):
    """The node_modules folder holding rp2040js RP2040JS_VERSION, installed from npm on first use."""
    root = cache_dir() / ("rp2040js-" + RP2040JS_VERSION)
    if (root / ".complete").exists():
        return root / "node_modules"
    npm = os.environ.get("PICORING_NPM") or shutil.which("npm")
    if not npm:
        raise EmulatedError("emulated Picos install rp2040js %s from npm once, and npm is not on PATH"
                            % RP2040JS_VERSION)
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(str(root) + ".install-%d" % os.getpid())
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        (tmp / "package.json").write_text(json.dumps({"name": "picoring-emulated", "private": True,
                                                      "dependencies": {"rp2040js": RP2040JS_VERSION}}))
        if say:
            say("installing rp2040js %s from npm into %s (first use only)..." % (RP2040JS_VERSION, root))
        p = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error", "--fetch-retries=1",
                            "--fetch-timeout=60000", "--save-exact"], cwd=tmp, capture_output=True, text=True,
                           timeout=600)
        if p.returncode:
            text = (p.stdout + p.stderr).strip()
            registry = subprocess.run([npm, "config", "get", "registry"], capture_output=True, text=True).stdout.strip()
            if _NET_ERRORS.search(text):
                raise EmulatedError("cannot reach the npm registry (%s) to install rp2040js %s (once, into %s): check "
                                    "the network or npm's proxy settings" % (registry or "?", RP2040JS_VERSION, root))
            raise EmulatedError("npm could not install rp2040js %s: %s" % (RP2040JS_VERSION,
                                                                         text.splitlines()[-1] if text else p.returncode))
        (tmp / ".complete").write_text(RP2040JS_VERSION + "\n")
        try:
            tmp.rename(root)
        except OSError:  # another command finished the same install meanwhile: keep the first
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return root / "node_modules"
