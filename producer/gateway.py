"""The HTTP gateway: turns in and events out for services in any language.

An ASGI app (FastAPI); ``reactq serve`` runs it under uvicorn, and
``uvicorn reactq.producer.gateway:app`` works too (without API keys it then
answers loopback clients only; ``reactq serve`` also gives request heads a
deadline). It is stateless: run as many as you like behind a load balancer, and
any of them can stream any session.

::

    POST /v1/sessions/{session_id}/turns     submit a turn            202 409 413 422
    GET  /v1/sessions/{session_id}/events    Server-Sent Events: replay, then live
    GET  /v1/sessions/{session_id}/messages  the conversation (?branch=)
    GET  /v1/turns/{turn_id}                 status, attempt, final, pending approvals
    GET  /v1/turns/{turn_id}/events          its events: the stream's, else the audit log's
    POST /v1/turns/{turn_id}/cancel          ask the pool to cancel it  202 404 409
    POST /v1/turns/{turn_id}/undo            revert its file changes  200 404 409
    POST /v1/turns/{turn_id}/decisions       approve or deny waiting tool calls  200 404 409
    GET|PATCH|DELETE /v1/sessions[/{session_id}[/turns|/branches|/active_branch|/truncate]]
                                             sessions, their turns and branches
                                             (``gateway_sessions.py``)
    GET|PUT|DELETE /v1/store/{namespace}[/{key}]
                                             the long-term store (``gateway_store.py``)
    GET|POST|DELETE /v1/schedules[/{schedule_id}[/pause|/resume]]
                                             scheduled turns (``gateway_schedules.py``)
    GET  /healthz  /readyz  /openapi.json  /  (the watch page)

Every ``/v1`` route wants ``Authorization: Bearer KEY`` when REACTQ_API_KEYS is set;
a scoped key reaches its tenant's sessions and turns only, each route declaring what
it touches (``gateway_scopes.py``), and every turn it submits carries the key's
identity (``shared/tenancy.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, Header, Query, Request, Security
from fastapi import Path as PathParam
from fastapi.responses import FileResponse, StreamingResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.staticfiles import StaticFiles
from pydantic import AfterValidator
from redis.asyncio import Redis
from starlette.background import BackgroundTask
from starlette.middleware.cors import CORSMiddleware

from reactq.producer.client import Producer
from reactq.producer.gateway_agents import router as agents_router
from reactq.producer.gateway_errors import (
    ERROR_RESPONSES,
    SUBMIT_REFUSALS,
    GatewayError,
    TextSafeJSONResponse,
    install_error_handlers,
    state_store_errors,
)
from reactq.producer.gateway_fanout import Fanout
from reactq.producer.gateway_models import (
    CancelAccepted,
    DecisionMade,
    DecisionsAccepted,
    DecisionsRequest,
    ErrorBody,
    Health,
    Readiness,
    SessionMessage,
    TurnAccepted,
    TurnCreate,
)
from reactq.producer.gateway_schedules import router as schedules_router
from reactq.producer.gateway_scopes import (
    KeyScope,
    Touches,
    check_declared,
    enforce_scope,
    pool_wide,
    scope_of,
    touches,
)
from reactq.producer.gateway_security import ApiKeys, BodyLimit, LoopbackOnly, RequireKey
from reactq.producer.gateway_sessions import router as sessions_router
from reactq.producer.gateway_sse import event_stream
from reactq.producer.gateway_store import router as store_router
from reactq.producer.gateway_text import refuse_unencodable
from reactq.producer.gateway_turn_events import router as turn_events_router
from reactq.producer.gateway_turns import readiness
from reactq.producer.metrics import install_metrics
from reactq.producer.turn_lookup import TurnInfo
from reactq.shared.bus import validate_stream_id
from reactq.shared.errors import (
    ApprovalClosedError,
    ApprovalNotFoundError,
    BranchNotFoundError,
    DecisionConflictError,
    UnknownAgentError,
)
from reactq.shared.file_undo import NothingToUndoError, UndoError, UndoReport
from reactq.shared.logs import configure_logging
from reactq.shared.protocol.outcomes import CancelOutcome
from reactq.shared.redis_urls import node_url
from reactq.shared.settings import Settings
from reactq.shared.turns import SESSION_ID_RE, TurnStatus

logger = logging.getLogger(__name__)

STATIC = Path(__file__).resolve().parent / "static"
# ``[0-9]``, not ``\d``: pydantic's regex engine takes any script's digits for ``\d``.
# The pattern is the shape (and what the OpenAPI document shows); the range check
# (each part at most 2**64-1) is ``validate_stream_id``.
STREAM_ID_PATTERN = r"^([0-9]{1,20}(-[0-9]{1,20})?|\$)$"
TURN_ID_PATTERN = r"^[A-Za-z0-9_.:-]{1,128}$"


def _stream_id(value: str | None) -> str | None:
    # Raises InvalidStreamIdError, a ValueError: pydantic reports it as a 422 naming the
    # parameter, as for a value that does not match the pattern.
    return None if value is None else validate_stream_id(value)


SessionId = Annotated[
    str,
    PathParam(
        pattern=SESSION_ID_RE.pattern,
        description="The session (1-128 of [A-Za-z0-9._:-], not '.' or '..')",
    ),
]
TurnId = Annotated[str, PathParam(pattern=TURN_ID_PATTERN, description="The turn's id")]

GUARDED_PATHS = ("/v1", "/metrics")
"""Paths that want an API key (when keys are configured)."""

_bearer = HTTPBearer(auto_error=False, description="One of the keys in REACTQ_API_KEYS")


class Gateway:
    """What the routes share: settings, the producer and the fan-out."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.keys = ApiKeys(settings.api_keys)
        self.producer = Producer(settings)
        # On a cluster, one node: a PUBLISH reaches the subscribers of every node.
        self.pubsub_redis: Redis = Redis.from_url(node_url(settings.redis_url))
        self.fanout = Fanout(
            self.pubsub_redis,
            self.producer.keys,
            settings.sse_client_buffer,
            settings.sse_client_buffer_bytes,
        )

    async def start(self) -> None:
        """Open the pub/sub connection (retrying in the background if Redis is down)."""
        try:
            await self.fanout.start()
        except Exception as exc:
            logger.warning("Redis pub/sub unavailable at startup (%s); retrying", exc)
            self._retry = asyncio.create_task(self.fanout.restart())

    async def close(self) -> None:
        """Release every connection."""
        await self.fanout.close()
        await self.pubsub_redis.aclose()
        await self.producer.close()


