"""An OpenAI-compatible answer read as it streams, its chunks assembled into one completion.

A streamed request (``"stream": true``, with ``stream_options.include_usage`` so that a server
that can sends its token counts last) is answered with server-sent events; the ``openai`` SDK
decodes them (``openai.AsyncStream``) and :class:`Assembly` puts the chunks together: the
text's pieces in order, the tool calls by their ``index`` (an id and a name sent whole, or
repeated in every chunk as ``llama_cpp.server`` does, are taken once; the arguments' pieces are
joined), the finish reason, the usage. Every piece is counted as it arrives (about one token
each), so a slow answer is seen progressing and a call cut off by its deadline can say how much
had come. Closing the connection is how a client abandons an answer: a server that checks for a
disconnect between tokens (``llama_cpp.server`` does, for streamed answers only) then stops
computing it.

A server that answers a streamed request whole (a JSON body) is read as it came; the answer is
bounded either way (:mod:`controlscope.models._bounded_http` wraps every body).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import openai
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

__all__ = [
    "STREAM_FIELDS",
    "Assembly",
    "EmptyStream",
    "MalformedAnswer",
    "StreamCut",
    "completion_from_json",
    "read_answer",
]

STREAM_FIELDS: dict[str, Any] = {"stream": True, "stream_options": {"include_usage": True}}
"""The body fields that ask for a streamed answer with its usage."""


class MalformedAnswer(Exception):
    """An answer (a chunk or a whole body) that is not a chat completion."""


class StreamCut(Exception):
    """A stream that ended before its answer said how it finished (no ``finish_reason``): a
    server that cut it short, e.g. ``llama_cpp.server`` when another request arrives and
    ``--interrupt_requests`` is on."""


class EmptyStream(StreamCut):
    """A stream that ended before its first chunk: the server failed before answering, and a
    stream has no way to say why (``llama_cpp.server`` ends it empty when the prompt is over its
    context or the schema cannot be converted; answered whole, the same request gets an error
    answer that says so)."""


@dataclass
class _Call:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


def _joined(whole: str, piece: str | None) -> str:
    """An id or a name with its next piece: a piece equal to what there is already is the
    same value repeated (``llama_cpp.server`` repeats both in every chunk), not more of it."""
    if not piece or piece == whole:
        return whole
    return whole + piece


@dataclass
class Assembly:
    """The chunks of one streamed answer put together (choice 0; others are ignored).

    Attributes:
        pieces: text and tool-call pieces received so far (about one token each).
        streamed: True once the answer is known to come as a stream.
        chunks: chunks received so far.
        prompt_tokens: the prompt's tokens as a server without usage counted them in its
            ``timings`` (llama.cpp's ``prompt_n``); None when it sent none.
        predicted_tokens: the tokens generated as those ``timings`` count them.
    """

    pieces: int = 0
    streamed: bool = False
    chunks: int = 0
    prompt_tokens: int | None = None
    predicted_tokens: int | None = None
    _text: list[str] = field(default_factory=list)
    _calls: dict[int, _Call] = field(default_factory=dict)
    _finish: str | None = None
    _usage: Any = None
    _model: str = ""
    _id: str = ""

    def add(self, chunk: ChatCompletionChunk) -> None:
        """Take in one chunk.

        Raises:
            MalformedAnswer: the chunk is not a chat-completion chunk.
        """
        self.chunks += 1
        try:
            self._id = self._id or chunk.id or ""
            self._model = self._model or chunk.model or ""
            if chunk.usage is not None:
                self._usage = chunk.usage.to_dict()
            self._timings(getattr(chunk, "model_extra", None) or {})
            for choice in chunk.choices or ():
                if choice.index == 0:
                    self._add_delta(choice.delta)
                    self._finish = choice.finish_reason or self._finish
        except (AttributeError, TypeError, ValueError) as exc:
            raise MalformedAnswer(f"a streamed chunk is not a completion chunk: {exc}") from exc

    def _timings(self, extra: dict[str, Any]) -> None:
        """Take the token counts of a server that sends no usage but its own ``timings``
        (llama.cpp's server: ``prompt_n`` prompt tokens evaluated, ``predicted_n`` generated),
        as the usage; a usage the server sends wins."""
        timings = extra.get("timings")
        if not isinstance(timings, dict) or self._usage is not None:
            return
        prompt, predicted = timings.get("prompt_n"), timings.get("predicted_n")
        if isinstance(prompt, int) and not isinstance(prompt, bool) and prompt >= 0:
            self.prompt_tokens = prompt
        if isinstance(predicted, int) and not isinstance(predicted, bool) and predicted >= 0:
            self.predicted_tokens = predicted

    def usage(self) -> dict[str, int] | None:
        """The answer's token counts: the usage the server sent (``include_usage``), else its
        ``timings``, else the pieces counted (output tokens only); None before any piece.
        """
        if self._usage is not None:
            return dict(self._usage)
        if self.prompt_tokens is None and self.predicted_tokens is None and not self.pieces:
            return None
        output = self.predicted_tokens if self.predicted_tokens is not None else self.pieces
        return {
            "prompt_tokens": self.prompt_tokens or 0,
            "completion_tokens": output,
            "total_tokens": (self.prompt_tokens or 0) + output,
        }

    def _add_delta(self, delta: Any) -> None:
        if delta.content:
            self._text.append(delta.content)
            self.pieces += 1
        for piece in delta.tool_calls or ():
            call = self._calls.setdefault(int(piece.index), _Call())
            call.id = _joined(call.id, piece.id)
            function = piece.function
            if function is not None:
                call.name = _joined(call.name, function.name)
                if function.arguments:
                    call.arguments.append(function.arguments)
            self.pieces += 1

    def completion(self) -> ChatCompletion:
        """The answer as one completion, as a server would have sent it whole.

        Raises:
            EmptyStream: the stream held no chunk.
            StreamCut: the stream said nothing of how the answer finished.
        """
        from openai.types.chat import ChatCompletion

        if self.chunks == 0:
            raise EmptyStream("the stream ended before its first chunk")
        if self._finish is None:
            raise StreamCut(
                f"the stream ended after {self.pieces} piece(s) without a finish reason: the "
                "server cut the answer short"
            )
        calls = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": "".join(call.arguments)},
            }
            for _, call in sorted(self._calls.items())
        ]
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self._text) if self._text else None,
        }
        if calls:
            message["tool_calls"] = calls
        return ChatCompletion.construct(
            id=self._id,
            object="chat.completion",
            created=0,
            model=self._model,
            choices=[{"index": 0, "message": message, "finish_reason": self._finish}],
            usage=self._usage,
        )


def completion_from_json(data: bytes) -> ChatCompletion:
    """A whole chat-completion body, read leniently as the SDK reads one (nested models
    constructed, not validated; what is missing shows when the answer is read).

    Raises:
        MalformedAnswer: the body is not a JSON object (or nests too deeply to parse).
    """
    from openai.types.chat import ChatCompletion

    try:
        value = json.loads(data)
    except ValueError as exc:
        raise MalformedAnswer(f"the answer is not JSON: {exc}") from exc
    except RecursionError:  # nested deeper than the parser's stack
        raise MalformedAnswer("the answer is JSON nested too deeply to read") from None
    if not isinstance(value, dict):
        raise MalformedAnswer(f"the answer is not a JSON object but {type(value).__name__}")
    return ChatCompletion.construct(**value)


async def read_answer(
    client: openai.AsyncOpenAI, body: dict[str, Any], assembly: Assembly
) -> ChatCompletion:
    """Send a streamed request and read its answer, streamed or whole.

    Args:
        client: the SDK client.
        body: the request's body, asking for a stream (:data:`STREAM_FIELDS`).
        assembly: where the chunks go (read it while this runs to see progress).

    Returns:
        The answer as one completion.

    Raises:
        openai.OpenAIError: as for any request (an error answer, a connection that fails,
            an answer that breaks off).
        MalformedAnswer: a chunk or a body that is not a chat completion.
        EmptyStream: a stream that ended before its first chunk.
        StreamCut: a stream that ended without a finish reason.
        ResponseTooLarge: an answer over the bound (streamed or not).
    """
    import openai
    from openai import AsyncStream
    from openai.types.chat import ChatCompletion, ChatCompletionChunk

    stream = await client.post(
        "/chat/completions",
        cast_to=ChatCompletion,
        body=body,
        stream=True,
        stream_cls=AsyncStream[ChatCompletionChunk],
    )
    try:
        kind = stream.response.headers.get("content-type", "").lower()
        if "text/event-stream" not in kind:  # the server answered whole after all
            return completion_from_json(await _whole_body(stream.response))
        assembly.streamed = True
        try:
            async for chunk in stream:
                assembly.add(chunk)
        except ValueError as exc:  # an event whose data is not JSON
            raise MalformedAnswer(f"a streamed event is not JSON: {exc}") from exc
        except RecursionError:  # an event nested deeper than the parser's stack
            raise MalformedAnswer("a streamed event is JSON nested too deeply to read") from None
        except openai.APIConnectionError as exc:
            if assembly.chunks == 0:  # broken off before it began (llama_cpp.server's failures)
                raise EmptyStream(f"the stream broke off before its first chunk: {exc}") from exc
            raise
        return assembly.completion()
    finally:
        await stream.close()


async def _whole_body(response: Any) -> bytes:
    """The body of an answer that came whole; a connection that breaks off in it (shorter
    than its ``Content-Length``, reset) is the SDK's ``APIConnectionError``, as it is when the
    SDK reads a body itself (the HTTP library's own error escaped the endpoint's errors)."""
    import openai

    library = sys.modules[type(response).__module__.partition(".")[0]]
    try:
        return bytes(await response.aread())
    except library.TransportError as exc:
        raise openai.APIConnectionError(
            message=f"the answer broke off: {exc}", request=response.request
        ) from exc
