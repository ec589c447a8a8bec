"""The long-term store: JSON documents in namespaces, kept across sessions.

A namespace is a tuple of segments, such as ``("users", "u-42")``: each segment 1-128
characters of ``[A-Za-z0-9_:@+-]`` (no ``.``), at most ``MAX_SEGMENTS`` of them. Its
dotted form, ``"users.u-42"``, is accepted everywhere a namespace is, and is how it
is stored and written in a URL. A key is 1-256 characters of ``[A-Za-z0-9._:@+-]``; a
value is a JSON object of at most ``MAX_VALUE_BYTES`` once serialised.

``search`` lists a namespace's documents in key order, a page at a time; it keeps
those whose key starts with ``prefix``, whose value holds every top-level field of
``filter`` with an equal value, and, with ``query``, whose key or one of whose text
values contains it (case-insensitively). Every backend reads the namespace in key
order in batches and ``collect`` applies the filters here, so they match the same
documents on all of them.

``TenantDocuments`` is a store seen by one tenant (``shared/tenancy.py``): every
namespace it is given is put under the tenant's prefix (``("users", "alice")`` is
``acme-users.alice`` for ``prefix=acme-``), the namespaces the gateway's store routes
let that tenant's key reach, so a tool's namespace cannot leave the tenant whatever
the model or the turn's metadata chose.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from reactq.shared.errors import (
    InvalidCursorError,
    InvalidDocumentError,
    InvalidNamespaceError,
    ReadOnlyError,
)
from reactq.shared.tenancy import TenantIdentity

MAX_SEGMENTS = 8
"""The most segments a namespace may have."""
MAX_VALUE_BYTES = 1 << 20
"""The largest document value, as compact JSON."""
MAX_SEARCH_LIMIT = 1000
"""The largest page ``search`` returns."""

_SEGMENT = re.compile(r"[A-Za-z0-9_:@+-]{1,128}")
_KEY = re.compile(r"[A-Za-z0-9._:@+-]{1,256}")

Namespace = tuple[str, ...]
"""A namespace: its segments, outermost first."""
NamespaceLike = Sequence[str] | str
"""What the API takes for a namespace: its segments, or their dotted form."""


class Document(BaseModel):
    """One stored document."""

    model_config = ConfigDict(frozen=True)

    namespace: Namespace
    """Its namespace's segments."""
    key: str
    """Its key in the namespace."""
    value: dict[str, Any]
    """The JSON object stored."""
    created_at: float = 0.0
    """Unix time of its first ``put``."""
    updated_at: float = 0.0
    """Unix time of its last ``put``."""


class DocumentPage(BaseModel):
    """One page of ``search``: documents in key order."""

    model_config = ConfigDict(frozen=True)

    documents: list[Document] = Field(default_factory=list)
    """The documents of this page."""
    next_cursor: str | None = None
    """Pass it as ``cursor`` for the next page; None on the last one."""


@runtime_checkable
class DocumentStore(Protocol):
    """Namespaced JSON documents that outlive sessions (every ``StateStore`` is one)."""

    async def put_document(
        self, namespace: NamespaceLike, key: str, value: Mapping[str, Any]
    ) -> Document:
        """Store ``value`` under ``key`` (replacing what was there; its ``created_at``
        stays) and return the document. InvalidNamespaceError, InvalidDocumentError."""
        ...

    async def get_document(self, namespace: NamespaceLike, key: str) -> Document | None:
        """The document, or None."""
        ...

    async def delete_document(self, namespace: NamespaceLike, key: str) -> bool:
        """Forget the document; False when there was none."""
        ...

    async def search_documents(
        self,
        namespace: NamespaceLike,
        *,
        prefix: str | None = None,
        filter: Mapping[str, Any] | None = None,
        query: str | None = None,
        limit: int = 10,
        cursor: str | None = None,
    ) -> DocumentPage:
        """The namespace's documents in key order, filtered (see the module docstring),
        at most ``limit`` (1..MAX_SEARCH_LIMIT) a page; ``cursor`` is a page's
        ``next_cursor`` (InvalidCursorError for anything else)."""
        ...

    async def list_namespaces(self) -> list[Namespace]:
        """Every namespace that holds a document, in order (``LongTermStore.namespaces``
        filters them)."""
        ...


# --- checks -----------------------------------------------------------------------


