"""OpenTelemetry across the broker: one trace from submit to each model and tool call.

Only the OpenTelemetry *API* is used (the ``otel`` extra): the application (or
``configure_tracing``) installs an SDK provider and exporter, and without one
every span is a no-op. The trace context rides in the Celery message headers
(W3C ``traceparent``/``tracestate``): ``before_task_publish`` opens a PRODUCER
span and injects it, the worker's task extracts it and opens a CONSUMER span.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import Any

from reactq.shared.errors import ConfigError
from reactq.shared.settings import Settings

__all__ = [
    "configure_tracing",
    "extract_context",
    "instrument_publishing",
    "otlp_traces_endpoint",
    "tracer",
]

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
    # Here, not at the top: a process that sends no Celery message never imports Celery.
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


def configure_tracing(service_name: str, settings: Settings) -> None:
    """Install an SDK TracerProvider unless the application already installed one.

    Spans go to OTLP/HTTP when the settings name an endpoint
    (``OTEL_EXPORTER_OTLP_ENDPOINT`` or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``; the
    exporter package is in the ``otel`` extra), to stderr with
    ``OTEL_TRACES_EXPORTER=console``. ``OTEL_SERVICE_NAME`` wins over
    ``service_name``; the SDK reads its other ``OTEL_*`` variables (headers,
    timeouts) itself.
    """
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
        resource=Resource.create({"service.name": settings.otel_service_name or service_name})
    )
    exporter: Any = None
    endpoint = otlp_traces_endpoint(settings)
    if endpoint is not None:
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        except ImportError:
            raise ConfigError(
                "OTEL_EXPORTER_OTLP_ENDPOINT needs the OTLP exporter: pip install 'reactq[otel]'"
            ) from None
        exporter = OTLPSpanExporter(endpoint=endpoint)
    elif settings.otel_traces_exporter == "console":
        exporter = ConsoleSpanExporter()
    else:
        logging.getLogger("reactq.tracing").warning(
            "REACTQ_TRACING is on but no exporter is configured: set OTEL_EXPORTER_OTLP_ENDPOINT"
        )
    if exporter is not None:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)


def otlp_traces_endpoint(settings: Settings) -> str | None:
    """The URL spans are posted to, as the OTLP spec derives it; None without an endpoint.

    The traces endpoint is used as given; the general one gets ``v1/traces`` appended.
    """
    if settings.otel_exporter_otlp_traces_endpoint:
        return settings.otel_exporter_otlp_traces_endpoint
    base = settings.otel_exporter_otlp_endpoint
    if not base:
        return None
    return f"{base}v1/traces" if base.endswith("/") else f"{base}/v1/traces"
