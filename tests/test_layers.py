"""The layering rules of docs/architecture.md, checked on the source.

``reactq.worker`` and ``reactq.producer`` never import each other, ``reactq.shared``
imports neither, and no import hides inside a function except an optional
extra's (imported where it is used, so a missing extra fails that feature alone) or
one of the few heavy modules deferred on purpose (``DEFERRED``).
"""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

import reactq

PACKAGE = Path(reactq.__file__).parent

# Third-party packages of the optional extras (pyproject's optional-dependencies),
# and the reactq modules that need one of them at import time.
EXTRAS = {
    "prometheus_client",
    "opentelemetry",
    "mcp",
    "mcp_types",
    "a2a",
    "PIL",
    "uvicorn",
    "fastapi",
    "flower",
    "httpx2",
    "reactq.producer.gateway",
    "reactq.producer.flower",
}


# Heavy modules imported inside the one function that needs them, so that importing
# the light parts (an event, an agent's definition, the Producer, `reactq --help`)
# does not load them; tests/test_lazy_imports.py checks that they stay out.
DEFERRED = {
    "importlib.metadata": "reactq.__version__, read on first use",
    "celery": "made only where an app is made (dispatch.celery_app)",
    "celery.schedules": "read only where a cron is parsed or a beat timed",
    "celery.signals": "connected only where publishing is traced",
    "reactq.shared.protocol.transport": "kombu's Redis transport, a worker's alone",
    "reactq.shared.audit": "the audit log and its SQL store, found by a guardrail",
    "reactq.worker.agent.llm.openai_client": "the openai SDK, when a client is made",
    "reactq.shared.services": "the drivers' exceptions, on a command's failure",
    "reactq.shared.settings": "read on a command's failure, beside them",
    "kombu.transport": "its transports' names, when a broker URL is set and checked",
    "dotenv": "the .env parser, when the working directory has a .env",
    "jsonschema.exceptions": "an approval's edited arguments checked, when a decision edits them",
    "jsonschema.validators": "an approval's edited arguments checked, when a decision edits them",
}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    # os.walk, because the package's worker/, producer/ and shared/ are symlinks.
    paths = [
        Path(root, file)
        for root, _, files in os.walk(PACKAGE, followlinks=True)
        for file in files
        if file.endswith(".py")
    ]
    for path in sorted(paths):
        if "migrations" in path.parts:
            continue  # Alembic's own scripts, loaded by Alembic
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        name = ".".join(relative.parts).removesuffix(".__init__")
        yield name, ast.parse(path.read_text(), filename=str(path))


def _imported(node: ast.Import | ast.ImportFrom) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return [node.module or ""]


def _imports(tree: ast.Module) -> Iterator[tuple[str, bool]]:
    """(module imported, whether the import sits inside a function)."""

    def walk(node: ast.AST, in_function: bool) -> Iterator[tuple[str, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                for name in _imported(child):
                    yield name, in_function
            inner = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            yield from walk(child, inner)

    yield from walk(tree, False)


def _is_extra(name: str) -> bool:
    return any(name == extra or name.startswith(extra + ".") for extra in EXTRAS)


def test_the_package_is_scanned() -> None:
    names = {name for name, _ in _modules()}
    assert {"reactq.cli", "reactq.worker.tasks", "reactq.producer.client"} <= names
    assert len(names) > 90


def test_worker_and_producer_never_import_each_other_and_shared_neither() -> None:
    forbidden = {
        "reactq.worker": ("reactq.producer", "reactq.cli", "reactq.demo", "reactq.bundles"),
        "reactq.producer": ("reactq.worker", "reactq.cli", "reactq.demo", "reactq.bundles"),
        "reactq.shared": (
            "reactq.worker",
            "reactq.producer",
            "reactq.cli",
            "reactq.demo",
            "reactq.bundles",
        ),
        # Tools run in workers: a bundle builds on the worker side and the shared layer.
        "reactq.bundles": ("reactq.producer", "reactq.cli", "reactq.demo"),
    }
    crossings = [
        f"{module} imports {name}"
        for module, tree in _modules()
        for side, banned in forbidden.items()
        if module.startswith(side + ".") or module == side
        for name, _ in _imports(tree)
        if name.startswith(banned)
    ]
    assert crossings == []


def test_no_import_inside_a_function_but_an_optional_extras() -> None:
    hidden = [
        f"{module} imports {name} inside a function"
        for module, tree in _modules()
        for name, in_function in _imports(tree)
        if in_function and not _is_extra(name) and name not in DEFERRED
    ]
    assert hidden == []
