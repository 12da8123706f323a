"""`picoring wiring`: the text drawing, read as its legend says ("+ joins wires; a wire crossing
another without + is not connected to it"), connects exactly what the pin table and the SVG
connect: board i's TX to board i+1's RX, every GND to every other (issue 18, item 5)."""

import re
import xml.dom.minidom

import pytest

from picoring.cli.main import main
from picoring.ring import boarddefs, wiring

LEFT, RIGHT, UP, DOWN = (-1, 0), (1, 0), (0, -1), (0, 1)


def text_drawing(out):
    """The drawing's lines from `picoring wiring` output: from the hub line to the legend."""
    lines = out.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("host USB"))
    end = next(k for k, line in enumerate(lines) if line.startswith("+ joins wires"))
    return lines[start:end]


def pins_of(lines):
    """{(board, pin): (x, y)}: where each pin's wire leaves its box (the first cell right of
    the box), found from the text alone: the box's corners and the labels inside it."""
    pins = {}
    boxes = []
    for y, line in enumerate(lines):
        m = re.search(r"\| USB   board (\d+) ", line)
        if not m:
            continue
        board = int(m.group(1))
        top = lines[y - 1]
        x0 = top.index("+-")
        x1 = top.index("-+", x0) + 1
        bottom = next(b for b in range(y + 1, len(lines)) if lines[b][x0:x0 + 2] == "+-")
        boxes.append((x0, y - 1, x1, bottom))
        for row in range(y, bottom):
            inside = lines[row][x0 + 1:x1]
            for pin, label in (("TX", " TX "), ("RX", " RX "), ("GND", "GND ")):
                if label in inside:
                    pins[(board, pin)] = (x1 + 1, row)
    return pins, boxes


def connections(lines, start, pins, boxes):
    """The pins that the wire leaving `start` (a pin's first cell, going right) reaches.
    Going along a wire: `-` and `<` carry it sideways, `|` up and down; a `|` met sideways
    or a `-` met going up or down is a crossing (passed, not joined); `+` joins every wire
    that meets it, in any direction, including a `+` right above or below it."""
    at = {xy: pin for pin, xy in pins.items()}

    def char(x, y):
        if not 0 <= y < len(lines) or not 0 <= x < len(lines[y]):
            return " "
        if any(x0 <= x <= x1 and y0 <= y <= y1 for x0, y0, x1, y1 in boxes):
            return " "  # a box's outline is no wire
        return lines[y][x]

    reached = set()
    seen = set()
    todo = [(start, RIGHT)]
    while todo:
        (x, y), d = todo.pop()
        if ((x, y), d) in seen:
            continue
        seen.add(((x, y), d))
        c = char(x, y)
        sideways = d in (LEFT, RIGHT)
        if c == "+":
            ways = (LEFT, RIGHT, UP, DOWN)
        elif c in "-<" and sideways or c == "|":
            ways = (d,)  # along the wire, or across a vertical one
        else:
            continue  # no wire here, or a wire that does not carry this direction
        if (x, y) in at and (x, y) != start and d == LEFT:
            reached.add(at[(x, y)])
            continue
        for w in ways:
            nx, ny = x + w[0], y + w[1]
            n = char(nx, ny)
            if w in (UP, DOWN) and n not in "|+":
                continue  # a vertical step must land on a vertical wire or a joint
            if w in (LEFT, RIGHT) and n not in "-+<|":
                continue
            todo.append(((nx, ny), w))
    return reached


