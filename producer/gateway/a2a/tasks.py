"""A reactq turn as an A2A task: its state from the turn's status, its answer as an
artifact (the text, and the structured output as a data part), each file its tools
changed in the workspace as an artifact (a data part: path, kind, size, diff), a parked
turn's waiting calls as the ``input-required`` message."""

from __future__ import annotations

from collections.abc import Sequence

from a2a.types.a2a_pb2 import Artifact, Part, Task, TaskState, TaskStatus

from reactq.producer.gateway.a2a.messages import agent_message
from reactq.producer.gateway.service import Gateway
from reactq.producer.turn_lookup import TurnInfo
from reactq.shared.events import FileChangeEvent
from reactq.shared.turns import TurnStatus

__all__ = ["SETTLED", "TERMINAL", "state_of", "task_of", "task_with_files"]

_STATES: dict[TurnStatus, TaskState] = {
    TurnStatus.QUEUED: TaskState.TASK_STATE_SUBMITTED,
    TurnStatus.RUNNING: TaskState.TASK_STATE_WORKING,
    TurnStatus.AWAITING_CHILDREN: TaskState.TASK_STATE_WORKING,
    TurnStatus.AWAITING_APPROVAL: TaskState.TASK_STATE_INPUT_REQUIRED,
    TurnStatus.COMPLETED: TaskState.TASK_STATE_COMPLETED,
    TurnStatus.CANCELLED: TaskState.TASK_STATE_CANCELED,
    TurnStatus.REJECTED: TaskState.TASK_STATE_REJECTED,
}

TERMINAL = frozenset(
    s
    for s in TurnStatus
    if s not in (TurnStatus.QUEUED, TurnStatus.RUNNING)
    and s not in (TurnStatus.AWAITING_CHILDREN, TurnStatus.AWAITING_APPROVAL)
)
"""The turn states a task ends in."""

SETTLED = TERMINAL | {TurnStatus.AWAITING_APPROVAL}
"""The turn states a blocking send answers at: ended, or waiting for the caller."""


def state_of(status: TurnStatus) -> TaskState:
    """The A2A task state of a turn status (every way of failing is ``failed``)."""
    return _STATES.get(status, TaskState.TASK_STATE_FAILED)


def _waiting_text(info: TurnInfo) -> str:
    calls = ", ".join(f"{c.tool}({c.arguments})" for c in info.pending_approvals)
    return (
        f"approval needed for {calls or 'a tool call'}: answer 'approve' to run it, "
        "anything else to deny it (your text is the reason)"
    )


def task_of(info: TurnInfo, changes: Sequence[FileChangeEvent] = ()) -> Task:
    """The A2A task of a turn (``changes``: the files its tools changed)."""
    state = state_of(info.status)
    task = Task(id=info.turn_id, context_id=info.session_id, status=TaskStatus(state=state))
    final = info.final
    if info.status is TurnStatus.AWAITING_APPROVAL:
        task.status.message.CopyFrom(
            agent_message(_waiting_text(info), info.session_id, info.turn_id, f"{info.turn_id}-ask")
        )
    elif final is not None:
        text = final.text or info.final_text or ""
        message = agent_message(text, info.session_id, info.turn_id, f"{info.turn_id}-final")
        task.status.message.CopyFrom(message)
        task.history.append(message)
        if info.status is TurnStatus.COMPLETED:
            parts = [Part(text=text)]
            if final.output is not None:
                data = Part()
                data.data.struct_value.update(final.output)
                data.media_type = "application/json"
                parts.append(data)
            task.artifacts.append(
                Artifact(artifact_id=f"{info.turn_id}-answer", name="answer", parts=parts)
            )
            for index, change in enumerate(changes):
                task.artifacts.append(_file_artifact(info.turn_id, index, change))
    return task


def _file_artifact(turn_id: str, index: int, change: FileChangeEvent) -> Artifact:
    data = Part(media_type="application/json")
    record = {"path": change.path, "kind": change.kind, "size": change.size}
    if change.from_path is not None:
        record["fromPath"] = change.from_path
    if change.diff:
        record["diff"] = change.diff
    data.data.struct_value.update(record)
    return Artifact(
        artifact_id=f"{turn_id}-file-{index}",
        name=change.path,
        description=f"{change.kind} in the workspace",
        parts=[data],
    )


async def task_with_files(gateway: Gateway, info: TurnInfo) -> Task:
    """The task of a turn, with an artifact per file its tools changed (read from the
    session's stream: once Redis forgot the turn's events, the answer only)."""
    changes: list[FileChangeEvent] = []
    if info.status is TurnStatus.COMPLETED:
        events = await gateway.producer.bus.read(info.session_id, after="0")
        changes = [
            e for e in events if isinstance(e, FileChangeEvent) and e.turn_id == info.turn_id
        ]
    return task_of(info, changes)
