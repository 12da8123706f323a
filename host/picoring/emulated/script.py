"""One script on one emulated Pico, for micro-benchmarks in chip time (`bench chip --emulated`):
a fresh board, the .py files of a folder copied to its filesystem, the script run in its raw
REPL through mpremote; what it printed, and the chip time it took."""

import tempfile
from pathlib import Path

from .supervisor import EmulatedRing, clock_over


def run_script(script_text, upload_dir=None, firmware=None, bootrom=None, timeout_s=600.0, say=None):
    """(exit status, stdout, stderr, chip seconds): status 0, or 1 if the script raised or did not
    finish (its traceback or the reason on stderr). timeout_s: wall seconds without output."""
    from ..ring import deploy

    ring = EmulatedRing(1, firmware, bootrom, say=say)
    try:
        port = ring.ports[0]
        if upload_dir is not None:
            files = sorted(Path(upload_dir).glob("*.py"))
            deploy.copy_files(port, files, timeout=timeout_s)
        with tempfile.TemporaryDirectory(prefix="picoring-chip-") as tmp:
            script = Path(tmp) / "chip_script.py"
            script.write_text(script_text)
            before = ring.clock()
            try:
                out = deploy.mpremote(port, ["run", str(script)], timeout_s, what="the script")
                status, err = 0, ""
            except deploy.DeployError as e:
                out, status, err = e.stdout or b"", 1, str(e)
            chip = clock_over(before, ring.clock())["chip_s"]
        stopped = ring.stopped_boards()
        if stopped:
            status, err = 1, "; ".join(stopped + [err])
        return status, out.decode(errors="replace"), err, chip
    finally:
        ring.stop()
