"""A session's events as Server-Sent Events (``factory.py`` mounts it under ``/v1``)::

    GET /v1/sessions/{session_id}/events   replay after a point, then live   404 503

``?after=`` (or the ``Last-Event-ID`` header, which wins) is where the replay starts
(``$``: live only); ``?turn_id=`` keeps one turn's events and closes after its final.
The bytes are ``sse.py``'s, the live part ``fanout.py``'s.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query
from fastapi.responses import StreamingResponse
from pydantic import AfterValidator
from starlette.background import BackgroundTask

from reactq.producer.gateway.deps import GatewayDep, SessionId
from reactq.producer.gateway.errors import ERROR_RESPONSES, GatewayError
from reactq.producer.gateway.models import STREAM_ID_PATTERN, TURN_ID_PATTERN
from reactq.producer.gateway.scopes import touches
from reactq.shared.bus import validate_stream_id

__all__ = ["router"]

router = APIRouter(tags=["events"])


def _stream_id(value: str | None) -> str | None:
    # Raises InvalidStreamIdError, a ValueError: pydantic reports it as a 422 naming the
    # parameter, as for a value that does not match the pattern.
    return None if value is None else validate_stream_id(value)


@router.get(
    "/sessions/{session_id}/events",
    dependencies=[touches(session="path.session_id", turn="query.turn_id")],
    response_class=StreamingResponse,
    summary="Stream a session's events (Server-Sent Events)",
    responses={
        200: {
            "description": "``text/event-stream``: each message has ``id:`` (the stream id), "
            "``event:`` (the event type) and ``data:`` (the event's JSON); comments are "
            "keep-alives.",
            "content": {"text/event-stream": {"schema": {"type": "string"}}},
        },
        404: ERROR_RESPONSES[404],
        503: ERROR_RESPONSES[503],
    },
)
async def stream_events(
    session_id: SessionId,
    gateway: GatewayDep,
    after: Annotated[
        str | None,
        Query(
            pattern=STREAM_ID_PATTERN,
            description="Replay after this event id ('0', the default: the whole stream; "
            "'$': live only; each part at most 2**64-1). The Last-Event-ID header wins "
            "over it.",
        ),
        AfterValidator(_stream_id),
    ] = None,
    turn_id: Annotated[
        str | None,
        Query(pattern=TURN_ID_PATTERN, description="Only this turn; closes after its final."),
    ] = None,
    last_event_id: Annotated[
        str | None,
        Header(alias="Last-Event-ID", pattern=STREAM_ID_PATTERN, description="Resume after it."),
        AfterValidator(_stream_id),
    ] = None,
) -> StreamingResponse:
    """Replay the session's events after a point, then follow them live."""
    start = last_event_id or after or "0"
    if turn_id is not None and await gateway.turn_session(turn_id) != session_id:
        raise GatewayError("no such turn in this session", status=404, error_code="turn_not_found")
    try:
        listener = await gateway.fanout.attach(session_id)
    except (RuntimeError, TimeoutError) as exc:
        raise GatewayError(
            "live events are unavailable; retry", status=503, error_code="unavailable"
        ) from exc
    body = gateway.event_stream(listener, after=None if start == "$" else start, turn_id=turn_id)
    return StreamingResponse(
        body,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        # Also detaches when the client left before the stream began.
        background=BackgroundTask(gateway.fanout.detach, listener),
    )
