"""firmware/qstrs.py: the names a hop looks up, interned at boot each in a map lookup cache slot of
its own (docs/performance.md, "The map lookup cache")."""

import json
import sys

import pytest

from conftest import FIRMWARE, ROOT, run_micropython

sys.path.insert(0, str(FIRMWARE))
import protocol  # noqa: E402
import qstrs  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
import hot_names  # noqa: E402


@pytest.mark.parametrize("name", sorted(protocol.REGISTRY))
def test_the_table_holds_every_name_a_hop_looks_up_often(name):
    """The names the protocol's traced ring looks up most (hot_names.HOT_TOP of them) are in its
    list: a hop that starts to look up a new name often fails here until `python tests/hot_names.py
    --write` has written the table again."""
    listed = set(qstrs.HOT[name].split())
    hot = [k for k, _ in hot_names.trace(name)][:hot_names.HOT_TOP]
    assert hot, "the traced ring sent no frame"
    missing = [k for k in hot if k not in listed]
    assert not missing, "run `python tests/hot_names.py --write`: %s not in qstrs.HOT[%r]" % (missing, name)
    assert len(qstrs.HOT[name].split()) <= qstrs.SLOTS


def test_a_protocol_spec_takes_its_base_names_list():
    assert set(qstrs.HOT) == set(protocol.REGISTRY)
    assert qstrs.place_protocol("no-such-protocol") is None


_DRIVER = r"""
import sys, json
sys.path.insert(0, sys.argv[1])
spec = sys.argv[2]
import qstrs
names = qstrs.HOT[spec.split(":")[0]].split()
# what loading the module interned (its long strings must not be: then every name is still free)
before = [n for n in names if qstrs._number(n) >= 0]
placed = qstrs.place_protocol(spec)
slots = {}
for n in names:
    q = qstrs._number(n)
    slots.setdefault(q % qstrs.SLOTS, []).append(n)
print(json.dumps({"before": before, "placed": placed, "numbers": [qstrs._number(n) for n in names],
                  "shared": [v for v in slots.values() if len(v) > 1]}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("spec", ["s", "d", "sk", "wt:skip=2"])
def test_placed_names_share_no_slot_under_micropython(micropython, tmp_path, spec):
    """Under the unix port (the interned strings' object words are the rp2 port's): importing
    qstrs interns none of the new names, and place() gives every one of them a slot no other name
    of the list has; only names MicroPython interned before (its own, as count or write) may share
    one with each other."""
    driver = tmp_path / "place.py"
    driver.write_text(_DRIVER)
    out = json.loads(run_micropython(micropython, str(driver), str(FIRMWARE), spec))
    names = qstrs.HOT[spec.split(":")[0]].split()
    new = [n for n in names if n not in out["before"]]
    assert out["placed"] is not None and out["placed"][0] == len(new) > 20
    assert all(q >= 0 for q in out["numbers"])
    for group in out["shared"]:
        assert len([n for n in group if n in new]) == 0, "a new name shares a slot: %s" % group
    assert out["placed"][2] == sum(len(g) - 1 for g in out["shared"])


@pytest.mark.slow
def test_a_board_says_its_placed_names_in_its_version_reply(micropython, tmp_path):
    """main.py places the protocol's names before it loads the firmware, and !ver says the
    figures (names interned / padding names / names sharing a slot)."""
    (tmp_path / "picoring.json").write_text(json.dumps({"position": 0, "size": 2, "protocol": "s"}))
    driver = tmp_path / "boot.py"
    driver.write_text(
        "import sys\nsys.path.insert(0, %r)\n" % str(FIRMWARE)
        + "import main_under_test\n")
    main_src = (FIRMWARE / "main.py").read_text().replace("\nmain()\n", "\n")
    (tmp_path / "main_under_test.py").write_text(main_src + (
        "\nimport json\n"
        "raw = read_config(%r)\n"
        "placed = place_hot_names(raw)\n"
        "print(json.dumps({'placed': placed, 'gone': 'qstrs' not in sys.modules}))\n"
        % str(tmp_path / "picoring.json")))
    out = json.loads(run_micropython(micropython, str(driver), cwd=str(tmp_path)))
    assert out["gone"] and out["placed"][0] > 20  # (which old names share a slot: test above)
