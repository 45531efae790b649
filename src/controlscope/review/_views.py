"""Views of the public state: what one review request shows (paper appendix A.3).

- ``code_only`` (CODE_ONLY): "the public history present when the current assistant reply was
  generated, its code and queued calls, API documentation, and the pending method and source
  line".
- ``with_feedback`` (WITH_FEEDBACK): adds "current-reply tool messages, current-block receipts and
  printed output, the pending call's realized arguments, and public runtime variables".

Both views carry the same operation schema and earlier review decisions. Everything is bounded
(:class:`ViewLimits`), and every cut is marked, so a request fits a small model's context.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from controlscope.core import VIEWS, DecisionMode, Message, Scope, View, fence
from controlscope.review._prompts import system_prompt
from controlscope.review._state import PublicState


class ViewLimits(BaseModel):
    """Character bounds of a rendered view (about 4 characters per token).

    Attributes:
        history_chars: all history messages together (newest kept).
        message_chars: one history message.
        code_chars: one block's code.
        queued_chars: all queued blocks together.
        observation_chars: one observation or tool message.
        block_calls: observations shown from the running block (newest kept).
        output_chars: printed output (its end is kept).
        variables_chars: all variables together.
        value_chars: one variable's value.
        decisions: earlier decisions shown (newest kept).
    """

    model_config = ConfigDict(frozen=True)
    history_chars: int = 4000
    message_chars: int = 1200
    code_chars: int = 4000
    queued_chars: int = 2000
    observation_chars: int = 600
    block_calls: int = 6
    output_chars: int = 1000
    variables_chars: int = 1500
    value_chars: int = 200
    decisions: int = 8


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


def render_view(
    state: PublicState,
    view: View,
    scope: Scope = Scope.FULL,
    *,
    mode: DecisionMode = "tools",
    limits: ViewLimits | None = None,
) -> list[Message]:
    """Render one review request's messages: a system prompt and one user message.

    A pure function of its arguments.

    Args:
        state: the public state at the boundary.
        view: ``code_only`` or ``with_feedback`` (appendix A.3).
        scope: the granted scope (the operations described).
        mode: the decision format (``tools`` or ``json``).
        limits: size bounds; defaults to :class:`ViewLimits`.

    Returns:
        ``[system, user]``.

    Raises:
        ValueError: an unknown view.
    """
    if view not in VIEWS:
        raise ValueError(f"unknown view {view!r}; expected one of {', '.join(VIEWS)}")
    lim = limits or ViewLimits()
    system = system_prompt(state.tools, scope, mode=mode, replace_boundary=state.replace_boundary)
    sections = [
        _section("TASK", state.goal),
        _section("HISTORY (before the current reply)", _history(state, lim)),
        _section("CURRENT REPLY", _reply(state, lim)),
    ]
    if view == "with_feedback":
        sections.append(_section("TOOL MESSAGES OF THIS REPLY", _reply_messages(state, lim)))
        sections.append(_section("CALLS MADE BY THE RUNNING BLOCK", _block_calls(state, lim)))
        sections.append(
            _section("PRINTED OUTPUT", clip(state.boundary.output, lim.output_chars, keep="tail"))
        )
        sections.append(_section("VARIABLES", _variables(state, lim)))
    sections.append(_section("EARLIER REVIEW DECISIONS", _decisions(state, lim)))
    sections.append(_section("BLOCK DATA", state.block_data_note(scope)))
    sections.append(_section("PENDING CALL", _pending(state, view)))
    user = "\n\n".join(s for s in sections if s)
    return [Message(role="system", content=system), Message(role="user", content=user)]


def _section(title: str, body: str) -> str:
    return f"## {title}\n{body}" if body.strip() else ""


def _history(state: PublicState, lim: ViewLimits) -> str:
    rendered = [_message(m, lim) for m in state.history if m.role != "system"]
    kept: list[str] = []
    used = 0
    for text in reversed(rendered):
        if used + len(text) > lim.history_chars and kept:
            break
        kept.append(text)
        used += len(text)
    kept.reverse()
    omitted = len(rendered) - len(kept)
    head = [f"[... {omitted} earlier messages omitted ...]"] if omitted else []
    return "\n".join(head + kept)


def _message(message: Message, lim: ViewLimits) -> str:
    parts = [message.content] if message.content else []
    for call in message.tool_calls:
        code = call.parsed.get("code") if call.parsed else None
        parts.append(f"<{call.name}>\n{code}" if isinstance(code, str) else call.arguments)
    body = clip("\n".join(parts), lim.message_chars)
    return f"[{message.role}] {body}"


def _reply(state: PublicState, lim: ViewLimits) -> str:
    out = []
    n = len(state.reply_blocks)
    for i, code in enumerate(state.reply_blocks):
        if i == state.running_block:
            status = "RUNNING"
        elif state.running_block is not None and i > state.running_block:
            status = "queued"
        elif state.running_block is not None:
            status = "finished"
        else:
            status = "original reply"
        out.append(f"Block {i + 1} of {n} ({status}):\n{_code(code, lim.code_chars)}")
    if state.running_block is None:
        out.append(f"Replacement block (RUNNING):\n{_code(state.boundary.code, lim.code_chars)}")
        if state.queued_blocks:
            queued = "\n".join(_code(q, lim.code_chars) for q in state.queued_blocks)
            out.append("Queued blocks:\n" + clip(queued, lim.queued_chars))
    return "\n".join(out)


def _code(code: str, limit: int) -> str:
    return fence(clip(code.rstrip(), limit))


def _reply_messages(state: PublicState, lim: ViewLimits) -> str:
    return "\n".join(clip(m, lim.observation_chars) for m in state.reply_messages)


def _block_calls(state: PublicState, lim: ViewLimits) -> str:
    calls = state.block_calls[-lim.block_calls :]
    omitted = len(state.block_calls) - len(calls)
    lines = [f"[... {omitted} earlier calls omitted ...]"] if omitted else []
    for call in calls:
        args = clip(_json(call.arguments), lim.value_chars)
        flag = " (error)" if call.result.is_error else ""
        result = clip(call.result.text, lim.observation_chars)
        lines.append(f"#{call.call_index} {call.tool}({args}){flag} ->\n{result}")
    return "\n".join(lines)


def _variables(state: PublicState, lim: ViewLimits) -> str:
    b = state.boundary
    items = [(k, v) for k, v in b.module_vars.items() if not k.startswith("__")]
    if b.local_vars:
        items += [(f"{k} (local)", v) for k, v in b.local_vars.items()]
    lines: list[str] = []
    used = 0
    for name, value in items:
        line = f"{name} = {clip(_json(value), lim.value_chars)}"
        if used + len(line) > lim.variables_chars:
            lines.append(f"[... {len(items) - len(lines)} more variables omitted ...]")
            break
        lines.append(line)
        used += len(line)
    return "\n".join(lines)


def _decisions(state: PublicState, lim: ViewLimits) -> str:
    shown = state.decisions[-lim.decisions :]
    lines = []
    for d in shown:
        op = d.operation
        detail = ""
        if op.kind == "patch_arguments":
            detail = " " + clip(_json(op.arguments), lim.value_chars)
        elif op.kind != "keep":
            detail = f" ({len(op.code.splitlines())} lines of code)"
        fallback = f" [fallback: {d.fallback}]" if d.fallback else ""
        lines.append(f"call #{d.call_index} {d.tool}: {op.kind}{detail}{fallback}")
    return "\n".join(lines)


def _pending(state: PublicState, view: View) -> str:
    b = state.boundary
    where = "module level" if b.call_site.at_module_level else f"in {b.call_site.function}()"
    lines = [
        f"tool: {b.tool}",
        f"block line {b.line} ({where}): {state.source_line}",
        f"call #{b.call_index} of the task",
    ]
    if state.call_budget is not None:
        lines[-1] += f" ({state.calls_used} of {state.call_budget} calls used)"
    if view == "with_feedback":
        lines.append(f"arguments: {_json(b.arguments)}")
    return "\n".join(lines)


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except ValueError:
        return repr(value)
