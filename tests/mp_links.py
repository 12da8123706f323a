# In-memory wires and a silent host for rings of node loops in one process (the drivers
# tests/mp_layer_driver.py, mp_trickle_driver.py and mp_wt_driver.py; test_node_loop.py).
# MicroPython (unix port) and CPython.


class Wire:
    """Board i's TX into board i+1's RX, whole frames (no any(): read by readinto alone);
    counts the frames written on it (frames: a frame may take more than one write, and every
    frame has two delimiters, its first byte and its last) and the bytes read from it."""

    def __init__(self):
        self.pending = bytearray()
        self.peer = None
        self.delimiters = 0
        self.received = 0

    def write(self, data):
        self.peer.pending.extend(data)
        for b in data:
            if not b:
                self.delimiters += 1
        return len(data)

    @property
    def frames(self):
        return self.delimiters // 2

    def readinto(self, buf):
        n = min(len(buf), len(self.pending))
        for i in range(n):
            buf[i] = self.pending[i]
        self.pending = self.pending[n:]
        self.received += n
        return n


class Host:
    def __init__(self):
        self.out = bytearray()

    def read_byte(self):
        return -1

    def write(self, data):
        self.out.extend(data)


class TrickleWire(Wire):
    """A Wire with any(), as a Pico's UART at 1 Mbaud: one more byte has landed at each
    any() call, so the node loop sees every frame half read."""

    def __init__(self):
        super().__init__()
        self.landed = 0

    def any(self):
        if self.landed < len(self.pending):
            self.landed += 1
        return self.landed

    def readinto(self, buf, n=None):
        n = min(len(buf), self.landed if n is None else n, self.landed)
        for i in range(n):
            buf[i] = self.pending[i]
        self.pending = self.pending[n:]
        self.landed -= n
        self.received += n
        return n


def ring(proto, n, wire=Wire):
    """n started node loops of protocol proto on wires of class wire, node 0 with the
    token; a tick of the clock per call. Returns (loops, wires, hosts)."""
    import node
    import protocol

    wires = [wire() for _ in range(n)]
    for i in range(n):
        wires[i].peer = wires[(i + 1) % n]
    clock = [0]

    def ticks():
        clock[0] += 1
        return clock[0]

    hosts = [Host() for _ in range(n)]
    loops = [node.NodeLoop(protocol.make_node(proto, i, n), wires[i], hosts[i], ticks, lambda a, b: a - b)
             for i in range(n)]
    for i, lp in enumerate(loops):
        lp.start(give_token=i == 0)
    return loops, wires, hosts
