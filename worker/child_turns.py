"""Delegation on the worker pool: a turn's ``delegate`` calls become child turns.

``PoolDelegator`` is the ``Delegator`` the drain gives a turn of an agent with
subagents: it checks each task (a subagent of this agent, hosted by the pool, not too
deep, no cycle, a batch within ``max_parallel`` naming each agent once), submits it as
a child turn (``shared/protocol/children.py``; submitting again is a no-op, so a
re-run of the parent never starts a child twice), and once the children ended, turns
their results into the calls' outcomes and their usage into the parent's. A child turn
runs with a ``ForwardingBus``: each of its events (but the token streams) is also
published to the parent's session as a ``subagent`` event.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

from reactq.shared.bus import EventBus, TurnEmitter, publish_all
from reactq.shared.events import BaseEvent, Event, SubagentEvent, UsageEvent
from reactq.shared.messages import ToolCall
from reactq.shared.protocol.children import (
    DELEGATION_METADATA,
    ChildLink,
    Children,
    ChildResult,
    child_ids,
)
from reactq.shared.protocol.workers import WorkerRegistry
from reactq.shared.turns import TurnRequest
from reactq.worker.agent.config import LoopConfig
from reactq.worker.agent.delegation import (
    DELEGATE,
    DelegatedContext,
    DelegationOutcome,
    DelegationRefusedError,
    Task,
    as_subagents,
    tasks_of,
)
from reactq.worker.agent.tools import ToolContext

__all__ = ["FORWARD_TEXT_CHARS", "ForwardingBus", "PoolDelegator", "fold_children"]

log = logging.getLogger("reactq.worker")

E = TypeVar("E", bound=BaseEvent)

FORWARD_TEXT_CHARS = 300
"""How much of a child event's text its ``subagent`` copy carries."""


