"""The protocols the host knows, all from the firmware's registry (firmware/protocol.py
REGISTRY) and each protocol's descriptor (its class's `about`, docs/adding-a-protocol.md).

Every host module takes its protocol choices, bounds and protocol-specific behaviour from
here, so adding a protocol (a firmware module and a registry row) touches no host module.
"""

from ..firmware import protocol as _fw

PAPER = _fw.PAPER  # the paper's protocols (Feuerstein et al. 1997)


def names():
    """Every registered protocol, in registry order (the CLI's choices)."""
    return tuple(_fw.REGISTRY)


def about(protocol):
    """The descriptor of a registered protocol (ValueError naming the known ones otherwise)."""
    return _fw.load(protocol).about


def rests(protocol):
    """True when the protocol's token can come to rest (a run ends quiescent); S's never does."""
    return about(protocol).get("rests", True)


def bound(protocol, name, n, which="checked"):
    """A bound of the descriptor at ring size n: which is "checked" (what runs are held to) or
    "paper" (as printed); None where none is proven or the descriptor has no such bound."""
    b = about(protocol).get("bounds", {}).get(name)
    return None if b is None else _fw.bound(b.get(which), n)


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


def where(protocol, name):
    """Where a bound comes from (the theorem or page), or None."""
    b = about(protocol).get("bounds", {}).get(name)
    return None if b is None else b.get("where")
