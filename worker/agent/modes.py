"""Tool modes: one value sets how tools are declared, parsed, answered and retried.

=========  ====================  ==================  ===========  =====================
mode       tools declared        answer parsed by    results in   retry reminder on
=========  ====================  ==================  ===========  =====================
NATIVE     request ``tools``     provider tool_calls role "tool"  an empty answer
JSON       the system prompt     ``JsonParser``      role "user"  an unparseable answer
PROSE      the system prompt     ``ProseParser``     role "user"  an unparseable answer
=========  ====================  ==================  ===========  =====================

A knob that belongs to another mode is refused at construction with a
ValueError that names the conflict and the fix.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Literal

from reactq.worker.agent.parsers import JsonParser, Parser, ProseParser
from reactq.worker.agent.tools import Registry

__all__ = [
    "JSON_OUTPUT_FORMAT",
    "PROSE_OUTPUT_FORMAT",
    "ModeSettings",
    "ToolMode",
    "build_system_prompt",
    "resolve_mode",
]

ToolMessageRole = Literal["tool", "user"]


class ToolMode(StrEnum):
    """How the model asks for tools."""

    NATIVE = "native"
    """Provider function calling (``tools`` / ``tool_calls``)."""
    JSON = "json"
    """A JSON envelope in the text; tools listed in the system prompt."""
    PROSE = "prose"
    """ReAct ``Thought:`` / ``Action:`` / ``Action Input:`` / ``Final Answer:`` blocks."""


EXAMPLE_HEADING = "\n\nExample (with a tool named get_time):\n"

# Small models follow a worked example far better than a description, and left to
# themselves they write the tool's result too (invented): the example shows the
# exchange turn by turn, and the format says where to stop. Describing the result's
# "Observation (<tool>): ..." form made Qwen2.5 0.5B open every answer with an
# invented one (bench/text_modes.py): only the example shows it.
JSON_OUTPUT_FORMAT = """\
Answer with exactly one JSON object and nothing else.
To call a tool:
{"action": "tool", "tool": "<tool name>", "args": {<arguments>}}
Then stop and wait: you do not know what the tool returns, so never write its result yourself.
When a tool's result gives you what you need (or no tool is needed), give your final answer:
{"action": "final", "answer": "<your answer to the user>"}

Example (with a tool named get_time):
User: What time is it in Oslo?
Assistant: {"action": "tool", "tool": "get_time", "args": {"city": "Oslo"}}
User: Observation (get_time): {"city": "Oslo", "time": "14:05"}
Assistant: {"action": "final", "answer": "It is 14:05 in Oslo."}"""

PROSE_OUTPUT_FORMAT = """\
To call a tool, write exactly these two lines:
Action: <tool name>
Action Input: <the arguments as one JSON object>
Then stop and wait: you do not know what the tool returns, so never write its result yourself.
When a tool's result gives you what you need (or no tool is needed), write:
Final Answer: <your answer to the user>

