"""The producer's calls raise ``ReactqError``s, never a driver's exception.

A ``Producer`` method that meets Redis, the broker or the state database down (or
refusing its credentials) would otherwise raise what the driver raised
(``redis.exceptions.ConnectionError``, SQLAlchemy's ``OperationalError``...), which
a caller cannot catch as the documented ``ServiceUnavailableError`` nor the
``reactq`` command print as one line. ``translates_service_errors`` wraps every
public coroutine method of a class, and every async iterator a public method
returns, so that such an exception leaves as the ``ReactqError`` that
``shared.services.service_error`` makes of it (the driver's error as its
``__cause__``); any other exception passes unchanged.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from reactq.shared.errors import ReactqError
from reactq.shared.services import service_error
from reactq.shared.settings import Settings

__all__ = ["translates_service_errors"]


C = TypeVar("C", bound=type)


def _translated(exc: Exception, owner: Any) -> ReactqError | None:
    if isinstance(exc, ReactqError):
        return None
    # A Producer has its settings; a TurnHandle reaches them through its producer.
    settings = getattr(owner, "settings", None) or getattr(
        getattr(owner, "producer", None), "settings", None
    )
    if not isinstance(settings, Settings):
        return None
    return service_error(exc, settings)


class _Translating:
    """An async iterator's items, its errors translated; everything else (``aclose``
    from another task, its own attributes) is the iterator's own."""

    def __init__(self, source: AsyncIterator[Any], owner: Any) -> None:
        self._source = source
        self._owner = owner

    def __aiter__(self) -> _Translating:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self._source.__anext__()
        except StopAsyncIteration:
            raise
        except Exception as exc:
            error = _translated(exc, self._owner)
            if error is None:
                raise
            raise error from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._source, name)


def _wrap(func: Callable[..., Any]) -> Callable[..., Any]:
    if inspect.iscoroutinefunction(func):

        @functools.wraps(func)
        async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            try:
                return await func(self, *args, **kwargs)
            except Exception as exc:
                error = _translated(exc, self)
                if error is None:
                    raise
                raise error from exc

        return call

    @functools.wraps(func)
    def returning(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = func(self, *args, **kwargs)
        # An async iterator (``subscribe``, ``events``) fails when iterated, not here.
        if hasattr(result, "__anext__"):
            return _Translating(result, self)
        return result

    return returning


def translates_service_errors(cls: C) -> C:
    """``cls`` with its public methods (its own and its bases') wrapped as the module
    says; properties, class and static methods are left as they are. The instances
    have ``settings`` (the ``Settings`` naming the services' URLs), or a ``producer``
    that has them."""
    for klass in reversed(cls.__mro__[:-1]):
        for name, value in vars(klass).items():
            if name.startswith("_") and name != "__aenter__":
                continue
            if not inspect.isfunction(value) or getattr(value, "_translates", False):
                continue
            wrapped = _wrap(value)
            wrapped._translates = True  # type: ignore[attr-defined]
            if getattr(cls, name) is value:
                setattr(cls, name, wrapped)
    return cls
