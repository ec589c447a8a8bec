"""Issue 19, item 2: the gateway's page shows a session's todo list, in a real headless
Chromium (the driver of tests/test_browser.py) against a real `reactq serve`, a real
worker and the scripted model: a turn writes the list, and the page shows it live in
its "Todo list" panel and in the turn's timeline."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reactq.producer import Producer
from reactq.producer.sync import SyncProducer
from reactq.shared.settings import Settings
from reactq.shared.state.todo_store import TodoItem
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.gateway_support import start_gateway
from tests.helpers import running_pool
from tests.test_browser import _send, _wait, driver
from tests.todo_agents import plan_script

__all__ = ["driver"]

pytestmark = pytest.mark.e2e
KEY = "todo-page-key"


@pytest.fixture(scope="module")
def env(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("todo-page")
    with running_pool(
        redis_url,
        f"{namespace}-todo-page",
        tmp,
        plan_script,
        agents="tests.todo_agents:agents",
        server=ScriptedServer(plan_script),
        REACTQ_API_KEYS=KEY,
    ) as pool_env:
        yield {**pool_env, "REACTQ_TMP": str(tmp)}


def test_the_page_shows_the_todo_list(driver: Any, env: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By

    gateway = start_gateway(env, Path(env["REACTQ_TMP"]), KEY, name="todo-page")
    try:
        driver.get(gateway.url + "/")
        driver.find_element(By.ID, "session").send_keys(f"plan-{uuid.uuid4().hex[:8]}")
        driver.find_element(By.ID, "agent").send_keys("planner")
        driver.find_element(By.ID, "apikey").send_keys(KEY)
        _send(driver, "plan the work")
        _wait(driver, lambda d: d.find_element(By.ID, "plan").is_displayed(), "the todo panel")
        items = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#todo-list li")]
        assert items == ["◐ read the spec", "☐ write the code"]
        row = driver.find_element(By.CSS_SELECTOR, ".turn .ev.todos").text
        assert "read the spec" in row and "write the code" in row
    finally:
        gateway.stop()


async def _planned_session(env: dict[str, str]) -> tuple[str, list[TodoItem]]:
    """A session whose turn wrote the list (through the worker), and the list."""
    session = f"plan-{uuid.uuid4().hex[:8]}"
    async with Producer(Settings.from_env(env)) as producer:
        final = await (await producer.submit(session, "plan", agent="planner")).result(timeout=30)
        assert final.status == "completed", final
        return session, await producer.todos(session)


async def test_a_sessions_todo_list_over_http_and_the_producers(env: dict[str, str]) -> None:
    session, items = await _planned_session(env)
    assert [(i.id, i.text, i.status) for i in items] == [
        ("1", "read the spec", "in_progress"),
        ("2", "write the code", "pending"),
    ]
    gateway = start_gateway(env, Path(env["REACTQ_TMP"]), KEY, name="todo-route")
    try:
        with gateway.client() as client:
            got = client.get(f"/v1/sessions/{session}/todos")
            assert got.status_code == 200, got.text
            assert got.json() == [i.model_dump(mode="json") for i in items]
            missing = client.get(f"/v1/sessions/nosuch-{uuid.uuid4().hex[:6]}/todos")
            assert (missing.status_code, missing.json()["code"]) == (404, "session_not_found")
    finally:
        gateway.stop()
    with SyncProducer(Settings.from_env(env)) as sync:
        assert sync.todos(session) == items
        assert sync.todos(f"never-{uuid.uuid4().hex[:6]}") == []


def test_the_page_loads_the_list_when_a_session_is_opened(driver: Any, env: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By

    session, _ = asyncio.run(_planned_session(env))

    # Its stream is gone (expired): the list can only come from the state store.
    async def expire() -> None:
        async with Producer(Settings.from_env(env)) as producer:
            await producer.redis.delete(producer.keys.events(session))

    asyncio.run(expire())
    gateway = start_gateway(env, Path(env["REACTQ_TMP"]), KEY, name="todo-open")
    try:
        driver.get(gateway.url + "/")
        driver.find_element(By.ID, "apikey").send_keys(KEY)
        driver.find_element(By.ID, "load-sessions").click()
        opener = f'#sessions li[data-session-id="{session}"] button'
        _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, opener), "the session listed")
        driver.find_element(By.CSS_SELECTOR, opener).click()
        _wait(driver, lambda d: d.find_element(By.ID, "plan").is_displayed(), "the todo panel")
        items = [e.text for e in driver.find_elements(By.CSS_SELECTOR, "#todo-list li")]
        assert items == ["◐ read the spec", "☐ write the code"]
        assert not driver.find_elements(By.CSS_SELECTOR, ".turn .ev.todos")  # not from events
    finally:
        gateway.stop()
