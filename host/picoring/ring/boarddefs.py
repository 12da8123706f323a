"""Supported boards: the data files in boards/ (one TOML file per board).

Each names the UART and its pins for the ring, the LED pin, MicroPython's USB
VID:PID and the default baud; `picoring flash` turns one into the hardware part
of every board's picoring.json (config_for).
"""

import tomllib
from pathlib import Path


def _boards_dir():
    try:
        from .. import boards  # installed as picoring.boards (pyproject's package-dir)
        return Path(boards.__file__).resolve().parent
    except ImportError:
        return Path(__file__).resolve().parents[3] / "boards"  # beside host/


BOARDS_DIR = _boards_dir()
DEFAULT_BOARD = "pico"


class BoardDefError(ValueError):
    """An unknown board name or a broken board file."""


def names(folder=None):
    folder = Path(folder) if folder is not None else BOARDS_DIR
    return sorted(p.stem for p in folder.glob("*.toml"))


def load(name, folder=None):
    """The board definition `name` (e.g. "pico") as a dict, checked."""
    folder = Path(folder) if folder is not None else BOARDS_DIR
    path = folder / ("%s.toml" % name)
    if not path.is_file():
        raise BoardDefError("unknown board %r (known: %s)" % (name, ", ".join(names(folder)) or "none"))
    try:
        d = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise BoardDefError("%s: %s" % (path, e)) from None
    for key in ("name", "led", "baud", "usb_vid_pid", "uart"):
        if key not in d:
            raise BoardDefError("%s: missing %r" % (path, key))
    for key in ("id", "tx", "rx", "rxbuf", "txbuf"):
        if not isinstance(d["uart"].get(key), int):
            raise BoardDefError("%s: uart.%s must be an integer" % (path, key))
    for key in ("id", "sda", "scl", "freq"):
        if "i2c" in d and not isinstance(d["i2c"].get(key), int):
            raise BoardDefError("%s: i2c.%s must be an integer" % (path, key))
    d.setdefault("id", name)
    return d


def vid_pid(board):
    vid, pid = board["usb_vid_pid"].split(":")
    return int(vid, 16), int(pid, 16)


def micropython_ids(folder=None):
    """The USB (vid, pid) pairs of every supported board's MicroPython."""
    return {vid_pid(load(n, folder)) for n in names(folder)}


def config_for(board):
    """The hardware keys of picoring.json (firmware/main.py, firmware/hal_rp2.py) for a board."""
    u = board["uart"]
    return {"board": board["id"], "led": board["led"],
            "uart": {"id": u["id"], "tx": u["tx"], "rx": u["rx"], "rxbuf": u["rxbuf"], "txbuf": u["txbuf"]}}


def i2c_config(board):
    """The "i2c" key of picoring.json for a board with --resource fram (firmware/hal_rp2.py open_i2c)."""
    if "i2c" not in board:
        raise BoardDefError("board %r has no [i2c] in its file: it cannot reach a shared FRAM" % board.get("id"))
    i = board["i2c"]
    return {"id": i["id"], "sda": i["sda"], "scl": i["scl"], "freq": i["freq"]}
