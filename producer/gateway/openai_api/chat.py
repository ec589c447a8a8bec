"""``POST /v1/chat/completions``: a turn of an agent, as OpenAI's Chat Completions::

POST /v1/chat/completions      {"model": "reactq/<agent>", "messages": [...]}
                               -> chat.completion, or (stream) chat.completion.chunk SSE

Without a session header the request's ``messages`` are the conversation: a stateless
run (``Producer.stateless``), the last message (a user's) the turn, the ones before it
the history, nothing kept afterwards. With ``X-Reactq-Session: <id>`` the session keeps
the history server side and only the last user message is sent as the turn. The agent's
own tool calls stay server side; a client's ``tools`` are refused.

What is supported, partly or not: docs/guide/openai-clients.md.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Header
from fastapi.responses import JSONResponse, Response, StreamingResponse
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import BaseModel, ConfigDict, Field

from reactq.producer.gateway.deps import GatewayDep, ScopeDep
from reactq.producer.gateway.errors import GatewayError
from reactq.producer.gateway.openai_api.common import agent_of_model, model_id
from reactq.producer.gateway.scopes import listing, session_visible
from reactq.producer.gateway.security import KeyScope
from reactq.producer.gateway.service import Gateway
from reactq.producer.handles import TurnHandle
from reactq.shared.events import ActionEvent, ApprovalRequestedEvent, DeltaEvent, FinalEvent
from reactq.shared.messages import ChatMessage, ToolCall
from reactq.shared.turns import SESSION_ID_RE, TurnStatus

__all__ = ["SESSION_HEADER", "ChatRequest", "router"]

router = APIRouter(tags=["openai: chat completions"])

SESSION_HEADER = "X-Reactq-Session"
"""The header naming a session that keeps the conversation server side."""
TURN_HEADER = "X-Reactq-Turn-Id"
"""The response header naming the turn that answered."""

_FINISH = {
    TurnStatus.COMPLETED: "stop",
    TurnStatus.MAX_ITERATIONS: "length",
    TurnStatus.BUDGET_EXCEEDED: "length",
    TurnStatus.BLOCKED: "content_filter",
}
"""The finish reason of a turn that answered; any other status is an error."""
_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
_NO_RETRY = {"x-should-retry": "false"}
"""A failed turn is not retried by the SDK: in a session it would run a second turn."""


class StreamOptions(BaseModel):
    """``stream_options``: with ``include_usage``, a last chunk carries the usage."""

    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


class ChatRequest(BaseModel):
    """A Chat Completions request. Sampling parameters (``temperature``, ``max_tokens``,
    ...) are accepted and left to the agent, whose definition chooses its model."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, description="``reactq/<agent>`` or the agent's name")
    messages: list[dict[str, Any]] = Field(
        min_length=1, description="The conversation; the last one a user's (the turn)"
    )
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(default=None, description="1 only")
    tools: list[dict[str, Any]] | None = Field(default=None, description="Refused when given")
    functions: list[dict[str, Any]] | None = Field(default=None, description="Refused")
    metadata: dict[str, str] | None = Field(default=None, description="Kept on the turn")


def _invalid(message: str, param: str, code: str = "invalid_request") -> GatewayError:
    return GatewayError(message, status=400, error_code=code, field=f"body.{param}")


