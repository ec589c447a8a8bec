"""``GET /v1/turns/{turn_id}/events``: a turn's events as one JSON document, from its
session's Redis stream while that holds the turn, else from the audit log (the
long-term record), so a finished turn's events outlive the stream's TTL. The watch page
(``static/app.js``) shows a past turn with it."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query
from fastapi import Path as PathParam
from pydantic import BaseModel

from reactq.producer.gateway_deps import ProducerDep
from reactq.producer.gateway_errors import GatewayError, state_store_errors
from reactq.producer.gateway_models import ErrorBody
from reactq.producer.gateway_scopes import Touches, touches
from reactq.shared.errors import ConfigError
from reactq.shared.events import Event, QueuedEvent

TURN_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"

Source = Literal["auto", "stream", "audit"]


class TurnEvents(BaseModel):
    """A turn's events, oldest first."""

    turn_id: str
    """The turn."""
    session_id: str
    """Its session."""
    source: Literal["stream", "audit"]
    """Where they were read: the session's Redis stream, or the audit log."""
    events: list[Event]
    """Every event of the turn (all attempts), in stream order."""


router = APIRouter(tags=["turns"])


@router.get(
    "/turns/{turn_id}/events",
    dependencies=[touches(Touches.TURN)],
    response_model=TurnEvents,
    summary="A turn's events (from the stream, or the audit log once it expired)",
    responses={
        404: {"model": ErrorBody, "description": "No such turn (``turn_not_found``)"},
        501: {
            "model": ErrorBody,
            "description": "The audit log needs a SQL state store (``not_implemented``)",
        },
    },
)
async def turn_events(
    turn_id: Annotated[str, PathParam(pattern=TURN_ID_PATTERN, description="The turn's id")],
    producer: ProducerDep,
    source: Annotated[
        Source,
        Query(
            description="``stream``: the session's Redis stream; ``audit``: the audit log; "
            "``auto`` (default): the stream while it holds the turn from its ``queued``, "
            "else the audit log"
        ),
    ] = "auto",
) -> TurnEvents:
    """Every event of the turn, oldest first, and where they were read."""
    with state_store_errors():
        info = await producer.turn_info(turn_id)
        if info is None:
            raise GatewayError("no such turn", status=404, error_code="turn_not_found")
        if source != "audit":
            live = [e for e in await producer.bus.read(info.session_id) if e.turn_id == turn_id]
            whole = any(isinstance(e, QueuedEvent) for e in live)
            if source == "stream" or whole:
                return TurnEvents(
                    turn_id=turn_id, session_id=info.session_id, source="stream", events=live
                )
        try:
            kept = await producer.turn_events(turn_id)
        except ConfigError as exc:
            raise GatewayError(exc.message, status=501, error_code="not_implemented") from None
    return TurnEvents(turn_id=turn_id, session_id=info.session_id, source="audit", events=kept)
