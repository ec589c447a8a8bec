"""``Producer.store``: the long-term store, JSON documents in namespaces that outlive
sessions (``shared/state/document_store.py`` says what a namespace, a key and a value may
be). They live in the state database, beside the conversations::

    await producer.store.put(("users", "u-42"), "diet", {"text": "vegetarian"})
    doc = await producer.store.get(("users", "u-42"), "diet")
    page = await producer.store.search("users.u-42", query="veget", filter={"kind": "pref"})
    spaces = await producer.store.namespaces(prefix=("users",), max_depth=2)

``Producer.state_store()`` is the state store itself (it was ``Producer.store()``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from reactq.shared.errors import InvalidDocumentError
from reactq.shared.state import StateStore
from reactq.shared.state.document_store import (
    Document,
    DocumentPage,
    Namespace,
    NamespaceLike,
    check_key,
    check_namespace,
)
from reactq.shared.text_checks import MAX_JSON_DEPTH, nesting_over
from reactq.shared.turn_inputs import check_text

__all__ = ["Document", "DocumentPage", "LongTermStore", "SyncLongTermStore"]


class LongTermStore:
    """Namespaced JSON documents in the state database."""

    def __init__(self, open_store: Callable[[], Awaitable[StateStore]]) -> None:
        self._open = open_store

    async def put(self, namespace: NamespaceLike, key: str, value: Mapping[str, Any]) -> Document:
        """Store the JSON object ``value`` under ``key`` in ``namespace`` (replacing what
        was there) and return the document. InvalidNamespaceError, InvalidDocumentError
        (a malformed key, a value that is not a JSON object or is over 1 MiB),
        InvalidTextError (text UTF-8 cannot carry, in the value or the key)."""
        check_namespace(namespace)
        check_key(key)
        check_text({"key": key, "value": value}, "")
        if nesting_over(value):
            raise InvalidDocumentError(f"the value nests deeper than {MAX_JSON_DEPTH} levels")
        return await (await self._open()).put_document(namespace, key, value)

    async def get(self, namespace: NamespaceLike, key: str) -> Document | None:
        """The document, or None."""
        check_namespace(namespace)
        check_key(key)
        return await (await self._open()).get_document(namespace, key)

    async def delete(self, namespace: NamespaceLike, key: str) -> bool:
        """Forget the document; False when there was none."""
        check_namespace(namespace)
        check_key(key)
        return await (await self._open()).delete_document(namespace, key)

    async def search(
        self,
        namespace: NamespaceLike,
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        prefix: str | None = None,
        limit: int = 10,
        cursor: str | None = None,
    ) -> DocumentPage:
        """The namespace's documents in key order, at most ``limit`` (1-1000) a page:
        those whose key starts with ``prefix``, whose value has every field of
        ``filter`` with that value, and whose key or a text value contains ``query``
        (case-insensitively). Pass a page's ``next_cursor`` as ``cursor``."""
        check_namespace(namespace)
        return await (await self._open()).search_documents(
            namespace, prefix=prefix, filter=filter, query=query, limit=limit, cursor=cursor
        )

    async def namespaces(
        self,
        *,
        prefix: NamespaceLike | None = None,
        suffix: NamespaceLike | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Namespace]:
        """The namespaces that hold documents, in order: those whose first segments are
        ``prefix`` and last ones ``suffix``, each cut to its first ``max_depth``
        segments (the cut ones once each), ``limit`` of them after ``offset``."""
        head = check_namespace(prefix) if prefix is not None else ()
        tail = check_namespace(suffix) if suffix is not None else ()
        if max_depth is not None and max_depth < 1:
            raise InvalidDocumentError("max_depth must be at least 1")
        if not 0 < limit <= 10_000 or offset < 0:
            raise InvalidDocumentError("limit must be 1-10000 and offset at least 0")
        found = await (await self._open()).list_namespaces()
        kept = [
            space
            for space in found
            if space[: len(head)] == head and (not tail or space[-len(tail) :] == tail)
        ]
        if max_depth is not None:
            kept = sorted({space[:max_depth] for space in kept})
        return kept[offset : offset + limit]


class SyncLongTermStore:
    """``SyncProducer.store``: the long-term store's calls, blocking."""

    def __init__(self, store: LongTermStore, run: Callable[[Awaitable[Any]], Any]) -> None:
        self._store = store
        self._run = run

    def put(self, namespace: NamespaceLike, key: str, value: Mapping[str, Any]) -> Document:
        """Store a JSON object under ``key`` (see ``LongTermStore.put``)."""
        document: Document = self._run(self._store.put(namespace, key, value))
        return document

    def get(self, namespace: NamespaceLike, key: str) -> Document | None:
        """The document, or None."""
        document: Document | None = self._run(self._store.get(namespace, key))
        return document

    def delete(self, namespace: NamespaceLike, key: str) -> bool:
        """Forget the document; False when there was none."""
        return bool(self._run(self._store.delete(namespace, key)))

    def search(
        self,
        namespace: NamespaceLike,
        *,
        query: str | None = None,
        filter: Mapping[str, Any] | None = None,
        prefix: str | None = None,
        limit: int = 10,
        cursor: str | None = None,
    ) -> DocumentPage:
        """A page of the namespace's documents (see ``LongTermStore.search``)."""
        page: DocumentPage = self._run(
            self._store.search(
                namespace, query=query, filter=filter, prefix=prefix, limit=limit, cursor=cursor
            )
        )
        return page

    def namespaces(
        self,
        *,
        prefix: NamespaceLike | None = None,
        suffix: NamespaceLike | None = None,
        max_depth: int | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[Namespace]:
        """The namespaces that hold documents (see ``LongTermStore.namespaces``)."""
        found: list[Namespace] = self._run(
            self._store.namespaces(
                prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset
            )
        )
        return found
