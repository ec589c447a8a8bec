"""Importing a part of reactq loads that part (issue 30, "Lazy root").

Each check runs in a fresh interpreter, since this one has imported everything
already. What an import costs in time is measured by ``bench/imports.py``, not here.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import reactq
from reactq.cli import build_parser
from reactq.cli.parser import STRATEGIES
from reactq.shared.turns import MultitaskStrategy

ROOT = Path(__file__).resolve().parent.parent

HEAVY = ("celery", "kombu", "sqlalchemy", "openai", "aiohttp", "redis", "fastapi", "mcp")
"""Third-party packages that cost a part of reactq that does not use them dearly."""

LAZY_PACKAGES = (
    "reactq",
    "reactq.worker",
    "reactq.worker.agent",
    "reactq.worker.agent.llm",
    "reactq.producer",
)
"""The packages whose names load on first use (``reactq.shared.lazy``)."""


def _loaded(code: str) -> set[str]:
    """The top-level packages in ``sys.modules`` once ``code`` ran in a fresh interpreter,
    plus the reactq modules themselves."""
    script = (
        f"{code}\nimport sys, json\n"
        "print(json.dumps(sorted({n if n.startswith('reactq') else n.split('.')[0] "
        "for n in sys.modules})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    return set(json.loads(out.stdout.splitlines()[-1]))


def test_importing_reactq_loads_no_heavy_package() -> None:
    loaded = _loaded("import reactq")
    assert [m for m in (*HEAVY, "pydantic") if m in loaded] == []
    assert {m for m in loaded if m.startswith("reactq")} == {
        "reactq",
        "reactq.shared",
        "reactq.shared.lazy",
    }


@pytest.mark.parametrize(
    "code",
    [
        "import reactq.shared.events",
        "import reactq.worker",
        "import reactq.worker.agent",
        "import reactq.worker.agent.llm",
        "import reactq.producer",
    ],
)
def test_a_package_or_the_events_load_no_heavy_package(code: str) -> None:
    loaded = _loaded(code)
    assert [m for m in HEAVY if m in loaded] == [], code


def test_defining_an_agent_loads_no_celery_sql_or_sdk() -> None:
    # An agent's definition (its loop, models, tools and guardrails) names its model;
    # the SDK is imported when a client is made, the audit log when a guardrail finds it.
    loaded = _loaded("from reactq import Agent, AgentLoop, Model, tool, Guardrail")
    assert [m for m in ("celery", "kombu", "sqlalchemy", "openai", "aiohttp") if m in loaded] == []


def test_the_producer_loads_no_celery() -> None:
    # The Producer sends Celery messages (reactq.drain), but its Dispatcher makes the
    # Celery app on the first send: importing it loads kombu's exceptions (what a send
    # that cannot reach the broker raises), not Celery. Its state store still loads
    # SQLAlchemy (reactq.shared.state imports every backend).
    loaded = _loaded("from reactq import Producer")
    assert "celery" not in loaded
    assert "openai" not in loaded
    assert "reactq.worker" not in loaded


def test_sending_a_message_loads_celery() -> None:
    loaded = _loaded(
        "from reactq.shared.protocol.dispatch import celery_app\n"
        "from reactq.shared.settings import Settings\n"
        "celery_app(Settings())"
    )
    assert "celery" in loaded


def test_the_cli_parser_imports_no_handler() -> None:
    loaded = _loaded("from reactq.cli import build_parser\nbuild_parser()")
    assert [m for m in (*HEAVY, "pydantic") if m in loaded] == []
    handlers = {"reactq.cli.turns", "reactq.cli.local", "reactq.producer.client"}
    assert loaded & handlers == set()
    assert not any(m.startswith("reactq.producer.cli_") for m in loaded)


def test_every_command_names_its_handler() -> None:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    for name, parser in sub.choices.items():
        where = parser.get_default("handlers")
        assert where, f"`reactq {name}` names no handler"
        module, _, table = where.partition(":")
        handler = getattr(importlib.import_module(module), table)[name]
        assert callable(handler), name


def test_the_parser_offers_every_strategy() -> None:
    assert list(STRATEGIES) == [m.value for m in MultitaskStrategy]


# --- the lazy names ---------------------------------------------------------------------


def test_every_public_name_resolves_from_a_fresh_import() -> None:
    code = (
        "import reactq\n"
        "listed = set(dir(reactq))\n"
        "missing = [n for n in reactq.__all__ if n not in listed]\n"
        "assert not missing, missing\n"
        "values = [getattr(reactq, n) for n in reactq.__all__]\n"
        "assert all(v is not None for v in values)\n"
        "from reactq import *"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert out.returncode == 0, out.stderr


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_a_lazy_package_resolves_and_lists_its_names(package: str) -> None:
    module = importlib.import_module(package)
    assert set(module.__all__) <= set(dir(module))
    for name in module.__all__:
        assert getattr(module, name) is not None
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'Nope'"):
        module.Nope  # noqa: B018 - the lookup is the test


def _type_checking_imports(module: ModuleType) -> dict[str, str]:
    """name -> module for every ``from X import name`` under ``if TYPE_CHECKING:``."""
    tree = ast.parse(inspect.getsource(module))
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for statement in node.body:
                if isinstance(statement, ast.ImportFrom) and statement.module:
                    for alias in statement.names:
                        found[alias.asname or alias.name] = statement.module
    return found


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_the_table_and_the_type_checking_imports_agree(package: str) -> None:
    module = importlib.import_module(package)
    table = dict(module._EXPORTS.where)
    if module is reactq:  # the extras' names, and where they come from
        table |= {name: where for name, (where, _, _) in reactq._EXTRAS.items()}
    assert _type_checking_imports(module) == table
    assert set(module.__all__) - {"__version__"} <= set(table)
