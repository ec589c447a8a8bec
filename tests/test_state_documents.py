"""Issue 20, item 6: the long-term store's documents on every backend (memory, SQLite,
PostgreSQL, Redis), on real servers: put, get, delete, and search by key prefix, by a
field's value and by text, a page at a time."""

from __future__ import annotations

import uuid

import pytest

from reactq.producer.documents import LongTermStore
from reactq.shared.errors import InvalidCursorError, InvalidDocumentError, InvalidNamespaceError
from reactq.shared.state import StateStore
from tests.state_fixtures import store_fixture, url_fixture

__all__ = ["store_fixture", "url_fixture"]


def space() -> tuple[str, str]:
    return ("users", f"u-{uuid.uuid4().hex[:10]}")


async def test_put_get_delete(store: StateStore) -> None:
    ns = space()
    first = await store.put_document(ns, "fav-color", {"text": "blue", "n": 1})
    assert first.namespace == ns and first.value == {"text": "blue", "n": 1}
    again = await store.put_document(".".join(ns), "fav-color", {"text": "green"})
    assert again.created_at == first.created_at and again.updated_at >= first.updated_at
    got = await store.get_document(list(ns), "fav-color")
    assert got is not None and got.value == {"text": "green"} and got.namespace == ns
    assert await store.get_document(space(), "fav-color") is None  # another user's
    assert await store.delete_document(ns, "fav-color") is True
    assert await store.delete_document(ns, "fav-color") is False
    assert await store.get_document(ns, "fav-color") is None


async def test_search_filters_and_pages(store: StateStore) -> None:
    ns = space()
    for n in range(7):
        await store.put_document(ns, f"fact-{n}", {"text": f"Fact number {n}", "even": n % 2 == 0})
    await store.put_document(ns, "pref-lang", {"text": "Speaks French", "even": True})
    await store.put_document(space(), "fact-0", {"text": "someone else's"})

    page = await store.search_documents(ns, limit=3)
    assert [d.key for d in page.documents] == ["fact-0", "fact-1", "fact-2"]
    keys = [d.key for d in page.documents]
    while page.next_cursor is not None:
        page = await store.search_documents(ns, limit=3, cursor=page.next_cursor)
        keys += [d.key for d in page.documents]
    assert keys == [f"fact-{n}" for n in range(7)] + ["pref-lang"]

    by_prefix = await store.search_documents(ns, prefix="pref-")
    assert [d.key for d in by_prefix.documents] == ["pref-lang"]
    even = await store.search_documents(ns, filter={"even": True}, limit=2)
    assert [d.key for d in even.documents] == ["fact-0", "fact-2"]
    rest = await store.search_documents(ns, filter={"even": True}, cursor=even.next_cursor)
    assert [d.key for d in rest.documents] == ["fact-4", "fact-6", "pref-lang"]
    french = await store.search_documents(ns, query="french")
    assert [d.value["text"] for d in french.documents] == ["Speaks French"]
    both = await store.search_documents(ns, prefix="fact-", query="NUMBER 3")
    assert [d.key for d in both.documents] == ["fact-3"]
    assert (await store.search_documents(space())).documents == []


async def test_bad_input_is_refused_with_its_code(store: StateStore) -> None:
    ns = space()
    for bad in [(), ("a.b",), ("users", ""), "users..x", ("x",) * 9, 42, ("a", 1)]:
        with pytest.raises(InvalidNamespaceError) as caught:
            await store.put_document(bad, "k", {})  # type: ignore[arg-type]
        assert caught.value.code == "invalid_namespace"
    for key in ["", "a/b", "x" * 257, "sp ace"]:
        with pytest.raises(InvalidDocumentError):
            await store.put_document(ns, key, {})
    for value in [[1, 2], "text", {"n": float("nan")}, {1: "x"}, {"big": "x" * (1 << 20)}]:
        with pytest.raises(InvalidDocumentError) as refused:
            await store.put_document(ns, "k", value)  # type: ignore[arg-type]
        assert refused.value.code == "invalid_document"
    assert await store.get_document(ns, "k") is None  # nothing was written
    with pytest.raises(InvalidCursorError):
        await store.search_documents(ns, cursor="not-a-cursor")
    with pytest.raises(InvalidDocumentError):
        await store.search_documents(ns, filter=["x"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="limit"):
        await store.search_documents(ns, limit=0)


async def test_namespaces_are_listed_and_an_emptied_one_goes(store: StateStore) -> None:
    ns = space()
    deeper = (*ns, "notes")
    await store.put_document(ns, "a", {"v": 1})
    await store.put_document(deeper, "b", {"v": 2})
    listed = await store.list_namespaces()
    assert ns in listed and deeper in listed and listed == sorted(listed)
    await store.delete_document(deeper, "b")
    assert deeper not in await store.list_namespaces()

    await store.put_document(deeper, "b", {"v": 2})
    long_term = LongTermStore(lambda: _same(store))
    assert await long_term.namespaces(prefix=ns) == [ns, deeper]
    assert await long_term.namespaces(prefix=ns, suffix=("notes",)) == [deeper]
    assert await long_term.namespaces(prefix=ns, max_depth=1) == [("users",)]
    assert await long_term.namespaces(prefix=ns, limit=1, offset=1) == [deeper]
    with pytest.raises(InvalidDocumentError):
        await long_term.namespaces(max_depth=0)


async def _same(store: StateStore) -> StateStore:
    return store
