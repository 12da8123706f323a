"""`picoring ... --help` says what every option does (issue 18, item 6)."""

import argparse

import pytest

from picoring.check import registry
from picoring.cli.main import build_parser, main


def commands(parser, path=()):
    """(path, parser) of every command and sub-command."""
    yield path, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from commands(sub, path + (name,))


def test_every_option_and_argument_has_help():
    missing = []
    for path, parser in commands(build_parser()):
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                continue
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:  # the sub-commands' one-line help
                    if not choice.help:
                        missing.append(" ".join(path + (choice.dest,)))
                continue
            if not (action.help or "").strip():
                missing.append(" ".join(path + (action.option_strings[0] if action.option_strings else action.dest,)))
    assert missing == []


def help_text(capsys, *argv):
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse's wrapping undone


def test_protocol_choices_are_explained_from_the_descriptors(capsys):
    for argv in (["sim"], ["run"], ["dash"], ["flash"], ["explore"]):
        text = help_text(capsys, *argv)
        for name in registry.names():
            assert "%s = %s" % (name, " ".join(registry.about(name)["title"].split())) in text, (argv, name)


def test_the_options_the_issue_names(capsys):
    sim = help_text(capsys, "sim")
    assert "--seed SEED workload seed (default 0): the same seed" in sim
    assert "--trace FILE write every event as a JSON-lines trace" in sim
    assert "--json print the report as one JSON object" in sim
    assert "--progress" in sim and "--no-progress never show progress" in sim
    assert "I the board's ring position, 0 to N-1" in help_text(capsys, "virtual", "reset")
    demo = help_text(capsys, "demo")
    assert "Starts N virtual boards" in demo and "runs protocol D and then Q" in demo
    for option in ("-n N number of virtual boards", "--workload WORKLOAD, -w WORKLOAD poisson | burst",
                   "--requests REQUESTS, -k REQUESTS number of requests", "--seed SEED workload seed",
                   "--json print the runs' reports"):
        assert option in demo, option
    bench = help_text(capsys, "bench")
    for name in ("sim", "ring", "dash", "soak", "chip"):
        assert " %s " % name in bench
    assert "simulated messages per second against an equivalent SimPy model" in bench
    assert "1% of frames corrupted" in bench
    report = help_text(capsys, "report")
    assert "--csv also write the figures as CSV" in report and "--no-plots" in report
