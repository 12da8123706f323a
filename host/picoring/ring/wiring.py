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

With fram (--resource fram, docs/fram.md) every board's I2C SDA and SCL join two bus
wires that end at a FRAM breakout below the last board; the last board's 3V3(OUT)
powers the FRAM and the bus's one pair of pull-up resistors (drawn `[4k7]`: a
resistor, not a wire), and the FRAM's GND is on the common ground.
"""

from xml.sax.saxutils import escape

from . import boarddefs

_HUB_X, _BOX_X0, _BOX_X1, _GND_X, _WRAP_X = 2, 6, 34, 46, 50
_CHAIN_X = (38, 42)  # board i's TX goes down to board i+1's RX in column _CHAIN_X[i % 2]
_ROWS = 7  # per board: top, USB, RX, TX, GND, bottom, gap
_SDA_X, _SCL_X, _V3_X = 54, 58, 66  # the I2C bus's two wires and the 3V3 rail (fram)
_PULLUP = (59, 65)  # a pull-up resistor between these columns, from a bus wire to the rail
PULLUP_TEXT = "[4k7]"
FRAM_PINS = ("VCC", "GND", "SDA", "SCL", "WP", "A0", "A1", "A2")  # the breakout's pins, as drawn


class Drawing:
    def __init__(self, n, board, fram=False):
        if n < 2:
            raise ValueError("a ring needs at least 2 boards, got %d" % n)
        if fram and "i2c" not in board:
            raise ValueError("board %r has no [i2c] in its file: it cannot reach a shared FRAM" % board.get("id"))
        self.n = n
        self.board = board
        self.fram = fram
        self.segments = []  # (x1, y1, x2, y2, kind) with kind usb | signal | gnd | sda | scl | power
        self.junctions = []  # (x, y, kind)
        self.arrows = []  # (x, y): arrow into a board's RX, pointing left
        self.boxes = []  # (x0, y0, x1, y1, title)
        self.labels = []  # (x, y, text)
        self.resistors = []  # (x0, x1, y): a pull-up between columns x0 and x1 on row y
        self._build()

    def rows(self, i):
        """Board i's rows (the last board's also has "v3" with fram)."""
        per = _ROWS + 2 if self.fram else _ROWS
        top = 2 + per * i
        r = {"top": top, "usb": top + 1, "rx": top + 2, "tx": top + 3, "gnd": top + 4, "bottom": top + 5}
        if self.fram:
            r.update(sda=top + 5, scl=top + 6, bottom=top + 7)
            if i == self.n - 1:
                r.update(v3=top + 7, bottom=top + 8)
        return r

    def fram_rows(self):
        """The FRAM breakout's rows, below the last board."""
        top = self.rows(self.n - 1)["bottom"] + 2
        r = {"top": top, "title": top + 1}
        for k, pin in enumerate(FRAM_PINS):
            r[pin] = top + 2 + k
        r["bottom"] = top + 2 + len(FRAM_PINS)
        return r

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
        gnd_end = last["gnd"]
        if self.fram:
            gnd_end = self._build_fram()
        self.segments.append((_GND_X, self.rows(0)["gnd"], _GND_X, gnd_end, "gnd"))
        self.segments.append((_WRAP_X, self.rows(0)["rx"], _WRAP_X, last["tx"], "signal"))
        self.labels.append((_WRAP_X + 2, self.rows(0)["rx"], "<- from board %d TX" % (n - 1)))
        self.height = (self.fram_rows()["bottom"] if self.fram else last["bottom"]) + 1
        self.width = _WRAP_X + 28

    def _build_fram(self):
        """Every board's SDA and SCL onto the bus wires, down to the FRAM; the last board's
        3V3 to the FRAM's VCC and to the pull-ups; the FRAM's WP and A0-A2 to GND. Returns
        the row where the ground wire ends (the FRAM's GND)."""
        n, i2c, p = self.n, self.board["i2c"], self.board.get("pins", {})
        for i in range(n):
            r = self.rows(i)
            self.labels.append((_BOX_X0 + 2, r["sda"], "GP%d SDA (pin %s)" % (i2c["sda"], p.get("sda", "?"))))
            self.labels.append((_BOX_X0 + 2, r["scl"], "GP%d SCL (pin %s)" % (i2c["scl"], p.get("scl", "?"))))
            for pin, x in (("sda", _SDA_X), ("scl", _SCL_X)):
                self.segments.append((_BOX_X1 + 1, r[pin], x, r[pin], pin))
                self.junctions.append((x, r[pin], pin))
        last = self.rows(n - 1)
        self.labels.append((_BOX_X0 + 2, last["v3"], "3V3 OUT (pin %s)" % p.get("v3", "?")))
        self.segments.append((_BOX_X1 + 1, last["v3"], _V3_X, last["v3"], "power"))
        self.junctions.append((_V3_X, last["v3"], "power"))
        f = self.fram_rows()
        self.boxes.append((_BOX_X0, f["top"], _BOX_X1, f["bottom"], "FRAM"))
        self.labels.append((_BOX_X0 + 2, f["title"], "FRAM breakout MB85RC256V"))
        ties = {"VCC": "", "GND": "", "SDA": "", "SCL": "", "WP": " -> GND", "A0": " -> GND", "A1": " -> GND",
                "A2": " -> GND"}
        for pin in FRAM_PINS:
            self.labels.append((_BOX_X0 + 2, f[pin], "%-3s%s" % (pin, ties[pin])))
        # the bus wires, from board 0 down to the FRAM's pins
        for pin, x in (("SDA", _SDA_X), ("SCL", _SCL_X)):
            self.segments.append((x, self.rows(0)[pin.lower()], x, f[pin], pin.lower()))
            self.segments.append((_BOX_X1 + 1, f[pin], x, f[pin], pin.lower()))
            self.junctions.append((x, f[pin], pin.lower()))
            # its pull-up: from the bus wire, through the resistor, to the 3V3 rail
            self.segments.append((x, f[pin], _PULLUP[0], f[pin], pin.lower()))
            self.resistors.append((_PULLUP[0], _PULLUP[1], f[pin]))
            self.segments.append((_PULLUP[1], f[pin], _V3_X, f[pin], "power"))
            self.junctions.append((_V3_X, f[pin], "power"))
        self.segments.append((_V3_X, last["v3"], _V3_X, f["SCL"], "power"))
        self.segments.append((_BOX_X1 + 1, f["VCC"], _V3_X, f["VCC"], "power"))
        self.junctions.append((_V3_X, f["VCC"], "power"))
        # GND, WP and A0-A2 on the common ground (WP low: writes allowed; A2-A0 low: address 0x50)
        for pin in ("GND", "WP", "A0", "A1", "A2"):
            self.segments.append((_BOX_X1 + 1, f[pin], _GND_X, f[pin], "gnd"))
            self.junctions.append((_GND_X, f[pin], "gnd"))
        return f["A2"]


