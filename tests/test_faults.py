"""Fault injection on the virtual ring's wires (docs/faults.md): the SPEC grammar, each fault
on a Wire alone (deterministic per seed), and short runs of the real firmware on a virtual
ring with faults: corrupted frames are dropped and counted by the receiving board, and a lost
token ends the run with a clear stall report instead of a hang."""

import json
import sys
import time

import pytest

from picoring.cli import run as cli_run
from picoring.cli.main import main
from picoring.check.report import link_lines
from picoring.virtual.wire import FaultPlan, Wire

from conftest import FIRMWARE, why_not_ok

sys.path.insert(0, str(FIRMWARE))
import frame  # noqa: E402

SPEC = "corrupt=0.01,drop=0.005,dropbyte=0.001,delay=0.002:5ms,cut=2@3s:500ms,seed=7"


# -- the SPEC ------------------------------------------------------------------

def test_spec_parses_and_round_trips():
    plan = FaultPlan.parse(SPEC)
    assert plan.seed == 7
    assert plan.settings[None] == {"corrupt": 0.01, "drop": 0.005, "dropbyte": 0.001, "delay": (0.002, 0.005)}
    assert plan.cuts == [(2, 3.0, 0.5)]
    assert plan.describe() == SPEC
    assert FaultPlan.parse(plan.describe()).describe() == SPEC
    p = FaultPlan.parse("corrupt=1%,wire1.drop=0.5,cut=0.2/s:100ms,cut=@1s:2ms,wire0.cut=@500ms:1s")
    assert p.settings == {None: {"corrupt": 0.01, "cut": (0.2, 0.1)}, 1: {"drop": 0.5}}
    assert p.cuts == [(None, 1.0, 0.002), (0, 0.5, 1.0)]
    assert FaultPlan.coerce("") is None and FaultPlan.coerce("none") is None and FaultPlan.coerce(None) is None
    # per-wire settings override the ring's
    w1 = p.for_wire(1, 0.0)
    assert w1._drop is not None and w1._corrupt is not None


@pytest.mark.parametrize("spec, message", [
    ("corupt=0.01", "faults: 'corupt' is not a fault (known: corrupt, corruptframe, drop, dropbyte, delay, cut, "
                    "restart, unplug, rogue, seed)"),
    ("corruptframe=2%x", "'2%x' in 'corruptframe=2%x' is not a probability"),
    ("restart=1", "'restart=1': restart needs BOARD@TIME, e.g. restart=1@3s"),
    ("restart=@1s", "restart needs BOARD@TIME"),
    ("restart=x@1s", "'restart=x@1s': 'x' is not a board number"),
    ("restart=1@3", "'3' in 'restart=1@3' is not a duration"),
    ("restart=1@3s:x", "'x' in 'restart=1@3s:x' is not a duration"),
    ("unplug=1@3s", "'unplug=1@3s': unplug needs BOARD@TIME:DURATION, e.g. unplug=1@3s:2s"),
    ("unplug=1@3s:2", "'2' in 'unplug=1@3s:2' is not a duration"),
    ("wire1.restart=1@1s", "'wire1.restart=1@1s': restart is a fault of a board, not of a wire"),
    ("wire0.unplug=0@1s:1s", "unplug is a fault of a board, not of a wire"),
    ("corrupt=1.5", "'1.5' in 'corrupt=1.5' is not a probability"),
    ("corrupt=x", "'x' in 'corrupt=x' is not a probability"),
    ("drop", "'drop' is not KEY=VALUE"),
    ("delay=0.1", "delay needs PROBABILITY:DURATION"),
    ("delay=0.1:5", "'5' in 'delay=0.1:5' is not a duration"),
    ("cut=2", "cut needs RATE/s:DURATION"),
    ("cut=x/s:1s", "'x/s' is not a rate"),
    ("cut=a@1s:1s", "'a' is not a wire number"),
    ("seed=1.5", "seed=1.5: the seed must be an integer"),
    ("drop=0.1,drop=0.2", "'drop' is given twice"),
    ("wireA.drop=0.1", "a wire is named wireI"),
    ("wire1.seed=3", "the seed is for the whole ring"),
    ("corrupt=0.1,,drop=0.1", "empty item"),
])
def test_bad_specs_name_the_bad_part(spec, message):
    with pytest.raises(ValueError) as e:
        FaultPlan.parse(spec)
    assert str(e.value).startswith("faults: ")
    assert message in str(e.value)


