"""`picoring wiring`: how to wire N boards into a ring, as text and as SVG.

One drawing model (boxes, wires as horizontal/vertical segments, labels on a
character grid) rendered twice: as text (a wire crossing another without a `+`
is not connected) and as SVG (the same coordinates, scaled). Board i's TX
(GP0) goes to board i+1's RX (GP1), the last board's TX back to board 0's RX;
every GND joins one ground wire; every board hangs on a USB hub for power and
the host link.

A board's RX and TX pins sit on adjacent rows, so the wire arriving at its RX
and the wire leaving its TX must not turn in the same column: in text their two
corners would be one `+` above another, which reads as one wire joining every TX
and RX. The links down the ring therefore alternate between two columns.
"""

from xml.sax.saxutils import escape

from . import boarddefs

_HUB_X, _BOX_X0, _BOX_X1, _GND_X, _WRAP_X = 2, 6, 34, 46, 50
_CHAIN_X = (38, 42)  # board i's TX goes down to board i+1's RX in column _CHAIN_X[i % 2]
_ROWS = 7  # per board: top, USB, RX, TX, GND, bottom, gap


class Drawing:
    def __init__(self, n, board):
        if n < 2:
            raise ValueError("a ring needs at least 2 boards, got %d" % n)
        self.n = n
        self.board = board
        self.segments = []  # (x1, y1, x2, y2, kind) with kind usb | signal | gnd
        self.junctions = []  # (x, y, kind)
        self.arrows = []  # (x, y): arrow into a board's RX, pointing left
        self.boxes = []  # (x0, y0, x1, y1, title)
        self.labels = []  # (x, y, text)
        self._build()

    def rows(self, i):
        top = 2 + _ROWS * i
        return {"top": top, "usb": top + 1, "rx": top + 2, "tx": top + 3, "gnd": top + 4, "bottom": top + 5}

    def _build(self):
        n, b = self.n, self.board
        u, p = b["uart"], b.get("pins", {})
        self.labels.append((0, 0, "host USB  <==  powered USB hub"))
        last = self.rows(n - 1)
        self.segments.append((_HUB_X, 1, _HUB_X, last["usb"], "usb"))
        for i in range(n):
            r = self.rows(i)
            self.boxes.append((_BOX_X0, r["top"], _BOX_X1, r["bottom"], "board %d" % i))
            self.labels.append((_BOX_X0 + 2, r["usb"], "USB   board %d (%s)" % (i, b["id"])))
            self.labels.append((_BOX_X0 + 2, r["rx"], "GP%d RX  (pin %s)" % (u["rx"], p.get("rx", "?"))))
            self.labels.append((_BOX_X0 + 2, r["tx"], "GP%d TX  (pin %s)" % (u["tx"], p.get("tx", "?"))))
            self.labels.append((_BOX_X0 + 2, r["gnd"], "GND     (pin %s)" % p.get("gnd", "?")))
            self.segments.append((_HUB_X, r["usb"], _BOX_X0 - 1, r["usb"], "usb"))
            self.junctions.append((_HUB_X, r["usb"], "usb"))
            # RX: fed by the previous board's TX (its chain column), board 0 by the last one (wrap column)
            src = _WRAP_X if i == 0 else _CHAIN_X[(i - 1) % 2]
            self.segments.append((_BOX_X1 + 1, r["rx"], src, r["rx"], "signal"))
            self.arrows.append((_BOX_X1 + 1, r["rx"]))
            self.junctions.append((src, r["rx"], "signal"))
            dst = _WRAP_X if i == n - 1 else _CHAIN_X[i % 2]
            self.segments.append((_BOX_X1 + 1, r["tx"], dst, r["tx"], "signal"))
            self.junctions.append((dst, r["tx"], "signal"))
            if i < n - 1:
                self.segments.append((dst, r["tx"], dst, self.rows(i + 1)["rx"], "signal"))
            self.segments.append((_BOX_X1 + 1, r["gnd"], _GND_X, r["gnd"], "gnd"))
            self.junctions.append((_GND_X, r["gnd"], "gnd"))
        self.segments.append((_GND_X, self.rows(0)["gnd"], _GND_X, last["gnd"], "gnd"))
        self.segments.append((_WRAP_X, self.rows(0)["rx"], _WRAP_X, last["tx"], "signal"))
        self.labels.append((_WRAP_X + 2, self.rows(0)["rx"], "<- from board %d TX" % (n - 1)))
        self.height = last["bottom"] + 1
        self.width = _WRAP_X + 28


