"""Non-streamed completions straight over aiohttp, the SDK deciding everything else.

A worker makes hundreds of model calls a second; in the SDK's ``post`` each
spends about 0.4 ms of CPU building typed request options, ``httpx`` headers and
URLs and the transport adapter around aiohttp, before and after the bytes it
sends (bench/pool.py --scenario cpu: a fifth of a worker's CPU). ``DirectPost``
takes the request the SDK builds for ``/chat/completions`` once (URL, auth,
organisation and platform headers, the custom headers an agent gave) and then
sends each body on one aiohttp session with those headers. What comes back is
judged by the SDK: a refusal becomes the SDK's own ``APIStatusError`` subclass
(``_make_status_error_from_response``), a failed connection its
``APIConnectionError`` or ``APITimeoutError``, so ``OpenAICompatibleClient``
maps errors and reads ``Retry-After`` as before; a 2xx's ``x-ratelimit-*`` headers
come back beside its body (``ProviderLimits``). Streams stay on the SDK.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import httpx2
import openai
from aiohttp.helpers import get_env_proxy_for_url
from openai import AsyncOpenAI
from openai._models import FinalRequestOptions
from yarl import URL

from reactq.shared.protocol.ratelimit import ProviderLimits
from reactq.shared.text_checks import repair_json

# Headers the SDK sets per attempt; the session's own are recomputed by aiohttp.
_PER_REQUEST = frozenset(
    {"content-length", "host", "x-stainless-retry-count", "x-stainless-read-timeout"}
)

CONNECTIONS = 100
"""Connections one client keeps open to its endpoint, as the SDK's own default pool."""


def encode_body(body: dict[str, Any]) -> bytes:
    """A request body as httpx encodes the SDK's JSON: compact, UTF-8, no NaN.

    Text UTF-8 cannot carry (a lone surrogate in a message an older version stored) is
    repaired to U+FFFD rather than failing the call: it is our request, not the
    endpoint's answer, and the session's next turn would fail the same way.
    """
    try:
        return _dumps(body).encode()
    except UnicodeEncodeError:
        return _dumps(repair_json(body)).encode()


def _dumps(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def decode_body(content: bytes) -> Any:
    """An answer's JSON; bytes that are not UTF-8 are read as U+FFFD, as the SDK reads a
    stream's."""
    try:
        return json.loads(content)
    except UnicodeDecodeError:
        return json.loads(content.decode("utf-8", "replace"))


class DirectPost:
    """POSTs chat-completion bodies for one ``AsyncOpenAI`` client (module doc).

    Bind one per event loop, like the client; ``aclose()`` closes its session.
    """

    def __init__(self, client: AsyncOpenAI, timeout: float) -> None:
        self._client = client
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        template = client._build_request(
            FinalRequestOptions.construct(method="post", url="/chat/completions", json_data={})
        )
        self._url = str(template.url)
        self._headers = {k: v for k, v in template.headers.items() if k not in _PER_REQUEST}
        self._session: aiohttp.ClientSession | None = None
        # A proxy from the environment, as the SDK's httpx client would use, looked
        # up once: aiohttp's trust_env looks again on a thread for every request.
        self._proxy: dict[str, Any] = {}
        try:
            proxy, auth = get_env_proxy_for_url(URL(self._url))
            self._proxy = {"proxy": proxy, "proxy_auth": auth}
        except LookupError:
            pass

    async def post(self, body: dict[str, Any]) -> tuple[Any, ProviderLimits | None]:
        """One completion: the decoded JSON of a 2xx answer and the rate limits its
        headers state, or the SDK's error."""
        session = self._session
        if session is None or session.closed:
            session = self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=CONNECTIONS)
            )
        data = encode_body(body)
        try:
            async with session.post(
                self._url, data=data, headers=self._headers, timeout=self._timeout, **self._proxy
            ) as response:
                content = await response.read()
                status = response.status
                failed = status >= 400
                headers = list(response.headers.items()) if failed else []
                limits = None if failed else ProviderLimits.from_headers(response.headers)
        except TimeoutError as exc:
            raise openai.APITimeoutError(request=self._request()) from exc
        except aiohttp.ClientError as exc:
            raise openai.APIConnectionError(message=str(exc), request=self._request()) from exc
        if status >= 400:
            answer = httpx2.Response(
                status, headers=headers, content=content, request=self._request()
            )
            raise self._client._make_status_error_from_response(answer)
        return decode_body(content), limits

    def _request(self) -> httpx2.Request:
        """The request, as the SDK's errors carry it."""
        return httpx2.Request("POST", self._url, headers=self._headers)

    async def aclose(self) -> None:
        """Close the session (and its connections)."""
        if self._session is not None:
            await self._session.close()
            # aiohttp's connections finish closing on the next loop turns.
            await asyncio.sleep(0)
            self._session = None
