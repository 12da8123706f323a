"""What the command modules share: the error a user can fix, the protocol choices,
printing a report, and the boards a ring command runs on."""

import json
import sys

from ..check import registry
from ..firmware import frame as _frame


class CommandError(Exception):
    """A problem the user can fix; printed without a traceback."""


PROTOCOLS = registry.names()  # every registered protocol (firmware/protocol.py REGISTRY)


def add_protocol_arg(p, choices=PROTOCOLS, default="d", required=False, what="the protocol"):
    """--protocol/-p (a name, or a spec with options: raymond:tree=path) and --opt KEY=VALUE.
    The list of protocols lives in one place, `picoring protocols` (or -p help): the name is
    checked by apply_options, so an unknown one is one line naming the valid ones."""
    p.add_argument("--protocol", "-p", default=None if required else default, required=required, metavar="P",
                   help="%s%s: a name, or NAME:KEY=VALUE,... with its options; `picoring protocols` (or -p help) "
                        "lists them" % (what, "" if required else " (default %s)" % default))
    p.set_defaults(protocol_choices=tuple(choices))
    add_opt_arg(p)


def add_opt_arg(p):
    """--opt KEY=VALUE, repeatable: the protocol's options, as its descriptor declares them."""
    p.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                   help="a protocol option (repeatable; also as -p NAME:KEY=VALUE,...): holder=K, the node where "
                        "the first token starts (default 0), for every protocol; the others: `picoring protocols`")


def protocol_table(choices=PROTOCOLS):
    """The text of `picoring protocols`: each protocol's name and title, then the options the
    descriptors declare."""
    width = max(len(name) for name in choices)
    lines = ["%-*s  %s" % (width, name, " ".join(registry.about(name).get("title", name).split())) for name in choices]
    lines += ["", "options (--opt KEY=VALUE, or -p NAME:KEY=VALUE,...):",
              "  holder: every protocol: the node where the first token starts (default 0)"]
    lines += ["  %s: %s" % (k, " ".join(v.split())) for k, v in registry.option_help(choices)]
    return "\n".join(lines)


class ProtocolsShown(Exception):
    """-p help: the protocol list was printed; the command ends with status 0."""


def _check_protocol(args):
    """args.protocol checked and made canonical; -p help prints the list (ProtocolsShown)."""
    choices = getattr(args, "protocol_choices", PROTOCOLS)
    if args.protocol.strip() == "help":
        print(protocol_table(choices))
        raise ProtocolsShown()
    try:
        if getattr(args, "protocol_list", False):  # several, as compare's -p (bench chip)
            args.protocol = ";".join(registry.spec(s, choices) for s in registry.split_specs(args.protocol))
        else:
            args.protocol = registry.spec(args.protocol, choices)
    except ValueError as e:
        raise CommandError(str(e)) from None


def apply_options(args):
    """Check -p (an unknown protocol: one line with the valid names; -p help: the list), then
    put --opt KEY=VALUE into args.protocol (a spec), or into each of compare's args.protocols
    that declares the option (holder: every one); an option none of them takes is an error."""
    if getattr(args, "protocol", None) is not None and hasattr(args, "protocol_choices"):
        _check_protocol(args)
    if (getattr(args, "protocols", None) or "").strip() == "help":
        print(protocol_table())
        raise ProtocolsShown()
    opts = {}
    for item in getattr(args, "opt", None) or ():
        k, eq, v = item.partition("=")
        if not eq or not k or not v:
            raise CommandError("--opt %s: KEY=VALUE" % item)
        opts[k] = v
    if not opts:
        return
    if getattr(args, "protocol", None):
        args.protocol = registry.with_options(args.protocol, opts)
    elif getattr(args, "protocols", None):
        specs = registry.split_specs(args.protocols)
        taken = set()
        out = []
        for spec in specs:
            mine = {k: v for k, v in opts.items() if registry.takes_option(spec, k)}
            taken.update(mine)
            out.append(registry.with_options(spec, mine))
        left = sorted(set(opts) - taken)
        if left:
            raise CommandError("--opt %s: none of %s takes it" % (left[0], ", ".join(specs)))
        args.protocols = ";".join(out)


def print_report(report, as_json):
    if as_json:
        print(json.dumps(report, sort_keys=True))
        return
    from ..check.report import print_report as show

    show(report)


def user_errors(fn):
    """Errors a user can act on (a board that does not flash, a ring that is not wired as given,
    a harness that cannot reach a board) become the CLI's CommandError: `picoring: message`, exit 2."""
    import functools

    @functools.wraps(fn)
    def wrapper(args, *rest, **kw):
        from ..ring.deploy import DeployError
        from ..ring.discover import WiringError
        from ..ring.flash import FlashError
        from ..ring.link import HarnessError
        from ..virtual.boards import VirtualBoardError

        try:
            return fn(args, *rest, **kw)
        except (FlashError, WiringError, HarnessError, DeployError, VirtualBoardError) as e:
            raise CommandError(str(e)) from None

    return wrapper


def add_labgrid_args(p, where=None):
    """--labgrid PLACE (into the mutually exclusive group `where` of --ports, if there is one)
    and --coordinator: the boards of a labgrid place (ring/labgrid.py, docs/labgrid.md)."""
    (where or p).add_argument("--labgrid", metavar="PLACE",
                              help="the boards of this labgrid place, in ring order (as --ports labgrid:PLACE): "
                                   "acquired for the command unless you hold it, released after (docs/labgrid.md)")
    p.add_argument("--coordinator", metavar="HOST:PORT",
                   help="--labgrid: the labgrid coordinator (default: $LG_COORDINATOR, else 127.0.0.1:20408)")


