"""The agent of the pool test of the shared rate limit (tests/test_rate_limit.py): its
budget is 80 % of the scripted server's N = 10 requests a second, one request at once."""

from __future__ import annotations

from reactq.worker import Agent, RateLimit, ToolMode
from tests.pool_agents import lookup

agent = Agent(
    name="limited",
    model="scripted",
    system_prompt="You are the rate limit test agent.",
    tools=[lookup],
    tool_mode=ToolMode.NATIVE,
    rate_limit=RateLimit(requests_per_minute=480, burst_seconds=0.1),
)
