"""Ordinary planning: the planner's system prompt and the parsing of its replies into blocks.

The planner sees the environment's tools as ready Python functions with one short worked example
(the local model needs it: without the example it tends to redefine the tools). It emits code
through a native ``execute_python`` tool (several calls in one reply are queued blocks) or, for
models without tool calling, fenced code (paper sections 4 and A.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from controlscope.core import (
    Message,
    ModelResponse,
    PlannerFormat,
    ProgramExtraction,
    ToolSchema,
    ToolSpec,
    foreign_fence,
    program_fence,
    python_signature,
)

EXECUTE_PYTHON = "execute_python"

EXECUTE_PYTHON_SPEC = ToolSpec(
    name=EXECUTE_PYTHON,
    description=(
        "Run one Python code block in the persistent agent session. The environment's tools are "
        "already defined there as Python functions. Returns the block's printed output."
    ),
    parameters={
        "type": "object",
        "properties": {"code": {"type": "string", "description": "Python source of the block"}},
        "required": ["code"],
    },
)


def render_signature(tool: ToolSchema) -> str:
    """Render one tool as a Python ``def`` line with a one-paragraph docstring.

    The signature is the proxy's own (:func:`controlscope.core.python_signature`: required
    parameters first; an optional one defaults to its schema default, else to ``None``, which
    leaves it out of the call); the description is cut to 300 characters.
    """
    doc = " ".join(tool.description.split()).replace('"""', "'''")
    if len(doc) > 300:
        doc = doc[:297] + "..."
    body = f'"""{doc}"""' if doc else "..."
    return f"def {python_signature(tool)} -> str:\n    {body}"


def render_signatures(tools: Sequence[ToolSchema]) -> str:
    """Render tools as the planner's system prompt shows them: one ``def`` line with its
    docstring per tool (:func:`render_signature`), separated by blank lines. Another agent
    framework shows its model the same API with it.

    Args:
        tools: the tools' schemas.

    Returns:
        The rendered functions.
    """
    return "\n\n".join(render_signature(t) for t in tools)


FILES_NOTE = (
    "The task's files are reachable ONLY through these functions: open(), os, pathlib and "
    "subprocess cannot see them."
)
"""What the system prompt says about how the tools reach a filesystem environment (the
default; an environment gives its own, ``Environment.planner_note``)."""

FILES_PATHS = " Use absolute paths inside the allowed directory."


def render_system_prompt(
    tools: Sequence[ToolSchema],
    *,
    fmt: PlannerFormat,
    python_allowed: bool = True,
    example: str = "",
    note: str | None = None,
) -> str:
    """The planner's system prompt: the tools as Python functions and one worked example.

    Args:
        tools: the environment's tools, from its server.
        fmt: ``tools`` when code is sent through the native ``execute_python`` tool, ``fenced``
            when it is written as one fenced ```python block per reply.
        python_allowed: False for tasks whose instruction restricts Python; the prompt then asks
            for one tool call per block with no other computation (paper appendix B).
        example: the environment's worked example (``Environment.planner_example``), shown
            after the functions; empty for none.
        note: how the tools reach the environment (``Environment.planner_note``); None: the
            filesystem's (:data:`FILES_NOTE`, with absolute paths in the allowed directory).
    """
    functions = render_signatures(tools)
    how = (
        "To act, call the tool `execute_python` with the code of one block."
        if fmt == "tools"
        else (
            "To act, write exactly one ```python fenced code block; it is run and you see its "
            "output."
        )
    )
    restriction = (
        ""
        if python_allowed
        else (
            "\nThis task restricts Python: each block may only call the functions above with "
            "literal arguments and print their results; do not compute with Python.\n"
        )
    )
    return (
        "You solve tasks by writing Python code that calls the functions below. They already "
        f"exist in the Python session: call them directly, never define, import or mock them. "
        f"{note if note is not None else FILES_NOTE} Each function returns the tool's text "
        "result and raises ToolError when the tool fails. Variables persist between blocks. Use "
        f"print() to see values.{FILES_PATHS if note is None else ''}\n"
        f"{how}\nWhen the task is complete, answer briefly without code.\n"
        f"{restriction}\nFunctions:\n\n{functions}\n{example}"
    )


@dataclass(frozen=True)
class PlannedBlock:
    """One block the planner queued in a reply.

    Attributes:
        code: the block's source.
        tool_call_id: the ``execute_python`` call id (None for fenced code).
    """

    code: str
    tool_call_id: str | None

    @property
    def extracted(self) -> ProgramExtraction:
        """How the block was read from the reply: ``tool_call`` (a native ``execute_python``
        call) or ``text`` (fenced code in the reply's text)."""
        return "text" if self.tool_call_id is None else "tool_call"


