"""Webhooks: a signed POST when a turn ends, its URL checked, its attempts recorded.

A turn's webhook (``submit(..., webhook=URL)``, else its agent's ``webhook``) is
checked at submit (``check_url``: http(s), no credentials, every address public or
allowed by ``REACTQ_WEBHOOK_ALLOW_HOSTS``) and recorded in Redis beside the turn's
status (``Keys.webhook``) before the turn is pushed. Whoever publishes the turn's
final (a worker, or the producer for a turn that never ran) then calls
``Webhooks.ended``, which enqueues one ``reactq.webhook`` Celery task
(``webhook_delivery.py`` runs it) and marks the delivery enqueued.

Delivery is at least once: the mark is written after the task is sent, and a
worker killed between publishing a turn's final and enqueuing its delivery leaves
the turn in its running slot, so the next attempt (``endings.committed``) finds the
final and enqueues the delivery then. The task's message is acked as soon as the
worker's loop takes it, so the worker's death does not bring it back: a delivery
has a deadline instead (``Keys.webhook_deadlines``), set when it is enqueued, when
an attempt starts (``begin``, which also skips an attempt already started) and when
one is recorded, each ``REACTQ_WEBHOOK_TIMEOUT_SECONDS + REACTQ_LEASE_TTL_SECONDS``
past the moment the delivery should show progress; a worker's reaper sends the next
attempt of an overdue one (``reap``), recording the attempt that was in flight as
lost. A receiver may therefore see one delivery twice (same ``Reactq-Delivery`` id,
the turn's): it should dedupe on that header.

Signature: ``Reactq-Signature: v1=<hex>``, the HMAC-SHA256 with
``REACTQ_WEBHOOK_SECRET`` of ``<Reactq-Timestamp>.<body>`` (the timestamp header's
digits, a dot, the raw body bytes); see ``verify``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel
from redis.asyncio import Redis

from reactq.shared.errors import WebhookRefusedError
from reactq.shared.events import FinalEvent
from reactq.shared.keys import Keys
from reactq.shared.netcheck import AllowList, IPAddress, host_refusal, resolve_host
from reactq.shared.redis_client import lua_source, text
from reactq.shared.settings import Settings

__all__ = [
    "ATTEMPT_HEADER",
    "DELIVERY_HEADER",
    "SIGNATURE_HEADER",
    "TIMESTAMP_HEADER",
    "WEBHOOK_TASK",
    "Delivery",
    "Resolver",
    "Send",
    "WebhookAttempt",
    "WebhookStatus",
    "Webhooks",
    "body_of",
    "check_url",
    "checked_addresses",
    "sign",
    "split_url",
    "verify",
]

WEBHOOK_TASK = "reactq.webhook"
"""The Celery task a turn's end enqueues: ``reactq.webhook(delivery)``."""
SIGNATURE_HEADER = "Reactq-Signature"
TIMESTAMP_HEADER = "Reactq-Timestamp"
DELIVERY_HEADER = "Reactq-Delivery"
"""The delivery's id (the turn's id): the same on every attempt and on a repeat."""
ATTEMPT_HEADER = "Reactq-Attempt"

IN_FLIGHT = "no outcome yet: the POST is in flight"
"""The error an attempt shows while its POST runs."""
LOST = (
    "no outcome: the worker sending it stopped before the receiver answered "
    "(the receiver may have got it)"
)
"""The error of an attempt whose worker died before recording its outcome."""

_BEGIN = lua_source(__name__, "webhook_begin")
_CLAIM = lua_source(__name__, "webhook_claim")

Resolver = Callable[[str, int], Awaitable[list[IPAddress]]]
Send = Callable[["Delivery", float | None], Awaitable[None]]
"""Enqueue a delivery, after ``countdown`` seconds (None: now)."""


def sign(secret: str, timestamp: int, body: bytes) -> str:
    """The ``Reactq-Signature`` value of ``body`` sent at ``timestamp`` (Unix seconds)."""
    digest = hmac.new(secret.encode(), f"{timestamp}.".encode() + body, hashlib.sha256)
    return "v1=" + digest.hexdigest()


def verify(
    secret: str,
    timestamp: str,
    body: bytes,
    signature: str,
    *,
    tolerance: float = 300,
    now: float | None = None,
) -> bool:
    """What a receiver checks: the signature matches and the timestamp is within
    ``tolerance`` seconds of ``now`` (a replayed old request fails)."""
    if not timestamp.isdigit():
        return False
    if abs((time.time() if now is None else now) - int(timestamp)) > tolerance:
        return False
    return hmac.compare_digest(signature, sign(secret, int(timestamp), body))


def split_url(url: str) -> tuple[str, int]:
    """The host and port of a webhook URL; WebhookRefusedError unless it is an absolute
    http(s) URL with a host and no credentials."""
    if not isinstance(url, str) or len(url) > 2048:
        raise WebhookRefusedError(f"a webhook must be an http(s) URL, not {url!r:.80}", url=url)
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise WebhookRefusedError(f"not a valid URL: {url!r:.200} ({exc})", url=url) from None
    if parts.scheme not in ("http", "https"):
        raise WebhookRefusedError(
            f"a webhook must be an http or https URL, not {parts.scheme or 'none'!r}", url=url
        )
    if not parts.hostname:
        raise WebhookRefusedError(f"the webhook URL {url!r:.200} names no host", url=url)
    if parts.username is not None or parts.password is not None:
        raise WebhookRefusedError("a webhook URL may not carry credentials (user:pw@)", url=url)
    return parts.hostname, port or (443 if parts.scheme == "https" else 80)


