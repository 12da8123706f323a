"""tests/map_model.py: a model of MicroPython's instance attribute maps (py/map.c), which says what
an attribute lookup costs a board (docs/performance.md, "instance maps that are full")."""

import json
import sys

import pytest

from conftest import FIRMWARE, ROOT, run_micropython

sys.path.insert(0, str(ROOT / "tests"))
import map_model  # noqa: E402
from map_model import UNIX_HASH_MASK, AttrMap, qstr_hash  # noqa: E402


def test_a_map_grows_only_when_full():
    names = ["attr%d" % i for i in range(60)]
    assert [len(AttrMap(names[:k]).table) for k in (1, 2, 3, 12, 13, 29, 30, 37, 38, 47, 48, 59, 60)] == \
        [2, 2, 4, 12, 17, 29, 37, 37, 47, 47, 59, 59, 73]


def test_a_miss_in_a_full_map_probes_every_slot_and_every_name_is_found():
    m = AttrMap(["attr%d" % i for i in range(37)])
    assert None not in m.table and m.probes("K") == 37
    assert all(1 <= m.probes(name) <= 37 for name in m.table)
    # where the probing stops in a map with room: at the first empty slot
    m = AttrMap(["attr%d" % i for i in range(38)])
    assert m.table.count(None) == 9 and m.probes("K") == 1


def test_the_hash_is_micropythons():
    # hash() of these interned strings in the unix port's micropython (2 bytes of hash; the rp2
    # port keeps 1, map_model.RP2_HASH_MASK)
    assert [qstr_hash(s, UNIX_HASH_MASK) for s in ("attr3", "K", "_on_msg", "node", "index")] == \
        [21317, 46574, 21309, 19397, 10363]
    assert qstr_hash("attr3") == 21317 & 0xFF


def test_the_model_matches_the_chips_figures():
    # tests/mp_map_bench.py on an emulated Pico (chip us a read of a class constant through an
    # instance of N attributes, 2026-12-04) against the model's probes: within 0.5 us of the fit
    chip = {28: 14.44, 30: 15.15, 32: 15.86, 35: 16.91, 36: 17.26, 37: 17.55, 38: 4.59, 40: 4.59, 44: 8.11,
            46: 8.82, 47: 21.07, 48: 20.43, 52: 21.84, 58: 23.95, 59: 25.30, 60: 15.15}
    for n, us in chip.items():
        probes = AttrMap(["attr%d" % i for i in range(n)]).probes("K")
        assert abs(map_model.miss_us(probes) - us) < 0.5, (n, probes, us)


def test_the_report_names_each_protocols_objects():
    lines = map_model.report("s")
    assert lines[0].startswith("s node loop: ") and any(line.startswith("s node: ") for line in lines)


@pytest.mark.slow
def test_the_hash_is_the_unix_ports_for_every_name_a_hop_looks_up(micropython, tmp_path):
    sys.path.insert(0, str(FIRMWARE))
    import qstrs

    names = sorted({n for v in qstrs.HOT.values() for n in v.split()})
    driver = tmp_path / "hashes.py"
    driver.write_text("import json\nprint(json.dumps([hash(s) for s in %r]))\n" % names)
    got = json.loads(run_micropython(micropython, str(driver)))
    assert got == [qstr_hash(n, UNIX_HASH_MASK) for n in names]
