"""A2A push notifications: a task's updates POSTed to the URLs its client registered.

A config (``tasks/pushNotificationConfig/set``, or ``configuration.taskPushNotificationConfig``
of a send) is kept in Redis beside the task (``Keys.a2a_push``), so it outlives the
gateway process. The gateway that stores one follows the task's turn (its events on
the session's stream) and, at each change a client waits for, POSTs the
``StreamResponse`` the A2A spec says (a ``statusUpdate`` while it works, the whole
``task`` once it waits for input or ends) to every config of the task, with the
config's token as ``X-A2A-Notification-Token`` and its credentials as
``Authorization`` (the a2a-sdk sender's headers). A URL is checked like a reactq
webhook's: http(s), every address public or allowed by ``REACTQ_WEBHOOK_ALLOW_HOSTS``.

A POST is retried a few times. Each state goes to each config once: it is recorded
before its POST, so a gateway that starts again (and resumes following the tasks with
configs) does not send it twice, and one that stopped mid-POST may not have sent it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid

import httpx
from a2a.types.a2a_pb2 import (
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatus,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict, MessageToJson, Parse

from reactq.producer.gateway.a2a.tasks import TERMINAL, task_with_files
from reactq.producer.gateway.service import Gateway
from reactq.producer.turn_lookup import TurnInfo
from reactq.shared.errors import WebhookRefusedError
from reactq.shared.events import ApprovalRequestedEvent, FinalEvent
from reactq.shared.netcheck import AllowList
from reactq.shared.redis_client import REDIS_OUTAGE, text
from reactq.shared.turns import TurnStatus
from reactq.shared.webhooks import check_url

__all__ = ["PushConfigs", "Pusher"]

logger = logging.getLogger(__name__)

_ATTEMPTS = 3
_BACKOFF_SECONDS = 0.5
_RESUME_RETRY_SECONDS = 5.0


class PushConfigs:
    """The push configs of the tasks, in Redis: one hash per task, config id -> JSON."""

    def __init__(self, gateway: Gateway) -> None:
        self.redis = gateway.producer.redis
        self.keys = gateway.producer.keys
        self.settings = gateway.producer.settings

    async def put(self, config: TaskPushNotificationConfig) -> TaskPushNotificationConfig:
        """Store ``config`` (a fresh id when it has none); InvalidParamsError for a URL a
        webhook could not have."""
        if not config.url:
            raise InvalidParamsError("a push notification config needs its url")
        try:
            await check_url(config.url, AllowList(self.settings.webhook_allow_hosts))
        except WebhookRefusedError as exc:
            raise InvalidParamsError(f"push notification url refused: {exc.message}") from None
        stored = TaskPushNotificationConfig()
        stored.CopyFrom(config)
        stored.id = stored.id or uuid.uuid4().hex
        key = self.keys.a2a_push(stored.task_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, stored.id, MessageToJson(stored))
            pipe.expire(key, self.settings.session_meta_ttl_seconds)
            await pipe.execute()
        return stored

    async def all(self, task_id: str) -> list[TaskPushNotificationConfig]:
        """The task's configs."""
        raw = await self.redis.hgetall(self.keys.a2a_push(task_id))
        return [
            Parse(text(value), TaskPushNotificationConfig())
            for field, value in sorted(raw.items())
            if not text(field).startswith("sent:")
        ]

    async def get(self, task_id: str, config_id: str) -> TaskPushNotificationConfig | None:
        """One of the task's configs, or None."""
        raw = await self.redis.hget(self.keys.a2a_push(task_id), config_id)
        return None if raw is None else Parse(text(raw), TaskPushNotificationConfig())

    async def delete(self, task_id: str, config_id: str) -> bool:
        """Forget a config; False when the task has none by that id."""
        return bool(await self.redis.hdel(self.keys.a2a_push(task_id), config_id))

    async def sent(self, task_id: str, config_id: str, state: TaskState) -> bool:
        """Record that ``state`` went to the config; False if it had already."""
        field = f"sent:{config_id}:{state}"
        return bool(await self.redis.hsetnx(self.keys.a2a_push(task_id), field, "1"))

    async def followed(self) -> list[str]:
        """The tasks that have configs (for a gateway starting again)."""
        pattern = self.keys.a2a_push("*")
        prefix = pattern[:-1]
        return [text(k)[len(prefix) :] async for k in self.redis.scan_iter(match=pattern)]


