# Runs simcore.run with the firmware's protocol code on a fixed schedule and
# prints every event as a JSON line. The same file runs under CPython and under
# the real `micropython` binary; tests/test_micropython.py compares the two.
# Usage: <interpreter> mpy_sim_driver.py FIRMWARE_DIR SIMCORE_DIR SCENARIO_FILE
# (a file, not an argument: this micropython build aborts with "FATAL: uncaught
# NLR" when a command-line argument is longer than about 256 bytes)
import json
import sys

sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
import protocol  # noqa: E402
import simcore  # noqa: E402


class FixedSchedule:
    closed_loop = False
    defer_busy = True

    def __init__(self, items):
        # Already in time order; MicroPython's sort is not stable, so do not sort.
        self.items = items
        self.pos = 0
        self.total = len(items)
        self.issued = 0

    @property
    def exhausted(self):
        return self.issued >= self.total

    def next_time(self):
        return self.items[self.pos][0] if self.pos < len(self.items) else None

    def due(self, t):
        out = []
        while self.pos < len(self.items) and self.items[self.pos][0] <= t:
            out.append((self.items[self.pos][1], None))
            self.pos += 1
        self.issued += len(out)
        return out


class Observer:
    def count_to(self, tok, req, msg_frames=0, msg_logical=0):
        pass

    def request(self, t, node):
        pass

    def enter(self, t, node):
        pass

    def exit(self, t, node):
        pass


class Printer:
    def frame(self, t, ev, node, is_token, payload):
        print(json.dumps([t, ev, node, is_token, list(payload) if payload else None]))

    def message(self, t, ev, node, m):
        kind, src, dst, payload, hop, fwd = m
        print(json.dumps([t, ev, node, kind, src, dst, list(payload), hop, fwd]))

    def event(self, t, ev, node):
        print(json.dumps([t, ev, node]))


with open(sys.argv[3]) as f:
    scenario = json.load(f)
n = scenario["n"]
nodes = [protocol.make_node(scenario["protocol"], i, n) for i in range(n)]
out = simcore.run(nodes, FixedSchedule([tuple(x) for x in scenario["schedule"]]), scenario["cs_time"],
                  Observer(), tracer=Printer(), idle_horizon=scenario.get("idle_horizon", 2 * n))
print(json.dumps(["result", out["quiescent"], out["token_msgs"], out["request_msgs"], out["msg_frames"],
                  out["msg_logical"], out["end_time"]]))
