"""A ring by its labgrid place (ring/labgrid.py), loopback only: a labgrid coordinator and two
exporters on 127.0.0.1 stand for two hosts, each exporting half of a ring of virtual boards
as RawSerialPorts (the exporters start a ser2net per port while the place is acquired); the
place holds all four. `picoring flash` and `picoring run` by the place must give Q's exact
counts and release the place; bad places, other users, a silent coordinator and an exporter
that goes away mid-run must each be said in one line.

Needs labgrid (pip install 'picoring[labgrid]', in the test extra) and ser2net (Debian:
apt-get install ser2net; .ci/run installs it when it can); skipped, saying which, without."""

import json
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from picoring.bench.labgrid import LoopbackFarm, free_port, missing
from picoring.cli.common import CommandError, labgrid_ports
from picoring.cli.main import main
from picoring.ring import labgrid, ports

N = 4
PLACE = "ring"
USER = "picoring-test"  # LG_USERNAME of the picoring runs: the place's holder is known
MISSING = missing()

needs_farm = pytest.mark.skipif(bool(MISSING), reason="a labgrid farm on 127.0.0.1 needs " + ", ".join(MISSING))
needs_labgrid = pytest.mark.skipif(any(m.startswith("labgrid (") for m in MISSING),
                                   reason="needs labgrid: pip install 'picoring[labgrid]'")


@pytest.fixture(scope="module")
def farm(tmp_path_factory):
    """Two "hosts" (exporters host1 and host2), half of a ring of N virtual boards each."""
    with LoopbackFarm(tmp_path_factory.mktemp("farm"), N, hosts=2, place=PLACE, user=USER) as farm:
        yield farm


@pytest.fixture(scope="module")
def q_boards(farm):
    """The place's boards running Q, for the tests that run on them, whichever test ran first
    (they once counted on test_flash_and_run_by_place having run before them, on the same xdist
    worker). Flash copies only what changed: after that test's flash, every file is up to date."""
    flashed = farm.picoring("flash", "--labgrid", PLACE, "-p", "q")
    assert flashed.returncode == 0, flashed.stderr
    return farm


def _one_line(result):
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("picoring: "), result.stderr
    return lines[0]


# -- the ring by its place ------------------------------------------------------------

@pytest.mark.slow
@needs_farm
def test_flash_and_run_by_place(farm):
    # flash on a place the user holds: picoring uses it and leaves it theirs
    held = farm.client("-p", PLACE, "acquire")
    assert held.returncode == 0, held.stderr
    try:
        flashed = farm.picoring("flash", "--labgrid", PLACE, "-p", "q")
        assert flashed.returncode == 0, flashed.stderr
        assert flashed.stdout.count("rfc2217://127.0.0.1:") == N  # every board through its exporter's ser2net
        assert "acquired" not in flashed.stderr and "released" not in flashed.stderr
        assert farm.holder().endswith("/" + USER)  # picoring releases only what it acquired
    finally:
        farm.client("-p", PLACE, "release")

    # run on the idle place: picoring acquires it, and releases it at the end
    trace = farm.root / "trace.jsonl"
    k = 24
    ran = farm.picoring("run", "--labgrid", PLACE, "-p", "q", "-w", "adversarial", "-k", str(k), "--json",
                        "--trace", str(trace))
    assert ran.returncode == 0, ran.stderr
    assert "acquired place %s" % PLACE in ran.stderr and "released place %s" % PLACE in ran.stderr
    report = json.loads(ran.stdout)
    assert report["ok"], report["violations"]
    # Q: exactly n messages per request (under adversarial load too): its request and n - 1 token hops
    assert (report["n"], report["served"], report["requests"]) == (N, k, k)
    assert report["messages"] == {"request": k, "token": (N - 1) * k, "total": N * k}
    assert report["messages_per_request"] == N and report["logical_messages"] == N * k
    assert report["notices"] == [] and report["link_events"] == []
    assert len(trace.read_text().splitlines()) > N * k
    assert farm.holder() is None  # released: the next user can have it


PLUGIN_TEST = """
def test_on_the_place(ring, boards):
    assert [t.port.startswith("rfc2217://127.0.0.1:") for t in boards] == [True] * %d
    report = ring.run("q", "adversarial", 8)
    assert report["ok"] and report["messages"]["total"] == %d * 8
"""


