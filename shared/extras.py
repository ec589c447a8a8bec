"""The optional extras, and the error a missing one amounts to.

A feature whose library comes with an extra (``pip install 'reactq[gateway]'``)
imports it when used; without the extra that import fails with a
``ModuleNotFoundError`` naming a module a user never asked for. ``missing_extra``
turns it into a ``ConfigError`` naming the extra and the line that installs it;
the ``reactq`` command prints that as its usual one line, and ``open_store`` raises
it for a PostgreSQL URL without the ``postgres`` extra.
"""

from __future__ import annotations

from reactq.shared.errors import ConfigError

__all__ = ["EXTRA_OF_MODULE", "missing_extra"]

EXTRA_OF_MODULE: dict[str, tuple[str, str]] = {
    "fastapi": ("gateway", "the gateway (reactq serve, --gateway)"),
    "uvicorn": ("gateway", "the gateway (reactq serve, --gateway)"),
    "starlette": ("gateway", "the gateway (reactq serve, --gateway)"),
    "httpx2": ("gateway", "the gateway (reactq serve, --gateway)"),
    "ag_ui": ("gateway", "the gateway (reactq serve, --gateway)"),
    "asyncpg": ("postgres", "a PostgreSQL state database (postgresql+asyncpg://)"),
    "a2a": ("a2a", "the gateway's A2A surface"),
    "mcp": ("mcp", "MCP servers' tools"),
    "flower": ("flower", "reactq flower"),
    "prometheus_client": ("metrics", "Prometheus metrics"),
    "opentelemetry": ("otel", "OpenTelemetry traces (REACTQ_TRACING)"),
    "PIL": ("images", "the image tools"),
}
"""Top-level module -> (the extra that brings it, what needs it)."""


def missing_extra(exc: BaseException) -> ConfigError | None:
    """The ``ConfigError`` for ``exc`` (or what caused it) being the import of an
    extra's module that is not installed; None for any other error."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ModuleNotFoundError) and current.name:
            found = EXTRA_OF_MODULE.get(current.name.split(".")[0])
            if found is not None:
                extra, purpose = found
                return ConfigError(
                    f"{purpose} needs the {extra!r} extra (no module named "
                    f"{current.name!r}): pip install 'reactq[{extra}]', or from a checkout "
                    f"pip install -e '.[{extra}]'",
                    extra=extra,
                    module=current.name,
                )
        current = current.__cause__ or current.__context__
    return None
