"""`picoring bench labgrid`: what a labgrid farm's network path costs (docs/labgrid.md).

The token never leaves the boards, but every event a board reports and every request the
host sends crosses the farm: the board's USB serial, the exporter's ser2net, RFC 2217 over
TCP, pyserial's RFC 2217 client. This bench starts a loopback farm (LoopbackFarm: a
virtual ring, a labgrid coordinator and two exporters on 127.0.0.1, one place for the
ring), flashes Q onto the boards through their own ports, and runs the same workloads on
the same boards through their local ports, then through the place. Per path it prints:

- the link round trip: the median, over the boards, of the harness's clock pings
  (host -> board -> host, a line each way): what one event's trip costs, twice;
- request latency p50 and p99 of a sequential workload (one request at a time, so no
  queueing: us from the host's injection to the entry);
- of a saturated workload (every node always wants in): the hop rate (token and request
  frames on the ring per second of run) and the events per second the host took in. Q's
  requests come from the host, so the hop rate is the path's too.

In a source tree it measures the place a third time, its exporters restarted with
boards/labgrid/ser2net first on their PATH (ser2net without its character delay).

Needs labgrid and ser2net; says which is missing. It takes about a minute (--quick: fewer
requests); -n sets the ring size (default 4).
"""

import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .common import run_command

PLACE = "ring"
N_BOARDS = 4
# boards/labgrid/ser2net of the source tree: ser2net with chardelay off (docs/labgrid.md)
NODELAY_SER2NET = Path(__file__).resolve().parents[3] / "boards" / "labgrid" / "ser2net"
REQUESTS = (2000, 300)  # (full, --quick)
# labgrid-exporter exits with this status when it lost its coordinator (its gRPC keepalive went
# unanswered 10 s: a loaded machine can hold the coordinator that long): its request to be
# started again, which a service manager grants (labgrid's contrib/systemd: Restart=on-failure).
EXPORTER_RESTART_STATUS = 100


def _tool(name):
    here = Path(sys.executable).parent / name
    return str(here) if here.exists() else shutil.which(name)


def ser2net():
    return shutil.which("ser2net") or ("/usr/sbin/ser2net" if os.path.exists("/usr/sbin/ser2net") else None)