def svg_connections(doc, n, cell_w=9):
    """{start pin: reached pins} of the SVG: lines meeting at an end join, and so do lines
    through a junction dot; a line crossing another in its middle does not. Pins are the
    ends of the stubs at the boxes' right edge, named by the labels on their rows."""
    lines = [tuple(float(el.getAttribute(k)) for k in ("x1", "y1", "x2", "y2"))
             for el in doc.getElementsByTagName("line")]
    dots = [(float(c.getAttribute("cx")), float(c.getAttribute("cy"))) for c in doc.getElementsByTagName("circle")]
    edge = min(min(x1, x2) for x1, y1, x2, y2 in lines if x1 != x2 and min(x1, x2) > 20 * cell_w)

    def through(k, p):
        x1, y1, x2, y2 = lines[k]
        return min(x1, x2) <= p[0] <= max(x1, x2) and min(y1, y2) <= p[1] <= max(y1, y2)

    joints = {}  # point -> the lines joined there
    for k, (x1, y1, x2, y2) in enumerate(lines):
        for p in ((x1, y1), (x2, y2)):
            joints.setdefault(p, set()).add(k)
    for p in dots:
        joints.setdefault(p, set()).update(k for k in range(len(lines)) if through(k, p))
    texts = [(float(t.getAttribute("y")), t.firstChild.data) for t in doc.getElementsByTagName("text")]

    def pin_at(p):
        label = [s for y, s in texts if abs(y - p[1]) < 1 and re.match(r"GP\d+ (RX|TX)|GND", s)]
        if p[0] != edge or not label:
            return None
        board = max((y, s) for y, s in texts if s.startswith("USB   board") and y < p[1])[1]
        return int(board.split()[2]), label[0].split()[1] if label[0].startswith("GP") else "GND"

    pins = {pin_at(p): p for p in joints if pin_at(p)}
    out = {}
    for pin, p in pins.items():
        todo, seen = list(joints[p]), set()
        while todo:
            k = todo.pop()
            if k in seen:
                continue
            seen.add(k)
            todo.extend(j for q, ks in joints.items() if k in ks for j in ks)
        out[pin] = {other for other, q in pins.items() if other != pin and joints[q] & seen}
    return out


@pytest.mark.parametrize("board", ["pico", "pico2"])
@pytest.mark.parametrize("n", [2, 3, 5])
def test_the_text_drawing_connects_each_tx_to_the_next_rx_only(n, board, tmp_path, capsys):
    assert main(["wiring", "-n", str(n), "--board", board, "--svg", str(tmp_path / "ring.svg")]) == 0
    out = capsys.readouterr().out
    lines = text_drawing(out)
    pins, boxes = pins_of(lines)
    assert set(pins) == {(i, p) for i in range(n) for p in ("TX", "RX", "GND")}
    for i in range(n):
        j = (i + 1) % n
        assert connections(lines, pins[(i, "TX")], pins, boxes) == {(j, "RX")}, "board %d's TX" % i
        assert connections(lines, pins[(i, "GND")], pins, boxes) == {(k, "GND") for k in range(n) if k != i}
        # the pin table says the same wire
        assert re.search(r"^%d->%d +board %d GP0 TX \(pin 1\) +board %d GP1 RX \(pin 2\)$" % (i, j, i, j), out, re.M)
    # and so does the SVG, read the same way
    svg = svg_connections(xml.dom.minidom.parse(str(tmp_path / "ring.svg")), n)
    for i in range(n):
        assert svg[(i, "TX")] == {((i + 1) % n, "RX")}
        assert svg[(i, "GND")] == {(k, "GND") for k in range(n) if k != i}


def test_the_reader_sees_joined_wires_where_corners_touch():
    """The reader above is not blind: two `+` one above the other join (as a person reads
    them); the old drawing put every RX corner right above its board's TX corner."""
    lines = ["+-----+",
             "| USB |<-+",
             "|     |--+",
             "+-----+"]
    boxes = [(0, 0, 6, 3)]
    pins = {(0, "RX"): (7, 1), (0, "TX"): (7, 2)}
    assert connections(lines, pins[(0, "TX")], pins, boxes) == {(0, "RX")}


def test_long_rings_keep_links_apart():
    """However long the ring, no two links share a column over a board's RX and TX rows."""
    d = wiring.Drawing(9, boarddefs.load("pico"))
    for i in range(1, 8):
        rows = d.rows(i)
        into_rx = [s for s in d.segments if s[4] == "signal" and s[0] == s[2] and max(s[1], s[3]) == rows["rx"]]
        out_of_tx = [s for s in d.segments if s[4] == "signal" and s[0] == s[2] and min(s[1], s[3]) == rows["tx"]]
        assert len(into_rx) == len(out_of_tx) == 1
        assert into_rx[0][0] != out_of_tx[0][0]


