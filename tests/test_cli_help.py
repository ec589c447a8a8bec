"""`reactq --help` answers a newcomer's questions (issue 21, item 7).

Every subcommand says what it does in one line, every argument has a help text,
the settings that matter and ``send``'s exit codes are in the help, one option
has one spelling everywhere, and ``--json`` errors are JSON.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import reactq
from reactq.cli import build_parser
from tests.helpers import clean_env, run_cli

# Kept only so that old command lines still work; hidden from --help.
HIDDEN_ALIASES = {("flower", "--address")}


def _subparsers(parser: argparse.ArgumentParser) -> Iterator[Any]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield action


def _commands(
    parser: argparse.ArgumentParser, prefix: str = ""
) -> Iterator[tuple[str, argparse.ArgumentParser, str | None]]:
    """(command path, its parser, its one-line help) for every subcommand, nested too."""
    for sub in _subparsers(parser):
        helps = {a.dest: a.help for a in sub._choices_actions}
        for name, child in sub.choices.items():
            path = f"{prefix} {name}".strip()
            yield path, child, helps.get(name)
            yield from _commands(child, path)


def test_every_command_and_argument_says_what_it_is() -> None:
    parser = build_parser()
    assert parser.description
    commands = list(_commands(parser))
    assert {c for c, _, _ in commands} >= {"worker", "send", "watch", "run", "db upgrade"}
    for path, sub, line in commands:
        assert line and "\n" not in line, f"`reactq {path}` has no one-line description"
        assert sub.description, f"`reactq {path} --help` has no description"
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction | argparse._SubParsersAction):
                continue
            spelled = action.option_strings[0] if action.option_strings else action.dest
            if (path, spelled) in HIDDEN_ALIASES:
                assert action.help == argparse.SUPPRESS
                continue
            assert action.help and action.help != argparse.SUPPRESS, (
                f"`reactq {path}`: {spelled} has no help text"
            )


def test_strategy_lists_and_explains_its_values() -> None:
    send = dict((p, s) for p, s, _ in _commands(build_parser()))["send"]
    strategy = next(a for a in send._actions if "--strategy" in a.option_strings)
    assert strategy.help is not None
    for value, meaning in (
        ("enqueue", "wait"),
        ("reject", "refuse"),
        ("interrupt", "keep"),
        ("rollback", "discard"),
    ):
        assert value in strategy.help and meaning in strategy.help, strategy.help


def test_one_spelling_for_the_bind_address() -> None:
    parser = build_parser()
    assert parser.parse_args(["serve", "--host", "0.0.0.0"]).host == "0.0.0.0"
    assert parser.parse_args(["flower", "--host", "0.0.0.0"]).host == "0.0.0.0"
    # The old spelling still works, as a hidden alias.
    assert parser.parse_args(["flower", "--address", "10.0.0.1"]).host == "10.0.0.1"
    flower = dict((p, s) for p, s, _ in _commands(parser))["flower"]
    assert "--address" not in flower.format_help()


def test_the_help_names_the_settings_the_version_and_the_exit_codes(tmp_path: Path) -> None:
    env = clean_env()
    main = run_cli(env, "--help", cwd=tmp_path)
    assert main.returncode == 0
    for name in ("REACTQ_REDIS_URL", "REACTQ_NAMESPACE", "REACTQ_DATABASE_URL"):
        assert name in main.stdout, name
    version = run_cli(env, "--version", cwd=tmp_path)
    assert version.returncode == 0 and version.stdout.strip() == f"reactq {reactq.__version__}"
    send = run_cli(env, "send", "--help", cwd=tmp_path)
    assert "exit status" in send.stdout
    for code in ("0 ", "1 ", "2 ", "3 "):
        assert f"\n  {code}" in send.stdout, send.stdout


def test_json_errors_are_json_on_stderr(tmp_path: Path) -> None:
    env = clean_env(REACTQ_DATABASE_URL=f"sqlite+aiosqlite:///{tmp_path / 'state.db'}")
    out = run_cli(env, "send", "bad id", "hi", "--agent", "x", "--json", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == ""
    error = json.loads(out.stderr)
    assert error["code"] == "invalid_session_id" and "session id" in error["message"]
    out = run_cli(env, "history", "nobody", "--json", cwd=tmp_path)
    assert out.returncode == 2
    assert json.loads(out.stderr)["code"] == "session_not_found"
    # Without --json, the usual line.
    out = run_cli(env, "history", "nobody", cwd=tmp_path)
    assert out.stderr.startswith("reactq: error: ") and out.stderr.strip().endswith(
        "[session_not_found]"
    )
