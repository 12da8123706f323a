"""Boards in a labgrid place: a ring spread over several hosts, named by its place.

labgrid (https://labgrid.readthedocs.io) is the board-farm engine: a coordinator, an
exporter on each host that exports its boards' serial ports over RFC 2217 (it starts a
ser2net per port while the port's place is acquired), and *places* that a user acquires
and releases, so that two people never drive the same boards at once. picoring rides on it:

  labgrid:PLACE                 the place's serial ports, from the coordinator in
                                LG_COORDINATOR (else 127.0.0.1:20408), as labgrid-client does
  labgrid:PLACE@HOST:PORT       the same, from that coordinator (the CLI's --coordinator)

place_ports() resolves those: it acquires the place unless this user holds it already,
waits until every exporter has its ser2net up, and returns the place's serial ports
(rfc2217:// URLs) in ring order: a ring file's (one that `picoring discover` wrote over the
place), else resource name order (board2 before board10). ports.py makes Targets of them,
and gives a port exported from this host for a virtual board of `picoring virtual up`
(found by its pty) that board's UART and reset, as when the board is named by its path.
A place picoring acquired is released by release_held() (the CLI calls it when a command
ends, Ctrl-C and errors included; the pytest plugin when its session ends), never one the
user acquired.

labgrid is an optional dependency (picoring[labgrid]), imported only here and only when
a place is named.
"""

import argparse
import asyncio
import atexit
import logging
import os
import re
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Optional

SCHEME = "labgrid:"
DEFAULT_COORDINATOR = "127.0.0.1:20408"  # labgrid-client's default
COORDINATOR_PORT = 20408
CONNECT_TIMEOUT_S = 5.0  # the coordinator answers a local client in ~0.1 s
SERIAL_TIMEOUT_S = 15.0  # an exporter starts ser2net within ~1 s of an acquire
# The coordinator answers an acquire once every exporter has started the place's ser2nets, one
# after another, each given 0.5 s to fail (labgrid's exporter): 16 boards took over 5 s.
ACQUIRE_TIMEOUT_S = 10.0
ACQUIRE_PER_PORT_S = 1.0
SERIAL_CLASS = "NetworkSerialPort"  # what an exported RawSerialPort or USBSerialPort is to a client
# pyserial's RFC 2217 client waits for the server to acknowledge the DTR and RTS it sets;
# ser2net never does on a pty (virtual boards) and pyserial fails with "timeout while waiting
# for option 'control'". The boards need neither line.
# pyserial gives the server 3 s to negotiate the telnet options: ser2net on a loaded machine took
# longer (four boards flashed at once beside a test suite and three busy loops: "failed to
# access" for one of them), so the URL gives it NEGOTIATE_S. A port that no server listens on
# is still refused at once.
NEGOTIATE_S = 20
URL = "rfc2217://%s:%d?ign_set_control&timeout=" + str(NEGOTIATE_S)
INSTALL_HINT = "labgrid is not installed: %s -m pip install 'picoring[labgrid]'" % sys.executable


class LabgridError(ValueError):
    """A place that cannot be had: it does not exist, another user holds it, the coordinator does
    not answer, its ports do not come up. The message says which and what to do."""


def parse_spec(spec):
    """labgrid:PLACE[@COORDINATOR] -> (place, coordinator address or None)."""
    place, _, coordinator = spec.strip()[len(SCHEME):].partition("@")
    if not place:
        raise LabgridError("%s: write labgrid:PLACE or labgrid:PLACE@HOST:PORT" % spec)
    return place, coordinator or None


def make_spec(place, coordinator=None):
    return SCHEME + place + ("@" + coordinator if coordinator else "")


def coordinator_address(given=None):
    """As labgrid-client: the address given, else LG_COORDINATOR, else 127.0.0.1:20408."""
    return given or os.environ.get("LG_COORDINATOR") or DEFAULT_COORDINATOR


def _say(text):
    print("picoring: labgrid: %s" % text, file=sys.stderr, flush=True)