def test_the_wiring_guide_shows_what_the_command_draws(capsys):
    """wiring/README.md's drawing and ring-4.svg are `picoring wiring -n 4`'s, not an older one's."""
    from conftest import ROOT

    assert main(["wiring", "-n", "4"]) == 0
    drawn = capsys.readouterr().out
    guide = (ROOT / "wiring" / "README.md").read_text()
    assert "```\n" + drawn + "```\n" in guide
    assert (ROOT / "wiring" / "ring-4.svg").read_text() == wiring.svg(4, boarddefs.load("pico"))


# -- the I2C bus of --resource fram (issue 17, item 3) -------------------------------------------

_PIN_LABEL = re.compile(r"^(?:GP\d+ (RX|TX|SDA|SCL)|(GND|3V3|VCC|SDA|SCL|WP|A0|A1|A2)\b)")


def pins_of_every_box(lines):
    """pins_of for the boards and the FRAM breakout: {(board or "FRAM", pin): (x, y)}, boxes."""
    pins, boxes = {}, []
    for y, line in enumerate(lines):
        m = re.search(r"\| (?:USB   board (\d+) |(FRAM) breakout)", line)
        if not m:
            continue
        owner = int(m.group(1)) if m.group(1) else "FRAM"
        top = lines[y - 1]
        x0 = top.index("+-")
        x1 = top.index("-+", x0) + 1
        bottom = next(b for b in range(y + 1, len(lines)) if lines[b][x0:x0 + 2] == "+-")
        boxes.append((x0, y - 1, x1, bottom))
        for row in range(y + 1, bottom):
            label = _PIN_LABEL.match(lines[row][x0 + 2:x1].strip())
            if label:
                pins[(owner, label.group(1) or label.group(2))] = (x1 + 1, row)
    return pins, boxes


@pytest.mark.parametrize("board", ["pico", "picow", "pico2"])
@pytest.mark.parametrize("n", [2, 3, 5])
def test_the_fram_drawing_puts_every_sda_and_scl_on_one_bus_with_the_fram(n, board, capsys):
    assert main(["wiring", "-n", str(n), "--board", board, "--fram"]) == 0
    out = capsys.readouterr().out
    lines = text_drawing(out)
    pins, boxes = pins_of_every_box(lines)
    frams = {("FRAM", p) for p in wiring.FRAM_PINS}
    assert set(pins) == {(i, p) for i in range(n) for p in ("TX", "RX", "GND", "SDA", "SCL")} | {(n - 1, "3V3")} | frams
    grounds = {(i, "GND") for i in range(n)} | {("FRAM", p) for p in ("GND", "WP", "A0", "A1", "A2")}
    for i in range(n):
        assert connections(lines, pins[(i, "TX")], pins, boxes) == {((i + 1) % n, "RX")}
        for bus in ("SDA", "SCL"):  # the pull-up is a resistor: the reader stops at it
            want = {(k, bus) for k in range(n) if k != i} | {("FRAM", bus)}
            assert connections(lines, pins[(i, bus)], pins, boxes) == want, (i, bus)
        assert connections(lines, pins[(i, "GND")], pins, boxes) == grounds - {(i, "GND")}
    assert connections(lines, pins[(n - 1, "3V3")], pins, boxes) == {("FRAM", "VCC")}
    assert [line for line in lines if wiring.PULLUP_TEXT in line] == [
        line for line in lines if re.match(r"\s+\| (SDA|SCL) ", line)]  # one pull-up on each bus wire, at the FRAM
    i2c = boarddefs.load(board)["i2c"]
    assert (i2c["sda"], i2c["scl"], i2c["freq"]) == (4, 5, 100000)
    assert "sharing one I2C FRAM on I2C0 at 100 kHz" in out
    for i in range(n):
        assert re.search(r"^SDA %d +board %d GP4 SDA \(pin 6\) +the SDA bus wire, to the FRAM's SDA$" % (i, i), out, re.M)
        assert re.search(r"^SCL %d +board %d GP5 SCL \(pin 7\) +the SCL bus wire, to the FRAM's SCL$" % (i, i), out, re.M)
    assert re.search(r"^3V3 +board %d 3V3\(OUT\) \(pin 36\), one board only +the FRAM's VCC and both pull-ups$" % (n - 1),
                     out, re.M)
    assert re.search(r"^FRAM WP,A0-A2 +the FRAM's WP, A0, A1, A2 +GND: writes allowed, I2C address 0x50$", out, re.M)


