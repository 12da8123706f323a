# In-memory wires and a silent host for rings of node loops in one process (the drivers
# tests/mp_layer_driver.py and tests/mp_wt_driver.py). MicroPython (unix port) and CPython.


class Wire:
    """Board i's TX into board i+1's RX; counts the frames written on it."""

    def __init__(self):
        self.pending = bytearray()
        self.peer = None
        self.writes = 0

    def write(self, data):
        self.peer.pending.extend(data)
        self.writes += 1
        return len(data)

    def readinto(self, buf):
        n = min(len(buf), len(self.pending))
        for i in range(n):
            buf[i] = self.pending[i]
        self.pending = self.pending[n:]
        return n


class Host:
    def __init__(self):
        self.out = bytearray()

    def read_byte(self):
        return -1

    def write(self, data):
        self.out.extend(data)