def check_namespace(namespace: object) -> Namespace:
    """``namespace`` as a tuple of segments; InvalidNamespaceError unless well formed."""
    if isinstance(namespace, str):
        parts: Sequence[object] = namespace.split(".")
    elif isinstance(namespace, Sequence):
        parts = namespace
    else:
        raise InvalidNamespaceError(
            f"a namespace is a tuple of strings or a dotted string, not {namespace!r:.60}"
        )
    if not 1 <= len(parts) <= MAX_SEGMENTS or not all(
        isinstance(p, str) and _SEGMENT.fullmatch(p) for p in parts
    ):
        raise InvalidNamespaceError(
            f"invalid namespace {namespace!r:.200}: use 1-{MAX_SEGMENTS} segments, each 1-128 "
            "characters of [A-Za-z0-9_:@+-] (tuple ('users', 'u-42') or 'users.u-42')"
        )
    return tuple(str(p) for p in parts)


def dotted(namespace: Namespace) -> str:
    """The namespace's dotted form (how it is stored)."""
    return ".".join(namespace)


def check_key(key: object) -> str:
    """``key`` if well formed, else InvalidDocumentError."""
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise InvalidDocumentError(
            f"invalid document key {key!r:.80}: use 1-256 characters of [A-Za-z0-9._:@+-]"
        )
    return key


def dump_document_value(value: object) -> str:
    """``value`` as the stored JSON text; InvalidDocumentError unless it is a JSON
    object (string keys) UTF-8 can carry, of at most MAX_VALUE_BYTES."""
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise InvalidDocumentError("a document's value must be a JSON object (a dict)")
    try:
        text = json.dumps(dict(value), ensure_ascii=True, allow_nan=False, separators=(",", ":"))
    except (ValueError, TypeError, RecursionError) as exc:
        raise InvalidDocumentError(f"the value cannot be stored as JSON: {exc}"[:300]) from None
    if len(text) > MAX_VALUE_BYTES:
        raise InvalidDocumentError(
            f"the value is {len(text)} bytes as JSON; the limit is {MAX_VALUE_BYTES}"
        )
    return text


def check_search(
    prefix: str | None, filter: Mapping[str, Any] | None, query: str | None, limit: int
) -> None:
    """InvalidDocumentError (or ValueError for ``limit``) for a malformed search."""
    if prefix is not None and not isinstance(prefix, str):
        raise InvalidDocumentError(f"prefix must be a string, got {prefix!r:.60}")
    if filter is not None and (
        not isinstance(filter, Mapping) or not all(isinstance(k, str) for k in filter)
    ):
        raise InvalidDocumentError("filter must be a JSON object: {field: value}")
    if query is not None and not isinstance(query, str):
        raise InvalidDocumentError(f"query must be a string, got {query!r:.60}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_SEARCH_LIMIT:
        raise ValueError(f"limit must be an integer from 1 to {MAX_SEARCH_LIMIT}, got {limit!r}")


# --- cursors and filters -----------------------------------------------------------


def encode_cursor(key: str) -> str:
    """An opaque cursor for the documents after ``key``."""
    return base64.urlsafe_b64encode(json.dumps(["d", key]).encode()).decode().rstrip("=")


def decode_cursor(cursor: str | None) -> str | None:
    """The key a cursor stands for (None for None); InvalidCursorError if it is not one."""
    if cursor is None:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        tag, key = json.loads(raw)
        if tag != "d" or not isinstance(key, str):
            raise ValueError(cursor)
        return key
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidCursorError(
            f"cursor {cursor[:40]!r} is not one a search handed out: pass a page's next_cursor"
        ) from None


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)


def selects(
    document: Document,
    prefix: str | None,
    filter: Mapping[str, Any] | None,
    query: str | None,
) -> bool:
    """Whether ``search``'s filters keep ``document``."""
    if prefix and not document.key.startswith(prefix):
        return False
    for name, wanted in (filter or {}).items():
        if name not in document.value or document.value[name] != wanted:
            return False
    if query:
        needle = query.casefold()
        return needle in document.key.casefold() or any(
            needle in text.casefold() for text in _texts(document.value)
        )
    return True


async def collect(
    in_key_order: AsyncIterator[Document],
    *,
    prefix: str | None,
    filter: Mapping[str, Any] | None,
    query: str | None,
    limit: int,
) -> DocumentPage:
    """The page of ``limit`` documents the filters keep from ``in_key_order`` (the
    namespace's documents after the cursor)."""
    page: list[Document] = []
    async for document in in_key_order:
        if not selects(document, prefix, filter, query):
            continue
        if len(page) == limit:
            return DocumentPage(documents=page, next_cursor=encode_cursor(page[-1].key))
        page.append(document)
    return DocumentPage(documents=page)