def test_the_fram_svg_joins_the_bus_and_keeps_the_pull_ups_apart():
    doc = xml.dom.minidom.parseString(wiring.svg(3, boarddefs.load("pico"), fram=True))
    d = wiring.Drawing(3, boarddefs.load("pico"), fram=True)
    lines = [tuple(float(el.getAttribute(k)) for k in ("x1", "y1", "x2", "y2")) for el in doc.getElementsByTagName("line")]
    assert len(lines) == len(d.segments)
    rects = doc.getElementsByTagName("rect")
    resistors = [r for r in rects if r.getAttribute("fill") == "white" and r.getAttribute("stroke")]
    assert len(resistors) == len(d.resistors) == 2  # the two pull-ups
    # no wire runs through a resistor: one ends at each side of it
    for x0, x1, y in d.resistors:
        on_row = [(min(a, c), max(a, c)) for a, b, c, e, _ in d.segments if b == e == y]
        assert not any(lo < x1 and hi > x0 for lo, hi in on_row)
        assert any(hi == x0 for lo, hi in on_row) and any(lo == x1 for lo, hi in on_row)


def test_the_wiring_guide_shows_the_fram_drawing(capsys):
    from conftest import ROOT

    assert main(["wiring", "-n", "4", "--fram"]) == 0
    drawn = capsys.readouterr().out
    guide = (ROOT / "wiring" / "README.md").read_text()
    assert "```\n" + drawn + "```\n" in guide
    assert (ROOT / "wiring" / "ring-4-fram.svg").read_text() == wiring.svg(4, boarddefs.load("pico"), fram=True)


@pytest.mark.parametrize("fram", [False, True])
def test_the_svg_has_its_title_inside_and_a_legend_of_distinct_colours(fram):
    """issue 37, item 22: the title was clipped at the top left, SDA and SCL were one colour,
    and no legend said which colour is which wire."""
    cell_h, font = 16, 12
    doc = xml.dom.minidom.parseString(wiring.svg(4, boarddefs.load("pico"), fram=fram))
    texts = {t.firstChild.data: float(t.getAttribute("y")) for t in doc.getElementsByTagName("text")}
    title = "picoring wiring: 4 x Raspberry Pi Pico in a ring on UART0 at 115200 baud"
    assert title in texts
    assert min(texts.values()) - font / 2 >= 4  # every line's top inside the picture, with a margin
    width = float(doc.documentElement.getAttribute("width"))
    assert max(float(t.getAttribute("x")) + 7.3 * len(t.firstChild.data)  # monospace at 12 px: 7.2 px a char
               for t in doc.getElementsByTagName("text")) <= width
    colour = {kind: wiring.SVG_KINDS[kind][0] for kind in wiring.SVG_KINDS}
    used = {el.getAttribute("stroke") for el in doc.getElementsByTagName("line")}
    assert len(set(colour.values())) == len(colour)  # SDA and SCL apart, as every other kind
    assert (colour["sda"] in used and colour["scl"] in used) == fram
    legend = [g for g in doc.getElementsByTagName("g") if g.getAttribute("id") == "legend"]
    assert len(legend) == 1
    swatches = {r.getAttribute("fill") for r in legend[0].getElementsByTagName("rect")}
    assert swatches == used  # one legend entry for each colour drawn, none for one not drawn
    for kind, (c, what) in wiring.SVG_KINDS.items():
        assert (what in texts) == (c in used), kind
    assert "a dot joins wires; wires that cross without one are not connected" in texts
