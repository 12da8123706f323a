# Board entry point: read picoring.json, open the hardware, run the node loop.
# A Pico runs this at boot; a virtual board runs `micropython main.py` in its
# board directory (or `import main` through mpremote). The config path can be
# overridden with the environment variable PICORING_CONFIG where the port has
# os.getenv (the unix port).

import sys

CONFIG = "picoring.json"


class ConfigError(ValueError):
    pass


def _say(text):
    # Text-safe line on the host link, before the node loop owns it.
    out = getattr(sys.stdout, "buffer", sys.stdout)
    out.write(("!" + text + "\n").encode())


def config_path():
    try:
        import os

        return os.getenv("PICORING_CONFIG") or CONFIG
    except (ImportError, AttributeError):
        return CONFIG


def load_config(path):
    return check_config(read_config(path), path)


def read_config(path):
    """The config file's JSON, not yet checked (check_config)."""
    import json

    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ConfigError("%s: cannot read (%s)" % (path, e))
    try:
        return json.loads(text)
    except ValueError as e:
        raise ConfigError("%s: not JSON (%s)" % (path, e))


def place_hot_names(cfg):
    """The names the protocol's hop looks up, interned before any other firmware module is
    loaded, each in a map lookup cache slot of its own (qstrs.py: the hop's time otherwise
    depends on which names share a slot, up to 9% on a Pico). The module's table is freed
    after. Returns qstrs.place's figures, or None."""
    spec = cfg.get("protocol") if isinstance(cfg, dict) else None
    if not isinstance(spec, str):
        return None  # check_config says what is wrong
    try:
        import qstrs

        return qstrs.place_protocol(spec)
    except Exception:  # a board without the module, or a port whose strings differ: a slower hop, no failure
        return None
    finally:
        sys.modules.pop("qstrs", None)


def check_config(cfg, path=CONFIG):
    if not isinstance(cfg, dict):
        raise ConfigError("%s: must be a JSON object" % path)
    for key in ("position", "size", "protocol"):
        if key not in cfg:  # what writes them: flash (a Pico), virtual deploy (a virtual ring)
            raise ConfigError("%s: missing %r: picoring flash -p P (or picoring virtual deploy -p P) writes it"
                              % (path, key))
    size = cfg["size"]
    pos = cfg["position"]
    if not isinstance(size, int) or size < 2:
        raise ConfigError("%s: size must be an integer >= 2, not %r" % (path, size))
    if not isinstance(pos, int) or not 0 <= pos < size:
        raise ConfigError("%s: position must be an integer in 0..%d, not %r" % (path, size - 1, pos))
    import protocol

    if not isinstance(cfg["protocol"], str) or protocol.parse_spec(cfg["protocol"])[0] not in protocol.REGISTRY:
        raise ConfigError("%s: protocol must be one of %s (or one with options, NAME:KEY=VALUE,...), not %r"
                          % (path, ", ".join(protocol.REGISTRY), cfg["protocol"]))
    cs_us = cfg.get("cs_us", 0)
    if not isinstance(cs_us, int) or cs_us < 0:
        raise ConfigError("%s: cs_us must be an integer >= 0, not %r" % (path, cs_us))
    baud = cfg.get("baud", 115200)
    if not isinstance(baud, int) or baud <= 0:
        raise ConfigError("%s: baud must be a positive integer, not %r" % (path, baud))
    regen_ms = cfg.get("regen_ms", 500)
    if not isinstance(regen_ms, int) or regen_ms < 0:
        raise ConfigError("%s: regen_ms must be an integer >= 0 (0: no recovery timeouts), not %r" % (path, regen_ms))
    audit = cfg.get("audit_file")
    if audit is not None and not isinstance(audit, str):
        raise ConfigError("%s: audit_file must be a path, not %r" % (path, audit))
    resource = cfg.get("resource")
    if resource not in (None, "fram"):
        raise ConfigError('%s: resource must be "fram" (an I2C FRAM, docs/fram.md) or absent, not %r' % (path, resource))
    hold = cfg.get("cs_hold_us", 0)
    if not isinstance(hold, int) or hold < 0:
        raise ConfigError("%s: cs_hold_us must be an integer >= 0, not %r" % (path, hold))
    fcfg = cfg.get("fram", {})
    if not isinstance(fcfg, dict) or not all(isinstance(fcfg.get(k, 0), int) for k in ("address", "cell")):
        raise ConfigError('%s: "fram" must be like {"address": 80, "cell": 0}, not %r' % (path, fcfg))
    if not isinstance(cfg.get("rogue", False), bool):
        raise ConfigError("%s: rogue must be true or false, not %r" % (path, cfg["rogue"]))
    drop = cfg.get("drop_rx")
    if drop is not None and not (isinstance(drop, list) and len(drop) == 2 and all(isinstance(x, int) for x in drop)
                                 and 0 <= drop[0] <= 1000000 and drop[1] >= 0):
        raise ConfigError("%s: drop_rx must be [frames lost per million, seed >= 0] (docs/faults.md), not %r"
                          % (path, drop))
    if "virtual" in cfg:
        v = cfg["virtual"]
        u = v.get("uart") if isinstance(v, dict) else None
        fds = isinstance(u, list) and len(u) == 2 and all(isinstance(fd, int) and fd >= 0 for fd in u)
        if not (fds or isinstance(u, str)):
            raise ConfigError('%s: "virtual" must be {"uart": [rx_fd, tx_fd]} (a virtual ring\'s pipes) or '
                              '{"uart": "/dev/ttyX"} (a serial device), not %r' % (path, v))
        if resource and not isinstance(v.get("i2c"), str):
            raise ConfigError('%s: a virtual board with a resource needs "virtual": {"i2c": PATH}, the ring\'s '
                              'FRAM image' % path)
    elif "uart" in cfg and not isinstance(cfg["uart"], dict):
        raise ConfigError('%s: "uart" must be an object like {"id": 0, "tx": 0, "rx": 1}' % path)
    elif "i2c" in cfg and not isinstance(cfg["i2c"], dict):
        raise ConfigError('%s: "i2c" must be an object like {"id": 0, "sda": 4, "scl": 5, "freq": 100000}' % path)
    return cfg


