"""A :class:`~controlscope.core.ChatModel` for any OpenAI-compatible chat endpoint.

Built on the ``openai`` SDK (a provider, vLLM, llama.cpp's server, ``llama_cpp.server``). The body
is built here from the request and sent with the SDK's ``client.post`` (its documented way to send
any body), which skips the SDK's per-field parameter transformation: that costs about 1 ms per
message on this machine, i.e. tenths of a second per request late in a long trajectory, for no gain
since the body is already in the wire shape (``benchmarks/request_cache.py``).

The SDK's own retries are switched off; ``tenacity`` retries instead, so that this client counts
attempts and applies one backoff rule: 429, 408, 409, 5xx, timeouts and connection errors are
retried with exponential backoff (or after the server's ``Retry-After``); after the last attempt
a typed :class:`~controlscope.core.ProviderError` is raised, so the agent can apply the paper's
rules (section 4: a review-stage error becomes a recorded keep, a planner-stage error ends the
trajectory). Every request has a timeout: an
unreachable or silent endpoint never hangs the caller.

The ``openai`` package is imported on first use, so importing this module stays cheap.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal

from controlscope.core import (
    ModelRequest,
    ModelResponse,
    ProviderError,
    ProviderErrorKind,
    ToolCall,
    Usage,
)
from controlscope.models._chat_format import message_to_openai, parse_tool_call, tools_to_openai

if TYPE_CHECKING:
    import openai
    import tenacity
    from openai.types.chat import ChatCompletion

__all__ = ["JsonFormat", "MaxTokensField", "OpenAIModel", "request_to_openai"]

JsonFormat = Literal["json_schema", "json_object"]
"""How a schema-constrained answer is asked for (see :func:`request_to_openai`)."""

MaxTokensField = Literal["max_tokens", "max_completion_tokens"]
"""Which body field carries the per-request token cap (see :func:`request_to_openai`)."""

_RETRY_STATUSES = frozenset({408, 409, 429})
_PLACEHOLDER_KEY = "not-needed"
"""Sent when no key is configured: local OpenAI-compatible servers ignore the key."""


def request_to_openai(
    request: ModelRequest,
    *,
    json_format: JsonFormat = "json_schema",
    max_tokens_field: MaxTokensField = "max_tokens",
) -> dict[str, Any]:
    """Map a request to the JSON body of ``POST /chat/completions`` (without ``model``).

    Args:
        request: the request. A named ``tool_choice`` must name one of ``request.tools``.
        json_format: how a ``json_schema`` request is sent: ``json_schema`` (OpenAI's
            ``{"type": "json_schema", "json_schema": {"name", "schema"}}``) or ``json_object``
            (``{"type": "json_object", "schema": ...}``, what ``llama_cpp.server`` accepts).
        max_tokens_field: the body field carrying the token cap: ``max_tokens`` (understood by
            every compatible server) or ``max_completion_tokens`` (required by OpenAI's
            reasoning models).

    Returns:
        The body: ``messages``, ``temperature``, the token cap and, when set, ``tools`` and
        ``tool_choice``, ``top_p``, ``seed``, ``response_format``; the provider options are merged
        in last, verbatim (they may add fields or override these).

    Raises:
        ValueError: when ``tool_choice`` names a tool that is not offered, or is given without
            tools (other than ``auto``/``none``).
    """
    kwargs: dict[str, Any] = {
        "messages": [message_to_openai(m) for m in request.messages],
        "temperature": request.temperature,
        max_tokens_field: request.max_tokens,
    }
    names = [tool.name for tool in request.tools]
    choice = request.tool_choice
    if request.tools:
        kwargs["tools"] = tools_to_openai(request.tools)
        if choice in ("auto", "required", "none"):
            kwargs["tool_choice"] = choice
        elif choice in names:
            kwargs["tool_choice"] = {"type": "function", "function": {"name": choice}}
        else:
            raise ValueError(f"tool_choice {choice!r} names no offered tool (offered: {names})")
    elif choice not in ("auto", "none"):
        raise ValueError(f"tool_choice {choice!r} needs tools, but the request offers none")
    if request.top_p is not None:
        kwargs["top_p"] = request.top_p
    if request.seed is not None:
        kwargs["seed"] = request.seed
    if request.json_schema is not None:
        schema = request.json_schema
        if json_format == "json_object":
            kwargs["response_format"] = {"type": "json_object", "schema": schema}
        else:
            title = schema.get("title")
            name = title if isinstance(title, str) and title.isidentifier() else "answer"
            kwargs["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": name, "schema": schema},
            }
    kwargs.update(request.provider_options)
    return kwargs


def _response_from_openai(
    completion: ChatCompletion, model: str, latency_s: float
) -> ModelResponse:
    if not completion.choices:
        raise ProviderError("the provider returned no choices", kind="other")
    choice = completion.choices[0]
    message = choice.message
    calls: list[ToolCall] = []
    for index, call in enumerate(message.tool_calls or ()):
        function = getattr(call, "function", None)
        if function is None:  # a custom (non-function) tool call: keep what there is
            calls.append(
                ToolCall(id=call.id, name="", arguments="", error="not a function tool call")
            )
            continue
        calls.append(parse_tool_call(call.id, function.name, function.arguments, index))
    usage = Usage()
    if completion.usage is not None:
        details = completion.usage.prompt_tokens_details
        cached = details.cached_tokens if details is not None else None
        usage = Usage(
            input_tokens=completion.usage.prompt_tokens or 0,
            output_tokens=completion.usage.completion_tokens or 0,
            cached_tokens=cached or 0,
        )
    return ModelResponse(
        text=message.content,
        tool_calls=tuple(calls),
        finish_reason=choice.finish_reason or "stop",
        usage=usage,
        model=completion.model or model,
        cached=False,
        latency_s=latency_s,
    )


def _classify(
    exc: Exception,
) -> tuple[ProviderErrorKind, int | None, bool, float | None] | None:
    """Return (kind, status, retryable, retry_after_s) for an SDK exception, None for others."""
    import openai

    if isinstance(exc, json.JSONDecodeError):  # a 2xx answer whose body is not JSON
        return "other", None, False, None
    if not isinstance(exc, openai.OpenAIError):
        return None
    if isinstance(exc, openai.APITimeoutError):
        return "timeout", None, True, None
    if isinstance(exc, openai.APIConnectionError):
        return "connection", None, True, None
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        retry_after = _retry_after_s(exc.response.headers)
        if status == 429:
            return "rate_limit", status, True, retry_after
        if status >= 500:
            return "server", status, True, retry_after
        if status == 408:
            return "timeout", status, True, retry_after
        if status in _RETRY_STATUSES:
            return "other", status, True, retry_after
        return "bad_request", status, False, None
    return "other", None, False, None  # e.g. a response that fails the SDK's validation


def _retryable(exc: BaseException) -> bool:
    """Whether a failed attempt is worth another (see :func:`_classify`)."""
    verdict = _classify(exc) if isinstance(exc, Exception) else None
    return verdict is not None and verdict[2]


def _retry_after_s(headers: Mapping[str, str]) -> float | None:
    value = headers.get("retry-after-ms")
    if value is not None:
        try:
            return float(value) / 1000.0
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is not None:
        try:
            return float(value)
        except ValueError:
            return None
    return None


class OpenAIModel:
    """A chat model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Configuration comes from the arguments or, when they are ``None``, the environment:
    ``CONTROLSCOPE_MODEL`` (model name), ``OPENAI_BASE_URL`` and ``OPENAI_API_KEY``. With no key at
    all a placeholder is sent (local servers ignore it; a provider answers 401, which becomes a
    ``bad_request`` :class:`ProviderError`).

    Args:
        model: the served model name.
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        api_key: the bearer key.
        timeout_s: seconds one HTTP attempt may take (connect at most 10 s of it); > 0.
        max_retries: further attempts after the first on retryable failures; >= 0.
        backoff_s: delay before the first retry; doubles every retry, capped at
            ``max_backoff_s``, plus a jitter of up to a quarter of ``backoff_s``. A server's
            ``Retry-After`` is honoured up to that cap.
        max_backoff_s: the longest exponential wait between attempts.
        json_format: how ``json_schema`` requests are sent (see :func:`request_to_openai`);
            ``json_object`` for ``llama_cpp.server``, which fails on the ``json_schema`` type.
        max_tokens_field: which body field carries the token cap (see :func:`request_to_openai`).

    Attributes:
        last_attempts: HTTP attempts made by the most recent :meth:`complete` call (in any
            thread; the model may be shared by threads).
        total_attempts: HTTP attempts made since construction.
        total_retries: retries (attempts after a failed one) since construction.

    Raises:
        ValueError: when no model name is given or configured, or a setting is out of range.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 120,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        json_format: JsonFormat = "json_schema",
        max_tokens_field: MaxTokensField = "max_tokens",
    ) -> None:
        name = model or os.environ.get("CONTROLSCOPE_MODEL")
        if not name:
            raise ValueError("no model name: pass one (openai:NAME) or set CONTROLSCOPE_MODEL")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if backoff_s < 0 or max_backoff_s < 0:
            raise ValueError("backoff_s and max_backoff_s must be >= 0")
        if json_format not in ("json_schema", "json_object"):
            raise ValueError(f"json_format must be json_schema or json_object, not {json_format!r}")
        if max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise ValueError(
                "max_tokens_field must be max_tokens or max_completion_tokens, "
                f"not {max_tokens_field!r}"
            )
        self.model = name
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or _PLACEHOLDER_KEY
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.json_format: JsonFormat = json_format
        self.max_tokens_field: MaxTokensField = max_tokens_field
        self.last_attempts = 0
        self.total_attempts = 0
        self.total_retries = 0
        self._client: openai.OpenAI | None = None
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        """``openai:NAME``: part of cache keys.

        The endpoint is not part of it, so replicas of one served model (different URLs or ports)
        share cached responses; serve different models under different names.
        """
        return f"openai:{self.model}"

    def _get_client(self) -> openai.OpenAI:
        with self._lock:
            if self._client is None:
                import openai

                self._client = openai.OpenAI(
                    api_key=self._api_key,
                    base_url=self.base_url,
                    timeout=openai.Timeout(self.timeout_s, connect=min(10.0, self.timeout_s)),
                    max_retries=0,
                )
            return self._client

    def _retrying(self) -> tenacity.Retrying:
        """The retry policy of one :meth:`complete` call.

        Retryable failures (see :func:`_classify`) are retried up to ``max_retries`` times; the
        wait is the server's ``Retry-After`` when it sent one (capped at ``max_backoff_s``), else
        ``backoff_s`` doubling every retry up to ``max_backoff_s``, plus a random jitter of up to
        a quarter of ``backoff_s``. Every wait counts one retry in ``total_retries``.
        """
        import tenacity

        backoff = tenacity.wait_exponential(
            multiplier=self.backoff_s, max=self.max_backoff_s
        ) + tenacity.wait_random(0, self.backoff_s / 4)

        def wait(state: tenacity.RetryCallState) -> float:
            failure = state.outcome.exception() if state.outcome is not None else None
            verdict = _classify(failure) if isinstance(failure, Exception) else None
            if verdict is not None and verdict[3] is not None:
                return min(max(verdict[3], 0.0), self.max_backoff_s)
            return backoff(state)

        def count_retry(state: tenacity.RetryCallState) -> None:
            self.total_retries += 1

        return tenacity.Retrying(
            stop=tenacity.stop_after_attempt(self.max_retries + 1),
            wait=wait,
            retry=tenacity.retry_if_exception(_retryable),
            before_sleep=count_retry,
            reraise=True,
        )

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Send one request, retrying transient failures (see :meth:`_retrying`).

        Args:
            request: the request (see :func:`request_to_openai` for the mapping).

        Returns:
            The response; ``latency_s`` is the wall time of the whole call including retries;
            malformed tool-call arguments come back as :class:`ToolCall` with ``parsed=None``.

        Raises:
            ValueError: for a request that cannot be mapped (unknown named tool).
            ProviderError: after the last attempt (``kind`` ``rate_limit``, ``server``,
                ``timeout``, ``connection``) or at once for a non-retryable answer
                (``bad_request`` for 4xx, ``other`` for a malformed response).
        """
        from openai.types.chat import ChatCompletion

        body = {"model": self.model, **self._body(request)}
        client = self._get_client()
        start = time.monotonic()
        attempts = 0

        def attempt() -> ChatCompletion:
            nonlocal attempts
            attempts += 1
            self.total_attempts += 1
            return client.post("/chat/completions", cast_to=ChatCompletion, body=body)

        try:
            completion = self._retrying()(attempt)
        except Exception as exc:
            verdict = _classify(exc)
            if verdict is None:
                raise
            kind, status, retryable, _ = verdict
            tail = f" after {attempts} attempt(s)" if retryable else ""
            raise ProviderError(
                f"{kind} error from {self.model} at {client.base_url}{tail}: {exc}",
                status=status,
                kind=kind,
            ) from exc
        finally:
            self.last_attempts = attempts
        try:
            return _response_from_openai(completion, self.model, time.monotonic() - start)
        except (AttributeError, TypeError, ValueError) as exc:
            raise ProviderError(
                f"malformed response from {self.model}: {exc}", kind="other"
            ) from exc

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        return request_to_openai(
            request, json_format=self.json_format, max_tokens_field=self.max_tokens_field
        )

    def close(self) -> None:
        """Close the HTTP client (idempotent)."""
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None
