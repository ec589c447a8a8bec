"""Shared by the gateway tests: a real `reactq serve` process, an SSE reader, a model."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

from reactq.worker.agent.llm.scripted_server import Reply
from tests.conftest import free_port
from tests.helpers import ROOT, last_user_text

REACTQ = str(Path(sys.executable).parent / "reactq")


async def slow_lookup(request: Mapping[str, Any]) -> Reply:
    """``lookup`` then answer, like ``lookup_then_answer``; messages with "slow" in them
    take 0.5 s a step, so a test can watch (or interrupt) a turn while it runs."""
    text = last_user_text(request)
    if "slow" in text:
        await asyncio.sleep(0.5)
    if request["messages"][-1]["role"] == "user":
        return Reply.tool_calls([("lookup", {"key": text})])
    return Reply.text(f"answer to: {text}")


@dataclass
class Gateway:
    """A running `reactq serve` process."""

    url: str
    key: str | None
    proc: subprocess.Popen[bytes]
    log: Path

    def headers(self, **extra: str) -> dict[str, str]:
        out = {"Authorization": f"Bearer {self.key}"} if self.key else {}
        return {**out, **extra}

    def client(self, **kwargs: Any) -> httpx2.Client:
        kwargs.setdefault("timeout", httpx2.Timeout(20.0))
        return httpx2.Client(base_url=self.url, headers=self.headers(), **kwargs)

    def logs(self) -> str:
        return self.log.read_text(errors="replace")[-6000:]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def start_gateway(
    env: Mapping[str, str],
    log_dir: Path,
    key: str | None,
    *args: str,
    port: int | None = None,
    name: str = "gateway",
) -> Gateway:
    """Start `reactq serve` on a free loopback port and wait for /healthz."""
    port = port or free_port()
    log = log_dir / f"{name}-{port}.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [REACTQ, "serve", "--host", "127.0.0.1", "--port", str(port), *args],
            cwd=ROOT,
            env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    gateway = Gateway(f"http://127.0.0.1:{port}", key, proc, log)
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"the gateway exited:\n{gateway.logs()}")
        try:
            if httpx2.get(f"{gateway.url}/healthz", timeout=1).status_code == 200:
                return gateway
        except httpx2.TransportError:
            pass
        if time.monotonic() > deadline:
            gateway.stop()
            raise AssertionError(f"the gateway did not answer in 30 s:\n{gateway.logs()}")
        time.sleep(0.05)


@dataclass
class SSE:
    """One Server-Sent Events message."""

    id: str | None
    event: str | None
    data: dict[str, Any]


@dataclass
class SSEReader:
    """Parses a text/event-stream line by line; keeps comments apart."""

    lines: Iterator[str]
    comments: list[str] = field(default_factory=list)
    retry: int | None = None

    def __iter__(self) -> Iterator[SSE]:
        event_id: str | None = None
        kind: str | None = None
        data: list[str] = []
        for line in self.lines:
            if line == "":
                if data:
                    yield SSE(event_id, kind, json.loads("\n".join(data)))
                event_id, kind, data = None, None, []
                continue
            if line.startswith(":"):
                self.comments.append(line)
                continue
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if name == "id":
                event_id = value
            elif name == "event":
                kind = value
            elif name == "data":
                data.append(value)
            elif name == "retry":
                self.retry = int(value)


def read_until(
    client: httpx2.Client,
    url: str,
    stop: Any,
    headers: dict[str, str] | None = None,
    limit: int = 1000,
) -> list[SSE]:
    """GET an event stream and read messages until ``stop(message)`` is true (inclusive)."""
    out: list[SSE] = []
    with client.stream("GET", url, headers=headers or {}) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for message in SSEReader(response.iter_lines()):
            out.append(message)
            if stop(message) or len(out) >= limit:
                break
    return out
