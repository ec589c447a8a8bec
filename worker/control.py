"""Background duties of a worker process: the control listener and the reaper.

The control listener holds one pub/sub connection per process on
``keys.control`` and forwards cancel notices (``protocol/control.py``) to the
turns running here. The reaper asks, every ``REACTQ_REAPER_INTERVAL_SECONDS``,
for the sessions whose deadline passed (``protocol/deadlines.py``) and
re-dispatches them: a holder that died, or a drain task lost with its worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from redis.asyncio import Redis
from redis.exceptions import RedisError

from reactq.shared.keys import Keys
from reactq.shared.protocol.control import CancelNotice
from reactq.worker.drain import Drainer

log = logging.getLogger("reactq.worker")


async def listen_for_control(redis: Redis, keys: Keys, drainer: Drainer) -> None:
    """Apply control notices (``{"op": "cancel", "turn_id", "mode"}``) until cancelled."""
    backoff = 0.1
    while True:
        pubsub = redis.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(keys.control)
            backoff = 0.1
            while True:
                message = await pubsub.get_message(timeout=1.0)
                if message is not None:
                    _apply(message.get("data"), drainer)
        except RedisError as exc:
            log.warning("control channel: %s; reconnecting in %.1fs", exc, backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 5.0)
        finally:
            with contextlib.suppress(Exception):
                await pubsub.aclose()


def _apply(data: object, drainer: Drainer) -> None:
    try:
        notice = CancelNotice.decode(data)
    except ValueError:
        log.warning("control channel: ignoring a malformed notice %.200r", data)
        return
    if notice is not None and drainer.request_cancel(notice.turn_id, notice.mode):
        log.info("turn %s: %s requested", notice.turn_id, notice.mode)


async def reap_forever(drainer: Drainer, interval: float, retry: float) -> None:
    """Re-dispatch sessions whose deadline passed, every ``interval`` seconds."""
    backoff = interval
    while True:
        try:
            due = await drainer.deadlines.reap(limit=200, retry_seconds=retry)
            for session_id in due:
                log.warning("reaper: session %s missed its deadline; re-dispatching", session_id)
                try:
                    await drainer.dispatch(session_id)
                except Exception:
                    # The broker may be down: the deadline was pushed one retry
                    # period on, so this or another reaper tries again then.
                    log.exception("reaper: could not re-dispatch session %s", session_id)
            if drainer.webhooks is not None and drainer.send_webhook is not None:
                # A delivery whose worker died mid-POST (or before it began) is sent again.
                if sent := await drainer.webhooks.reap(drainer.send_webhook, limit=200):
                    log.warning("reaper: sent %d overdue webhook deliveries again", sent)
            backoff = interval
        except RedisError as exc:
            log.warning("reaper: %s; retrying in %.1fs", exc, backoff)
            backoff = min(backoff * 2, 30.0)
        except Exception:
            log.exception("reaper: unexpected failure; going on")
        await asyncio.sleep(backoff)
