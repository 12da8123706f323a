"""mpremote, with a file copy's progress printed on a pipe too: `python -m picoring.ring.mpremote_run ARGS`.

picoring runs mpremote with its stdout on a pipe and takes what it prints as the board's sign of
life (deploy._run_watched: a board that prints nothing for the timeout is a board that does not
answer). mpremote prints one line per file, and redraws a progress bar after every 256-byte chunk
it writes, but the bar only when its stdout is a terminal (mpremote.commands.show_progress_bar
asks sys.stdout.isatty()). Without the bar, one large file was one long silence: on a loaded
machine node.py (54 KB, 213 chunks, each a raw-paste round trip) once took 14 s to copy to a
virtual board that answered every chunk, and the copy was given up as a board that does not
answer (tests/test_realboards.py, beside three busy loops); an emulated Pico took over 60 s for
node.mpy. With the bar, the silence that counts is one chunk's.

The bar's bytes are taken out of the output again by the caller (deploy.strip_progress), so
what is parsed is what mpremote prints on a pipe."""

import sys


class _ProgressOnPipe:
    """sys.stdout as it is, except that it says it is a terminal (mpremote's test for the bar)."""

    def __init__(self, stream):
        self._stream = stream

    def isatty(self):
        return True

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main():
    from mpremote import main as mpremote_main

    sys.stdout = _ProgressOnPipe(sys.stdout)
    return mpremote_main.main()


if __name__ == "__main__":
    sys.exit(main())
