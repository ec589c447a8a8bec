"""The worker's Redis round trips per pool turn (issue 14: CPU per turn).

Every round trip costs the worker's loop a socket write and a wake-up: a turn
must not grow new ones unnoticed. Counted at the server (``MONITOR``: each
command a client sends, a Lua script being one; the commands a script runs are
shown apart and not counted) for the commands that name the turn's session,
while the worker's kernel (``Bridge``: the drain, the runner, the stores, the
bus and the audit log, as a ``reactq worker`` process wires them) runs one turn
of 2 model calls and 1 tool call on a new session. Celery's own traffic (the
drain message) is not the kernel's; the drain is called directly.
"""

from __future__ import annotations

import collections
import hashlib
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis as redis_sync

from reactq.shared import bus_redis
from reactq.shared.events import ActionEvent, FinalEvent, ObservationEvent, StartedEvent
from reactq.shared.protocol import queue
from reactq.shared.settings import Settings
from reactq.shared.turns import TurnRequest
from reactq.shared.webhooks import Delivery
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from reactq.worker.bridge import Bridge
from tests.helpers import lookup_then_answer
from tests.pool_agents import agent

SCRIPTS = {
    hashlib.sha1(source.encode()).hexdigest(): name
    for name, source in {
        "take": queue._TAKE,
        "advance": queue._NEXT,
        "final_advance": queue._NEXT_FINAL,
        "publish": bus_redis._PUBLISH_LUA,
        "publish_many": bus_redis._PUBLISH_MANY_LUA,
    }.items()
}


@contextmanager
def monitoring(redis_url: str, session_id: str) -> Iterator[collections.Counter[str]]:
    """Count the commands clients send that name ``session_id``, by command (a known
    script by its name), while the block runs."""
    seen: collections.Counter[str] = collections.Counter()
    client = redis_sync.Redis.from_url(redis_url)
    end = f"end-of-{session_id}"
    started = threading.Event()

    def listen() -> None:
        with client.monitor() as monitor:
            started.set()
            for command in monitor.listen():
                text = command["command"]
                if text == f"ECHO {end}":
                    return
                if command["client_type"] == "lua" or session_id not in text:
                    continue
                name, *args = text.split(" ", 2)
                name = name.upper()
                if name == "EVALSHA" and args:
                    name = SCRIPTS.get(args[0], args[0])
                seen[name] += 1

    listener = threading.Thread(target=listen, daemon=True)
    listener.start()
    try:
        assert started.wait(10)
        yield seen
    finally:
        client.echo(end)
        listener.join(10)
        client.close()
    assert not listener.is_alive(), "MONITOR did not see the end of the count"


def test_one_pool_turn_is_five_redis_round_trips(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    """Take the lease with the first turn; ``started``; the reply's checkpoint with its
    ``action``; the step's checkpoint with its ``observation``; the final under the
    lease with the finish and release. Each event is published once, in order."""
    server = ScriptedServer(lookup_then_answer, latency=0.0).start_in_thread()
    settings = Settings.from_env(
        {
            "REACTQ_REDIS_URL": redis_url,
            "REACTQ_NAMESPACE": namespace,
            "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp_path / 'state.db'}",
            "OPENAI_BASE_URL": server.base_url,
            "OPENAI_API_KEY": "test-key",
        }
    )
    bridge = Bridge(settings, {agent.name: agent}, f"rt-{namespace}")
    bridge.start()
    try:
        drainer = bridge.drainer
        assert drainer is not None

        async def send_webhook(delivery: Delivery, countdown: float | None) -> None:
            raise AssertionError(f"no turn here has a webhook: {delivery}")

        # Wired as run_worker wires it: a turn's end would enqueue its webhook.
        drainer.send_webhook = send_webhook

        def submit(session_id: str) -> None:
            # As a producer submits a turn without a webhook (the worker then does not
            # look for one).
            turn = TurnRequest(
                session_id=session_id, agent=agent.name, message="hello", webhook=False
            )
            bridge.run(drainer.queue.submit(turn))

        warm = f"warm-{uuid.uuid4().hex[:8]}"  # connections open, caches filled
        submit(warm)
        assert bridge.run(drainer.drain(warm), timeout=30) == 1
        sid = f"rt-{uuid.uuid4().hex[:8]}"
        submit(sid)
        with monitoring(redis_url, sid) as seen:
            assert bridge.run(drainer.drain(sid), timeout=30) == 1
        events = bridge.run(drainer.bus.read(sid, after="0"))
    finally:
        bridge.stop()
        bridge.loop.close()  # stopped, not closed: a worker process exits instead
        server.stop()

    assert dict(seen) == {"take": 1, "publish": 1, "publish_many": 2, "final_advance": 1}
    kinds = [type(e) for e in events if not type(e).__name__.startswith("Usage")]
    assert kinds == [StartedEvent, ActionEvent, ObservationEvent, FinalEvent]
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
