"""Fixtures of the state-store contract suite: one store per backend, on real servers.

Import the ``*_fixture`` functions into a test module to use ``url``, ``shared_url``
and ``store``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from reactq.shared.messages import ChatMessage
from reactq.shared.state import StateStore, TurnRecord, open_store
from reactq.shared.turns import TurnStatus

BACKENDS = ["memory", "sqlite", "postgres", "redis"]
SHARED_BACKENDS = ["sqlite", "postgres", "redis"]


def sid() -> str:
    return f"s-{uuid.uuid4().hex[:12]}"


def user(text: str) -> ChatMessage:
    return ChatMessage(role="user", content=text)


def record(session_id: str, turn_id: str, **fields: object) -> TurnRecord:
    return TurnRecord(
        turn_id=turn_id,
        session_id=session_id,
        status=fields.pop("status", TurnStatus.COMPLETED),  # type: ignore[arg-type]
        **fields,  # type: ignore[arg-type]
    )


def backend_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """The backend's URL; a sync helper because ``postgres_url`` runs its own event loop."""
    if backend == "memory":
        return "memory://"
    if backend == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/nested/state.db"
    if backend == "redis":
        redis_url = str(request.getfixturevalue("redis_url"))
        namespace = str(request.getfixturevalue("namespace"))
        return f"{redis_url}?namespace={namespace}-state"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture(name="url", params=BACKENDS)
def url_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return backend_url(request.param, tmp_path, request)


@pytest.fixture(name="shared_url", params=SHARED_BACKENDS)
def shared_url_fixture(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return backend_url(request.param, tmp_path, request)


@pytest.fixture(name="store")
async def store_fixture(url: str) -> AsyncIterator[StateStore]:
    opened = await open_store(url)
    try:
        yield opened
    finally:
        await opened.close()


async def contents(store: StateStore, session_id: str, branch_id: str | None = None) -> list:
    """(sequence, content) of a branch's history."""
    return [(m.sequence, m.content) for m in await store.get_messages(session_id, branch_id)]
