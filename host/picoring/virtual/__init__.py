"""Virtual boards without hardware: boards (MicroPython unix-port processes on ptys), wire
(the UART wires and their faults), supervisor (the detached process of `picoring virtual up`)."""
