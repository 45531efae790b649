"""Views of the public state: what one review request shows (paper appendix A.3).

- ``code_only`` (CODE_ONLY): "the public history present when the current assistant reply was
  generated, its code and queued calls, API documentation, and the pending method and source
  line".
- ``with_feedback`` (WITH_FEEDBACK): adds "current-reply tool messages, current-block receipts and
  printed output, the pending call's realized arguments, and public runtime variables".

Both views also list the earlier review decisions of the trajectory (A.1: "the reviewer also
sees ... earlier review decisions"; in A.3's single-opportunity comparison there are none) and
carry the same operation schema. :data:`VIEW_SECTIONS` names each view's sections; nothing else
is shown (no block progress, no call counts).

By default a view shows the complete public state ``h`` (paper section 3.1). With
:class:`~controlscope.core.ViewLimits` it is bounded for small contexts, every cut marked.

Untrusted text. Everything the agent or the environment controls (messages, code, printed
output, tool results, variables, tool documentation) is *quoted*. Text that is not code has
each of its lines start with ``| `` (:func:`quote`; every kind of line break splits a line), so
it cannot start a line of its own and cannot imitate a section header (``## ...``) or the
pending call. The current reply's code is quoted as a fenced block (:func:`quote_code`) whose
fence is longer than any run of backticks in it, so no line of it can end the block: a model
copies a per-line prefix into the code it writes (a small model's replacement then does not
compile), and it writes code the way it reads it. Its labels (``Block 1 of 2, running; the
pending call is its line 3:``) stand outside the fence, and no line inside is marked. The
unquoted lines holding agent values are the pending call and the block's constants (when
``patch_block_data`` is granted): JSON objects the controller builds, every line break escaped
(:func:`json_line`), so nothing in them can start a line either. The system prompt says that
quoted lines and fenced blocks are untrusted data.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from controlscope.core import (
    VIEWS,
    DecisionMode,
    Message,
    OperationSet,
    View,
    ViewLimits,
    fence,
    operation_spec,
)
from controlscope.review._prompts import describe_tool, system_prompt
from controlscope.review._state import PublicState

QUOTE_PREFIX = "|"
"""How every quoted line starts (followed by a space unless the line is empty)."""

SECTION_API = "API DOCUMENTATION"
SECTION_HISTORY = "HISTORY BEFORE THE CURRENT REPLY"
SECTION_REPLY = "CURRENT REPLY"
SECTION_QUEUED = "QUEUED BLOCKS"
SECTION_TOOL_MESSAGES = "TOOL MESSAGES OF THE CURRENT REPLY"
SECTION_BLOCK_CALLS = "CURRENT BLOCK: CALLS AND RESULTS"
SECTION_OUTPUT = "PRINTED OUTPUT"
SECTION_VARIABLES = "VARIABLES"
SECTION_DECISIONS = "EARLIER REVIEW DECISIONS"
SECTION_BLOCK_DATA = "BLOCK DATA"
SECTION_PENDING = "PENDING CALL"

VIEW_SECTIONS: dict[View, tuple[str, ...]] = {
    "code_only": (
        SECTION_API,
        SECTION_HISTORY,
        SECTION_REPLY,
        SECTION_QUEUED,
        SECTION_DECISIONS,
        SECTION_BLOCK_DATA,
        SECTION_PENDING,
    ),
    "with_feedback": (
        SECTION_API,
        SECTION_HISTORY,
        SECTION_REPLY,
        SECTION_QUEUED,
        SECTION_TOOL_MESSAGES,
        SECTION_BLOCK_CALLS,
        SECTION_OUTPUT,
        SECTION_VARIABLES,
        SECTION_DECISIONS,
        SECTION_BLOCK_DATA,
        SECTION_PENDING,
    ),
}
"""Each view's sections in order (``## TITLE`` lines); an empty section is left out. The pending
call shows the tool, the source line and its place in both views, and its arguments only in
``with_feedback`` (A.3: "the pending call's realized arguments"). ``BLOCK DATA`` (ours: the
paper's views predate the check) holds the granted kinds' notes on the pending call
(:meth:`PublicState.operation_notes`): when ``patch_block_data`` is granted, that it cannot
edit this call's data or leaves its arguments as they are (controller-derived text)."""

# Characters str.splitlines() breaks on, other than "\n"; JSON output escapes them.
_LINE_BREAKS = ("\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")


def clip(text: str, limit: int, *, keep: Literal["head", "tail", "both"] = "both") -> str:
    """Cut ``text`` to about ``limit`` characters; the cut is marked ``[... N chars cut ...]``."""
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    marker = f"[... {cut} chars cut ...]"
    if keep == "head":
        return text[:limit] + marker
    if keep == "tail":
        return marker + text[-limit:]
    half = limit // 2
    return text[:half] + marker + text[len(text) - (limit - half) :]


def quote(text: str) -> str:
    """``text`` as quoted data: each line prefixed with ``| `` (an empty line with ``|``).

    Lines are split wherever :meth:`str.splitlines` splits (``\\r``, form feeds, U+2028...), so
    no part of ``text`` can begin a line of the view.
    """
    lines = text.splitlines() or [""]
    return "\n".join(f"{QUOTE_PREFIX} {line}" if line else QUOTE_PREFIX for line in lines)


def json_line(value: Any) -> str:
    """``value`` as JSON on one line, every line-break character escaped."""
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:
        text = json.dumps(repr(value), ensure_ascii=False)
    for char in _LINE_BREAKS:
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text


def render_view(
    state: PublicState,
    view: View,
    granted: OperationSet,
    *,
    mode: DecisionMode = "tools",
    limits: ViewLimits | None = None,
) -> list[Message]:
    """Render one review request's messages: a system prompt and one user message.

    A pure function of its arguments.

    Args:
        state: the public state at the boundary.
        view: ``code_only`` or ``with_feedback`` (appendix A.3).
        granted: the granted operation set (the operations described).
        mode: the decision format (``tools`` or ``json``).
        limits: the bounds of a bounded view; None (the default) shows the complete state.

    Returns:
        ``[system, user]``.

    Raises:
        ValueError: an unknown view.
    """
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; expected one of {', '.join(VIEWS)}")
    system = system_prompt(granted, mode=mode, replace_boundary=state.replace_boundary)
    bodies = {
        SECTION_API: _api(state, limits),
        SECTION_HISTORY: _history(state, limits),
        SECTION_REPLY: _reply(state, limits),
        SECTION_QUEUED: _queued(state),
        SECTION_TOOL_MESSAGES: _reply_messages(state, limits),
        SECTION_BLOCK_CALLS: _block_calls(state, limits),
        SECTION_OUTPUT: _output(state, limits),
        SECTION_VARIABLES: _variables(state, limits),
        SECTION_DECISIONS: _decisions(state, limits),
        SECTION_BLOCK_DATA: state.operation_notes(granted),
        SECTION_PENDING: _pending(state, view),
    }
    sections = [f"## {title}\n{bodies[title]}" for title in VIEW_SECTIONS[view] if bodies[title]]
    user = "\n\n".join(sections)
    return [Message(role="system", content=system), Message(role="user", content=user)]


def _api(state: PublicState, lim: ViewLimits | None) -> str:
    if not state.tools:
        return ""
    chars = lim.description_chars if lim is not None else None
    return quote("\n".join(describe_tool(t, description_chars=chars) for t in state.tools))


def _history(state: PublicState, lim: ViewLimits | None) -> str:
    rendered = [_message(m, lim) for m in state.history if m.role != "system"]
    if lim is None or not rendered:
        return "\n".join(rendered)
    # Bounded: the first message (the task) and the newest that fit.
    kept: list[str] = []
    used = len(rendered[0])
    for text in reversed(rendered[1:]):
        if used + len(text) > lim.history_chars:
            break
        kept.append(text)
        used += len(text)
    kept.reverse()
    omitted = len(rendered) - 1 - len(kept)
    gap = [f"[{omitted} earlier messages omitted]"] if omitted else []
    return "\n".join([rendered[0], *gap, *kept])


def _message(message: Message, lim: ViewLimits | None) -> str:
    parts = [message.content] if message.content else []
    for call in message.tool_calls:
        code = call.parsed.get("code") if call.parsed else None
        parts.append(f"<{call.name}>\n{code}" if isinstance(code, str) else call.arguments)
    body = "\n".join(parts)
    if lim is not None:
        body = clip(body, lim.message_chars)
    return f"[{message.role}]\n{quote(body)}"


def quote_code(code: str) -> str:
    """``code`` as quoted data the way a model writes code: one fenced block (:func:`fence`)
    whose fence no line of the code can close, lines split as :func:`quote` splits them, no
    prefix on any line (a model copies a prefix into the code it writes)."""
    return fence("\n".join(code.splitlines()))


def _code(code: str, lim: ViewLimits | None) -> str:
    """A block's code, quoted; in a bounded view longer code keeps whole lines from its head
    and its tail, in two fences with the cut marked between them (never inside the code, where
    a model would copy the mark)."""
    lines = code.rstrip().splitlines()
    if lim is None or len("\n".join(lines)) <= lim.code_chars:
        return quote_code("\n".join(lines))
    head: list[str] = []
    tail: list[str] = []
    budget = lim.code_chars // 2
    for line in lines:
        if len(line) + 1 > budget:
            break
        head.append(line)
        budget -= len(line) + 1
    budget += lim.code_chars - lim.code_chars // 2
    for line in reversed(lines[len(head) :]):
        if len(line) + 1 > budget:
            break
        tail.insert(0, line)
        budget -= len(line) + 1
    cut = len(lines) - len(head) - len(tail)
    return (
        f"{quote_code(chr(10).join(head))}\n[... {cut} lines of this block cut ...]\n"
        f"{quote_code(chr(10).join(tail))}"
    )


def _reply(state: PublicState, lim: ViewLimits | None) -> str:
    n = len(state.reply_blocks)
    out = []
    for i, code in enumerate(state.reply_blocks):
        label = f"Block {i + 1} of {n}"
        if i == state.running_block:
            label += f", running; the pending call is its line {state.boundary.line}"
        elif i > (state.running_block if state.running_block is not None else n):
            label += ", queued"
        out.append(f"{label}:\n{_code(code, lim)}")
    if state.running_block is None:
        what = "the rest of the reply" if state.replace_boundary == "reply" else "its block"
        out.append(
            f"Replacement in place of {what}, running; the pending call is its line "
            f"{state.boundary.line}:\n{_code(state.boundary.code, lim)}"
        )
    return "\n".join(out)


def _queued(state: PublicState) -> str:
    queued = len(state.queued_blocks)
    if not queued:
        return ""
    n = len(state.reply_blocks)
    first = n - queued + 1
    which = f"block {n}" if queued == 1 else f"blocks {first} to {n}"
    return f"{which} of the current reply (queued, not started)"


def _reply_messages(state: PublicState, lim: ViewLimits | None) -> str:
    return "\n".join(
        f"[tool message]\n{quote(clip(m, lim.observation_chars) if lim is not None else m)}"
        for m in state.reply_messages
    )


def _block_calls(state: PublicState, lim: ViewLimits | None) -> str:
    calls = state.block_calls if lim is None else state.block_calls[-lim.block_calls :]
    omitted = len(state.block_calls) - len(calls)
    lines = [f"[{omitted} earlier calls omitted]"] if omitted else []
    for call in calls:
        args = json_line(call.arguments)
        result = call.result.text
        if lim is not None:
            args, result = clip(args, lim.value_chars), clip(result, lim.observation_chars)
        flag = " (error)" if call.result.is_error else ""
        lines.append(f"[call {call.call_index}{flag}]\n{quote(f'{call.tool}({args}) ->')}")
        lines.append(quote(result))
    return "\n".join(lines)


def _output(state: PublicState, lim: ViewLimits | None) -> str:
    text = state.boundary.output
    if lim is not None:
        text = clip(text, lim.output_chars, keep="tail")
    return quote(text) if text else ""


def _variables(state: PublicState, lim: ViewLimits | None) -> str:
    b = state.boundary
    items = [(k, v) for k, v in b.module_vars.items() if not k.startswith("__")]
    items += [(f"{k} (local)", v) for k, v in b.local_vars.items()]
    lines: list[str] = []
    used = 0
    for name, value in items:
        shown = json_line(value)
        line = f"{name} = {clip(shown, lim.value_chars) if lim is not None else shown}"
        if lim is not None and used + len(line) > lim.variables_chars:
            lines.append(f"[{len(items) - len(lines)} more variables omitted]")
            break
        lines.append(line)
        used += len(line)
    return quote("\n".join(lines)) if lines else ""


def _decisions(state: PublicState, lim: ViewLimits | None) -> str:
    shown = state.decisions if lim is None else state.decisions[-lim.decisions :]
    lines = []
    for d in shown:
        op = d.operation
        entry: dict[str, Any] = {"call": d.call_index, "tool": d.tool, "operation": op.kind}
        entry.update(operation_spec(op.kind).shown(op))
        if d.fallback:
            entry["fallback"] = d.fallback
        line = json_line(entry)
        lines.append(clip(line, lim.message_chars) if lim is not None else line)
    return quote("\n".join(lines)) if lines else ""


def _pending(state: PublicState, view: View) -> str:
    b = state.boundary
    site = b.call_site
    where = "module level" if site.at_module_level else f"in {site.function or site.class_name}"
    pending: dict[str, Any] = {
        "tool": b.tool,
        "block_line": b.line,
        "source_line": state.source_line,
        "where": where,
    }
    if view == "with_feedback":
        pending["arguments"] = b.arguments
    return json_line(pending)
