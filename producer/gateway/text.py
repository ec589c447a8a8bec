"""Text UTF-8 cannot carry, at the gateway's edges (docs/architecture.md, "Text that
cannot be stored").

In: every ``/v1`` write refuses a JSON body holding a lone surrogate (which JSON may
spell as ``"\\ud800"``) with a 422 naming the field, before anything is stored; the
turn's message, metadata and context keep the producer's codes, any other field is
``invalid_text``. Out: every JSON answer, errors included, repairs such text (U+FFFD)
rather than failing to encode it, so a value an older version stored never turns a
listing into a 500 and an error never echoes what it cannot encode
(``TextSafeJSONResponse``, in errors.py beside the handlers that use it).
"""

from __future__ import annotations

import json
import re

from fastapi import Request

from reactq.producer.gateway.errors import GatewayError, TextSafeJSONResponse
from reactq.shared.errors import InvalidContextError, InvalidMessageError, InvalidMetadataError
from reactq.shared.text_checks import unencodable_at

__all__ = ["TextSafeJSONResponse", "refuse_unencodable"]

# A lone surrogate reaches a decoded body only through a JSON escape (raw surrogate
# bytes are not UTF-8, and FastAPI refuses those as ``invalid_json``): a body without
# one needs no walk.
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]")
_WRITES = frozenset({"POST", "PUT", "PATCH"})
# The turn's fields keep the codes the producer gives them (shared/turn_inputs.py).
_FIELD_CODES = {
    "message": InvalidMessageError.code,
    "metadata": InvalidMetadataError.code,
    "context": InvalidContextError.code,
}


async def refuse_unencodable(request: Request) -> None:
    """Refuse a write whose JSON body holds text UTF-8 cannot carry: 422, ``field``
    naming the body's field (``body.metadata``), the message the place inside it."""
    if request.method not in _WRITES:
        return
    raw = await request.body()  # FastAPI keeps it: the route reads it again for free
    if not _ESCAPED_SURROGATE.search(raw):
        return
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return  # not JSON: the route's own parse answers invalid_json
    where = unencodable_at(body)
    if where is None:
        return
    top = re.split(r"[.\[]", where, maxsplit=1)[0]
    raise GatewayError(
        f"body.{where} holds a lone surrogate, which UTF-8 cannot carry: send valid Unicode text",
        status=422,
        error_code=_FIELD_CODES.get(top, "invalid_text"),
        field=f"body.{top}" if top else "body",
    )
