"""The gateway's long-term store routes: namespaced JSON documents that outlive
sessions (``Producer.store``). ``factory.py`` mounts them under ``/v1``, behind the API
key; a namespace is written dotted (``users.u-42``)::

    GET    /v1/store/{namespace}          search: prefix, query, filter=K=V, limit, cursor
    GET    /v1/store/{namespace}/{key}    one document                      404
    PUT    /v1/store/{namespace}/{key}    store {"value": {...}}            422
    DELETE /v1/store/{namespace}/{key}    forget it                         404

A key scoped to a tenant reaches the namespaces whose dotted name starts with its
prefix, as it reaches the sessions whose id does (404 for the others, like a missing
document); a read-only key cannot write (``scopes.py``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict

from reactq.producer.gateway.deps import (
    DocumentKey,
    GatewayDep,
    MetadataPair,
    Namespace,
    metadata_filter,
    only_query,
)
from reactq.producer.gateway.errors import GatewayError, state_store_errors
from reactq.producer.gateway.models import ErrorBody
from reactq.producer.gateway.scopes import touches
from reactq.shared.errors import InvalidCursorError, InvalidDocumentError
from reactq.shared.state.document_store import MAX_SEARCH_LIMIT, Document, DocumentPage

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorBody, "description": "No such document (``document_not_found``)"}
}


class DocumentWrite(BaseModel):
    """A document to store."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    value: dict[str, Any]
    """The JSON object to store (at most 1 MiB as JSON); replaces what the key held."""


class DocumentDeleted(BaseModel):
    """A document the store forgot."""

    namespace: tuple[str, ...]
    """Its namespace's segments."""
    key: str
    """Its key."""


router = APIRouter(tags=["store"])


def _missing(namespace: str, key: str) -> GatewayError:
    return GatewayError(
        f"no document {key!r} in namespace {namespace!r}",
        status=404,
        error_code="document_not_found",
    )


@contextlib.contextmanager
def _answers() -> Iterator[None]:
    """The store's refusals as the gateway's error bodies (a store that does not answer
    as a 503)."""
    try:
        with state_store_errors():
            yield
    except InvalidCursorError as exc:
        raise GatewayError(
            exc.message, status=422, error_code=exc.code, field="query.cursor"
        ) from None
    except InvalidDocumentError as exc:
        raise GatewayError(exc.message, status=422, error_code=exc.code) from None


@router.get(
    "/store/{namespace}",
    response_model=DocumentPage,
    summary="Search a namespace's documents",
    dependencies=[
        touches(namespace="path.namespace"),
        only_query("prefix", "query", "filter", "limit", "cursor"),
    ],
    responses={
        404: {
            "model": ErrorBody,
            "description": "A namespace outside the key's tenant (``document_not_found``)",
        },
        422: {
            "model": ErrorBody,
            "description": "A cursor no search handed out (``invalid_cursor``), an unknown "
            "query parameter",
        },
    },
)
async def search(
    namespace: Namespace,
    gateway: GatewayDep,
    prefix: Annotated[
        str | None, Query(max_length=256, description="Keys that start with it")
    ] = None,
    query: Annotated[
        str | None,
        Query(max_length=1000, description="Key or a text value contains it (any case)"),
    ] = None,
    filter: Annotated[
        list[MetadataPair] | None,
        Query(
            description="KEY=VALUE, repeatable: documents whose value has field KEY equal to "
            'VALUE (JSON, such as 2, true or "2", else the text)'
        ),
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_SEARCH_LIMIT, description="Documents a page")] = 10,
    cursor: Annotated[
        str | None, Query(max_length=1000, description="A page's next_cursor")
    ] = None,
) -> DocumentPage:
    """The namespace's documents in key order, a page at a time, filtered."""
    with _answers():
        return await gateway.producer.store.search(
            namespace,
            prefix=prefix,
            query=query,
            filter=metadata_filter(filter or []),
            limit=limit,
            cursor=cursor,
        )


@router.get(
    "/store/{namespace}/{key}",
    dependencies=[touches(namespace="path.namespace", inner=("key",))],
    response_model=Document,
    summary="A document",
    responses=_NOT_FOUND,
)
async def get_document(namespace: Namespace, key: DocumentKey, gateway: GatewayDep) -> Document:
    """The document stored under ``key``."""
    with _answers():
        document = await gateway.producer.store.get(namespace, key)
    if document is None:
        raise _missing(namespace, key)
    return document


@router.put(
    "/store/{namespace}/{key}",
    dependencies=[touches(namespace="path.namespace", inner=("key",))],
    response_model=Document,
    summary="Store a document",
    responses={422: {"model": ErrorBody, "description": "A value that cannot be stored"}},
)
async def put_document(
    namespace: Namespace, key: DocumentKey, body: DocumentWrite, gateway: GatewayDep
) -> Document:
    """Store a JSON object under ``key``, replacing what was there (its ``created_at``
    stays)."""
    with _answers():
        return await gateway.producer.store.put(namespace, key, body.value)


@router.delete(
    "/store/{namespace}/{key}",
    dependencies=[touches(namespace="path.namespace", inner=("key",))],
    response_model=DocumentDeleted,
    summary="Delete a document",
    responses=_NOT_FOUND,
)
async def delete_document(
    namespace: Namespace, key: DocumentKey, gateway: GatewayDep
) -> DocumentDeleted:
    """Forget the document."""
    with _answers():
        deleted = await gateway.producer.store.delete(namespace, key)
    if not deleted:
        raise _missing(namespace, key)
    return DocumentDeleted(namespace=tuple(namespace.split(".")), key=key)
