"""What a real ``reactq serve`` writes to its log (reactq issue 28, item 8b): an access
line never carries a key, a token or an API key from the query string (a client that
puts its key in ``?key=`` must not leave it in the log), and JSON lines carry no ANSI
colour codes in any field (uvicorn adds a ``color_message`` beside its message)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

from tests.gateway_support import Gateway, start_gateway

pytestmark = pytest.mark.e2e

KEY = "gateway-key-0001"
SECRETS = ("kq-77a1b2c3d4", "ak-88e5f6a7b8", "tk-99c9d0e1f2", "at-11aa22bb33")
ANSI = re.compile("\x1b\\[")


@pytest.fixture(scope="module")
def gateway(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Gateway]:
    tmp = tmp_path_factory.mktemp("gateway-log")
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-gwlog",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'state.db'}",
        "REACTQ_API_KEYS": f"admin:{KEY};prefix=acme-",
        "REACTQ_LOG_FORMAT": "json",
    }
    with start_gateway(env, Path(tmp), KEY) as gw:
        yield gw


def wait_until_sync(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _lines(gateway: Gateway) -> list[dict[str, Any]]:
    out = []
    for raw in gateway.log.read_text(errors="replace").splitlines():
        raw = raw.strip()
        if raw.startswith("{"):
            out.append(json.loads(raw))
    return out


def _access(gateway: Gateway, marker: str) -> list[dict[str, Any]]:
    return [
        line
        for line in _lines(gateway)
        if line.get("logger") == "uvicorn.access" and marker in line["message"]
    ]


def test_the_access_line_redacts_keys_and_tokens_in_the_query(gateway: Gateway) -> None:
    key, api_key, token, access = SECRETS
    query = f"key={key}&api_key={api_key}&token={token}&access_token={access}&marker=m1&KEY={key}"
    with gateway.client() as http:
        http.get(f"/healthz?{query}")
        # The gateway's key itself, in the query of a guarded route (refused: 401).
        httpx2.get(f"{gateway.url}/v1/sessions?key={KEY}&marker=m2", timeout=10)

    lines: list[dict[str, Any]] = []

    def logged() -> bool:
        lines[:] = _access(gateway, "marker=m1") + _access(gateway, "marker=m2")
        return len(lines) == 2

    wait_until_sync(logged, 10, "the two access lines")
    text = json.dumps(lines)
    for secret in (*SECRETS, KEY):
        assert secret not in text, (secret, lines)
    first = lines[0]["message"]
    for name in ("key", "api_key", "token", "access_token", "KEY"):
        assert f"{name}=[REDACTED]" in first, first
    assert "marker=m1" in first  # other parameters stay readable
    assert "key=[REDACTED]" in lines[1]["message"]


def test_json_lines_carry_no_ansi_codes(gateway: Gateway) -> None:
    with gateway.client() as http:
        assert http.get("/healthz?marker=m3").status_code == 200
    wait_until_sync(lambda: bool(_access(gateway, "marker=m3")), 10, "the access line")
    lines = _lines(gateway)
    # The start-up lines uvicorn colours ("Uvicorn running on ...") are among them.
    assert any("Uvicorn running on" in line["message"] for line in lines), lines
    for line in lines:
        assert "color_message" not in line, line
        for value in line.values():
            assert not ANSI.search(str(value)), line
