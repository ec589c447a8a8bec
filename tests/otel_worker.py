"""``python -m tests.otel_worker worker ...``: a reactq worker whose spans are kept.

The SDK's InMemorySpanExporter holds them; a processor also writes each ended
span as one JSON line to ``$REACTQ_TEST_SPANS`` so the test (another process)
can read the worker's half of the trace.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


def span_record(span: ReadableSpan) -> dict[str, Any]:
    """The fields of a span the tests look at, JSON-able."""
    ctx = span.get_span_context()
    assert ctx is not None
    return {
        "name": span.name,
        "kind": span.kind.name,
        "trace_id": f"{ctx.trace_id:032x}",
        "span_id": f"{ctx.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent else None,
        "status": span.status.status_code.name,
        "attributes": {
            k: (list(v) if isinstance(v, tuple) else v) for k, v in (span.attributes or {}).items()
        },
    }


class _JsonLines(SpanProcessor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()

    def on_end(self, span: ReadableSpan) -> None:
        with self.lock, open(self.path, "a", encoding="utf-8") as out:
            out.write(json.dumps(span_record(span)) + "\n")


def main() -> int:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    provider.add_span_processor(_JsonLines(os.environ["REACTQ_TEST_SPANS"]))
    trace.set_tracer_provider(provider)
    from reactq.cli import main as reactq

    return reactq(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
