"""Issue 20, item 8: the watch page lists stored sessions and their turns, and shows a
finished turn's events from the audit log once its Redis stream has expired (deleted
here, as its TTL would), in a real headless Chromium against a real `reactq serve` and
worker. Also ``GET /v1/turns/{id}/events`` on its own: the stream's while it lives,
the audit log's after."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from reactq.shared.keys import Keys
from reactq.shared.settings import Settings
from tests.gateway_support import Gateway, slow_lookup, start_gateway
from tests.helpers import running_pool
from tests.test_browser import _wait, driver  # noqa: F401 - the fixture registers by import

pytestmark = pytest.mark.e2e
KEY = "history-key"


@pytest.fixture(scope="module")
def gateway(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Gateway, dict[str, str]]]:
    tmp = tmp_path_factory.mktemp("history")
    with running_pool(redis_url, f"{namespace}-hist", tmp, slow_lookup, REACTQ_API_KEYS=KEY) as env:
        gw = start_gateway(env, tmp, KEY, name="history")
        try:
            yield gw, env
        finally:
            gw.stop()


def finished_turn(gw: Gateway, session_id: str, message: str) -> str:
    with gw.client() as http:
        accepted = http.post(
            f"/v1/sessions/{session_id}/turns", json={"message": message, "agent": "e2e"}
        )
        assert accepted.status_code == 202, accepted.text
        turn_id: str = accepted.json()["turn_id"]
        for _ in range(600):
            if http.get(f"/v1/turns/{turn_id}").json()["status"] == "completed":
                return turn_id
            time.sleep(0.05)
    raise AssertionError(f"turn {turn_id} did not complete")


def expire_stream(env: dict[str, str], session_id: str) -> None:
    """What the stream's TTL does an hour after the turn: its events leave Redis."""
    keys = Keys.for_settings(Settings.from_env(env))
    client = redis.Redis.from_url(env["REACTQ_REDIS_URL"])
    try:
        assert client.delete(keys.events(session_id)) == 1
    finally:
        client.close()


def test_turn_events_route_reads_the_stream_then_the_audit(
    gateway: tuple[Gateway, dict[str, str]],
) -> None:
    gw, env = gateway
    session = f"hist-{uuid.uuid4().hex[:8]}"
    turn_id = finished_turn(gw, session, "what is 2+2?")
    with gw.client() as http:
        live = http.get(f"/v1/turns/{turn_id}/events").json()
        assert live["source"] == "stream" and live["session_id"] == session
        types = [e["type"] for e in live["events"]]
        assert types[0] == "queued" and types[-1] == "final" and "action" in types
        audited = http.get(f"/v1/turns/{turn_id}/events", params={"source": "audit"}).json()
        assert [e["id"] for e in audited["events"]] == [e["id"] for e in live["events"]]

        expire_stream(env, session)
        after = http.get(f"/v1/turns/{turn_id}/events").json()
        assert after["source"] == "audit" and after["events"] == audited["events"]
        assert (
            http.get(f"/v1/turns/{turn_id}/events", params={"source": "stream"}).json()["events"]
            == []
        )
        missing = http.get("/v1/turns/t_nope/events")
        assert missing.status_code == 404 and missing.json()["code"] == "turn_not_found"
        bad = http.get(f"/v1/turns/{turn_id}/events", params={"source": "disk"})
        assert bad.status_code == 422


def test_the_page_lists_sessions_and_shows_an_expired_turn_from_the_audit(
    driver: Any,  # noqa: F811
    gateway: tuple[Gateway, dict[str, str]],
) -> None:
    from selenium.webdriver.common.by import By

    gw, env = gateway
    session = f"hist-{uuid.uuid4().hex[:8]}"
    first = finished_turn(gw, session, "what is the capital of Peru?")
    second = finished_turn(gw, session, "and of Chile?")
    expire_stream(env, session)

    driver.get(gw.url + "/")
    key = driver.find_element(By.ID, "apikey")
    key.clear()
    key.send_keys(KEY)
    driver.find_element(By.ID, "load-sessions").click()
    row = f'#sessions li[data-session-id="{session}"]'
    listed = _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, row), "the session listed")
    assert "e2e" in listed[0].text
    listed[0].find_element(By.CSS_SELECTOR, "button").click()

    turns = _wait(
        driver,
        lambda d: (
            len(d.find_elements(By.CSS_SELECTOR, "#turns li.past-turn")) == 2
            and d.find_elements(By.CSS_SELECTOR, "#turns li.past-turn")
        ),
        "the session's two turns",
    )
    assert [t.get_attribute("data-turn-id") for t in turns] == [first, second]
    assert all("completed" in t.text for t in turns)
    assert "answer to: and of Chile?" in turns[1].text

    turns[0].find_element(By.CSS_SELECTOR, "button").click()
    box = _wait(
        driver,
        lambda d: d.find_elements(By.CSS_SELECTOR, f'#past .turn[data-turn-id="{first}"]'),
        "the turn's events",
    )[0]
    assert box.get_attribute("data-source") == "audit"
    assert "audit log" in box.find_element(By.CSS_SELECTOR, ".source").text
    assert box.find_element(By.CSS_SELECTOR, ".ev.user").text.endswith(
        "what is the capital of Peru?"
    )
    assert "lookup" in box.find_element(By.CSS_SELECTOR, ".ev.action").text
    final = box.find_element(By.CSS_SELECTOR, ".ev.final").text
    assert final.endswith("answer to: what is the capital of Peru?")
    assert box.find_element(By.CSS_SELECTOR, ".status").text == "completed"
    # The live timeline has nothing to replay: the stream is gone.
    assert not driver.find_elements(By.CSS_SELECTOR, "#timeline .ev")