def test_board_faults_and_corruptframe_parse_and_round_trip():
    spec = "corruptframe=0.01,wire2.corruptframe=0.5,restart=1@3s,restart=0@500ms:1s,unplug=2@1s:2s,seed=4"
    plan = FaultPlan.parse(spec)
    assert plan.settings == {None: {"corruptframe": 0.01}, 2: {"corruptframe": 0.5}}
    assert plan.restarts == [(1, 3.0, 0.0), (0, 0.5, 1.0)]
    assert plan.unplugs == [(2, 1.0, 2.0)]
    assert plan.board_events() == [(0.5, "restart", 0, 1.0), (1.0, "unplug", 2, 2.0), (3.0, "restart", 1, 0.0)]
    assert plan.describe() == spec
    assert FaultPlan.parse(plan.describe()).describe() == spec
    assert FaultPlan.coerce("restart=0@1s") is not None  # a plan of board faults alone is active
    assert FaultPlan.parse("corruptframe=1%").for_wire(0, 0.0)._corruptframe.p == 0.01


def test_wire_numbers_are_checked_against_the_ring():
    with pytest.raises(ValueError, match="wire3 does not exist: a ring of 3 has wires 0..2"):
        FaultPlan.parse("cut=3@1s:1s").check(3)
    with pytest.raises(ValueError, match="wire5 does not exist"):
        FaultPlan.parse("wire5.corrupt=0.1").check(3)
    FaultPlan.parse("wire2.corrupt=0.1").check(3)
    with pytest.raises(ValueError, match="restart=3@...: board 3 does not exist: a ring of 3 has boards 0..2"):
        FaultPlan.parse("restart=3@1s").check(3)
    with pytest.raises(ValueError, match="unplug=7@...: board 7 does not exist"):
        FaultPlan.parse("unplug=7@1s:1s").check(3)
    FaultPlan.parse("restart=2@1s,unplug=0@1s:1s").check(3)


# -- faults on one wire ----------------------------------------------------------

def token_stream(count):
    enc = frame.Encoder()
    return [bytes(enc.token(1, 1, k, 0)) for k in range(count)]


def through(spec, frames, wire=0, gap=0.002):
    """Send frames one by one every `gap` s through a faulty wire; return (wire, decoder, tokens)."""
    w = Wire(wire, 115200)
    w.faults = FaultPlan.parse(spec).for_wire(wire, 0.0)
    got = bytearray()
    t = 0.0
    for f in frames:
        w.send(f, t)
        t += gap
        got += w.take_due(t)
    got += w.take_due(t + 100)
    dec = frame.Decoder()
    dec.feed(got, len(got))
    seqs = []
    while True:
        k = dec.next()
        if not k:
            break
        if k == frame.TOKEN:
            seqs.append(dec.seq)
    return w, dec, seqs


def test_same_seed_same_faults_other_seed_others():
    frames = token_stream(1000)
    a = through("corrupt=0.01,drop=0.01,dropbyte=0.002,seed=1", frames)
    b = through("corrupt=0.01,drop=0.01,dropbyte=0.002,seed=1", frames)
    c = through("corrupt=0.01,drop=0.01,dropbyte=0.002,seed=2", frames)
    assert a[2] == b[2] and a[0].counters() == b[0].counters()
    assert a[2] != c[2]
    # each wire draws its own faults
    d = through("corrupt=0.01,drop=0.01,dropbyte=0.002,seed=1", frames, wire=1)
    assert d[2] != a[2]


