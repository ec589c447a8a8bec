"""reactq: ReAct agents as a horizontally scaled Celery worker pool."""

from reactq.worker import Agent, ToolMode, tool

__all__ = ["Agent", "ToolMode", "tool"]