def text(n, board):
    """The ring as a text diagram (a list of lines)."""
    d = Drawing(n, board)
    grid = [[" "] * d.width for _ in range(d.height)]

    def put(x, y, ch):
        if 0 <= y < d.height and 0 <= x < d.width:
            grid[y][x] = ch

    for x, y, t in d.labels:
        for k, ch in enumerate(t):
            put(x + k, y, ch)
    for x1, y1, x2, y2, _ in d.segments:  # horizontals first: a vertical drawn over one is a crossing
        if y1 == y2:
            for x in range(min(x1, x2), max(x1, x2) + 1):
                put(x, y1, "-")
    for x1, y1, x2, y2, _ in d.segments:
        if x1 == x2:
            for y in range(min(y1, y2), max(y1, y2) + 1):
                put(x1, y, "|")
    for x, y, _ in d.junctions:
        put(x, y, "+")
    for x, y in d.arrows:
        put(x, y, "<")
    for x0, y0, x1, y1, _ in d.boxes:
        for x in range(x0, x1 + 1):
            put(x, y0, "-")
            put(x, y1, "-")
        for y in range(y0, y1 + 1):
            put(x0, y, "|")
            put(x1, y, "|")
        for x, y in ((x0, y0), (x1, y0), (x0, y1), (x1, y1)):
            put(x, y, "+")
    return ["".join(row).rstrip() for row in grid]


def svg(n, board, cell_w=9, cell_h=16):
    """The same drawing as an SVG document (a string)."""
    d = Drawing(n, board)
    colors = {"usb": "#1f5fbf", "signal": "#1a8f3a", "gnd": "#222222"}
    W, H = (d.width + 2) * cell_w, (d.height + 1) * cell_h

    def X(x):
        return (x + 0.5) * cell_w

    def Y(y):
        return (y + 0.5) * cell_h

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="monospace" font-size="%d">' % (W, H, W, H, cell_h - 4),
           '<title>picoring: %d x %s in a UART ring</title>' % (n, escape(board["name"])),
           '<rect width="100%" height="100%" fill="white"/>']
    for x0, y0, x1, y1, title in d.boxes:
        out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="6" fill="#f4f1e8" stroke="#555"/>'
                   % (X(x0), Y(y0), X(x1) - X(x0), Y(y1) - Y(y0)))
    for x1, y1, x2, y2, kind in d.segments:
        out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%s"/>'
                   % (X(x1), Y(y1), X(x2), Y(y2), colors[kind], "2.5" if kind == "signal" else "2"))
    for x, y, kind in d.junctions:
        out.append('<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>' % (X(x), Y(y), colors[kind]))
    for x, y in d.arrows:
        out.append('<path d="M %.1f %.1f l 9 -5 l 0 10 z" fill="%s"/>' % (X(x) - 4, Y(y), colors["signal"]))
    for x, y, t in d.labels:
        out.append('<text x="%.1f" y="%.1f" dominant-baseline="middle">%s</text>' % (x * cell_w + 2, Y(y), escape(t)))
    out.append("</svg>")
    return "\n".join(out) + "\n"


def pin_table(n, board):
    """One row per wire: from (board, pin) to (board, pin)."""
    u, p = board["uart"], board.get("pins", {})
    rows = [("wire", "from", "to")]
    for i in range(n):
        j = (i + 1) % n
        rows.append(("%d->%d" % (i, j), "board %d GP%d TX (pin %s)" % (i, u["tx"], p.get("tx", "?")),
                     "board %d GP%d RX (pin %s)" % (j, u["rx"], p.get("rx", "?"))))
    rows.append(("ground", "every board's GND (pin %s)" % p.get("gnd", "?"), "one common ground wire"))
    rows.append(("power+host", "every board's micro-USB", "a powered USB hub on the host"))
    return rows


def render(n, board_name=boarddefs.DEFAULT_BOARD):
    board = boarddefs.load(board_name)
    lines = ["%d x %s in a ring on UART%d at %d baud (board i TX -> board i+1 RX; the last back to board 0)"
             % (n, board["name"], board["uart"]["id"], board["baud"]), ""]
    lines += text(n, board)
    lines += ["", "+ joins wires; a wire crossing another without + is not connected to it. The wire joining",
              "every GND pin is the common ground; the wire on the far right takes the last board's TX back to",
              "board 0's RX.", ""]
    rows = pin_table(n, board)
    w = [max(len(r[k]) for r in rows) for k in range(3)]
    for k, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w[m]) for m, c in enumerate(r)).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w[m] for m in range(3)))
    return "\n".join(lines) + "\n"