def test_corrupted_frames_are_dropped_by_the_crc_and_counted():
    frames = token_stream(2000)
    w, dec, seqs = through("corrupt=0.01,seed=3", frames)
    f = w.faults.counters()
    assert f["frames"] == 2000 and f["corrupted"] > 200
    # every frame hit is lost, every other one arrives, nothing arrives wrong
    assert len(seqs) == 2000 - f["frames_corrupted"]
    assert seqs == sorted(seqs) and set(seqs) <= set(range(2000))
    # one bad frame per hit frame, give or take the frames a flipped 00 merged or split
    assert f["frames_corrupted"] * 0.9 <= dec.bad <= f["corrupted"] * 2
    assert w.bytes_dropped == 0


def test_corruptframe_spoils_each_hit_frame_once_and_never_splits_it():
    frames = token_stream(3000)
    w, dec, seqs = through("corruptframe=0.02,seed=6", frames)
    f = w.faults.counters()
    assert f["frames"] == 3000 and 30 < f["frames_corrupted"] < 90
    # exactly one bit of one byte per hit frame; each hit frame is one bad frame at the receiver
    assert f["corrupted"] == f["frames_corrupted"] == dec.bad
    assert len(seqs) == 3000 - f["frames_corrupted"]
    assert seqs == sorted(seqs) and w.bytes_dropped == 0


def test_corruptframe_flips_one_bit_and_makes_no_00():
    # Frames of 01 bytes: of each byte's 8 bits, flipping bit 0 would make a 00. None may.
    f = b"\x00" + b"\x01" * 10 + b"\x00"
    w = Wire(0, 115200)
    w.faults = FaultPlan.parse("corruptframe=1,seed=1").for_wire(0, 0.0)
    w.send(f * 200, 0.0)
    got = w.take_due(100.0)
    assert len(got) == len(f) * 200
    positions = set()
    for k in range(200):
        sent, out = f, got[k * 12:(k + 1) * 12]
        diff = [(i, a ^ b) for i, (a, b) in enumerate(zip(sent, out)) if a != b]
        assert len(diff) == 1, (k, out)
        i, flipped = diff[0]
        assert 1 <= i <= 10 and out[i] != 0 and bin(flipped).count("1") == 1
        positions.add(i)
    assert positions == set(range(1, 11))  # the byte is drawn over the whole frame
    assert w.faults.counters()["frames_corrupted"] == 200


def test_corruptframe_pattern_depends_on_the_frame_index_only():
    # the same frames hit, the same bytes flipped, whether other faults are on or not
    frames = token_stream(500)
    a = through("corruptframe=0.05,seed=8", frames)
    b = through("corruptframe=0.05,seed=8", frames, gap=0.0003)  # another timing: back to back
    c = through("corruptframe=0.05,drop=0.05,seed=8", frames)
    assert a[2] == b[2] and a[0].faults.counters() == b[0].faults.counters()
    assert set(c[2]) <= set(a[2])  # drop only removes frames: every frame corrupted in a is lost in c too
    assert a[2] != through("corruptframe=0.05,seed=9", frames)[2]


def test_a_sender_that_loses_power_loses_its_tx_fifo_not_the_line():
    w = Wire(0, 10000)  # 1 ms a byte
    w.send(b"\x11" * 10, 0.0)
    w.send(b"\x22" * 5, 0.001)   # queued behind: starts at 10 ms
    assert w.sender_lost(0.0035) == 11  # bytes 0..3 have started on the line, the rest had not
    assert w.take_due(0.0039) == b"\x11" * 3
    assert w.take_due(1.0) == b"\x11"  # the 4th was on the line: it arrives
    assert (w.bytes_dropped, w.queued(), w.next_due()) == (11, 0, None)
    w.send(b"\x33", 0.005)  # the new sender starts from an idle line
    assert w.take_due(0.0061) == b"\x33"


