"""Agents the sandbox and image tools' end-to-end tests load into real `reactq worker`
processes, and the stateless scripts their model follows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from reactq.bundles import file_tools
from reactq.bundles.images import image_tools
from reactq.bundles.sandbox import SandboxLimits, sandbox_tools
from reactq.worker import Agent, ToolMode
from reactq.worker.agent.llm.scripted_server import Reply

# Every worker reads REACTQ_WORKSPACE_ROOT (and REACTQ_SANDBOX) when it imports this module.
code = Agent(
    name="code",
    model="scripted",
    system_prompt="You write and run code in your workspace.",
    tools=file_tools()
    + sandbox_tools(
        limits=SandboxLimits(wall_seconds=10, memory_bytes=512 << 20, max_processes=32)
    ),
    tool_mode=ToolMode.NATIVE,
)

images = Agent(
    name="images",
    model="scripted",
    system_prompt="You look at images in your workspace.",
    tools=image_tools(model="scripted-vision"),
    tool_mode=ToolMode.NATIVE,
)


# Six children of 200 MB each: under the address space limit of each, past the run's.
FORK_AND_ALLOCATE = """
import os, time
for i in range(6):
    if os.fork() == 0:
        block = b'x' * (200 << 20)
        time.sleep(8)
        os._exit(0)
for _ in range(6):
    os.wait()
print('all children done')
"""


def _tool_results(messages: list[Mapping[str, Any]]) -> list[str]:
    return [str(m["content"]) for m in messages if m["role"] == "tool"]


def code_script(request: Mapping[str, Any]) -> Reply:
    """User "bomb": run a fork bomb, then a plain program; "allocate": forked children that
    together pass the memory limit, then a plain program. Otherwise: write a program, run
    it; answer with every tool result joined by " || "."""
    messages = list(request["messages"])
    results = _tool_results(messages[messages.index(_last_user(messages)) :])
    user = str(_last_user(messages)["content"])
    if user == "bomb":
        steps: list[tuple[str, dict[str, Any]]] = [
            (
                "run_code",
                {"code": "import os\nwhile True:\n    try: os.fork()\n    except OSError: pass"},
            ),
            ("run_code", {"code": "print('the worker is fine')"}),
        ]
    elif user == "allocate":
        steps = [
            ("run_code", {"code": FORK_AND_ALLOCATE}),
            ("run_code", {"code": "print('the worker is fine')"}),
        ]
    else:
        steps = [
            ("write_file", {"path": "hello.py", "content": "print('hello', 6 * 7)\n"}),
            ("run_file", {"path": "hello.py"}),
        ]
    if len(results) < len(steps):
        return Reply.tool_calls([steps[len(results)]])
    return Reply.text(" || ".join(results))


def _last_user(messages: list[Mapping[str, Any]]) -> Mapping[str, Any]:
    return [m for m in messages if m["role"] == "user"][-1]


def images_script(request: Mapping[str, Any]) -> Reply:
    """The vision call (an image part in it) answers from the question; the agent's own
    calls ask analyze_image once, then answer with its result."""
    messages = list(request["messages"])
    if request.get("model") == "scripted-vision":
        parts = messages[-1]["content"]
        question = next(p["text"] for p in parts if p["type"] == "text")
        has_image = any(p["type"] == "image_url" for p in parts)
        return Reply.text(f"vision saw an image={has_image} for {question!r}")
    results = _tool_results(messages[messages.index(_last_user(messages)) :])
    if not results:
        return Reply.tool_calls(
            [("analyze_image", {"path": "red.png", "question": "What colour is it?"})]
        )
    return Reply.text("answer: " + results[-1])
