"""The worker's Celery pool: tasks run inline on the consumer's thread, and wait
for a free turn slot without blocking it.

A drain task only hands its session to the process's asyncio loop
(``Bridge.hand_off``). Run on a pool thread, each task cost a hop to that thread
and back (the ack is the consumer's), with its futex wake-ups and contention for
the GIL: a fifth of a worker's CPU per turn once the turn itself was cheap. Here it
runs where the message arrived, like Celery's solo pool. While the loop holds
``concurrency`` turns, a task is not run but kept, its message unacked: the
consumer's prefetch limit (one message) then stops it from fetching more, so an
idle worker of the pool gets the next ones, and the consumer's own loop goes on
(broker heartbeats, remote control). A drain ending frees its slot and runs the
next kept task on the consumer's loop.
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from collections.abc import Callable
from typing import Any

from celery.concurrency import solo
from celery.concurrency.base import apply_target

from reactq.worker.bridge import Bridge

_Apply = tuple[Callable[..., Any], Any, Any, dict[str, Any]]


class HandOffPool(solo.TaskPool):
    """Celery's solo pool, whose tasks wait for a free turn slot (module doc)."""

    bridge: Bridge | None = None
    """The process's loop (``run_worker`` sets it before Celery makes the pool); None
    runs every task at once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.on_apply = self._apply
        self._kept: deque[_Apply] = deque()
        self._hub: Any = None
        self._wake: tuple[int, int] | None = None  # the pipe's read and write ends

    def register_with_event_loop(self, loop: Any) -> None:
        """Watch a pipe on the consumer's loop: a freed slot writes to it to run a kept
        task.

        A pipe of our own, not the loop's ``call_soon``: that runs a callback before
        the loop looks at its queues, and the kept task's ack (which the loop defers
        too) would come after the look, so the next message would wait for the
        loop's next wake-up, up to a second. Read as an event, the task runs after
        the look, and its ack before the next one.
        """
        self._hub = loop
        self._wake = os.pipe()
        for end in self._wake:
            os.set_blocking(end, False)
        loop.add_reader(self._wake[0], self._woken)
        bridge = self.bridge
        if bridge is not None:
            bridge.on_slot_free = self._slot_freed

    def _slot_freed(self) -> None:
        # On the asyncio loop's thread: the consumer is woken only for a task that
        # waits (a full pipe has a wake-up pending already).
        wake = self._wake
        if self._kept and wake is not None:
            with contextlib.suppress(BlockingIOError):
                os.write(wake[1], b"\0")

    def _woken(self) -> None:
        if self._wake is not None:
            with contextlib.suppress(BlockingIOError):
                os.read(self._wake[0], 4096)
        self._run_kept()

    def on_close(self) -> None:
        """Stop watching the pipe and close it."""
        wake, self._wake = self._wake, None
        if wake is not None:
            self._hub.remove_reader(wake[0])
            for end in wake:
                os.close(end)
        super().on_close()

    def _can_start(self) -> bool:
        bridge = self.bridge
        # Without the consumer's loop there is nobody to run a kept task later:
        # hand_off then waits for its slot itself (blocking, as the solo pool does).
        return bridge is None or self._hub is None or bridge.can_start()

    def _apply(
        self, target: Callable[..., Any], args: Any = (), kwargs: Any = None, **options: Any
    ) -> None:
        if not self._kept and self._can_start():
            apply_target(target, args, kwargs, **options)
            return
        self._kept.append((target, args, kwargs, options))
        # A slot freed between the look and the append found nothing kept: look again.
        self._run_kept()

    def _run_kept(self) -> None:
        while self._kept and self._can_start():
            target, args, kwargs, options = self._kept.popleft()
            apply_target(target, args, kwargs, **options)

    def _get_info(self) -> dict[str, Any]:
        info: dict[str, Any] = super()._get_info()
        info["kept"] = len(self._kept)
        return info
