"""One attempt of a webhook delivery: check the URL again, POST, record, retry later.

What the ``reactq.webhook`` Celery task runs on a worker's loop. The URL is checked
again here (DNS may have changed since the submit), and the connection goes to an
address that was checked: aiohttp is handed the checked addresses as its resolver's
answer, so a second DNS answer cannot send the POST elsewhere. Redirects are not
followed. A 2xx answer ends the delivery; anything else (an error status, no answer,
a timeout) is retried after ``REACTQ_WEBHOOK_BACKOFF_SECONDS``, doubling each time,
until ``REACTQ_WEBHOOK_MAX_ATTEMPTS``. A URL refused at delivery is not retried.
"""

from __future__ import annotations

import socket
import time
from typing import Any

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from reactq.shared.errors import WebhookRefusedError
from reactq.shared.netcheck import AllowList, IPAddress, resolve_host
from reactq.shared.settings import Settings
from reactq.shared.webhooks import (
    ATTEMPT_HEADER,
    DELIVERY_HEADER,
    SIGNATURE_HEADER,
    TIMESTAMP_HEADER,
    Delivery,
    Resolver,
    Send,
    WebhookAttempt,
    Webhooks,
    checked_addresses,
    sign,
)

__all__ = ["backoff", "deliver", "post"]

MAX_BACKOFF_SECONDS = 3600.0


def backoff(settings: Settings, attempt: int) -> float:
    """Seconds to wait after failed attempt ``attempt`` (1, 2, ...): doubling, capped."""
    return float(min(settings.webhook_backoff_seconds * 2 ** (attempt - 1), MAX_BACKOFF_SECONDS))


class _Pinned(AbstractResolver):
    """Answers aiohttp's lookup of the one host with the addresses already checked."""

    def __init__(self, host: str, port: int, addresses: list[IPAddress]) -> None:
        self.host, self.port, self.addresses = host, port, addresses

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        if host != self.host:
            raise OSError(f"{host} was not checked")
        return [
            ResolveResult(
                hostname=host,
                host=str(a),
                port=port,
                family=socket.AF_INET6 if a.version == 6 else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for a in self.addresses
        ]

    async def close(self) -> None:
        pass


async def post(
    delivery: Delivery, settings: Settings, *, resolver: Resolver = resolve_host
) -> tuple[WebhookAttempt, bool]:
    """POST the delivery once; the attempt, and whether a retry may follow."""
    now = time.time()
    secret = settings.webhook_secret
    if secret is None:
        error = "REACTQ_WEBHOOK_SECRET is not set on this worker: nothing to sign with"
        return WebhookAttempt(attempt=delivery.attempt, at=now, ok=False, error=error), False
    try:
        host, port, addresses = await checked_addresses(
            delivery.url, AllowList(settings.webhook_allow_hosts), resolver
        )
    except WebhookRefusedError as exc:
        return WebhookAttempt(attempt=delivery.attempt, at=now, ok=False, error=exc.message), False
    body = delivery.body.encode()
    stamp = int(now)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "reactq-webhook/1",
        DELIVERY_HEADER: delivery.turn_id,
        ATTEMPT_HEADER: str(delivery.attempt),
        TIMESTAMP_HEADER: str(stamp),
        SIGNATURE_HEADER: sign(secret.get_secret_value(), stamp, body),
    }
    connector = aiohttp.TCPConnector(resolver=_Pinned(host, port, addresses), use_dns_cache=False)
    timeout = aiohttp.ClientTimeout(total=settings.webhook_timeout_seconds)
    result: dict[str, Any] = {"attempt": delivery.attempt, "at": now}
    try:
        # trust_env off: a proxy from the environment would connect elsewhere than checked.
        async with (
            aiohttp.ClientSession(connector=connector, timeout=timeout, trust_env=False) as http,
            http.post(delivery.url, data=body, headers=headers, allow_redirects=False) as answer,
        ):
            ok = 200 <= answer.status < 300
            result.update(ok=ok, status_code=answer.status)
            if not ok:
                result["error"] = f"the receiver answered HTTP {answer.status}"
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        result.update(ok=False, error=f"{type(exc).__name__}: {exc}"[:300])
    attempt = WebhookAttempt.model_validate(result)
    return attempt, not attempt.ok


async def deliver(delivery: Delivery, settings: Settings, webhooks: Webhooks, send: Send) -> bool:
    """Run one attempt, record it, and enqueue the next after its backoff when it failed
    and attempts are left. True when the receiver took it.

    The attempt is marked in flight first (``Webhooks.begin``): if this worker dies
    before its outcome is recorded, a reaper sends the next attempt once the mark's
    deadline passed. An attempt already started (a repeated message) is not sent."""
    if not await webhooks.begin(delivery):
        return False
    attempt, retry = await post(delivery, settings)
    wait: float | None = None
    if retry and delivery.attempt < settings.webhook_max_attempts:
        wait = backoff(settings, delivery.attempt)
        attempt.next_attempt_at = attempt.at + wait
    await webhooks.record(delivery, attempt)
    if wait is not None:
        await send(delivery.model_copy(update={"attempt": delivery.attempt + 1}), wait)
    return attempt.ok