SEARCH_BATCH = 200
"""Documents a filtered search reads at a time."""


class DocumentSearch:
    """``search_documents`` for every backend: the checks, the cursor and the filters
    are here; a backend only reads a namespace's documents in key order."""

    def _documents_in_key_order(
        self, space: Namespace, *, after: str | None, prefix: str | None, batch: int
    ) -> AsyncIterator[Document]:
        """The namespace's documents whose key is after ``after`` (all for None), in
        key order; a backend may skip keys without ``prefix`` and reads ``batch`` at a
        time (limit + 1 unfiltered, so one read makes a page)."""
        raise NotImplementedError  # pragma: no cover - each backend's

    async def search_documents(
        self,
        namespace: NamespaceLike,
        *,
        prefix: str | None = None,
        filter: Mapping[str, Any] | None = None,
        query: str | None = None,
        limit: int = 10,
        cursor: str | None = None,
    ) -> DocumentPage:
        """The namespace's documents in key order, filtered; see DocumentStore."""
        space = check_namespace(namespace)
        check_search(prefix, filter, query, limit)
        after = decode_cursor(cursor)
        batch = limit + 1 if not (filter or query) else max(limit + 1, SEARCH_BATCH)
        documents = self._documents_in_key_order(space, after=after, prefix=prefix, batch=batch)
        return await collect(documents, prefix=prefix, filter=filter, query=query, limit=limit)


# --- a tenant's view ---------------------------------------------------------------


def tenant_namespace(tenant: TenantIdentity | None, namespace: NamespaceLike) -> Namespace:
    """``namespace`` put under the tenant's prefix (unchanged without a tenant or a
    prefix): ``acme-`` and ``("users", "alice")`` make ``("acme-users", "alice")``.
    InvalidNamespaceError when either the namespace, or it under the prefix, is not
    well formed (a prefix with ``..`` in it, or a ninth segment)."""
    space = check_namespace(namespace)
    if tenant is None or tenant.prefix is None:
        return space
    # The prefix starts the dotted name: what ``TenantIdentity.sees_namespace`` (the
    # gateway's store routes' check) lets the tenant's key reach.
    return check_namespace(tenant.prefix + dotted(space))


class TenantDocuments:
    """A ``DocumentStore`` as one tenant sees it: every namespace under its prefix
    (``tenant_namespace``), and no write for a read-only key (ReadOnlyError). The
    documents it returns carry the namespace as stored."""

    def __init__(self, store: DocumentStore, tenant: TenantIdentity | None) -> None:
        self.store = store
        """The store underneath, which sees every tenant's documents."""
        self.tenant = tenant
        """Whose view this is (None: the whole store)."""

    def _writable(self, namespace: NamespaceLike) -> Namespace:
        if self.tenant is not None and self.tenant.read_only:
            raise ReadOnlyError(f"the API key {self.tenant.name!r} is read-only")
        return tenant_namespace(self.tenant, namespace)

    async def put_document(
        self, namespace: NamespaceLike, key: str, value: Mapping[str, Any]
    ) -> Document:
        """``DocumentStore.put_document`` in the tenant's namespace."""
        return await self.store.put_document(self._writable(namespace), key, value)

    async def get_document(self, namespace: NamespaceLike, key: str) -> Document | None:
        """``DocumentStore.get_document`` in the tenant's namespace."""
        return await self.store.get_document(tenant_namespace(self.tenant, namespace), key)

    async def delete_document(self, namespace: NamespaceLike, key: str) -> bool:
        """``DocumentStore.delete_document`` in the tenant's namespace."""
        return await self.store.delete_document(self._writable(namespace), key)

    async def search_documents(
        self,
        namespace: NamespaceLike,
        *,
        prefix: str | None = None,
        filter: Mapping[str, Any] | None = None,
        query: str | None = None,
        limit: int = 10,
        cursor: str | None = None,
    ) -> DocumentPage:
        """``DocumentStore.search_documents`` in the tenant's namespace."""
        return await self.store.search_documents(
            tenant_namespace(self.tenant, namespace),
            prefix=prefix,
            filter=filter,
            query=query,
            limit=limit,
            cursor=cursor,
        )

    async def list_namespaces(self) -> list[Namespace]:
        """The tenant's namespaces: those whose dotted name starts with its prefix."""
        found = await self.store.list_namespaces()
        if self.tenant is None or self.tenant.prefix is None:
            return found
        prefix = self.tenant.prefix
        return [space for space in found if dotted(space).startswith(prefix)]
