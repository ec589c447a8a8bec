"""Issue 29: a turn's tenant identity, on the wire and in the store's namespaces, and
the look-up behind the gateway's turn routes, which takes one path for a foreign turn
and a missing one (real Redis, SQLite in a tmp dir)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from fastapi import APIRouter, FastAPI

from reactq import Producer
from reactq.producer.gateway.scopes import check_declared, touches
from reactq.producer.turn_lookup import turn_session
from reactq.shared.errors import InvalidNamespaceError, ReadOnlyError
from reactq.shared.settings import Settings
from reactq.shared.state import MemoryStateStore, TurnRecord
from reactq.shared.state.document_store import TenantDocuments, tenant_namespace
from reactq.shared.tenancy import TenantIdentity
from reactq.shared.turns import TurnRequest, TurnStatus

ACME = TenantIdentity(name="acme", prefix="acme-")
BETA = TenantIdentity(name="beta", prefix="beta-")


def test_a_turn_carries_its_tenant_on_the_wire_and_metadata_cannot_set_it() -> None:
    turn = TurnRequest(session_id="acme-1", agent="a", message="hi", tenant=ACME)
    assert TurnRequest.parse(turn.model_dump_json()).tenant == ACME
    # A payload from before the field reads as a turn acting for nobody in particular.
    old = json.loads(turn.model_dump_json())
    del old["tenant"]
    assert TurnRequest.parse(json.dumps(old)).tenant is None
    forged = TurnRequest(
        session_id="beta-1", agent="a", message="hi", metadata={"tenant": ACME.model_dump()}
    )
    assert TurnRequest.parse(forged.model_dump_json()).tenant is None
    limited = TenantIdentity(name="k", agents=frozenset({"a", "b"}), read_only=True)
    assert (
        TurnRequest.parse(
            TurnRequest(session_id="s", agent="a", message="x", tenant=limited).model_dump_json()
        ).tenant
        == limited
    )


def test_a_tenants_namespace_is_under_its_prefix_as_the_store_route_sees_it() -> None:
    inside = tenant_namespace(ACME, ("users", "alice"))
    assert inside == ("acme-users", "alice")
    assert ACME.sees_namespace(".".join(inside)) and not BETA.sees_namespace(".".join(inside))
    assert tenant_namespace(None, "users.alice") == ("users", "alice")
    assert tenant_namespace(TenantIdentity(name="ops"), "users.alice") == ("users", "alice")
    dotted = TenantIdentity(name="t", prefix="tenant.")
    assert tenant_namespace(dotted, ("users", "alice")) == ("tenant", "users", "alice")
    with pytest.raises(InvalidNamespaceError):
        tenant_namespace(TenantIdentity(name="t", prefix="a.."), "users")


async def test_tenant_documents_keep_each_tenant_to_its_own() -> None:
    store = MemoryStateStore()
    acme, beta = TenantDocuments(store, ACME), TenantDocuments(store, BETA)
    await acme.put_document(("users", "alice"), "pin", {"text": "4321"})
    assert await beta.get_document(("users", "alice"), "pin") is None
    assert (await beta.search_documents(("users", "alice"))).documents == []
    await beta.put_document(("users", "alice"), "pin", {"text": "beta"})
    found = await acme.get_document(("users", "alice"), "pin")
    assert found is not None and found.value == {"text": "4321"}
    assert found.namespace == ("acme-users", "alice")
    assert await store.get_document(("users", "alice"), "pin") is None
    reader = TenantDocuments(store, ACME.model_copy(update={"read_only": True}))
    with pytest.raises(ReadOnlyError):
        await reader.put_document(("users", "alice"), "pin", {"text": "0000"})
    with pytest.raises(ReadOnlyError):
        await reader.delete_document(("users", "alice"), "pin")
    assert (await reader.get_document(("users", "alice"), "pin")) == found


class _Recorded:
    """An object whose async calls are written down, in order, then made."""

    def __init__(self, inner: Any, log: list[str]) -> None:
        self._inner, self._log = inner, log

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        async def call(*args: Any, **kwargs: Any) -> Any:
            self._log.append(name)
            return await attr(*args, **kwargs)

        return call


@pytest.fixture
async def producer(redis_url: str, namespace: str, tmp_path: Path) -> AsyncIterator[Producer]:
    settings = Settings.from_env(
        {
            "REACTQ_REDIS_URL": redis_url,
            "REACTQ_NAMESPACE": f"{namespace}-tenancy-{uuid.uuid4().hex[:6]}",
            "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
        }
    )
    async with Producer(settings) as made:
        yield made


async def test_a_foreign_turn_is_looked_up_as_a_missing_one(producer: Producer) -> None:
    """Issue 29, item 6: 404 for another tenant's turn and for no turn at all came from
    different work (7.9 ms against 13.5 ms). Both now take the same look-ups."""
    tag = uuid.uuid4().hex[:8]
    # One turn Redis knows (queued), one only the state store knows (committed).
    queued = TurnRequest(session_id=f"beta-{tag}-q", agent="a", message="hi", tenant=BETA)
    await producer.queue.submit(queued)
    store = await producer.state_store()
    committed = f"t_{tag}committed"
    await store.begin_turn(f"beta-{tag}-c", "a")
    record = TurnRecord(turn_id=committed, session_id=f"beta-{tag}-c", status=TurnStatus.COMPLETED)
    await store.commit_turn(f"beta-{tag}-c", [], record)

    log: list[str] = []
    audit = await producer.audit_log()
    producer.queue = _Recorded(producer.queue, log)  # type: ignore[assignment]

    async def recorded_store() -> Any:
        return _Recorded(store, log)

    async def recorded_audit() -> Any:
        return _Recorded(audit, log)

    producer.state_store = recorded_store  # type: ignore[method-assign]
    producer.audit_log = recorded_audit  # type: ignore[method-assign]

    async def acme_sees(session_id: str) -> bool:
        return ACME.sees_session(session_id)

    async def beta_sees(session_id: str) -> bool:
        return BETA.sees_session(session_id)

    paths: dict[str, list[str]] = {}
    for name, turn_id in [
        ("foreign queued", queued.turn_id),
        ("foreign committed", committed),
        ("missing", f"t_{tag}missing"),
    ]:
        log.clear()
        assert await turn_session(producer, turn_id, acme_sees) is None
        paths[name] = list(log)
    expected = ["turn_status", "get_turn"] + (["turn_events"] if audit is not None else [])
    assert paths == {name: expected for name in paths}
    # Its own tenant finds them, the queued one from Redis alone.
    log.clear()
    assert await turn_session(producer, queued.turn_id, beta_sees) == f"beta-{tag}-q"
    assert log == ["turn_status"]
    assert await turn_session(producer, committed, beta_sees) == f"beta-{tag}-c"


def test_an_app_with_a_route_that_declares_no_scope_does_not_start() -> None:
    """A new ``/v1`` route that forgets to say what it touches fails the app's
    construction (``create_app`` calls ``check_declared``), and so does one whose path
    parameters its declaration does not account for (``{id}`` under one naming
    ``{session_id}``)."""
    forgot = APIRouter()

    @forgot.get("/v1/things/{thing_id}")
    async def thing(thing_id: str) -> str:
        return thing_id

    app = FastAPI()
    app.include_router(forgot)
    with pytest.raises(RuntimeError, match=r"GET /v1/things/\{thing_id\} declares"):
        check_declared(app)

    renamed = APIRouter(prefix="/v1")

    @renamed.get("/sessions/{id}", dependencies=[touches(session="path.session_id")])
    async def session(id: str) -> str:
        return id

    app = FastAPI()
    app.include_router(renamed)
    with pytest.raises(RuntimeError, match=r"path parameters \['id'\]"):
        check_declared(app)
