"""Model requests and responses of the trajectory log as Inspect AI's chat types."""

from __future__ import annotations

from typing import Any

from inspect_ai.model import (
    ChatCompletionChoice,
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    GenerateConfig,
    ModelOutput,
    ModelUsage,
    StopReason,
)
from inspect_ai.tool import ToolCall, ToolFunction, ToolInfo, ToolParams
from pydantic import ValidationError

from controlscope.core import Message, ModelCallEvent, ModelRequest, ModelResponse, ToolSpec, Usage
from controlscope.core import ToolCall as OurToolCall

_STOPS: dict[str, StopReason] = {
    "stop": "stop",
    "length": "max_tokens",
    "tool_calls": "tool_calls",
    "content_filter": "content_filter",
}


def message(m: Message) -> ChatMessage:
    """One request message as Inspect's chat message of the same role."""
    text = m.content or ""
    if m.role == "system":
        return ChatMessageSystem(content=text)
    if m.role == "user":
        return ChatMessageUser(content=text)
    if m.role == "tool":
        return ChatMessageTool(content=text, tool_call_id=m.tool_call_id, function=m.name)
    return ChatMessageAssistant(content=text, tool_calls=tool_calls(m.tool_calls))


def tool_calls(calls: tuple[OurToolCall, ...]) -> list[ToolCall] | None:
    """A message's native tool calls (None without any, as Inspect writes it)."""
    if not calls:
        return None
    return [
        ToolCall(id=c.id, function=c.name, arguments=c.parsed or {}, parse_error=c.error)
        for c in calls
    ]


def usage(u: Usage) -> ModelUsage:
    """Token usage in Inspect's terms: its ``input_tokens`` leave out the cached prompt tokens
    (``input_tokens_cache_read``); ours count them."""
    return ModelUsage(
        input_tokens=u.input_tokens - u.cached_tokens,
        output_tokens=u.output_tokens,
        total_tokens=u.input_tokens + u.output_tokens,
        input_tokens_cache_read=u.cached_tokens or None,
    )


def output(event: ModelCallEvent, model: str) -> ModelOutput:
    """The response (or the provider error) of one model call."""
    response = event.response
    if response is None:
        failed = ModelOutput.from_content(model, "", stop_reason="unknown", error=event.error)
        failed.usage = usage(event.usage) if event.usage is not None else None
        return failed
    return ModelOutput(
        model=response.model or model,
        choices=[
            ChatCompletionChoice(
                message=assistant(response, model),
                stop_reason=_STOPS.get(response.finish_reason, "unknown"),
            )
        ],
        usage=usage(response.usage),
        time=response.latency_s,
        metadata=_response_notes(response),
    )


def assistant(response: ModelResponse, model: str) -> ChatMessageAssistant:
    """A response as the assistant message it adds to the conversation."""
    return ChatMessageAssistant(
        content=response.text or "",
        tool_calls=tool_calls(response.tool_calls),
        model=response.model or model,
        source="generate",
    )


def _response_notes(response: ModelResponse) -> dict[str, Any] | None:
    notes = {
        "cached": response.cached,
        "replayed": response.replayed,
        "schema_error": response.schema_error,
    }
    kept = {k: v for k, v in notes.items() if v}
    return kept or None


def generate_config(request: ModelRequest) -> GenerateConfig:
    """The request's sampling settings as Inspect's generation config."""
    return GenerateConfig(
        temperature=request.temperature,
        top_p=request.top_p,
        max_tokens=request.max_tokens,
        seed=request.seed,
    )


def tool_info(spec: ToolSpec) -> ToolInfo:
    """An offered tool; parameters Inspect's schema type cannot hold are left empty (the
    request's JSON schema is kept whole in the model event's metadata)."""
    try:
        params = ToolParams.model_validate(spec.parameters)
    except ValidationError:
        params = ToolParams()
    return ToolInfo(name=spec.name, description=spec.description, parameters=params)


def tool_choice(choice: str) -> Any:
    """Our tool choice (``auto``, ``required``, ``none``, a tool's name) as Inspect's."""
    if choice in ("auto", "none"):
        return choice
    if choice == "required":
        return "any"
    return ToolFunction(name=choice)