def _gateway(request: Request) -> Gateway:
    gateway: Gateway = request.app.state.gateway
    return gateway


GatewayDep = Annotated[Gateway, Depends(_gateway)]


async def _require_key(
    gateway: GatewayDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> None:
    if not gateway.keys.accepts(credentials.credentials if credentials else None):
        raise GatewayError(
            "a valid API key is required: send 'Authorization: Bearer KEY'",
            status=401,
            error_code="unauthorized",
        )


async def _caller(
    gateway: GatewayDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(_bearer)],
) -> str | None:
    """The name of the API key the request carries (None when the gateway has none)."""
    return gateway.keys.identify(credentials.credentials if credentials else None)


CallerDep = Annotated[str | None, Depends(_caller)]
ScopeDep = Annotated[KeyScope | None, Depends(scope_of)]

# The key first (401), then read-only (403), then text UTF-8 cannot carry in a write's
# body (422, before anything is stored); each route's ``touches`` declaration then
# answers 404 outside the key's tenant and agents.
_GUARDS = [Depends(_require_key), Depends(enforce_scope), Depends(refuse_unencodable)]

router = APIRouter(prefix="/v1", dependencies=_GUARDS, responses=ERROR_RESPONSES)


@router.post(
    "/sessions/{session_id}/turns",
    dependencies=[touches(Touches.SESSION)],
    status_code=202,
    response_model=TurnAccepted,
    summary="Submit a turn",
    responses={409: ERROR_RESPONSES[409], **SUBMIT_REFUSALS, 501: ERROR_RESPONSES[501]},
)
async def submit_turn(
    session_id: SessionId, body: TurnCreate, gateway: GatewayDep, scope: ScopeDep
) -> TurnAccepted:
    """Validate and enqueue a turn; 409 when the strategy rejects it. The turn carries
    the identity of the request's key (``TurnRequest.tenant``): no field of the body
    sets it."""
    if scope is not None and not scope.may_run(body.agent):
        # Answered as an agent nobody hosts, so a key does not learn which others exist.
        raise GatewayError(
            f"no worker hosts agent {body.agent!r}: start one with "
            f"`reactq worker --agents MODULE:ATTR` (namespace {gateway.settings.namespace!r})",
            status=422,
            error_code=UnknownAgentError.code,
            field="body.agent",
        )
    handle = await gateway.producer.submit(
        session_id,
        body.message,
        agent=body.agent,
        strategy=body.strategy,
        metadata=body.metadata,
        context=body.context,
        overrides=body.overrides,
        webhook=body.webhook,
        tenant=scope,
    )
    queued_id = handle.queued.id or "0"
    ms = int(queued_id.split("-")[0])
    # Start the stream just before the turn's ``queued`` event, so it is replayed too.
    events_url = f"/v1/sessions/{session_id}/events?turn_id={handle.turn_id}&after={max(ms - 1, 0)}"
    return TurnAccepted(
        turn_id=handle.turn_id,
        session_id=session_id,
        status=TurnStatus.QUEUED,
        events_url=events_url,
    )


