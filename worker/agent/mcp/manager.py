"""MCPManager: a worker process's MCP sessions, opened once on its event loop.

The bridge starts it before it builds the agents' loops (a loop fixes its tool
list when it is built) and closes it at shutdown. Each MCPClient is opened once
however many agents name it; its session is shared by every turn and reopened
by the next call after it dies.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from reactq.shared.errors import MCPError
from reactq.worker.agent.mcp.client import MCPClient
from reactq.worker.agent.mcp.provider import MCPProvider, MCPTool, providers_of
from reactq.worker.agent.tools import Registry

__all__ = ["MCPManager"]

log = logging.getLogger("reactq.mcp")


class MCPManager:
    """Opens the MCP servers of a set of agents and registers their tools."""

    def __init__(self) -> None:
        self._clients: dict[int, MCPClient] = {}
        self.tools: dict[str, list[MCPTool]] = {}
        """Per agent, the MCP tools registered for it."""

    @property
    def clients(self) -> list[MCPClient]:
        """Every client opened, once each."""
        return list(self._clients.values())

    async def start(
        self,
        registry_by_agent: Mapping[str, tuple[Registry, Sequence[MCPProvider | MCPClient]]],
    ) -> None:
        """For each agent, attach its servers' tools to its registry.

        ``registry_by_agent`` maps an agent name to (its registry, its
        ``mcp_servers``). A required server that cannot be reached raises
        MCPError (after closing what was opened); an optional one is skipped.
        """
        try:
            for agent, (registry, servers) in registry_by_agent.items():
                attached: list[MCPTool] = []
                for provider in providers_of(servers):
                    self._clients.setdefault(id(provider.client), provider.client)
                    try:
                        attached.extend(await provider.attach(registry))
                    except MCPError as exc:
                        if provider.required:
                            raise MCPError(f"agent {agent!r}: {exc.message}", agent=agent) from None
                        log.warning("agent %s: MCP server skipped: %s", agent, exc.message)
                self.tools[agent] = attached
                if attached:
                    log.info(
                        "agent %s: %d MCP tools (%s)",
                        agent,
                        len(attached),
                        ", ".join(t.name for t in attached),
                    )
        except BaseException:
            await self.aclose()
            raise

    async def aclose(self) -> None:
        """Close every session (stopping stdio children); errors are logged, not raised."""
        clients, self._clients = list(self._clients.values()), {}
        for client in clients:
            try:
                await client.aclose()
            except Exception as exc:
                log.warning("MCP server %s: close failed: %s", client.name, type(exc).__name__)