def _client():
    try:
        from labgrid.remote import client
    except ImportError:
        raise LabgridError(INSTALL_HINT) from None
    return client


class _QuietLabgrid(logging.Filter):
    """labgrid's client logs a lost coordinator on the root logger ("coordinator is unavailable:
    ..."); picoring says it once, in its own words."""

    def __init__(self):
        super().__init__()
        import labgrid

        self.package = os.path.dirname(labgrid.__file__) + os.sep

    def filter(self, record):
        return not record.pathname.startswith(self.package)


_loops = threading.local()


def _event_loop():
    """This thread's event loop for labgrid's sessions, made once and never closed (as
    labgrid-client keeps one): grpc's poller may still call into a loop after its channel is
    closed, and logs "Event loop is closed" for one that was."""
    loop = getattr(_loops, "loop", None)
    if loop is None or loop.is_closed():
        loop = _loops.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)  # grpc's channel binds to the thread's loop
    return loop


class Coordinator:
    """One connection to a labgrid coordinator: labgrid's own ClientSession (the one
    labgrid-client drives), on this thread's event loop. Use as a context manager."""

    def __init__(self, address=None, timeout=CONNECT_TIMEOUT_S):
        client = _client()
        from labgrid.util.proxy import proxymanager

        self.address = coordinator_address(address)
        self._quiet = _QuietLabgrid()
        logging.getLogger().addFilter(self._quiet)
        self.loop = _event_loop()
        self.session = None
        self.closed = False
        try:
            grpc_address = proxymanager.get_grpc_address(self.address, default_port=COORDINATOR_PORT)
            self.session = client.ClientSession(grpc_address, self.loop,
                                                args=argparse.Namespace(place=None, allow_unmatched=False, kick=False))
            self._run(self.session.start(), timeout)
        except (asyncio.TimeoutError, client.Error, OSError, ValueError) as e:
            self.close()
            why = "no answer within %.0f s" % timeout if isinstance(e, asyncio.TimeoutError) else "cannot connect"
            raise LabgridError("the labgrid coordinator at %s does not answer (%s): is labgrid-coordinator running "
                               "there? (give its address with --coordinator HOST:PORT or LG_COORDINATOR)"
                               % (self.address, why)) from None
        except BaseException:
            self.close()
            raise

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _run(self, coro, timeout=CONNECT_TIMEOUT_S):
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))

    def close(self):
        if self.closed:
            return
        self.closed = True
        try:
            # Each step on its own: grpc's poller stays bound to this loop until the channel is
            # closed, and calls into it after loop.close() otherwise ("Event loop is closed").
            for step in (self.session.stop, self.session.close) if self.session is not None else ():
                try:
                    self._run(step(), 2.0)
                except Exception:  # a session that never started, a coordinator gone: closed all the same
                    pass
        finally:
            logging.getLogger().removeFilter(self._quiet)

    @property
    def me(self):
        """This client as the coordinator names users: HOST/USER (LG_HOSTNAME, LG_USERNAME)."""
        return "%s/%s" % (self.session.gethostname(), self.session.getuser())

    def place(self, name):
        """The place called `name` (or the one place its name or alias pattern matches, as
        labgrid-client -p)."""
        client = _client()
        places = self.session.places
        if name in places:
            return places[name]
        try:
            return self.session.get_place(name)
        except client.Error:
            known = ", ".join(sorted(places)) or "none"
            raise LabgridError("no place %s on the labgrid coordinator at %s (places there: %s; make one with "
                               "labgrid-client -p %s create, then add-match EXPORTER/GROUP/NetworkSerialPort/*)"
                               % (name, self.address, known, name)) from None

    def held_by_me(self, place):
        """True if this user may use the place now: acquired by them, or allowed to them."""
        return place.acquired == self.me or self.me in place.allowed

    def acquire(self, place):
        """Acquire an idle place. A place someone else holds is an error that says who."""
        client = _client()
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

        if place.acquired:
            host, _, user = place.acquired.partition("/")
            since = time.strftime("%Y-%m-%d %H:%M", time.localtime(place.changed))
            raise LabgridError("place %s is held by %s on %s (place last changed %s): ask them to release it (labgrid-client -p %s "
                               "release), or to let you use it with them (labgrid-client -p %s allow %s)"
                               % (place.name, user, host, since, place.name, place.name, self.me))
        try:
            self.session.check_matches(place)
        except client.Error as e:
            raise LabgridError("place %s: %s (is every exporter running?)" % (place.name, e.args[0])) from None
        ports = sum(1 for exporter, groups in self.session.resources.items() for group_name, group in groups.items()
                    for name, entry in group.items() if place.hasmatch((exporter, group_name, entry.cls, name)))
        timeout = ACQUIRE_TIMEOUT_S + ACQUIRE_PER_PORT_S * ports
        try:
            self._run(self.session.stub.AcquirePlace(pb2.AcquirePlaceRequest(placename=place.name)), timeout)
            self._run(self.session.sync_with_coordinator())
        except asyncio.TimeoutError:
            raise LabgridError("place %s: the coordinator at %s did not answer the acquire within %.0f s"
                               % (place.name, self.address, timeout)) from None
        except Exception as e:  # grpc's AioRpcError: its details say why
            details = e.details() if hasattr(e, "details") else str(e)
            raise LabgridError("place %s cannot be acquired: %s" % (place.name, details)) from None

    def release(self, name):
        """Release the place if this user holds it (the coordinator checks: fromuser)."""
        from labgrid.remote.generated import labgrid_coordinator_pb2 as pb2

        self._run(self.session.stub.ReleasePlace(pb2.ReleasePlaceRequest(placename=name, fromuser=self.me)))
        self._run(self.session.sync_with_coordinator())

    def serial_ports(self, place, timeout=SERIAL_TIMEOUT_S):
        """[(name, exporter, group, resource name, params)] of the place's serial ports once every
        exporter has started its ser2net (params["port"] set), in no particular order."""
        deadline = time.monotonic() + timeout
        while True:
            ports, waiting = [], []
            for path in place.acquired_resources:
                exporter, group, cls, resource = path
                if cls != SERIAL_CLASS:
                    continue
                match = place.getmatch(path)
                name = match.rename if match is not None and match.rename else resource
                entry = self.session.resources.get(exporter, {}).get(group, {}).get(resource)
                if entry is None or not entry.avail or not entry.params.get("port"):
                    waiting.append("%s/%s/%s" % (exporter, group, resource))
                    continue
                ports.append((name, exporter, group, resource, entry.params))
            if not waiting:
                break
            if time.monotonic() > deadline:
                raise LabgridError("place %s: no serial server for %s within %.0f s (is the exporter running, with "
                                   "ser2net installed on its host?)" % (place.name, ", ".join(waiting), timeout))
            self.loop.run_until_complete(asyncio.sleep(0.1))  # the session's updates arrive meanwhile
        if not ports:
            raise LabgridError("place %s has no serial ports (its matches: %s; export each board as a USBSerialPort "
                               "or RawSerialPort and add-match EXPORTER/GROUP/NetworkSerialPort/*)"
                               % (place.name, ", ".join(str(m) for m in place.matches) or "none"))
        return ports