def build(cfg, board, hot=None):
    """The node loop for a config and a hal.Board (or stand-ins with the same shape); hot:
    place_hot_names' figures, said in the board's !ver reply."""
    import protocol
    import node

    pnode = protocol.make_node(cfg["protocol"], cfg["position"], cfg["size"])
    uart = board.uart
    drop = cfg.get("drop_rx")
    if drop and drop[0]:  # the fault drop_rx: received frames lost at random (hal.LossyUart)
        import hal

        uart = hal.LossyUart(uart, drop[0], protocol.rand_mix(drop[1], cfg["position"]))
    return node.NodeLoop(
        pnode,
        uart,
        board.host,
        board.ticks_us,
        board.ticks_diff,
        cs_us=cfg.get("cs_us", 0),
        led=board.led,
        info={"board": cfg.get("board", board.name), "baud": cfg.get("baud", 115200),
              "hot": "%d/%d/%d" % hot if hot else "-"},
        log_capacity=cfg.get("log_capacity", 64),
        regen_us=cfg.get("regen_ms", 500) * 1000,
        audit=make_audit(cfg, board),
        nonce=boot_nonce(),
        rogue=cfg.get("rogue", False),
        ring_stood_still=getattr(board, "ring_stood_still", None),
    )


def make_audit(cfg, board):
    """The shared counter the critical sections increment, or None: the I2C FRAM of
    --resource fram (docs/fram.md), else a virtual ring's counter file (docs/recovery.md)."""
    if cfg.get("resource") == "fram":
        import fram

        f = cfg.get("fram", {})
        counter = fram.FramCounter(board.i2c, f.get("address", fram.ADDRESS), f.get("cell", 0),
                                   cfg.get("cs_hold_us", 0))
        counter.bus_clocks = board.i2c_clocks
        return counter
    if cfg.get("audit_file"):
        return SharedCounterFile(cfg["audit_file"])
    return None


def boot_nonce():
    """A random 16-bit number for this boot (protocol.Node.boot): the rp2 and unix
    ports have os.urandom (on rp2 from the ring oscillator); a port without it falls
    back to the clock, which differs between boots less reliably."""
    try:
        import os

        b = os.urandom(2)
        return b[0] | (b[1] << 8)
    except (ImportError, AttributeError, OSError):
        import time

        return time.ticks_us() & 0xFFFF


class SharedCounterFile:
    """The safety audit of virtual boards (docs/recovery.md): every board of the
    ring shares one counter file and increments it across its critical
    section, read at entry and written at exit. Two critical sections that
    overlap lose an increment, whatever the protocol claims. Nothing is logged
    (enter and leave return None): the host reads the file itself."""

    def __init__(self, path):
        self.path = path
        self.value = 0

    def enter(self):
        try:
            with open(self.path) as f:
                self.value = int(f.read() or 0)
        except OSError:
            self.value = 0

    def leave(self):
        # Written whole or not at all: a board killed between truncating the file
        # and writing it (a power cycle of the fault injector) must not leave an
        # empty counter for the next board to read as 0. rename() is atomic.
        import os

        with open(self.path + ".new", "w") as f:
            f.write(str(self.value + 1))
        os.rename(self.path + ".new", self.path)


def main():
    path = config_path()
    try:
        raw = read_config(path)
        placed = place_hot_names(raw)
        cfg = check_config(raw, path)
    except ConfigError as e:
        _say("err config: %s" % e)
        return 1
    try:
        import hal

        board = hal.open_board(cfg)
    except Exception as e:  # a wrong pin or a missing pty must reach the host as text
        _say("err hal: %s: %s" % (type(e).__name__, e))
        return 1
    try:
        loop = build(cfg, board, hot=placed)
    except Exception as e:  # e.g. a resource whose package is not in lib/: said as text, not a traceback
        _say("err build: %s: %s" % (type(e).__name__, e))
        return 1
    try:
        loop.run(boot=True, idle=getattr(board, "idle", None))
    except KeyboardInterrupt:
        _say("stopped ctrl-c")
        raise
    return 0


main()
