"""Look-ups behind ``GET /v1/turns/{id}`` and ``GET /readyz``."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from fastapi.responses import JSONResponse
from kombu import Connection

from reactq.producer.gateway_models import PendingCall, Readiness, TurnInfo
from reactq.shared.events import FinalEvent, parse_event
from reactq.shared.redis_client import text

if TYPE_CHECKING:
    from reactq.producer.client import Producer
    from reactq.producer.gateway import Gateway

SCAN_BATCH = 500
CHECK_TIMEOUT = 3.0


async def find_turn(producer: Producer, turn_id: str) -> TurnInfo | None:
    """A recent turn's status, latest attempt and final, or None if Redis forgot it.

    Reads the session's stream newest first until the turn's ``queued`` event; the
    stream is capped, so this is bounded.
    """
    found = await producer.queue.turn_status(turn_id)
    if found is None:
        return None
    session_id, status = found
    key = producer.keys.events(session_id)
    attempt = 0
    final: FinalEvent | None = None
    upper = "+"
    while True:
        entries: list[Any] = await producer.redis.xrevrange(key, upper, "-", count=SCAN_BATCH) or []
        done = len(entries) < SCAN_BATCH
        for raw_id, fields in entries:
            upper = "(" + text(raw_id)
            payload = fields.get(b"e", fields.get("e"))
            # A cheap test before parsing: most events of a busy session are other turns'.
            if payload is None or turn_id.encode() not in (
                payload if isinstance(payload, bytes) else payload.encode()
            ):
                continue
            event = parse_event(payload, event_id=text(raw_id))
            if event.turn_id != turn_id:
                continue
            if event.type == "started":
                attempt = max(attempt, event.attempt)
            elif isinstance(event, FinalEvent) and final is None:
                final = event
                attempt = max(attempt, event.attempt)
            elif event.type == "queued":
                done = True
                break
        if done:
            break
    if final is not None:
        status = final.status
    waiting = [
        PendingCall(
            call_id=a.call_id,
            tool=a.tool,
            arguments=a.arguments,
            requested_at=a.requested_at,
            expires_at=a.expires_at,
        )
        for a in await producer.approvals.waiting(session_id)
        if a.turn_id == turn_id
    ]
    return TurnInfo(
        turn_id=turn_id,
        session_id=session_id,
        status=status,
        attempt=attempt,
        final=final,
        pending_approvals=waiting,
    )


async def _broker_ok(url: str) -> None:
    def connect() -> None:
        with Connection(url, connect_timeout=CHECK_TIMEOUT) as conn:
            conn.ensure_connection(max_retries=1)

    await asyncio.to_thread(connect)


async def readiness(gateway: Gateway) -> JSONResponse:
    """Ask Redis, the broker and the state store; 503 naming any that does not answer."""
    producer = gateway.producer

    async def store_ok() -> None:
        await (await producer.store()).get_session("readyz-probe")

    checks = {
        "redis": producer.redis.ping(),
        "broker": _broker_ok(gateway.settings.effective_broker_url),
        "state_store": store_ok(),
    }
    results: dict[str, str] = {}
    for name, check in checks.items():
        try:
            await asyncio.wait_for(check, CHECK_TIMEOUT)
            results[name] = "ok"
        except Exception as exc:
            # The class only: a message may carry a URL with a password.
            results[name] = f"unavailable ({type(exc).__name__})"
    ready = all(v == "ok" for v in results.values())
    body = Readiness(status="ready" if ready else "unavailable", checks=results)
    return JSONResponse(body.model_dump(), status_code=200 if ready else 503)
