"""A frozen source program as the planner's first reply.

The source program is the planner's first reply (paper sections 3.2 and 4). With a frozen
source program (``RunSpec.source``, a panel's ``source``) that reply is read from a file instead
of sampled: :class:`FrozenSourcePlanner` answers the first planning request, the one whose
history holds no assistant message yet, with the program, written as the condition's planner
format writes code (a native ``execute_python`` call, or one fenced block), and passes every
later request to the planner, so ordinary planning goes on after the program as after a sampled
one. The request and its answer are recorded like any planning turn; ``run_start`` records the
program's file and SHA-256 (:class:`~controlscope.core.SourceFile`).
"""

from __future__ import annotations

import json
import re

from controlscope.core import (
    ChatModel,
    ModelRequest,
    ModelResponse,
    PlannerFormat,
    SeededModel,
    SourceProgram,
)
from controlscope.models import parse_tool_call
from controlscope.planner import EXECUTE_PYTHON, parse_reply

FROZEN_MODEL_ID = "frozen-source"
"""The ``model`` a frozen first reply carries (no model answered it)."""


def frozen_reply(program: SourceProgram, fmt: PlannerFormat) -> ModelResponse:
    """The planner reply that holds ``program``: one ``execute_python`` call (``tools``) or one
    fenced python block, its fence longer than any run of backticks in the code (``fenced``).

    Raises:
        ValueError: the reply does not read back as exactly the program (a program the
            format cannot carry).
    """
    if fmt == "tools":
        call = parse_tool_call(
            f"frozen-{program.file.sha256[:12]}", EXECUTE_PYTHON, json.dumps({"code": program.code})
        )
        response = ModelResponse(
            tool_calls=(call,), finish_reason="tool_calls", model=FROZEN_MODEL_ID
        )
    else:
        longest = max((len(run) for run in re.findall(r"`+", program.code)), default=0)
        fence = "`" * max(3, longest + 1)
        text = f"{fence}python\n{program.code}\n{fence}"
        response = ModelResponse(text=text, model=FROZEN_MODEL_ID)
    parsed = parse_reply(response, fmt=fmt)
    if [b.code for b in parsed.blocks] != [program.code]:
        raise ValueError(
            f"{program.file.path}: the source program does not read back as one {fmt} planner reply"
        )
    return response


class FrozenSourcePlanner:
    """A planner whose first reply is a frozen source program.

    Args:
        inner: the planner that answers every later request.
        program: the frozen source program.
        fmt: the condition's planner format.

    Raises:
        ValueError: the program cannot be carried by a reply of ``fmt`` (see
            :func:`frozen_reply`).
    """

    def __init__(self, inner: ChatModel, program: SourceProgram, fmt: PlannerFormat) -> None:
        self.inner = inner
        self.program = program
        self.reply = frozen_reply(program, fmt)

    @property
    def model_id(self) -> str:
        """The inner planner's id (later turns are its answers)."""
        return self.inner.model_id

    def sampling_seed(self, request: ModelRequest) -> int | None:
        """The seed the inner planner samples ``request`` with
        (:class:`~controlscope.core.SeededModel`)."""
        inner = self.inner
        return inner.sampling_seed(request) if isinstance(inner, SeededModel) else request.seed

    def complete(self, request: ModelRequest) -> ModelResponse:
        """The frozen program for the first planning request (no assistant message in its
        history yet), the inner planner's answer otherwise.

        Raises:
            ProviderError: from the inner planner.
        """
        if all(message.role != "assistant" for message in request.messages):
            return self.reply
        return self.inner.complete(request)
