"""A scripted model: answers given in advance, in order (a test double users also want).

Example:
    >>> from controlscope.core import Message
    >>> model = ScriptedModel(["hello", ScriptedModel.tool_call("execute_python", {"code": "1"})])
    >>> request = ModelRequest(messages=(Message(role="user", content="hi"),))
    >>> model.complete(request).text
    'hello'
    >>> model.complete(request).tool_calls[0].parsed
    {'code': '1'}
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from controlscope.core import (
    MAX_SCRIPT_BYTES,
    ModelRequest,
    ModelResponse,
    ProviderError,
    read_json,
    response_size_problem,
)
from controlscope.models._chat_format import parse_tool_call

__all__ = ["ScriptExhausted", "ScriptItem", "ScriptedModel"]

ScriptItem = ModelResponse | str | Callable[[ModelRequest], ModelResponse]
"""One scripted answer: a response, a text answer, or a function of the request."""


class ScriptExhausted(ProviderError):
    """The scripted model was asked more often than it has answers: a provider error (kind
    ``other``), so a run records it as any model's failure (a planner's ends the run, a
    reviewer's is a recorded ``provider_error`` fallback).

    Attributes:
        given: how many answers the script holds.
    """

    def __init__(self, given: int, request: ModelRequest) -> None:
        last = request.messages[-1] if request.messages else None
        tail = ""
        if last is not None and last.content:
            tail = f"; the unanswered request ends with a {last.role} message {last.content[:80]!r}"
        super().__init__(
            f"scripted model exhausted: it was given {given} answer(s) and was asked for "
            f"answer {given + 1}{tail}",
            kind="other",
        )
        self.given = given


class ScriptedModel:
    """Answers requests from a script, in order, and records what it was asked.

    Args:
        responses: the answers; a ``str`` is a text answer, a callable is called with the request
            and must return a :class:`ModelResponse`.
        model_id: the id reported (part of cache keys).
        by: ``request``: the answers in the order requests come; ``turn``: the answer whose
            index is the number of assistant messages the request holds (its turn in the
            conversation), so the same conversation always gets the same answer, whatever
            was asked before or answered from a cache (a planner shared by a panel's runs).

    Attributes:
        requests: the requests received, in order (including the one that exhausted the script).

    Raises:
        TypeError: when an answer is none of the accepted kinds.
    """

    def __init__(
        self,
        responses: Sequence[ScriptItem],
        *,
        model_id: str = "scripted",
        by: Literal["request", "turn"] = "request",
    ) -> None:
        for index, item in enumerate(responses):
            if not isinstance(item, ModelResponse | str) and not callable(item):
                raise TypeError(
                    f"script answer {index} is a {type(item).__name__}; expected a "
                    "ModelResponse, a str or a callable"
                )
        self._script: tuple[ScriptItem, ...] = tuple(responses)
        self._model_id = model_id
        self._by = by
        self.requests: list[ModelRequest] = []
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        """The id given at construction."""
        return self._model_id

    @property
    def remaining(self) -> int:
        """Answers not used yet."""
        return len(self._script) - min(len(self.requests), len(self._script))

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Return the next scripted answer.

        Raises:
            ScriptExhausted: when every answer has been used; it names how many were given.
            ProviderError: ``response_too_large`` for an answer larger than
                :data:`~controlscope.core.MAX_RESPONSE_BYTES` (as a live model's would be).
            TypeError: when a callable answer returns something other than a ModelResponse.
        """
        with self._lock:
            index = len(self.requests)
            self.requests.append(request)
        if self._by == "turn":
            index = sum(1 for m in request.messages if m.role == "assistant")
        if index >= len(self._script):
            raise ScriptExhausted(len(self._script), request)
        item = self._script[index]
        if isinstance(item, ModelResponse):
            response = item
        elif isinstance(item, str):
            response = ModelResponse(text=item, model=self._model_id)
        else:
            response = item(request)
            if not isinstance(response, ModelResponse):
                raise TypeError(
                    f"script answer {index} (a callable) returned {type(response).__name__}, "
                    "not a ModelResponse"
                )
        problem = response_size_problem(response)
        if problem is not None:
            raise ProviderError(f"{problem} (script answer {index})", kind="response_too_large")
        if not response.model:
            response = response.model_copy(update={"model": self._model_id})
        return response

    @staticmethod
    def text(text: str) -> ModelResponse:
        """Return a plain text answer."""
        return ModelResponse(text=text, finish_reason="stop")

    @staticmethod
    def tool_call(
        name: str,
        arguments: Mapping[str, Any] | str,
        *,
        call_id: str | None = None,
        text: str | None = None,
    ) -> ModelResponse:
        """Return an answer holding one tool call.

        Args:
            name: the tool name.
            arguments: the arguments, as a mapping (encoded as JSON) or as raw text (kept as
                given; text that is not a JSON object yields ``parsed=None`` and an ``error``,
                like a malformed call from a real model).
            call_id: the call id; when omitted, derived from ``name`` and ``arguments`` (the same
                call always gets the same id, so cache keys and replays stay stable).
            text: assistant text sent along with the call.
        """
        raw = arguments if isinstance(arguments, str) else json.dumps(dict(arguments))
        call = parse_tool_call(call_id, name, raw)
        return ModelResponse(text=text, tool_calls=(call,), finish_reason="tool_calls")

    @classmethod
    def from_file(cls, path: str | Path) -> ScriptedModel:
        """Load a script from a JSON file: a list whose items are strings (text answers) or
        :class:`ModelResponse` objects in JSON; or ``{"by": "turn", "answers": [...]}`` for
        answers by conversation turn (see the class).

        The file is read as a bounded regular file (:func:`controlscope.core.read_json`, at
        most :data:`~controlscope.core.MAX_SCRIPT_BYTES`).

        Raises:
            FileNotFoundError: nothing at ``path``.
            ValueError: when the file is not such a list; the message names the file and item
                (:class:`~controlscope.core.InputFileError`: not a regular file, too long, not
                UTF-8, not JSON, nested too deeply, or it cannot be opened).
        """
        source = Path(path)
        if not os.path.lexists(source):
            raise FileNotFoundError(f"no scripted model file {source}")
        data = read_json(source, MAX_SCRIPT_BYTES)
        by: Literal["request", "turn"] = "request"
        if isinstance(data, dict) and set(data) == {"by", "answers"} and data["by"] == "turn":
            by, data = "turn", data["answers"]
        if not isinstance(data, list):
            raise ValueError(
                f"{source}: expected a JSON list of answers, got {type(data).__name__}"
            )
        items: list[ScriptItem] = []
        for index, entry in enumerate(data):
            if isinstance(entry, str):
                items.append(entry)
                continue
            try:
                items.append(ModelResponse.model_validate(entry))
            except ValidationError as exc:  # one line: its first problem, where it is
                first = exc.errors()[0]
                where = ".".join(str(p) for p in first["loc"])
                raise ValueError(
                    f"{source}: answer {index} is not a model response: "
                    f"{where + ': ' if where else ''}{first['msg']}"
                ) from None
        return cls(items, model_id=f"scripted:{source.name}", by=by)
