"""MCPClient against a server none of us wrote: the reference "everything" server of the
Model Context Protocol project (npm ``@modelcontextprotocol/server-everything``), run
with the machine's Node.js, over stdio and streamable HTTP.

The package is installed on first use into ``.reactq/npm`` (git-ignored), so a fresh
clone reproduces it; it needs ``node`` and ``npm`` and the npm registry.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from reactq.shared.errors import ToolError
from reactq.worker.agent.mcp import MCPClient, MCPProvider
from reactq.worker.agent.tools import Registry
from tests.conftest import unavailable

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "@modelcontextprotocol/server-everything"
VERSION = "2026.8.31"
PREFIX = ROOT / ".reactq" / "npm"
ENTRY = PREFIX / "node_modules" / PACKAGE / "dist" / "index.js"
HOW = f"install Node.js 20+ and npm, then: npm install --prefix .reactq/npm {PACKAGE}@{VERSION}"


@pytest.fixture(scope="module")
def everything() -> Path:
    """The server's entry script, installed into .reactq/npm when missing."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        unavailable(f"node/npm are not installed: {HOW}")
    if not ENTRY.is_file():
        PREFIX.mkdir(parents=True, exist_ok=True)
        try:
            done = subprocess.run(
                ["npm", "install", "--no-audit", "--no-fund", "--prefix", str(PREFIX),
                 f"{PACKAGE}@{VERSION}"],
                capture_output=True, text=True, timeout=300, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired:
            unavailable(f"npm install of {PACKAGE} timed out: {HOW}")
        if done.returncode != 0 or not ENTRY.is_file():
            unavailable(f"npm install of {PACKAGE} failed ({done.stderr[-300:]!r}): {HOW}")
    return ENTRY


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def everything_http(everything: Path) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        ["node", str(everything), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("the everything server did not listen") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


async def test_everything_over_stdio(everything: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-never-shown")
    client = MCPClient(command=["node", str(everything), "stdio"], env={"GREETING": "hello"})
    async with client:
        registry = Registry()
        await MCPProvider(client, prefix="ev_").attach(registry)
        assert {"ev_echo", "ev_get-sum", "ev_get-env", "ev_get-tiny-image"} <= set(registry.names)

        async def call(name: str, args: dict[str, object]) -> str:
            found = registry.get(name)
            assert found is not None
            return str(await found.call(args))

        assert await call("ev_echo", {"message": "hi there"}) == "Echo: hi there"
        assert "5" in await call("ev_get-sum", {"a": 2, "b": 3})
        image = await call("ev_get-tiny-image", {})
        assert "[image: image/png, about" in image
        # A server we did not write sees none of the worker's secrets.
        env = json.loads(await call("ev_get-env", {}))
        assert env.get("GREETING") == "hello" and "OPENAI_API_KEY" not in env
        # Arguments the server refuses are a tool error the model can read.
        with pytest.raises(ToolError) as info:
            await call("ev_get-sum", {"a": "not a number"})
        assert info.value.message


async def test_everything_over_streamable_http(everything_http: str) -> None:
    async with MCPClient(url=everything_http) as client:
        registry = Registry()
        await MCPProvider(client, allow=["echo", "get-sum"]).attach(registry)
        assert registry.names == ["echo", "get-sum"]
        echo = registry.get("echo")
        assert echo is not None
        assert await echo.call({"message": "over http"}) == "Echo: over http"