@dataclass(frozen=True)
class ParsedReply:
    """A planner reply split into queued blocks, malformed calls, and a final answer.

    Attributes:
        blocks: queued blocks, in reply order.
        malformed: ``(tool_call_id, message)`` for calls that cannot run (wrong tool, bad JSON,
            missing ``code``); each gets a tool message with the message.
        final: True when the reply has no code at all (the planner's final answer).
        text: the assistant text kept in the planner's history: for fenced code, the text up to
            the end of the block that runs (small models go on to imagine its output and write
            more turns; only that block runs).
        notice: for a reply whose only code is in a language that does not run here (a
            ``bash`` block...), what to tell the planner; the reply is then not final.
    """

    blocks: tuple[PlannedBlock, ...]
    malformed: tuple[tuple[str, str], ...]
    final: bool
    text: str | None = None
    notice: str | None = None


def parse_reply(response: ModelResponse, *, fmt: PlannerFormat) -> ParsedReply:
    """Split a planner response into blocks.

    Native ``execute_python`` calls are the reply's queued blocks, in order. When the response has
    no tool calls (in either format: small models often answer in text), its fenced code is read
    with CommonMark's line-based rules and one block is the program
    (:func:`controlscope.core.program_fence`):

    - only the reply's own turn counts: a line ``Output:``, ``Assistant:``, ``User:`` or
      ``Execution results:`` after a block starts an imagined transcript, which is dropped;
    - blocks labelled ``python``, ``py``, ``python3`` or ``py3`` (any case) are candidates, or
      unlabelled blocks when there is no such label;
    - the LAST non-blank candidate runs. The prompt asks for one block; when a reply has several,
      the earlier ones are snippets written while reasoning ("I will call ``read_file(...)``")
      and the program comes last, while an imagined next turn is cut by the first rule.

    Text after the block that runs is dropped from the history. A reply with no runnable block
    but with code in another language (``bash``, ``js``: anything not Python nor a data label
    such as ``json``, ``csv``, ``text``) is not a final answer: ``notice`` tells the planner to
    write Python.
    """
    blocks: list[PlannedBlock] = []
    malformed: list[tuple[str, str]] = []
    for call in response.tool_calls:
        if call.name != EXECUTE_PYTHON:
            malformed.append((call.id, f"unknown tool {call.name!r}: use {EXECUTE_PYTHON}"))
            continue
        code = call.parsed.get("code") if call.parsed is not None else None
        if not isinstance(code, str):
            why = call.error or "the arguments must be a JSON object with a string field 'code'"
            malformed.append((call.id, f"malformed {EXECUTE_PYTHON} call: {why}"))
            continue
        blocks.append(PlannedBlock(code=code, tool_call_id=call.id))
    if response.tool_calls or not response.text:
        final = not blocks and not malformed
        return ParsedReply(tuple(blocks), tuple(malformed), final=final, text=response.text)
    text = response.text
    program = program_fence(text)
    if program is not None:
        block = PlannedBlock(code=program.body.strip("\n"), tool_call_id=None)
        return ParsedReply((block,), (), final=False, text=text[: program.end])
    foreign = foreign_fence(text)
    if foreign is not None:
        notice = (
            f"Only Python runs here: your reply holds a ```{foreign.language} block and no "
            "```python block. Write the code as one ```python block, or, if the task is "
            "complete, answer briefly without code."
        )
        return ParsedReply((), (), final=False, text=text, notice=notice)
    return ParsedReply((), (), final=True, text=text)


def assistant_message(response: ModelResponse, parsed: ParsedReply | None = None) -> Message:
    """The assistant message to append to the planner's history for ``response``."""
    text = parsed.text if parsed is not None else response.text
    return Message(role="assistant", content=text, tool_calls=response.tool_calls)


def tool_message(tool_call_id: str, content: str) -> Message:
    """A tool message answering one ``execute_python`` call."""
    return Message(role="tool", tool_call_id=tool_call_id, content=content)


def first_user_message(
    instruction: str, roots: Sequence[str], *, directories: bool = True
) -> Message:
    """The task message: the instruction and the directory the tools may use (with
    ``directories`` False, for an environment without files, the instruction alone)."""
    if not directories:
        return Message(role="user", content=instruction)
    where = ", ".join(roots) if roots else "(see list_allowed_directories)"
    hint = ""
    if len(roots) == 1:
        hint = (
            f"\nEvery path the task names is inside {roots[0]}: `notes/a.txt` in the task means "
            f"{roots[0].rstrip('/')}/notes/a.txt."
        )
    return Message(role="user", content=f"{instruction}\n\nAllowed directory: {where}{hint}")


def results_message(receipts: Sequence[str]) -> Message:
    """The user message that returns fenced blocks' results to the planner."""
    return Message(
        role="user",
        content="Execution results:\n"
        + "\n".join(receipts)
        + "\n\nIf the task is not complete yet, write the next block; if it is, answer briefly "
        "without code.",
    )
