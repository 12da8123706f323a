"""Bad arguments are caught before anything starts, and say what is wrong (issue 18, item 1)."""

import json
import os
import subprocess
import sys

import pytest

from picoring.cli.main import main
from picoring.ring import deploy
from picoring.virtual import supervisor


@pytest.fixture
def no_boards(monkeypatch):
    """Fail the test if a command starts a virtual board."""
    def started(*a, **k):
        raise AssertionError("virtual boards were started before the arguments were checked")

    monkeypatch.setattr(deploy, "start_virtual", started)
    monkeypatch.setattr(supervisor, "up", started)


def status_err(capsys, *argv):
    status = main(list(argv))
    return status, capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["demo", "-n", "1"], "at least 2"),
    (["demo", "-k", "-1"], "--requests cannot be negative"),
    (["demo", "-w", "bogus"], "unknown workload 'bogus'"),
    (["demo", "-w", "poisson", "--json", "-k", "5", "-n", "0"], "at least 2"),
    (["run", "--virtual", "3", "-w", "bogus"], "unknown workload 'bogus'"),
    (["run", "--virtual", "3", "-k", "-2"], "--requests cannot be negative"),
    (["dash", "--virtual", "3", "-w", "bogus", "--exit"], "unknown workload 'bogus'"),
    (["dash", "--virtual", "3", "--speed", "-1", "--exit"], "--speed must be >= 0"),
    (["dash", "--sim", "--speed", "-1", "--exit"], "--speed must be >= 0"),
    (["virtual", "up", "-n", "1", "--dir", "/nonexistent/picoring-state"], "-n must be at least 2"),
    (["sim", "-p", "s", "--idle-horizon", "-5"], "--idle-horizon cannot be negative"),
    # issue 37, items 5 and 6: a ring the frames cannot address, a run with nothing to serve
    (["run", "--virtual", "500"], "--virtual 500: a ring of boards has at most 255 (a board's address is one byte"),
    (["virtual", "up", "-n", "500", "--dir", "/nonexistent/picoring-state"], "-n 500: a ring of boards has at most 255"),
    (["demo", "-n", "256"], "-n 256: a ring of boards has at most 255"),
    (["dash", "--virtual", "256", "--exit"], "--virtual 256: a ring of boards has at most 255"),
    (["run", "--virtual", "4", "-p", "q", "-k", "0"], "-k 0: no request to serve"),
    (["dash", "--virtual", "4", "-k", "0", "--exit"], "-k 0: no request to serve"),
    (["demo", "-k", "0"], "-k 0: no request to serve"),
    (["bench", "soak", "-p", "q,d"], "bench soak: -p takes one protocol (a list is for bench chip and bench ring --emulated)"),
])
def test_bad_arguments_fail_before_any_board_starts(no_boards, capsys, argv, message):
    status, err = status_err(capsys, *argv)
    assert status == 2
    assert err.startswith("picoring: ") and message in err, err
    assert "Traceback" not in err and err.count("\n") == 1, err


@pytest.mark.parametrize("argv", [
    ["sim", "-p", "zzz"], ["run", "--virtual", "3", "-p", "zzz"], ["compare", "-p", "zzz"],
    ["dash", "--sim", "-p", "zzz", "--exit"], ["explore", "-p", "zzz"], ["flash", "-p", "zzz"],
    ["bench", "soak", "-p", "zzz"], ["bench", "chip", "-p", "s,zzz"],
])
def test_an_unknown_protocol_is_one_line_naming_the_valid_ones(no_boards, capsys, argv):
    """No usage block before it, on every command (issue 37, item 7)."""
    status, err = status_err(capsys, *argv)
    assert status == 2
    assert err.count("\n") == 1 and err.startswith("picoring: unknown protocol"), err
    assert "zzz" in err and "known: s, q, d, d-literal," in err, err


def test_bench_chip_takes_a_list_of_protocols_to_set_beside_each_other_in_one_run(monkeypatch):
    from picoring.bench import chip, common

    asked = []
    monkeypatch.setattr(chip, "run", lambda quick, log, where, protocols, n, memory: asked.append(protocols))
    monkeypatch.setattr(common, "run_command", lambda args, run, table: run(True, None) or 0)  # no chip
    assert main(["bench", "chip", "--quick", "-p", "s, raymond:tree=path,holder=1;wt:skip=0"]) == 0
    assert asked == [("s", "raymond:holder=1,tree=path", "wt:skip=0")]