def text(n, board, fram=False):
    """The ring as a text diagram (a list of lines)."""
    d = Drawing(n, board, fram)
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
    for x0, x1, y in d.resistors:  # not a wire: the reader stops at its brackets
        t = PULLUP_TEXT.center(x1 - x0 + 1, "-")
        for k, ch in enumerate(t):
            put(x0 + k, y, ch)
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


# The SVG's colours, and what its legend says of each kind of wire (in this order).
SVG_KINDS = {
    "usb": ("#1f5fbf", "USB: power and the host link, every board to a powered hub"),
    "signal": ("#1a8f3a", "UART: board i TX to board i+1 RX (the arrow), the last back to board 0"),
    "gnd": ("#222222", "GND: one common ground"),
    "sda": ("#d35400", "I2C SDA: one bus wire, every board to the FRAM"),
    "scl": ("#7d3c98", "I2C SCL: one bus wire, every board to the FRAM"),
    "power": ("#c0392b", "3V3: the last board's 3V3(OUT) to the FRAM and the two pull-ups"),
}


def svg(n, board, cell_w=9, cell_h=16, fram=False):
    """The same drawing as an SVG document (a string): a title above it, a legend of the
    wires' colours below."""
    d = Drawing(n, board, fram)
    title = "picoring wiring: %d x %s in a ring on UART%d at %d baud" % (n, board["name"], board["uart"]["id"],
                                                                        board["baud"])
    heading = [title, "board i TX to board i+1 RX, the last back to board 0"]
    if fram:
        heading.append("every board's SDA and SCL on one I2C FRAM (--resource fram)")
    top = len(heading) + 1  # rows above the drawing: the heading, and a gap (a margin above it, half a row)
    kinds = [k for k in SVG_KINDS if any(seg[4] == k for seg in d.segments)]
    legend = len(kinds) + 1  # and a row on the dots
    W, H = (d.width + 2) * cell_w, (top + d.height + 1 + legend + 1) * cell_h

    def X(x):
        return (x + 0.5) * cell_w

    def Y(y):
        return (y + top + 0.5) * cell_h

    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" '
           'font-family="monospace" font-size="%d">' % (W, H, W, H, cell_h - 4),
           '<title>%s</title>' % escape(title),
           '<rect width="100%" height="100%" fill="white"/>']
    for k, line in enumerate(heading):
        out.append('<text x="%d" y="%d" dominant-baseline="middle"%s>%s</text>'
                   % (cell_w, (k + 1) * cell_h, ' font-weight="bold"' if k == 0 else "", escape(line)))
    for x0, y0, x1, y1, title in d.boxes:
        out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" rx="6" fill="#f4f1e8" stroke="#555"/>'
                   % (X(x0), Y(y0), X(x1) - X(x0), Y(y1) - Y(y0)))
    for x1, y1, x2, y2, kind in d.segments:
        out.append('<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%s"/>'
                   % (X(x1), Y(y1), X(x2), Y(y2), SVG_KINDS[kind][0], "2.5" if kind == "signal" else "2"))
    for x, y, kind in d.junctions:
        out.append('<circle cx="%.1f" cy="%.1f" r="3.5" fill="%s"/>' % (X(x), Y(y), SVG_KINDS[kind][0]))
    for x, y in d.arrows:
        out.append('<path d="M %.1f %.1f l 9 -5 l 0 10 z" fill="%s"/>' % (X(x) - 4, Y(y), SVG_KINDS["signal"][0]))
    for k, (x0, x1, y) in enumerate(d.resistors):  # a resistor symbol between its two wires' ends (no line through it)
        out.append('<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="white" stroke="#555"/>'
                   % (X(x0), Y(y) - 4, X(x1) - X(x0), 8))
        side = -10 if k % 2 == 0 else 11  # the two pull-ups sit on adjacent rows: one label above, one below
        out.append('<text x="%.1f" y="%.1f" font-size="%d" text-anchor="middle" dominant-baseline="middle">4.7k</text>'
                   % ((X(x0) + X(x1)) / 2, Y(y) + side, cell_h - 7))
    for x, y, t in d.labels:
        out.append('<text x="%.1f" y="%.1f" dominant-baseline="middle">%s</text>' % (x * cell_w + 2, Y(y), escape(t)))
    out.append('<g id="legend">')
    for k, kind in enumerate(kinds):  # the legend: a swatch of each kind of wire, and what it is
        y = Y(d.height + 1 + k)
        out.append('<rect x="%d" y="%.1f" width="%d" height="4" fill="%s"/>' % (2 * cell_w, y - 2, 3 * cell_w,
                                                                              SVG_KINDS[kind][0]))
        out.append('<text x="%d" y="%.1f" dominant-baseline="middle">%s</text>' % (6 * cell_w, y, escape(
            SVG_KINDS[kind][1])))
    y = Y(d.height + 1 + len(kinds))
    out.append('<circle cx="%.1f" cy="%.1f" r="3.5" fill="#555"/>' % (3.5 * cell_w, y))
    out.append('<text x="%d" y="%.1f" dominant-baseline="middle">a dot joins wires; wires that cross without one '
               'are not connected</text>' % (6 * cell_w, y))
    out.append("</g>")
    out.append("</svg>")
    return "\n".join(out) + "\n"


