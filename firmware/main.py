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
    import json

    try:
        with open(path) as f:
            text = f.read()
    except OSError as e:
        raise ConfigError("%s: cannot read (%s)" % (path, e))
    try:
        cfg = json.loads(text)
    except ValueError as e:
        raise ConfigError("%s: not JSON (%s)" % (path, e))
    return check_config(cfg, path)


def check_config(cfg, path=CONFIG):
    if not isinstance(cfg, dict):
        raise ConfigError("%s: must be a JSON object" % path)
    for key in ("position", "size", "protocol"):
        if key not in cfg:
            raise ConfigError("%s: missing %r" % (path, key))
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
    if "virtual" in cfg:
        v = cfg["virtual"]
        u = v.get("uart") if isinstance(v, dict) else None
        fds = isinstance(u, list) and len(u) == 2 and all(isinstance(fd, int) and fd >= 0 for fd in u)
        if not (fds or isinstance(u, str)):
            raise ConfigError('%s: "virtual" must be {"uart": [rx_fd, tx_fd]} (a virtual ring\'s pipes) or '
                              '{"uart": "/dev/ttyX"} (a serial device), not %r' % (path, v))
    elif "uart" in cfg and not isinstance(cfg["uart"], dict):
        raise ConfigError('%s: "uart" must be an object like {"id": 0, "tx": 0, "rx": 1}' % path)
    return cfg


def build(cfg, board):
    """The node loop for a config and a hal.Board (or stand-ins with the same shape)."""
    import protocol
    import node

    pnode = protocol.make_node(cfg["protocol"], cfg["position"], cfg["size"])
    return node.NodeLoop(
        pnode,
        board.uart,
        board.host,
        board.ticks_us,
        board.ticks_diff,
        cs_us=cfg.get("cs_us", 0),
        led=board.led,
        info={"board": cfg.get("board", board.name), "baud": cfg.get("baud", 115200)},
        log_capacity=cfg.get("log_capacity", 64),
        regen_us=cfg.get("regen_ms", 500) * 1000,
        audit=shared_counter(cfg["audit_file"]) if cfg.get("audit_file") else None,
        nonce=boot_nonce(),
    )


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


def shared_counter(path):
    """The safety audit of virtual boards (docs/recovery.md): every board of the
    ring shares one counter file and increments it across its critical
    section, read at entry and written at exit. Two critical sections that
    overlap lose an increment, whatever the protocol claims."""
    box = [0]

    def enter():
        try:
            with open(path) as f:
                box[0] = int(f.read() or 0)
        except OSError:
            box[0] = 0

    def leave():
        # Written whole or not at all: a board killed between truncating the file
        # and writing it (a power cycle of the fault injector) must not leave an
        # empty counter for the next board to read as 0. rename() is atomic.
        import os

        with open(path + ".new", "w") as f:
            f.write(str(box[0] + 1))
        os.rename(path + ".new", path)

    return enter, leave


def main():
    path = config_path()
    try:
        cfg = load_config(path)
    except ConfigError as e:
        _say("err config: %s" % e)
        return 1
    try:
        import hal

        board = hal.open_board(cfg)
    except Exception as e:  # a wrong pin or a missing pty must reach the host as text
        _say("err hal: %s: %s" % (type(e).__name__, e))
        return 1
    loop = build(cfg, board)
    try:
        loop.run(boot=True, idle=getattr(board, "idle", None))
    except KeyboardInterrupt:
        _say("stopped ctrl-c")
        raise
    return 0


main()
