"""The one map from a state store URL to its backend (shared/state/backends.py): every
backend's parts are where it says, and nothing else picks a backend."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from reactq.shared.errors import ConfigError
from reactq.shared.state import MemoryStateStore, RedisStateStore, SqlStateStore
from reactq.shared.state.backends import (
    BACKENDS,
    Backend,
    backend_for,
    backend_of,
    find_backend,
    find_backend_of,
)

ROOT = Path(__file__).resolve().parents[1]
STORES: dict[str, type[MemoryStateStore | SqlStateStore | RedisStateStore]] = {
    "memory": MemoryStateStore,
    "sql": SqlStateStore,
    "redis": RedisStateStore,
}


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_each_backend_is_a_package_holding_its_parts(backend: Backend) -> None:
    store = STORES[backend.name]
    assert store.backend == backend.name
    assert store.__module__ == f"reactq.shared.state.{backend.name}.store"
    for part in (backend.documents, backend.todos, backend.steps):
        assert part.startswith(f"reactq.shared.state.{backend.name}.")
        module = importlib.import_module(part)
        # The store is its own DocumentStore / TodoStore / StepStore: the part's mixin.
        mixins = [v for v in vars(module).values() if isinstance(v, type) and issubclass(store, v)]
        assert [m for m in mixins if m.__module__ == part], part


@pytest.mark.parametrize(
    ("url", "name", "opened"),
    [
        ("memory://", "memory", "memory://"),
        ("sqlite:///x.db", "sql", "sqlite+aiosqlite:///x.db"),
        ("postgres://u@h/db", "sql", "postgresql+asyncpg://u@h/db"),
        ("postgresql+asyncpg://u@h/db", "sql", "postgresql+asyncpg://u@h/db"),
        ("redis://h:6379/0", "redis", "redis://h:6379/0"),
        ("rediss+cluster://h:7000", "redis", "rediss+cluster://h:7000"),
    ],
)
def test_a_url_maps_to_one_backend(url: str, name: str, opened: str) -> None:
    backend, resolved = backend_for(url)
    assert backend.name == name and resolved == opened
    assert find_backend(url) is backend


def test_a_url_no_backend_serves_is_a_config_error() -> None:
    assert find_backend("mysql://h/db") is None and find_backend("no-scheme") is None
    with pytest.raises(ConfigError, match="unsupported state store URL scheme"):
        backend_for("mysql://h/db")
    with pytest.raises(ConfigError, match="has no scheme"):
        backend_for("no-scheme")


def test_a_store_of_no_backend_has_none() -> None:
    class Wrapper:
        def __getattr__(self, name: str) -> object:
            return "sql"  # a wrapper forwarding attributes is still not a SQL store

    assert find_backend_of(Wrapper()) is None
    with pytest.raises(TypeError):
        backend_of(Wrapper())
    assert backend_of(MemoryStateStore()).name == "memory"


def test_nothing_else_picks_a_backend_by_the_store_class() -> None:
    chain = re.compile(r"isinstance\([^)]*(SqlStateStore|RedisStateStore|MemoryStateStore)")
    found = [
        f"{path.relative_to(ROOT)}:{n}"
        for folder in ("shared", "worker", "producer", "reactq/bundles")
        for path in sorted((ROOT / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if chain.search(line) and path.name != "backends.py"
    ]
    assert found == []
