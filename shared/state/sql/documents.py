"""The long-term store's documents in the SQL ``documents`` table (``SqlStateStore``)."""

from __future__ import annotations

import functools
import json
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, TypeVar

from sqlalchemy import delete, select
from sqlalchemy.engine import Connection

from reactq.shared.state import document_store as docs
from reactq.shared.state.document_store import Document, DocumentSearch, Namespace, NamespaceLike
from reactq.shared.state.sql.ops import dialect_insert
from reactq.shared.state.sql.schema import documents

T = TypeVar("T")


def _document(row: Any) -> Document:
    return Document(
        namespace=tuple(row["namespace"].split(".")),
        key=row["key"],
        value=json.loads(row["value"]),
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


class SqlDocuments(DocumentSearch):
    """The DocumentStore contract on SQL; mixed into ``SqlStateStore``, whose
    transactions and dialect it uses."""

    dialect: str

    async def _read(self, op: Callable[[Connection], T]) -> T:
        raise NotImplementedError  # pragma: no cover - SqlStateStore's

    async def _write(self, op: Callable[[Connection], T]) -> T:
        raise NotImplementedError  # pragma: no cover - SqlStateStore's

    async def put_document(
        self, namespace: NamespaceLike, key: str, value: Mapping[str, Any]
    ) -> Document:
        """Store ``value`` under ``key`` (one upsert); see DocumentStore."""
        space = docs.dotted(docs.check_namespace(namespace))
        key = docs.check_key(key)
        text = docs.dump_document_value(value)
        now = time.time()
        insert = dialect_insert(self.dialect, documents)
        # A document's creation time stays what its first put made it.
        query = insert.on_conflict_do_update(
            index_elements=["namespace", "key"],
            set_={"value": insert.excluded.value, "updated_at": insert.excluded.updated_at},
        ).returning(*documents.c)
        row_values = {
            "namespace": space,
            "key": key,
            "value": text,
            "created_at": now,
            "updated_at": now,
        }

        def op(conn: Connection) -> Document:
            return _document(conn.execute(query, row_values).mappings().one())

        return await self._write(op)

    async def get_document(self, namespace: NamespaceLike, key: str) -> Document | None:
        """The document, or None."""
        space = docs.dotted(docs.check_namespace(namespace))
        key = docs.check_key(key)
        query = select(documents).where(documents.c.namespace == space, documents.c.key == key)

        def op(conn: Connection) -> Document | None:
            row = conn.execute(query).mappings().first()
            return None if row is None else _document(row)

        return await self._read(op)

    async def delete_document(self, namespace: NamespaceLike, key: str) -> bool:
        """Forget the document; False when there was none."""
        space = docs.dotted(docs.check_namespace(namespace))
        key = docs.check_key(key)
        query = delete(documents).where(documents.c.namespace == space, documents.c.key == key)
        return await self._write(lambda conn: conn.execute(query).rowcount > 0)

    async def list_namespaces(self) -> list[Namespace]:
        """Every namespace that holds a document, in order."""

        def names(conn: Connection) -> list[str]:
            stmt = select(documents.c.namespace).distinct().order_by(documents.c.namespace)
            return [row[0] for row in conn.execute(stmt)]

        return sorted(tuple(name.split(".")) for name in await self._read(names))

    async def _documents_in_key_order(
        self, space: Namespace, *, after: str | None, prefix: str | None, batch: int
    ) -> AsyncIterator[Document]:
        # The key prefix runs in SQL; the value's filters (JSON text, whose query
        # functions differ between SQLite and PostgreSQL) run on the rows, in batches.
        name = docs.dotted(space)

        def rows_after(key: str | None, conn: Connection) -> list[Document]:
            stmt = select(documents).where(documents.c.namespace == name)
            if key is not None:
                stmt = stmt.where(documents.c.key > key)
            if prefix:
                stmt = stmt.where(documents.c.key.startswith(prefix, autoescape=True))
            stmt = stmt.order_by(documents.c.key).limit(batch)
            return [_document(row) for row in conn.execute(stmt).mappings()]

        key = after
        while True:
            rows = await self._read(functools.partial(rows_after, key))
            for row in rows:
                yield row
            if len(rows) < batch:
                return
            key = rows[-1].key
