"""A board's raw REPL over its USB serial: start code that runs on (mpremote's `exec` waits for
its end, and `exec --no-follow` cannot wait for what it prints first), and read what it prints.
`picoring bench ring --emulated` starts its minimal relay with it.

The raw REPL: Ctrl-A enters it (the board answers "raw REPL; CTRL-B to exit" and ">"); code
ending in Ctrl-D is run, the board answering "OK", the code's stdout, Ctrl-D, its traceback
(empty if none), Ctrl-D, then ">" for the next."""

import time

RAW_PROMPT = b"raw REPL; CTRL-B to exit\r\n>"


class ReplError(RuntimeError):
    pass


class RawRepl:
    """The raw REPL of the board at port; a context manager that closes the port.
    timeout_s: wall seconds the board may stay silent before a wait gives up."""

    def __init__(self, port, timeout_s=60.0):
        import serial

        self.port = port
        self.timeout_s = timeout_s
        self.ser = serial.Serial(port, 115200, timeout=0.1, exclusive=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.ser.close()

    def read_until(self, marker, what="an answer"):
        """What the board sent up to and including marker (or the first of a tuple of markers to
        come); ReplError after timeout_s of silence. Bytes after the marker are left unread."""
        markers = marker if isinstance(marker, tuple) else (marker,)
        got = b""
        quiet_since = time.monotonic()
        while not any(got.endswith(m) for m in markers):
            chunk = self.ser.read(1)  # (byte by byte: what follows the marker stays for the next read)
            if chunk:
                got += chunk
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > self.timeout_s:
                raise ReplError("%s: %s: nothing for %.0f s (last bytes: %r)" % (self.port, what, self.timeout_s,
                                                                                  got[-200:]))
        return got

    def enter(self):
        """Stop whatever runs (Ctrl-C) and enter the raw REPL."""
        self.ser.write(b"\r\x03\x03")
        time.sleep(0.1)
        self.ser.reset_input_buffer()
        self.ser.write(b"\x01")
        self.read_until(RAW_PROMPT, "entering the raw REPL")
        return self

    def start(self, code):
        """Send code to run, and return once the board has taken it (its "OK"): it runs on."""
        self.ser.write(code.encode() + b"\x04")
        self.read_until(b"OK", "sending code")