Example (with a tool named get_time):
User: What time is it in Oslo?
Assistant: Action: get_time
Action Input: {"city": "Oslo"}
User: Observation (get_time): {"city": "Oslo", "time": "14:05"}
Assistant: Final Answer: It is 14:05 in Oslo."""

# The model's own "Observation" is always invented: it has not seen the result yet.
# Cut it off where it starts rather than parse around it ("\nObservation" leaves a
# final answer free to use the word).
TEXT_MODE_STOP = ("\nObservation", "Observation (", "Observation(", "Observation:")

NATIVE_REMINDER = (
    "Your last answer was empty. Answer the user in plain text, or call one of the tools."
)
# The reminders say what was wrong and show the two answers that would do.
JSON_REMINDER = (
    "Your last answer could not be used: {error}. Answer again with only one JSON object: "
    '{{"action": "tool", "tool": "<tool name>", "args": {{...}}}} to call a tool (then '
    "stop: its result comes back to you), or "
    '{{"action": "final", "answer": "<your answer>"}} when you can answer.'
)
PROSE_REMINDER = (
    "Your last answer could not be used: {error}. Answer again with either the two lines "
    '"Action: <tool name>" and "Action Input: {{...}}" to call a tool (then stop: its '
    'result comes back to you), or one line "Final Answer: <your answer>" when you can '
    "answer."
)
# After a result a small model tends to repeat the call or echo the Observation:
# the result says what comes next.
JSON_OBSERVATION_NOTE = (
    'If this answers the question, give your final answer ({"action": "final", ...}) using it.'
)
PROSE_OBSERVATION_NOTE = (
    'If this answers the question, write "Final Answer: " and then your answer from it.'
)


@dataclass(frozen=True)
class ModeSettings:
    """A tool mode with its knobs resolved."""

    mode: ToolMode
    """The mode."""
    parser: Parser | None
    """The text parser (None under NATIVE)."""
    output_format: str
    """The answer format taught in the system prompt ("" under NATIVE)."""
    tool_message_role: ToolMessageRole
    """The role tool results go back in."""
    retry_reminder: str
    """The user message sent before the one retry (``{error}`` is filled in)."""
    stop: tuple[str, ...] = ()
    """Stop sequences every model call carries (the text modes': where the model would
    start writing a tool's result itself)."""
    observation_note: str = ""
    """A line after each tool result in the text modes, saying what to answer next."""

    @property
    def native(self) -> bool:
        """True when tools go in the request and come back as ``tool_calls``."""
        return self.mode is ToolMode.NATIVE


def resolve_mode(
    tool_mode: ToolMode | str,
    *,
    parser: Parser | None = None,
    output_format: str | None = None,
    tool_message_role: str | None = None,
    retry_reminder: str | None = None,
) -> ModeSettings:
    """Check the mode's knobs together; raise ValueError naming a conflict and its fix."""
    try:
        mode = ToolMode(tool_mode)
    except ValueError:
        raise ValueError(
            f"tool_mode must be one of {[m.value for m in ToolMode]}, got {tool_mode!r}"
        ) from None
    if retry_reminder is not None and not (isinstance(retry_reminder, str) and retry_reminder):
        raise ValueError("retry_reminder must be a non-empty string or None")
    if mode is ToolMode.NATIVE:
        for knob, value in (("parser", parser), ("output_format", output_format)):
            if value is not None:
                raise ValueError(
                    f"{knob}= conflicts with tool_mode=ToolMode.NATIVE: native tool calls "
                    f"need no {knob.replace('_', ' ')}; drop {knob}= or use ToolMode.JSON / "
                    "ToolMode.PROSE"
                )
        if tool_message_role not in (None, "tool"):
            raise ValueError(
                f"tool_message_role={tool_message_role!r} conflicts with "
                "tool_mode=ToolMode.NATIVE: native tool results must answer their call in "
                "role 'tool'; for chat templates that need strict user/assistant "
                "alternation use ToolMode.JSON or ToolMode.PROSE"
            )
        return ModeSettings(mode, None, "", "tool", retry_reminder or NATIVE_REMINDER)
    if parser is not None and not isinstance(parser, Parser):
        raise ValueError(f"parser must have a parse(text) -> ParsedStep method, got {parser!r}")
    if output_format is not None and not (isinstance(output_format, str) and output_format):
        raise ValueError("output_format must be a non-empty string or None")
    if tool_message_role not in (None, "user"):
        raise ValueError(
            f"tool_message_role={tool_message_role!r} conflicts with tool_mode={mode}: "
            f"text-mode tool results carry no call id, so they go back as 'user' "
            f"messages; drop tool_message_role= or use ToolMode.NATIVE"
        )
    is_json = mode is ToolMode.JSON
    note = JSON_OBSERVATION_NOTE if is_json else PROSE_OBSERVATION_NOTE
    return ModeSettings(
        mode,
        parser or (JsonParser() if is_json else ProseParser()),
        output_format or (JSON_OUTPUT_FORMAT if is_json else PROSE_OUTPUT_FORMAT),
        "user",
        retry_reminder or (JSON_REMINDER if is_json else PROSE_REMINDER),
        TEXT_MODE_STOP,
        # A format of the agent's own may answer in other words than the note's.
        "" if output_format is not None else note,
    )


def build_system_prompt(system_prompt: str, settings: ModeSettings, registry: Registry) -> str:
    """The system prompt the model gets: the agent's, plus tools and format in text modes."""
    if settings.native:
        return system_prompt
    parts = [system_prompt] if system_prompt else []
    if len(registry):
        lines = ["# Tools", "You can call these tools:"]
        for t in registry:
            schema = json.dumps(t.parameters, ensure_ascii=False, separators=(",", ":"))
            lines.append(f"- {t.name}: {t.description}\n  arguments (JSON Schema): {schema}")
        parts.append("\n".join(lines))
    parts.append("# Output format\n" + settings.output_format)
    return "\n\n".join(parts)
