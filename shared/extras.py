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

_EXTRAS: dict[str, tuple[tuple[str, ...], str]] = {
    "gateway": (
        ("fastapi", "uvicorn", "starlette", "httpx2", "ag_ui"),
        "the gateway (reactq serve, --gateway)",
    ),
    "postgres": (("asyncpg",), "a PostgreSQL state database (postgresql+asyncpg://)"),
    "a2a": (("a2a",), "the gateway's A2A surface"),
    "mcp": (("mcp",), "MCP servers' tools"),
    "flower": (("flower",), "reactq flower"),
    "metrics": (("prometheus_client",), "Prometheus metrics"),
    "otel": (("opentelemetry",), "OpenTelemetry traces (REACTQ_TRACING)"),
    "images": (("PIL",), "the image tools"),
}
# Extra -> (the top-level modules it brings, what needs it).

EXTRA_OF_MODULE: dict[str, tuple[str, str]] = {
    module: (extra, purpose) for extra, (modules, purpose) in _EXTRAS.items() for module in modules
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
