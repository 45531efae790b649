"""A :class:`~controlscope.core.ChatModel` for any OpenAI-compatible chat endpoint.

Built on the ``openai`` SDK (a provider, vLLM, llama.cpp's server, ``llama_cpp.server``). The body
is built here from the request and sent with the SDK's ``client.post`` (its documented way to send
any body), which skips the SDK's per-field parameter transformation: that costs about 1 ms per
message on this machine, i.e. tenths of a second per request late in a long trajectory, for no gain
since the body is already in the wire shape (``benchmarks/request_cache.py``).

Every call has one deadline that covers all of it: every attempt, every wait between attempts
and the whole answer, however slowly it trickles in (``request_timeout_s``, replaced by a run's
per-call limit and capped by its wall-clock ceiling, :func:`~controlscope.core.call_seconds`).
The call runs on the model's own event loop and is cancelled when its deadline passes (a
``timeout`` :class:`~controlscope.core.ProviderError`); an attempt may use all that is left of
it (the SDK is given no read timeout: a CPU server may think for minutes before its first
byte), unless ``timeout_s`` sets a shorter limit per attempt.

Answers are streamed where the endpoint streams (:mod:`controlscope.models._streamed`): a slow
answer is seen arriving (``tokens_received``), a call cut off by its deadline says how many
tokens had come, and the connection closed at the deadline stops a server that checks for
disconnects. A server that answers a streamed request whole is read whole; one that refuses
the ``stream`` field is asked again without it, and not asked to stream again.

The SDK's own retries are switched off; ``tenacity`` retries instead, so that this client counts
attempts and applies one rule: a failure is retried only when another attempt can succeed
(:mod:`controlscope.models._provider_errors` reads its meaning from the error body: a prompt over
the context or a schema the server cannot enforce is never retried, a rate limit or a transient
server fault is), with exponential backoff (or after the server's ``Retry-After``), and never
past the deadline. Where a panel installed an endpoint gate (:mod:`controlscope.models._gate`),
every attempt waits for one of the endpoint's connections, and a rate limit with
``Retry-After`` pauses every run's requests to the endpoint, not only this call's. An attempt
that ran out of time is not retried unless the endpoint is known to stop working on an answer
its client abandoned (``cancels_abandoned``): on a compute-bound server the abandoned attempt
goes on, and a retry queues behind it. After the last attempt a
typed :class:`~controlscope.core.ProviderError` is raised, so the agent can apply the paper's
rules (section 4: a review-stage error becomes a recorded keep, a planner-stage error ends the
trajectory).

Every answer to a ``json_schema`` request is validated against the schema
(``ModelResponse.schema_error``): what an endpoint enforces cannot be seen from outside. No
answer is read past :data:`~controlscope.core.MAX_RESPONSE_BYTES` (a ``response_too_large``
error, :mod:`controlscope.models._bounded_http`).

The ``openai`` package is imported on first use, so importing this module stays cheap.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from controlscope.core import (
    MAX_RESPONSE_BYTES,
    ModelRequest,
    ModelResponse,
    ProviderError,
    ProviderErrorKind,
    ToolCall,
    Usage,
    answer_schema_error,
    call_seconds,
)
from controlscope.models._bounded_http import ResponseTooLarge, bounded_client
from controlscope.models._chat_format import message_to_openai, parse_tool_call, tools_to_openai
from controlscope.models._gate import EndpointGate, current_gate
from controlscope.models._grammar import grammar_problem
from controlscope.models._provider_errors import error_meaning
from controlscope.models._streamed import (
    STREAM_FIELDS,
    Assembly,
    EmptyStream,
    MalformedAnswer,
    StreamCut,
    read_answer,
)

if TYPE_CHECKING:
    import openai
    import tenacity
    from anyio.from_thread import BlockingPortal
    from openai.types.chat import ChatCompletion

__all__ = [
    "JsonFormat",
    "MaxTokensField",
    "OpenAIModel",
    "base_url_problem",
    "request_to_openai",
]

JsonFormat = Literal["json_schema", "json_object"]
"""How a schema-constrained answer is asked for (see :func:`request_to_openai`)."""

MaxTokensField = Literal["max_tokens", "max_completion_tokens"]
"""Which body field carries the per-request token cap (see :func:`request_to_openai`)."""

DEFAULT_REQUEST_TIMEOUT_S = 600.0
"""Seconds one call may take by default, every attempt and wait included."""

CONNECT_TIMEOUT_S = 10.0
"""Seconds one attempt may wait for its connection (the server has not seen the request yet,
so a connection that timed out is retried)."""

_STREAM_WORD = re.compile(r"\bstream(?:_options|ing)?\b", re.IGNORECASE)
"""How an error answer names the ``stream`` field it refuses."""

_PLACEHOLDER_KEY = "not-needed"
"""Sent when no key is configured: local OpenAI-compatible servers ignore the key."""


def base_url_problem(url: str) -> str | None:
    """Why ``url`` cannot be the base URL of an OpenAI-compatible endpoint, or None when it can:
    it must be ``http`` or ``https`` and name a host (``http://HOST:PORT/v1``), so a mistyped
    one is refused before any request instead of failing every attempt.

    Args:
        url: the base URL as given (``--base-url``, ``OPENAI_BASE_URL``, a panel's
            ``base_url``).

    Returns:
        None, or the problem in words.
    """
    try:
        parts = urllib.parse.urlsplit(url.strip())
        parts.port  # noqa: B018 - reading it checks it (a port that is not 0-65535 raises)
    except ValueError as err:
        return f"{url!r} is not a URL ({err})"
    if parts.scheme.lower() not in ("http", "https"):
        return f"{url!r} is not an http:// or https:// URL (e.g. http://127.0.0.1:8000/v1)"
    if not parts.hostname:
        return f"{url!r} names no host (e.g. http://127.0.0.1:8000/v1)"
    return None


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
    completion: ChatCompletion, model: str, latency_s: float, counted: int | None = None
) -> ModelResponse:
    """The response to record for a completion; ``counted``: the pieces of a streamed answer,
    its output tokens when the server sent no usage (``llama_cpp.server`` sends none in a
    stream; its prompt tokens are then unknown and recorded as 0)."""
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
    usage = Usage(output_tokens=counted or 0)
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


@dataclass(frozen=True)
class _Verdict:
    """A failed attempt: its kind, HTTP status, whether to retry, and the server's Retry-After."""

    kind: ProviderErrorKind
    status: int | None = None
    retryable: bool = False
    retry_after_s: float | None = None


def _classify(exc: BaseException) -> _Verdict | None:
    """The verdict on an attempt's exception (None for exceptions that are not the endpoint's).

    An error answer is judged by its meaning (:func:`error_meaning`: the error body first, the
    status where the body says nothing known).
    """
    import openai

    if _too_large(exc) is not None:  # read no further than MAX_RESPONSE_BYTES
        return _Verdict("response_too_large")
    if isinstance(exc, json.JSONDecodeError | MalformedAnswer):  # a 2xx answer that is no answer
        return _Verdict("other")
    if isinstance(exc, StreamCut):  # the server stopped it: nothing of it runs on
        return _Verdict("server", retryable=True)
    if isinstance(exc, TimeoutError):  # the attempt's own limit (``timeout_s``)
        return _Verdict("timeout")
    if not isinstance(exc, openai.OpenAIError):
        return None
    if isinstance(exc, openai.APITimeoutError):  # no read timeout is set: while connecting
        return _Verdict("timeout", retryable=True)
    if isinstance(exc, openai.APIConnectionError):
        return _Verdict("connection", retryable=True)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        meaning = error_meaning(status, exc.body, exc.message)
        after = _retry_after_s(exc.response.headers) if meaning.retryable else None
        return _Verdict(meaning.kind, status, meaning.retryable, after)
    return _Verdict("other")  # e.g. a response that fails the SDK's validation


def _too_large(exc: BaseException | None) -> ResponseTooLarge | None:
    """The :class:`ResponseTooLarge` behind ``exc`` (itself, or what an SDK wrapped it in)."""
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, ResponseTooLarge):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _refuses_streaming(exc: BaseException) -> bool:
    """Whether an error answer refuses the request's ``stream`` field (a server that does not
    stream and says so), so the request is to be sent again without it."""
    import openai

    if not isinstance(exc, openai.APIStatusError) or exc.status_code not in (400, 422, 501):
        return False
    error = exc.body.get("error", exc.body) if isinstance(exc.body, Mapping) else {}
    param = error.get("param") if isinstance(error, Mapping) else None
    if isinstance(param, str) and param.startswith("stream"):
        return True
    text = exc.message if isinstance(exc.message, str) else ""
    return _STREAM_WORD.search(text) is not None


