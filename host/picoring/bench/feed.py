"""Keep a flashed ring busy with requests while ../shared/rp2040/bench measures it.

Protocols whose token rests (Q, D, sk, ra, ...) send nothing without requests, and the bench
measures the ring alone after its deploy command has exited. So the deploy command flashes the
boards and leaves this running in the background: every PERIOD seconds of wall time it sends
the request command (`!r`, docs/hostlink.md) to the next board in turn (a board whose request
is still outstanding rejects it), and reads and drops what the boards write to USB. It stops
after LIFE seconds, or when the ports go away. docs/performance.md has the command:

    ../shared/rp2040/bench --deploy "picoring flash --ports {ports} --protocol sk --baud {baud} \\
        --regen-ms 0 && (setsid python3 -m picoring.bench.feed {ports} --life 60 </dev/null >/dev/null 2>&1 &)"
"""

import argparse
import os
import time

from .. import fdwait
from ..ring.hostlink import REQUEST


def feed(ports, period=0.01, life=60.0, clock=time.monotonic):
    """Send REQUEST to each port in turn every `period` s for `life` s; returns the requests sent.
    (`picoring bench ring --emulated` has the emulator send them, in chip time.)"""
    fds = []
    try:
        for p in ports:
            fd = os.open(p, os.O_RDWR | os.O_NOCTTY | os.O_NONBLOCK)
            fds.append(fd)
            try:
                import tty

                tty.setraw(fd)
            except Exception:  # not a terminal (a test's pipe): nothing to set
                pass
        end = clock() + life
        due = clock()
        sent = 0
        while clock() < end and fds:
            ready, _ = fdwait.wait(fds, (), 0.002)
            for fd in ready:
                try:
                    if not os.read(fd, 4096):
                        return sent  # the port went away
                except BlockingIOError:
                    pass
                except OSError:
                    return sent
            if clock() >= due:
                try:
                    os.write(fds[sent % len(fds)], REQUEST)
                except BlockingIOError:
                    pass
                except OSError:
                    return sent
                sent += 1
                due += period
        return sent
    finally:
        for fd in fds:
            os.close(fd)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m picoring.bench.feed", description=__doc__.split("\n\n")[0])
    ap.add_argument("ports", help="comma-separated serial ports of the ring's boards")
    ap.add_argument("--period", type=float, default=0.01, help="seconds between two requests (default 0.01)")
    ap.add_argument("--life", type=float, default=60.0, help="stop after this many seconds (default 60)")
    args = ap.parse_args(argv)
    feed([p for p in args.ports.split(",") if p], args.period, args.life)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
