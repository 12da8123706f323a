"""Emulated Picos (picoring.emulated): the files they need checked before use, node and npm
missing, one clear line each; and, marked slow (they start node: each busy chip takes a core),
a ring brought up and down, with the user's files from ../shared/rp2040 (skipped without them)."""

import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ROOT
from picoring.cli.main import main
from picoring.emulated import assets, supervisor
from picoring.emulated.assets import EmulatedError

SHARED = next((d for d in (ROOT.parent / "shared" / "rp2040", ROOT.parent.parent / "shared" / "rp2040") if d.exists()),
              ROOT.parent / "shared" / "rp2040")
UF2 = Path(os.environ.get(assets.ENV_FIRMWARE) or SHARED / "firmware" / "micropython-v1.28.0-RPI_PICO.uf2")
BOOTROM = Path(os.environ.get(assets.ENV_BOOTROM) or SHARED / "bootrom.ts")


def uf2_block(family, flags=0x2000, no=0, count=1):
    head = struct.pack("<8I", 0x0A324655, 0x9E5D5157, flags, 0x10000000 + 256 * no, 256, no, count, family)
    return head + bytes(476) + struct.pack("<I", 0x0AB16F30)


def test_a_file_that_is_not_a_uf2_is_named(tmp_path):
    f = tmp_path / "firmware.uf2"
    f.write_bytes(b"\x7fELF" + bytes(1020))
    with pytest.raises(EmulatedError, match=r"firmware .*firmware.uf2: not a UF2 file \(block 0 has no UF2 magic\)"):
        assets.check_firmware(f)
    f.write_bytes(b"hello")
    with pytest.raises(EmulatedError, match="not a whole number of 512-byte blocks"):
        assets.check_firmware(f)


def test_a_uf2_for_another_chip_is_refused(tmp_path):
    f = tmp_path / "pico2.uf2"
    f.write_bytes(uf2_block(assets.RP2040_FAMILY) + uf2_block(0xE48BFF59, no=1, count=2))
    with pytest.raises(EmulatedError, match=r"a UF2 for RP2350 \(Arm, secure\), not for the RP2040"):
        assets.check_firmware(f)
    f.write_bytes(uf2_block(assets.RP2040_FAMILY))
    assert assets.check_firmware(f) == assets.sha256(f)


