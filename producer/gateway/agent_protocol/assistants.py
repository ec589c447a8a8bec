"""The Agent Protocol's assistants: one per agent the pool hosts (see the package's
docstring)::

    POST /assistants                         an assistant with a config over an agent  409 422
    POST /assistants/search                  by graph_id, name, metadata; limit, offset
    POST /assistants/count                   how many the same filters match
    GET  /assistants/{assistant_id}          one                                   404
    GET  /assistants/{assistant_id}/schemas  its input, output, state, config schemas  404
    GET  /assistants/{assistant_id}/graph    its nodes and edges (agent <-> tools)  404
    GET  /assistants/{assistant_id}/subgraphs      none: {}                          404
    POST /assistants/{assistant_id}/versions       its one version                   404
    POST /assistants/{assistant_id}/latest         its one version stays the latest  404
    PATCH  /assistants/{assistant_id}        one POST /assistants made: its config...  404 409 422
    DELETE /assistants/{assistant_id}        one POST /assistants made           404 409

An assistant's ``assistant_id`` is a stable UUID (``uuid5`` of the pool's namespace and
the agent's name), its ``graph_id`` the agent's name; either names it in a path or a
run (``choose``). The answers come from the worker registry, as ``GET /v1/agents``'s
do: a key limited to some agents (``agents=``) sees those only, and any other
answers 404 as if no worker hosted it.

``POST /assistants`` makes an assistant over a hosted agent with a config: its
``config.configurable`` and ``context`` are the turn overrides the agent allows
(``Agent(overridable=...)``: else 422), sent with every run on it (``choose``). It is
kept in the long-term store (namespace ``reactq:assistants``, a document by
assistant id, beside the tenant that made it): a tenant's key sees the assistants
its tenant made, and the hosted ones.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from reactq.producer.gateway.deps import GatewayDep, ScopeDep
from reactq.producer.gateway.errors import GatewayError, state_store_errors
from reactq.producer.gateway.models import ErrorBody
from reactq.producer.gateway.scopes import Scoped, Touches, listing
from reactq.producer.gateway.security import KeyScope
from reactq.producer.gateway.service import Gateway
from reactq.shared.catalogue import AgentInfo
from reactq.shared.errors import InvalidOverrideError, OverrideNotAllowedError
from reactq.shared.state.document_store import MAX_SEARCH_LIMIT, Document
from reactq.shared.turn_inputs import check_overrides

__all__ = ["Assistant", "AssistantChoice", "assistant_id_of", "choose", "router"]

router = APIRouter(tags=["agent-protocol: assistants"])

# Where made assistants are kept: ``:`` starts no tenant's prefix a key is likely to
# have, so no tenant's /v1/store key reaches them.
STORE_NAMESPACE = "reactq:assistants"
"""The long-term store namespace of the assistants ``POST /assistants`` made."""

# Fixed forever: an assistant's id must not change between releases.
_ID_NAMESPACE = uuid.UUID("6f1c1e2a-7d3b-5c0e-9a41-2b8f0d6e4c17")

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No worker hosts it (``assistant_not_found``)"}
}

AssistantId = Annotated[
    str,
    Path(max_length=200, description="The assistant's UUID, or its graph id (the agent's name)"),
]


def assistant_id_of(namespace: str, agent: str) -> str:
    """The assistant id of ``agent`` in the pool of ``namespace``: a UUID that stays the
    same for as long as the names do."""
    return str(uuid.uuid5(_ID_NAMESPACE, f"{namespace}:{agent}"))


class Assistant(BaseModel):
    """An assistant as LangGraph's SDK reads it (``langgraph_sdk.schema.Assistant``)."""

    model_config = ConfigDict(use_attribute_docstrings=True)

    assistant_id: str
    """A UUID, stable for the agent's name in this pool."""
    graph_id: str
    """The agent's name."""
    name: str
    """The agent's name too."""
    description: str | None = None
    """What it is."""
    config: dict[str, Any] = Field(default_factory=dict)
    """Its config: ``{"configurable": {}}`` (the agent's settings are the worker's)."""
    context: dict[str, Any] = Field(default_factory=dict)
    """Its static context (none)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """``config_version`` (the hash of the live definition), ``live``, ``tools``."""
    version: int = 1
    """Always 1: reactq versions a definition by its hash (``metadata.config_version``)."""
    created_at: datetime
    """When a worker last announced it."""
    updated_at: datetime
    """The same."""


class AssistantSearch(BaseModel):
    """``POST /assistants/search`` (and ``/count``, without the page)."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    graph_id: str | None = None
    """Only this agent's."""
    name: str | None = None
    """Names containing it (any case)."""
    metadata: dict[str, Any] | None = None
    """Assistants whose metadata holds each of these pairs."""
    limit: int = Field(10, ge=1, le=1000)
    """Assistants a page."""
    offset: int = Field(0, ge=0)
    """Assistants to skip."""