async def checked_addresses(
    url: str, allow: AllowList, resolver: Resolver = resolve_host
) -> tuple[str, int, list[IPAddress]]:
    """Resolve the URL's host and check every address it resolves to (the connection
    may go to any of them); its host, port and addresses, or WebhookRefusedError."""
    host, port = split_url(url)
    try:
        addresses = await resolver(host, port)
    except (socket.gaierror, UnicodeError) as exc:
        raise WebhookRefusedError(
            f"the webhook host {host} does not resolve ({exc})", url=url
        ) from None
    if not addresses:
        raise WebhookRefusedError(f"the webhook host {host} resolves to no address", url=url)
    for address in addresses:
        if (reason := host_refusal(host, address, allow, port)) is not None:
            raise WebhookRefusedError(
                f"refused webhook {url:.200}: {host} resolves to {address}, {reason} "
                "(REACTQ_WEBHOOK_ALLOW_HOSTS lists hosts that may be reached anyway)",
                url=url,
            )
    return host, port, addresses


async def check_url(url: str, allow: AllowList, resolver: Resolver = resolve_host) -> None:
    """Refuse (WebhookRefusedError) a webhook URL that may not be POSTed to."""
    await checked_addresses(url, allow, resolver)


class Delivery(BaseModel):
    """One turn's webhook delivery: the Celery task's argument (JSON)."""

    session_id: str
    """The turn's session."""
    turn_id: str
    """The turn (the delivery's id)."""
    agent: str
    """The turn's agent: the delivery goes on its queue."""
    url: str
    """Where it is POSTed."""
    body: str
    """The JSON body, the same on every attempt."""
    attempt: int = 1
    """This attempt's number, from 1."""


class WebhookAttempt(BaseModel):
    """One POST of a webhook."""

    attempt: int
    """Its number, from 1."""
    at: float
    """Unix time it was sent."""
    ok: bool
    """The receiver answered 2xx."""
    status_code: int | None = None
    """The receiver's HTTP status (None: no answer)."""
    error: str | None = None
    """Why it failed, when it did."""
    next_attempt_at: float | None = None
    """Unix time the next attempt is due (None: none follows)."""


class WebhookStatus(BaseModel):
    """A turn's webhook, as its status shows it."""

    url: str
    """Where it is POSTed."""
    state: Literal["waiting", "pending", "delivered", "failed"]
    """``waiting`` for the turn to end, ``pending`` (enqueued, or retrying),
    ``delivered`` (a 2xx) or ``failed`` (attempts used up, or refused at delivery)."""
    attempts: list[WebhookAttempt]
    """Its POSTs so far, oldest first; one in flight shows ``ok=False`` and the error
    ``IN_FLIGHT`` until it is answered (``LOST`` if its worker died first)."""


def body_of(final: FinalEvent) -> str:
    """The JSON a turn's webhook POSTs: the turn's status and its final event."""
    return json.dumps(
        {
            "type": "turn.ended",
            "turn_id": final.turn_id,
            "session_id": final.session_id,
            "status": str(final.status),
            "attempt": final.attempt,
            "final": final.model_dump(mode="json"),
        },
        separators=(",", ":"),
    )


def _member(delivery: Delivery) -> str:
    return json.dumps([delivery.session_id, delivery.turn_id])


