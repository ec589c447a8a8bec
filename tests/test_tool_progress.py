"""A running tool says how far it got (issue 34, item 4): ``ctx.progress`` publishes
``tool_progress`` events for its call, at most one every 0.25 s with the newest kept;
a sandboxed run streams its output through it, an MCP server's progress
notifications arrive the same way; the CLI shows them."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from reactq.bundles.sandbox import sandbox_tools
from reactq.producer.render import render
from reactq.shared.events import ToolProgressEvent
from reactq.shared.settings import Settings
from reactq.worker.agent import AgentLoop, LoopConfig, Registry, ToolContext, tool
from reactq.worker.agent.llm.scripted_server import Reply
from reactq.worker.agent.mcp import MCPClient, MCPProvider
from reactq.worker.agent.tools.progress import PROGRESS_INTERVAL
from tests.helpers import ROOT
from tests.kernel_support import ListBus, emitter_for, endpoint, scripted, user


@tool
async def crunch(label: str, ctx: ToolContext) -> str:
    """Ten quick reports, a pause, one more."""
    for i in range(1, 11):
        await ctx.progress(f"{label} step {i}", fraction=i / 10)
    await asyncio.sleep(PROGRESS_INTERVAL + 0.2)
    await ctx.progress(f"{label} almost", fraction=2.0, data={"left": 1})
    return f"{label} done"


def _calls(*calls: tuple[str, dict[str, Any]]) -> Reply:
    return Reply.tool_calls(list(calls), call_ids=[f"c{i}" for i in range(1, len(calls) + 1)])


async def _run(registry: Registry, first: Reply) -> ListBus:
    async with endpoint(scripted(first, Reply.text("finished"))) as (_, llm):
        bus = ListBus()
        result = await AgentLoop(llm, registry, LoopConfig(model="m")).run(
            [user("go")], emitter_for(bus)
        )
    assert result.text == "finished", result
    return bus


async def test_reports_are_rate_limited_per_call_the_newest_kept() -> None:
    bus = await _run(
        Registry([crunch]), _calls(("crunch", {"label": "a"}), ("crunch", {"label": "b"}))
    )
    progress = bus.of("tool_progress")
    for call_id, label in (("c1", "a"), ("c2", "b")):
        mine = [(e.message, e.fraction) for e in progress if e.call_id == call_id]
        # The first at once, the tenth replacing the nine between, then the last one.
        assert mine == [
            (f"{label} step 1", 0.1),
            (f"{label} step 10", 1.0),
            (f"{label} almost", 1.0),
        ]
        assert {e.tool for e in progress if e.call_id == call_id} == {"crunch"}
    assert [e.data for e in progress if e.message.endswith("almost")] == [{"left": 1}] * 2
    # Between each call's action and its result, on the turn's stream.
    types = bus.types()
    assert types.index("action") < types.index("tool_progress") < types.index("observation")
    # A tool called outside a run reports to nobody, and does not fail.
    assert await crunch.call({"label": "alone"}, ToolContext()) == "alone done"


async def test_a_sandboxed_run_streams_its_output(tmp_path: Path) -> None:
    if shutil.which("python3") is None:
        pytest.skip("python3 is not on PATH")
    settings = Settings.from_env({}, workspace_root=str(tmp_path), sandbox="none")
    registry = Registry(sandbox_tools(settings))
    code = (
        "import time\nfor i in range(3):\n    print('line', i, flush=True)\n    time.sleep(0.4)\n"
    )
    bus = await _run(registry, _calls(("run_code", {"code": code})))
    progress = bus.of("tool_progress")
    assert [e.message for e in progress] == ["line 0", "line 1", "line 2"], progress
    assert all(e.tool == "run_code" and e.call_id == "c1" for e in progress)
    assert progress[-1].data == {"output": "line 2\n"}
    (observation,) = bus.of("observation")
    assert "line 0\nline 1\nline 2" in observation.output


async def test_an_mcp_servers_progress_arrives_as_the_calls() -> None:
    client = MCPClient(command=[sys.executable, "-m", "tests.mcp_servers.demo", "stdio"], cwd=ROOT)
    async with client:
        registry = Registry()
        await MCPProvider(client, allow=["count_up"]).attach(registry)
        bus = await _run(registry, _calls(("count_up", {"to": 3})))
    progress = bus.of("tool_progress")
    assert [(e.message, e.fraction) for e in progress] == [
        ("counted 1", 1 / 3),
        ("counted 2", 2 / 3),
        ("counted 3", 1.0),
    ], progress
    assert progress[0].data == {"progress": 1.0, "total": 3.0}
    assert bus.of("observation")[0].output == "counted to 3"


def test_the_cli_shows_progress() -> None:
    event = ToolProgressEvent(
        session_id="s", turn_id="t_1", seq=3, tool="run_code", call_id="c1", message="line 2",
        fraction=0.5,
    )  # fmt: skip
    assert render(event) == "progress   run_code: line 2 (50%)"
    assert json.loads(event.model_dump_json())["type"] == "tool_progress"