class PoolDelegator:
    """The delegator of one attempt of one turn (``worker/agent/delegation.py``)."""

    def __init__(
        self,
        children: Children,
        registry: WorkerRegistry,
        config: LoopConfig,
        emitter: TurnEmitter,
        agent: str,
        link: ChildLink | None = None,
        *,
        expired: bool = False,
    ) -> None:
        """``link``: the turn's own parent, when it is a child turn itself; ``expired``:
        the turn was resumed because its wait for children timed out."""
        self.children = children
        self.registry = registry
        self.config = config
        self.subagents = as_subagents(config.subagents)
        self.emitter = emitter
        self.agent = agent
        self.chain = link.chain if link is not None else (agent,)
        self.ancestors = link.ancestors if link is not None else ()
        self.expired = expired

    async def resolve(
        self, calls: list[ToolCall], context: ToolContext
    ) -> tuple[dict[str, DelegatedContext], list[ToolCall]]:
        sid, turn_id = self.emitter.session_id, self.emitter.turn_id
        links, results = await self.children.state(sid, turn_id)
        known: dict[str, DelegatedContext] = {}
        waiting: list[ToolCall] = []
        for call in calls:
            tasks = tasks_of(call)
            if tasks is None:
                continue  # invalid arguments: the executor says so
            refusal = await self._refusal(call, tasks)
            if refusal is not None:
                known[call.id] = _with(context, DelegationOutcome(False, refusal, _REFUSED))
                continue
            done: list[ChildResult] = []
            for index, task in enumerate(tasks):
                key = f"{call.id}#{index}"
                if key in results:
                    done.append(results[key])
                elif key in links:
                    if self.expired:
                        why = "its parent waited longer than REACTQ_DELEGATION_TIMEOUT_SECONDS"
                        await self.children.cancel(links[key], why)
                else:
                    await self._submit(call, index, task, context)
            if len(done) < len(tasks):
                waiting.append(call)
                continue
            for result in done:
                self._count(result)
            known[call.id] = _with(context, _outcome(call, done))
        return known, waiting

    async def _refusal(self, call: ToolCall, tasks: list[Task]) -> str | None:
        allowed = {s.name: s for s in self.subagents}
        if not tasks:
            return "give at least one task"
        if call.name != DELEGATE and len(tasks) > self.config.max_parallel:
            return f"at most {self.config.max_parallel} tasks at once (max_parallel)"
        names = [t.agent for t in tasks]
        if len(set(names)) < len(names):
            return "each agent at most once per call: give one agent one task that says it all"
        depth = len(self.chain)  # of the children this call would make
        for name in names:
            if name not in allowed:
                return f"{name!r} is not one of your subagents ({', '.join(allowed)})"
            if name in self.chain:
                return (
                    f"{name!r} is already in this chain of delegations "
                    f"({' > '.join(self.chain)}): a child may not delegate back to it"
                )
            if depth > self.config.max_delegation_depth:
                return (
                    f"the chain of delegations {' > '.join(self.chain)} is at the depth limit "
                    f"({self.config.max_delegation_depth}, max_delegation_depth)"
                )
            profile = await self.registry.agent_profile(name)
            if profile is None:
                return f"no worker hosts agent {name!r}"
            budget = allowed[name].overrides()
            refused = sorted(set(budget) - set(profile.overridable))
            if refused:
                return f"agent {name!r} does not let a delegation set {', '.join(refused)}"
        return None

    async def _submit(self, call: ToolCall, index: int, task: Task, context: ToolContext) -> None:
        parent_sid, parent_turn = self.emitter.session_id, self.emitter.turn_id
        session_id, turn_id = child_ids(parent_turn, call.id, index)
        link = ChildLink(
            parent_session=parent_sid,
            parent_turn=parent_turn,
            key=f"{call.id}#{index}",
            agent=task.agent,
            session_id=session_id,
            turn_id=turn_id,
            chain=(*self.chain, task.agent),
            ancestors=(*self.ancestors, (parent_sid, parent_turn)),
            created_at=time.time(),
        )
        budget = next(s for s in self.subagents if s.name == task.agent).overrides()
        turn = TurnRequest(
            turn_id=turn_id,
            session_id=session_id,
            agent=task.agent,
            message=task.task,
            context=dict(context.context),
            overrides=budget,
            webhook=False,
            # The parent's identity: a child acts for whom its parent acts for.
            tenant=context.tenant,
            metadata={
                DELEGATION_METADATA: {
                    "parent_session": parent_sid,
                    "parent_turn": parent_turn,
                    "call_id": call.id,
                    "depth": link.depth,
                }
            },
        )
        if await self.children.submit(link, turn):
            for depth, (above_sid, above_turn) in enumerate(reversed(link.ancestors), 1):
                queued = SubagentEvent(
                    session_id=above_sid,
                    turn_id=above_turn,
                    child_session_id=session_id,
                    child_turn_id=turn_id,
                    agent=task.agent,
                    event="queued",
                    text=_cut(task.task),
                    depth=depth,
                )
                await self.children.bus.publish(queued)
            log.info(
                "turn %s delegated to %s: child turn %s (session %s)",
                parent_turn,
                task.agent,
                turn_id,
                session_id,
                extra={"turn_id": parent_turn, "child_turn_id": turn_id},
            )

    def _count(self, result: ChildResult) -> None:
        """The child's usage, as a usage event of the parent (with the step's results)."""
        usage = result.usage
        if not usage and result.cost is None:
            return
        self.emitter.emit_later(
            UsageEvent,
            model=f"subagent:{result.agent}",
            prompt_tokens=usage.get("prompt_tokens", 0),
            completion_tokens=usage.get("completion_tokens", 0),
            total_tokens=usage.get("total_tokens", 0),
            cost=result.cost,
        )


_REFUSED = DelegationRefusedError.code


def _with(context: ToolContext, outcome: DelegationOutcome) -> DelegatedContext:
    fields = {name: getattr(context, name) for name in context.__dataclass_fields__}
    return DelegatedContext(**fields, outcome=outcome)


def _answer_of(result: ChildResult) -> str:
    if result.output is not None:
        return json.dumps(result.output, ensure_ascii=False)
    return result.text


def _outcome(call: ToolCall, done: list[ChildResult]) -> DelegationOutcome:
    if call.name == DELEGATE:
        result = done[0]
        if result.ok:
            return DelegationOutcome(True, _answer_of(result))
        return DelegationOutcome(False, _failure(result))
    entries = [
        {"agent": r.agent, "status": r.status, "result": _answer_of(r)}
        if r.ok
        else {"agent": r.agent, "status": r.status, "error": _failure(r)}
        for r in done
    ]
    text = json.dumps(entries, ensure_ascii=False)
    if not any(r.ok for r in done):
        return DelegationOutcome(False, f"every task failed: {text}")
    return DelegationOutcome(True, text)