def missing():
    """What a loopback farm needs and this machine lacks, as words for a skip or an error."""
    out = []
    try:
        import labgrid.remote.client  # noqa: F401
    except ImportError:
        out.append("labgrid (pip install 'picoring[labgrid]')")
    else:
        out += ["%s (part of labgrid)" % t for t in ("labgrid-coordinator", "labgrid-exporter", "labgrid-client")
                if _tool(t) is None]
    if ser2net() is None:
        out.append("ser2net (Debian: apt-get install ser2net)")
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LoopbackFarm:
    """A labgrid farm on this host: a virtual ring of n boards (`picoring virtual up`), a
    coordinator, `hosts` exporters that export a share of the boards each as RawSerialPorts
    named board0..board{n-1} (group "ring"), and one place, `place`, matching them all.
    Every process runs in a session of its own: stopping an exporter stops its ser2nets.
    Use as a context manager; root is a folder for its state and logs."""

    def __init__(self, root, n=N_BOARDS, hosts=2, place=PLACE, user=None):
        self.root = Path(root)
        self.n, self.hosts, self.place = n, hosts, place
        self.address = "127.0.0.1:%d" % free_port()
        # the default state dir under XDG_RUNTIME_DIR: a `picoring run` of this env finds the boards' resets
        self.state = self.root / "runtime" / "picoring" / "virtual"
        self.env = dict(os.environ, LG_COORDINATOR=self.address, XDG_RUNTIME_DIR=str(self.root / "runtime"),
                        PYTHONUNBUFFERED="1")
        if user:
            self.env["LG_USERNAME"] = user
        self.procs = {}
        self.restarts = {}  # name -> how many times it was started again at its own request
        self.usb = []
        self._watchers = []

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()

    def shares(self):
        """{exporter name: [board index]}: the ring cut into `hosts` runs of boards."""
        return {"host%d" % (h + 1): list(range(h * self.n // self.hosts, (h + 1) * self.n // self.hosts))
                for h in range(self.hosts)}

    def start(self, timeout=90):
        up = self.picoring("virtual", "up", "-n", str(self.n), "--dir", str(self.state), timeout=120)
        if up.returncode != 0:
            raise RuntimeError("picoring virtual up failed: %s" % up.stderr.strip())
        self.usb = up.stdout.split()
        self.spawn("coordinator", _tool("labgrid-coordinator"), "-l", self.address)
        deadline = time.monotonic() + timeout
        while not self._listening():  # an exporter that finds no coordinator gives up
            if time.monotonic() > deadline or self.procs["coordinator"].poll() is not None:
                raise RuntimeError("the labgrid coordinator did not start; it said:\n%s" % self.logs())
            time.sleep(0.1)
        for host, boards in self.shares().items():
            self.exporter(host, boards)
        self.wait_resources(timeout)
        for argv in (("create",), ("add-match", "*/ring/NetworkSerialPort/*")):
            made = self.client("-p", self.place, *argv)
            if made.returncode != 0:
                raise RuntimeError("labgrid-client %s failed: %s" % (" ".join(argv), made.stderr.strip()))

    def _listening(self):
        host, _, port = self.address.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=1):
                return True
        except OSError:
            return False

    def restart_exporters(self, timeout=90):
        """Stop every exporter and start it again (with the farm's env as it is now)."""
        for host in self.shares():
            self.stop_process("exporter-" + host)
        for host, boards in self.shares().items():
            self.exporter(host, boards)
        self.wait_resources(timeout)

    def wait_resources(self, timeout=90):
        deadline = time.monotonic() + timeout  # an exporter takes ~2 s to start; a loaded machine has taken 30
        while self.resources() != self.n:
            if time.monotonic() > deadline:
                raise RuntimeError("no %d serial ports at the coordinator within %.0f s; the farm said:\n%s"
                                   % (self.n, timeout, self.logs()))
            time.sleep(0.2)

    def stop(self):
        for name in list(self.procs):
            self.stop_process(name)
        if self.usb:
            self.picoring("virtual", "down", "--dir", str(self.state), timeout=60)
            self.usb = []

    def spawn(self, name, *argv, restart_status=None, mode="w"):
        """Start argv as `name`. restart_status: the exit status with which it asks to be started
        again (as a service manager would: a watcher thread does it while it is still ours)."""
        with open(self.root / (name + ".log"), mode) as log:
            proc = self.procs[name] = subprocess.Popen(list(argv), cwd=self.root, env=self.env, stdout=log,
                                                       stderr=subprocess.STDOUT, start_new_session=True)
        if restart_status is not None:
            watcher = threading.Thread(target=self._restart_when_asked, args=(name, proc, argv, restart_status),
                                       name="restart " + name, daemon=True)
            self._watchers.append(watcher)
            watcher.start()
        return proc

    def _restart_when_asked(self, name, proc, argv, restart_status):
        status = proc.wait()
        # stop_process() takes it out of procs first: only an exit of its own is restarted
        if status == restart_status and self.procs.get(name) is proc:
            self.restarts[name] = self.restarts.get(name, 0) + 1
            self.spawn(name, *argv, restart_status=restart_status, mode="a")

    def stop_process(self, name):
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGTERM)  # the exporter and the ser2nets it started
            proc.wait(10)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(5)

    def exporter(self, host, boards):
        """Start (again) the exporter `host`, exporting `boards`."""
        config = self.root / ("exporter-%s.yaml" % host)
        config.write_text("ring:\n" + "".join(
            "  board%d:\n    cls: RawSerialPort\n    port: %s\n    speed: 115200\n" % (i, os.path.realpath(self.usb[i]))
            for i in boards))
        self.spawn("exporter-" + host, _tool("labgrid-exporter"), "-c", self.address, "-n", host, "--hostname",
                   "127.0.0.1", str(config), restart_status=EXPORTER_RESTART_STATUS)

    def picoring(self, *argv, env=None, timeout=180):
        return subprocess.run([sys.executable, "-m", "picoring.cli.main", *argv], env=dict(self.env, **(env or {})),
                              cwd=self.root, capture_output=True, text=True, timeout=timeout)

    def client(self, *argv, user=None):
        env = dict(self.env, **({"LG_USERNAME": user} if user else {}))
        return subprocess.run([_tool("labgrid-client"), "-x", self.address, *argv], env=env, capture_output=True,
                              text=True, timeout=30)

    def logs(self):
        return "\n".join("%s: %s" % (log.name, log.read_text()[-1500:]) for log in sorted(self.root.glob("*.log")))

    def resources(self):
        """How many serial ports the coordinator has from the exporters (-1: no answer)."""
        from ..ring import labgrid

        try:
            with labgrid.Coordinator(self.address, timeout=2) as c:
                return sum(1 for groups in c.session.resources.values() for group in groups.values()
                           for entry in group.values() if entry.avail)
        except labgrid.LabgridError:
            return -1

    def holder(self):
        """Who holds the place (HOST/USER), or None."""
        from ..ring import labgrid

        with labgrid.Coordinator(self.address) as c:
            return c.place(self.place).acquired


# -- the bench --------------------------------------------------------------------------

def _one_run(targets, workload, requests):
    """(report, seconds) of Q on the boards, by the harness as `picoring run` does."""
    from ..ring.harness import RingRun
    from ..ring.ports import resetter_for
    from ..sim.workload import make_workload

    wl = make_workload(workload, len(targets), requests, seed=1)
    run = RingRun([t.port for t in targets], "q", wl, resetter=resetter_for(targets), seed=1)
    try:
        run.connect()
        t0 = time.monotonic()
        report = run.run()
        return report, time.monotonic() - t0
    finally:
        run.close()


