"""Model requests, responses and the one interface both roles (planner, reviewer) use."""

from __future__ import annotations

from typing import Any, Literal, Protocol, get_args, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_MAX_TOKENS = 16_384
"""Per-request token cap (paper section 4 and table 5)."""

MAX_RESPONSE_BYTES = 8 * 1024 * 1024
"""The largest answer a model may give, in bytes: an endpoint's body, the local model's message,
a scripted or replayed response's text and tool calls (UTF-8). It is twice what the largest
token cap (:data:`~controlscope.core.MAX_TOKENS`) generates at four characters a token, and
leaves room in the log's one event per model call (at most 32 MiB) for the request beside it.
A larger answer is a ``response_too_large`` :class:`ProviderError`."""


class ToolCall(BaseModel):
    """A tool call the model emitted.

    Attributes:
        id: the call id (generated when the model gave none).
        name: the tool name as emitted.
        arguments: the raw argument text as emitted (JSON for well-formed calls).
        parsed: the decoded arguments, or None when ``arguments`` is not a JSON object.
        error: why decoding failed, when it did (the raw text is kept in ``arguments``).
    """

    model_config = ConfigDict(frozen=True)
    id: str
    name: str
    arguments: str
    parsed: dict[str, Any] | None = None
    error: str | None = None


class Message(BaseModel):
    """One chat message in OpenAI's shape.

    Attributes:
        role: ``system``, ``user``, ``assistant`` or ``tool``.
        content: the message text (None for an assistant turn of tool calls only).
        tool_calls: the tool calls of an assistant turn.
        tool_call_id: for a ``tool`` message, the id of the call it answers.
        name: for a ``tool`` message, the tool's name.
    """

    model_config = ConfigDict(frozen=True)
    role: Literal["system", "user", "assistant", "tool"]
    content: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None
    name: str | None = None


class ToolSpec(BaseModel):
    """A native tool offered to the model (function-calling schema)."""

    model_config = ConfigDict(frozen=True)
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object"})


ToolChoice = str
"""``"auto"``, ``"required"``, ``"none"`` or the name of one offered tool."""


class ModelRequest(BaseModel):
    """One model request.

    Attributes:
        messages: the conversation.
        tools: native tools offered.
        tool_choice: ``auto``, ``required``, ``none`` or a tool name.
        temperature: sampling temperature.
        top_p: nucleus sampling, if set.
        max_tokens: per-request output cap in tokens.
        seed: sampling seed, if set. A request that sets none is answered with the seed of the
            model's own choice; a model that has a seed of its own (the local model:
            :class:`SeededModel`) states it, and the request is recorded, cached and sent with
            that seed (:func:`seeded_request`), so two models that differ only in it never
            share a cached answer and the log names the seed each answer was sampled with.
        json_schema: when set, the answer is constrained to JSON matching this schema.
        provider_options: passed through to the provider (e.g. a reasoning mode).
        draw: the draw index; part of the cache key so separately sampled draws never merge.
        purpose: ``planner`` or ``reviewer``; for accounting and cache slots, not the cache key.
    """

    model_config = ConfigDict(frozen=True)
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = "auto"
    temperature: float = 0.7
    top_p: float | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS
    seed: int | None = None
    json_schema: dict[str, Any] | None = None
    provider_options: dict[str, Any] = Field(default_factory=dict)
    draw: int = 0
    purpose: Literal["planner", "reviewer", "other"] = "other"


class Usage(BaseModel):
    """Token usage of one response.

    Attributes:
        input_tokens: prompt tokens sent.
        output_tokens: tokens generated.
        cached_tokens: prompt tokens the provider did not re-evaluate (its prompt cache, or the
            local model's KV-prefix reuse).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0


class ModelResponse(BaseModel):
    """One model response.

    Attributes:
        text: the assistant text (None when only tool calls came back).
        tool_calls: tool calls, possibly malformed (see :class:`ToolCall`).
        finish_reason: ``stop``, ``length``, ``tool_calls`` or the provider's word.
        usage: token usage.
        model: the model id that answered.
        cached: True when served from the exact-request cache (no model work was done).
        replayed: True when answered from a recorded run by a replay model (no model work was
            done; the response counts in logical totals only, paper A.5 and B.2).
        latency_s: wall seconds of the request (0 for cache hits).
        schema_error: for a request with a ``json_schema``, why the answer does not satisfy it
            (not JSON, cut off by the token cap, or the first schema violation, with its path);
            None when it does, or when the request had no schema. Every model path validates
            its answers; the reviewer turns a violation into a ``malformed`` fallback.
    """

    text: str | None = None
    tool_calls: tuple[ToolCall, ...] = ()
    finish_reason: str = "stop"
    usage: Usage = Field(default_factory=Usage)
    model: str = ""
    cached: bool = False
    replayed: bool = False
    latency_s: float = 0.0
    schema_error: str | None = None


ProviderErrorKind = Literal[
    "rate_limit",
    "server",
    "timeout",
    "connection",
    "bad_request",
    "context_length",
    "schema_unsupported",
    "runtime_crash",
    "response_too_large",
    "other",
]
"""What a failed model request failed of, by meaning (the same kind on every model path, read
from the provider's error body where it has one, not from its transport status alone):

- ``rate_limit``: the provider refuses for load or quota (retried unless the quota is spent);
- ``server``: the provider's own transient fault (retried);
- ``timeout``: no answer within the call's deadline (every attempt and the whole body counted);
- ``connection``: the endpoint cannot be reached;
- ``bad_request``: the request itself is wrong (never retried);
- ``context_length``: the prompt does not fit the model's context (never retried);
- ``schema_unsupported``: the answer's JSON schema cannot be enforced by this provider (never
  retried; the request fails rather than being answered unconstrained);
