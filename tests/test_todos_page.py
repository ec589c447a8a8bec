"""Issue 19, item 2: the gateway's page shows a session's todo list, in a real headless
Chromium (the driver of tests/test_browser.py) against a real `reactq serve`, a real
worker and the scripted model: a turn writes the list, and the page shows it live in
its "Todo list" panel and in the turn's timeline."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

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
