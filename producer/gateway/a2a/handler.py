"""The SDK's ``RequestHandler`` for reactq: every A2A method as what it is on the pool.

A task is a turn (its id is the turn id) and a context is a session (its id is the
session id). Sending a message without ``taskId`` submits a turn; sending one that
names a task parked on approval (``input-required``) decides it: ``approve`` runs the
waiting calls, anything else denies them with the text as the reason. Cancelling a
task cancels its turn. Who calls is the gateway's key: a task of a session outside the
key's tenant, or of another agent, is not found.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncGenerator
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.events.event_queue import Event
from a2a.server.request_handlers.request_handler import RequestHandler
from a2a.types.a2a_pb2 import (
    AgentCard,
    CancelTaskRequest,
    DeleteTaskPushNotificationConfigRequest,
    GetExtendedAgentCardRequest,
    GetTaskPushNotificationConfigRequest,
    GetTaskRequest,
    ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse,
    ListTasksRequest,
    ListTasksResponse,
    Message,
    SendMessageRequest,
    SubscribeToTaskRequest,
    Task,
    TaskArtifactUpdateEvent,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import (
    InvalidParamsError,
    InvalidRequestError,
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)

from reactq.producer.gateway.a2a.index import TaskIndex
from reactq.producer.gateway.a2a.messages import approval_answer, input_of
from reactq.producer.gateway.a2a.push import Pusher
from reactq.producer.gateway.a2a.tasks import (
    SETTLED,
    TERMINAL,
    state_of,
    task_of,
    task_with_files,
)
from reactq.producer.gateway.scopes import session_visible
from reactq.producer.gateway.security import KeyScope
from reactq.producer.gateway.service import Gateway
from reactq.producer.turn_lookup import TurnInfo
from reactq.shared.errors import ApprovalError, InvalidTurnError, ReactqError
from reactq.shared.events import ApprovalRequestedEvent, FinalEvent
from reactq.shared.turns import SESSION_ID_RE, MultitaskStrategy, TurnStatus

__all__ = ["CallerState", "ReactqRequestHandler"]

logger = logging.getLogger(__name__)

_POLL_SECONDS = 0.1
"""How often a blocking send looks at a decided turn until it settles again."""


class CallerState:
    """What the endpoint puts in the call's ``ServerCallContext.state``: the agent of
    the path, the caller's key scope and the gateway."""

    AGENT = "reactq.agent"
    SCOPE = "reactq.scope"
    GATEWAY = "reactq.gateway"
    PUSHER = "reactq.pusher"


def _caller(context: ServerCallContext) -> tuple[Gateway, KeyScope | None, str]:
    state = context.state
    return state[CallerState.GATEWAY], state[CallerState.SCOPE], state[CallerState.AGENT]


def _pusher(context: ServerCallContext) -> Pusher:
    pusher: Pusher = context.state[CallerState.PUSHER]
    return pusher


def _new_session(scope: KeyScope | None) -> str:
    prefix = scope.prefix if scope is not None and scope.prefix else ""
    return f"{prefix}a2a-{uuid.uuid4().hex}"


