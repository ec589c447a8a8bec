"""The long-term store's documents in Redis (``RedisStateStore``).

A namespace's documents share one hash tag, so its two keys share a cluster slot::

    <ns>:state:docs:{<dotted namespace>}        hash  v:<key> value JSON, c:<key> created,
                                                      u:<key> updated
    <ns>:state:docs:{<dotted namespace>}:keys   sorted set  <key>, all scores 0 (key order)

A put and a delete are one Lua script each (``state_doc_*.lua``); a search reads
the key index in lexical order, a batch at a time, and the values beside it. The
namespaces are listed by a SCAN of the key indexes (an index emptied by its last
delete is gone): no index of namespaces, which a put would have to write in another
slot than its document's.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from redis.asyncio import Redis

from reactq.shared.redis_client import lua_source
from reactq.shared.state import document_store as docs
from reactq.shared.state.document_store import Document, DocumentSearch, Namespace, NamespaceLike

_PUT = lua_source(__name__, "state_doc_put")
_DELETE = lua_source(__name__, "state_doc_delete")


def _text(raw: Any) -> str:
    return raw.decode() if isinstance(raw, bytes) else str(raw)


class RedisDocuments(DocumentSearch):
    """The DocumentStore contract on Redis; mixed into ``RedisStateStore``."""

    redis: Redis
    namespace: str

    def _doc_keys(self, space: Namespace) -> list[str]:
        base = f"{self.namespace}:state:docs:{{{docs.dotted(space)}}}"
        return [base, f"{base}:keys"]

    async def put_document(
        self, namespace: NamespaceLike, key: str, value: Mapping[str, Any]
    ) -> Document:
        """Store ``value`` under ``key`` (one script); see DocumentStore."""
        space = docs.check_namespace(namespace)
        key = docs.check_key(key)
        text = docs.dump_document_value(value)
        now = repr(time.time())
        put = self.redis.register_script(_PUT)
        created = await put(keys=self._doc_keys(space), args=[key, text, now])
        return Document(
            namespace=space,
            key=key,
            value=json.loads(text),
            created_at=float(_text(created)),
            updated_at=float(now),
        )

    async def _documents(self, space: Namespace, keys: list[str]) -> list[Document]:
        if not keys:
            return []
        fields = [f"{kind}:{key}" for key in keys for kind in ("v", "c", "u")]
        raw = await self.redis.hmget(self._doc_keys(space)[0], fields)
        found: list[Document] = []
        for n, key in enumerate(keys):
            value, created, updated = raw[3 * n : 3 * n + 3]
            if value is None:
                continue  # deleted between the index's read and this one
            found.append(
                Document(
                    namespace=space,
                    key=key,
                    value=json.loads(value),
                    created_at=float(_text(created)),
                    updated_at=float(_text(updated)),
                )
            )
        return found

    async def get_document(self, namespace: NamespaceLike, key: str) -> Document | None:
        """The document, or None."""
        space = docs.check_namespace(namespace)
        found = await self._documents(space, [docs.check_key(key)])
        return found[0] if found else None

    async def delete_document(self, namespace: NamespaceLike, key: str) -> bool:
        """Forget the document; False when there was none."""
        space = docs.check_namespace(namespace)
        key = docs.check_key(key)
        remove = self.redis.register_script(_DELETE)
        return bool(await remove(keys=self._doc_keys(space), args=[key]))

    async def list_namespaces(self) -> list[Namespace]:
        """Every namespace that holds a document, in order (a SCAN: every key index)."""
        base = re.sub(r"([*?\[\]\\])", r"\\\1", f"{self.namespace}:state:docs:")
        start = len(self.namespace) + len(":state:docs:{")
        found = {
            tuple(_text(key)[start : -len("}:keys")].split("."))
            async for key in self.redis.scan_iter(match=base + "{*}:keys", count=500)
        }
        return sorted(found)

    async def _documents_in_key_order(
        self, space: Namespace, *, after: str | None, prefix: str | None, batch: int
    ) -> AsyncIterator[Document]:
        index = self._doc_keys(space)[1]
        # Keys are ASCII: "[prefix" .. "(prefix\x7f" holds exactly those it starts.
        low = f"({after}" if after is not None else "-"
        if prefix and (after is None or after < prefix):
            low = f"[{prefix}"
        high = f"({prefix}\x7f" if prefix else "+"
        while True:
            keys = [
                _text(k)
                for k in await self.redis.zrange(index, low, high, bylex=True, offset=0, num=batch)
            ]
            for document in await self._documents(space, keys):
                yield document
            if len(keys) < batch:
                return
            low = f"({keys[-1]}"
