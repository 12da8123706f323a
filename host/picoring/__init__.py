"""picoring: token protocols on a ring of MicroPython boards."""

__version__ = "0.1.0"