class Pusher:
    """The gateway's followers of the tasks with push configs (one asyncio task each)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.configs = PushConfigs(gateway)
        self.http = httpx.AsyncClient(timeout=gateway.producer.settings.webhook_timeout_seconds)
        self._following: dict[str, asyncio.Task[None]] = {}

    def follow(self, task_id: str) -> None:
        """Follow the task (once) until it ends, pushing each update."""
        running = self._following.get(task_id)
        if running is None or running.done():
            self._following[task_id] = asyncio.create_task(self._follow(task_id))

    def resume(self) -> None:
        """Follow again, in the background, the tasks with configs that have not ended (a
        gateway restarted); while Redis does not answer, try again later."""
        self._following[""] = asyncio.create_task(self._resume())

    async def _resume(self) -> None:
        while True:
            try:
                for task_id in await self.configs.followed():
                    self.follow(task_id)
                return
            except REDIS_OUTAGE:
                await asyncio.sleep(_RESUME_RETRY_SECONDS)

    async def close(self) -> None:
        """Stop following; the configs stay for the next gateway."""
        for task in self._following.values():
            task.cancel()
        for task in self._following.values():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.http.aclose()

    async def _follow(self, task_id: str) -> None:
        producer = self.gateway.producer
        try:
            info = await producer.turn_info(task_id)
            if info is None:
                return
            await self._push_status(info)
            if info.status in TERMINAL:
                return
            async for event in producer.subscribe(info.session_id, after="0"):
                if event.turn_id != task_id:
                    continue
                if event.type == "started":
                    await self._push(info, TaskState.TASK_STATE_WORKING, None)
                elif isinstance(event, FinalEvent | ApprovalRequestedEvent):
                    now = await producer.turn_info(task_id)
                    if now is None:
                        return
                    await self._push_status(now)
                    if now.status in TERMINAL:
                        return
        except asyncio.CancelledError:
            raise
        except Exception:
            logger.exception("following A2A task %s for its push notifications failed", task_id)

    async def _push_status(self, info: TurnInfo) -> None:
        """Push the update the turn's status calls for (none while it is queued)."""
        if info.status in TERMINAL or info.status is TurnStatus.AWAITING_APPROVAL:
            task = await task_with_files(self.gateway, info)
            await self._push(info, task.status.state, task)
        elif info.status is TurnStatus.RUNNING:
            await self._push(info, TaskState.TASK_STATE_WORKING, None)

    async def _push(self, info: TurnInfo, state: TaskState, task: Task | None) -> None:
        task_id = info.turn_id
        if task is not None:
            body = StreamResponse(task=task)
        else:
            update = TaskStatusUpdateEvent(
                task_id=task_id, context_id=info.session_id, status=TaskStatus(state=state)
            )
            body = StreamResponse(status_update=update)
        payload = MessageToDict(body)
        for config in await self.configs.all(task_id):
            if not await self.configs.sent(task_id, config.id, state):
                continue
            await self._post(config, payload)

    async def _post(self, config: TaskPushNotificationConfig, payload: dict[str, object]) -> None:
        headers: dict[str, str] = {}
        if config.token:
            headers["X-A2A-Notification-Token"] = config.token
        auth = config.authentication
        if config.HasField("authentication") and auth.scheme and auth.credentials:
            headers["Authorization"] = f"{auth.scheme} {auth.credentials}"
        why = "not sent"
        for attempt in range(1, _ATTEMPTS + 1):
            try:
                # Checked again at each POST, as a webhook is: DNS may have changed.
                await check_url(config.url, AllowList(self.configs.settings.webhook_allow_hosts))
                answer = await self.http.post(config.url, json=payload, headers=headers)
                if answer.is_success:
                    return
                why = f"HTTP {answer.status_code}"
            except WebhookRefusedError as exc:
                logger.warning("A2A push to %s refused: %s", config.url, exc.message)
                return
            except httpx.HTTPError as exc:
                why = type(exc).__name__
            if attempt < _ATTEMPTS:
                await asyncio.sleep(_BACKOFF_SECONDS * attempt)
        logger.warning("A2A push to %s failed after %d attempts (%s)", config.url, _ATTEMPTS, why)
