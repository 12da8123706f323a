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


def test_the_protocol_list_lives_in_one_place(capsys):
    """`picoring protocols` and -p help explain every protocol from its descriptor; the
    commands' --help points there instead of repeating the list (issue 37, item 21)."""
    assert main(["protocols"]) == 0
    listed = " ".join(capsys.readouterr().out.split())
    for argv in (["sim", "-p", "help"], ["run", "-p", "help"], ["compare", "-p", "help"]):
        assert main(argv) == 0
        assert " ".join(capsys.readouterr().out.split()) == listed, argv
    for name in registry.names():
        assert "%s %s" % (name, " ".join(registry.about(name)["title"].split())) in listed, name
    for key, text in registry.option_help(registry.names()):
        assert "%s: %s" % (key, " ".join(text.split())) in listed, key
    for argv in (["sim"], ["run"], ["dash"], ["flash"], ["explore"], ["compare"], ["bench"]):
        text = help_text(capsys, *argv)
        assert "`picoring protocols`" in text, argv
        for name in ("sk", "raymond", "dag"):  # no longer repeated on every command
            assert " ".join(registry.about(name)["title"].split()) not in text, (argv, name)
        assert "Delta_max" not in text, argv


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


def test_every_command_says_what_it_does_and_shows_examples(capsys):
    """A paragraph and two or three examples on every command's --help, and every example
    is a command line the parser takes (issue 37, item 21)."""
    import shlex

    parser = build_parser()
    for path, p in commands(parser):
        assert len((p.description or "").split()) >= 15, path
        epilog = p.epilog or ""
        assert epilog.startswith("examples:\n"), path
        examples = epilog.splitlines()[1:]
        assert 2 <= len(examples) <= 3, path
        assert examples[0].split()[1:len(path) + 1] == list(path), path  # the command's own, first
        for line in examples:
            for part in line.split("#")[0].replace("&&", "|").split("|"):
                words = shlex.split(part)
                if words[0] != "picoring":
                    continue  # jq, a shell's
                # argparse exits (status 2) on a bad one; parsing leaves the parser as it was, so
                # one parser serves every example (a new one takes 13 ms, and there are ~150)
                parser.parse_args(words[1:])
        text = help_text(capsys, *path)
        assert "examples: " + examples[0].strip().split("  ")[0] in text, path
