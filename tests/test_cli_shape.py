"""The command line stays what users need: few options per verb, internals behind ``--set``, old names as aliases."""

import argparse
import subprocess
import sys

import pytest

from conftest import tlp_cli


def _verb_parser(verb: str) -> argparse.ArgumentParser:
    from tlp.cli import build_parser

    parser = build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))  # pylint: disable=protected-access
    return verbs.choices[verb]


def _visible_options(parser: argparse.ArgumentParser) -> list[str]:
    """Options ``--help`` shows (hidden deprecated aliases and -h left out)."""
    return [a.option_strings[-1] for a in parser._actions  # pylint: disable=protected-access
            if a.option_strings and a.help != argparse.SUPPRESS and not isinstance(a, argparse._HelpAction)]


@pytest.mark.parametrize("verb", ["tune", "train", "collect", "adapt"])
def test_each_verb_has_at_most_15_options(verb):
    options = _visible_options(_verb_parser(verb))
    assert len(options) <= 15, options
    assert "--set" in options


def test_renamed_options_still_work_for_one_release_and_say_what_replaces_them(capsys):
    parser = _verb_parser("tune")
    args = parser.parse_args(["dense_64x64x64", "--trials-per-iter", "8", "--no-fast-math"])
    assert args.settings == ["trials_per_iter=8", "fast_math=false"]
    assert "use --set trials_per_iter=8" in capsys.readouterr().err


def test_moved_modules_keep_their_old_names_for_one_release():
    import tlp.tune.run

    with pytest.warns(DeprecationWarning, match="tlp.search.tune moved to tlp.tune.run"):
        import tlp.search.tune as old  # pylint: disable=import-outside-toplevel
    assert old is tlp.tune.run


def test_python_dash_m_tlp_is_the_command_line():
    run = subprocess.run([sys.executable, "-m", "tlp", "tune", "--help"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "--set KEY=VALUE" in run.stdout


def test_an_unknown_setting_lists_the_known_ones():
    run = tlp_cli(["train", "nowhere", "--out", "m.pt", "--set", "colour=blue"])
    assert run.returncode == 2 and "--set colour: no such setting" in run.stderr and "loss" in run.stderr