def _failure(result: ChildResult) -> str:
    code = f", {result.code}" if result.code else ""
    return f"subagent {result.agent} ended {result.status}{code}: {result.text}"


def fold_children(fields: dict[str, Any], results: Sequence[ChildResult]) -> dict[str, Any]:
    """A parent's final fields with its children's usage and cost added, and the
    per-child breakdown (``subagents``)."""
    if not results:
        return fields
    usage = dict(fields.get("usage") or {})
    cost = fields.get("cost")
    for result in results:
        for name, value in result.usage.items():
            usage[name] = usage.get(name, 0) + value
        if result.cost is not None:
            cost = (cost or 0.0) + result.cost
    return {
        **fields,
        "usage": usage,
        "cost": cost,
        "subagents": [r.breakdown() for r in results],
    }


class ForwardingBus:
    """The bus of a child turn: every event goes to the child's session, and a short
    ``subagent`` copy of it to its parent's, when its class is ``forwarded_to_parents``
    (token streams and usage are not)."""

    def __init__(self, bus: EventBus, link: ChildLink) -> None:
        self.bus = bus
        self.link = link

    async def publish(self, event: E) -> E:
        published = await self.bus.publish(event)
        await self._forward([published])
        return published

    async def publish_many(self, events: Sequence[E], guard: Any = None) -> list[E] | None:
        published = await publish_all(self.bus, events, guard)
        if published is not None:
            await self._forward(published)
        return published

    def subscribe(self, session_id: str, after: str | None = None) -> AsyncIterator[Event]:
        return self.bus.subscribe(session_id, after)

    async def read(
        self, session_id: str, after: str = "0", count: int | None = None
    ) -> list[Event]:
        return await self.bus.read(session_id, after, count)

    async def close(self) -> None:
        await self.bus.close()

    async def _forward(self, events: Sequence[BaseEvent]) -> None:
        shown = [e for e in events if type(e).forwarded_to_parents]
        if not shown:
            return
        # To every turn above, the parent first: a subscriber of the root sees it all.
        above = self.link.ancestors or ((self.link.parent_session, self.link.parent_turn),)
        for depth, (session_id, turn_id) in enumerate(reversed(above), 1):
            copies = [self._copy(e, session_id, turn_id, depth) for e in shown]
            try:
                await publish_all(self.bus, copies)
            except Exception:  # progress is a courtesy: the child's own stream has it all
                log.warning("could not forward %d events to %s", len(copies), turn_id)

    def _copy(self, event: BaseEvent, session_id: str, turn_id: str, depth: int) -> SubagentEvent:
        link = self.link
        return SubagentEvent(
            session_id=session_id,
            turn_id=turn_id,
            depth=depth,
            child_session_id=event.session_id,
            child_turn_id=event.turn_id,
            agent=link.agent,
            event=str(getattr(event, "type", "")),
            text=_summary(event),
            status=str(getattr(event, "status", "") or "") or None,
        )


def _summary(event: BaseEvent) -> str | None:
    """The text an event shows, cut to FORWARD_TEXT_CHARS."""
    data = event.model_dump(exclude_none=True)
    kind = data.get("type")
    shown: str | None
    if kind == "action":
        shown = f"{data.get('tool')}({json.dumps(data.get('args'), ensure_ascii=False)})"
    elif kind == "started":
        shown = f"attempt {data.get('attempt')} on {data.get('worker') or 'a worker'}"
    elif kind in ("observation", "tool_failed"):
        shown = f"{data.get('tool')}: {data.get('output') or data.get('error') or ''}"
    else:
        found = next((data[k] for k in ("text", "message", "error") if data.get(k)), None)
        shown = None if found is None else str(found)
    return None if shown is None else _cut(shown)


def _cut(shown: str) -> str:
    return shown if len(shown) <= FORWARD_TEXT_CHARS else shown[: FORWARD_TEXT_CHARS - 1] + "…"
