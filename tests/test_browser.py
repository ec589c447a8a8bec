"""The watch page in a real headless Chromium (Debian's, driven by Selenium).

A person's path: open the page, send a message, watch the run live (tool call,
result, final answer, status), lose the connection and see the page resume
without repeating an event. A screenshot goes to test-artifacts/.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.conftest import unavailable
from tests.gateway_support import read_until, slow_lookup, start_gateway
from tests.helpers import ROOT, WorkerPool

pytestmark = pytest.mark.e2e
KEY = "browser-key"
CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture(scope="module")
def driver() -> Iterator[Any]:
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        unavailable(
            "headless Chromium is not installed: apt-get install -y chromium chromium-driver"
        )
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        unavailable("selenium is not installed: make install (it is in the dev extra)")
    profile = tempfile.mkdtemp(prefix="reactq-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--window-size=1100,900",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(flag)
    # An explicit driver path: Selenium never tries to download one.
    browser = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield browser
    finally:
        browser.quit()
        shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="module")
def env(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, str]]:
    server = ScriptedServer(slow_lookup).start_in_thread()
    tmp = tmp_path_factory.mktemp("browser")
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-web",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'state.db'}",
        "OPENAI_BASE_URL": server.base_url,
        "OPENAI_API_KEY": "test-key",
        "REACTQ_API_KEYS": KEY,
        "REACTQ_TMP": str(tmp),
    }
    pool = WorkerPool(env, tmp)
    pool.start(1)
    try:
        pool.wait_ready(redis_url, env["REACTQ_NAMESPACE"], 1)
        yield env
    finally:
        pool.stop()
        server.stop()


def _wait(driver: Any, predicate: Any, what: str, timeout: float = 30) -> Any:
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, timeout, poll_frequency=0.05).until(predicate)
    except TimeoutException:
        ARTIFACTS.mkdir(exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "gateway-page-failure.png"))
        raise AssertionError(f"timed out after {timeout}s waiting for {what}") from None


def _answers(driver: Any) -> list[str]:
    from selenium.webdriver.common.by import By

    return [
        e.text.removeprefix("ANSWER").strip()
        for e in driver.find_elements(By.CSS_SELECTOR, ".ev.final")
    ]


def _send(driver: Any, message: str) -> None:
    from selenium.webdriver.common.by import By

    box = driver.find_element(By.ID, "message")
    box.send_keys(message)
    driver.find_element(By.ID, "send").click()


def test_send_watch_live_and_resume_after_drops(driver: Any, env: dict[str, str]) -> None:
    from selenium.webdriver.common.by import By

    tmp = Path(env["REACTQ_TMP"])
    gateway = start_gateway(env, tmp, KEY, name="web")
    port = int(gateway.url.rsplit(":", 1)[1])
    session = f"web-{uuid.uuid4().hex[:8]}"
    try:
        driver.get(gateway.url + "/?debug")  # window.reactqDebug
        driver.find_element(By.ID, "session").send_keys(session)
        driver.find_element(By.ID, "agent").send_keys("e2e")
        driver.find_element(By.ID, "apikey").send_keys(KEY)
        _send(driver, "slow: what is the capital of France?")

        # Live: the turn runs; drop the page's connection mid-run (its own abort).
        _wait(driver, lambda d: d.find_elements(By.CSS_SELECTOR, ".ev.action"), "the tool call")
        driver.execute_script("window.reactqDebug.drop()")
        _wait(
            driver,
            lambda d: "answer to: slow: what is the capital of France?" in _answers(d),
            "the first final answer",
        )
        assert driver.execute_script("return window.reactqDebug.connects") >= 2
        action = driver.find_element(By.CSS_SELECTOR, ".ev.action").text
        assert "lookup" in action and '"key":"slow: what is the capital of France?"' in action
        assert "lookup →" in driver.find_element(By.CSS_SELECTOR, ".ev.observation").text
        assert driver.find_element(By.CSS_SELECTOR, ".turn .status").text == "completed"
        # The context gauge: one row per turn, updated by each model call's usage.
        gauges = driver.find_elements(By.CSS_SELECTOR, ".turn .ev.gauge")
        assert len(gauges) == 1 and "% of" in gauges[0].text, [g.text for g in gauges]

        # The server goes away and comes back on the same address: the page resumes.
        gateway.stop()
        _wait(
            driver,
            lambda d: d.find_element(By.ID, "conn").text != "live",
            "the page to notice the lost connection",
        )
        gateway = start_gateway(env, tmp, KEY, port=port, name="web-again")
        _wait(driver, lambda d: d.find_element(By.ID, "conn").text == "live", "reconnection")
        _send(driver, "slow: and of Italy?")
        _wait(
            driver,
            lambda d: "answer to: slow: and of Italy?" in _answers(d),
            "the second final answer",
        )

        # Nothing lost, nothing repeated: exactly the session's stream, in order.
        seen = driver.execute_script("return window.reactqDebug.ids")
        with gateway.client() as client:
            stored = read_until(
                client,
                f"/v1/sessions/{session}/events?after=0",
                lambda m: m.event == "final" and "Italy" in m.data["text"],
            )
        assert seen == [m.id for m in stored]
        rows = driver.execute_script(
            "return [...document.querySelectorAll('[data-event-id]')].map(e => e.dataset.eventId)"
        )
        assert len(rows) == len(set(rows))
        statuses = [e.text for e in driver.find_elements(By.CSS_SELECTOR, ".turn .status")]
        assert statuses == ["completed", "completed"]

        # The API key stays with the tab (sessionStorage), never on disk (localStorage);
        # the page has an icon the gateway serves.
        stored_key = "return [sessionStorage.getItem('reactq.apikey'), " \
            "localStorage.getItem('reactq.apikey')]"  # fmt: skip
        assert driver.execute_script(stored_key) == [KEY, None]
        icon = driver.execute_script(
            "const l = document.querySelector('link[rel=icon]'); "
            "return l && fetch(l.href).then(r => [r.status, r.headers.get('content-type')])"
        )
        assert icon is not None and icon[0] == 200 and icon[1].startswith("image/svg+xml"), icon

        # A type the page has no view for is still shown: a plain line, its type and fields.
        driver.execute_script(
            "render({type: 'new_fangled', id: 'x-1', session_id: arguments[0], turn_id: 't_x', "
            "seq: 1, answer: 42})",
            session,
        )
        generic = driver.find_element(By.CSS_SELECTOR, ".ev.generic[data-event-id='x-1']")
        row = generic.get_attribute("textContent") or ""
        assert "new_fangled" in row and '{"answer":42}' in row, row

        # A tool's progress: one row per call, updated in place as reports come.
        for n, (message, fraction) in enumerate((("started", 0.1), ("halfway", 0.5)), 1):
            driver.execute_script(
                "render({type: 'tool_progress', id: 'p-' + arguments[1], session_id: arguments[0],"
                " turn_id: 't_p', seq: arguments[1], tool: 'index', call_id: 'c9',"
                " message: arguments[2], fraction: arguments[3], data: null})",
                session,
                n,
                message,
                fraction,
            )
        rows = driver.find_elements(By.CSS_SELECTOR, ".ev.progress[data-call-id='c9']")
        assert len(rows) == 1, [r.text for r in rows]
        assert "index: halfway (50%)" in (rows[0].get_attribute("textContent") or "")

        ARTIFACTS.mkdir(exist_ok=True)
        driver.save_screenshot(str(ARTIFACTS / "gateway-page.png"))
    finally:
        gateway.stop()
