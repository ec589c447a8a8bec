"""A run's graph steps in LangGraph's own stream modes: ``events``, ``debug``, ``tasks``
and ``checkpoints``, from the same steps ``RunStream`` builds the messages from.

Every assistant's graph is the ReAct loop (``agent`` <-> ``tools``): each model call is
a task of the node ``agent``, the calls it made one task of ``tools``, and a checkpoint
follows each task (the thread's messages then, and the node that runs next).

===============  ===============================================================
``events``       ``on_chain_start`` / ``on_chain_end`` for the run (name
                 ``LangGraph``), ``on_chat_model_start`` / ``_stream`` / ``_end``
                 for each model call (name ``model``), ``on_tool_start`` /
                 ``on_tool_end`` for each tool call (its name): LangChain's
                 ``astream_events`` v2 shape
``tasks``        ``{"id", "name", "input", "triggers"}`` when a task starts,
                 ``{"id", "name", "error", "result", "interrupts"}`` when it ends
``checkpoints``  ``{"config", "parent_config", "values", "metadata", "next",
                 "tasks"}`` after each task (and one for the run's input)
``debug``        each of those two as ``{"type": "task" | "task_result" |
                 "checkpoint", "timestamp", "step", "payload"}``
===============  ===============================================================

Everything is a function of the turn's events alone (ids from the run id and the step,
times from the events' own ``ts``), so a stream rebuilt to resume after a
``Last-Event-ID`` is the same stream. The checkpoint the run ends on (its last, or the
one it waits on a person at) has the run's id as ``checkpoint_id``: the one the
thread's state and history show. The checkpoints between are this stream's alone.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

__all__ = ["GRAPH_MODES", "GraphTrace"]

GRAPH_MODES = frozenset({"events", "tasks", "checkpoints", "debug"})
"""The stream modes this module serves."""

Part = tuple[str, Any]

_ROOT = "LangGraph"
_MODEL = "model"


def _uuid(*names: object) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, "reactq:" + "/".join(map(str, names))))


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat()


@dataclass
class _Task:
    id: str
    name: str
    step: int
    writes: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class GraphTrace:
    """The graph modes' parts of one run, step by step (see the module's docstring)."""

    run_id: str
    thread_id: str
    modes: frozenset[str]
    step: int = -1
    _task: _Task | None = None
    _model: str | None = None
    _tools: dict[str, str] = field(default_factory=dict)
    _checkpoint: dict[str, Any] | None = None

    @property
    def wanted(self) -> bool:
        """Any of the graph modes was asked for."""
        return bool(self.modes & GRAPH_MODES)

    # The run.

    def started(self, values: dict[str, Any], ts: float) -> list[Part]:
        """The run began with its input (the thread's messages, the human one last)."""
        out = self._event("on_chain_start", _ROOT, self.run_id, {"input": values}, root=True)
        return out + self._checkpoint_parts(values, ts, source="input", next_=["agent"])

    def ended(self, values: dict[str, Any], ts: float, error: str | None) -> list[Part]:
        """The run ended: its output, or the error its open task ended with."""
        out = self._end_model(None)
        out += self._end_task(values, ts, error=error, final=True)
        if error is None:
            out += self._event("on_chain_end", _ROOT, self.run_id, {"output": values}, root=True)
        return out

    # The model's task.

    def model_started(self, values: dict[str, Any], ts: float) -> list[Part]:
        """A model call began (its first output arrived): the ``tools`` task before it
        ended, an ``agent`` task begins."""
        if self._model is not None:
            return []
        out = self._end_task(values, ts)
        out += self._begin_task("agent", values, ts, triggers=["branch:to:agent"])
        self._model = _uuid(self.run_id, self.step, _MODEL)
        out += self._event("on_chat_model_start", _MODEL, self._model, {"input": values})
        return out

    def model_chunk(self, chunk: dict[str, Any]) -> list[Part]:
        """A token delta of the open model call."""
        if self._model is None:
            return []
        return self._event("on_chat_model_stream", _MODEL, self._model, {"chunk": chunk})

    def model_ended(self, message: dict[str, Any], values: dict[str, Any], ts: float) -> list[Part]:
        """The model's message is whole: the ``agent`` task ends, and a ``tools`` task
        begins for the calls it made."""
        out = self.model_started(values, ts)
        out += self._end_model(message)
        if self._task is not None:
            self._task.writes.append(message)
        calls = message.get("tool_calls") or []
        out += self._end_task(values, ts, final=not calls)
        if calls:
            out += self._begin_task(
                "tools", {"messages": [message]}, ts, triggers=["branch:to:tools"]
            )
            for call in calls:
                run = _uuid(self.run_id, self.step, call["id"])
                self._tools[call["id"]] = run
                out += self._event("on_tool_start", call["name"], run, {"input": call["args"]})
        return out

    # The tools' task.

    def tool_ended(self, message: dict[str, Any]) -> list[Part]:
        """One call of the ``tools`` task answered."""
        if self._task is not None:
            self._task.writes.append(message)
        run = self._tools.pop(message["tool_call_id"], _uuid(self.run_id, message["tool_call_id"]))
        return self._event("on_tool_end", message["name"], run, {"output": message})

    def interrupted(
        self, interrupts: list[dict[str, Any]], values: dict[str, Any], ts: float
    ) -> list[Part]:
        """The ``tools`` task waits for a person: it ends with its interrupts, and the
        run's last checkpoint names it as the next."""
        out = self._end_model(None)
        if self._task is None or self._task.name != "tools":
            # The calls waited on came with the wait itself, not as the model's message.
            out += self._end_task(values, ts)
            out += self._begin_task("tools", values, ts, triggers=["branch:to:tools"])
        task = self._task
        assert task is not None
        self._task = None
        out += self._task_result(task, ts, error=None, interrupts=interrupts)
        pending = [{"id": task.id, "name": task.name, "interrupts": interrupts, "state": None}]
        return out + self._checkpoint_parts(
            values, ts, source="loop", next_=[task.name], tasks=pending, final=True
        )

    # The parts.

    def _event(
        self, kind: str, name: str, run: str, data: dict[str, Any], *, root: bool = False
    ) -> list[Part]:
        if "events" not in self.modes:
            return []
        metadata: dict[str, Any] = {"run_id": self.run_id, "thread_id": self.thread_id}
        if not root and self._task is not None:
            metadata |= {"langgraph_node": self._task.name, "langgraph_step": self._task.step}
        event = {
            "event": kind,
            "name": name,
            "run_id": run,
            "tags": [],
            "metadata": metadata,
            "data": data,
            "parent_ids": [] if root else [self.run_id],
        }
        return [("events", event)]

    def _end_model(self, message: dict[str, Any] | None) -> list[Part]:
        model, self._model = self._model, None
        if model is None or message is None:
            return []
        return self._event("on_chat_model_end", _MODEL, model, {"output": message})

    def _begin_task(self, name: str, values: Any, ts: float, *, triggers: list[str]) -> list[Part]:
        self.step += 1
        self._task = _Task(_uuid(self.run_id, self.step, name), name, self.step)
        payload = {"id": self._task.id, "name": name, "input": values, "triggers": triggers}
        return self._debug("task", "tasks", payload, ts)

    def _end_task(
        self, values: dict[str, Any], ts: float, *, error: str | None = None, final: bool = False
    ) -> list[Part]:
        task, self._task = self._task, None
        if task is None:
            return []
        out = self._task_result(task, ts, error=error, interrupts=[])
        if error is not None:
            return out
        next_ = [] if final else ["agent" if task.name == "tools" else "tools"]
        return out + self._checkpoint_parts(values, ts, source="loop", next_=next_, final=final)

    def _task_result(
        self, task: _Task, ts: float, *, error: str | None, interrupts: list[dict[str, Any]]
    ) -> list[Part]:
        result = [["messages", task.writes]] if task.writes else []
        payload = {
            "id": task.id,
            "name": task.name,
            "error": error,
            "result": result,
            "interrupts": interrupts,
        }
        return self._debug("task_result", "tasks", payload, ts)

    def _checkpoint_parts(
        self,
        values: dict[str, Any],
        ts: float,
        *,
        source: str,
        next_: list[str],
        tasks: list[dict[str, Any]] | None = None,
        final: bool = False,
    ) -> list[Part]:
        checkpoint_id = self.run_id if final else _uuid(self.run_id, "checkpoint", self.step)
        config = {
            "configurable": {
                "thread_id": self.thread_id,
                "checkpoint_ns": "",
                "checkpoint_id": checkpoint_id,
            }
        }
        pending = tasks
        if pending is None:
            pending = [
                {
                    "id": _uuid(self.run_id, self.step + 1, n),
                    "name": n,
                    "interrupts": [],
                    "state": None,
                }
                for n in next_
            ]
        payload = {
            "config": config,
            "parent_config": self._checkpoint,
            "values": values,
            "metadata": {"source": source, "step": self.step, "parents": {}, "run_id": self.run_id},
            "next": next_,
            "tasks": pending,
        }
        self._checkpoint = config
        return self._debug("checkpoint", "checkpoints", payload, ts)

    def _debug(self, kind: str, mode: str, payload: dict[str, Any], ts: float) -> list[Part]:
        out: list[Part] = []
        if mode in self.modes:
            out.append((mode, payload))
        if "debug" in self.modes:
            out.append(
                (
                    "debug",
                    {"type": kind, "timestamp": _when(ts), "step": self.step, "payload": payload},
                )
            )
        return out
