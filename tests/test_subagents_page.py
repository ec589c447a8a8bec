"""Issue 17, item 3 on the page: the gateway's page renders the ``subagent`` events a
parent's session receives as an indented child tree under the parent turn, in a real
headless Chromium (the driver of tests/test_browser.py) against a real `reactq serve`,
a real worker hosting the orchestrator and its subagents, and the scripted model."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.delegation_agents import script
from tests.gateway_support import start_gateway
from tests.helpers import running_pool
from tests.test_browser import _answers, _send, _wait, driver

__all__ = ["driver"]

pytestmark = pytest.mark.e2e
KEY = "subagent-page-key"


@pytest.fixture(scope="module")
def env(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    tmp = tmp_path_factory.mktemp("subagent-page")
    with running_pool(
        redis_url,
        f"{namespace}-subagent-page",
        tmp,
        script,
        agents="tests.delegation_agents:agents",
        REACTQ_API_KEYS=KEY,
    ) as pool_env:
        yield {**pool_env, "REACTQ_TMP": str(tmp)}


def test_the_page_shows_the_child_tree(driver: Any, env: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By

    gateway = start_gateway(env, Path(env["REACTQ_TMP"]), KEY, name="subagent-page")
    try:
        driver.get(gateway.url + "/")
        driver.find_element(By.ID, "session").send_keys(f"tree-{uuid.uuid4().hex[:8]}")
        driver.find_element(By.ID, "agent").send_keys("orchestrator")
        driver.find_element(By.ID, "apikey").send_keys(KEY)
        _send(driver, "ask researcher: ask deep: the tides")
        want = "orchestrator got: researcher got: deep did: the tides"
        _wait(driver, lambda d: want in _answers(d), "the orchestrator's answer")
        assert _answers(driver) == [want]  # a child's final is no answer of the turn
        _wait(
            driver,
            lambda d: (
                len(
                    d.find_elements(
                        By.CSS_SELECTOR, ".subagent-tree .ev.subagent[data-event=final]"
                    )
                )
                == 2
            ),
            "both children's final rows",
        )

        # One block per child session, under the parent turn; the grandchild's block
        # nests inside its parent child's block.
        turn = driver.find_element(By.CSS_SELECTOR, "#timeline .turn")
        child = turn.find_element(By.CSS_SELECTOR, ":scope > .subagent-tree")
        grandchild = child.find_element(By.CSS_SELECTOR, ":scope > .subagent-tree")
        assert child.get_attribute("data-depth") == "1"
        assert grandchild.get_attribute("data-depth") == "2"
        child_sid = child.get_attribute("data-child-session-id") or ""
        grand_sid = grandchild.get_attribute("data-child-session-id") or ""
        assert child_sid.startswith(turn.get_attribute("data-turn-id") + ":")
        head = child.find_element(By.CSS_SELECTOR, ".subagent-head").text
        assert "researcher" in head and child_sid in head and "completed" in head
        assert grand_sid in grandchild.find_element(By.CSS_SELECTOR, ".subagent-head").text

        # Each row: the child event's type and its (capped) text.
        rows = [
            (r.find_element(By.CSS_SELECTOR, ".tag").text.lower(), r.text)
            for r in grandchild.find_elements(By.CSS_SELECTOR, ":scope > .ev.subagent")
        ]
        kinds = [kind for kind, _ in rows]
        assert kinds[0] == "queued" and kinds[-1] == "final" and "started" in kinds
        assert "the tides" in rows[0][1]
        assert "[completed] deep did: the tides" in rows[-1][1]
        # Indented: the child block sits to the right of the turn's own rows.
        own = turn.find_element(By.CSS_SELECTOR, ":scope > .ev.final")
        assert child.location["x"] > own.location["x"]
        assert grandchild.location["x"] > child.location["x"]
    finally:
        gateway.stop()
