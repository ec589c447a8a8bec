"""Agents on their own endpoints, for the pool test of per-agent endpoints
(tests/test_model_endpoints.py): each reads its endpoint's URL from the test's
environment, its key from a variable it names, and sends a header of its own."""

from __future__ import annotations

import os

from reactq.worker import Agent, Model, ToolMode

left = Agent(
    name="left",
    model="left-model",
    base_url=os.environ.get("E2E_LEFT_URL", "http://127.0.0.1:9/v1"),
    api_key_env="E2E_LEFT_CREDS",
    headers={"X-Tenant": "left"},
    timeout=20,
    max_retries=0,
    tool_mode=ToolMode.NATIVE,
)

right = Agent(
    name="right",
    model="right-model",
    base_url=os.environ.get("E2E_RIGHT_URL", "http://127.0.0.1:9/v1"),
    api_key_env="E2E_RIGHT_CREDS",
    headers={"X-Tenant": "right"},
    max_retries=0,
    # When its own endpoint fails, the turn goes on with a model on the left one.
    fallback_models=[
        Model("big-model", base_url=os.environ.get("E2E_LEFT_URL"), api_key_env="E2E_LEFT_CREDS")
    ],
    tool_mode=ToolMode.NATIVE,
)

agents = [left, right]
