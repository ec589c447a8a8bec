"""The Agent Protocol's store: items over reactq's long-term store (see the package's
docstring)::

    PUT    /store/items                  {namespace: [...], key, value}          204 422
    GET    /store/items?namespace=a.b&key=k                                      404 422
    DELETE /store/items                  {namespace: [...], key}                 204
    POST   /store/items/search           {namespace_prefix, filter, limit, offset}
    POST   /store/namespaces             {prefix, suffix, max_depth, limit, offset}

An item is a ``Producer.store`` document: the same one ``/v1/store/{namespace}/{key}``
reaches, its namespace's segments joined by dots. A key scoped to a tenant reaches
the namespaces whose dotted name starts with its prefix, as on ``/v1`` (404 for the
others, as a missing item; an empty search); a read-only key cannot write.

What differs from LangGraph's store: ``namespace_prefix`` names one namespace
(its items, not those of namespaces under it); ``query`` (semantic search), ``index``
and ``ttl`` / ``refresh_ttl`` are accepted and ignored.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field, StrictFloat, StringConstraints

from reactq.producer.gateway.deps import GatewayDep, ScopeDep
from reactq.producer.gateway.errors import GatewayError, state_store_errors
from reactq.producer.gateway.models import KEY_PATTERN, NAMESPACE_PATTERN, ErrorBody
from reactq.producer.gateway.scopes import listing
from reactq.producer.gateway.security import KeyScope
from reactq.shared.errors import InvalidCursorError, InvalidDocumentError
from reactq.shared.state.document_store import MAX_SEARCH_LIMIT, MAX_SEGMENTS, Document

__all__ = ["Item", "router"]

router = APIRouter(tags=["agent-protocol: store"])


class Item(BaseModel):
    """A stored item as LangGraph's SDK reads it (``langgraph_sdk.schema.Item``)."""

    namespace: list[str]
    """Its namespace's segments."""
    key: str
    """Its key in the namespace."""
    value: dict[str, Any]
    """The JSON object stored."""
    created_at: datetime
    """Its first put."""
    updated_at: datetime
    """Its last put."""


Segment = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_:@+-]{1,128}$")]
"""A namespace's segment."""


class ItemPut(BaseModel):
    """``PUT /store/items``."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    namespace: list[Segment] = Field(min_length=1, max_length=MAX_SEGMENTS)
    """The namespace's segments: 1-8, each 1-128 of [A-Za-z0-9_:@+-]."""
    key: str = Field(pattern=KEY_PATTERN)
    """The key: 1-256 of [A-Za-z0-9._:@+-]."""
    value: dict[str, Any]
    """The JSON object to store (at most 1 MiB as JSON); replaces what the key held."""
    index: Any = None
    """Ignored: reactq's store has no semantic index."""
    ttl: StrictFloat | None = None
    """Ignored: items do not expire. A number (``true`` is refused, not read as 1)."""


class ItemDelete(BaseModel):
    """``DELETE /store/items``."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    namespace: list[Segment] = Field(min_length=1, max_length=MAX_SEGMENTS)
    """The namespace's segments."""
    key: str = Field(pattern=KEY_PATTERN)
    """The key."""


class ItemSearch(BaseModel):
    """``POST /store/items/search``."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    namespace_prefix: list[Segment] = Field(min_length=1, max_length=MAX_SEGMENTS)
    """The namespace to search (its own items only: not those of namespaces under it)."""
    filter: dict[str, Any] | None = None
    """Items whose value has each of these top-level fields, equal."""
    limit: int = Field(10, ge=1, le=MAX_SEARCH_LIMIT)
    """Items a page."""
    offset: int = Field(0, ge=0, le=100_000)
    """Items to skip."""
    query: str | None = None
    """Ignored: no semantic search (every item matching the filter is returned)."""
    refresh_ttl: bool | None = None
    """Ignored: items do not expire."""


class ItemList(BaseModel):
    """``POST /store/items/search``'s answer."""

    items: list[Item]
    """The items, in key order."""


def _item(document: Document) -> Item:
    return Item(
        namespace=list(document.namespace),
        key=document.key,
        value=document.value,
        created_at=datetime.fromtimestamp(document.created_at, tz=UTC),
        updated_at=datetime.fromtimestamp(document.updated_at, tz=UTC),
    )


def _missing(namespace: str, key: str) -> GatewayError:
    return GatewayError(
        f"no item {key!r} in namespace {namespace!r}", status=404, error_code="document_not_found"
    )


def _dotted(namespace: list[str], scope: KeyScope | None, key: str = "") -> str:
    """The namespace's dotted name; 404 (as a missing item) outside the key's tenant."""
    dotted = ".".join(namespace)
    if scope is not None and not scope.sees_namespace(dotted):
        raise _missing(dotted, key)
    return dotted


