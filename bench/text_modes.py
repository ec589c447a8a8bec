"""How often the JSON and PROSE tool modes complete a tool-calling turn with a small
real model, the default format sections beside the old ones (the baseline), in one run.

Each mode answers two questions ``--runs`` times through the real loop and the real
openai SDK against an OpenAI-compatible endpoint (start one per
../shared/real-llm/README.md). A run counts as a success when the turn completed,
called the right tool with the right argument, and the final answer holds the tool's
result (the model cannot know it otherwise). The baseline is the format sections,
retry reminders and parsers of before issue 22 item 7, with no stop sequences.
Runs differ by their seed (``seed`` in the request, which llama.cpp honours) at
``--temperature``. Usage::

    .venv/bin/python bench/text_modes.py --url http://127.0.0.1:8013/v1 [--runs 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from reactq.shared.bus import TurnEmitter  # noqa: E402
from reactq.shared.errors import ParserError  # noqa: E402
from reactq.shared.messages import ChatMessage  # noqa: E402
from reactq.shared.turns import TurnStatus  # noqa: E402
from reactq.worker.agent import AgentLoop, LoopConfig, Registry, ToolMode, tool  # noqa: E402
from reactq.worker.agent.llm.base import LLMResponse  # noqa: E402
from reactq.worker.agent.llm.openai_client import OpenAICompatibleClient  # noqa: E402
from reactq.worker.agent.parsers import ParsedStep, find_json_object  # noqa: E402

# -- the baseline: the text modes as they were before issue 22 item 7 ----------------

OLD_JSON_FORMAT = """\
Answer with exactly one JSON object and nothing else.
To call a tool:
{"thought": "<why>", "action": "tool", "tool": "<tool name>", "args": {<arguments>}}
To give your final answer:
{"thought": "<why>", "action": "final", "answer": "<your answer to the user>"}
After a tool call you will receive its result as "Observation (<tool>): ..."."""

OLD_PROSE_FORMAT = """\
To call a tool, write exactly:
Thought: <why>
Action: <tool name>
Action Input: <the arguments as one JSON object>
Then stop: you will receive "Observation (<tool>): ..." with the result.
When you can answer, write:
Thought: <why>
Final Answer: <your answer to the user>"""

OLD_JSON_REMINDER = (
    "Your last answer could not be used ({error}). Answer again with exactly one JSON "
    'object: {{"action": "tool", "tool": ..., "args": {{...}}}} or '
    '{{"action": "final", "answer": ...}}.'
)
OLD_PROSE_REMINDER = (
    "Your last answer could not be used ({error}). Answer again using the exact format: "
    "Thought:/Action:/Action Input: to call a tool, or Thought:/Final Answer: to answer."
)


class OldJsonParser:
    """The JSON envelope parser before item 7."""

    def parse(self, text: str) -> ParsedStep:
        """Parse one answer."""

        def envelope_of(value: dict[str, Any]) -> bool:
            return value.get("action") in ("tool", "final")

        envelope: Any = None
        try:
            envelope = json.loads(text.strip())
        except ValueError:
            pass
        if not (isinstance(envelope, dict) and envelope_of(envelope)):
            envelope = find_json_object(text, envelope_of)
        if envelope is None:
            raise ParserError("the answer is not a JSON envelope")
        if envelope["action"] == "final":
            answer = envelope.get("answer")
            if answer is None:
                raise ParserError('a "final" envelope needs an "answer"')
            return ParsedStep(final=answer if isinstance(answer, str) else json.dumps(answer))
        name, args = envelope.get("tool"), envelope.get("args") or {}
        if not isinstance(name, str) or not name or not isinstance(args, dict):
            raise ParserError('a "tool" envelope needs a "tool" name and "args" object')
        return ParsedStep(tool=name, args=args)


_OLD_MARKERS = re.compile(
    r"^[ \t]*(Thought|Action|Action Input|Observation|Final Answer)[ \t]*:", re.M | re.I
)


class OldProseParser:
    """The ReAct prose parser before item 7."""

    def parse(self, text: str) -> ParsedStep:
        """Parse one answer."""
        sections: dict[str, str] = {}
        order: list[str] = []
        matches = list(_OLD_MARKERS.finditer(text))
        for index, match in enumerate(matches):
            key = match.group(1).lower()
            end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
            if key not in sections:
                sections[key] = text[match.end() : end].strip()
                order.append(key)
        first = next((k for k in order if k in ("action", "final answer")), None)
        if first == "final answer":
            return ParsedStep(final=sections["final answer"])
        if first != "action" or not sections["action"]:
            raise ParserError("the answer has neither an 'Action:' nor a 'Final Answer:' line")
        name = sections["action"].splitlines()[0].strip().strip("`").strip()
        raw = sections.get("action input", "").strip()
        if not raw:
            return ParsedStep(tool=name)
        try:
            value = json.loads(raw)
        except ValueError:
            value = find_json_object(raw)
        if not isinstance(value, dict):
            raise ParserError("'Action Input:' must be a JSON object")
        return ParsedStep(tool=name, args=value)


# -- the tools and the questions ------------------------------------------------------


@tool
async def get_weather(city: str) -> dict[str, Any]:
    """Get the current weather in a city."""
    return {"city": city, "temp_c": 17, "sky": "drizzle"}


@tool
async def get_population(country: str) -> dict[str, Any]:
    """Get the population of a country."""
    return {"country": country, "population": 4321987}


TOOLS = Registry([get_weather, get_population])


@dataclass(frozen=True)
class Question:
    """A question, the call it needs and a piece of the tool's result the answer holds."""

    text: str
    tool: str
    arg: str
    value: str
    evidence: tuple[str, ...]