# -- the places this process acquired ----------------------------------------------

_held = {}  # (coordinator address, place name) -> True once the acquire was sent


def release_held(say=_say):
    """Release every place this process acquired (and only those). Errors are said, not raised:
    this runs while a command ends, maybe on its way out from another error."""
    for address, name in list(_held):
        _held.pop((address, name), None)
        try:
            with Coordinator(address) as c:
                c.release(name)
            say("released place %s" % name)
        except (LabgridError, Exception) as e:  # a coordinator gone since: the place stays acquired
            say("could not release place %s: %s (release it with labgrid-client -p %s release)" % (name, e, name))


atexit.register(release_held)  # a backstop: the CLI and the plugin release before they exit


# -- the place's ports ------------------------------------------------------------------

@dataclass
class PlacePort:
    """One serial port of a place, as this host reaches it."""

    url: str            # rfc2217://HOST:PORT?ign_set_control&timeout=S, served by the exporter's ser2net
    place: str
    name: str           # the resource's name in the place (a match's rename, else its own)
    resource: str       # EXPORTER/GROUP/NAME
    host: str           # where the exporter says its ser2net listens
    path: str           # the serial device on the exporter's host
    coordinator: Optional[str] = None  # as given (None: LG_COORDINATOR or the default)

    @property
    def spec(self):
        return "%s%s/%s" % (SCHEME, self.place, self.name)

    @property
    def description(self):
        return "labgrid place %s: %s (%s)" % (self.place, self.resource, self.path)

    @property
    def entry(self):
        """What a ring file keeps of it (ports.write_ring_file): the port changes with each acquire."""
        e = {"place": self.place, "resource": self.resource, "name": self.name}
        if self.coordinator:
            e["coordinator"] = self.coordinator
        return e

    def on_this_host(self):
        host = self.host
        if host in ("localhost", "::1") or host.startswith("127."):
            return True
        return host in {socket.gethostname(), os.environ.get("LG_HOSTNAME")}