class Webhooks:
    """The turns' webhook records in Redis (``Keys.webhook``): kept as long as the
    session's turn statuses, or a turn's wait for approval if that is longer."""

    def __init__(self, redis: Redis, keys: Keys, settings: Settings) -> None:
        self.redis = redis
        self.keys = keys
        self.ttl = max(
            settings.session_meta_ttl_seconds, int(settings.approval_timeout_seconds) + 3600
        )
        self.max_attempts = settings.webhook_max_attempts
        # An attempt shows its outcome within its POST's timeout; the lease TTL on top
        # covers a worker that is merely busy (as long as a dead worker holds a session).
        self.grace = settings.webhook_timeout_seconds + settings.lease_ttl_seconds
        self._begin = redis.register_script(_BEGIN)
        self._claim = redis.register_script(_CLAIM)

    async def register(self, session_id: str, turn_id: str, url: str, agent: str) -> None:
        """Record the webhook of a turn about to be pushed."""
        key = self.keys.webhook(session_id, turn_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping={"url": url, "agent": agent})
            pipe.expire(key, self.ttl)
            await pipe.execute()

    async def ended(self, final: FinalEvent, send: Send) -> bool:
        """The turn of ``final`` ended: enqueue its delivery unless it has no webhook or
        its delivery was enqueued already. True if one was enqueued now."""
        key = self.keys.webhook(final.session_id, final.turn_id)
        fields = {text(k): text(v) for k, v in (await self.redis.hgetall(key)).items()}
        if "url" not in fields or fields.get("enqueued"):
            return False
        delivery = Delivery(
            session_id=final.session_id,
            turn_id=final.turn_id,
            agent=fields.get("agent", ""),
            url=fields["url"],
            body=body_of(final),
        )
        # The deadline first: if the send fails (the broker is down) or no worker ever
        # starts the delivery, a reaper sends it.
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, "delivery", delivery.model_dump_json())
            pipe.expire(key, self.ttl)
            pipe.zadd(self._due(delivery), {_member(delivery): time.time() + self.grace})
            await pipe.execute()
        await send(delivery, None)
        # Marked after the send: a crash in between repeats it (at least once).
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, "enqueued", "1")
            pipe.expire(key, self.ttl)
            await pipe.execute()
        return True

    async def begin(self, delivery: Delivery) -> bool:
        """Mark the delivery's attempt in flight (shown until its outcome is recorded)
        and give it a deadline; False when it must not be sent: the turn's delivery is
        over, forgotten, or this attempt (or a later one) was started already."""
        now = time.time()
        in_flight = WebhookAttempt(
            attempt=delivery.attempt,
            at=now,
            ok=False,
            error=IN_FLIGHT,
            next_attempt_at=now + self.grace,
        )
        started = await self._begin(
            keys=[self.keys.webhook(delivery.session_id, delivery.turn_id), self._due(delivery)],
            args=[
                delivery.attempt,
                f"attempt:{delivery.attempt:02d}",
                in_flight.model_dump_json(),
                _member(delivery),
                now + self.grace,
                self.ttl,
            ],
        )
        return bool(started)

    async def record(self, delivery: Delivery, attempt: WebhookAttempt) -> None:
        """Record one POST of a delivery, and when the next is due (or that none is)."""
        key = self.keys.webhook(delivery.session_id, delivery.turn_id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, f"attempt:{attempt.attempt:02d}", attempt.model_dump_json())
            pipe.hdel(key, "inflight")
            if attempt.next_attempt_at is None:
                pipe.hset(key, "done", "1")
                pipe.zrem(self._due(delivery), _member(delivery))
            else:
                due = attempt.next_attempt_at + self.grace
                pipe.zadd(self._due(delivery), {_member(delivery): due})
            pipe.expire(key, self.ttl)
            await pipe.execute()

    async def reap(self, send: Send, limit: int = 100) -> int:
        """Send again the deliveries whose deadline passed: their worker died mid-POST,
        or before it started a queued or retried attempt. The attempt in flight, if any,
        is recorded as lost. Returns how many were sent."""
        sent = 0
        for due in self.keys.webhook_deadline_sets():
            now = time.time()
            members = await self._claim(keys=[due], args=[now, now + self.grace, limit])
            for raw in members:
                session_id, turn_id = json.loads(text(raw))
                if await self._resend(due, session_id, turn_id, raw, now, send):
                    sent += 1
        return sent

    async def _resend(
        self, due: str, session_id: str, turn_id: str, member: object, now: float, send: Send
    ) -> bool:
        key = self.keys.webhook(session_id, turn_id)
        fields = {text(k): text(v) for k, v in (await self.redis.hgetall(key)).items()}
        if "delivery" not in fields or fields.get("done"):
            await self.redis.zrem(due, member)  # type: ignore[arg-type]
            return False
        last = int(fields.get("last", "0"))
        lost = fields.get(f"attempt:{last:02d}")
        retry = last < self.max_attempts
        if lost is not None and fields.get("inflight") == str(last):
            attempt = WebhookAttempt.model_validate_json(lost)
            attempt.error = LOST + ("; sent again" if retry else "; no attempts left")
            attempt.next_attempt_at = now if retry else None
            await self.record(Delivery.model_validate_json(fields["delivery"]), attempt)
        if not retry:
            await self.redis.zrem(due, member)  # type: ignore[arg-type]
            return False
        delivery = Delivery.model_validate_json(fields["delivery"])
        await send(delivery.model_copy(update={"attempt": last + 1}), None)
        return True

    def _due(self, delivery: Delivery) -> str:
        return self.keys.webhook_deadlines(delivery.session_id)

    async def status(self, session_id: str, turn_id: str) -> WebhookStatus | None:
        """The turn's webhook and its attempts; None when it has none (or Redis forgot)."""
        raw = await self.redis.hgetall(self.keys.webhook(session_id, turn_id))
        fields = {text(k): text(v) for k, v in raw.items()}
        if "url" not in fields:
            return None
        attempts = sorted(
            (
                WebhookAttempt.model_validate_json(v)
                for k, v in fields.items()
                if k.startswith("attempt:")
            ),
            key=lambda a: a.attempt,
        )
        state: Literal["waiting", "pending", "delivered", "failed"] = "waiting"
        if any(a.ok for a in attempts):
            state = "delivered"
        elif attempts and attempts[-1].next_attempt_at is None:
            state = "failed"
        elif fields.get("enqueued"):
            state = "pending"
        return WebhookStatus(url=fields["url"], state=state, attempts=attempts)