def test_drop_removes_whole_frames_silently():
    frames = token_stream(1000)
    w, dec, seqs = through("drop=0.1,seed=4", frames)
    f = w.faults.counters()
    assert 60 < f["frames_dropped"] < 140
    assert len(seqs) == 1000 - f["frames_dropped"] and dec.bad == 0
    assert w.bytes_dropped == f["frames_dropped"] * (frame.TOKEN_WIRE - 2)  # the body; the two 00 stay: an idle line


def test_dropbyte_loses_single_bytes():
    frames = token_stream(1000)
    w, dec, seqs = through("dropbyte=0.005,seed=5", frames)
    f = w.faults.counters()
    assert f["bytes_dropped"] > 40 and w.bytes_dropped == f["bytes_dropped"]
    assert len(seqs) >= 1000 - f["bytes_dropped"] and dec.bad >= 1


def test_delay_holds_a_frame_and_what_follows_fifo():
    w = Wire(0, 10000)  # 1 ms a byte
    w.faults = FaultPlan.parse("delay=1:50ms").for_wire(0, 0.0)
    w.send(b"\x00\x01\x02\x00", 0.0)
    # the frame starts at its first non-zero byte: the leading 00 goes now, the rest 50 ms later
    assert w.take_due(0.0011) == b"\x00"
    assert w.take_due(0.040) == b""
    assert w.take_due(0.0535) == b"\x01\x02\x00"
    assert w.faults.delayed == 1


def test_timed_cut_loses_what_is_sent_and_in_flight():
    w = Wire(0, 10000)
    w.faults = FaultPlan.parse("cut=@1s:500ms").for_wire(0, 0.0)
    w.send(b"\x11" * 20, 0.99)          # 20 ms of bytes: 10 arrive before the cut
    assert w.take_due(0.9999) == b"\x11" * 9
    assert w.take_due(1.001) == b""     # the cut began: the rest is lost
    w.send(b"\x22", 1.2)                # sent while cut
    assert w.take_due(1.3) == b""
    w.send(b"\x33", 1.6)                # mended
    assert w.take_due(1.7) == b"\x33"
    f = w.faults.counters()
    assert f["cuts"] == 1 and f["cut_bytes"] == 11 + 1 and w.bytes_dropped == 12


def test_random_cuts_follow_their_rate():
    w = Wire(0, 115200)
    w.faults = FaultPlan.parse("cut=2/s:10ms,seed=9").for_wire(0, 0.0)
    t = 0.0
    while t < 100:
        w.send(b"\x00\x05\x00", t)
        w.take_due(t + 0.001)
        t += 0.005
    f = w.faults.counters()
    assert 140 < f["cuts"] < 260
    assert f["cut_bytes"] > 0


def test_link_lines_put_injected_next_to_dropped():
    report = {"n": 3, "faults": "corrupt=0.05,seed=1",
              "wires": [{"wire": 1, "faults": {"frames": 40, "frames_dropped": 0, "bytes_dropped": 0, "corrupted": 12,
                                              "frames_corrupted": 12, "delayed": 0, "cuts": 0, "cut_bytes": 0}}],
              "boards": [{"position": 2, "link_in": {"wire": 1, "bad": 12, "rx_frames": 28,
                                                     "bad_by_reason": {"crc": 11, "len": 1, "cobs": 0, "kind": 0}}}]}
    assert link_lines(report) == [
        "faults injected: corrupt=0.05,seed=1",
        "wire 1 (board 1 -> 2): 12 bytes corrupted in 12 frames (of 40 frames); board 2 dropped 12 bad frames (crc 11, len 1)"]


# -- the real firmware on a faulty virtual ring ------------------------------------

def run_json(capsys, *argv):
    t = time.monotonic()
    status = main(list(argv) + ["--json"])
    out, err = capsys.readouterr()
    return status, json.loads(out) if out.strip() else None, err, time.monotonic() - t


class CounterOnlyRing:
    """A virtual ring reduced to its audit-counter file: what do_run needs around a run."""

    def __init__(self, workdir):
        self.workdir = str(workdir)
        self.boards = []
        self.wires = []

    def reset(self, *args):
        pass

    def stop(self):
        pass


