"""Metrics and traces of a real worker: a turn is one trace from the producer's
publish to each model and tool call, and the worker's /metrics counts it."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis as redis_sync

pytest.importorskip("opentelemetry.sdk", reason="pip install 'reactq[otel]'")
pytest.importorskip("prometheus_client", reason="pip install 'reactq[metrics]'")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)

from reactq.producer import Producer
from reactq.shared.settings import Settings
from reactq.worker.agent.llm.scripted_server import ScriptedServer
from tests.conftest import free_port
from tests.helpers import ROOT, lookup_then_answer
from tests.obs_support import http_get, stop
from tests.otel_worker import span_record

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    """The producer's half of the trace (this process); set once per process."""
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        memory = InMemorySpanExporter()
        current.add_span_processor(SimpleSpanProcessor(memory))
        return memory
    provider = TracerProvider()
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    trace.set_tracer_provider(provider)
    return memory


@pytest.fixture(scope="module")
def worker(
    redis_url: str, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("observe")
    model = ScriptedServer(lookup_then_answer).start_in_thread()
    port = free_port()
    env = {
        "REACTQ_REDIS_URL": redis_url,
        "REACTQ_NAMESPACE": f"{namespace}-obs",
        "REACTQ_DATABASE_URL": f"sqlite+aiosqlite:///{tmp / 'state.db'}",
        "OPENAI_BASE_URL": model.base_url,
        "OPENAI_API_KEY": "test-key",
        "REACTQ_TRACING": "1",
        # The conventions' opt-in: this worker's spans carry the messages and tool data.
        "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "true",
        "REACTQ_METRICS_PORT": str(port),
        "REACTQ_METRICS_ADDRESS": "127.0.0.1",
    }
    spans = tmp / "spans.jsonl"
    log = open(tmp / "worker.log", "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.otel_worker",
            "worker",
            "--agents",
            "tests.pool_agents:agent",
            "--concurrency",
            "4",
        ],
        cwd=ROOT,
        env={**os.environ, **env, "REACTQ_TEST_SPANS": str(spans), "PYTHONUNBUFFERED": "1"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    log.close()
    client = redis_sync.Redis.from_url(redis_url)
    try:
        deadline = time.monotonic() + 60
        while client.hlen(f"{env['REACTQ_NAMESPACE']}:workers") < 1:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError((tmp / "worker.log").read_text(errors="replace"))
            time.sleep(0.1)
        yield {"env": env, "proc": proc, "spans": spans, "metrics": port, "tmp": tmp}
    finally:
        client.close()
        stop(proc)
        model.stop()


def _worker_spans(path: Path, trace_id: str, want: int, timeout: float = 30) -> list[dict]:
    deadline = time.monotonic() + timeout
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        spans = [s for s in map(json.loads, lines) if s["trace_id"] == trace_id]
        if len(spans) >= want or time.monotonic() > deadline:
            return spans
        time.sleep(0.1)


async def test_a_turn_is_one_trace_from_publish_to_model_and_tool_calls(
    worker: dict[str, Any], exporter: InMemorySpanExporter
) -> None:
    sid = f"trace-{uuid.uuid4().hex[:8]}"
    tracer = trace.get_tracer("tests")
    async with Producer(Settings.from_env(worker["env"])) as producer:
        with tracer.start_as_current_span("client request") as root:
            handle = await producer.submit(sid, "paris", agent="e2e")
        final = await handle.result(timeout=60)
    assert final.status == "completed"
    trace_id = f"{root.get_span_context().trace_id:032x}"
    mine = [span_record(s) for s in exporter.get_finished_spans()]
    publish = next(s for s in mine if s["name"] == "reactq.drain publish")
    assert publish["trace_id"] == trace_id and publish["kind"] == "PRODUCER"

    # drain, invoke_agent, two chats, one tool call.
    spans = _worker_spans(worker["spans"], trace_id, want=5)
    by_name = {s["name"]: s for s in spans}
    drain = by_name["reactq.drain process"]
    turn = by_name["invoke_agent e2e"]
    tool = by_name["execute_tool lookup"]
    chats = [s for s in spans if s["name"] == "chat scripted"]
    assert drain["kind"] == "CONSUMER" and drain["parent_id"] == publish["span_id"]
    assert turn["parent_id"] == drain["span_id"]
    assert turn["attributes"]["gen_ai.conversation.id"] == sid
    assert turn["attributes"]["reactq.turn.status"] == "completed"
    assert len(chats) == 2 and all(c["parent_id"] == turn["span_id"] for c in chats)
    assert chats[0]["kind"] == "CLIENT" and turn["kind"] == tool["kind"] == "INTERNAL"
    assert chats[0]["attributes"]["gen_ai.operation.name"] == "chat"
    assert chats[0]["attributes"]["gen_ai.request.model"] == "scripted"
    assert chats[0]["attributes"]["gen_ai.conversation.id"] == sid
    assert chats[0]["attributes"]["gen_ai.usage.input_tokens"] > 0
    assert chats[0]["attributes"]["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert tool["parent_id"] == turn["span_id"]
    assert tool["attributes"]["gen_ai.tool.name"] == "lookup"
    assert tool["attributes"]["gen_ai.conversation.id"] == sid
    assert tool["status"] != "ERROR"
    # What answered, as the endpoint named it.
    assert chats[0]["attributes"]["gen_ai.response.model"]
    assert chats[0]["attributes"]["gen_ai.response.id"]
    # Content, opted in: the user's message in, the tool call out, the tool's data.
    asked = json.loads(chats[0]["attributes"]["gen_ai.input.messages"])
    assert asked[-1] == {"role": "user", "parts": [{"type": "text", "content": "paris"}]}
    said = json.loads(chats[0]["attributes"]["gen_ai.output.messages"])
    assert said[0]["parts"][0]["type"] == "tool_call" and said[0]["parts"][0]["name"] == "lookup"
    assert json.loads(tool["attributes"]["gen_ai.tool.call.arguments"]) == {"key": "paris"}
    assert "paris" in tool["attributes"]["gen_ai.tool.call.result"]


async def test_content_stays_off_the_spans_unless_opted_in(
    exporter: InMemorySpanExporter, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default: model and tool spans without the users' data."""
    from reactq.worker.agent.interventions import ToolCallInfo
    from reactq.worker.agent.llm.base import LLMResponse
    from reactq.worker.observe import CAPTURE_CONTENT, Observer, ObservingHooks

    async def spans_of() -> list[dict[str, Any]]:
        exporter.clear()
        hooks = ObservingHooks("a", "m", Observer(None, tracing=True), None)
        await hooks.on_llm_start(iteration=1, messages=[{"role": "user", "content": "pin 1234"}])
        answer = LLMResponse(content="ok", model="m-2026", response_id="cmpl-1")
        await hooks.on_llm_end(iteration=1, response=answer, error=None)
        call = ToolCallInfo(tool="t", args={"pin": "1234"}, call_id="c1", session_id="s")
        await hooks.on_tool_start(call)
        await hooks.on_tool_end(call, output="pin 1234 ok", ok=True)
        return [span_record(s) for s in exporter.get_finished_spans()]

    monkeypatch.delenv(CAPTURE_CONTENT, raising=False)
    default = await spans_of()
    assert [s["name"] for s in default] == ["chat m", "execute_tool t"]
    for span in default:
        assert "1234" not in json.dumps(span["attributes"]), span
    assert default[0]["attributes"]["gen_ai.response.model"] == "m-2026"
    assert default[0]["attributes"]["gen_ai.response.id"] == "cmpl-1"
    monkeypatch.setenv(CAPTURE_CONTENT, "True")
    opted = await spans_of()
    assert all("1234" in json.dumps(s["attributes"]) for s in opted)


def _sample(text: str, name: str, **labels: str) -> float:
    """The value of one sample of the exposition text (0 when absent)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.partition(" ")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


async def test_worker_metrics_count_turns_tokens_and_queue_depth(worker: dict[str, Any]) -> None:
    url = f"http://127.0.0.1:{worker['metrics']}/metrics"
    before = (await asyncio.to_thread(http_get, url))[1]
    sid = f"metrics-{uuid.uuid4().hex[:8]}"
    async with Producer(Settings.from_env(worker["env"])) as producer:
        handle = await producer.submit(sid, "berlin", agent="e2e")
        assert (await handle.result(timeout=60)).status == "completed"

    deadline = time.monotonic() + 10
    while True:
        status, text = await asyncio.to_thread(http_get, url)
        assert status == 200
        done = _sample(text, "reactq_turns_finished_total", agent="e2e", status="completed")
        if done > _sample(before, "reactq_turns_finished_total", agent="e2e", status="completed"):
            break
        assert time.monotonic() < deadline, text
        await asyncio.sleep(0.1)
    started = _sample(text, "reactq_turns_started_total", agent="e2e")
    assert started == _sample(before, "reactq_turns_started_total", agent="e2e") + 1
    assert _sample(text, "reactq_turn_duration_seconds_count", agent="e2e", status="completed") >= 1
    assert _sample(text, "reactq_turns_in_flight") == 0
    assert _sample(text, "reactq_model_tokens_total", agent="e2e", kind="prompt") > 0
    assert _sample(text, "reactq_model_tokens_total", agent="e2e", kind="completion") > 0
    assert 'reactq_queue_depth{agent="e2e"}' in text


def test_the_gateway_serves_metrics_behind_its_api_keys(worker: dict[str, Any]) -> None:
    import urllib.request

    from tests.obs_support import start_reactq, wait_http

    port = free_port()
    env = {**os.environ, **worker["env"], "REACTQ_API_KEYS": "metrics-key-123"}
    env.pop("REACTQ_METRICS_PORT")
    gateway = start_reactq(["serve", "--port", str(port)], env, worker["tmp"] / "gw.log")
    try:
        base = f"http://127.0.0.1:{port}"
        wait_http(f"{base}/healthz", 60, gateway)
        assert http_get(f"{base}/metrics")[0] == 401
        request = urllib.request.Request(
            f"{base}/metrics", headers={"Authorization": "Bearer metrics-key-123"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 200
            text = response.read().decode()
    finally:
        stop(gateway)
    assert 'reactq_queue_depth{agent="e2e"}' in text
    assert _sample(text, "reactq_workers") >= 1
