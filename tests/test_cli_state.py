"""Where the state lives, and what `reactq` says about it (issue 21, items 2 and 6).

The default SQLite database does not depend on the current directory; a command
that creates one says where; an unknown session is an error, not silence; and
``reactq run`` starts a fresh session each time unless given one. Real
subprocesses, each in a directory of its own, with the offline demo model.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from reactq.shared.settings import Settings
from tests.helpers import clean_env, run_cli

AGENT = "reactq.demo.weather:agent"


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """An environment whose user data directory is under ``tmp_path`` (no database URL)."""
    return clean_env(XDG_DATA_HOME=str(tmp_path / "data"))


def _session_of(out: subprocess.CompletedProcess[str]) -> str:
    found = re.search(r"session (\S+) \(continue it with --session \1\)", out.stderr)
    assert found, out.stderr
    return found.group(1)


def test_the_default_database_is_in_the_user_data_directory() -> None:
    xdg = Settings.from_env({"XDG_DATA_HOME": "/x/data", "HOME": "/home/u"})
    assert xdg.database_url == "sqlite+aiosqlite:////x/data/reactq/state.db"
    home = Settings.from_env({"HOME": "/home/u"})
    assert home.database_url == "sqlite+aiosqlite:////home/u/.local/share/reactq/state.db"
    # XDG says to ignore a relative XDG_DATA_HOME.
    relative = Settings.from_env({"XDG_DATA_HOME": "data", "HOME": "/home/u"})
    assert relative.database_url == home.database_url
    assert home.database_path == Path("/home/u/.local/share/reactq/state.db")
    # An explicit URL wins, and a relative SQLite path is resolved against the directory.
    explicit = Settings.from_env({"REACTQ_DATABASE_URL": "sqlite+aiosqlite:///rel/s.db"})
    assert explicit.database_path == Path.cwd() / "rel" / "s.db"
    assert Settings.from_env({"REACTQ_DATABASE_URL": "memory://"}).database_path is None
    pg = Settings.from_env({"REACTQ_DATABASE_URL": "postgresql+asyncpg://u@h/db"})
    assert pg.database_path is None


def test_a_worker_folder_and_another_folder_share_the_state(
    home: dict[str, str], tmp_path: Path
) -> None:
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    there.mkdir()
    db = tmp_path / "data" / "reactq" / "state.db"

    ran = run_cli(home, "run", "What's the weather in Oslo?", "--agents", AGENT, cwd=here)
    assert ran.returncode == 0, ran.stderr
    # The command that created the database said which one, on stderr.
    assert f"reactq: created the state database {db}" in ran.stderr
    assert "REACTQ_DATABASE_URL" in ran.stderr
    assert db.exists() and not (here / ".reactq").exists()
    session = _session_of(ran)

    history = run_cli(home, "history", session, cwd=there)
    assert history.returncode == 0, history.stderr
    assert "user: What's the weather in Oslo?" in history.stdout
    assert not (there / ".reactq").exists()
    # Once it exists, nothing more is said about it.
    again = run_cli(home, "run", "hello", "--agents", AGENT, "--session", session, cwd=there)
    assert again.returncode == 0 and "created the state database" not in again.stderr


def test_an_unknown_session_is_an_error_and_creates_nothing(
    home: dict[str, str], tmp_path: Path
) -> None:
    db = tmp_path / "data" / "reactq" / "state.db"
    for command in (["history", "carol"], ["branches", "carol"], ["history", "carol", "--json"]):
        out = run_cli(home, *command, cwd=tmp_path)
        assert out.returncode == 2, out
        assert out.stdout == ""
        assert "[session_not_found]" in out.stderr or '"session_not_found"' in out.stderr
        assert "carol" in out.stderr and str(db) in out.stderr
    assert not db.exists(), "a read created the state database"
    assert not (tmp_path / ".reactq").exists()

    # With a database that exists but lacks the session, the same.
    ran = run_cli(home, "run", "hi", "--agents", AGENT, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    out = run_cli(home, "branches", "carol", cwd=tmp_path)
    assert out.returncode == 2 and "[session_not_found]" in out.stderr


def test_run_starts_a_fresh_session_unless_told(home: dict[str, str], tmp_path: Path) -> None:
    first = run_cli(home, "run", "first words", "--agents", AGENT, cwd=tmp_path)
    second = run_cli(home, "run", "second words", "--agents", AGENT, cwd=tmp_path)
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    one, two = _session_of(first), _session_of(second)
    assert one != two
    history = run_cli(home, "history", two, "--json", cwd=tmp_path)
    users = [line for line in history.stdout.splitlines() if '"role": "user"' in line]
    assert len(users) == 1 and "second words" in users[0]

    again = run_cli(home, "run", "more words", "--agents", AGENT, "--session", one, cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    history = run_cli(home, "history", one, cwd=tmp_path)
    assert "user: first words" in history.stdout and "user: more words" in history.stdout