@contextlib.contextmanager
def _answers(at: str) -> Iterator[None]:
    """The store's refusals as 422s naming the body or query (a store that does not
    answer as a 503)."""
    try:
        with state_store_errors():
            yield
    except (InvalidDocumentError, InvalidCursorError) as exc:
        raise GatewayError(exc.message, status=422, error_code=exc.code, field=at) from None


@router.put(
    "/store/items",
    status_code=204,
    response_class=Response,
    dependencies=[listing()],
    responses={422: {"model": ErrorBody, "description": "A namespace, key or value refused"}},
)
async def put_item(body: ItemPut, gateway: GatewayDep, scope: ScopeDep) -> Response:
    """Store a JSON object under the namespace and key, replacing what was there."""
    dotted = _dotted(body.namespace, scope, body.key)
    with _answers("body"):
        await gateway.producer.store.put(dotted, body.key, body.value)
    return Response(status_code=204)


@router.get(
    "/store/items",
    response_model=Item,
    dependencies=[listing()],
    responses={404: {"model": ErrorBody, "description": "No such item (``document_not_found``)"}},
)
async def get_item(
    gateway: GatewayDep,
    scope: ScopeDep,
    namespace: Annotated[str, Query(pattern=NAMESPACE_PATTERN, description="Dotted: users.u-42")],
    key: Annotated[str, Query(pattern=KEY_PATTERN, description="The item's key")],
    refresh_ttl: Annotated[bool | None, Query(description="Ignored: no TTLs")] = None,
) -> Item:
    """The item stored under the namespace (its segments joined by dots) and key."""
    del refresh_ttl
    dotted = _dotted(namespace.split("."), scope, key)
    with _answers("query"):
        document = await gateway.producer.store.get(dotted, key)
    if document is None:
        raise _missing(dotted, key)
    return _item(document)


@router.delete(
    "/store/items",
    status_code=204,
    response_class=Response,
    dependencies=[listing()],
)
async def delete_item(body: ItemDelete, gateway: GatewayDep, scope: ScopeDep) -> Response:
    """Forget the item (204 whether or not there was one, as LangGraph's server)."""
    dotted = _dotted(body.namespace, scope, body.key)
    with _answers("body"):
        await gateway.producer.store.delete(dotted, body.key)
    return Response(status_code=204)


@router.post("/store/items/search", response_model=ItemList, dependencies=[listing()])
async def search_items(body: ItemSearch, gateway: GatewayDep, scope: ScopeDep) -> ItemList:
    """The namespace's items in key order, filtered, a page at a time (``query`` is
    ignored). Outside the key's tenant: none."""
    dotted = ".".join(body.namespace_prefix)
    if scope is not None and not scope.sees_namespace(dotted):
        return ItemList(items=[])
    wanted = body.offset + body.limit
    found: list[Document] = []
    cursor: str | None = None
    with _answers("body"):
        # Pages of the store's largest until the offset is passed: it pages by cursor.
        while len(found) < wanted:
            page = await gateway.producer.store.search(
                dotted,
                filter=body.filter,
                limit=min(MAX_SEARCH_LIMIT, wanted - len(found)),
                cursor=cursor,
            )
            found.extend(page.documents)
            cursor = page.next_cursor
            if cursor is None:
                break
    return ItemList(items=[_item(d) for d in found[body.offset : wanted]])


class NamespaceSearch(BaseModel):
    """``POST /store/namespaces``."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    prefix: list[Segment] | None = Field(default=None, max_length=MAX_SEGMENTS)
    """Namespaces whose first segments are these."""
    suffix: list[Segment] | None = Field(default=None, max_length=MAX_SEGMENTS)
    """Namespaces whose last segments are these."""
    max_depth: int | None = Field(default=None, ge=1, le=MAX_SEGMENTS)
    """Each namespace cut to its first ``max_depth`` segments (the cut ones once each)."""
    limit: int = Field(100, ge=1, le=MAX_SEARCH_LIMIT)
    """Namespaces at most."""
    offset: int = Field(0, ge=0, le=100_000)
    """Namespaces to skip."""


class NamespaceList(BaseModel):
    """``POST /store/namespaces``' answer."""

    namespaces: list[list[str]]
    """The namespaces, in order, each as its segments."""


@router.post("/store/namespaces", response_model=NamespaceList, dependencies=[listing()])
async def list_namespaces(
    body: NamespaceSearch, gateway: GatewayDep, scope: ScopeDep
) -> NamespaceList:
    """The namespaces that hold items, in order; a tenant's key sees its own only."""
    with _answers("body"):
        found = await gateway.producer.store.namespaces(
            prefix=body.prefix or None,
            suffix=body.suffix or None,
            max_depth=body.max_depth,
            limit=10_000,
        )
    if scope is not None:
        found = [space for space in found if scope.sees_namespace(".".join(space))]
    page = found[body.offset : body.offset + body.limit]
    return NamespaceList(namespaces=[list(space) for space in page])
