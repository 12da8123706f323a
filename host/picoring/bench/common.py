"""What every `picoring bench X` shares: run with a status line, print JSON or a table."""

import json
import sys


def _status_line(msg):
    sys.stderr.write("\r\x1b[K" + msg)
    sys.stderr.flush()


def run_command(args, run, print_table):
    """What every `picoring bench X` does: run (a status line on a terminal), then
    print one JSON object or the table. Exit status 1 when the result says
    "ok": false (a bench that also checks something: the soak, or sim's target)."""
    log = _status_line if not args.json and sys.stderr.isatty() else None
    result = run(quick=args.quick, log=log)
    if log:
        sys.stderr.write("\r\x1b[K")
    if args.json:
        print(json.dumps(result, sort_keys=True))
    else:
        print_table(result)
    return 0 if result.get("ok", True) else 1