def pin_table(n, board, fram=False):
    """One row per wire: from (board, pin) to (board, pin)."""
    u, p = board["uart"], board.get("pins", {})
    rows = [("wire", "from", "to")]
    for i in range(n):
        j = (i + 1) % n
        rows.append(("%d->%d" % (i, j), "board %d GP%d TX (pin %s)" % (i, u["tx"], p.get("tx", "?")),
                     "board %d GP%d RX (pin %s)" % (j, u["rx"], p.get("rx", "?"))))
    rows.append(("ground", "every board's GND (pin %s)" % p.get("gnd", "?"), "one common ground wire"))
    rows.append(("power+host", "every board's micro-USB", "a powered USB hub on the host"))
    if fram:
        i2c = board["i2c"]
        for pin in ("sda", "scl"):
            for i in range(n):
                rows.append(("%s %d" % (pin.upper(), i), "board %d GP%d %s (pin %s)" % (i, i2c[pin], pin.upper(),
                                                                                       p.get(pin, "?")),
                             "the %s bus wire, to the FRAM's %s" % (pin.upper(), pin.upper())))
        rows.append(("3V3", "board %d 3V3(OUT) (pin %s), one board only" % (n - 1, p.get("v3", "?")),
                     "the FRAM's VCC and both pull-ups"))
        for pin in ("SDA", "SCL"):
            rows.append(("pull-up", "the %s bus wire" % pin, "3V3 through 4.7 kOhm (one pair for the whole bus)"))
        rows.append(("FRAM GND", "the FRAM's GND", "the common ground"))
        rows.append(("FRAM WP,A0-A2", "the FRAM's WP, A0, A1, A2", "GND: writes allowed, I2C address 0x50"))
    return rows


def render(n, board_name=boarddefs.DEFAULT_BOARD, fram=False):
    board = boarddefs.load(board_name)
    lines = ["%d x %s in a ring on UART%d at %d baud (board i TX -> board i+1 RX; the last back to board 0)"
             % (n, board["name"], board["uart"]["id"], board["baud"])]
    if fram:
        lines.append("sharing one I2C FRAM on I2C%d at %d kHz (--resource fram: every SDA on one wire, every SCL on "
                     "another)" % (board["i2c"]["id"], board["i2c"]["freq"] // 1000))
    lines.append("")
    lines += text(n, board, fram)
    lines += ["", "+ joins wires; a wire crossing another without + is not connected to it. The wire joining",
              "every GND pin is the common ground; the wire on the far right takes the last board's TX back to",
              "board 0's RX."]
    if fram:
        lines += ["%s is a 4.7 kOhm pull-up resistor from a bus wire to the 3V3 rail: the bus's only pair (a" % PULLUP_TEXT,
                  "breakout with pull-ups of its own already has them: then leave these out)."]
    lines.append("")
    rows = pin_table(n, board, fram)
    w = [max(len(r[k]) for r in rows) for k in range(3)]
    for k, r in enumerate(rows):
        lines.append("  ".join(c.ljust(w[m]) for m, c in enumerate(r)).rstrip())
        if k == 0:
            lines.append("  ".join("-" * w[m] for m in range(3)))
    return "\n".join(lines) + "\n"
