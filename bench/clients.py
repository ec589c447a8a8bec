"""CPU a worker's clients spend per call, each beside what it replaced, in one run.

- A non-streamed model call: ``DirectPost`` (reactq.worker.agent.llm.direct: the
  request the SDK builds, sent on aiohttp) beside the SDK's own ``post`` on the same
  ``AsyncOpenAI``, against the scripted server, 32 calls in flight.
- A Redis reply of ten 200-byte strings (LRANGE): redis-py with hiredis's C parser
  beside its Python parser.

CPU is the calling thread's (``time.thread_time``), so the server's own work is
not counted. Usage::

    .venv/bin/python bench/clients.py [--calls 2000] [--redis-url redis://127.0.0.1:6379/0]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx2  # noqa: E402
from redis._parsers import _AsyncRESP3Parser  # noqa: E402
from redis.asyncio import Redis  # noqa: E402

from reactq.worker.agent.llm.openai_client import OpenAICompatibleClient  # noqa: E402
from reactq.worker.agent.llm.scripted_server import Reply, ScriptedServer  # noqa: E402


async def cpu_per_call(
    call: Callable[[], Awaitable[Any]], calls: int, in_flight: int = 32
) -> float:
    """Milliseconds of this thread's CPU per ``call``, ``in_flight`` at a time."""
    for _ in range(50):  # warm: connections, caches
        await call()
    gate = asyncio.Semaphore(in_flight)

    async def one() -> None:
        async with gate:
            await call()

    started = time.thread_time()
    await asyncio.gather(*(one() for _ in range(calls)))
    return (time.thread_time() - started) * 1000 / calls


async def model_calls(calls: int) -> tuple[float, float]:
    """(DirectPost, SDK post) ms of CPU per non-streamed completion."""
    server = ScriptedServer(lambda _request: Reply.text("the weather is fine")).start_in_thread()
    client = OpenAICompatibleClient(base_url=server.base_url, api_key="sk-bench", model="m")
    messages = [{"role": "user", "content": "what is the weather in Oslo? " * 20}]
    body = {"model": "m", "messages": messages}
    try:

        async def direct() -> None:
            await client._post(body)

        async def sdk() -> None:
            response = await client._client.post(
                "/chat/completions", body=body, cast_to=httpx2.Response
            )
            response.json()

        return await cpu_per_call(direct, calls), await cpu_per_call(sdk, calls)
    finally:
        await client.aclose()
        server.stop()


async def redis_replies(url: str, calls: int) -> tuple[float, float]:
    """(hiredis, Python parser) ms of CPU per LRANGE of ten 200-byte strings."""
    key = f"reactq-bench-{uuid.uuid4().hex[:8]}"
    fast = Redis.from_url(url)
    slow = Redis.from_url(url, parser_class=_AsyncRESP3Parser, protocol=3)
    try:
        await fast.rpush(key, *[f"{n:03d}" + "x" * 197 for n in range(10)])
        hiredis = await cpu_per_call(lambda: fast.lrange(key, 0, -1), calls)
        python = await cpu_per_call(lambda: slow.lrange(key, 0, -1), calls)
        return hiredis, python
    finally:
        await fast.delete(key)
        await fast.aclose()
        await slow.aclose()


async def main(args: argparse.Namespace) -> None:
    direct, sdk = await model_calls(args.calls)
    print(f"model call (non-streamed), {args.calls} calls, 32 in flight")
    print(f"  DirectPost (aiohttp)   {direct:6.3f} ms CPU/call")
    print(f"  the SDK's post         {sdk:6.3f} ms CPU/call")
    print(f"  ratio SDK / direct     {sdk / direct:6.1f}x")
    hiredis, python = await redis_replies(args.redis_url, args.calls)
    print(f"Redis LRANGE of 10 x 200 bytes, {args.calls} calls, 32 in flight")
    print(f"  hiredis parser         {hiredis * 1000:6.1f} us CPU/call")
    print(f"  redis-py's Python one  {python * 1000:6.1f} us CPU/call")
    print(f"  ratio Python / hiredis {python / hiredis:6.1f}x")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    asyncio.run(main(parser.parse_args()))
