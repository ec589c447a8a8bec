"""Issue 19, item 2: the todo list through real `reactq worker` processes and the
scripted model. Turn 1 of a session writes the list on one worker (its malformed
items dropped with a log line, the turn going on); that worker stops, and turn 2, on
the other worker, finds the list in its system prompt. Each change is a `todos`
event, which `reactq watch` shows."""

from __future__ import annotations

import asyncio
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from reactq.producer import Producer
from reactq.shared.events import Event, StartedEvent, TodosEvent
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.gateway_support import REACTQ
from tests.helpers import ROOT, scripted_pool, worker_pid
from tests.todo_agents import plan_script, system_prompt

pytestmark = pytest.mark.e2e


async def _run(producer: Producer, session: str, message: str) -> tuple[str, str, list[Event]]:
    """Send a turn; (its final text, the worker that ran it, its events)."""
    handle = await producer.submit(session, message, agent="planner")
    events: list[Event] = [event async for event in handle.events()]
    final = await handle.result(timeout=30)
    assert final.status == "completed", final
    (started,) = [e for e in events if isinstance(e, StartedEvent)]
    return final.text, started.worker, events


def _watch_until(env: dict[str, str], session: str, marker: str) -> str:
    """``reactq watch SESSION --from 0`` until a line holds ``marker``; its output."""
    proc = subprocess.Popen(
        [REACTQ, "watch", session, "--from", "0"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: list[str] = []
    deadline = time.monotonic() + 30
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            seen.append(line)
            if marker in line or time.monotonic() > deadline:
                break
    finally:
        proc.terminate()
        proc.wait(15)
        if proc.stdout is not None:
            proc.stdout.close()
    return "".join(seen)


async def test_a_plan_made_on_one_worker_is_in_the_next_turns_prompt_on_another(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    server = ScriptedServer(plan_script)
    with scripted_pool(
        redis_url,
        f"{namespace}-todos",
        tmp_path,
        server,
        workers=2,
        agents="tests.todo_agents:agents",
        concurrency=4,
    ) as (env, pool):
        session = f"todos-{uuid.uuid4().hex[:8]}"
        async with Producer(Settings.from_env(env)) as producer:
            text, first, events = await asyncio.wait_for(_run(producer, session, "plan"), 60)
            # The model's next call in the same turn already read the new list.
            assert text.startswith("tool said: [~] 1: read the spec\n[ ] 2: write the code")
            assert "Dropped (malformed)" in text and "'not an item'" in text
            (changed,) = [e for e in events if isinstance(e, TodosEvent)]
            assert [(i["id"], i["status"]) for i in changed.items] == [
                ("1", "in_progress"),
                ("2", "pending"),
            ]

            # The worker that ran turn 1 leaves; turn 2 can only run on the other one.
            (gone,) = [p for p in pool.procs if p.pid == worker_pid(first)]
            gone.terminate()
            await asyncio.to_thread(gone.wait, 30)
            text, second, events = await asyncio.wait_for(_run(producer, session, "go on"), 60)
        assert second != first
        assert "[~] 1: read the spec\n[ ] 2: write the code" in text
        assert not [e for e in events if isinstance(e, TodosEvent)]  # nothing changed
        (last,) = [r for r in server.requests if "go on" in str(r["messages"][-1]["content"])]
        assert system_prompt(last).startswith("You plan your work.")
        assert "[~] 1: read the spec" in system_prompt(last)

        log = (tmp_path / "worker-0.log").read_text() + (tmp_path / "worker-1.log").read_text()
        assert "update_todos dropped a malformed item" in log

        shown = await asyncio.to_thread(_watch_until, env, session, "todos ")
        assert "todos      [~] read the spec; [ ] write the code" in shown
