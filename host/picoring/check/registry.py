"""The protocols the host knows, all from the firmware's registry (firmware/protocol.py
REGISTRY) and each protocol's descriptor (its class's `about`, docs/adding-a-protocol.md).

Every host module takes its protocol choices, bounds and protocol-specific behaviour from
here, so adding a protocol (a firmware module and a registry row) touches no host module.
"""

from ..firmware import protocol as _fw

PAPER = _fw.PAPER  # the paper's protocols (Feuerstein et al. 1997)


def spec(text, choices=None):
    """A protocol spec as given ("raymond" or "raymond:tree=path,holder=2") checked and made
    canonical (options sorted); ValueError naming the known protocols or the options."""
    name, opts = _fw.parse_spec(text.strip())
    known = tuple(choices or _fw.REGISTRY)
    if name not in known:
        raise ValueError("unknown protocol %r (known: %s)" % (name, ", ".join(known)))
    text = _fw.make_spec(name, opts)
    _fw.load(text)  # the options: declared, holder a number
    return text


def with_options(text, opts):
    """The spec with these options added (replacing the same keys)."""
    name, have = _fw.parse_spec(text)
    have.update(opts)
    return spec(_fw.make_spec(name, have))


def takes_option(text, key):
    """True when the protocol of spec text declares option key (holder: every protocol)."""
    return key == "holder" or key in (about(text).get("options") or {})


def option_help(choices):
    """[(key, help)] of the options the protocols declare, each once."""
    seen = {}
    for name in choices:
        for k, v in (about(name).get("options") or {}).items():
            seen.setdefault(k, "%s: %s" % (name, v))
    return sorted(seen.items())


def split_specs(text):
    """Specs from a list as compare's -p takes it: separated by ";" or by commas, where a
    comma-separated piece that is key=value continues the spec before it
    ("raymond:tree=path,holder=2,q" is two protocols)."""
    out = []
    for part in text.split(";"):
        for piece in part.split(","):
            piece = piece.strip()
            if not piece:
                continue
            if out and "=" in piece and ":" not in piece.split("=", 1)[0] and ":" in out[-1]:
                out[-1] += "," + piece
            else:
                out.append(piece)
    return out


def horizon(protocol, n):
    """The descriptor's "horizon" at ring size n: the most hop times one request can take on a
    quiet ring (an expression as the bounds are), or None (n: the ring protocols')."""
    cls = _fw.load(protocol)
    expr = cls.about.get("horizon")
    return None if expr is None else _fw.bound(expr, n, cls.bound_names(n))


def evaluate(expr, n, names=None):
    """A descriptor's expression (its text, or compiled) at ring size n, with names (e.g. w: a
    payload's first word)."""
    return _fw.bound(expr, n, names)


def first_holder(protocol):
    """Where the ring's first token starts: the holder option (protocol.Node.first), 0 by default."""
    return _fw.load(protocol).first


def names():
    """Every registered protocol, in registry order (the CLI's choices)."""
    return tuple(_fw.REGISTRY)


def about(protocol):
    """The descriptor of a registered protocol (ValueError naming the known ones otherwise)."""
    return _fw.load(protocol).about


def settle_time(protocol, n):
    """How long a token must have been alive without a break, in the protocol's own clock, for
    the ring to count as settled after a token loss (check/soft.py): the node attribute that the
    descriptor's "settles" names, at ring size n with the spec's options (the wandering token:
    Delta_max); None for a protocol whose descriptor names none."""
    attr = about(protocol).get("settles")
    return None if attr is None else getattr(_fw.make_node(protocol, 0, n), attr)


def rests(protocol):
    """True when the protocol's token can come to rest (a run ends quiescent); S's never does."""
    return about(protocol).get("rests", True)


def tokens_at_start(protocol):
    """How many tokens a ring of the protocol starts with (and holds at rest, if it rests): 1, or
    0 for a protocol without a token (random access: every request served at once; the
    descriptor's "token", True by default)."""
    return 1 if about(protocol).get("token", True) else 0


def findings(protocol):
    """{violation kind: where it is documented and why} of the descriptor's "findings": what a run
    of this protocol may show that the project has found and documented (d-literal never goes
    quiet); {} for a protocol with none."""
    return dict(about(protocol).get("findings") or {})


def bound(protocol, name, n, which="checked"):
    """A bound of the descriptor at ring size n: which is "checked" (what runs are held to) or
    "paper" (as printed); None where none is proven or the descriptor has no such bound."""
    cls = _fw.load(protocol)
    b = cls.about.get("bounds", {}).get(name)
    if b is None or b.get(which) is None:
        return None
    return _fw.bound(b.get(which), n, cls.bound_names(n))


def message_roles(about):
    """{message kind: role} of a protocol whose token or requests travel as layer messages:
    about["messages"] maps a role ("token", "request") to a description, which for a
    message of the layer is a dict with its "kind" (S, Q and D: a string, their own frames).
    Read by the dashboard (where the token is) and the explorer (tokens in flight)."""
    roles = {}
    for role, what in (about.get("messages") or {}).items():
        if isinstance(what, dict) and what.get("kind") is not None:
            roles[what["kind"]] = role
    return roles


def search_of(about):
    """(kind, requester, number) of a protocol whose requests search for the token (BinarySearch's
    gimme, Lemma 6): its request message's kind and about["messages"]["request"]["search"]'s two
    expressions in w, the payload's first word, compiled; None for any other protocol.
    Read by the checker and the explorer (each request's forwards)."""
    request = (about.get("messages") or {}).get("request")
    search = request.get("search") if isinstance(request, dict) else None
    if not search:
        return None
    return (request["kind"], compile(search["requester"], "<descriptor>", "eval"),
            compile(search["number"], "<descriptor>", "eval"))


def where(protocol, name):
    """Where a bound comes from (the theorem or page), or None."""
    b = about(protocol).get("bounds", {}).get(name)
    return None if b is None else b.get("where")