def _measure(targets, requests, log):
    """The figures of one path: a saturated run for the rates, a sequential one (one request at a
    time, nothing queued) for the latency."""
    say = log or (lambda text: None)
    say("  %s: %d saturated requests..." % (targets[0].port.split(":")[0], requests))
    saturated, seconds = _one_run(targets, "saturated", requests)
    say("  %s: %d sequential requests..." % (targets[0].port.split(":")[0], requests // 10))
    sequential, _ = _one_run(targets, "sequential", requests // 10)
    rtts = [b["clock_rtt_us"] for b in saturated["boards"] if b.get("clock_rtt_us") is not None]
    return {"ok": saturated["ok"] and sequential["ok"], "seconds": round(seconds, 2),
            "messages_per_request": round(saturated["messages_per_request"], 2),
            "link_rtt_us": statistics.median(rtts) if rtts else None,
            "latency_p50_us": sequential["latency_quantiles"]["p50"],
            "latency_p99_us": sequential["latency_quantiles"]["p99"],
            "hops_per_s": round(saturated["hop_frames"] / seconds),
            "events_per_s": round(sum(b["events"] for b in saturated["boards"]) / seconds)}


def _through_place(farm, requests, log):
    """Acquire the farm's place, measure through it, release it: (seconds to acquire, figures)."""
    from ..ring import labgrid, ports

    t0 = time.monotonic()
    placed = ports.resolve_many([labgrid.make_spec(farm.place, farm.address)], farm.state, ports=[])
    acquired_s = time.monotonic() - t0
    try:
        return acquired_s, _measure(placed, requests, log)
    finally:
        labgrid.release_held(say=lambda text: None)


def run(quick=False, log=None, n=N_BOARDS, requests=None):
    from ..ring import flash, ports

    lacking = missing()
    if lacking:
        raise RuntimeError("bench labgrid needs " + ", ".join(lacking))
    requests = requests or REQUESTS[bool(quick)]
    say = log or (lambda text: None)
    root = tempfile.mkdtemp(prefix="picoring-bench-labgrid-")
    try:
        say("starting a loopback farm: %d virtual boards, a coordinator, 2 exporters..." % n)
        t0 = time.monotonic()
        with LoopbackFarm(root, n) as farm:
            result = {"n": n, "requests": requests, "farm_up_s": round(time.monotonic() - t0, 1)}
            local = ports.resolve_many(farm.usb, farm.state)
            say("flashing Q through the local ports...")
            flash.flash(local, "q")
            result["local"] = _measure(local, requests, log)
            acquire_s, result["labgrid"] = _through_place(farm, requests, log)
            result["acquire_s"] = round(acquire_s, 1)
            if NODELAY_SER2NET.exists():  # (a source tree: the wrapper is not installed with the package)
                say("the exporters again, with ser2net's chardelay off...")
                farm.env["PATH"] = "%s%s%s" % (NODELAY_SER2NET.parent, os.pathsep, farm.env.get("PATH", ""))
                farm.restart_exporters()
                result["labgrid_nodelay"] = _through_place(farm, requests, log)[1]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    result["ok"] = all(result[k]["ok"] for k in PATHS if k in result)
    return result


PATHS = {"local": "local ports", "labgrid": "labgrid place", "labgrid_nodelay": "no chardelay"}


def print_table(r):
    rows = [("link round trip (median of the boards' pings)", "link_rtt_us", "us"),
            ("request latency p50, sequential", "latency_p50_us", "us"),
            ("request latency p99, sequential", "latency_p99_us", "us"),
            ("hop rate, saturated", "hops_per_s", "frames/s"), ("events taken in, saturated", "events_per_s", "events/s"),
            ("messages per request, saturated", "messages_per_request", ""), ("saturated run", "seconds", "s")]
    paths = [k for k in PATHS if k in r]
    print("Q on one virtual ring of %d boards, %d saturated then %d sequential requests per path (farm up in %.1f s, "
          "place acquired in %.1f s)" % (r["n"], r["requests"], r["requests"] // 10, r["farm_up_s"], r["acquire_s"]))
    print("%-52s" % "" + "".join(" %14s" % PATHS[k] for k in paths))
    for text, key, unit in rows:
        print("%-52s" % ("%s%s" % (text, " (%s)" % unit if unit else "")) + "".join(" %14s" % r[k][key] for k in paths))
    if "labgrid_nodelay" in r:
        print("no chardelay: the place again, its exporters' ser2net wrapped by %s" % NODELAY_SER2NET)
    if not r["ok"]:
        print("NOT OK: a run's check failed")


def main(args):
    return run_command(args, lambda quick, log: run(quick, log, n=args.n or N_BOARDS, requests=args.requests),
                       print_table)
