"""The documented example of a test on the `ring` fixture (docs/testing.md, linked from the README)
runs as printed (issue 18, item 6)."""

import re
import textwrap

from conftest import ROOT

pytest_plugins = ["pytester"]


def readme_example():
    text = (ROOT / "docs" / "testing.md").read_text()
    m = re.search(r"A test of your\s+own gets the ring as a fixture:\n\n( *)```python\n(.*?)\n\1```", text, re.S)
    assert m, "docs/testing.md's pytest example is gone"
    return textwrap.dedent(m.group(2))


def test_the_readme_example_passes_on_virtual_boards(pytester):
    code = readme_example()
    assert code.startswith("# test_my_ring.py") and "def test_" in code
    pytester.makepyfile(test_my_ring=code)
    result = pytester.runpytest("--ring-virtual", "3", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