def _pause_for_rate_limit(gate: EndpointGate, exc: BaseException, cap_s: float) -> None:
    """Pause the whole endpoint (every run sharing ``gate``) for the ``Retry-After`` of a
    rate-limit answer (at most ``cap_s``, the longest wait between attempts)."""
    verdict = _classify(exc)
    if verdict is not None and verdict.kind == "rate_limit" and verdict.retry_after_s is not None:
        gate.pause(min(verdict.retry_after_s, cap_s))


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

    Requests run on an event loop of the model's own (an ``anyio`` blocking portal, started on
    first use), so that one deadline can cancel a call wherever it is: connecting, between
    attempts, in the headers or in the middle of a body that trickles in.

    Args:
        model: the served model name.
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        api_key: the bearer key.
        timeout_s: seconds one attempt may take, or None (the default): what is left of the
            call's deadline. An attempt that runs out of its time is retried only when
            ``cancels_abandoned`` is set. Connecting may take at most
            :data:`CONNECT_TIMEOUT_S`.
        request_timeout_s: seconds one :meth:`complete` call may take, all of it counted (every
            attempt, the waits between them, the whole answer); > 0. A run's per-call limit
            (``Condition.request_timeout_s``) replaces it, and the run's wall-clock ceiling caps
            it (:func:`~controlscope.core.call_seconds`).
        max_retries: further attempts after the first on retryable failures; >= 0.
        backoff_s: delay before the first retry; doubles every retry, capped at
            ``max_backoff_s``, plus a jitter of up to a quarter of ``backoff_s``. A server's
            ``Retry-After`` is honoured up to that cap.
        max_backoff_s: the longest exponential wait between attempts.
        json_format: how ``json_schema`` requests are sent (see :func:`request_to_openai`);
            ``json_object`` for ``llama_cpp.server``, which fails on the ``json_schema`` type. In
            that format the server enforces the schema with llama.cpp's grammar, which silently
            gives up on some schemas, so such a schema is refused before sending
            (:func:`~controlscope.models._grammar.grammar_problem`).
        max_tokens_field: which body field carries the token cap (see :func:`request_to_openai`).
        stream: ask for streamed answers (the default; see the module docstring). A request's
            provider option ``stream`` (``--planner-option stream=false``) overrides it.
        cancels_abandoned: the endpoint stops computing an answer whose client went away, so an
            attempt that ran out of time may be retried (default False: on a server that
            finishes every request, such as ``llama_cpp.server`` answering whole, the retry
            would queue behind the abandoned attempt). A streaming ``llama_cpp.server`` stops
            at its next token, vLLM aborts at once.

    Attributes:
        last_attempts: HTTP attempts made by the most recent :meth:`complete` call (in any
            thread; the model may be shared by threads).
        total_attempts: HTTP attempts made since construction.
        total_retries: retries (attempts after a failed one) since construction.
        tokens_received: text and tool-call pieces (about one token each) of the most recent
            call's streamed answer so far: it grows while the answer arrives.

    Raises:
        ValueError: when no model name is given or configured, a setting is out of range, or
            the base URL is not an http(s) URL naming a host (:func:`base_url_problem`).
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float | None = None,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        max_retries: int = 4,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        json_format: JsonFormat = "json_schema",
        max_tokens_field: MaxTokensField = "max_tokens",
        stream: bool = True,
        cancels_abandoned: bool = False,
    ) -> None:
        name = model or os.environ.get("CONTROLSCOPE_MODEL")
        if not name:
            raise ValueError("no model name: pass one (openai:NAME) or set CONTROLSCOPE_MODEL")
        if not ((timeout_s is None or timeout_s > 0) and request_timeout_s > 0):
            raise ValueError(
                f"timeouts must be > 0, got timeout_s={timeout_s}, "
                f"request_timeout_s={request_timeout_s}"
            )
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
        problem = None if self.base_url is None else base_url_problem(self.base_url)
        if problem is not None:
            raise ValueError(f"base URL {problem}")
        self._api_key = api_key or os.environ.get("OPENAI_API_KEY") or _PLACEHOLDER_KEY
        self.timeout_s = None if timeout_s is None else float(timeout_s)
        self.request_timeout_s = float(request_timeout_s)
        self.max_retries = max_retries
        self.backoff_s = float(backoff_s)
        self.max_backoff_s = float(max_backoff_s)
        self.json_format: JsonFormat = json_format
        self.max_tokens_field: MaxTokensField = max_tokens_field
        self.stream = bool(stream)
        self.cancels_abandoned = bool(cancels_abandoned)
        self.last_attempts = 0
        self._assembly: Assembly | None = None
        self.total_attempts = 0
        self.total_retries = 0
        self._client: openai.AsyncOpenAI | None = None
        self._loop: _EventLoop | None = None
        self._pid = os.getpid()
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        """``openai:NAME``: part of cache keys.

        The endpoint is not part of it, so replicas of one served model (different URLs or ports)
        share cached responses; serve different models under different names.
        """
        return f"openai:{self.model}"

    def _started(self) -> tuple[BlockingPortal, openai.AsyncOpenAI]:
        """The model's event loop and HTTP client, started on first use, and again in a
        process forked from the one that started them (a branch by fork): the loop's thread
        and the client's connections are that process's, so they are forgotten, not closed."""
        with self._lock:
            if self._pid != os.getpid():
                self._loop = self._client = None
                self._pid = os.getpid()
            if self._loop is None or self._client is None:
                import openai

                self._loop = _EventLoop(f"openai-client:{self.model}")
                self._client = openai.AsyncOpenAI(
                    api_key=self._api_key,
                    base_url=self.base_url,
                    # No read timeout: an attempt may wait as long as its call's deadline allows
                    # (the deadline and ``timeout_s`` cancel it on the event loop).
                    timeout=openai.Timeout(None, connect=CONNECT_TIMEOUT_S),
                    max_retries=0,
                    http_client=bounded_client(MAX_RESPONSE_BYTES),
                )
            return self._loop.portal, self._client

    def _retrying(self, deadline: float) -> tenacity.AsyncRetrying:
        """The retry policy of one :meth:`complete` call.

        Retryable failures (see :func:`_classify`; an attempt that ran out of its ``timeout_s``
        only when ``cancels_abandoned``) are retried up to ``max_retries`` times, and
        never when the wait would end past the call's ``deadline`` (``time.monotonic``); the wait
        is the server's ``Retry-After`` when it sent one (capped at ``max_backoff_s``), else
        ``backoff_s`` doubling every retry up to ``max_backoff_s``, plus a random jitter of up to
        a quarter of ``backoff_s``. Every wait counts one retry in ``total_retries``.
        """
        import tenacity

        backoff = tenacity.wait_exponential(
            multiplier=self.backoff_s, max=self.max_backoff_s
        ) + tenacity.wait_random(0, self.backoff_s / 4)

        def wait(state: tenacity.RetryCallState) -> float:
            failure = state.outcome.exception() if state.outcome is not None else None
            verdict = _classify(failure) if failure is not None else None
            if verdict is not None and verdict.retry_after_s is not None:
                return min(max(verdict.retry_after_s, 0.0), self.max_backoff_s)
            return backoff(state)

        class _PastDeadline(tenacity.stop.stop_base):
            """Stop when the next wait would end past the call's deadline."""

            def __call__(self, state: tenacity.RetryCallState) -> bool:
                return time.monotonic() + (state.upcoming_sleep or 0.0) >= deadline

        def count_retry(state: tenacity.RetryCallState) -> None:
            self.total_retries += 1

        def retryable(exc: BaseException) -> bool:
            if isinstance(exc, TimeoutError):
                return self.cancels_abandoned
            verdict = _classify(exc)
            return verdict is not None and verdict.retryable

        return tenacity.AsyncRetrying(
            stop=tenacity.stop_after_attempt(self.max_retries + 1) | _PastDeadline(),
            wait=wait,
            retry=tenacity.retry_if_exception(retryable),
            before_sleep=count_retry,
            reraise=True,
        )

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Send one request, retrying transient failures (see :meth:`_retrying`), all of it
        within one deadline (``request_timeout_s``, see the class).

        Args:
            request: the request (see :func:`request_to_openai` for the mapping).

        Returns:
            The response; ``latency_s`` is the wall time of the whole call including retries;
            malformed tool-call arguments come back as :class:`ToolCall` with ``parsed=None``;
            for a ``json_schema`` request, ``schema_error`` says why the answer breaks the schema
            (None when it satisfies it).

        Raises:
            ValueError: for a request that cannot be mapped (unknown named tool).
            ProviderError: by meaning (see :mod:`controlscope.models._provider_errors`):
                ``timeout`` when the call's deadline passed (whatever was under way),
                ``rate_limit``, ``server``, ``connection`` after the last attempt;
                ``context_length``, ``schema_unsupported`` (also before sending, for a schema
                llama.cpp's grammar would not enforce in ``json_object`` format),
                ``bad_request`` at once; ``response_too_large`` at once for an answer over
                :data:`~controlscope.core.MAX_RESPONSE_BYTES` (read no further,
                :mod:`controlscope.models._bounded_http`); ``other`` for a malformed response.
        """

        if self.json_format == "json_object" and request.json_schema is not None:
            problem = grammar_problem(request.json_schema)
            if problem is not None:
                self.last_attempts = 0
                raise ProviderError(
                    f"schema_unsupported: llama.cpp's grammar would not enforce the answer's "
                    f"schema ({problem}); the request was not sent",
                    kind="schema_unsupported",
                )
        body = {"model": self.model, **self._body(request)}
        limit = call_seconds(self.request_timeout_s)
        if limit <= 0:
            self.last_attempts = 0
            raise ProviderError(
                "timeout: the run's wall-clock ceiling has passed; the request was not sent",
                kind="timeout",
            )
        portal, client = self._started()
        start = time.monotonic()
        call = _Call(self, limit)
        self._assembly = call.assembly
        try:
            outcome = portal.call(call.run, client, body)
        finally:
            self.last_attempts = call.attempts
        if call.timed_out or isinstance(outcome, BaseException):
            failure = call.error(outcome, str(client.base_url))
            if failure is outcome:
                raise failure
            raise failure from call.failure
        counted = call.assembly.pieces if call.assembly.streamed else None
        try:
            response = _response_from_openai(outcome, self.model, time.monotonic() - start, counted)
        except (AttributeError, TypeError, ValueError) as exc:
            raise ProviderError(
                f"malformed response from {self.model}: {exc}", kind="other"
            ) from exc
        if request.json_schema is None:
            return response
        problem = answer_schema_error(
            response.text, request.json_schema, finish_reason=response.finish_reason
        )
        return response.model_copy(update={"schema_error": problem})

    def _body(self, request: ModelRequest) -> dict[str, Any]:
        """The request's body, asking for a stream when the model streams and the request's
        provider options do not say otherwise."""
        body = request_to_openai(
            request, json_format=self.json_format, max_tokens_field=self.max_tokens_field
        )
        if self.stream and "stream" not in body:
            body.update(STREAM_FIELDS)
        return body

    @property
    def tokens_received(self) -> int:
        """See the class's Attributes."""
        assembly = self._assembly
        return assembly.pieces if assembly is not None else 0

    def close(self) -> None:
        """Close the HTTP client and stop the event loop (idempotent)."""
        with self._lock:
            loop, client = self._loop, self._client
            self._loop = self._client = None
            if loop is not None:
                if client is not None:
                    with contextlib.suppress(Exception):
                        loop.portal.call(client.close)
                loop.close()


class _EventLoop:
    """An ``anyio`` event loop on a daemon thread of its own, and its blocking portal.

    A daemon thread, unlike ``anyio.from_thread.start_blocking_portal``'s: a model nobody closed
    must not keep the interpreter from exiting.
    """

    def __init__(self, name: str) -> None:
        import anyio

        ready: queue.Queue[BlockingPortal] = queue.Queue()
        self._thread = threading.Thread(
            target=anyio.run, args=(self._serve, ready), name=name, daemon=True
        )
        self._thread.start()
        self.portal = ready.get()

    @staticmethod
    async def _serve(ready: queue.Queue[BlockingPortal]) -> None:
        from anyio.from_thread import BlockingPortal

        async with BlockingPortal() as portal:
            ready.put(portal)
            await portal.sleep_until_stopped()

    def close(self) -> None:
        """Stop the loop (cancelling what still runs on it) and join its thread."""
        with contextlib.suppress(Exception):
            self.portal.call(self.portal.stop, True)
        self._thread.join(10)


class _Call:
    """One :meth:`OpenAIModel.complete` call on the model's event loop: its attempts under one
    deadline of ``limit`` seconds."""

    def __init__(self, model: OpenAIModel, limit: float) -> None:
        self.model = model
        self.limit = limit
        self.attempts = 0
        self.timed_out = False
        self.failure: BaseException | None = None
        self.assembly = Assembly()

    async def run(self, client: openai.AsyncOpenAI, body: dict[str, Any]) -> Any:
        """The completion, or the exception of the last attempt (``timed_out`` set when the
        deadline cancelled the call)."""
        import anyio

        deadline = time.monotonic() + self.limit

        async def attempt() -> ChatCompletion:
            gate = current_gate()
            if gate is None:
                return await timed()
            async with gate.slot():
                try:
                    return await timed()
                except Exception as exc:
                    _pause_for_rate_limit(gate, exc, self.model.max_backoff_s)
                    raise

        async def timed() -> ChatCompletion:
            self._count()
            own = self.model.timeout_s
            if own is None or own >= deadline - time.monotonic():
                return await self._send(client, body)
            with anyio.fail_after(own):
                return await self._send(client, body)

        with anyio.move_on_after(self.limit) as scope:
            try:
                return await self.model._retrying(deadline)(attempt)
            except Exception as exc:
                self.failure = exc
                return exc
        self.timed_out = scope.cancelled_caught
        return None

    def _count(self) -> None:
        """Count one more HTTP attempt, whose answer starts a new assembly."""
        self.attempts += 1
        self.model.total_attempts += 1
        self.assembly = self.model._assembly = Assembly()

    async def _send(self, client: openai.AsyncOpenAI, body: dict[str, Any]) -> ChatCompletion:
        """One attempt: streamed when the body asks for it. Sent again unstreamed at once (one
        more attempt) when the stream ended before its first chunk (the server failed and its
        error answer says why: a prompt over the context is not retried) or when the server
        refuses the stream (then the model streams no more)."""
        import openai
        from openai.types.chat import ChatCompletion

        if body.get("stream") is True:
            try:
                return await read_answer(client, body, self.assembly)
            except EmptyStream:
                pass
            except Exception as exc:
                if not _refuses_streaming(exc):
                    raise
                self.model.stream = False
                for key in STREAM_FIELDS:  # this call's later attempts too
                    body.pop(key, None)
            body = {key: value for key, value in body.items() if key not in STREAM_FIELDS}
            self._count()
            try:
                return await client.post("/chat/completions", cast_to=ChatCompletion, body=body)
            except openai.APIConnectionError as exc:
                # The server may close the connection it failed on only after the client took
                # it up again (``llama_cpp.server`` does): a fresh one is tried once.
                if isinstance(exc, openai.APITimeoutError):
                    raise
            self._count()
        return await client.post("/chat/completions", cast_to=ChatCompletion, body=body)

    def _received(self) -> str:
        """How much of the last attempt's answer had come, for an error's message."""
        if not self.assembly.streamed:
            return "no tokens received: the answer was not streamed"
        return f"{self.assembly.pieces} token(s) of a streamed answer received"

    def error(self, outcome: object, url: str) -> BaseException:
        """The :class:`ProviderError` for a call that timed out or whose last attempt failed
        (an exception that is not the endpoint's is returned as it is)."""
        name = self.model.model
        tried = f"{self.attempts} attempt(s)"
        if self.timed_out:
            return ProviderError(
                f"timeout error from {name} at {url}: no answer within the call's deadline of "
                f"{self.limit:g} s ({tried}; {self._received()})",
                kind="timeout",
            )
        assert isinstance(outcome, BaseException)
        verdict = _classify(outcome)
        if verdict is None:
            return outcome
        if isinstance(outcome, TimeoutError):
            retry = (
                "retried as the endpoint cancels abandoned work"
                if self.model.cancels_abandoned
                else "not retried: the endpoint may still be computing it (cancels_abandoned is "
                "off)"
            )
            return ProviderError(
                f"timeout error from {name} at {url}: an attempt took longer than its limit of "
                f"{self.model.timeout_s:g} s ({tried}; {self._received()}); {retry}",
                kind="timeout",
            )
        tail = f" after {tried}" if verdict.retryable else ""
        why = _too_large(outcome) or outcome
        return ProviderError(
            f"{verdict.kind} error from {name} at {url}{tail}: {why}",
            status=verdict.status,
            kind=verdict.kind,
        )
