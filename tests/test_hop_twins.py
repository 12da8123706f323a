"""The wandering token's, BinarySearch's and Raymond's token handlers on a board
(proto_wt.on_message_viper, proto_bs.on_message_viper: the hop that passes the token straight on,
or keeps it for a Delta_skip stay, in viper; proto_raymond.on_message_viper: the token a tree node
takes in and sends down at once) and their twin, the native method (on_message_native, which
CPython, the simulator and the explorer run): the same random runs (tests/mp_hop_twin_driver.py:
faults in the tokens, a second token, a newer epoch, a node still joining) leave every node in
the same state and write the same bytes, under the real micropython binary; and the native twin
gives the same under MicroPython as under CPython. BS's viper hop also takes the rotation that
finds only stale traps at its node (dropped, as _have would): the runs count it, and fixed cases
put a trap at each side of the round rule's bounds, served or not (bs_trap_cases)."""

import pytest

from conftest import twins_agree

DRIVER = "mp_hop_twin_driver.py"
SPECS = ("wt:skip=0", "wt", "wt:skip=0,min=3", "wt:skip=0,min=2,per=5", "bs", "raymond", "raymond:tree=path",
         "raymond:tree=star")
SEEDS = (1, 2, 3, 4, 5)
# Raymond's token rests until asked, and a run ends when a node still joining drops it: a run has
# a few tree hops, so more runs (every case of the viper hop: the combined REQUEST, |REQ_QUEUE| up
# to 4 before it).
SEEDS_RAYMOND = tuple(range(1, 31))
EVENTS = 400


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS)
def test_viper_handler_and_its_native_twin_agree(micropython, spec):
    seeds = SEEDS_RAYMOND if spec.startswith("raymond") else SEEDS
    mp = twins_agree(micropython, DRIVER, spec, ",".join(map(str, seeds)), str(EVENTS), twin="native", timeout=120)
    assert len(mp["results"]["viper"]) == len(seeds) + (spec == "bs")  # and BS's trap cases (the driver's bs_trap_cases)
    # Both the viper path and the native one it hands the rest to were run.
    assert 0 < mp["taken_by_viper"] < mp["delivered"]
    if spec == "bs":  # and the rotation's hop that drops the stale traps laid at its node
        assert mp["taken_by_viper_with_traps"] > 0, mp