def _text_of(content: Any, at: str) -> str:
    """The text of a history message's content (a string, or parts of which the text)."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict):
                raise _invalid("a content part must be an object", at)
            if part.get("type") == "text" and isinstance(part.get("text"), str):
                texts.append(part["text"])
        return "".join(texts)
    raise _invalid("content must be a string or a list of content parts", at)


def _history_message(raw: dict[str, Any], at: str) -> ChatMessage:
    """One prior message as reactq stores it (``developer`` is a system message)."""
    role = raw["role"]
    text = _text_of(raw.get("content"), f"{at}.content")
    if role in ("system", "developer"):
        return ChatMessage(role="system", content=text)
    if role == "tool":
        call_id = raw.get("tool_call_id")
        if not isinstance(call_id, str):
            raise _invalid("a tool message needs its tool_call_id", f"{at}.tool_call_id")
        return ChatMessage(role="tool", content=text, tool_call_id=call_id)
    if role == "assistant":
        calls = [
            ToolCall(
                id=str(c.get("id", "")),
                name=str((c.get("function") or {}).get("name", "")),
                arguments=str((c.get("function") or {}).get("arguments", "{}")),
            )
            for c in raw.get("tool_calls") or ()
            if isinstance(c, dict)
        ]
        return ChatMessage(role="assistant", content=text or None, tool_calls=calls or None)
    return ChatMessage(role="user", content=text)


def conversation(body: ChatRequest) -> tuple[list[ChatMessage], Any]:
    """The request's history (every message but the last) and the turn's message (the
    last, a user's: its text or its content parts); 400 naming a bad message."""
    if body.n not in (None, 1):
        raise _invalid("n must be 1: an agent gives one answer a turn", "n")
    if body.tools or body.functions:
        raise _invalid(
            "client-side tools are not supported: the agent's own tools run server side",
            "tools" if body.tools else "functions",
            "unsupported_parameter",
        )
    for i, raw in enumerate(body.messages):
        if raw.get("role") not in _ROLES:
            raise _invalid(
                f"messages[{i}].role must be one of {', '.join(sorted(_ROLES))}",
                f"messages[{i}].role",
            )
    last = body.messages[-1]
    at = f"messages[{len(body.messages) - 1}]"
    if last["role"] != "user":
        raise _invalid("the last message must be the user's: it is the turn", f"{at}.role")
    content = last.get("content")
    if not isinstance(content, str | list) or not content:
        raise _invalid("the last message's content must be text or content parts", at)
    history = [_history_message(m, f"messages[{i}]") for i, m in enumerate(body.messages[:-1])]
    return history, content


class _Turn:
    """A submitted turn and what it holds open (a stateless run's session)."""

    def __init__(self, handle: TurnHandle, stack: contextlib.AsyncExitStack) -> None:
        self.handle = handle
        self.stack = stack
        self.ended = False

    async def close(self, gateway: Gateway, stateless: bool) -> None:
        """Cancel a turn left unfinished in a session; end a stateless run (its session
        deleted, the turn with it)."""
        if not self.ended and not stateless:
            with contextlib.suppress(Exception):
                await gateway.producer.cancel(self.handle.turn_id)
        await self.stack.aclose()


async def _start(
    gateway: Gateway,
    scope: KeyScope | None,
    agent: str,
    body: ChatRequest,
    session: str | None,
) -> _Turn:
    history, message = conversation(body)
    metadata: dict[str, Any] = {**(body.metadata or {}), "via": "openai-chat"}
    stack = contextlib.AsyncExitStack()
    if session is None:
        run = gateway.producer.stateless(
            message, agent=agent, history=history, metadata=metadata, tenant=scope
        )
        handle = await stack.enter_async_context(run)
        return _Turn(handle, stack)
    if not await session_visible(gateway, scope, session):
        raise GatewayError(
            f"no session {session!r}", status=404, error_code="session_not_found", field=None
        )
    handle = await gateway.producer.submit(
        session, message, agent=agent, metadata=metadata, tenant=scope
    )
    return _Turn(handle, stack)


def _usage(final: FinalEvent) -> dict[str, int]:
    prompt = final.usage.get("prompt_tokens", 0)
    completion = final.usage.get("completion_tokens", 0)
    total = final.usage.get("total_tokens", prompt + completion)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": total}


def _failure(final: FinalEvent | None, turn_id: str) -> tuple[int, dict[str, Any]] | None:
    """A turn that did not answer, as OpenAI's error (status, ``error``); None if it did."""
    if final is None:
        return 409, {
            "message": f"the turn waits for a person's approval: decide with POST "
            f"/v1/turns/{turn_id}/decisions (a stateless run cannot wait: use a session)",
            "type": "invalid_request_error",
            "param": None,
            "code": "awaiting_approval",
        }
    if final.status in _FINISH:
        return None
    status = 409 if final.status is TurnStatus.CANCELLED else 500
    return status, {
        "message": f"the turn ended {final.status.value}: {final.text}",
        "type": "invalid_request_error" if status == 409 else "server_error",
        "param": None,
        "code": final.code or final.status.value,
    }


async def _outcome(handle: TurnHandle) -> FinalEvent | None:
    """The turn's final (None: it parked for a person)."""
    async for event in handle.events():
        if isinstance(event, FinalEvent):
            return event
        if isinstance(event, ApprovalRequestedEvent):
            return None
    return None


def _headers(turn: _Turn, session: str | None) -> dict[str, str]:
    out = {TURN_HEADER: turn.handle.turn_id}
    if session is not None:
        out[SESSION_HEADER] = session
    return out


async def _complete(gateway: Gateway, turn: _Turn, agent: str, session: str | None) -> JSONResponse:
    try:
        final = await _outcome(turn.handle)
        turn.ended = True
    finally:
        await turn.close(gateway, session is None)
    headers = _headers(turn, session)
    failed = _failure(final, turn.handle.turn_id)
    if failed is not None or final is None:
        status, error = failed or (500, {})
        return JSONResponse({"error": error}, status_code=status, headers=headers | _NO_RETRY)
    completion = ChatCompletion.model_validate(
        {
            "id": f"chatcmpl-{turn.handle.turn_id}",
            "object": "chat.completion",
            "created": int(final.ts),
            "model": model_id(agent),
            "choices": [
                {
                    "index": 0,
                    "finish_reason": _FINISH[final.status],
                    "logprobs": None,
                    "message": {"role": "assistant", "content": final.text},
                }
            ],
            "usage": _usage(final),
        }
    )
    return JSONResponse(completion.model_dump(mode="json", exclude_unset=True), headers=headers)


def _chunk(turn_id: str, agent: str, created: int, **fields: Any) -> bytes:
    """One ``chat.completion.chunk`` as an SSE frame, built (and checked) by the SDK's type."""
    chunk = ChatCompletionChunk.model_validate(
        {
            "id": f"chatcmpl-{turn_id}",
            "object": "chat.completion.chunk",
            "created": created,
            "model": model_id(agent),
            **fields,
        }
    )
    return f"data: {chunk.model_dump_json(exclude_unset=True)}\n\n".encode()


def _choice(delta: dict[str, Any], finish: str | None = None) -> list[dict[str, Any]]:
    return [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]


async def _chunks(
    gateway: Gateway, turn: _Turn, agent: str, session: str | None, usage: bool
) -> AsyncIterator[bytes]:
    """The turn's text deltas as chunks, its end, then ``[DONE]`` (an error event and
    the end of the stream for a turn that did not answer)."""
    turn_id = turn.handle.turn_id
    created = int(time.time())
    try:
        yield _chunk(turn_id, agent, created, choices=_choice({"role": "assistant", "content": ""}))
        step_text, after_tools, final = "", False, None
        async for event in turn.handle.events():
            if isinstance(event, DeltaEvent) and event.text:
                # Text the model said beside tool calls streams too: a blank line keeps
                # it apart from what it says after their results.
                text = ("\n\n" if after_tools and step_text == "" else "") + event.text
                step_text += event.text
                yield _chunk(turn_id, agent, created, choices=_choice({"content": text}))
            elif isinstance(event, ActionEvent):
                after_tools = after_tools or bool(step_text)
                step_text = ""
            elif isinstance(event, ApprovalRequestedEvent):
                break
            elif isinstance(event, FinalEvent):
                final = event
                break
        turn.ended = True
        failed = _failure(final, turn_id)
        if failed is not None or final is None:
            error = (failed or (500, {}))[1]
            yield f"data: {json.dumps({'error': error})}\n\n".encode()
            return
        if not step_text and final.text:
            # An agent that does not stream (or a guardrail's refusal): the answer at once.
            yield _chunk(turn_id, agent, created, choices=_choice({"content": final.text}))
        yield _chunk(turn_id, agent, created, choices=_choice({}, _FINISH[final.status]))
        if usage:
            yield _chunk(turn_id, agent, created, choices=[], usage=_usage(final))
        yield b"data: [DONE]\n\n"
    finally:
        await turn.close(gateway, session is None)


_COMPLETION_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "model": ChatCompletion,
        "description": "The completion; with ``stream``, ``chat.completion.chunk`` events "
        "(text/event-stream) ending with ``data: [DONE]``",
        "content": {"text/event-stream": {}},
    }
}


@router.post(
    "/chat/completions",
    dependencies=[listing()],
    responses=_COMPLETION_RESPONSES,
    response_class=Response,
    summary="Run a turn as a chat completion",
)
async def create_chat_completion(
    body: ChatRequest,
    gateway: GatewayDep,
    scope: ScopeDep,
    session: Annotated[
        str | None, Header(alias=SESSION_HEADER, pattern=SESSION_ID_RE.pattern)
    ] = None,
) -> Response:
    """A turn of the agent ``model`` names on ``messages`` (a stateless run), or, with
    ``X-Reactq-Session``, the last user message as the session's next turn; its answer
    as a ``chat.completion``, or streamed as ``chat.completion.chunk`` events."""
    agent = await agent_of_model(gateway, body.model, scope)
    turn = await _start(gateway, scope, agent, body, session)
    if not body.stream:
        return await _complete(gateway, turn, agent, session)
    usage = body.stream_options is not None and body.stream_options.include_usage
    return StreamingResponse(
        _chunks(gateway, turn, agent, session, usage),
        media_type="text/event-stream",
        headers={**_headers(turn, session), "Cache-Control": "no-cache"},
    )
