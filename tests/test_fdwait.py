"""Waiting on descriptors above 1023, which select.select refuses ("filedescriptor out of
range in select()"): a host with a few hundred virtual boards or their ports open has them
(issue 37, item 5)."""

import os
import pty
import resource

import pytest

from picoring import fdwait


@pytest.fixture
def high_fds():
    """Descriptors 0..FD_SETSIZE+16 taken, so the next ones opened are above what select takes."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < fdwait.FD_SETSIZE + 200:
        pytest.skip("this system allows only %d open files" % hard)
    if soft != resource.RLIM_INFINITY and soft < fdwait.FD_SETSIZE + 200:
        resource.setrlimit(resource.RLIMIT_NOFILE, (fdwait.FD_SETSIZE + 200, hard))
    null = os.open(os.devnull, os.O_RDONLY)
    taken = [null]
    try:
        while taken[-1] < fdwait.FD_SETSIZE + 16:
            taken.append(os.dup(null))
        yield
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_wait_takes_descriptors_above_fd_setsize(high_fds):
    r, w = os.pipe()
    try:
        assert r >= fdwait.FD_SETSIZE and w >= fdwait.FD_SETSIZE
        assert fdwait.wait([r], [], 0.01) == ([], [])  # nothing to read yet
        assert fdwait.wait([r], [w], 0.01) == ([], [w])
        os.write(w, b"x")
        assert fdwait.wait([r, w], [], 0.01) == ([r], [])
        os.close(w)
        w = None
        os.read(r, 1)
        assert fdwait.wait([r], [], 0.01) == ([r], [])  # the writer gone: ready, as select says
    finally:
        os.close(r)
        if w is not None:
            os.close(w)


def test_below_fd_setsize_it_is_select():
    r, w = os.pipe()
    try:
        os.write(w, b"x")
        assert fdwait.wait({r: "reader"}, {w: "writer"}, 0) == ([r], [w])  # dicts: their keys, as select
    finally:
        os.close(r)
        os.close(w)


def test_a_serial_port_above_fd_setsize_reads_with_poll(high_fds):
    serial = pytest.importorskip("serial")
    master, slave = pty.openpty()
    try:
        ser = serial.Serial(os.ttyname(slave), timeout=0.05)
        try:
            assert ser.fileno() >= fdwait.FD_SETSIZE
            os.write(master, b"hello")
            with pytest.raises(ValueError, match="filedescriptor out of range"):
                ser.read(5)  # pyserial's own read: select (why allow_high_fd exists)
            assert fdwait.allow_high_fd(ser) is ser
            assert ser.read(5) == b"hello"
            assert ser.read(5) == b""  # a timeout with nothing read (pyserial's PosixPollSerial fails here)
            os.write(master, b"abc")
            assert ser.read(5) == b"abc"  # what came before the timeout
        finally:
            ser.close()
    finally:
        os.close(master)
        os.close(slave)


def test_a_ring_runs_with_every_descriptor_above_fd_setsize(high_fds, tmp_path):
    """The relay, the USB thread, the harness's writes and its pyserial reads, all on descriptors
    select.select refuses: the ring forms and serves as with low ones."""
    from picoring.ring import deploy
    from picoring.ring.harness import RingRun
    from picoring.sim.workload import make_workload
    from picoring.virtual.boards import VirtualRing

    with VirtualRing(2, workdir=tmp_path / "ring") as ring:
        assert min(b.tx.fd for b in ring.boards) >= fdwait.FD_SETSIZE  # the relay's
        deploy.deploy_virtual(ring, {"protocol": "q", "cs_us": 0})
        run = RingRun([b.usb_path for b in ring.boards], "q", make_workload("sequential", 2, 6), resetter=ring.reset)
        try:
            run.connect()
            report = run.run()
        finally:
            run.close()
    assert report["ok"] and report["served"] == 6, report.get("violations")
