"""OpenTelemetry across the broker: one trace from submit to each model and tool call.

Only the OpenTelemetry *API* is used (the ``otel`` extra): the application (or
``configure_tracing``) installs an SDK provider and exporter, and without one
every span is a no-op. The trace context rides in the Celery message headers
(W3C ``traceparent``/``tracestate``): ``before_task_publish`` opens a PRODUCER
span and injects it, the worker's task extracts it and opens a CONSUMER span.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from reactq.shared.errors import ConfigError

__all__ = ["configure_tracing", "extract_context", "instrument_publishing", "tracer"]

TRACER_NAME = "reactq"
_installed = threading.Lock()
_publishing = False
_open: dict[str, Any] = {}


def _otel() -> Any:
    try:
        import opentelemetry.trace as trace
    except ImportError:
        raise ConfigError(
            "REACTQ_TRACING needs OpenTelemetry: pip install 'reactq[otel]'"
        ) from None
    return trace


def tracer() -> Any:
    """reactq's tracer (a no-op one until a TracerProvider is installed)."""
    return _otel().get_tracer(TRACER_NAME)


def _on_publish(
    sender: str | None = None,
    headers: dict[str, Any] | None = None,
    routing_key: str | None = None,
    **_: Any,
) -> None:
    from opentelemetry import propagate, trace

    if headers is None:
        return
    span = tracer().start_span(
        f"{sender} publish",
        kind=trace.SpanKind.PRODUCER,
        attributes={
            "messaging.system": "celery",
            "messaging.operation.type": "send",
            "messaging.destination.name": routing_key or "",
            "messaging.message.id": str(headers.get("id", "")),
        },
    )
    propagate.inject(headers, context=trace.set_span_in_context(span))
    _open[str(headers.get("id", ""))] = span


def _after_publish(headers: dict[str, Any] | None = None, **_: Any) -> None:
    span = _open.pop(str((headers or {}).get("id", "")), None)
    if span is not None:
        span.end()


def instrument_publishing() -> None:
    """Carry the current trace in every Celery message this process sends (idempotent)."""
    global _publishing
    _otel()
    from celery.signals import after_task_publish, before_task_publish

    with _installed:
        if _publishing:
            return
        before_task_publish.connect(_on_publish, weak=False)
        after_task_publish.connect(_after_publish, weak=False)
        _publishing = True


def extract_context(carrier: Mapping[str, Any]) -> Any:
    """The OpenTelemetry context a message's headers carry (empty when none)."""
    from opentelemetry import propagate

    return propagate.extract({k: v for k, v in carrier.items() if isinstance(v, str)})


def configure_tracing(service_name: str) -> None:
    """Install an SDK TracerProvider unless the application already installed one.

    Spans go to OTLP/HTTP when ``OTEL_EXPORTER_OTLP_ENDPOINT`` is set (the
    exporter package is in the ``otel`` extra), to stderr when
    ``OTEL_TRACES_EXPORTER=console``; the standard ``OTEL_*`` variables apply.
    """
    import logging
    import os

    trace = _otel()
    if not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider):
        return  # someone (the app, a test, opentelemetry-instrument) set one up already
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        raise ConfigError("REACTQ_TRACING needs the SDK: pip install 'reactq[otel]'") from None
    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": os.environ.get("OTEL_SERVICE_NAME") or service_name}
        )
    )
    exporter: Any = None
    if os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
    ):
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ConfigError(
                "OTEL_EXPORTER_OTLP_ENDPOINT needs the OTLP exporter: pip install 'reactq[otel]'"
            ) from None
        exporter = OTLPSpanExporter()
    elif os.environ.get("OTEL_TRACES_EXPORTER") == "console":
        exporter = ConsoleSpanExporter()
    else:
        logging.getLogger("reactq.tracing").warning(
            "REACTQ_TRACING is on but no exporter is configured: set OTEL_EXPORTER_OTLP_ENDPOINT"
        )
    if exporter is not None:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