@router.get(
    "/sessions/{session_id}/events",
    dependencies=[touches(Touches.SESSION)],
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
    if turn_id is not None:
        found = await gateway.producer.queue.turn_status(turn_id)
        if found is None or found[0] != session_id:
            raise GatewayError(
                "no such turn in this session", status=404, error_code="turn_not_found"
            )
    try:
        listener = await gateway.fanout.attach(session_id)
    except (RuntimeError, TimeoutError) as exc:
        raise GatewayError(
            "live events are unavailable; retry", status=503, error_code="unavailable"
        ) from exc
    body = event_stream(
        gateway.producer.redis,
        gateway.producer.keys,
        gateway.fanout,
        listener,
        after=None if start == "$" else start,
        turn_id=turn_id,
        heartbeat_seconds=gateway.settings.sse_heartbeat_seconds,
    )
    return StreamingResponse(
        body,
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        # Also detaches when the client left before the stream began.
        background=BackgroundTask(gateway.fanout.detach, listener),
    )


@router.get(
    "/sessions/{session_id}/messages",
    dependencies=[touches(Touches.SESSION)],
    response_model=list[SessionMessage],
    summary="A session's conversation",
    responses={
        404: {
            "model": ErrorBody,
            "description": "No such session (``session_not_found``) or no such branch in it "
            "(``branch_not_found``)",
        },
        503: ERROR_RESPONSES[503],
    },
)
async def session_messages(
    session_id: SessionId,
    gateway: GatewayDep,
    branch: Annotated[
        str | None,
        Query(pattern=TURN_ID_PATTERN, description="A branch id (default: the active one)"),
    ] = None,
) -> list[SessionMessage]:
    """The messages of one branch of the session, oldest first, each with its
    ``sequence`` in the branch and the ``turn_id`` that wrote it."""
    with state_store_errors():
        store = await gateway.producer.state_store()
        if await store.get_session(session_id) is None:
            raise GatewayError("no such session", status=404, error_code="session_not_found")
        if branch is not None and branch not in {
            b.branch_id for b in await store.list_branches(session_id)
        }:
            raise GatewayError(
                f"session {session_id} has no branch {branch!r}",
                status=404,
                error_code=BranchNotFoundError.code,
            )
        messages = await store.get_messages(session_id, branch_id=branch)
    return [SessionMessage.of(m) for m in messages]


@router.get(
    "/turns/{turn_id}",
    dependencies=[touches(Touches.TURN)],
    response_model=TurnInfo,
    summary="A turn's status",
    responses={404: ERROR_RESPONSES[404], 503: ERROR_RESPONSES[503]},
)
async def turn_info(turn_id: TurnId, gateway: GatewayDep) -> TurnInfo:
    """Status, latest attempt, final event, usage and times of a turn: from its
    session's stream while that lives, then from the state store."""
    with state_store_errors():
        info = await gateway.producer.turn_info(turn_id)
    if info is None:
        raise GatewayError("no such turn", status=404, error_code="turn_not_found")
    return info


@router.post(
    "/turns/{turn_id}/cancel",
    dependencies=[touches(Touches.TURN)],
    status_code=202,
    response_model=CancelAccepted,
    summary="Cancel a turn",
    responses={
        404: ERROR_RESPONSES[404],
        409: {
            "model": ErrorBody,
            "description": "The turn has finished already (``turn_finished``; ``turn_id`` "
            "names it): nothing to cancel",
        },
        501: ERROR_RESPONSES[501],
    },
)
async def cancel_turn(turn_id: TurnId, gateway: GatewayDep) -> CancelAccepted:
    """Ask the pool to cancel a queued or running turn (its final says ``cancelled``)."""
    cancel = getattr(gateway.producer, "cancel", None)
    if cancel is None:
        raise GatewayError(
            "cancellation is not available in this version of reactq",
            status=501,
            error_code="not_implemented",
        )
    result = await cancel(turn_id)
    if result.outcome is CancelOutcome.UNKNOWN or result.session_id is None:
        raise GatewayError("no such turn", status=404, error_code="turn_not_found")
    if result.outcome is CancelOutcome.ALREADY_FINISHED:
        raise GatewayError(
            f"turn {turn_id} has finished already"
            + (f" ({result.status})" if result.status else "")
            + ": nothing to cancel",
            status=409,
            error_code="turn_finished",
            turn_id=turn_id,
        )
    return CancelAccepted(
        turn_id=turn_id, session_id=result.session_id, outcome=result.outcome, status=result.status
    )


@router.post(
    "/turns/{turn_id}/undo",
    dependencies=[touches(Touches.TURN)],
    response_model=UndoReport,
    summary="Undo a turn's file changes",
    responses={
        404: {
            "model": ErrorBody,
            "description": "The turn changed no file, or there is no such turn "
            "(``nothing_to_undo``)",
        },
        409: {
            "model": ErrorBody,
            "description": "Nothing was reverted: a file changed since the turn changed it "
            "(``undo_conflict``, the message names it), the turn was undone already "
            "(``already_undone``) or has not finished (``undo_error``)",
        },
        503: ERROR_RESPONSES[503],
    },
)
async def undo_turn(turn_id: TurnId, gateway: GatewayDep) -> UndoReport:
    """Revert the file changes a finished turn made in its session's workspace, newest
    first, all or nothing. The gateway must mount the workspace root
    (``REACTQ_WORKSPACE_ROOT``), as the workers do."""
    try:
        with state_store_errors():
            return await gateway.producer.undo(turn_id)
    except UndoError as exc:
        status = 404 if isinstance(exc, NothingToUndoError) else 409
        raise GatewayError(exc.message, status=status, error_code=exc.code) from None


@router.post(
    "/turns/{turn_id}/decisions",
    dependencies=[touches(Touches.TURN)],
    response_model=DecisionsAccepted,
    summary="Approve or deny a turn's waiting tool calls",
    responses={404: ERROR_RESPONSES[404], 409: ERROR_RESPONSES[409]},
)
async def decide_turn(
    turn_id: TurnId, body: DecisionsRequest, gateway: GatewayDep, caller: CallerDep
) -> DecisionsAccepted:
    """Record decisions on the tool calls a turn waits for (all or none). 404: no such
    turn or call; 409: a call was decided already (of two racing deciders exactly one
    wins) or the turn waits for nothing.

    The decider recorded is the API key's name: a ``by`` in the body is what the
    caller says about itself, so it is kept after the key's name (``ops for alice``),
    never instead of it."""
    producer = gateway.producer
    if caller is None:
        by = body.by or "gateway"
    else:
        by = f"{caller} for {body.by}" if body.by else caller
    try:
        outcome = await producer.decide(turn_id, body.decisions, notes=body.notes, by=by)
    except ApprovalNotFoundError as exc:
        raise GatewayError(exc.message, status=404, error_code=exc.code) from None
    except (ApprovalClosedError, DecisionConflictError) as exc:
        raise GatewayError(exc.message, status=409, error_code=exc.code) from None
    return DecisionsAccepted(
        turn_id=turn_id,
        session_id=outcome.session_id,
        decided=[
            DecisionMade(call_id=d.call_id, approved=d.approved, reason=d.reason, by=d.by)
            for d in outcome.decided
        ],
        ready=outcome.ready,
    )


def create_app(settings: Settings | None = None, *, insecure: bool = False) -> FastAPI:
    """The gateway as an ASGI app, configured from ``settings`` (default: the env).

    Without API keys it serves loopback clients only (403 for others) unless
    ``insecure`` (``reactq serve --insecure``).
    """
    settings = settings or Settings.from_env()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        gateway = Gateway(settings)
        app.state.gateway = gateway
        await gateway.start()
        try:
            yield
        finally:
            await gateway.close()

    app = FastAPI(
        title="reactq gateway",
        version="1",
        summary="Submit turns to a reactq pool and stream their events.",
        lifespan=lifespan,
        default_response_class=TextSafeJSONResponse,
    )
    install_error_handlers(app)
    app.include_router(router)
    app.include_router(
        sessions_router,
        prefix="/v1",
        dependencies=_GUARDS,
        responses={**ERROR_RESPONSES, 503: ERROR_RESPONSES[503]},
    )
    app.include_router(agents_router, prefix="/v1", dependencies=_GUARDS, responses=ERROR_RESPONSES)
    app.include_router(
        turn_events_router,
        prefix="/v1",
        dependencies=_GUARDS,
        responses={**ERROR_RESPONSES, 503: ERROR_RESPONSES[503]},
    )
    app.include_router(
        store_router,
        prefix="/v1",
        dependencies=_GUARDS,
        responses={**ERROR_RESPONSES, 503: ERROR_RESPONSES[503]},
    )
    app.include_router(
        schedules_router,
        prefix="/v1",
        dependencies=_GUARDS,
        responses={**ERROR_RESPONSES, 503: ERROR_RESPONSES[503]},
    )
    install_metrics(app, [Depends(_require_key), Depends(pool_wide)])
    check_declared(app)

    @app.get("/healthz", response_model=Health, tags=["health"])
    async def healthz() -> Health:
        """The process is up."""
        return Health()

    @app.get(
        "/readyz",
        response_model=Readiness,
        tags=["health"],
        responses={503: {"model": Readiness, "description": "A service does not answer"}},
    )
    async def readyz(request: Request) -> Any:
        """Redis, the broker and the state store answer (503 naming the one that does not)."""
        return await readiness(_gateway(request))

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    # The last added runs first. From the outside in: who may call at all, CORS (so
    # a browser can read the errors below), the key, then the body: a request is
    # refused on its headers before any of its body is read.
    app.add_middleware(
        BodyLimit, limit=settings.max_request_bytes, timeout=settings.request_timeout_seconds
    )
    keys = ApiKeys(settings.api_keys)
    app.add_middleware(RequireKey, keys=keys, prefixes=GUARDED_PATHS)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
            allow_headers=["Authorization", "Content-Type", "Last-Event-ID"],
            expose_headers=["Content-Type"],
        )
    if not keys.enabled and not insecure:
        app.add_middleware(LoopbackOnly)
    return app


def __getattr__(name: str) -> Any:
    # ``uvicorn reactq.producer.gateway:app`` builds the app from the environment on demand,
    # so importing this module has no side effects.
    if name == "app":
        settings = Settings.from_env()
        # Run by a server directly: log like ``reactq serve``, the server's own lines
        # included (uvicorn configured its loggers before importing this).
        configure_logging(settings)
        return create_app(settings)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
