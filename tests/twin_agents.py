"""Two different agents given one name, as two teams' workers might host them in one
namespace: the registry tests start a worker with each (``--agents
tests.twin_agents:first`` and ``...:second``)."""

from __future__ import annotations

from reactq.worker import Agent, ToolMode, tool


@tool
async def refund_order(order: str) -> str:
    """Refund an order."""
    return f"refunded {order}"


@tool(read_only=True)
async def order_status(order: str) -> str:
    """An order's status."""
    return f"{order} shipped"


first = Agent(
    name="support",
    model="scripted",
    system_prompt="You answer questions about orders.",
    tools=[order_status],
    tool_mode=ToolMode.NATIVE,
)

second = Agent(
    name="support",
    model="scripted",
    system_prompt="You refund orders.",
    tools=[order_status, refund_order],
    tool_mode=ToolMode.NATIVE,
)