def test_missing_and_malformed_boot_rom(tmp_path, monkeypatch):
    monkeypatch.delenv(assets.ENV_BOOTROM, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    fw = tmp_path / "fw.uf2"
    fw.write_bytes(uf2_block(assets.RP2040_FAMILY))
    with pytest.raises(EmulatedError, match=r"need the RP2040 boot ROM image: give --bootrom FILE, set "
                                            r"PICORING_RP2040_BOOTROM, or put"):
        assets.resolve_files(fw, None)
    with pytest.raises(EmulatedError, match=r"boot ROM .*nope.bin: no such file"):
        assets.resolve_files(fw, tmp_path / "nope.bin")
    rom = tmp_path / "rom.ts"
    rom.write_text("export const bootromB1 = new Uint32Array([0x1, 0x2]);")
    with pytest.raises(EmulatedError, match=r"neither a 16 KB image nor an array of 4096 32-bit words \(found 2\)"):
        assets.resolve_files(fw, rom)
    rom.write_bytes(bytes(16384))  # a raw image: accepted, with a note that it is not the tested one
    files = assets.resolve_files(fw, rom)
    assert [n.split(" (")[0] for n in files["notes"]] == ["firmware %s" % fw, "boot ROM %s" % rom]


def test_the_config_file_names_the_files(tmp_path, monkeypatch):
    monkeypatch.delenv(assets.ENV_FIRMWARE, raising=False)
    monkeypatch.delenv(assets.ENV_BOOTROM, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    fw, rom = tmp_path / "fw.uf2", tmp_path / "rom.bin"
    fw.write_bytes(uf2_block(assets.RP2040_FAMILY))
    rom.write_bytes(bytes(16384))
    (tmp_path / "picoring").mkdir()
    (tmp_path / "picoring" / "emulated.json").write_text('{"firmware": "%s", "bootrom": "%s"}' % (fw, rom))
    files = assets.resolve_files()
    assert (files["firmware"], files["bootrom"]) == (str(fw), str(rom))


def test_no_node_or_too_old(tmp_path, monkeypatch):
    monkeypatch.setenv("PICORING_NODE", str(tmp_path / "no-node"))
    with pytest.raises(EmulatedError, match="need Node.js: cannot run"):
        assets.node_command()
    old = tmp_path / "old-node"  # a stand-in, not node: named so that the slow guard does not take it for one
    old.write_text("#!/bin/sh\necho v18.19.0\n")
    old.chmod(0o755)
    monkeypatch.setenv("PICORING_NODE", str(old))
    with pytest.raises(EmulatedError, match=r"need Node.js 20.6 or newer; .*node is v18.19.0"):
        assets.node_command()


def test_npm_unreachable_is_one_line(tmp_path, monkeypatch):
    """npm that cannot reach its registry (a stand-in that fails as npm does): one line, nothing
    left in the cache."""
    npm = tmp_path / "npm"
    npm.write_text("#!/bin/sh\n[ \"$1\" = config ] && { echo https://registry.example/; exit 0; }\n"
                   "echo 'npm error code ENOTFOUND' >&2\necho 'npm error network request failed' >&2\nexit 1\n")
    npm.chmod(0o755)
    monkeypatch.setenv("PICORING_NPM", str(npm))
    monkeypatch.setenv(assets.ENV_CACHE, str(tmp_path / "cache"))
    with pytest.raises(EmulatedError) as e:
        assets.rp2040js_modules()
    assert str(e.value).startswith("cannot reach the npm registry (https://registry.example/) to install rp2040js 1.4.1")
    assert "\n" not in str(e.value)
    assert list((tmp_path / "cache").iterdir()) == []


def test_cli_says_what_is_missing(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(assets.ENV_FIRMWARE, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert main(["emulated", "up", "-n", "3", "--dir", str(tmp_path / "ring")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("picoring: emulated Picos need MicroPython's firmware for the Pico (a .uf2): give --firmware")
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "ring").exists()


needs_files = pytest.mark.skipif(not (UF2.exists() and BOOTROM.exists()),
                                 reason="needs the Pico firmware and boot ROM of ../shared/rp2040 (%s)" % SHARED)


@pytest.mark.slow
@needs_files
def test_up_then_down_leaves_nothing(tmp_path):
    state_dir = tmp_path / "ring"
    state = supervisor.start(state_dir, 2, UF2, BOOTROM)
    try:
        ports = [b["usb"] for b in state["boards"]]
        assert ports == [str(state_dir / "ttyE0"), str(state_dir / "ttyE1")]
        assert all(os.path.realpath(p).startswith("/dev/pts/") for p in ports)
        pids = (state["supervisor_pid"], state["node_pid"])
    finally:
        assert supervisor.stop(state_dir)
    assert not any(supervisor._alive(p) for p in pids)
    assert not state_dir.exists()  # it created the folder, and removed it


@pytest.mark.slow
@needs_files
def test_a_killed_command_stops_its_chips(tmp_path):
    """`run --emulated`'s ring (EmulatedRing) dies with the command, even on SIGKILL."""
    code = ("import sys, time\nfrom picoring.emulated.supervisor import EmulatedRing\n"
            "r = EmulatedRing(2, %r, %r)\nprint(r.state['supervisor_pid'], r.state['node_pid'], r.state_dir, "
            "flush=True)\ntime.sleep(600)\n" % (str(UF2), str(BOOTROM)))
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        sup, node, state_dir = p.stdout.readline().split()
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (supervisor._alive(int(sup)) or supervisor._alive(int(node))):
            time.sleep(0.1)
        assert not supervisor._alive(int(sup)) and not supervisor._alive(int(node))
        assert not Path(state_dir).exists()  # its ports and temporary folder went with it
    finally:
        if p.poll() is None:
            p.kill()


def test_chip_time_over_a_run_fills_unknown_clock_rates():
    """run --emulated: the emulator's own count of chip time over the run; a board whose pings
    left its clock rate unknown gets the emulator's rate, and says where each came from."""
    from picoring.cli.run import chip_time_text, note_chip_time

    before = {"chip_s": 10.0, "wall_s": 20.0, "cycles": [0, 125_000_000], "frames": [5, 5],
              "turnaround_ns": [0, 1000], "turnarounds": [0, 1]}
    after = {"chip_s": 12.0, "wall_s": 30.0, "cycles": [250_000_000, 187_500_000], "stopped": [None, None],
             "frames": [1005, 1006], "turnaround_ns": [1_500_000, 1000], "turnarounds": [1000, 1]}
    report = {"boards": [{"clock_rate": None}, {"clock_rate": 0.21}]}
    note_chip_time(report, before, after)
    assert report["emulated"] == {"chip_s": 2.0, "wall_s": 10.0, "chip_per_wall": 0.2, "load": [1.0, 0.25],
                                  "hops_per_chip_s": 1000.5, "turnaround_us": [1.5, None], "stopped": [None, None]}
    assert report["boards"] == [{"clock_rate": 0.2, "clock_rate_from": "emulator"},
                                {"clock_rate": 0.21, "clock_rate_from": "pings"}]
    assert chip_time_text(report["emulated"]) == (
        "emulated Picos: 2.00 s of chip time in 10.0 s of wall time (0.200 chip-seconds per wall-second); CPU load "
        "per board 100% 25%; latencies above are host time")
    assert supervisor.clock_over(None, after)["chip_per_wall"] == 0.4  # since power-on
    assert supervisor.clock_over(before, None)["chip_per_wall"] is None


def test_a_wait_on_an_emulated_chip_counts_its_chip_time(tmp_path):
    """A loaded suite run: a script on an emulated Pico ran 13.2 s of chip time in 624.5 s of wall
    time, and its guard of 300 s of wall time without output killed it mid-run. ScriptPico's
    waits count chip time (ChipClock: the wall time in which the chip did not run is left out,
    from the emulator's samples); a hung chip still runs out its deadline."""
    import json

    from picoring.emulated.supervisor import CLOCK, ChipClock

    def sample(wall_s, chip_s):
        (tmp_path / CLOCK).write_text(json.dumps({"wall_s": wall_s, "chip_s": chip_s}))

    class Clock(ChipClock):  # (the wall time a test moves itself)
        wall = 0.0

        def monotonic(self):
            return self.wall

    sample(100.0, 20.0)  # (the emulator up for a while: counted from the clock's first sample)
    clock = Clock(tmp_path)
    quiet = clock.deadline(60)
    assert clock.stalled() == 0.0 and quiet.left() == 60
    clock.wall = 600.0
    sample(700.0, 32.0)  # 12 s of chip time in 600 s of wall time: a loaded machine
    assert clock.stalled() == 588.0 and quiet.left() == 48 and not quiet.expired()
    assert quiet.not_counted() == " (and 588.0 s more in which the emulated chip did not run: not counted)"
    clock.wall = 650.0
    sample(750.0, 82.0)  # a hung chip runs at the pace of wall time (the emulator never runs ahead)
    assert quiet.expired()
    (tmp_path / CLOCK).unlink()  # the emulator gone: what it said last stands, wall time runs on
    assert clock.stalled() == 588.0


@pytest.mark.slow
@needs_files
def test_a_chip_that_stops_is_named_and_the_others_run_on(tmp_path):
    """An undefined instruction (a HardFault on a Cortex-M0+) on board 1: board 1 stops, is
    named with what stopped it, and board 0 still answers at its REPL."""
    import serial

    from picoring.cli.emulated import clock_text

    state_dir = tmp_path / "ring"
    state = supervisor.start(state_dir, 2, UF2, BOOTROM)
    try:
        code = b"import micropython\r\n@micropython.asm_thumb\r\ndef boom():\r\n    data(2, 0xde00)\r\n\r\nboom()\r\n"
        with serial.Serial(state["boards"][1]["usb"], timeout=1) as port:
            port.write(b"\x05" + code + b"\x04")  # paste mode, then run it
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not ((supervisor.read_clock(state_dir) or {}).get("stopped") or [0, 0])[1]:
                time.sleep(0.2)
        clock = supervisor.read_clock(state_dir)
        assert clock["stopped"][0] is None
        assert clock["stopped"][1].startswith("HardFault (undefined instruction) at PC 0x2")
        assert "board 1  %s  CPU" % state["boards"][1]["usb"] in clock_text(state, clock)
        assert "STOPPED: HardFault (undefined instruction)" in clock_text(state, clock).splitlines()[-1]
        with serial.Serial(state["boards"][0]["usb"], timeout=1) as port:
            port.write(b"\r\nprint(6 * 7)\r\n")
            seen, deadline = b"", time.monotonic() + 30
            while b"42" not in seen and time.monotonic() < deadline:
                seen += port.read(256)
        assert b"42" in seen
    finally:
        supervisor.stop(state_dir)
