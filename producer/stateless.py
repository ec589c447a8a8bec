"""Stateless runs: one turn on a conversation the caller holds, with nothing kept.

A stateless run puts the caller's prior messages in a throwaway session (its id
``<tenant prefix>stateless-<hex>``, its metadata ``{"reactq.stateless": true}``), runs
the turn there as any other (queued, checkpointed, resumed by another worker if one is
lost), and deletes the session once the caller has the final, or gives up on it (the
turn is cancelled first). The audit log keeps the turn's events, as for any deleted
session.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from reactq.producer.handles import TurnHandle
from reactq.shared.content import ContentPart
from reactq.shared.messages import ChatMessage
from reactq.shared.tenancy import TenantIdentity

if TYPE_CHECKING:
    from reactq.producer.client import Producer

__all__ = ["STATELESS_KEY", "stateless_session_id", "stateless_turn"]

logger = logging.getLogger(__name__)

STATELESS_KEY = "reactq.stateless"
"""The metadata key marking a stateless run's throwaway session (while it exists)."""


def stateless_session_id(tenant: TenantIdentity | None = None) -> str:
    """A new throwaway session id, within ``tenant``'s prefix."""
    prefix = tenant.prefix if tenant is not None and tenant.prefix else ""
    return f"{prefix}stateless-{uuid.uuid4().hex}"


@contextlib.asynccontextmanager
async def stateless_turn(
    producer: Producer,
    message: str | Sequence[str | ContentPart | Mapping[str, Any]],
    *,
    agent: str,
    history: Sequence[ChatMessage] = (),
    metadata: dict[str, Any] | None = None,
    context: dict[str, Any] | None = None,
    overrides: dict[str, Any] | None = None,
    tenant: TenantIdentity | None = None,
) -> AsyncIterator[TurnHandle]:
    """Submit ``message`` to ``agent`` after ``history`` in a throwaway session; yields
    the turn's handle and deletes the session on exit (cancelling the turn if it has not
    ended). Raises what ``Producer.submit`` raises (nothing is left behind then)."""
    session_id = stateless_session_id(tenant)
    store = await producer.state_store()
    await store.ensure_session(session_id, agent)
    try:
        await store.update_metadata(session_id, {STATELESS_KEY: True})
        if history:
            await store.append(session_id, list(history))
        handle = await producer.submit(
            session_id,
            message,
            agent=agent,
            metadata=metadata,
            context=context,
            overrides=overrides,
            tenant=tenant,
        )
        yield handle
    finally:
        try:
            await producer.delete_session(session_id, force=True)
        except Exception as exc:  # the caller's answer stands; say what was left
            logger.warning("stateless session %s was not deleted: %s", session_id, exc)