def test_requests_with_a_file_workload_is_said_to_be_ignored(tmp_path, capsys):
    wl = tmp_path / "wl.jsonl"
    wl.write_text('{"t": 0, "node": 1}\n{"t": 3, "node": 0}\n')
    assert main(["sim", "-p", "q", "-n", "3", "-w", "file:%s" % wl, "-k", "50", "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["requests"] == 2
    assert "-k 50 ignored" in err and "file:%s makes its 2 request(s)" % wl in err
    # no -k, or a -k that agrees with the file: nothing to say
    assert main(["sim", "-p", "q", "-n", "3", "-w", "file:%s" % wl, "--json"]) == 0
    assert main(["sim", "-p", "q", "-n", "3", "-w", "file:%s" % wl, "-k", "2", "--json"]) == 0
    assert capsys.readouterr().err == ""


def test_requests_default_per_command(capsys):
    assert main(["sim", "-p", "q", "-n", "3", "-w", "sequential", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["requests"] == 1000


def test_check_names_a_binary_file(tmp_path, capsys):
    path = tmp_path / "photo.jpg"
    path.write_bytes(b"\xff\xd8\xff\xe0\x00\x10JFIF\x00" + bytes(range(256)) * 20)
    status, err = status_err(capsys, "check", str(path))
    assert status == 2
    assert err.startswith("picoring: %s: not a text trace (byte 0xff is not UTF-8)" % path), err


def _picoring(*argv):
    return [sys.executable, "-c", "import sys; from picoring.cli.main import main; sys.exit(main(sys.argv[1:]))", *argv]


@pytest.mark.parametrize("argv", [["sim", "-p", "q", "-n", "3", "-k", "20", "--json"],  # print()
                                  ["sim", "-p", "q", "-n", "3", "-k", "20"]])           # a rich table
def test_a_reader_that_goes_away_is_no_error(argv):
    """`picoring ... | head`: the pipe's reader is gone before picoring writes (closed here
    before it starts, so no timing is involved): no message, no traceback."""
    r, w = os.pipe()
    os.close(r)
    try:
        proc = subprocess.run(_picoring(*argv), stdout=w, stderr=subprocess.PIPE, timeout=120)
    finally:
        os.close(w)
    assert proc.stderr.decode() == ""
    assert proc.returncode == 1


def test_bench_sim_without_simpy_is_one_line_and_exit_2(monkeypatch, capsys):
    """As every other missing dependency (issue 37, item 10): no traceback, what to install."""
    monkeypatch.setitem(sys.modules, "simpy", None)  # importlib.util.find_spec: not installed
    status, err = status_err(capsys, "bench", "sim", "--quick")
    assert status == 2
    assert err == "picoring: bench sim measures against SimPy, which is not installed: pip install -e '.[bench]'\n"


@pytest.mark.parametrize("argv,config,expected", [
    ([], None, {"protocol": "d"}),
    (["-p", "q"], None, {"protocol": "q"}),
    (["-p", "q"], {"protocol": "s", "cs_us": 5}, {"protocol": "s", "cs_us": 5}),  # the file's own wins
    (["-p", "raymond:tree=path"], [{}, {"cs_us": 1}],
     [{"protocol": "raymond:tree=path"}, {"cs_us": 1, "protocol": "raymond:tree=path"}]),
])
def test_virtual_deploy_takes_the_protocol(tmp_path, monkeypatch, capsys, argv, config, expected):
    """`virtual deploy` then `run --ports virtual:0,...` ran into the boards' `missing 'protocol'`
    after 10 s: deploy now gives the boards one (issue 37, item 8)."""
    got = []
    monkeypatch.setattr(deploy, "deploy_virtual_cli", lambda state_dir, cfg: got.append(cfg) or {"boards": [0, 1]})
    if config is not None:
        (tmp_path / "cfg.json").write_text(json.dumps(config))
        argv = argv + ["--config", str(tmp_path / "cfg.json")]
    status, err = status_err(capsys, "virtual", "deploy", "--dir", str(tmp_path), *argv)
    assert status == 0, err
    assert got == [expected]
    assert err.startswith("deployed protocol ")


@pytest.mark.parametrize("argv,message", [
    ([], "no MicroPython board found (USB VID:PID 2e8a:0005; --all-ports: every USB serial port) and no virtual "
         "ring up\n"),
    (["--all-ports"], "no USB serial port found (of any kind) and no virtual ring up\n"),
])
def test_boards_says_what_it_looked_for(tmp_path, monkeypatch, capsys, argv, message):
    """--all-ports turns the VID:PID filter off: an empty list must not name it (issue 37, item 9)."""
    from picoring.ring import ports

    monkeypatch.setattr(ports, "comports", lambda: [])
    status, err = status_err(capsys, "boards", "--virtual-dir", str(tmp_path / "none"), *argv)
    assert status == 0
    assert err.endswith(message), err


def test_a_supervisor_that_dies_starting_is_one_line_with_its_error(tmp_path, monkeypatch, capsys):
    """`virtual up` printed the supervisor's thread traceback; the error it ended with is the
    message, and the traceback stays in its log (issue 37, item 5)."""
    real_popen = subprocess.Popen

    def crashing_supervisor(cmd, **kw):  # a thread of it dies, then it exits
        code = "import threading\nt = threading.Thread(target=lambda: 1 / 0)\nt.start(); t.join()\nraise SystemExit(1)"
        return real_popen([sys.executable, "-c", code], **kw)

    monkeypatch.setattr(subprocess, "Popen", crashing_supervisor)
    status, err = status_err(capsys, "virtual", "up", "-n", "2", "--dir", str(tmp_path / "ring"))
    assert status == 2
    log = tmp_path / "ring" / "supervisor.log"
    assert err == ("picoring: the virtual ring supervisor exited with status 1 before the ring was up: "
                   "ZeroDivisionError: division by zero (its log: %s)\n" % log)
    assert "Traceback" in log.read_text()


def test_a_ctrl_c_that_a_library_swallowed_still_ends_the_command_with_130(monkeypatch, capsys):
    """A SIGINT raised inside a library's bare `except:` (pyserial's RFC 2217 close() has one)
    was lost, and `picoring run --labgrid` ran on to exit 0 (picoring/interrupt.py)."""
    import os
    import signal
    import time

    from picoring.cli import main as cli_main

    def swallows_it(args):
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # (the handler raises in here)
        except:  # noqa: E722 - what the library does
            pass
        return 0

    monkeypatch.setitem(cli_main._COMMANDS, "protocols", (swallows_it, cli_main._COMMANDS["protocols"][1]))
    previous = signal.getsignal(signal.SIGINT)
    assert cli_main.main(["protocols"]) == 130
    assert capsys.readouterr().err == "picoring: interrupted\n"
    assert signal.getsignal(signal.SIGINT) is previous  # put back
