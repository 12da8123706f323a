"""The README stays a page a newcomer reads in five minutes, and its links and the docs it points
to stay true (issue 37, item 20)."""

import re

from conftest import ROOT

from picoring.sim.workload import WORKLOADS

README = (ROOT / "README.md").read_text()


def test_the_readme_opens_with_the_two_commands():
    first = re.search(r"```sh\n(.*?)```", README, re.S)
    assert README.index(first.group(0)) < README.index("\n## ")  # before anything else
    assert first.group(1).splitlines() == [
        "python3 -m venv .venv && .venv/bin/pip install -e '.[test,bench]' && .venv/bin/picoring demo",
        ".ci/run",
    ]
    assert 'pytest -m "not slow"' in README


def test_the_readme_is_short_and_its_tour_is_ten_lines_at_most():
    assert len(README.splitlines()) <= 90
    tour = README.split("## A ten-line tour", 1)[1]
    block = re.search(r"```sh\n(.*?)```", tour, re.S).group(1)
    assert 5 <= len(block.splitlines()) <= 10
    from picoring.cli.main import build_parser

    for line in block.splitlines():  # every line one the parser takes
        for part in line.split("#")[0].split("&&"):
            if part.split()[0] == "picoring":  # (P=..., kill: the shell's)
                build_parser().parse_args(part.split()[1:])


def test_every_link_of_the_readme_and_the_docs_leads_somewhere():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text()):
            if "://" in target:
                continue
            if not (page.parent / target).exists():
                broken.append("%s: %s" % (page.relative_to(ROOT), target))
    assert broken == []


def test_the_readme_links_a_page_for_every_topic():
    table = README.split("## Documentation", 1)[1]
    for topic in ("protocols", "bounds", "faults", "recover", "frames", "performance", "FRAM", "virtual boards",
                  "writing a protocol"):
        assert topic in table, topic


def test_every_workload_is_documented():
    commands = (ROOT / "docs" / "commands.md").read_text()
    for name in WORKLOADS:
        assert "| `%s` |" % name in commands, name