def _natural(text):
    """board2 before board10."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", text)]


def _url(host, port):
    return URL % ("[%s]" % host if ":" in host else host, port)


def place_ports(spec, order=None, order_from="the ring file", timeout=SERIAL_TIMEOUT_S, say=_say):
    """The serial ports of the place `spec` names (labgrid:PLACE[@COORDINATOR]), in ring order:
    `order` (a ring file's resources, EXPORTER/GROUP/NAME, from order_from) if given, else by
    name. Acquires the place unless this user holds it (release_held() releases it)."""
    name, coordinator = parse_spec(spec)
    address = coordinator_address(coordinator)
    with Coordinator(address) as c:
        place = c.place(name)
        if not c.held_by_me(place):
            _held[(address, place.name)] = True  # before the request: a Ctrl-C in it still releases
            try:
                c.acquire(place)
            except LabgridError:
                _held.pop((address, place.name), None)
                raise
            say("acquired place %s (released when this command ends)" % place.name)
            place = c.place(place.name)
        found = c.serial_ports(place, timeout)
    out = []
    for port_name, exporter, group, resource, params in found:
        where = "%s/%s/%s" % (exporter, group, resource)
        if params.get("extra", {}).get("proxy_required"):
            raise LabgridError("place %s: %s is on an isolated exporter (labgrid-exporter -i), reached only through "
                               "SSH; picoring does not forward ports: run it where %s is reachable"
                               % (place.name, where, params["host"]))
        out.append(PlacePort(_url(params["host"], params["port"]), place.name, port_name, where, params["host"],
                             params.get("extra", {}).get("path", ""), coordinator))
    if order is None:
        return sorted(out, key=lambda p: (_natural(p.name), p.resource))
    by_resource = {p.resource: p for p in out}
    missing = [r for r in order if r not in by_resource]
    extra = sorted(set(by_resource) - set(order))
    if missing or extra:
        what = ["not in the place: " + ", ".join(missing)] if missing else []
        what += ["not in the file: " + ", ".join(extra)] if extra else []
        raise LabgridError("place %s does not have the boards of %s (%s): run picoring discover --labgrid %s again"
                           % (place.name, order_from, "; ".join(what), place.name))
    return [by_resource[r] for r in order]


def ring_file_order(entries, place=None):
    """From a ring file's entries (ports.read_ring_file): (spec, [resource in ring order]) if they
    are the boards of one place (of `place`, if given), else None."""
    if not entries or not all(isinstance(e.get("labgrid"), dict) for e in entries):
        return None
    places = {e["labgrid"].get("place") for e in entries}
    coordinators = {e["labgrid"].get("coordinator") for e in entries} - {None}
    if len(places) != 1 or len(coordinators) > 1 or (place is not None and places != {place}):
        return None
    return make_spec(places.pop(), coordinators.pop() if coordinators else None), [e["labgrid"]["resource"] for e in entries]