def labgrid_ports(args):
    """--labgrid PLACE [--coordinator HOST:PORT] becomes --ports labgrid:PLACE[@HOST:PORT],
    which ring/ports.py resolves like any other port names."""
    place, coordinator = getattr(args, "labgrid", None), getattr(args, "coordinator", None)
    if place is not None:
        if getattr(args, "ports", None):
            raise CommandError("give --ports or --labgrid, not both")
        args.ports = "labgrid:" + place
    if coordinator is None:
        return
    specs = [s for s in (getattr(args, "ports", None) or "").split(",") if s.strip().startswith("labgrid:")]
    if not specs:
        raise CommandError("--coordinator is for a labgrid place: give --labgrid PLACE")
    args.ports = ",".join(s if "@" in s or not s.strip().startswith("labgrid:") else s.strip() + "@" + coordinator
                          for s in args.ports.split(","))


def release_places():
    """Release the labgrid places this command acquired (none if it named none: the module is
    imported only when a place is named)."""
    held = sys.modules.get("picoring.ring.labgrid")
    if held is not None:
        held.release_held()


def run_ports(args):
    """For `picoring run`: (ports, resetter) from --ports or the ring file; virtual boards of
    `picoring virtual up` get their ring's reset, others a soft reset over USB."""
    from ..ring.ports import resetter_for, targets_from_args

    targets, _ = targets_from_args(args.ports, getattr(args, "ring_file", None), getattr(args, "virtual_dir", None))
    return [t.port for t in targets], resetter_for(targets)


# -- workload arguments, checked before anything starts ------------------------

RESOURCES = ("fram",)


def add_resource_args(p, what):
    """--resource fram and --cs-hold-us: the shared device the critical sections increment a
    counter in (docs/fram.md)."""
    p.add_argument("--resource", choices=RESOURCES,
                   help="fram: the critical sections increment a 4-byte counter in one I2C FRAM shared by every "
                        "board (read at entry, written at exit, through adafruit_bus_device), and the counter must "
                        "equal the entries (docs/fram.md); %s" % what)
    p.add_argument("--cs-hold-us", type=int, default=0, metavar="US",
                   help="--resource: hold the FRAM this long after each read, the board doing nothing else (widens "
                        "the window in which an overlap loses an update; default 0)")


def resource_args(args):
    """The checked --resource and --cs-hold-us: (resource or None, hold)."""
    if args.cs_hold_us < 0:
        raise CommandError("--cs-hold-us must be >= 0")
    if args.cs_hold_us and args.resource is None:
        raise CommandError("--cs-hold-us holds a shared resource: give --resource fram")
    return args.resource, args.cs_hold_us


def add_workload_args(p, requests_default):
    """--workload/-w and --requests/-k; -k's default is applied by workload_args, so a
    `file:` workload (whose file says how many requests) can tell a -k given from none."""
    p.add_argument("--workload", "-w", default="poisson",
                   help="poisson | burst | periodic | saturated | sequential | adversarial | file:PATH (JSON lines {\"t\": time, \"node\": i}, "
                        "or a trace of sim or run: its requests replayed, times in its unit); each is described "
                        "in docs/commands.md")
    p.add_argument("--requests", "-k", type=int, default=None,
                   help="number of requests (default %d; a file: workload makes the requests in its file)"
                        % requests_default)
    p.set_defaults(requests_default=requests_default)


MAX_BOARDS = _frame.BROADCAST  # 255, positions 0..254: a link frame names a board in one byte, 0xFF every board


def check_boards(n, what):
    """A ring of n boards (virtual or real) is one the frames can address: one line otherwise,
    before anything starts (what: the option that gave n)."""
    if n > MAX_BOARDS:
        raise CommandError("%s %d: a ring of boards has at most %d (a board's address is one byte in the link "
                           "frames, 0x%X meaning every board); the simulator takes any -n" % (what, n, MAX_BOARDS,
                                                                                          _frame.BROADCAST))


def workload_args(args, n, cs_time=1, err=None, boards=None):
    """The Workload of args (-w, -k, --seed, --rate, --period) for a ring of n, built before
    any board starts, so a bad one costs nothing. Fills in args.requests. A -k that a file:
    workload ignores is said on err (stderr). boards: the option that gave n, for a ring of
    boards: n within MAX_BOARDS, and at least one request (-k 0 would boot a ring for nothing)."""
    from ..sim.workload import make_workload

    if n < 2:
        raise CommandError("a ring needs at least 2 boards (nodes), got %d" % n)
    if boards is not None:
        check_boards(n, boards)
    given = args.requests
    if given is not None and given < 0:
        raise CommandError("--requests cannot be negative")
    if given is None:
        args.requests = getattr(args, "requests_default", 100)
    workload = make_workload(args.workload, n, args.requests, seed=getattr(args, "seed", 0), cs_time=cs_time,
                             rate=getattr(args, "rate", None), period=getattr(args, "period", None))
    if given is not None and args.workload.startswith("file:") and given != workload.total:
        print("picoring: note: -k %d ignored: %s makes its %d request(s)" % (given, workload.describe(), workload.total),
              file=err or sys.stderr)
    for note in getattr(workload, "notes", ()):
        print("picoring: note: %s" % note, file=err or sys.stderr)
    args.requests = workload.total
    if boards is not None and workload.total == 0:
        what = "%s makes none" % workload.describe() if args.workload.startswith("file:") else "-k 0"
        raise CommandError("%s: no request to serve, and a ring of boards is started only for a run of at least "
                           "one" % what)
    return workload


def ring_size(args, default):
    """-n as given; else the ring size of a `file:` workload that is a trace (its requests are
    replayed on a ring like the one that made them); else default."""
    from ..sim.workload import trace_ring_size

    if args.n is not None:
        return args.n
    return trace_ring_size(args.workload) or default