@pytest.mark.parametrize("counter,kind,says", [
    (91, "safety", "the shared counter is 91 after 92 critical sections: 1 increment(s) lost, so critical "
                   "sections overlapped"),
    (93, "audit", "the shared counter is 93 after 92 critical sections: 1 more than the host saw, so entries went "
                  "unrecorded (their events never reached the host) or a board wrote the counter outside a "
                  "critical section"),
])
def test_the_audit_says_which_way_the_counter_is_off(capsys, monkeypatch, tmp_path, counter, kind, says):
    # An overlap loses an increment (counter below the entries); a counter above them is not an
    # overlap but entries the host never saw. The run's report must say which, and fail.
    from picoring.ring import deploy
    from picoring.check import audit

    ring = CounterOnlyRing(tmp_path)
    monkeypatch.setattr(deploy, "start_virtual", lambda *a, **k: ring)

    def fake_run(ports, protocol, workload, args, resetter=None, progress=None, connected=None):
        connected()
        with open(audit.path(ring), "w") as f:
            f.write(str(counter))
        return {"served": 92, "ok": True, "violations": [], "events_lost": 0, "restarts": []}

    monkeypatch.setattr(cli_run, "_run_ring", fake_run)
    status = main(["run", "--virtual", "3", "-k", "92", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 1 and report["ok"] is False and report["audit"]["ok"] is False
    assert report["violations"][0] == {"kind": kind, "request": None, "node": None, "t": None,
                                       "message": "audit: " + says}


def test_under_soft_exclusion_the_increments_overlaps_lose_are_measured_not_a_violation(capsys, monkeypatch, tmp_path):
    # The wandering token lets operations overlap (the checker measures how often): the shared
    # counter's lost increments are then that cost, shown, and the run is not failed for them.
    from picoring.ring import deploy
    from picoring.check import audit

    ring = CounterOnlyRing(tmp_path)
    monkeypatch.setattr(deploy, "start_virtual", lambda *a, **k: ring)

    def fake_run(ports, protocol, workload, args, resetter=None, progress=None, connected=None):
        connected()
        with open(audit.path(ring), "w") as f:
            f.write("90")
        return {"served": 92, "ok": True, "violations": [], "events_lost": 0, "restarts": [], "soft": {}}

    monkeypatch.setattr(cli_run, "_run_ring", fake_run)
    status = main(["run", "--virtual", "3", "-p", "wt", "-k", "92", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert status == 0 and report["ok"] and report["violations"] == []
    assert report["audit"] == {"counter": 90, "entries": 92, "ok": True, "unseen_entries": 0, "lost_increments": 2,
                               "soft": True, "ended_by_a_restart": 0}


@pytest.mark.slow
def test_corruption_is_counted_by_the_receiving_board_and_recovered_from(capsys):
    # Q, a few requests; corrupted frames (token, request, claim) are dropped by the CRC. A
    # corrupted token is a lost token: regenerated (docs/recovery.md), every request served,
    # the audit intact; what the wires corrupted shows up as bad frames on the board each
    # wire leads to.
    status, report, err, took = run_json(capsys, "run", "--virtual", "3", "-p", "q", "-w", "sequential", "-k", "30",
                                         "--seed", "1", "--faults", "corrupt=0.01,seed=2", "--regen-ms", "100")
    assert report is not None, err
    assert report["faults"] == "corrupt=0.01,seed=2"
    assert report["safety_violations"] == 0 and report["audit"]["ok"]
    assert status == 0 and report["ok"], report["violations"]
    assert report["served"] == 30 and report["recovery"]["regenerations"] >= 1
    hit = 0
    for b in report["boards"]:
        wire = report["wires"][b["link_in"]["wire"]]["faults"]
        if wire["frames_corrupted"]:
            hit += 1
            assert b["link_in"]["bad"] >= 1, (wire, b)
            assert b["link_in"]["bad"] <= 2 * wire["corrupted"]
        else:
            assert b["link_in"]["bad"] == 0
    assert hit >= 1


@pytest.mark.slow
def test_a_ring_that_loses_everything_ends_the_run_with_a_stall(capsys):
    # Every frame on every wire is dropped: the first time the token has to move, it is gone,
    # and no claim ever comes back to regenerate it.
    status, report, err, took = run_json(capsys, "run", "--virtual", "3", "-p", "d", "-w", "adversarial", "-k", "5",
                                         "--faults", "drop=1", "--stall-timeout", "1.5")
    assert status == 1
    stall = report["violations"][0]
    assert stall["kind"] == "stall" and "token probably lost" in stall["message"]
    assert report["stalled"]["outstanding"] == 1 and report["served"] < 5
    assert sum(w["faults"]["frames_dropped"] for w in report["wires"]) >= 1
    # Found by the stall clock, which runs only while the boards answer: seconds of it, however
    # long a loaded machine made the run (46 s of wall time once, under two busy loops).
    assert report["stalled"]["seconds"] < 10


def test_run_faults_errors(capsys):
    assert main(["run", "--virtual", "3", "--faults", "corupt=0.1"]) == 2
    assert "faults: 'corupt' is not a fault" in capsys.readouterr().err
    assert main(["run", "--ports", "a,b", "--faults", "drop=0.1"]) == 2
    assert "--faults needs --virtual" in capsys.readouterr().err


@pytest.mark.slow
def test_a_board_power_cycled_mid_run_rejoins_and_its_request_is_reported_failed(capsys):
    # D, a steady stream of requests; board 1 loses power 1.5 s into the run. It boots, joins
    # the ring again, and the request it held is failed (never served twice, never lost);
    # its USB link comes back and the host says so in the trace.
    status, report, err, took = run_json(capsys, "run", "--virtual", "3", "-p", "d", "-w", "poisson", "-k", "150",
                                         "--rate", "0.2", "--seed", "4", "--regen-ms", "100",
                                         "--faults", "restart=1@1500ms,corruptframe=0.01,seed=5")
    assert report is not None, err
    assert report["restarts"] == [0, 1, 0], report["notices"]
    assert report["safety_violations"] == 0 and report["audit"]["ok"], report["audit"]
    failed = sum(report["failed"].values())
    # The request board 1 held when its power went is failed: at most one. The requests the host
    # could not send it while its USB link was down are failed with that reason, as in the
    # unplugged-link test below: as many as came in the outage, longer on a loaded machine (a
    # loaded suite run: 4, at load 15-29). (Said in full: one once failed 21, and the bare
    # counts could not say why.)
    held = failed - report["failed"].get("its board's USB link was down", 0)
    assert held <= 1 and report["served"] + failed == report["issued"] == 150, (
        report["failed"], report["served"], report["issued"], report["notices"], report.get("run_conditions"))
    assert status == 0 and report["ok"], report["violations"]
    assert [e["what"] for e in report["link_events"] if e["board"] == 1][:1] in (["disconnected"], ["restarted"])
    assert any(e["what"] == "restarted" for e in report["link_events"])


@pytest.mark.slow
def test_an_unplugged_usb_link_loses_no_request(capsys):
    # The host loses board 2's USB for 0.6 s; the board keeps running (its ring traffic goes on).
    # The requests the host could not send it meanwhile are failed with that reason, the run
    # ends cleanly, and every request is accounted for. The run lasts about 4 s, so the outage
    # falls in its middle however loaded the machine is (at --rate 0.2 it lasted 1 s unloaded,
    # the outage came after the last request, and only a slow machine met it: a flaky test).
    # What board 2 said meanwhile went nowhere: its requests served unseen are failed with that
    # reason, and the lost events are a run condition, explained by the outage.
    from picoring.ring.runreport import UNSEEN_IN_OUTAGE

    status, report, err, took = run_json(capsys, "run", "--virtual", "3", "-p", "q", "-w", "poisson", "-k", "100",
                                         "--rate", "0.05", "--seed", "2", "--faults", "unplug=2@1s:600ms")
    assert report is not None, err
    assert [e["what"] for e in report["link_events"] if e["board"] == 2][:1] == ["disconnected"]
    assert report["stalled"] is None, report["violations"]
    assert set(report["failed"]) <= {"its board's USB link was down", UNSEEN_IN_OUTAGE}
    assert report["served"] + sum(report["failed"].values()) == report["issued"] == 100
    why = (report["violations"], report["run_conditions"], report.get("audit"))  # what made it not OK
    assert report["safety_violations"] == 0 and status == 0 and report["ok"], why
    assert all(c["explained"] for c in report["run_conditions"]), report["run_conditions"]
    if report["boards"][2]["events_lost_in_usb_outages"]:
        assert [c["kind"] for c in report["run_conditions"]][:1] == ["usb_outage"]


@pytest.mark.slow
def test_an_unplug_amid_busy_traffic_orders_every_receive_after_its_send(capsys):
    # Issue 12's unplug command (rate 0.2) failed its check in every run: "node 2 entered with
    # token entry number 72 after number 73", and 2 receives were placed without their sends.
    # The frames board 2 sent and received in the outage were counted when its status came,
    # ahead of its own events from before the outage (still queued). 400 requests make the
    # run last about 4 s, so the outage at 1 s falls amid traffic however loaded the machine
    # is; seed 3 gave 10 false safety violations and 3 forced receives before the fix.
    status, report, err, took = run_json(capsys, "run", "--virtual", "3", "-p", "q", "-w", "poisson", "-k", "400",
                                         "--rate", "0.2", "--seed", "3", "--faults", "unplug=2@1s:600ms")
    assert report is not None, err
    assert [e["what"] for e in report["link_events"] if e["board"] == 2][:1] == ["disconnected"]
    why = (report["violations"], report["run_conditions"], report.get("audit"))
    assert report["safety_violations"] == 0 and status == 0 and report["ok"], why
    assert report["causal_forced"] == 0, report["run_conditions"]
    # (a loaded machine may add an explained "slow": the host fell behind; never "order")
    kinds = [c["kind"] for c in report["run_conditions"]]
    assert "order" not in kinds and all(c["explained"] for c in report["run_conditions"]), report["run_conditions"]


def _board_frozen_in_run(monkeypatch, board, thaw_when, stood_still=False):
    """Board `board` of the next `picoring run --virtual` is frozen (SIGSTOP: the machine starved
    it) 0.3 s into the run, and let go once thaw_when(run) is true, or when the run ends.
    stood_still: meanwhile the serial ports deliver nothing, as in a workqueue lockup: the run
    and its links get a clock (StalledClock) that says so.
    Returns a list that holds the board's pid once it is frozen."""
    import os
    import signal
    import threading

    from conftest import StalledClock
    from picoring.ring import deploy, harness

    frozen = []
    rings = []  # the run's own ring (a suite's session ring may be running too)
    real_start = deploy.start_virtual

    def start_virtual(*args, **kwargs):
        rings.append(real_start(*args, **kwargs))
        return rings[-1]

    monkeypatch.setattr(deploy, "start_virtual", start_virtual)
    span = [None, None]  # when the freeze began and ended (monotonic)
    real_run = harness.RingRun.run

    def run_with_a_board_frozen(self):
        ring = rings[-1]
        if stood_still:
            real_stalled = self.clock.stalled

            def stalled():
                begun, ended = span
                if begun is None:
                    return real_stalled()
                return real_stalled() + (ended if ended is not None else time.monotonic()) - begun

            self.clock = StalledClock(stalled)
            for link in self.links:
                link.clock = self.clock

        def freeze_then_thaw():
            time.sleep(0.3)
            pid = ring.boards[board].pid
            os.kill(pid, signal.SIGSTOP)
            span[0] = time.monotonic()
            frozen.append(pid)
            while not thaw_when(self) and not done.is_set():
                time.sleep(0.05)
            span[1] = time.monotonic()
            os.kill(pid, signal.SIGCONT)

        done = threading.Event()
        thaw = threading.Thread(target=freeze_then_thaw, daemon=True)
        thaw.start()
        try:
            return real_run(self)
        finally:
            done.set()  # (never left stopped)
            thaw.join(5)

    monkeypatch.setattr(harness.RingRun, "run", run_with_a_board_frozen)
    return frozen


@pytest.mark.slow
def test_a_run_given_up_does_not_count_requests_it_never_sent_as_sent(capsys, monkeypatch):
    # A loaded suite run failed "134 requests were sent to the boards and no req event came back
    # for them": a run that stops early (given up, stalled) has requests queued at the host behind
    # their board's outstanding one, which were never written to any board. Here board 1 is frozen
    # a moment into the run, so its requests queue up behind the one it never took, and the run
    # is given up.
    import io

    from picoring.ring import driver

    # Given up after FROZEN_LIMIT stall limits when the frozen board's unanswered pings stop the
    # stall clock (12: about 20 s of this test's time); which of the two ends comes first is
    # the machine's doing, and either leaves requests queued at the host.
    monkeypatch.setattr(driver, "FROZEN_LIMIT", 3)
    frozen = _board_frozen_in_run(monkeypatch, 1, lambda run: run.record.host_lagged or run.record.stalled)
    status, report, err, _ = run_json(capsys, "run", "--virtual", "3", "-p", "d", "-w", "poisson", "-k", "300",
                                      "--rate", "0.5", "--seed", "1", "--stall-timeout", "0.5")
    assert report is not None, err
    assert frozen and status == 1 and not report["ok"]
    assert report["stop_reason"].startswith(("given up", "the ring stalled")), report["stop_reason"]
    # Written to a board and never taken: at most the one outstanding request per board.
    gone = [v for v in report["violations"] if v["message"].endswith("(not taken, or their events were lost)")]
    sent_untaken = int(gone[0]["message"].split()[0]) if gone else 0
    assert sent_untaken <= 3, gone
    assert report["queued_at_host"] >= 2, report["queued_at_host"]
    from rich.console import Console

    from picoring.check.report import print_report

    console = Console(record=True, width=140, file=io.StringIO())
    print_report(report, console)
    assert "requests never sent (queued at the host when the run stopped)" in console.export_text()
    assert (report["requests"] + report["queued_at_host"] + sent_untaken + sum(report["failed"].values())
            == report["issued"]), report


@pytest.mark.slow
def test_a_run_waits_out_serial_ports_that_stood_still(capsys, monkeypatch):
    # The same loaded suite run: the kernel logged a workqueue lockup of 89 s at the time of the
    # failed test, in which the ptys delivered nothing. No request reached a board, no ping was
    # answered, and after 12 stall limits of wall time the run was given up. Here board 1 is
    # frozen for longer than that while the ports stand still (ttystall): the run waits, and
    # when the ports deliver again it goes on and serves every request.
    from picoring.ring import driver

    # (a stall limit of 2 s, longer than a ping's grace: the frozen board's unanswered ping stops
    # the stall clock before it runs out; the give-up span 3 stall limits, 6 s)
    monkeypatch.setattr(driver, "FROZEN_LIMIT", 3)
    limit = driver.FROZEN_LIMIT * 2.0
    t0 = []

    def thaw_after_the_limit(run):
        if not t0:
            t0.append(time.monotonic())
        return time.monotonic() - t0[0] > limit + 2.0

    frozen = _board_frozen_in_run(monkeypatch, 1, thaw_after_the_limit, stood_still=True)
    status, report, err, took = run_json(capsys, "run", "--virtual", "3", "-p", "d", "-w", "poisson", "-k", "300",
                                         "--rate", "0.5", "--seed", "1", "--stall-timeout", "2")
    assert report is not None, err
    assert frozen and took > limit + 2.0
    assert report["served"] == 300 and status == 0 and report["ok"], why_not_ok(report)
    assert report["stop_reason"] == "done" and report["queued_at_host"] == 0
