# Random access, the benchmark of Ciuffoletti's wandering token paper, section 2
# (seeds/ciuffoletti-wandering-token.md): "each component issues a service request
# periodically, without any form of coordination. The period between two successive requests
# is based on a system wide period Delta_min perturbed by a random bias, chosen in the interval
# [0, Delta_min/2]". No token, no message: a request is served at once. The period is the
# workload's ("periodic", sim/workload.py), as every workload's timing is.

try:
    from . import protocol  # the host: picoring.firmware.proto_*
except ImportError:
    import protocol  # a board: firmware modules side by side

Node = protocol.Node


class NodeRandom(Node):
    """No coordination: every request enters the critical section at once."""

    name = "random"
    about = {
        "name": "random",
        "title": "random access: no coordination, every request served at once (the wandering token's benchmark)",
        "citation": ("Ciuffoletti: The Wandering Token: Congestion Avoidance of a Shared Resource, section 2 "
                     "(the benchmark); seeds/ciuffoletti-wandering-token.md"),
        "exclusion": "none",  # the checker measures how often operations overlap, as for "soft"
        "rests": True,  # nothing ever moves
        "token": False,  # a ring at rest holds none (host/picoring/check/registry.py tokens_at_start)
        "view": {},
        "messages": {},
        "bounds": {
            "logical_per_request": {"paper": None, "checked": "0", "where": "no message at all"},
            "messages_per_request": {"paper": None, "checked": "0", "where": "no message at all"},
            "service_traffic": {"paper": None, "checked": "0", "where": "no message at all"},
        },
    }
    uses_requests = False

    def give_token(self):
        return 0  # there is no token

    def waiting(self):
        return self.fresh or self.starting  # the layer's boot; there is no token to recover

    def request(self):
        # Section 2: the component simply performs the operation.
        return self._enter()

    def exit_cs(self):
        self.in_cs = False
        return 0

    def _regenerate(self):
        return 0
