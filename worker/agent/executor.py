"""ToolExecutor: runs the tool calls of one step and reports each as events.

Each call is decoded (depth-checked first), validated, passed through the
approval gate and the ``before_tool`` intervention, run under its timeout, and
its result turned into the text the model reads. Every call of a step is
announced (its ``action`` event) before any of them runs, the step's actions in one
publish (with the step's checkpoint when the run stores one then); the results of
a batch go out before the next batch runs, the last batch's with the step's
checkpoint. Consecutive read-only calls run concurrently, at most
``max_parallel_tools`` at once; a ``writes=True`` tool runs alone, in model order.
Every failure is a result the model reads (``[code] error``), never an exception
out of the step. What the model reads, and what the step's events carry, holds no
text UTF-8 cannot carry (``safe_text``; decoded arguments: ``repair_json``), and a
storage driver's error reaches it only as ``tool_storage_error``: its text may hold the
statement and its parameters.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Coroutine, Generator, Mapping
from dataclasses import dataclass
from typing import Any

from reactq.shared.bus import TurnEmitter
from reactq.shared.errors import ToolError
from reactq.shared.events import ActionEvent, ObservationEvent, ToolFailedEvent
from reactq.shared.messages import ToolCall
from reactq.shared.text_checks import repair_json
from reactq.worker.agent.config import LoopConfig
from reactq.worker.agent.interventions import (
    BeforeToolFallback,
    DenyToolCall,
    ReplaceToolArgs,
    ToolCallInfo,
    ToolDecision,
    call_hook,
    maybe_await,
)
from reactq.worker.agent.results import (
    MAX_ARGUMENT_DEPTH,
    arguments_too_deep,
    format_tool_result,
    safe_text,
    tool_error_text,
)
from reactq.worker.agent.tools import Registry, Tool, ToolArgumentsError, ToolContext, progress

__all__ = ["REPEAT_NUDGE", "STORAGE_ERROR", "ToolExecutor"]

log = logging.getLogger("reactq.agent")

# Where a storage driver's errors come from: their text may hold a statement and its
# parameters (another session's data, a path), never for the model to read.
_STORAGE_MODULES = ("sqlalchemy", "sqlite3", "asyncpg", "aiosqlite", "psycopg", "redis")
STORAGE_ERROR = "the tool failed: a storage error (the worker's log has the detail)"
"""What the model reads of a tool that failed on a storage error (``tool_storage_error``)."""


def _is_storage_error(exc: BaseException) -> bool:
    return any(
        (cls.__module__ or "").partition(".")[0] in _STORAGE_MODULES for cls in type(exc).__mro__
    )


REPEAT_NUDGE = (
    "\n\n[Note: you have made this exact call {count} times in this run; its result will "
    "not change. Use the result you have, try different arguments, or give your final answer.]"
)


@dataclass(slots=True)
class _Call:
    """A call of a step: announced, decoded and looked up, then run unless it failed."""

    call: ToolCall
    tool: Tool | None
    args: dict[str, Any]
    context: ToolContext
    output: str | None = None
    failure: tuple[str, str] | None = None  # (code, error), reported after the batch
    given: bool = False  # its result was given (a client tool's): it does not run


class _Deadline:
    """Cancels a task at loop time ``when``; ``expired()`` tells it did.

    A lighter ``asyncio.timeout`` (one timer, no context manager): the tool call
    is the hot path of every step.
    """

    __slots__ = ("_expired", "_handle", "_task")

    def __init__(self, task: asyncio.Task[Any], when: float) -> None:
        self._task = task
        self._expired = False
        self._handle = asyncio.get_running_loop().call_at(when, self._fire)

    def _fire(self) -> None:
        self._expired = True
        self._task.cancel()

    def expired(self) -> bool:
        """True when the deadline cancelled the task (the cancellation is then consumed)."""
        if self._expired and self._task.uncancel() == 0:
            return True
        return False

    def cancel(self) -> None:
        """Disarm the timer."""
        self._handle.cancel()


class _UnderDeadline:
    """Awaits a coroutine, arming its deadline only when it first suspends.

    Cancellation reaches a coroutine only where it waits, so one that finishes
    without waiting (most in-process tools) cannot time out and needs no timer:
    arming and disarming one costs more than such a call. The deadline still
    counts from the start of the call.
    """

    __slots__ = ("_coro", "_when", "deadline")

    def __init__(self, call: Awaitable[Any], limit: float) -> None:
        # A coroutine steps itself; any other awaitable through its iterator.
        self._coro: Coroutine[Any, Any, Any] | Generator[Any, Any, Any] = (
            call if isinstance(call, Coroutine) else call.__await__()
        )
        self._when = asyncio.get_running_loop().time() + limit
        self.deadline: _Deadline | None = None

    def __await__(self) -> Generator[Any, Any, Any]:
        coro = self._coro
        sent: Any = None
        thrown: BaseException | None = None
        while True:
            try:
                waiting = coro.send(sent) if thrown is None else coro.throw(thrown)
            except StopIteration as done:
                return done.value
            if self.deadline is None:
                task = asyncio.current_task()
                assert task is not None
                self.deadline = _Deadline(task, self._when)
            try:
                sent, thrown = (yield waiting), None
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # a cancellation (ours or not): the tool sees it
                sent, thrown = None, exc


def _log_failure(
    item: _Call, context: ToolContext, code: str, error: str, exc: BaseException | None
) -> None:
    """A tool that failed, in the worker's log: the model reads only the error's text, the
    operator gets the session, the turn, the tool and the traceback (redacted by the log
    handler like every other line)."""
    log.warning(
        "tool %s failed: %s",
        item.call.name,
        error,
        exc_info=(type(exc), exc, exc.__traceback__) if exc is not None else None,
        extra={
            "session_id": context.session_id,
            "turn_id": context.turn_id,
            "attempt": context.attempt,
            "tool": item.call.name,
            "call_id": item.call.id,
            "code": code,
        },
    )


class ToolExecutor:
    """Runs tool calls under one LoopConfig (shared by its runs; holds no run state).

    It reads the config's tool_timeout, tool_gate (and its timeout), interventions,
    hooks and repeat_call_limit.
    """

    def __init__(self, registry: Registry, config: LoopConfig) -> None:
        self.registry = registry
        self.config = config

    async def run_step(
        self,
        calls: list[ToolCall],
        emitter: TurnEmitter,
        context: ToolContext,
        *,
        iteration: int,
        seen: dict[tuple[str, str], int],
        truncated: bool = False,
        refused: Mapping[str, str] | None = None,
        given: Mapping[str, tuple[str, bool]] | None = None,
        contexts: Mapping[str, ToolContext] | None = None,
        announced: Callable[[], Awaitable[None]] | None = None,
    ) -> list[str]:
        """Run ``calls``; return the text the model reads for each, in order.

        Every call's ``action`` is published before any of them runs, all in one call:
        ``announced()``, when given, publishes them (the run stores its reply's
        checkpoint there, and the actions go with it: ``TurnEmitter.checkpoint``).
        Results follow in model order: a batch's are published before the next batch
        runs, and the last batch's are left queued on the emitter (``emit_later``)
        for the caller's step checkpoint to take along, right after. ``refused``
        (call id -> reason) answers those calls unrun, as denied; ``given`` (call id ->
        (result, failed)) answers them unrun with that result (or error: a client tool's,
        a person's); ``contexts`` (call id -> context) replaces ``context`` for some calls.
        ``seen`` counts identical calls across the run (for the repeat nudge);
        ``truncated`` says the generation hit the token cap, so broken arguments
        were cut off rather than malformed.
        """
        refused = refused or {}
        given = given or {}
        contexts = contexts or {}
        prepared = [
            self._prepare(
                call, emitter, truncated, contexts.get(call.id, context), refused.get(call.id)
            )
            for call in calls
        ]
        for item in prepared:
            if item.call.id in given:
                result, failed = given[item.call.id]
                item.given = True
                item.failure = ("tool_error", result) if failed else None
                item.output = None if failed else result
        await (announced() if announced is not None else emitter.flush())
        outputs: list[str] = []
        batch: list[_Call] = []
        for item in prepared:
            if (
                item.failure is None
                and not item.given
                and item.tool is not None
                and item.tool.writes
            ):
                outputs += await self._run_batch(batch, emitter, iteration)
                batch = []
                outputs += await self._run_batch([item], emitter, iteration)
            else:
                batch.append(item)
        outputs += await self._run_batch(batch, emitter, iteration)
        limit = self.config.repeat_call_limit
        if limit is not None:
            for index, call in enumerate(calls):
                if call.id in refused or call.id in given:
                    continue
                # The raw text is the key: "identical" means the model wrote the same call.
                key = (call.name, call.arguments.strip())
                seen[key] = count = seen.get(key, 0) + 1
                if count > limit:
                    outputs[index] += REPEAT_NUDGE.format(count=count)
        return outputs

    async def _run_batch(
        self, batch: list[_Call], emitter: TurnEmitter, iteration: int
    ) -> list[str]:
        """Run a batch; its results are queued on the emitter (``emit_later``), and
        published before the next batch runs (no result waits for a later tool)."""
        await emitter.flush()  # the previous batch's results
        runnable = [p for p in batch if p.failure is None and not p.given]
        if len(runnable) == 1:
            await self._execute(runnable[0], iteration)
        elif runnable:
            limit = self.config.max_parallel_tools
            if len(runnable) > limit:
                slots = asyncio.Semaphore(limit)
                await asyncio.gather(*(self._execute(p, iteration, slots) for p in runnable))
            else:
                await asyncio.gather(*(self._execute(p, iteration) for p in runnable))
        # Results are reported in model order, whatever order concurrent calls finished in.
        outputs: list[str] = []
        for p in batch:
            if p.failure is not None:
                outputs.append(self._failed(emitter, p.call, *p.failure))
            else:
                output = safe_text(p.output or "")
                emitter.emit_later(
                    ObservationEvent, tool=p.call.name, call_id=p.call.id, output=output
                )
                outputs.append(output)
        return outputs

    def _prepare(
        self,
        call: ToolCall,
        emitter: TurnEmitter,
        truncated: bool,
        context: ToolContext,
        refusal: str | None,
    ) -> _Call:
        """Announce a call (its action queued on the emitter, published before any call
        runs), decode it and look it up; a failure is kept on the result, reported
        with the step's results (in model order)."""
        raw = call.arguments
        item = _Call(call, None, {}, context)
        if arguments_too_deep(raw):
            emitter.emit_later(ActionEvent, tool=call.name, args=None, call_id=call.id)
            if refusal is None:
                item.failure = (
                    "invalid_arguments",
                    f"the arguments nest deeper than {MAX_ARGUMENT_DEPTH} levels; flatten them",
                )
        else:
            try:
                # A lone surrogate the arguments spell as JSON (``"\\ud800"``) is the
                # model's output too: repaired, like its text (llm/parse.py). A NUL is
                # text UTF-8 carries: the tool judges it (a file tool refuses it).
                args: Any = repair_json(json.loads(raw), nul=False) if raw.strip() else {}
            except ValueError as exc:
                args = raw
                if truncated:
                    item.failure = (
                        "truncated_arguments",
                        "the arguments were cut off by the output token limit; re-issue the "
                        "call with complete (shorter) arguments",
                    )
                else:
                    item.failure = (
                        "invalid_arguments",
                        f"the arguments are not valid JSON ({exc})",
                    )
            emitter.emit_later(ActionEvent, tool=call.name, args=args, call_id=call.id)
            if isinstance(args, dict):
                item.args = args
            elif item.failure is None:
                item.failure = ("invalid_arguments", "the arguments must be a JSON object")
        if refusal is not None:
            item.failure = ("tool_denied", f"the call was denied: {refusal}")
        elif item.failure is None:
            item.tool = self.registry.get(call.name)
            hidden = self.registry.hidden_category(call.name) if item.tool is None else None
            if hidden is not None:
                allowed = ", ".join(sorted(self.registry.categories or ()))
                item.failure = (
                    "tool_denied",
                    f"{call.name!r} is a {hidden.value} tool, and this agent may use only "
                    f"{allowed} tools (available: {', '.join(self.registry.names) or 'none'})",
                )
            elif item.tool is None:
                available = ", ".join(self.registry.names) or "none"
                item.failure = (
                    "unknown_tool",
                    f"there is no tool named {call.name!r} (available: {available})",
                )
        return item

    async def _execute(
        self, item: _Call, iteration: int, slots: asyncio.Semaphore | None = None
    ) -> None:
        if slots is not None:
            async with slots:
                await self._execute(item, iteration)
            return
        call, context = item.call, item.context
        config = self.config
        hooks, interventions = config.hooks, config.interventions
        info: ToolCallInfo | None = None
        if config.tool_gate is not None or interventions is not None or hooks is not None:
            info = ToolCallInfo.of(
                call, item.args, context.session_id, context.turn_id, iteration, context.context
            )
            denial = await self._check(item, info)
            if denial is not None:
                item.failure = ("tool_denied", denial)
                await call_hook(hooks, "on_tool_start", info)
                text = tool_error_text("tool_denied", denial)
                await call_hook(hooks, "on_tool_end", info, output=text, ok=False)
                return
            await call_hook(hooks, "on_tool_start", info)
        ok, text = await self._invoke(item, context)
        if ok:
            if interventions is not None and interventions.after_tool is not None:
                assert info is not None
                text += await self._after_note(info, text)
            item.output = text
        else:
            code, error = text.split("\0", 1)
            item.failure = (code, error)
            text = tool_error_text(code, error)
        if info is not None:
            await call_hook(hooks, "on_tool_end", info, output=text, ok=ok)

    async def _invoke(self, item: _Call, context: ToolContext) -> tuple[bool, str]:
        """(True, result text) or (False, "code\\0error"); ``ctx.progress`` reports on
        this call while it runs."""
        if context.emitter is None:
            return await self._invoke_marked(item, context)
        async with progress.running(context.emitter, item.call.id, item.call.name):
            return await self._invoke_marked(item, context)

    async def _invoke_marked(self, item: _Call, context: ToolContext) -> tuple[bool, str]:
        assert item.tool is not None  # only calls that passed _prepare run
        limit = item.tool.timeout if item.tool.timeout is not None else self.config.tool_timeout
        call = item.tool.call(item.args, context)
        timed = _UnderDeadline(call, limit) if limit is not None else None
        try:
            result = await (call if timed is None else timed)
        except ToolArgumentsError as exc:
            return False, f"invalid_arguments\0{exc.message}"
        except ToolError as exc:
            error = exc.message or type(exc).__name__
            _log_failure(item, context, exc.code, error, exc)
            return False, f"{exc.code}\0{error}"
        except asyncio.CancelledError:
            timer = timed.deadline if timed is not None else None
            if timer is not None and timer.expired():
                error = f"the tool timed out after {limit:g} s"
                _log_failure(item, context, "tool_timeout", error, None)
                return False, f"tool_timeout\0{error}"
            raise
        except Exception as exc:
            if _is_storage_error(exc):
                _log_failure(item, context, "tool_storage_error", type(exc).__name__, exc)
                return False, f"tool_storage_error\0{STORAGE_ERROR}"
            error = f"{type(exc).__name__}: {exc}"
            _log_failure(item, context, "tool_error", error, exc)
            return False, f"tool_error\0{error}"
        finally:
            if timed is not None and timed.deadline is not None:
                timed.deadline.cancel()
        return True, format_tool_result(result)

    async def _check(self, item: _Call, info: ToolCallInfo) -> str | None:
        """The reason the call may not run, or None; may replace ``item.args``."""
        if self.config.tool_gate is not None:
            reason = await self._ask_gate(info)
            if reason is not None:
                return reason
        interventions = self.config.interventions
        if interventions is None or interventions.before_tool is None:
            return None
        try:
            verdict = await maybe_await(interventions.before_tool(info))
        except Exception as exc:
            log.warning("before_tool raised for %s", item.call.name, exc_info=True)
            if interventions.before_tool_fallback is BeforeToolFallback.ALLOW:
                return None
            return f"the call was denied: the policy check failed ({type(exc).__name__})"
        if verdict is None:
            return None
        if isinstance(verdict, DenyToolCall):
            return f"the call was denied: {verdict.reason}"
        if isinstance(verdict, ReplaceToolArgs) and isinstance(verdict.args, dict):
            item.args = dict(verdict.args)
            return None
        if interventions.before_tool_fallback is BeforeToolFallback.ALLOW:
            return None
        return f"the call was denied: the policy check answered {type(verdict).__name__}"

    async def _ask_gate(self, info: ToolCallInfo) -> str | None:
        gate = self.config.tool_gate
        assert gate is not None
        try:
            async with asyncio.timeout(self.config.tool_gate_timeout):
                decision = await maybe_await(gate(info))
        except TimeoutError:
            return "the call was denied: no approval arrived in time"
        except Exception as exc:
            log.warning("tool_gate raised for %s", info.tool, exc_info=True)
            return f"the call was denied: the approver failed ({type(exc).__name__})"
        if decision is True:
            return None
        if isinstance(decision, ToolDecision) and decision.allow is True:
            return None
        if isinstance(decision, ToolDecision) and decision.allow is False:
            return f"the call was denied: {decision.reason or 'the approver said no'}"
        if decision is False:
            return "the call was denied: the approver said no"
        return f"the call was denied: the approver gave no decision ({type(decision).__name__})"

    async def _after_note(self, info: ToolCallInfo, text: str) -> str:
        interventions = self.config.interventions
        assert interventions is not None and interventions.after_tool is not None
        try:
            note = await maybe_await(interventions.after_tool(info, text))
        except Exception:
            log.warning("after_tool raised for %s; no note added", info.tool, exc_info=True)
            return ""
        return f"\n\n{note}" if isinstance(note, str) and note else ""

    def _failed(self, emitter: TurnEmitter, call: ToolCall, code: str, error: str) -> str:
        error = safe_text(error)
        emitter.emit_later(ToolFailedEvent, tool=call.name, call_id=call.id, error=error, code=code)
        return tool_error_text(code, error)
