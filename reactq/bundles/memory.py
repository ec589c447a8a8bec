"""The memory tools: what an agent remembers of a user (or a team, a project) across
sessions, in the long-term store (``Producer.store``; ``shared/state/document_store.py``).

Each call works in one namespace, chosen from the turn it serves::

    from reactq.bundles import memory_tools

    agent = Agent(name="assistant",
                  tools=memory_tools(namespace=lambda ctx: ("users", ctx.metadata["user_id"])))

and kept inside the tenant the turn acts for (``ToolContext.tenant``, the API key that
submitted it; ``shared/tenancy.py``): the namespace chosen is put under the tenant's
prefix (``acme-users.alice`` for a key with ``prefix=acme-``), where that key's
``/v1/store`` routes find it and no other tenant's key, turn or metadata can reach.
So the metadata only picks a user among the tenant's own; a turn with no tenant (a
gateway without keys, an unscoped key, a producer that named none) uses the namespace
as chosen.

``remember`` stores a fact (``{"text": ...}``, keyed by a digest of the text unless
the model names a key, so a re-run call stores it once), ``recall`` lists the facts
whose key or text contains a query, and ``forget`` deletes one. A fact saved in one
session is found in every other session whose turns choose the same namespace, and
by the application (``producer.store.search(("users", "u-42"))``).
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import Annotated

from pydantic import Field

from reactq.shared.errors import ReactqError, ReadOnlyError, ToolError
from reactq.shared.settings import Settings
from reactq.shared.state import open_store
from reactq.shared.state.document_store import (
    DocumentStore,
    Namespace,
    NamespaceLike,
    TenantDocuments,
    check_namespace,
    tenant_namespace,
)
from reactq.worker.agent.tools import Tool, ToolContext, tool

__all__ = ["MemoryToolError", "memory_tools"]

NamespaceChoice = NamespaceLike | Callable[[ToolContext], NamespaceLike]
"""A namespace, or how to choose one from the turn's ``ToolContext``."""


class MemoryToolError(ToolError):
    """A memory tool could not do what the model asked: no namespace for this turn, a
    bad key or fact (the model reads ``[memory_error] ...``)."""

    code = "memory_error"


class _Opener:
    """The store the tools use: the one given, else one opened from the settings on
    the running loop (a worker's single loop) at the first call."""

    def __init__(self, store: DocumentStore | None, settings: Settings | None) -> None:
        self._given = store
        self._settings = settings
        self._opened: dict[asyncio.AbstractEventLoop, asyncio.Task[DocumentStore]] = {}

    async def __call__(self) -> DocumentStore:
        if self._given is not None:
            return self._given
        loop = asyncio.get_running_loop()
        task = self._opened.get(loop)
        if task is None:
            # One task a loop: concurrent first calls share the one store it opens.
            task = self._opened[loop] = loop.create_task(self._open())
        return await asyncio.shield(task)

    async def _open(self) -> DocumentStore:
        settings = self._settings or Settings.from_env()
        return await open_store(settings.database_url, namespace=settings.namespace)


def _chooser(namespace: NamespaceChoice) -> Callable[[ToolContext], Namespace]:
    """The namespace a call chose, checked as its turn's tenant will see it (the store
    the tools use, ``TenantDocuments``, puts it under the tenant's prefix)."""
    fixed = None if callable(namespace) else check_namespace(namespace)

    def choose(ctx: ToolContext) -> Namespace:
        try:
            chosen = fixed if fixed is not None else namespace(ctx)  # type: ignore[operator]
        except Exception as exc:
            raise MemoryToolError(
                f"no memory namespace for this turn ({type(exc).__name__}: {exc})"
            ) from None
        try:
            tenant_namespace(ctx.tenant, chosen)
            return check_namespace(chosen)
        except ReactqError as exc:
            raise MemoryToolError(f"this turn's memory namespace is invalid: {exc}") from None

    return choose


def memory_tools(
    namespace: NamespaceChoice,
    *,
    store: DocumentStore | None = None,
    settings: Settings | None = None,
    read_only: bool = False,
) -> list[Tool]:
    """``remember``, ``recall`` and ``forget``, for ``Agent(tools=[...])``.

    ``namespace`` is a namespace (``("team", "ops")`` or ``"team.ops"``) or a function
    of the turn's ``ToolContext`` returning one (its ``metadata``, ``context``,
    ``session_id``); a function that raises makes the call a tool error the model
    reads. ``store`` is the store to use (a ``StateStore``); by default each worker
    opens the state database of ``settings`` (``Settings.from_env()``), where
    ``Producer.store`` finds the same documents. ``read_only`` leaves out
    ``remember`` and ``forget``. Every call keeps to its turn's tenant
    (``ToolContext.tenant``): the namespace goes under the tenant's prefix, and a
    read-only key's turn remembers and forgets nothing.
    """
    choose = _chooser(namespace)
    opened = _Opener(store, settings)

    async def tenants(ctx: ToolContext) -> TenantDocuments:
        # Whatever the namespace, the call reaches its turn's tenant's documents only.
        return TenantDocuments(await opened(), ctx.tenant)

    @tool(writes=True)
    async def remember(
        fact: Annotated[str, Field(min_length=1, max_length=4000)],
        ctx: ToolContext,
        key: Annotated[str | None, Field(pattern=r"^[A-Za-z0-9._:@+-]{1,256}$")] = None,
    ) -> str:
        """Remember a fact for later conversations (about the user, their preferences,
        decisions made). Give a key to replace a fact remembered under it."""
        space = choose(ctx)
        name = key or "m-" + hashlib.sha256(fact.encode("utf-8", "replace")).hexdigest()[:16]
        value = {"text": fact, "session_id": ctx.session_id, "turn_id": ctx.turn_id}
        try:
            await (await tenants(ctx)).put_document(space, name, value)
        except ReadOnlyError as exc:
            raise MemoryToolError(exc.message) from None
        return f"Remembered as {name}."

    @tool(read_only=True)
    async def recall(
        ctx: ToolContext,
        query: Annotated[str, Field(max_length=200)] = "",
        limit: Annotated[int, Field(ge=1, le=50)] = 10,
    ) -> str:
        """Recall remembered facts whose text contains ``query`` (every fact when it is
        empty), one a line as ``key: fact``."""
        space = choose(ctx)
        found = await tenants(ctx)
        page = await found.search_documents(space, query=query or None, limit=limit)
        if not page.documents:
            return "Nothing remembered" + (f" matches {query!r}." if query else ".")
        lines = [f"{d.key}: {d.value.get('text', d.value)}" for d in page.documents]
        if page.next_cursor is not None:
            lines.append(f"[more facts match; ask for more than {limit}, or narrow the query]")
        return "\n".join(lines)

    @tool(writes=True)
    async def forget(
        key: Annotated[str, Field(pattern=r"^[A-Za-z0-9._:@+-]{1,256}$")], ctx: ToolContext
    ) -> str:
        """Forget the fact remembered under ``key`` (as ``recall`` lists it)."""
        space = choose(ctx)
        try:
            forgotten = await (await tenants(ctx)).delete_document(space, key)
        except ReadOnlyError as exc:
            raise MemoryToolError(exc.message) from None
        if forgotten:
            return f"Forgot {key}."
        return f"Nothing was remembered as {key}."

    return [recall] if read_only else [remember, recall, forget]
