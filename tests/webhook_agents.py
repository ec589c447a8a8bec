"""An agent with a default webhook, for ``tests/test_webhooks.py`` (the receiver's
port is known only once the test started it, so it comes in the environment)."""

from __future__ import annotations

import os

from reactq.worker import Agent, ToolMode
from tests.pool_agents import lookup

agent = Agent(
    name="hooked",
    model="scripted",
    system_prompt="You are the webhook test agent.",
    tools=[lookup],
    tool_mode=ToolMode.NATIVE,
    webhook=os.environ["REACTQ_TEST_AGENT_WEBHOOK"],
)
