"""The protocols' viper functions and their pure-Python twins (proto_sk.py: take_arrays,
queue_waiting, give_arrays; proto_ra.py: take_stamps, oldest_waiting, give_stamps; proto_dag.py:
flip_marks, pass_flip; proto_raymond.py: pass_header) give identical results and leave identical buffers over random input: both twins
under the real micropython binary, and the Python twins under CPython, which the simulator, the
explorer and the host use. (tests/test_frame_twins.py does the same for frame.py's, hostlink.py's
and proto_bs.py's.)"""

import sys

import pytest
from hypothesis import given, settings, strategies as st

from conftest import cases_file, run_twin_driver, twins_agree

DRIVER = "mp_proto_twin_driver.py"

MASK = 0x3FFFFFFF
u30 = st.integers(0, MASK)
i32 = st.integers(-(1 << 31), (1 << 31) - 1)
bit = st.integers(0, 1)


def _bytes(k):
    return st.lists(st.integers(0, 255), min_size=k, max_size=k)


@st.composite
def take_cases(draw):
    """A delivered token's payload at any offset: LN (30 bits read of 32), |Q| and Q any bytes
    (a corrupt |Q| or id included: the guards), into arrays with anything in them."""
    n = draw(st.integers(2, 12))
    at = draw(st.integers(0, 8))
    buf = draw(_bytes(at + 5 * n + 3))
    if draw(st.booleans()):  # a plausible |Q| and ids
        k = at + 4 * n
        buf[k] = draw(st.integers(0, n - 1))
        for j in range(n - 1):
            buf[k + 1 + j] = draw(st.integers(0, n - 1))
    if draw(st.booleans()):
        return ["take_stamps", buf, at, n, draw(st.lists(i32, min_size=n, max_size=n))]
    return ["take_arrays", buf, at, n, draw(st.lists(i32, min_size=n, max_size=n)), draw(_bytes(n)),
            draw(st.lists(bit, min_size=n, max_size=n))]


@st.composite
def counter_pairs(draw, n):
    """RN and LN (or RQ and LV): equal, one apart, two apart or anything, across the 2**30 wrap."""
    a, b = [], []
    for _ in range(n):
        x = draw(st.one_of(u30, st.sampled_from([0, 1, MASK - 1, MASK])))
        how = draw(st.sampled_from(["same", "one", "two", "any"]))
        y = {"same": x, "one": (x - 1) & MASK, "two": (x - 2) & MASK}.get(how)
        a.append(x)
        b.append(draw(u30) if y is None else y)
    return a, b


@st.composite
def scan_cases(draw):
    n = draw(st.integers(2, 12))
    i = draw(st.integers(0, n - 1))
    a, b = draw(counter_pairs(n))
    if draw(st.booleans()):
        return ["oldest_waiting", a, b, i, n]
    return ["queue_waiting", a, b, draw(_bytes(n)), draw(st.lists(bit, min_size=n, max_size=n)), i, n,
            draw(st.integers(0, n))]


@st.composite
def give_cases(draw):
    n = draw(st.integers(2, 12))
    at = draw(st.integers(0, 8))
    out = draw(_bytes(at + 5 * n + 2))
    values = draw(st.lists(i32, min_size=n, max_size=n))
    if draw(st.booleans()):
        return ["give_stamps", out, at, n, values]
    q = draw(st.lists(st.integers(0, 255 if draw(st.booleans()) else n - 1), min_size=n, max_size=n))
    return ["give_arrays", out, at, n, values, q, draw(st.lists(bit, min_size=n, max_size=n)),
            draw(st.integers(0, n))]


@st.composite
def flip_cases(draw):
    n = draw(st.integers(2, 12))
    out = draw(_bytes(n + 1 + draw(st.integers(0, 3))))
    i = draw(st.integers(0, n - 1))
    if draw(st.booleans()):  # a FLIP's payload (origin, marks) at any offset, marks mostly 0 or 1
        at = draw(st.integers(0, 8))
        buf = draw(_bytes(at + 1)) + draw(st.lists(st.one_of(bit, st.integers(0, 255)), min_size=n, max_size=n))
        return ["pass_flip", buf, at, out, i, n]
    return ["flip_marks", draw(st.lists(bit, min_size=n, max_size=n)), out, i, n, draw(st.integers(0, n - 1))]


@st.composite
def header_cases(draw):
    at = draw(st.integers(0, 8))
    return ["pass_header", draw(_bytes(at + 4)), at, draw(_bytes(8)), draw(st.integers(0, 0xFFFF))]


cases = st.lists(st.one_of(take_cases(), scan_cases(), give_cases(), flip_cases(), header_cases()), min_size=1,
                 max_size=30)


@pytest.mark.slow
@settings(max_examples=40, deadline=None)
@given(case_list=cases)
def test_viper_and_python_twins_agree(micropython, tmp_path_factory, case_list):
    twins_agree(micropython, DRIVER, cases_file(tmp_path_factory.mktemp("twins"), case_list))


def test_the_driver_sees_a_difference(tmp_path):
    # The comparison above can fail: a request one ahead of the token's record is queued by step
    # (e), the same request already served is not.
    waiting = ["queue_waiting", [5, 7], [4, 7], [0, 0], [0, 0], 1, 2, 0]
    served = ["queue_waiting", [5, 7], [5, 7], [0, 0], [0, 0], 1, 2, 0]
    a, b = run_twin_driver(sys.executable, DRIVER, cases_file(tmp_path, [waiting, served]))["results"]["py"]
    assert a == [1, [5, 7], [4, 7], [0, 0], [1, 0]] and b[0] == 0 and a != b