QUESTIONS = (
    Question("What is the weather in Paris?", "get_weather", "city", "paris", ("17", "drizzle")),
    Question(
        "What is the population of Norway?",
        "get_population",
        "country",
        "norway",
        ("4321987", "4,321,987", "4.32"),
    ),
)


SHOW = False


class Recorder:
    """The real client, keeping every answer's text (to show why a run failed)."""

    def __init__(self, inner: OpenAICompatibleClient) -> None:
        self.inner = inner
        self.answers: list[str] = []

    async def complete(self, messages: list[dict[str, Any]], **kw: Any) -> LLMResponse:
        """One completion, recorded."""
        response = await self.inner.complete(messages, **kw)
        self.answers.append(response.content or "")
        return response


class Bus:
    """Keeps the events of one run."""

    def __init__(self) -> None:
        self.events: list[Any] = []

    async def publish(self, event: Any) -> Any:
        self.events.append(event)
        return event


def config_for(
    mode: ToolMode, baseline: bool, temperature: float, seed: int, max_tokens: int
) -> LoopConfig:
    """The loop config of one mode, as it was (``baseline``) or as it is."""
    common: dict[str, Any] = {
        "model": "m",
        "tool_mode": mode,
        "temperature": temperature,
        "seed": seed,
        "max_iterations": 4,
        "max_tokens": max_tokens,
    }
    if not baseline:
        return LoopConfig(**common)
    is_json = mode is ToolMode.JSON
    return LoopConfig(
        **common,
        parser=OldJsonParser() if is_json else OldProseParser(),
        output_format=OLD_JSON_FORMAT if is_json else OLD_PROSE_FORMAT,
        retry_reminder=OLD_JSON_REMINDER if is_json else OLD_PROSE_REMINDER,
        stop_sequences=(),
    )


async def one_run(
    url: str,
    mode: ToolMode,
    baseline: bool,
    question: Question,
    seed: int,
    temperature: float,
    max_tokens: int,
) -> tuple[bool, str]:
    """(success, why not) of one turn."""
    llm = OpenAICompatibleClient(
        base_url=url, api_key="none", model="m", timeout=300, max_retries=0
    )
    recorder = Recorder(llm)
    loop = AgentLoop(recorder, TOOLS, config_for(mode, baseline, temperature, seed, max_tokens))
    bus = Bus()
    emitter = TurnEmitter(bus, "bench", f"t{seed}")  # type: ignore[arg-type]
    try:
        result = await loop.run([ChatMessage(role="user", content=question.text)], emitter)
    finally:
        await llm.aclose()
    actions = [e for e in bus.events if e.type == "action"]
    if SHOW:
        print(f"--- {mode.value} baseline={baseline} seed={seed}: {result.status}")
        for answer in recorder.answers:
            print("  > " + answer.replace("\n", "\n    "))
    if result.status is not TurnStatus.COMPLETED:
        return False, result.error.code if result.error is not None else str(result.status)
    if not any(
        a.tool == question.tool
        and str(a.args.get(question.arg, "")).strip().lower() == question.value
        for a in actions
    ):
        return False, "no_right_call"
    if not any(e.lower() in result.text.lower() for e in question.evidence):
        return False, "result_not_used"
    return True, ""


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="the endpoint, e.g. http://127.0.0.1:8013/v1")
    parser.add_argument("--runs", type=int, default=10, help="runs per mode and question")
    parser.add_argument("--temperature", type=float, default=0.7)
    parser.add_argument("--modes", default="json,prose")
    parser.add_argument(
        "--max-tokens", type=int, default=160, help="cap per model call (a CPU runs slowly)"
    )
    parser.add_argument(
        "--only", choices=("baseline", "now"), help="run one side only (while tuning)"
    )
    parser.add_argument("--show", action="store_true", help="print every model answer")
    args = parser.parse_args()
    global SHOW
    SHOW = args.show
    modes = [ToolMode(m) for m in args.modes.split(",")]
    print(
        f"{args.runs} runs per mode and question, temperature {args.temperature}, "
        f"seeds 1..{args.runs}, {args.url}"
    )
    header = f"{'mode':6} {'question':36} {'baseline':>9} {'now':>9}   failures (baseline | now)"
    print(header)
    totals: dict[tuple[ToolMode, bool], int] = {}
    started = time.monotonic()
    for mode in modes:
        for question in QUESTIONS:
            cells, whys = [], []
            for baseline in (True, False):
                if args.only is not None and baseline != (args.only == "baseline"):
                    cells.append("-")
                    whys.append("-")
                    continue
                wins, why = 0, []
                for seed in range(1, args.runs + 1):
                    ok, reason = await one_run(
                        args.url,
                        mode,
                        baseline,
                        question,
                        seed,
                        args.temperature,
                        args.max_tokens,
                    )
                    wins += ok
                    if reason:
                        why.append(reason)
                totals[mode, baseline] = totals.get((mode, baseline), 0) + wins
                cells.append(f"{wins}/{args.runs}")
                whys.append(",".join(sorted(set(why))) or "-")
            print(
                f"{mode.value:6} {question.text:36} {cells[0]:>9} {cells[1]:>9}   "
                f"{whys[0]} | {whys[1]}",
                flush=True,
            )
    for mode in modes:
        n = args.runs * len(QUESTIONS)
        rates = [
            f"{totals[mode, b] * 100 // n}%" if (mode, b) in totals else "-" for b in (True, False)
        ]
        print(f"{mode.value:6} {'all':36} {rates[0]:>9} {rates[1]:>9}")
    print(f"({time.monotonic() - started:.0f} s)")


if __name__ == "__main__":
    asyncio.run(main())
