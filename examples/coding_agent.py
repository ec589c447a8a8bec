"""A coding agent: a workspace per session, apply_patch, and run_code in a sandbox.

Run one turn in-process::

    python examples/coding_agent.py

With no ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` it plays a scripted model offline
(the demo model calls no coding tools): write a program, run it, patch it, run it
again. With an endpoint set, your model gets the task. Host it in a pool, from the
repository's root::

    reactq worker --agents examples.coding_agent:agent

run_code needs bubblewrap (``apt-get install bubblewrap``); without it the tools
are left out and the log says why (``REACTQ_SANDBOX=none`` runs code unsandboxed).
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid

from reactq import Agent, LLMResponse, Settings, ToolCall, ToolMode
from reactq.bundles import file_tools, sandbox_tools
from reactq.testing import ScriptedLLM, run_turn

agent = Agent(
    name="coder",
    model="gpt-4o-mini",
    system_prompt=(
        "You are a careful programmer. Work in your workspace: write files, change them "
        "with apply_patch, and run them with run_code or run_file to check your work."
    ),
    tools=file_tools() + sandbox_tools(),
    tool_mode=ToolMode.NATIVE,
)

PATCH = """*** Begin Patch
*** Update File: fizzbuzz.py
@@
-for n in range(1, 6):
+for n in range(1, 16):
*** End Patch"""

PROGRAM = (
    "for n in range(1, 6):\n"
    "    print('FizzBuzz' if n % 15 == 0 else 'Fizz' if n % 3 == 0 "
    "else 'Buzz' if n % 5 == 0 else n)\n"
)


def _call(name: str, **arguments: object) -> LLMResponse:
    call = ToolCall(id=f"c_{uuid.uuid4().hex[:6]}", name=name, arguments=json.dumps(arguments))
    return LLMResponse(tool_calls=[call])


def offline_model() -> ScriptedLLM:
    """What a model would do with the task, step by step."""
    return ScriptedLLM(
        [
            _call("write_file", path="fizzbuzz.py", content=PROGRAM),
            _call("run_file", path="fizzbuzz.py"),
            _call("apply_patch", patch=PATCH),
            _call("run_code", code="import runpy; runpy.run_path('fizzbuzz.py')"),
            "[offline scripted model] fizzbuzz.py now prints FizzBuzz up to 15.",
        ]
    )


async def main(task: str) -> int:
    """One turn of ``agent``, printing each tool call and what it returned."""
    if not any(t.name == "run_code" for t in agent.tools):
        print("run_code is not available here (see the log line above)", file=sys.stderr)
        return 1
    settings = Settings.from_env()
    if settings.openai_base_url or settings.openai_api_key:
        from reactq.cli import main as reactq

        return reactq(["run", task, "--agents", "examples.coding_agent:agent"])
    outcome = await run_turn(
        agent, task, llm=offline_model(), session_id=f"coder-{uuid.uuid4().hex[:8]}"
    )
    for event in outcome.events:
        if event.type == "action":
            print(f"> {event.tool}({json.dumps(event.args)})"[:200])
        elif event.type == "observation":
            print(event.output)
        elif event.type == "tool_failed":
            print(f"[{event.code}] {event.error}")
    print(outcome.final.text)
    return 0 if outcome.final.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main(" ".join(sys.argv[1:]) or "Write fizzbuzz.py up to 15 and run it.")))