class AssistantCount(BaseModel):
    """``POST /assistants/count``'s filters."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    graph_id: str | None = None
    """Only this agent's."""
    name: str | None = None
    """Names containing it (any case)."""
    metadata: dict[str, Any] | None = None
    """Assistants whose metadata holds each of these pairs."""


class AssistantCreate(BaseModel):
    """``POST /assistants``: an assistant over a hosted agent, with a config."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    graph_id: str = Field(max_length=128)
    """The hosted agent it runs (its name, or a hosted assistant's UUID)."""
    assistant_id: str | None = Field(None, pattern=r"^[A-Za-z0-9._:@+-]{1,128}$")
    """Its id (a fresh UUID when none)."""
    config: dict[str, Any] = Field(default_factory=dict)
    """``{"configurable": {...}}``: overrides the agent allows (``temperature``...)."""
    context: dict[str, Any] = Field(default_factory=dict)
    """More overrides, as ``configurable``'s (these win)."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Its metadata, searchable."""
    name: str | None = Field(None, max_length=200)
    """Its name (the agent's when none)."""
    description: str | None = Field(None, max_length=2000)
    """What it is."""
    if_exists: str = Field("raise", pattern=r"^(raise|do_nothing)$")
    """``raise`` (409) or ``do_nothing`` (answer the one there) when the id is taken."""


@dataclass(frozen=True)
class AssistantChoice:
    """Where a run on an assistant goes: the hosted agent, and the assistant's config
    over it (sent as the turn's overrides)."""

    agent: str
    overrides: dict[str, Any] = field(default_factory=dict)


def _stamp(ts: float | None) -> datetime:
    return datetime.fromtimestamp(ts or 0.0, tz=UTC)


def _assistant(namespace: str, info: AgentInfo) -> Assistant:
    seen = _stamp(info.last_seen)
    return Assistant(
        assistant_id=assistant_id_of(namespace, info.name),
        graph_id=info.name,
        name=info.name,
        description=f"reactq agent {info.name!r}",
        config={"configurable": {}},
        metadata={
            "config_version": info.config_version,
            "live": info.live,
            "tools": info.tools,
        },
        created_at=seen,
        updated_at=seen,
    )


def _owner(scope: KeyScope | None) -> str:
    return scope.prefix if scope is not None and scope.prefix is not None else ""


def _made(document: Document) -> Assistant | None:
    """The assistant a document keeps (None for one that is not: written by hand)."""
    try:
        return Assistant.model_validate(document.value["assistant"])
    except (KeyError, ValidationError):
        return None


async def _made_ones(gateway: Gateway, scope: KeyScope | None) -> list[Assistant]:
    """The assistants ``POST /assistants`` made that the key may see, in id order."""
    with state_store_errors():
        page = await gateway.producer.store.search(STORE_NAMESPACE, limit=MAX_SEARCH_LIMIT)
    out = []
    for document in page.documents:
        made = _made(document)
        if made is not None and _sees(scope, document, made):
            out.append(made)
    return out


def _sees(scope: KeyScope | None, document: Document, made: Assistant) -> bool:
    """Whether the key may see a made assistant: its tenant's, of an agent it may run."""
    owner = str(document.value.get("owner", ""))
    return scope is None or (owner.startswith(_owner(scope)) and scope.may_run(made.graph_id))


async def _all(gateway: Gateway, scope: KeyScope | None) -> list[Assistant]:
    return [*await _hosted(gateway, scope), *await _made_ones(gateway, scope)]


async def _hosted(gateway: Gateway, scope: KeyScope | None) -> list[Assistant]:
    """One assistant per agent name the key may see, in name order: of a name live with
    two definitions, the one announced last."""
    latest: dict[str, AgentInfo] = {}
    for info in await gateway.producer.agents():
        if scope is not None and not scope.may_run(info.name):
            continue
        kept = latest.get(info.name)
        if kept is None or (info.live, info.last_seen or 0) > (kept.live, kept.last_seen or 0):
            latest[info.name] = info
    namespace = gateway.settings.namespace
    return [_assistant(namespace, latest[name]) for name in sorted(latest)]


def _matches(assistant: Assistant, body: AssistantCount | AssistantSearch) -> bool:
    if body.graph_id is not None and assistant.graph_id != body.graph_id:
        return False
    if body.name is not None and body.name.casefold() not in assistant.name.casefold():
        return False
    return _holds(assistant, body.metadata)


def _holds(assistant: Assistant, wanted: dict[str, Any] | None) -> bool:
    """Whether its metadata has each pair of ``wanted``, equal."""
    return all(assistant.metadata.get(k) == v for k, v in (wanted or {}).items())


def _named_in(assistants: list[Assistant], assistant_id: str) -> Assistant | None:
    """The first of ``assistants`` whose UUID or graph id is ``assistant_id``."""
    return next((a for a in assistants if assistant_id in (a.assistant_id, a.graph_id)), None)


async def _find(gateway: Gateway, scope: KeyScope | None, assistant_id: str) -> Assistant:
    found = _named_in(await _all(gateway, scope), assistant_id)
    if found is not None:
        return found
    raise GatewayError(
        f"no assistant {assistant_id!r}: no worker hosts such an agent",
        status=404,
        error_code="assistant_not_found",
    )


async def choose(
    gateway: Gateway, assistant_id: str, scope: KeyScope | None = None
) -> AssistantChoice:
    """The agent (and overrides) a run on ``assistant_id`` goes to: the assistant's UUID
    or its graph id (an agent's name, as LangGraph's server allows) names the agent.
    An id that is neither is taken as an agent's name, so submitting the turn refuses
    it as an agent no worker hosts. An assistant ``POST /assistants`` made gives its
    agent and its config as the overrides, to a key of the tenant that made it only
    (``scope``: another tenant's assistant id is an unknown name to it)."""
    hosted = _named_in(await _hosted(gateway, None), assistant_id)
    if hosted is not None:
        return AssistantChoice(agent=hosted.graph_id)
    made = await _stored(gateway, assistant_id, scope)
    if made is not None:
        return AssistantChoice(agent=made.graph_id, overrides=_overrides(made))
    return AssistantChoice(agent=assistant_id)


async def _stored(
    gateway: Gateway, assistant_id: str, scope: KeyScope | None = None
) -> Assistant | None:
    """The made assistant ``assistant_id`` names, if ``scope`` may see it (None: any)."""
    if not _KEY.fullmatch(assistant_id):
        return None
    with state_store_errors():
        document = await gateway.producer.store.get(STORE_NAMESPACE, assistant_id)
    if document is None:
        return None
    made = _made(document)
    return made if made is not None and _sees(scope, document, made) else None


_KEY = re.compile(r"[A-Za-z0-9._:@+-]{1,128}")


def _overrides(assistant: Assistant) -> dict[str, Any]:
    return {**assistant.config.get("configurable", {}), **assistant.context}


# A route naming one assistant checks the key's agents itself (404, ``_find``).
_ONE = Scoped(kind=Touches.LISTING, inner=("assistant_id",)).dependency()


async def _named(assistant_id: AssistantId, gateway: GatewayDep, scope: ScopeDep) -> Assistant:
    return await _find(gateway, scope, assistant_id)


Named = Annotated[Assistant, Depends(_named)]
"""The assistant ``{assistant_id}`` names (its UUID or graph id) if the key may see it,
else 404 ``assistant_not_found``."""


@router.post(
    "/assistants",
    response_model=Assistant,
    dependencies=[listing()],
    responses={
        409: {"model": ErrorBody, "description": "The id is taken (``assistant_exists``)"},
        404: {"model": ErrorBody, "description": "No worker hosts the agent (``unknown_agent``)"},
        422: {
            "model": ErrorBody,
            "description": "An override the agent does not allow (``override_not_allowed``, "
            "``invalid_override``)",
        },
    },
)
async def create_assistant(
    body: AssistantCreate, gateway: GatewayDep, scope: ScopeDep
) -> Assistant:
    """An assistant over a hosted agent, its config the overrides each run on it sends."""
    agent = await _find_agent(gateway, scope, body.graph_id)
    assistant_id = body.assistant_id or str(uuid.uuid4())
    existing = await _stored(gateway, assistant_id)
    hosted = {a.assistant_id for a in await _hosted(gateway, None)}
    if existing is not None or assistant_id in hosted:
        if body.if_exists == "do_nothing":
            return await _find(gateway, scope, assistant_id)
        raise GatewayError(
            f"an assistant {assistant_id!r} exists",
            status=409,
            error_code="assistant_exists",
            field="body.assistant_id",
        )
    configurable = await _checked(gateway, agent.graph_id, body.config, body.context)
    now = datetime.now(UTC)
    made = Assistant(
        assistant_id=assistant_id,
        graph_id=agent.graph_id,
        name=body.name or agent.graph_id,
        description=body.description,
        config={**body.config, "configurable": configurable},
        context=body.context,
        metadata=body.metadata,
        created_at=now,
        updated_at=now,
    )
    await _keep(gateway, _owner(scope), made)
    return made


async def _keep(gateway: Gateway, owner: str, assistant: Assistant) -> None:
    value = {"owner": owner, "assistant": assistant.model_dump(mode="json")}
    with state_store_errors():
        await gateway.producer.store.put(STORE_NAMESPACE, assistant.assistant_id, value)


async def _checked(
    gateway: Gateway, agent: str, config: dict[str, Any], context: dict[str, Any]
) -> dict[str, Any]:
    """``config["configurable"]``, once it and ``context`` are overrides ``agent``
    allows (else 422)."""
    configurable = config.get("configurable") or {}
    if not isinstance(configurable, dict):
        raise GatewayError(
            "config.configurable is an object",
            status=422,
            error_code="invalid_override",
            field="body.config",
        )
    profile = await gateway.producer.registry.agent_profile(agent)
    allowed = profile.overridable if profile is not None else frozenset()
    try:
        check_overrides({**configurable, **context}, allowed, agent)
    except (OverrideNotAllowedError, InvalidOverrideError) as exc:
        raise GatewayError(
            exc.message, status=422, error_code=exc.code, field="body.config"
        ) from None
    return configurable


async def _find_agent(gateway: Gateway, scope: KeyScope | None, graph_id: str) -> Assistant:
    found = _named_in(await _hosted(gateway, scope), graph_id)
    if found is not None:
        return found
    raise GatewayError(
        f"no worker hosts agent {graph_id!r}",
        status=404,
        error_code="unknown_agent",
        field="body.graph_id",
    )


@router.post("/assistants/search", response_model=list[Assistant], dependencies=[listing()])
async def search_assistants(
    body: AssistantSearch, gateway: GatewayDep, scope: ScopeDep, response: Response
) -> list[Assistant]:
    """The assistants the key may see (the hosted ones in name order, then those
    ``POST /assistants`` made), filtered, a page at a time; ``X-Pagination-Next`` is
    the next page's offset when there is one."""
    found = [a for a in await _all(gateway, scope) if _matches(a, body)]
    end = body.offset + body.limit
    if end < len(found):
        response.headers["X-Pagination-Next"] = str(end)
    return found[body.offset : end]


@router.post("/assistants/count", response_model=int, dependencies=[listing()])
async def count_assistants(body: AssistantCount, gateway: GatewayDep, scope: ScopeDep) -> int:
    """How many assistants the key may see match the filters."""
    return sum(_matches(a, body) for a in await _all(gateway, scope))


@router.get(
    "/assistants/{assistant_id}",
    response_model=Assistant,
    responses=_NOT_FOUND,
    dependencies=[_ONE],
)
async def get_assistant(found: Named) -> Assistant:
    """The assistant, by its UUID or its graph id."""
    return found


_MESSAGE = {
    "type": "object",
    "properties": {
        "type": {"type": "string", "enum": ["human", "ai", "tool", "system"]},
        "content": {"anyOf": [{"type": "string"}, {"type": "array"}]},
        "id": {"type": ["string", "null"]},
        "tool_calls": {"type": "array", "items": {"type": "object"}},
        "tool_call_id": {"type": "string"},
    },
    "required": ["type", "content"],
}
_MESSAGES_STATE = {
    "title": "MessagesState",
    "type": "object",
    "properties": {"messages": {"type": "array", "items": _MESSAGE}},
    "required": ["messages"],
}
_CONFIG = {
    "title": "Config",
    "type": "object",
    "properties": {"configurable": {"type": "object"}},
}


@router.get(
    "/assistants/{assistant_id}/schemas",
    responses=_NOT_FOUND,
    dependencies=[_ONE],
)
async def assistant_schemas(found: Named) -> dict[str, Any]:
    """Its schemas: input, output and state are LangGraph's messages state
    (``{"messages": [...]}`` in LangChain's message format), config a ``configurable``
    object; no context schema."""
    return {
        "graph_id": found.graph_id,
        "input_schema": _MESSAGES_STATE,
        "output_schema": _MESSAGES_STATE,
        "state_schema": _MESSAGES_STATE,
        "config_schema": _CONFIG,
        "context_schema": None,
    }


@router.get(
    "/assistants/{assistant_id}/graph",
    responses=_NOT_FOUND,
    dependencies=[_ONE],
)
async def assistant_graph(found: Named) -> dict[str, Any]:
    """Its graph as a ReAct loop: ``__start__`` -> ``agent`` <-> ``tools``, ``agent`` ->
    ``__end__`` (the node names the runs' ``updates`` use)."""
    del found
    nodes = [
        {"id": "__start__", "type": "schema", "data": "__start__"},
        {"id": "agent", "type": "runnable", "data": {"name": "agent"}},
        {"id": "tools", "type": "runnable", "data": {"name": "tools"}},
        {"id": "__end__", "type": "schema", "data": "__end__"},
    ]
    edges = [
        {"source": "__start__", "target": "agent"},
        {"source": "agent", "target": "tools", "conditional": True},
        {"source": "agent", "target": "__end__", "conditional": True},
        {"source": "tools", "target": "agent"},
    ]
    return {"nodes": nodes, "edges": edges}


@router.get(
    "/assistants/{assistant_id}/subgraphs",
    responses=_NOT_FOUND,
    dependencies=[_ONE],
)
async def assistant_subgraphs(found: Named) -> dict[str, Any]:
    """None: an agent is one loop (a subagent is another assistant, reached through a
    tool), so ``{}`` (``recurse`` changes nothing)."""
    del found
    return {}


class VersionSearch(BaseModel):
    """``POST /assistants/{assistant_id}/versions``."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    metadata: dict[str, Any] | None = None
    """Versions whose metadata holds each of these pairs."""
    limit: int = Field(10, ge=1, le=1000)
    """Versions a page."""
    offset: int = Field(0, ge=0)
    """Versions to skip."""


@router.post(
    "/assistants/{assistant_id}/versions",
    response_model=list[Assistant],
    responses=_NOT_FOUND,
    dependencies=[_ONE],
)
async def assistant_versions(found: Named, body: VersionSearch) -> list[Assistant]:
    """Its one version: the live definition (``metadata.config_version`` says which)."""
    kept = [found] if _holds(found, body.metadata) else []
    return kept[body.offset : body.offset + body.limit]


class LatestVersion(BaseModel):
    """``POST /assistants/{assistant_id}/latest``."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    version: int = Field(ge=1)
    """The version to make the latest: an assistant has one, 1."""


@router.post(
    "/assistants/{assistant_id}/latest",
    response_model=Assistant,
    responses=_NOT_FOUND,
    dependencies=[_ONE],
)
async def set_latest_version(found: Named, body: LatestVersion) -> Assistant:
    """The assistant, its one version (1) being the latest already; another version
    is one it never had: 404."""
    if body.version != found.version:
        raise GatewayError(
            f"assistant {found.assistant_id} has no version {body.version} (it has one: "
            f"{found.version})",
            status=404,
            error_code="assistant_version_not_found",
        )
    return found


@router.delete(
    "/assistants/{assistant_id}",
    status_code=204,
    response_class=Response,
    responses={
        **_NOT_FOUND,
        409: {"model": ErrorBody, "description": "A hosted agent's (``assistant_hosted``)"},
    },
    dependencies=[_ONE],
)
async def delete_assistant(found: Named, gateway: GatewayDep) -> Response:
    """Forget an assistant ``POST /assistants`` made; a hosted agent's answers 409 (it
    is there for as long as a worker announces the agent)."""
    await _stored_document(gateway, found)
    with state_store_errors():
        await gateway.producer.store.delete(STORE_NAMESPACE, found.assistant_id)
    return Response(status_code=204)


class AssistantPatch(BaseModel):
    """``PATCH /assistants/{assistant_id}``: what to change (the rest stays)."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    config: dict[str, Any] | None = None
    """A new config (``configurable``: the overrides, checked as at creation)."""
    context: dict[str, Any] | None = None
    """New context overrides."""
    metadata: dict[str, Any] | None = None
    """Merged into its metadata."""
    name: str | None = Field(None, max_length=200)
    """A new name."""
    description: str | None = Field(None, max_length=2000)
    """A new description."""


@router.patch(
    "/assistants/{assistant_id}",
    response_model=Assistant,
    responses={
        **_NOT_FOUND,
        409: {"model": ErrorBody, "description": "A hosted agent's (``assistant_hosted``)"},
    },
    dependencies=[_ONE],
)
async def update_assistant(found: Named, body: AssistantPatch, gateway: GatewayDep) -> Assistant:
    """Change an assistant ``POST /assistants`` made (its agent stays); a hosted
    agent's answers 409."""
    document = await _stored_document(gateway, found)
    config = body.config if body.config is not None else found.config
    context = body.context if body.context is not None else found.context
    configurable = await _checked(gateway, found.graph_id, config, context)
    changed = found.model_copy(
        update={
            "config": {**config, "configurable": configurable},
            "context": context,
            "metadata": {**found.metadata, **(body.metadata or {})},
            "name": body.name if body.name is not None else found.name,
            "description": body.description if body.description is not None else found.description,
            "updated_at": datetime.now(UTC),
        }
    )
    await _keep(gateway, str(document.value.get("owner", "")), changed)
    return changed


async def _stored_document(gateway: Gateway, found: Assistant) -> Document:
    """The document of an assistant ``POST /assistants`` made; 409 for a hosted one."""
    with state_store_errors():
        document = await gateway.producer.store.get(STORE_NAMESPACE, found.assistant_id)
    if document is None or _made(document) is None:
        raise GatewayError(
            f"assistant {found.assistant_id!r} is the hosted agent {found.graph_id!r}: it "
            "goes when its workers stop, and changes with its definition",
            status=409,
            error_code="assistant_hosted",
        )
    return document
