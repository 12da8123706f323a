"""What `picoring COMMAND --help` says above and below the options: a paragraph on what the
command does (where its parser has none of its own) and two or three examples to copy.
One table, so the help reads as one voice; tests/test_cli_help.py parses every example."""

import argparse
import textwrap

# (path of the command, description or None to keep the parser's own, examples)
HELP = {
    (): (None, [
        "picoring demo                                # 5 virtual boards, D then Q, checked: start here",
        "picoring sim -p q -n 8 -k 1000",
        "picoring protocols",
    ]),
    ("sim",): (None, [
        "picoring sim -p q -n 8 -k 1000",
        "picoring sim -p d -n 10000 -k 1000000 --rate 1        # a busy ring: about 16 s",
        "picoring sim -p q -w adversarial -k 50 --trace q.jsonl && picoring report q.jsonl",
    ]),
    ("check",): (
        "Reads a JSON-lines trace written by sim or run (docs/trace-format.md) and prints the same report as the "
        "run did: messages (token and request) and messages per request, the largest service traffic, latency, "
        "safety and liveness, each against its bound. Exit status 0 when every check passes, 1 when one fails or "
        "the trace has no end record (an interrupted run: incomplete, never OK), 2 on bad input.", [
            "picoring check run.jsonl",
            "picoring check run.jsonl --json | jq .messages_per_request",
        ]),
    ("compare",): (
        "Runs the chosen protocols (default: every registered one) on the same workload, ring size and seed, in "
        "the simulator, on N virtual boards (--virtual N), or on boards given by their ports (flashed for each "
        "protocol in turn, as `picoring flash` does), and prints one row each: logical messages and hop frames "
        "per request, latency, the largest service traffic, fairness, and every check against its bound. "
        "Arguments are checked before a board is touched.", [
            "picoring compare -n 6 -k 100",
            "picoring compare -p s,q,d --virtual 4 -k 50 --plot cmp.png",
            "picoring compare --ports $P -p toy,q -w adversarial -k 6 --baud 1000000",
        ]),
    ("bench",): (None, [
        "picoring bench sim --quick",
        "picoring bench ring --emulated --json        # 3 emulated Picos' hop in chip time, against a minimal relay",
        "picoring bench soak --quick -p q",
    ]),
    ("virtual",): (
        "A ring of virtual boards that outlives the command: MicroPython unix-port processes, each with a "
        "pseudo-terminal as its USB serial (a path like a Pico's /dev/ttyACM0) and wires between them that can "
        "delay, drop, corrupt and cut (docs/virtual.md). `up` starts it and prints the boards' USB paths in ring "
        "order; every other command then takes them, or virtual:I, as --ports.", [
            "picoring virtual up -n 4 && picoring virtual deploy -p q",
            "picoring run --ports virtual:0,virtual:1,virtual:2,virtual:3 -p q -k 50",
            "picoring virtual down",
        ]),
    ("virtual", "up"): (
        "Starts N virtual boards wired into a ring, under a supervisor process that owns them (it stops them when "
        "`down` is called or when it dies, and never leaves one running), and prints their USB device paths in ring "
        "order. The boards start in their REPL: `picoring virtual deploy` (or `picoring flash`) puts the firmware "
        "on them.", [
            "picoring virtual up -n 4",
            "picoring virtual up -n 6 --baud 1000000 --faults corrupt=0.01,drop=0.005,seed=7",
        ]),
    ("virtual", "status"): (
        "The ring that `up` started: each board's process, whether it is alive, its USB and UART paths, restarts, "
        "whether a host has its USB port open and the bytes each way; and each wire's bytes sent, arrived, "
        "dropped and in flight, with how late its frames were delivered.", [
            "picoring virtual status",
            "picoring virtual status --json",
        ]),
    ("virtual", "reset"): (
        "Restarts board I as its reset button would: the process starts again and runs main.py (--repl: stays in "
        "the REPL), its USB path stays the same. --power is a power cycle instead: the board is killed with no "
        "clean exit and the UART bytes it had not sent yet are lost (docs/faults.md).", [
            "picoring virtual reset 2",
            "picoring virtual reset 2 --power --off 1.5",
        ]),
    ("virtual", "unplug"): (
        "Pulls board I's USB cable: its USB path goes away and comes back at `plug I` (or after --for S), while "
        "the board itself keeps running and the ring keeps its token moving. How a run takes an outage: "
        "docs/faults.md.", [
            "picoring virtual unplug 1",
            "picoring virtual unplug 1 --for 2",
        ]),
    ("virtual", "plug"): (
        "Plugs board I's USB cable back in after `unplug I`: its USB path is there again, and a run that lost it "
        "reads on.", [
            "picoring virtual plug 1",
            "picoring virtual plug 1 --dir /tmp/my-ring",
        ]),
    ("virtual", "deploy"): (
        "Copies the firmware and each board's picoring.json with mpremote, as to a Pico, then resets the boards "
        "to run it. The config gets the protocol from -p unless --config names one, and each board its position, "
        "the ring's size and baud and its virtual UART.", [
            "picoring virtual deploy -p q",
            "picoring virtual deploy -p raymond:tree=path",
            "picoring virtual deploy --config my-config.json",
        ]),
    ("virtual", "down"): (
        "Stops every board of the ring and its supervisor, and removes the ring's state. Safe to call twice, or "
        "when no ring is up.", [
            "picoring virtual down",
            "picoring virtual down --dir /tmp/my-ring",
        ]),
    ("emulated",): (
        "Emulated Raspberry Pi Picos: the Pico's own MicroPython firmware (the rp2 port, a .uf2 you give) on "
        "rp2040js under Node.js, every instruction's cycles counted as chip time, UART0 of board i wired to board "
        "i+1's, each USB serial a pty. `picoring flash --ports` and `run --ports` take their ports as they take "
        "Picos on USB (docs/emulated.md).", [
            "picoring emulated up -n 3 --firmware pico.uf2 --bootrom bootrom.ts",
            "P=$(picoring emulated status --ports) && picoring flash --ports $P -p q",
            "picoring emulated down",
        ]),
    ("emulated", "up"): (
        "Starts N emulated Picos wired into a ring, under a supervisor that owns the node process (it stops it on "
        "`down`, and when the supervisor dies), and prints their USB serial ports in ring order. The firmware .uf2 "
        "and the boot ROM come from --firmware and --bootrom, or PICORING_PICO_UF2 and PICORING_RP2040_BOOTROM, "
        "and are checked before a chip starts.", [
            "picoring emulated up -n 3",
            "picoring emulated up -n 3 --firmware pico.uf2 --bootrom bootrom.ts --dir /tmp/picos",
        ]),
    ("emulated", "status"): (
        "Prints the emulated boards' ports in ring order, each chip's time against wall time (how fast the "
        "emulator runs it on this machine) and the node process's CPU load; --ports prints only the ports, "
        "comma separated, for --ports.", [
            "picoring emulated status",
            "picoring emulated status --ports",
        ]),
    ("emulated", "down"): (
        "Stops every emulated Pico of the ring, its node process and its supervisor, and removes the ring's "
        "ports and state. Safe to call twice, or when no ring is up.", [
            "picoring emulated down",
            "picoring emulated down --dir /tmp/picos",
        ]),
    ("emulated", "cost"): (
        "Measures what busy emulated Picos cost this machine: starts N boards, makes 0, 1, ... N of them busy "
        "(a `while True: pass` loop) and prints chip-seconds per wall-second and the node process's CPU for each "
        "step, then stops them.", [
            "picoring emulated cost",
            "picoring emulated cost -n 3 --seconds 5",
        ]),
    ("run",): (
        "Drives a ring of boards over their USB serial ports: Picos given in ring order (--ports, or the order "
        "`picoring discover` saved), or a fresh ring of N virtual boards (started, deployed with mpremote, torn "
        "down afterwards). It restarts the boards, waits until the ring has formed, injects the workload's "
        "requests (one time unit is --unit-ms), merges the boards' event streams in causal order, writes the "
        "trace and checks it as it goes. Exit status 1 when a check fails.", [
            "picoring run --virtual 4 -p q -k 50",
            "picoring run --virtual 5 -p d --faults corruptframe=0.01,drop=0.005,seed=7 --trace d.jsonl",
            "picoring run --ring-file ring.json -p q -w poisson -k 200",
        ]),
    ("demo",): (None, [
        "picoring demo",
        "picoring demo -n 8 -k 500 -w burst",
    ]),
    ("boards",): (
        "Lists the MicroPython boards attached over USB (by their VID:PID: port, serial number, description) and "
        "the boards of a virtual ring that is up. --all-ports lists every USB serial port instead.", [
            "picoring boards",
            "picoring boards --all-ports --json",
        ]),
    ("flash",): (
        "Copies the firmware with mpremote (only the files that changed; compiled to .mpy for the board's "
        "MicroPython where it can load them), writes each board's picoring.json (position, ring size, protocol, "
        "baud, pins from boards/), restarts the boards and confirms their hello, then checks that each board's TX "
        "reaches the next position's RX.", [
            "picoring flash --ring-file ring.json -p q",
            "picoring flash --ports /dev/ttyACM0,/dev/ttyACM1,/dev/ttyACM2 -p d --baud 1000000",
            "picoring flash --all -p sk --no-ring-check",
        ]),
    ("discover",): (
        "Finds which board sits at which ring position: each board in turn sends a probe frame on its TX and the "
        "board that hears it is the next one. Saves the order by USB serial number (ring.json), which run, flash "
        "and compare then read. Boards without picoring's firmware get a provisional config first.", [
            "picoring discover",
            "picoring discover --ports /dev/ttyACM0,/dev/ttyACM1,/dev/ttyACM2 --first /dev/ttyACM1",
        ]),
    ("wiring",): (
        "How to wire N boards into a ring: each board's UART TX to the next board's RX, and the grounds together, "
        "as a pin table and a drawing (--svg); --fram adds the shared I2C bus of --resource fram. "
        "wiring/README.md has the pictures for a ring of 4.", [
            "picoring wiring -n 4",
            "picoring wiring -n 4 --fram --svg ring.svg",
        ]),
    ("dash",): (
        "A live view of the ring: the token and its state, each node's state, per-link counters, messages per "
        "request and service traffic against their bounds, latency and an event log, for a ring it starts "
        "(--virtual N, or boards given by --ports), the simulator (--sim) or a trace (--replay). Keys: "
        "docs/dashboard.md (space pauses the view; a live ring keeps running).", [
            "picoring dash --virtual 5 -p d -k 200",
            "picoring dash --sim -p q -n 12 --speed 20",
            "picoring dash --replay run.jsonl --speed 0",
        ]),
    ("report",): (
        "Prints the checker's table for a trace and writes plots (messages per request over the run with the "
        "checked and the printed bound, service traffic, a latency histogram, the token's position over time, "
        "service per node) for a lab report; --csv the same figures as tables.", [
            "picoring report run.jsonl",
            "picoring report run.jsonl --csv --no-plots --out run-report",
        ]),
    ("explore",): (
        "Checks every asynchronous schedule of a small ring running the firmware's protocol code: safety, "
        "liveness, quiescence, and the exact worst cases of messages per request and service traffic, each with "
        "a schedule that reaches it. --faults checks the recovery's safety under bounded frame loss, timeouts "
        "and restarts instead.", [
            "picoring explore -p d -n 3 -R 2",
            "picoring explore -p q -n 4 --json",
            "picoring explore -p q -n 3 --faults drop=1,timeout=2",
        ]),
    ("fidelity",): (
        "The paper's claims against the exact worst cases of the explorer on small rings and the simulator on "
        "larger ones, each claim marked as reproduced or not, with the counterexample where it is not "
        "(docs/fidelity.md is its output).", [
            "picoring fidelity --max-n 4 --seconds 60",
            "picoring fidelity --quiet",
        ]),
    ("figures",): (
        "A paper's figures reproduced in the simulator, as plots and a table: ers (Englert, Rudolph and "
        "Shvartsman's BinarySearch against the ring's protocols) or wt (the wandering token's Figures 2 to 4).", [
            "picoring figures ers --out figs",
            "picoring figures wt --figure 4 --no-plots",
        ]),
    ("protocols",): (
        "Every registered protocol, by the name -p takes, with its title, and every option a protocol declares "
        "(--opt KEY=VALUE, or -p NAME:KEY=VALUE,...). Also printed by -p help on any command. Adding a protocol: "
        "docs/adding-a-protocol.md.", [
            "picoring protocols",
            "picoring sim -p help",
        ]),
}


def _subparsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


def apply(parser):
    """Put each command's description and examples (HELP) on its parser under `parser`."""
    for path, (description, examples) in HELP.items():
        p = parser
        for name in path:
            p = _subparsers(p)[name]
        if p.formatter_class is argparse.HelpFormatter:  # (bench lays out its own description)
            text = description if description is not None else p.description
            p.description = "\n".join(textwrap.wrap(" ".join(text.split()), 78))
            p.formatter_class = argparse.RawDescriptionHelpFormatter  # the examples one per line
        p.epilog = "examples:\n" + "\n".join("  " + e for e in examples)
