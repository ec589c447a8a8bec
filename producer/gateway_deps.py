"""FastAPI dependencies the gateway's route modules share: the producer behind the
app, and the refusal of query parameters a route does not take."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Depends, Request

from reactq.producer.client import Producer
from reactq.producer.gateway_errors import GatewayError

__all__ = ["ProducerDep", "only_query", "producer_of"]


def producer_of(request: Request) -> Producer:
    """The producer of the gateway serving ``request``."""
    producer: Producer = request.app.state.gateway.producer
    return producer


ProducerDep = Annotated[Producer, Depends(producer_of)]
"""A route parameter that receives the gateway's producer."""


def only_query(*names: str) -> Any:
    """A dependency refusing query parameters other than ``names`` (422
    ``invalid_request``, ``field`` naming it): a misspelt filter would otherwise be
    ignored and list everything."""

    async def check(request: Request) -> None:
        for name in request.query_params:
            if name not in names:
                raise GatewayError(
                    f"unknown query parameter {name[:60]!r}"
                    + (f": use {', '.join(names)}" if names else ""),
                    status=422,
                    error_code="invalid_request",
                    field=f"query.{name[:60]}",
                )

    return Depends(check)
