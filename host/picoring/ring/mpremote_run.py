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
what is parsed is what mpremote prints on a pipe.

With PICORING_MPREMOTE_WATCHED=1 in its environment (deploy.mpremote sets it), mpremote's own
waits for a board's bytes have no end: the caller kills it once it has printed nothing for its
quiet timeout, counted on the ring's clock, and says so. mpremote gives up after 10 s of a board's
silence on a port that is not a pty (its SerialTransport.read_until: through RFC 2217, a raw paste's
end waits there for the board's Ctrl-D), measured on the wall clock: a loaded machine's tty worker
stood still longer than that in front of a board that was fine, and the copy failed with "could not
complete raw paste" (tests/test_labgrid.py, beside three busy loops), while picoring's own timeout,
30 s of the ring's clock, would have waited."""

import os
import sys


class _ProgressOnPipe:
    """sys.stdout as it is, except that it says it is a terminal (mpremote's test for the bar)."""

    def __init__(self, stream):
        self._stream = stream

    def isatty(self):
        return True

    def __getattr__(self, name):
        return getattr(self._stream, name)


def leave_waits_to_caller(transport_class):
    """Make transport_class's reads (mpremote's SerialTransport.read_until) wait for the bytes
    they expect without end: every call in mpremote waits for what must come, and a timeout
    there is always a failure."""
    read_until = transport_class.read_until

    def read_until_there(self, min_num_bytes, ending, timeout=None, data_consumer=None, timeout_overall=None):
        return read_until(self, min_num_bytes, ending, timeout=None, data_consumer=data_consumer,
                          timeout_overall=None)

    transport_class.read_until = read_until_there


def main():
    from mpremote import main as mpremote_main
    from mpremote.transport_serial import SerialTransport

    sys.stdout = _ProgressOnPipe(sys.stdout)
    if os.environ.get("PICORING_MPREMOTE_WATCHED") == "1":
        leave_waits_to_caller(SerialTransport)
    return mpremote_main.main()


if __name__ == "__main__":
    sys.exit(main())
