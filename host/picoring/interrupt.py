"""Ctrl-C that stays said: a SIGINT is remembered as well as raised.

Python turns SIGINT into KeyboardInterrupt in whatever the main thread runs at that moment,
library code included, and a library's bare `except:` takes it like any error (pyserial's
RFC 2217 close() has one around its socket's shutdown; a C extension's callback prints it
as "Exception ignored" and goes on). A Ctrl-C caught there is lost: the command runs to its
end and exits 0, the place it holds released only then. So the CLI's handler also sets a
flag that stays set: the run loop asks for it (check()), and the command's status is 130
whatever became of the exception.
"""

import signal

_requested = False


def check():
    """Raise KeyboardInterrupt if a Ctrl-C came (also one that some code has swallowed since)."""
    if _requested:
        raise KeyboardInterrupt


def _on_sigint(signum, frame):
    global _requested
    _requested = True
    raise KeyboardInterrupt


def catch():
    """Install the handler (the main thread only); returns the one to put back, or None."""
    global _requested
    _requested = False
    try:
        return signal.signal(signal.SIGINT, _on_sigint)
    except ValueError:  # not the main thread (main() called from a thread)
        return None
