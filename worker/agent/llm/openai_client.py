"""OpenAICompatibleClient: the LLMClient over the official ``openai`` SDK.

Works against any OpenAI-compatible endpoint (OpenAI, vLLM, Ollama, llama.cpp,
LiteLLM, the ScriptedServer) given its ``base_url``. The client does its own
retrying (``RetryPolicy``: jittered backoff, ``Retry-After``, bounded in count and
time); the SDK's is switched off so the two never multiply. Failures are mapped
onto ``shared.errors``::

    APIConnectionError / APITimeoutError    -> LLMConnectionError
    a stream that stops mid-way             -> LLMStreamCutError
    429                                     -> LLMRateLimitError
    5xx                                     -> LLMServerError
    401 / 403                               -> LLMAuthError
    other 4xx                               -> LLMBadRequestError
      ... mentioning context length         -> ContextLengthExceededError
      ... refusing images (a text-only model) -> LLMImagesUnsupportedError
    a body that is not JSON                 -> LLMUndecodableError
    an error envelope in a 200              -> LLMErrorEnvelopeError
    a 200 without choices                   -> LLMNoChoicesError
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any

import httpx2
import openai
from openai import AsyncOpenAI

from reactq.shared.errors import (
    ContextLengthExceededError,
    LLMAuthError,
    LLMBadRequestError,
    LLMConnectionError,
    LLMError,
    LLMErrorEnvelopeError,
    LLMImagesUnsupportedError,
    LLMRateLimitError,
    LLMResponseError,
    LLMServerError,
    LLMStreamCutError,
    LLMUndecodableError,
)
from reactq.shared.protocol.ratelimit import ProviderLimits
from reactq.shared.text_checks import repair_json
from reactq.worker.agent.llm.base import DEFAULT_OPTIONS, DeltaSink, LLMResponse, RequestOptions
from reactq.worker.agent.llm.direct import DirectPost, decode_body
from reactq.worker.agent.llm.parse import (
    StreamAssembler,
    from_completion_json,
    mentions_context_length,
    mentions_image_refusal,
)
from reactq.worker.agent.llm.retry import RetryPolicy, parse_retry_after

__all__ = ["OpenAICompatibleClient"]

# Local endpoints (vLLM, Ollama, the ScriptedServer) need no key, but the SDK
# refuses to start without one.
PLACEHOLDER_API_KEY = "sk-no-key-required"
# Given always, so the SDK never falls back to OPENAI_BASE_URL itself: the
# endpoint comes from Settings (``Agent.build_llm``) or the caller, nowhere else.
DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAICompatibleClient:
    """An LLMClient on ``AsyncOpenAI``; bind one per event loop and ``aclose()`` it.

    ``base_url`` None means OpenAI's API; ``api_key`` None a placeholder (local
    endpoints need none). Neither is read from the environment: ``Agent.build_llm``
    passes the settings' (OPENAI_BASE_URL, OPENAI_API_KEY).

    ``max_retries`` / ``retry_base_delay`` / ``retry_max_delay`` /
    ``retry_max_total`` shape the ``RetryPolicy`` (or pass ``retry=`` whole);
    ``headers`` are sent with every request.
    """

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        model: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        client: AsyncOpenAI | None = None,
        *,
        retry_base_delay: float = 0.5,
        retry_max_delay: float = 8.0,
        retry_max_total: float = 60.0,
        retry: RetryPolicy | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout!r}")
        self.retry = retry or RetryPolicy(
            max_retries=max_retries,
            base_delay=retry_base_delay,
            max_delay=retry_max_delay,
            max_total=retry_max_total,
        )
        self.model = model
        self._api_key = api_key or PLACEHOLDER_API_KEY
        self._owns_client = client is None
        self._client = client or AsyncOpenAI(
            api_key=self._api_key,
            base_url=base_url or DEFAULT_BASE_URL,
            timeout=timeout,
            max_retries=0,  # RetryPolicy retries; the SDK must not multiply it
            default_headers=dict(headers) if headers else None,
            # The SDK's aiohttp transport: about 0.75 ms less CPU a call than its
            # default one, which under hundreds of calls in flight is most of a
            # worker's HTTP cost (bench/pool.py --scenario cpu).
            http_client=openai.DefaultAioHttpClient(timeout=timeout),
        )
        self._create = self._client.chat.completions.create
        # Non-streamed calls skip the SDK's request layer when the client is ours
        # (llm/direct.py); a client passed in may be set up in ways only it knows.
        self._direct = DirectPost(self._client, timeout) if self._owns_client else None

    @property
    def base_url(self) -> str:
        """The endpoint requests go to."""
        return str(self._client.base_url)

    def __repr__(self) -> str:
        # Never the key.
        return f"OpenAICompatibleClient(base_url={self.base_url!r}, model={self.model!r})"

    async def complete(
        self,
        messages: list[dict[str, Any]],
        *,
        model: str,
        tools: list[dict[str, Any]] | None,
        stream: bool = False,
        options: RequestOptions | None = None,
        on_delta: DeltaSink | None = None,
        on_reasoning: DeltaSink | None = None,
    ) -> LLMResponse:
        """One chat completion, retried per the policy; raises an ``LLMError`` subclass."""
        model = model or self.model or ""
        if not model:
            raise LLMBadRequestError("no model given: pass model= or set REACTQ_MODEL")
        body = _body(model, messages, tools, options or DEFAULT_OPTIONS)
        started = time.monotonic()
        retry = 0
        repaired = False
        while True:
            retry_after: float | None = None
            delivered = [False]  # a stream that already showed text is never re-run
            try:
                if stream:
                    return await self._complete_stream(body, on_delta, on_reasoning, delivered)
                answer, limits = await self._post(body)
                response = from_completion_json(answer)
                response.limits = limits
                return response
            except LLMError as exc:
                error = self._redacted(exc)
            except openai.OpenAIError as exc:
                error = self._map_error(exc)
                retry_after = _retry_after_of(exc)
            except UnicodeEncodeError:
                # Our request, not the endpoint's answer: text UTF-8 cannot carry (a lone
                # surrogate an older version stored) fails the SDK's encoding before
                # anything is sent. Repaired once, it goes; it would fail every turn.
                if repaired:
                    raise
                body, repaired = repair_json(body), True
                continue
            except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
                # Undecodable JSON (or nested deeper than a decoder goes), or a body of
                # the wrong shape.
                raise LLMUndecodableError(
                    self._redact(
                        f"the endpoint answered an unusable body: {type(exc).__name__}: {exc}"
                    )
                ) from None
            retry += 1
            wait = (
                None if delivered[0] else self.retry.next_wait(error, retry, started, retry_after)
            )
            if wait is None:
                raise error from None
            await asyncio.sleep(wait)

    async def _post(self, body: dict[str, Any]) -> tuple[Any, ProviderLimits | None]:
        """One non-streamed completion as decoded JSON, and the rate limits its headers
        state (``x-ratelimit-*``).

        On our own client, ``DirectPost`` (llm/direct.py): the request the SDK builds,
        sent on aiohttp, its answer judged by the SDK. On a client passed in, the
        SDK's ``post`` (its documented way to call an endpoint with a body as given):
        the same client, auth, timeouts and error classes as ``create``, without
        building typed params and a typed ``ChatCompletion`` we would only take apart
        again, which was half the CPU of a call.
        """
        if self._direct is not None:
            return await self._direct.post(body)
        response = await self._client.post("/chat/completions", body=body, cast_to=httpx2.Response)
        return decode_body(response.content), ProviderLimits.from_headers(response.headers)

    async def _complete_stream(
        self,
        body: dict[str, Any],
        on_delta: DeltaSink | None,
        on_reasoning: DeltaSink | None,
        delivered: list[bool],
    ) -> LLMResponse:
        stream = await self._create(
            **_create_kwargs(body), stream=True, stream_options={"include_usage": True}
        )

        async def sink(text: str) -> None:
            delivered[0] = True
            if on_delta is not None:
                await on_delta(text)

        async def reasoning_sink(text: str) -> None:
            delivered[0] = True
            if on_reasoning is not None:
                await on_reasoning(text)

        assembler = StreamAssembler(sink, reasoning_sink)
        try:
            async for chunk in stream:
                await assembler.add(chunk)
        except openai.APIConnectionError as exc:  # the SDK's wrapping of a dropped body
            raise LLMStreamCutError(
                f"the stream stopped after {assembler.chunks} events: {self._redact(str(exc))}",
                base_url=self.base_url,
            ) from None
        except (LLMError, openai.OpenAIError):
            raise
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise LLMUndecodableError(f"the stream carried an unusable event: {exc}") from None
        except Exception as exc:  # the transport failed under the SSE decoder
            raise LLMStreamCutError(
                f"the stream stopped after {assembler.chunks} events: {type(exc).__name__}: {exc}",
                base_url=self.base_url,
            ) from None
        finally:
            # Also on cancellation: closing frees the connection mid-generation.
            await stream.close()
        response = assembler.result()
        response.limits = ProviderLimits.from_headers(stream.response.headers)
        return response

    async def aclose(self) -> None:
        """Close the HTTP connections (only when this object created the SDK client)."""
        if self._direct is not None:
            await self._direct.aclose()
        if self._owns_client:
            await self._client.close()

    async def __aenter__(self) -> OpenAICompatibleClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _redact(self, text: str) -> str:
        if self._api_key and self._api_key != PLACEHOLDER_API_KEY:
            text = text.replace(self._api_key, "***")
        return text

    def _redacted(self, exc: LLMError) -> LLMError:
        redacted = self._redact(exc.message)
        return exc if redacted == exc.message else type(exc)(redacted, **exc.details)

    def _map_error(self, exc: openai.OpenAIError) -> LLMError:
        message = self._redact(str(exc) or type(exc).__name__)
        if isinstance(exc, openai.APIConnectionError):  # includes APITimeoutError
            timed_out = isinstance(exc, openai.APITimeoutError) and not _refused(exc)
            kind = "timed out" if timed_out else "failed"
            return LLMConnectionError(
                f"connection to the model endpoint {kind}: {message}", base_url=self.base_url
            )
        if isinstance(exc, openai.APIResponseValidationError):
            return LLMResponseError(message, status=exc.status_code)
        if isinstance(exc, openai.APIStatusError):
            status = exc.status_code
            details: dict[str, Any] = {"status": status}
            if exc.code:
                details["provider_code"] = exc.code
            if status == 429:
                return LLMRateLimitError(message, **details)
            if status >= 500:
                return LLMServerError(message, **details)
            if status in (401, 403):
                return LLMAuthError(message, **details)
            if mentions_context_length(exc.code, message):
                return ContextLengthExceededError(message, **details)
            if 400 <= status < 500 and mentions_image_refusal(exc.code, message):
                return LLMImagesUnsupportedError(
                    f"the model does not take images (send text only, or use a model that "
                    f"sees them): {message}",
                    **details,
                )
            if 400 <= status < 500:
                return LLMBadRequestError(message, **details)
            return LLMResponseError(message, **details)
        if isinstance(exc, openai.APIError):
            # An error envelope inside a 200 (streamed or not).
            if mentions_context_length(exc.code, message):
                return ContextLengthExceededError(message)
            return LLMErrorEnvelopeError(f"the endpoint sent an error: {message}")
        return LLMResponseError(f"{type(exc).__name__}: {message}")


def _body(
    model: str,
    messages: list[dict[str, Any]],
    tools: list[dict[str, Any]] | None,
    options: RequestOptions,
) -> dict[str, Any]:
    """The JSON body of one Chat Completions call."""
    body: dict[str, Any] = {"model": model, "messages": messages}
    if tools:
        body["tools"] = tools
    body.update(options.to_request(model))
    return body


def _create_kwargs(body: dict[str, Any]) -> dict[str, Any]:
    """``create``'s keyword arguments for a body (the streamed calls use ``create``).

    ``messages`` and ``tools`` travel in ``extra_body``, which the SDK merges into
    the JSON body as it is: its request transform walks every message against
    the typed-dict union (about 0.15 ms a message, so a long session spends
    milliseconds a call there) and returns our plain wire dicts unchanged. The
    typed ``messages`` argument is then an empty list the merge replaces.
    """
    wire = {key: body[key] for key in ("messages", "tools") if key in body}
    rest = {key: value for key, value in body.items() if key not in wire}
    return {**rest, "messages": [], "extra_body": wire}


def _refused(exc: BaseException) -> bool:
    """True when a connection error was caused by a refused or failed connect (an
    ``OSError`` other than a timeout): the aiohttp transport reports those as
    timeouts."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, OSError) and not isinstance(cause, TimeoutError):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _retry_after_of(exc: openai.OpenAIError) -> float | None:
    response = getattr(exc, "response", None)
    headers = getattr(response, "headers", None)
    return parse_retry_after(headers) if headers is not None else None
