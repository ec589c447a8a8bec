"""The long-term store's documents in a process-local dict (``MemoryStateStore``)."""

from __future__ import annotations

import bisect
import json
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from reactq.shared.state import document_store as docs
from reactq.shared.state.document_store import Document, DocumentSearch, Namespace, NamespaceLike


class MemoryDocuments(DocumentSearch):
    """The DocumentStore contract in dicts; mixed into ``MemoryStateStore``.

    Documents are not sessions: the store's TTL and size bound leave them alone.
    """

    _documents: dict[Namespace, dict[str, Document]]

    def _namespace_docs(self, namespace: Namespace, *, create: bool = False) -> dict[str, Document]:
        if not hasattr(self, "_documents"):
            self._documents = {}  # no __init__ of its own: the store's stays as it is
        if create:
            return self._documents.setdefault(namespace, {})
        # A read of a namespace nobody wrote leaves nothing behind.
        return self._documents.get(namespace, {})

    async def put_document(
        self, namespace: NamespaceLike, key: str, value: Mapping[str, Any]
    ) -> Document:
        """Store ``value`` under ``key``; see DocumentStore."""
        space = docs.check_namespace(namespace)
        key = docs.check_key(key)
        copy = json.loads(docs.dump_document_value(value))  # as JSON reads it back
        now = time.time()
        found = self._namespace_docs(space, create=True)
        previous = found.get(key)
        document = Document(
            namespace=space,
            key=key,
            value=copy,
            created_at=previous.created_at if previous else now,
            updated_at=now,
        )
        found[key] = document
        return document

    async def get_document(self, namespace: NamespaceLike, key: str) -> Document | None:
        """The document, or None."""
        found = self._namespace_docs(docs.check_namespace(namespace)).get(docs.check_key(key))
        # A copy: the caller may change its value without changing the store.
        return None if found is None else found.model_copy(deep=True)

    async def delete_document(self, namespace: NamespaceLike, key: str) -> bool:
        """Forget the document; False when there was none."""
        found = self._namespace_docs(docs.check_namespace(namespace))
        return found.pop(docs.check_key(key), None) is not None

    async def list_namespaces(self) -> list[Namespace]:
        """Every namespace that holds a document, in order."""
        return sorted(space for space, found in self._namespace_docs_all().items() if found)

    def _namespace_docs_all(self) -> dict[Namespace, dict[str, Document]]:
        return getattr(self, "_documents", {})

    async def _documents_in_key_order(
        self, space: Namespace, *, after: str | None, prefix: str | None, batch: int
    ) -> AsyncIterator[Document]:
        found = self._namespace_docs(space)
        keys = sorted(found)
        for key in keys[0 if after is None else bisect.bisect_right(keys, after) :]:
            if key in found:
                yield found[key].model_copy(deep=True)
