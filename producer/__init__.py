"""The producer side: put turns in, get events out.

``Producer`` (``client``, its parts in ``base``, ``approvals``, ``history``
and ``handles``; ``SyncProducer`` in ``sync``) submits turns, streams their
events and manages sessions, approvals, schedules and the long-term store; the HTTP
gateway (``gateway*``, the gateway extra) serves the same over HTTP; ``cli_*`` are
the producer-side subcommands of the ``reactq`` command (``reactq.cli``), ``render``
prints events as its lines, ``beat`` fires scheduled turns and ``flower`` runs Celery's
monitor. ``Producer`` and ``TurnHandle`` load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from reactq.shared.lazy import LazyExports

if TYPE_CHECKING:
    from reactq.producer.client import Producer
    from reactq.producer.handles import TurnHandle

__all__ = ["Producer", "TurnHandle"]

_EXPORTS = LazyExports(
    __name__,
    {
        "reactq.producer.client": "Producer",
        "reactq.producer.handles": "TurnHandle",
    },
)


def __getattr__(name: str) -> Any:
    return _EXPORTS.getattr(name)


def __dir__() -> list[str]:
    return _EXPORTS.dir()
