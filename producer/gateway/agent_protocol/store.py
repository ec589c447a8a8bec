"""The Agent Protocol's store: items over reactq's long-term store (see the package's
docstring)::

    PUT    /store/items                  {namespace: [...], key, value}          204 422
    GET    /store/items?namespace=a.b&key=k                                      404 422
    DELETE /store/items                  {namespace: [...], key}                 204
    POST   /store/items/search           {namespace_prefix, filter, limit, offset}
    POST   /store/namespaces             not yet: the store lists no namespaces  501

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
from pydantic import BaseModel, ConfigDict, Field

from reactq.producer.gateway.deps import GatewayDep, ScopeDep
from reactq.producer.gateway.errors import GatewayError, state_store_errors
from reactq.producer.gateway.models import ErrorBody
from reactq.producer.gateway.scopes import listing
from reactq.producer.gateway.security import KeyScope
from reactq.shared.errors import InvalidCursorError, InvalidDocumentError
from reactq.shared.state.document_store import MAX_SEARCH_LIMIT, Document

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


class ItemPut(BaseModel):
    """``PUT /store/items``."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    namespace: list[str] = Field(min_length=1)
    """The namespace's segments: 1-8 of [A-Za-z0-9_:@+-]."""
    key: str
    """The key: 1-256 of [A-Za-z0-9._:@+-]."""
    value: dict[str, Any]
    """The JSON object to store (at most 1 MiB as JSON); replaces what the key held."""
    index: Any = None
    """Ignored: reactq's store has no semantic index."""
    ttl: float | None = None
    """Ignored: items do not expire."""


class ItemDelete(BaseModel):
    """``DELETE /store/items``."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    namespace: list[str] = Field(min_length=1)
    """The namespace's segments."""
    key: str
    """The key."""


class ItemSearch(BaseModel):
    """``POST /store/items/search``."""

    model_config = ConfigDict(extra="ignore", use_attribute_docstrings=True)

    namespace_prefix: list[str] = Field(min_length=1)
    """The namespace to search (its own items only: not those of namespaces under it)."""
    filter: dict[str, Any] | None = None
    """Items whose value has each of these top-level fields, equal."""
    limit: int = Field(10, ge=1, le=MAX_SEARCH_LIMIT)
    """Items a page."""
    offset: int = Field(0, ge=0, le=MAX_SEARCH_LIMIT)
    """Items to skip (``offset + limit`` at most 1000)."""
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
    namespace: Annotated[str, Query(max_length=1100, description="Dotted: users.u-42")],
    key: Annotated[str, Query(max_length=256, description="The item's key")],
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
    if body.offset + body.limit > MAX_SEARCH_LIMIT:
        raise GatewayError(
            f"offset + limit is at most {MAX_SEARCH_LIMIT}",
            status=422,
            error_code="invalid_request",
            field="body.offset",
        )
    with _answers("body"):
        page = await gateway.producer.store.search(
            dotted, filter=body.filter, limit=body.offset + body.limit
        )
    return ItemList(items=[_item(d) for d in page.documents[body.offset :]])


@router.post(
    "/store/namespaces",
    dependencies=[listing()],
    responses={501: {"model": ErrorBody, "description": "Not yet (``not_supported``)"}},
)
async def list_namespaces(gateway: GatewayDep) -> None:
    """Not yet: reactq's long-term store lists no namespaces (501 ``not_supported``)."""
    del gateway
    raise GatewayError(
        "listing namespaces is not supported yet: search a namespace you know "
        "(POST /store/items/search)",
        status=501,
        error_code="not_supported",
    )