- ``runtime_crash``: the local model's process crashed, exited or broke its protocol;
- ``response_too_large``: the answer is larger than :data:`MAX_RESPONSE_BYTES` (never retried;
  nothing of it is used);
- ``other``: anything else (a malformed response, weights that cannot be loaded)."""

PROVIDER_ERROR_KINDS: tuple[ProviderErrorKind, ...] = get_args(ProviderErrorKind)


def response_size_problem(response: ModelResponse, limit: int = MAX_RESPONSE_BYTES) -> str | None:
    """Why ``response`` is too large to take in, or None: its text and tool calls (names and
    argument text) hold more than ``limit`` bytes of UTF-8.

    Args:
        response: an answer (scripted, replayed, or built from an endpoint's).
        limit: the most bytes (default :data:`MAX_RESPONSE_BYTES`).

    Returns:
        None, or ``"response too large: ..."``.
    """
    parts = [response.text or ""]
    parts += [text for call in response.tool_calls for text in (call.name, call.arguments)]
    size = 0
    for part in parts:
        size += len(part) if len(part) > limit or part.isascii() else len(part.encode("utf-8"))
        if size > limit:
            return (
                f"response too large: the answer holds more than {limit:,} bytes of text and "
                "tool calls"
            )
    return None


def provider_error_kind(value: object) -> ProviderErrorKind:
    """``value`` as a :data:`ProviderErrorKind` (``other`` for anything that is not one): for
    kinds that arrive as text (a child process's answer, a recorded log)."""
    return next((kind for kind in PROVIDER_ERROR_KINDS if kind == value), "other")


class ProviderError(RuntimeError):
    """A model request failed after retries (HTTP error, timeout, unreachable endpoint, crash,
    a schema the provider cannot enforce).

    Args:
        message: what failed, for people.
        status: the HTTP status, if any.
        kind: one of :data:`ProviderErrorKind` (an unknown kind becomes ``other``).
        usage: the tokens counted of an answer the call did not finish (a streamed answer cut
            by the call's deadline), if any.

    Attributes:
        status: the HTTP status, if any.
        usage: as given (recorded in the call's ``model_call`` event).
        kind: one of :data:`ProviderErrorKind` (``runtime_crash``: the local model's process
            died from a signal or exited; ``timeout``: it did not answer within the call's
            deadline and was killed; either way the next request starts a new process).
    """

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        kind: ProviderErrorKind = "other",
        usage: Usage | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.usage = usage
        self.kind: ProviderErrorKind = kind if kind in PROVIDER_ERROR_KINDS else "other"


@runtime_checkable
class SeededModel(Protocol):
    """A model that samples with a seed of its own when a request sets none (the local model:
    its base seed and the request's draw)."""

    def sampling_seed(self, request: ModelRequest) -> int | None:
        """The seed ``request`` is sampled with: its own ``seed`` when set, else the model's
        (None when the model does not choose one itself)."""
        ...


def seeded_request(model: object, request: ModelRequest) -> ModelRequest:
    """``request`` as ``model`` samples it: with the seed of the model's own choice when the
    request sets none and the model is a :class:`SeededModel`; otherwise unchanged.

    What the controller and the reviewer record and send, and what the exact-request cache
    keys on, so that the seed that shaped an answer is part of its request.

    Args:
        model: the model that will answer (any object; only a :class:`SeededModel` adds a seed).
        request: the request as rendered.

    Returns:
        ``request`` with ``seed`` set, or ``request`` itself.
    """
    if request.seed is not None or not isinstance(model, SeededModel):
        return request
    seed = model.sampling_seed(request)
    return request if seed is None else request.model_copy(update={"seed": seed})


@runtime_checkable
class ChatModel(Protocol):
    """A language model usable as planner or reviewer.

    Attributes:
        model_id: a stable identifier of the model (part of cache keys).
    """

    @property
    def model_id(self) -> str:
        """A stable identifier of the model (part of cache keys)."""
        ...

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer one request.

        Args:
            request: the messages, tools and sampling settings to answer.

        Returns:
            The model's response: text and/or tool calls, token usage, latency.

        Raises:
            ProviderError: when the model cannot answer (after the client's retries).
        """
        ...