@pytest.mark.slow
@needs_farm
def test_the_pytest_plugin_runs_on_a_place(farm, q_boards):
    """--ring-labgrid PLACE: the session's boards are the place's (running Q: --ring-flashed q)."""
    (farm.root / "test_on_place.py").write_text(PLUGIN_TEST % (N, N))
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--ring-labgrid", PLACE,
                          "--ring-flashed", "q", "test_on_place.py"], cwd=farm.root, env=farm.env,
                         capture_output=True, text=True, timeout=180)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "1 passed" in ran.stdout
    assert farm.holder() is None  # released when the session ended


@pytest.mark.slow
@needs_farm
def test_ctrl_c_releases_the_place(farm, q_boards):
    trace = farm.root / "ctrl-c.jsonl"
    run = subprocess.Popen([sys.executable, "-m", "picoring.cli.main", "run", "--labgrid", PLACE, "-p", "q", "-k", "5000",
                            "--trace", str(trace)],
                           env=farm.env, cwd=farm.root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        said = [run.stderr.readline()]
        assert said[0].startswith("picoring: labgrid: acquired place %s" % PLACE), said
        # Ctrl-C once the run is under way (its trace has the boards' events), not after a guess
        # of how long connecting takes: a loaded machine makes any guess wrong either way.
        give_up = time.monotonic() + 180  # (a run that never starts fails here instead of hanging)
        while not (trace.exists() and len(trace.read_text().splitlines()) > 50):
            assert run.poll() is None and time.monotonic() < give_up, said
            time.sleep(0.05)
        assert farm.holder().endswith("/" + USER)
        run.send_signal(signal.SIGINT)
        said += run.stderr.readlines()
        assert run.wait(60) == 130, said
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert said[-2:] == ["picoring: interrupted\n", "picoring: labgrid: released place %s\n" % PLACE], said
    assert farm.holder() is None


# -- bad input ------------------------------------------------------------------------

@pytest.mark.slow
@needs_farm
def test_a_place_that_does_not_exist(farm):
    line = _one_line(farm.picoring("flash", "--labgrid", "nosuch", "-p", "q"))
    assert line == ("picoring: no place nosuch on the labgrid coordinator at %s (places there: %s; make one with "
                    "labgrid-client -p nosuch create, then add-match EXPORTER/GROUP/NetworkSerialPort/*)"
                    % (farm.address, PLACE))


@pytest.mark.slow
@needs_farm
def test_a_place_another_user_holds_says_who(farm):
    assert farm.client("-p", PLACE, "acquire", user="alice").returncode == 0
    try:
        line = _one_line(farm.picoring("run", "--labgrid", PLACE, "-p", "q", "-k", "4"))
        assert line.startswith("picoring: place %s is held by alice on %s (place last changed " % (PLACE, socket.gethostname()))
        assert "labgrid-client -p %s allow %s/%s" % (PLACE, socket.gethostname(), USER) in line
        assert farm.holder() == "%s/alice" % socket.gethostname()  # not taken from her, not released
    finally:
        farm.client("-p", PLACE, "release", user="alice")


@needs_labgrid
def test_a_coordinator_nobody_runs(monkeypatch, capsys):
    port = free_port()  # nothing listens there
    assert main(["run", "--labgrid", PLACE, "--coordinator", "127.0.0.1:%d" % port, "-p", "q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["picoring: the labgrid coordinator at 127.0.0.1:%d does not answer (cannot connect): is "
                   "labgrid-coordinator running there? (give its address with --coordinator HOST:PORT or "
                   "LG_COORDINATOR)" % port]


@pytest.mark.slow
@needs_labgrid
def test_a_coordinator_that_does_not_answer(monkeypatch, capsys):
    with socket.socket() as silent:  # takes the connection, never says a word
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        address = "127.0.0.1:%d" % silent.getsockname()[1]
        monkeypatch.setenv("LG_COORDINATOR", address)
        t0 = time.monotonic()
        assert main(["flash", "--ports", "labgrid:" + PLACE, "-p", "q"]) == 2
        assert time.monotonic() - t0 < labgrid.CONNECT_TIMEOUT_S + 5
    assert capsys.readouterr().err.strip().splitlines() == [
        "picoring: the labgrid coordinator at %s does not answer (no answer within 5 s): is labgrid-coordinator "
        "running there? (give its address with --coordinator HOST:PORT or LG_COORDINATOR)" % address]


@pytest.mark.slow
@needs_farm
def test_an_exporter_that_goes_away_mid_run(farm, q_boards, monkeypatch, capsys):
    """Its boards' links are lost as when a USB cable is pulled: the run goes on, keeps its trace,
    says which ports went away, and the place is released."""
    # (REPLY_TIMEOUT_S is the run's own 30 s: a command to a port that is gone fails at once
    # (BoardLink.command), so the end does not wait on it. The 2 s this test once set held for
    # the run's start too, and a loaded run's first status through ser2net took longer.)
    for key in ("LG_COORDINATOR", "XDG_RUNTIME_DIR", "LG_USERNAME"):
        monkeypatch.setenv(key, farm.env[key])
    monkeypatch.chdir(farm.root)
    trace = farm.root / "outage.jsonl"
    gone = threading.Event()

    def pull_host2():  # once the run is under way
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not gone.is_set():
            if trace.exists() and len(trace.read_text().splitlines()) > 200:
                farm.stop_process("exporter-host2")
                gone.set()
                return
            time.sleep(0.1)

    puller = threading.Thread(target=pull_host2, daemon=True)
    puller.start()
    try:
        status = main(["run", "--labgrid", PLACE, "-p", "q", "-w", "poisson", "-k", "600", "--stall-timeout", "2",
                       "--json", "--trace", str(trace)])
    finally:
        gone.set()
        puller.join()
        farm.exporter("host2", farm.shares()["host2"])  # back, for whatever runs after
    out, err = capsys.readouterr()
    assert out, err  # (no report: what the run said instead)
    report = json.loads(out)
    assert status == 1 and not report["ok"]
    lost = sorted(e["board"] for e in report["link_events"] if e["what"] == "disconnected")
    assert lost == list(range(N // 2, N)), report["link_events"]
    assert all("the port went away" in e["text"] for e in report["link_events"] if e["what"] == "disconnected")
    assert report["served"] > 0 and len(trace.read_text().splitlines()) > 200  # the trace is kept
    assert "released place %s" % PLACE in err
    assert farm.holder() is None


# -- the parts, without a farm ------------------------------------------------------------

def test_the_farm_starts_again_an_exporter_that_asks_for_it(tmp_path):
    """labgrid-exporter exits with 100 when it lost its coordinator (a loaded machine can hold
    the coordinator past the exporter's keepalive): the farm starts it again, as a service
    manager does; an exporter the farm stops itself stays stopped."""
    from picoring.bench.labgrid import EXPORTER_RESTART_STATUS

    farm = LoopbackFarm(tmp_path, N)
    started = tmp_path / "started"
    code = ("import pathlib, sys, time\n"
            "p = pathlib.Path(%r)\n"
            "p.write_text(p.read_text() + 'x' if p.exists() else 'x')\n"
            "sys.exit(%d) if p.read_text() == 'x' else time.sleep(60)\n" % (str(started), EXPORTER_RESTART_STATUS))
    first = farm.spawn("exporter-x", sys.executable, "-c", code, restart_status=EXPORTER_RESTART_STATUS)
    assert first.wait(30) == EXPORTER_RESTART_STATUS
    deadline = time.monotonic() + 30
    while not (started.exists() and started.read_text() == "xx") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert started.read_text() == "xx" and farm.restarts == {"exporter-x": 1}
    second = farm.procs["exporter-x"]
    assert second is not first and second.poll() is None
    farm.stop_process("exporter-x")
    for watcher in farm._watchers:
        watcher.join(30)
    assert "exporter-x" not in farm.procs and farm.restarts == {"exporter-x": 1}
    assert started.read_text() == "xx"



def test_place_specs():
    assert labgrid.parse_spec("labgrid:ring") == ("ring", None)
    assert labgrid.parse_spec("labgrid:ring@lab:20408") == ("ring", "lab:20408")
    with pytest.raises(labgrid.LabgridError, match="write labgrid:PLACE"):
        labgrid.parse_spec("labgrid:")
    assert labgrid._natural("board10") > labgrid._natural("board2")


def test_labgrid_and_coordinator_options_become_a_ports_spec():
    def args(**kw):
        import argparse

        base = dict(ports=None, labgrid=None, coordinator=None)
        base.update(kw)
        ns = argparse.Namespace(**base)
        labgrid_ports(ns)
        return ns.ports

    assert args(labgrid="ring") == "labgrid:ring"
    assert args(labgrid="ring", coordinator="lab:1") == "labgrid:ring@lab:1"
    assert args(ports="labgrid:ring", coordinator="lab:1") == "labgrid:ring@lab:1"
    assert args(ports="/dev/ttyACM0") == "/dev/ttyACM0"
    with pytest.raises(CommandError, match="--ports or --labgrid, not both"):
        args(ports="/dev/ttyACM0", labgrid="ring")
    with pytest.raises(CommandError, match="--coordinator is for a labgrid place"):
        args(ports="/dev/ttyACM0", coordinator="lab:1")


class _Writer:
    """A socket as PortManager writes to it (its connection's write)."""

    def __init__(self, sock):
        self.write = sock.sendall


def test_a_place_port_opens_when_its_server_is_slow_to_negotiate():
    """A place's port URL waits for a slow RFC 2217 server: pyserial's default 3 s was too short
    for ser2net beside a loaded test suite (the flash said "cannot open rfc2217://...": mpremote's
    "failed to access"). Here a server that starts negotiating after 3.5 s; no labgrid needed."""
    import serial
    from serial.rfc2217 import PortManager

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def serve():
        conn, _ = listener.accept()
        time.sleep(3.5)  # (beyond pyserial's 3 s, within the URL's)
        manager = PortManager(serial.serial_for_url("loop://"), _Writer(conn))
        conn.settimeout(0.2)
        try:
            while True:
                try:
                    data = conn.recv(1024)
                except socket.timeout:
                    continue
                if not data:
                    return
                for byte in manager.filter(data):
                    manager.serial.write(byte)
        except OSError:
            return
        finally:
            conn.close()

    server = threading.Thread(target=serve, daemon=True)
    server.start()
    try:
        link = serial.serial_for_url(labgrid._url("127.0.0.1", port), timeout=1)
        link.close()
    finally:
        listener.close()
        server.join(5)


def test_ring_file_of_a_place(tmp_path):
    """discover over a place writes its boards by resource (their URLs change with each acquire)."""
    entry = {"place": PLACE, "resource": "host1/ring/board0", "name": "board0"}
    targets = [ports.Target("rfc2217://h:%d?ign_set_control" % (1000 + i),
                            labgrid=dict(entry, resource="host%d/ring/board%d" % (1 + i // 2, i), name="board%d" % i))
               for i in (2, 0, 1, 3)]
    ports.write_ring_file(tmp_path / "ring.json", targets)
    entries = ports.read_ring_file(tmp_path / "ring.json")
    assert labgrid.ring_file_order(entries) == (
        "labgrid:ring", ["host2/ring/board2", "host1/ring/board0", "host1/ring/board1", "host2/ring/board3"])
    assert labgrid.ring_file_order(entries, "other") is None
    assert labgrid.ring_file_order([{"position": 0, "port": "/dev/ttyACM0"}]) is None


@needs_labgrid
def test_the_example_farm_files_are_what_labgrid_reads():
    """boards/labgrid/: two exporters' configurations of one 16-Pico ring, read as labgrid's
    exporter reads them (a Jinja template: a comment starting with a single # is a statement)."""
    import contextlib
    import io

    from labgrid.remote.config import ResourceConfig
    from labgrid.resource.udev import USBSerialPort

    from conftest import ROOT

    boards = {}
    for host in ("host1", "host2"):
        with contextlib.redirect_stdout(io.StringIO()):  # it prints what it read
            config = ResourceConfig(str(ROOT / "boards" / "labgrid" / ("exporter-%s.yaml" % host)))
        for name, resource in config.data["ring-a"].items():
            assert resource["cls"] == "USBSerialPort"
            USBSerialPort(target=None, name=None, match=dict(resource["match"]))  # labgrid takes the match
            boards[name] = resource["match"]["ID_SERIAL_SHORT"]
    assert sorted(boards, key=labgrid._natural) == ["pico%02d" % i for i in range(16)]  # ring order by name
    assert len(set(boards.values())) == 16


def test_without_labgrid_a_place_says_how_to_install_it(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "labgrid.remote", None)  # as if labgrid were not installed
    monkeypatch.setitem(sys.modules, "labgrid.remote.client", None)
    assert main(["flash", "--labgrid", PLACE, "-p", "q"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        "picoring: labgrid is not installed: %s -m pip install 'picoring[labgrid]'" % sys.executable]


def test_picoring_does_not_import_labgrid_unless_a_place_is_named():
    code = ("import contextlib, io, sys\n"
            "from picoring.cli.main import main\n"
            "from picoring.ring import ports\n"
            "ports.resolve_many(['/dev/null'])\n"
            "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
            "    main(['run', '--help'])\n"
            "print(sorted(m for m in sys.modules if 'labgrid' in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stderr