class ReactqRequestHandler(RequestHandler):
    """Every A2A method served from the pool (the SDK's dispatcher calls it)."""

    async def _turn(self, context: ServerCallContext, task_id: str) -> TurnInfo:
        """The turn of ``task_id``, if the caller may see it; else TaskNotFoundError."""
        gateway, scope, agent = _caller(context)
        if not task_id:
            raise InvalidParamsError("the task id is required")
        info = await gateway.producer.turn_info(task_id)
        if info is None or not await session_visible(gateway, scope, info.session_id):
            raise TaskNotFoundError(f"no task {task_id!r}")
        owner = await gateway.session_agent(info.session_id)
        if owner is not None and owner != agent:
            raise TaskNotFoundError(f"no task {task_id!r}")
        return info

    async def _task(self, context: ServerCallContext, info: TurnInfo) -> Task:
        gateway, _, _ = _caller(context)
        return await task_with_files(gateway, info)

    async def _settled(self, context: ServerCallContext, task_id: str, past: set[str]) -> TurnInfo:
        """The turn once it ended or waits for approval of calls not in ``past``."""
        while True:
            info = await self._turn(context, task_id)
            if info.status in SETTLED:
                pending = {c.call_id for c in info.pending_approvals}
                if info.status is not TurnStatus.AWAITING_APPROVAL or not pending <= past:
                    return info
            await asyncio.sleep(_POLL_SECONDS)

    async def _decide(
        self, context: ServerCallContext, message: Message
    ) -> tuple[TurnInfo, set[str]]:
        """Decide the waiting calls of the task ``message`` answers."""
        gateway, scope, _ = _caller(context)
        info = await self._turn(context, message.task_id)
        if info.status is not TurnStatus.AWAITING_APPROVAL:
            state = TaskState.Name(state_of(info.status))
            raise InvalidParamsError(
                f"task {info.turn_id!r} is {state}, not input-required: send a message "
                "without taskId to start a new task in this context"
            )
        if scope is not None and scope.read_only:
            raise InvalidRequestError(f"the API key {scope.name!r} is read-only")
        approve, reason = approval_answer(message)
        calls = {c.call_id for c in info.pending_approvals}
        decisions: dict[str, bool | str] = {
            c: True if approve else (reason or "denied") for c in calls
        }
        try:
            await gateway.producer.decide(
                info.turn_id, decisions, by=f"a2a:{scope.name if scope else 'caller'}"
            )
        except ApprovalError as exc:
            raise InvalidParamsError(exc.message) from None
        return info, calls

    async def _submit(self, context: ServerCallContext, params: SendMessageRequest) -> Any:
        gateway, scope, agent = _caller(context)
        message = params.message
        if scope is not None and scope.read_only:
            raise InvalidRequestError(
                f"the API key {scope.name!r} is read-only: it cannot run turns"
            )
        if message.context_id and not SESSION_ID_RE.fullmatch(message.context_id):
            raise InvalidParamsError("contextId must be 1-128 of [A-Za-z0-9._:-]")
        session_id = message.context_id or _new_session(scope)
        if not await session_visible(gateway, scope, session_id):
            raise InvalidParamsError(f"no context {session_id!r}")
        owner = await gateway.session_agent(session_id)
        if owner is not None and owner != agent:
            raise InvalidParamsError(f"context {session_id!r} belongs to another agent")
        try:
            handle = await gateway.producer.submit(
                session_id,
                input_of(message),
                agent=agent,
                strategy=MultitaskStrategy.ENQUEUE,
                metadata={"via": "a2a", "a2a_message_id": message.message_id},
                tenant=scope,
            )
        except InvalidTurnError as exc:
            raise InvalidParamsError(exc.message) from None
        except ReactqError as exc:
            raise InvalidRequestError(exc.message) from None
        await TaskIndex(gateway).add(scope, handle.turn_id)
        if params.configuration.HasField("task_push_notification_config"):
            config = TaskPushNotificationConfig()
            config.CopyFrom(params.configuration.task_push_notification_config)
            config.task_id = handle.turn_id
            await _pusher(context).configs.put(config)
            _pusher(context).follow(handle.turn_id)
        return handle

    async def on_message_send(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> Task | Message:
        """Submit a turn (or decide a parked one) and answer its task once it settles
        (ended, or ``input-required``); at once with ``returnImmediately``."""
        if params.message.task_id:
            info, past = await self._decide(context, params.message)
            return await self._task(context, await self._settled(context, info.turn_id, past))
        handle = await self._submit(context, params)
        if params.configuration.return_immediately:
            return task_of(await self._turn(context, handle.turn_id))
        return await self._task(context, await self._settled(context, handle.turn_id, set()))

    async def on_message_send_stream(
        self, params: SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """The task, then its status updates as the turn's events come, its answer as
        an artifact, and its last status (ended, or ``input-required``)."""
        if params.message.task_id:
            info, _ = await self._decide(context, params.message)
            session_id, turn_id = info.session_id, info.turn_id
        else:
            handle = await self._submit(context, params)
            session_id, turn_id = handle.session_id, handle.turn_id
        yield task_of(await self._turn(context, turn_id))
        async for event in self._events(context, session_id, turn_id, after="0"):
            yield event

    async def _events(
        self, context: ServerCallContext, session_id: str, turn_id: str, after: str
    ) -> AsyncGenerator[Event]:
        gateway, _, _ = _caller(context)
        working = False
        async for event in gateway.producer.subscribe(session_id, after=after):
            if event.turn_id != turn_id:
                continue
            if isinstance(event, FinalEvent | ApprovalRequestedEvent):
                info = await self._turn(context, turn_id)
                if (
                    isinstance(event, ApprovalRequestedEvent)
                    and info.status is not TurnStatus.AWAITING_APPROVAL
                ):
                    if info.status not in TERMINAL:
                        continue  # an approval already decided: the turn runs on
                task = await self._task(context, info)
                for artifact in task.artifacts:
                    yield TaskArtifactUpdateEvent(
                        task_id=turn_id, context_id=session_id, artifact=artifact, last_chunk=True
                    )
                yield TaskStatusUpdateEvent(
                    task_id=turn_id, context_id=session_id, status=task.status
                )
                if info.status in TERMINAL or isinstance(event, ApprovalRequestedEvent):
                    return
            elif not working and event.type in ("started", "step_started", "model_request"):
                working = True
                yield TaskStatusUpdateEvent(
                    task_id=turn_id,
                    context_id=session_id,
                    status=TaskStatus(state=TaskState.TASK_STATE_WORKING),
                )

    async def on_subscribe_to_task(
        self, params: SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event]:
        """The task as it is, then its updates until it settles (a client reconnecting
        after a disconnect gets the whole turn again, from its first event)."""
        info = await self._turn(context, params.id)
        if info.status in TERMINAL:
            raise UnsupportedOperationError(f"task {info.turn_id!r} has ended: GetTask reads it")
        yield task_of(info)
        async for event in self._events(context, info.session_id, info.turn_id, after="0"):
            yield event

    async def on_get_task(self, params: GetTaskRequest, context: ServerCallContext) -> Task | None:
        """The task of a turn the caller may see."""
        return await self._task(context, await self._turn(context, params.id))

    async def on_list_tasks(
        self, params: ListTasksRequest, context: ServerCallContext
    ) -> ListTasksResponse:
        """The tasks A2A started for the caller's tenant and this agent, newest first."""
        gateway, scope, _ = _caller(context)
        size = params.page_size or 50
        if not 1 <= size <= 100:
            raise InvalidParamsError("pageSize must be 1-100")
        tasks: list[Task] = []
        cursor = params.page_token or None
        while len(tasks) < size:
            ids, cursor = await TaskIndex(gateway).page(scope, cursor, size)
            for turn_id in ids:
                try:
                    info = await self._turn(context, turn_id)
                except TaskNotFoundError:
                    continue
                if params.context_id and info.session_id != params.context_id:
                    continue
                if params.status and state_of(info.status) != params.status:
                    continue
                tasks.append(task_of(info))
            if cursor is None:
                break
        return ListTasksResponse(
            tasks=tasks[:size], next_page_token=cursor or "", page_size=size, total_size=len(tasks)
        )

    async def on_cancel_task(
        self, params: CancelTaskRequest, context: ServerCallContext
    ) -> Task | None:
        """Cancel the task's turn, and answer the task once it is cancelled."""
        gateway, scope, _ = _caller(context)
        info = await self._turn(context, params.id)
        if info.status in TERMINAL:
            raise TaskNotCancelableError(f"task {info.turn_id!r} has ended ({info.status.value})")
        if scope is not None and scope.read_only:
            raise InvalidRequestError(f"the API key {scope.name!r} is read-only")
        await gateway.producer.cancel(info.turn_id)
        for _ in range(300):
            info = await self._turn(context, params.id)
            if info.status in TERMINAL:
                break
            await asyncio.sleep(_POLL_SECONDS)
        return task_of(info)

    async def on_create_task_push_notification_config(
        self, params: TaskPushNotificationConfig, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        """Register a URL the task's updates are POSTed to (``push.py``)."""
        info = await self._turn(context, params.task_id)
        stored = await _pusher(context).configs.put(params)
        _pusher(context).follow(info.turn_id)
        return stored

    async def on_get_task_push_notification_config(
        self, params: GetTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> TaskPushNotificationConfig:
        """One of the task's push configs."""
        await self._turn(context, params.task_id)
        found = await _pusher(context).configs.get(params.task_id, params.id)
        if found is None:
            raise InvalidParamsError(f"task {params.task_id!r} has no push config {params.id!r}")
        return found

    async def on_list_task_push_notification_configs(
        self, params: ListTaskPushNotificationConfigsRequest, context: ServerCallContext
    ) -> ListTaskPushNotificationConfigsResponse:
        """The task's push configs (one page: a task has few)."""
        await self._turn(context, params.task_id)
        configs = await _pusher(context).configs.all(params.task_id)
        return ListTaskPushNotificationConfigsResponse(configs=configs)

    async def on_delete_task_push_notification_config(
        self, params: DeleteTaskPushNotificationConfigRequest, context: ServerCallContext
    ) -> None:
        """Forget one of the task's push configs."""
        await self._turn(context, params.task_id)
        if not await _pusher(context).configs.delete(params.task_id, params.id):
            raise InvalidParamsError(f"task {params.task_id!r} has no push config {params.id!r}")

    async def on_get_extended_agent_card(
        self, params: GetExtendedAgentCardRequest, context: ServerCallContext
    ) -> AgentCard:
        """Not served: the public card is the whole card."""
        raise UnsupportedOperationError("no extended agent card")
