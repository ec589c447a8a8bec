"""CancelSignal: one shape for the two cancellation handles a run accepts.

``AgentLoop.run(cancel=...)`` takes an ``asyncio.Event`` or a zero-argument
callable returning True once the run should stop. The loop checks it between
steps and races it against each model call, so a streaming generation is
closed mid-way.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeAlias, TypeVar

__all__ = ["CancelEvent", "CancelHandle", "CancelSignal", "RunCancelled"]

T = TypeVar("T")
CancelHandle: TypeAlias = asyncio.Event | Callable[[], bool]
"""What ``cancel=`` accepts."""

# A callable cannot be awaited, so while a model call runs it is polled this often.
POLL_INTERVAL = 0.02


class RunCancelled(Exception):
    """Internal: the cancel handle fired while the run waited on something."""


class CancelEvent(asyncio.Event):
    """An ``asyncio.Event`` that, when set, also stops the call a run guards at that
    moment: no watcher task waits on the event beside each model call (the worker
    pool hands one to every turn it runs)."""

    def __init__(self) -> None:
        super().__init__()
        self._stops: set[Callable[[], object]] = set()

    def set(self) -> None:
        """Set the event and stop every guarded call."""
        super().set()
        for stop in list(self._stops):
            stop()


class CancelSignal:
    """Wraps a ``CancelHandle``; ``is_set()`` and ``guard(awaitable)``."""

    __slots__ = ("_event", "_fn")

    def __init__(self, handle: CancelHandle) -> None:
        if isinstance(handle, asyncio.Event):
            self._event: asyncio.Event | None = handle
            self._fn: Callable[[], bool] | None = None
        elif callable(handle):
            self._event, self._fn = None, handle
        else:
            raise TypeError(
                f"cancel must be an asyncio.Event or a zero-argument callable, got {handle!r}"
            )

    def is_set(self) -> bool:
        """True once cancellation was asked for."""
        if self._event is not None:
            return self._event.is_set()
        assert self._fn is not None
        return bool(self._fn())

    async def _wait(self) -> None:
        if self._event is not None:
            await self._event.wait()
            return
        while not self.is_set():  # noqa: ASYNC110 - a callable has no event to wait on
            await asyncio.sleep(POLL_INTERVAL)

    async def guard(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable``; cancel it and raise RunCancelled if the signal fires first."""
        if self.is_set():
            if asyncio.iscoroutine(awaitable):
                awaitable.close()  # never started: no "never awaited" warning
            raise RunCancelled
        if isinstance(self._event, CancelEvent):
            return await self._guard_on(self._event, awaitable)
        work = asyncio.ensure_future(awaitable)
        watcher = asyncio.ensure_future(self._wait())
        fired = False
        try:
            await asyncio.wait((work, watcher), return_when=asyncio.FIRST_COMPLETED)
            fired = not work.done()
        finally:
            if not work.done():
                work.cancel()
                # Let the work unwind (a stream closes its connection) before going on.
                await asyncio.gather(work, return_exceptions=True)
            watcher.cancel()
        if fired:
            raise RunCancelled
        return work.result()

    @staticmethod
    async def _guard_on(event: CancelEvent, awaitable: Awaitable[T]) -> T:
        work = asyncio.ensure_future(awaitable)
        fired = False

        def stop() -> None:
            nonlocal fired
            fired = True
            work.cancel()

        event._stops.add(stop)
        try:
            # Cancelling this task cancels the work too; either way the work has
            # unwound (a stream closed its connection) when this await ends.
            return await work
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if fired and (task is None or not task.cancelling()):
                raise RunCancelled from None
            raise
        finally:
            event._stops.discard(stop)
