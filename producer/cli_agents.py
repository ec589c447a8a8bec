"""The ``reactq`` subcommands about the pool's agents: ``reactq agents`` and
``reactq tools AGENT``, read from the worker registry (no agent code is loaded).

Their arguments are declared in ``reactq.cli.parser_state``.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from reactq.producer.client import Producer
from reactq.producer.render import when
from reactq.shared.settings import Settings


async def _agents(args: argparse.Namespace) -> int:
    async with Producer(Settings.from_env()) as producer:
        found = await producer.agents()
    versions: dict[str, list[str]] = {}
    for agent in found:
        if agent.live:
            versions.setdefault(agent.name, []).append(str(agent.config_version))
        if args.json:
            print(agent.model_dump_json())
            continue
        tools = "?" if agent.tools is None else str(agent.tools)
        mode = ",".join(agent.tool_categories) if agent.tool_categories else "all"
        hosts = ", ".join(agent.workers) if agent.workers else agent.worker
        print(
            f"{agent.name}  {'live' if agent.live else 'gone'}  version {agent.config_version}  "
            f"tools {tools} ({mode})  last seen {when(agent.last_seen)} on {hosts}"
        )
    for name, live in versions.items():
        if len(live) > 1:
            print(
                f"reactq: warning: agent {name!r} is live with {len(live)} definitions "
                f"(versions {', '.join(live)}): its turns may reach any of them",
                file=sys.stderr,
            )
    return 0


async def _tools(args: argparse.Namespace) -> int:
    async with Producer(Settings.from_env()) as producer:
        catalogue = await producer.agent_tools(args.agent)
    if args.json:
        print(catalogue.model_dump_json())
        return 0
    if catalogue.tool_categories:
        shown = ", ".join(catalogue.tool_categories)
        print(f"{catalogue.agent}: only {shown} tools (version {catalogue.config_version})")
    width = max((len(t.name) for t in catalogue.tools), default=4)
    for t in catalogue.tools:
        source = t.source if t.origin is None else f"{t.source}:{t.origin}"
        params = ", ".join(t.parameters.get("properties") or {})
        print(
            f"{t.name:<{width}}  {t.category.value:<5}  {source:<14}  ({params})  {t.description}"
        )
    if not catalogue.tools:
        print(f"{catalogue.agent} has no tools")
    return 0


AGENTS_HANDLERS: dict[str, Callable[[argparse.Namespace], Coroutine[Any, Any, int]]] = {
    "agents": _agents,
    "tools": _tools,
}
"""Subcommand -> its coroutine."""
