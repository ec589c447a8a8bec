"""The ``reactq`` subcommands about turns, run through a ``Producer`` (or ``--gateway``):
``send``, ``watch``, ``cancel``, ``undo``, ``approve``/``deny`` and ``history``.

Their arguments are declared in ``reactq.cli.parser``; this module is imported only
when one of them runs.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from reactq.cli import EXIT_ERROR
from reactq.producer.cli_state import database_missing, require_database, session_not_found
from reactq.producer.client import Producer
from reactq.producer.render import render
from reactq.shared.content import ImagePart
from reactq.shared.errors import ConfigError, InvalidEditError
from reactq.shared.events import Event, FinalEvent
from reactq.shared.protocol.outcomes import CancelOutcome
from reactq.shared.services import Service, probe_broker, unavailable
from reactq.shared.settings import Settings
from reactq.shared.turns import TurnStatus


def print_event(event: Event, as_json: bool, *, tag: bool = False) -> None:
    """Print ``event`` as its line (``tag``: with its turn's tag), or as JSON."""
    if as_json:
        print(event.model_dump_json(), flush=True)
        return
    line = render(event, show_turn=tag)
    if line is not None:
        print(line, flush=True)


async def _through_gateway(
    args: argparse.Namespace, run: Callable[[argparse.Namespace], Awaitable[int]]
) -> int:
    """``run`` against ``--gateway``; a gateway that cannot be reached is one line."""
    import httpx2  # the gateway extra: GatewayClient's HTTP client

    try:
        return await run(args)
    except httpx2.TransportError as exc:
        gateway = Service("gateway", "the gateway", args.gateway, "--gateway")
        raise unavailable(gateway, exc) from None


async def _send_via_gateway(args: argparse.Namespace) -> int:
    from reactq.producer.gateway.client import GatewayClient  # the gateway extra

    async with GatewayClient(args.gateway, _client_key()) as client:
        accepted = await client.submit(
            args.session, _message(args), agent=args.agent, strategy=args.strategy
        )
        if args.no_follow:
            print(accepted.turn_id)
            return 0
        final: FinalEvent | None = None
        async for event in client.stream(accepted.events_url, accepted.turn_id):
            print_event(event, args.json)
            if isinstance(event, FinalEvent):
                final = event
        return 0 if final is not None and final.status == TurnStatus.COMPLETED else 1


async def _watch_via_gateway(args: argparse.Namespace) -> int:
    from reactq.producer.gateway.client import GatewayClient  # the gateway extra

    async with GatewayClient(args.gateway, _client_key()) as client:
        async for event in client.events(args.session, after=args.from_id or "$"):
            print_event(event, args.json, tag=True)
    return 0


def _client_key() -> str | None:
    key = Settings.from_env().api_key
    return key.get_secret_value() if key else None


def _message(args: argparse.Namespace) -> str | list[str | ImagePart]:
    """The message ``send`` submits: its text, with the ``--image`` files after it."""
    if not args.image:
        return str(args.message)
    return [args.message, *(ImagePart.from_path(path) for path in args.image)]


async def _send(args: argparse.Namespace) -> int:
    if args.gateway:
        return await _through_gateway(args, _send_via_gateway)

    # A submit with the broker down succeeds (the turn waits in Redis until a reaper
    # dispatches it), which from a shell looks like a hang: say so first, submit nothing.
    # A broker that is Redis itself is checked by the submit's first call.
    settings = Settings.from_env()
    if settings.effective_broker_url != settings.redis_url:
        await asyncio.to_thread(probe_broker, settings)
    async with Producer.from_env() as producer:
        handle = await producer.submit(
            args.session, _message(args), agent=args.agent, strategy=args.strategy
        )
        await _warn_if_no_live_worker(producer, args.agent)
        if args.no_follow:
            print(handle.turn_id)
            return 0
        final: FinalEvent | None = None
        async for event in handle.events():
            print_event(event, args.json)
            if isinstance(event, FinalEvent):
                final = event
        return 0 if final is not None and final.status == TurnStatus.COMPLETED else 1


async def _warn_if_no_live_worker(producer: Producer, agent: str) -> None:
    """Say on stderr when no live worker hosts ``agent``: the turn waits in the queue."""
    hint = await producer.worker_hint(agent)
    if hint is not None:
        print(f"reactq: {hint}", file=sys.stderr, flush=True)


async def _watch(args: argparse.Namespace) -> int:
    if args.gateway:
        return await _through_gateway(args, _watch_via_gateway)

    settings = Settings.from_env()
    async with Producer(settings) as producer:
        if not await _session_exists(producer, args.session):
            raise session_not_found(settings, args.session)
        # Turns of a session interleave here (one queued while another runs): each
        # line carries its turn's tag.
        async for event in producer.subscribe(args.session, after=args.from_id):
            print_event(event, args.json, tag=True)
    return 0


async def _session_exists(producer: Producer, session_id: str) -> bool:
    """True when the session has an event stream in Redis or stored state (``watch``
    refuses a session with neither: most likely a typo, or another REACTQ_NAMESPACE)."""
    if await producer.redis.exists(producer.keys.events(session_id)):
        return True
    if database_missing(producer.settings):
        return False
    return await (await producer.state_store()).get_session(session_id) is not None


async def _cancel(args: argparse.Namespace) -> int:

    async with Producer.from_env() as producer:
        result = await producer.cancel(args.turn_id)
    if args.json:
        print(
            json.dumps(
                {
                    "turn_id": result.turn_id,
                    "outcome": result.outcome,
                    "session_id": result.session_id,
                    "status": result.status,
                }
            )
        )
    else:
        print(f"{result.turn_id}: {result.outcome.replace('_', ' ')}")
    if result.outcome == CancelOutcome.ALREADY_FINISHED:
        # Nothing to cancel: the gateway's 409 ``turn_finished``, as an error line.
        message = f"turn {result.turn_id} has finished already: nothing to cancel"
        if args.json:
            print(json.dumps({"code": "turn_finished", "message": message}), file=sys.stderr)
        else:
            print(f"reactq: error: {message} [turn_finished]", file=sys.stderr)
        return EXIT_ERROR
    return 0


async def _undo(args: argparse.Namespace) -> int:
    """``reactq undo``: revert a finished turn's file changes (here: the workspace root
    must be mounted where this runs)."""
    async with Producer.from_env() as producer:
        report = await producer.undo(args.turn_id)
    if args.json:
        print(report.model_dump_json())
        return 0
    print(f"undid turn {report.turn_id} (session {report.session_id}):")
    for done in report.files:
        print(f"  {done.now:8} {done.path}  (the turn had {done.did} it)")
    return 0


def _edited(raw: str | None) -> dict[str, Any] | None:
    """``--args``: the JSON object an approved call runs with."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise InvalidEditError(f"--args is not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidEditError(f"--args must be a JSON object, got {type(value).__name__}")
    return value


async def _decide(args: argparse.Namespace) -> int:
    """``reactq approve`` / ``reactq deny``: one decision on a waiting tool call."""
    approve = args.command == "approve"
    by = f"cli:{getpass.getuser()}"
    async with Producer.from_env() as producer:
        if approve:
            outcome = await producer.approve(
                args.turn_id, args.call_id, args.note, arguments=_edited(args.args), by=by
            )
        else:
            outcome = await producer.deny(args.turn_id, args.call_id, args.reason, by=by)
    verdict = "approved" if approve else "denied"
    if args.json:
        print(
            json.dumps(
                {
                    "turn_id": args.turn_id,
                    "call_id": args.call_id,
                    "decision": verdict,
                    "session_id": outcome.session_id,
                    "ready": outcome.ready,
                    "arguments": next(
                        (d.arguments for d in outcome.decided if d.call_id == args.call_id), None
                    ),
                }
            )
        )
    else:
        then = "the turn resumes" if outcome.ready else "other calls still wait"
        print(f"{args.turn_id} {args.call_id}: {verdict}; {then}")
    return 0


async def _complete(args: argparse.Namespace) -> int:
    """``reactq complete``: a waiting call's result, in place of running it."""
    if (args.result is None) == (args.error is None):
        raise ConfigError("give the call's RESULT, or --error with the error it failed with")
    result: Any = args.result
    if result is not None:
        try:
            result = json.loads(result)
        except ValueError:
            pass  # plain text: the model reads it as it is
    by = f"cli:{getpass.getuser()}"
    async with Producer.from_env() as producer:
        outcome = await producer.complete_tool(
            args.turn_id, args.call_id, result, error=args.error, by=by
        )
    if args.json:
        keys = {"turn_id": args.turn_id, "call_id": args.call_id}
        print(json.dumps({**keys, "session_id": outcome.session_id, "ready": outcome.ready}))
    else:
        then = "the turn resumes" if outcome.ready else "other calls still wait"
        given = "an error" if args.error is not None else "a result"
        print(f"{args.turn_id} {args.call_id}: given {given}; {then}")
    return 0


async def _history(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    require_database(settings, args.session)
    async with Producer(settings) as producer:
        messages = await producer.history(args.session, branch=args.branch)
        if not messages and await (await producer.state_store()).get_session(args.session) is None:
            raise session_not_found(settings, args.session)
    for m in messages:
        if args.json:
            print(json.dumps({"sequence": m.sequence, **m.model_dump(exclude_none=True)}))
            continue
        if m.tool_calls:
            calls = ", ".join(f"{c.name}({c.arguments})" for c in m.tool_calls)
            text = f"{m.content} " if m.content else ""
            print(f"{m.sequence:>4} {m.role:>9}: {text}[calls {calls}]")
        elif m.role == "tool":
            print(f"{m.sequence:>4} {'tool':>9}: {m.name} -> {m.content}")
        else:
            images = [f"[image: {p.label()}]" for p in m.parts or () if isinstance(p, ImagePart)]
            print(f"{m.sequence:>4} {m.role:>9}: {' '.join([m.content or '', *images]).strip()}")
    return 0


HANDLERS: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "send": _send,
    "watch": _watch,
    "history": _history,
    "cancel": _cancel,
    "undo": _undo,
    "approve": _decide,
    "deny": _decide,
    "complete": _complete,
}
"""Subcommand -> its coroutine."""
