"""A person's decision at a terminal: the public state shown with ``rich``, the decision read
from ``stdin`` (new arguments as one JSON object; code in ``$EDITOR``, pre-filled)."""

from __future__ import annotations

import json
import os
import select
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, TextIO

from rich.console import Console
from rich.markup import escape
from rich.syntax import Syntax

from controlscope.core import Condition, OperationKind, code_parameters, operation_spec
from controlscope.review._desk import PendingReview, ReviewDesk, rest_of_block


class TerminalFront:
    """Shows a pending boundary at a terminal and hands the person's decisions to the desk.

    Args:
        desk: the desk the boundary is on.
        stdin: where the person types (``sys.stdin`` by default).
        stdout: where the state is shown (``sys.stdout`` by default).
    """

    def __init__(
        self, desk: ReviewDesk, *, stdin: TextIO | None = None, stdout: TextIO | None = None
    ) -> None:
        self.desk = desk
        self.stdin = stdin or sys.stdin
        self.out = Console(file=stdout or sys.stdout, highlight=False, soft_wrap=True)

    @property
    def name(self) -> str:
        """The terminal's name (``/dev/pts/3``), or ``stdin`` when it is no terminal."""
        try:
            return os.ttyname(self.stdin.fileno())
        except (OSError, ValueError, AttributeError):
            return "stdin"

    def ask(self, pending: PendingReview, condition: Condition, timeout_s: float | None) -> None:
        """Show the state and read decisions until one is accepted or the time limit passes.

        Raises:
            KeyboardInterrupt: Ctrl-C (the run ends, recorded as interrupted).
        """
        deadline = None if timeout_s is None else pending.posted + timeout_s
        self.show(pending)
        kinds = list(pending.granted.operations)
        choices = ", ".join(f"{n} = {k}" for n, k in enumerate(kinds, 1))
        while True:
            key = self._line(f"decision ({choices})> ", deadline)
            if key is None:
                self.out.print("[bold]no decision in time[/]: the call is kept (a timeout)")
                return
            chosen = [k for n, k in enumerate(kinds, 1) if key.strip().lower() in (str(n), k)]
            if not chosen:
                self.out.print(f"choose one of: {choices}")
                continue
            payload = self._payload(chosen[0], pending, deadline)
            if payload is None:
                continue
            answer = self.desk.decide(pending.ticket, self.desk.secret, chosen[0], payload)
            if answer.answer == "accepted":
                self.out.print(f"[green]accepted[/]: {chosen[0]}")
                return
            self.out.print(f"[red]refused[/]: {escape(answer.detail)}; try again")

    def show(self, pending: PendingReview) -> None:
        """Print the public state at the boundary (all agent and tool text escaped)."""
        state, b = pending.state, pending.state.boundary
        out = self.out
        out.rule(f"review: call {b.call_index} of block {escape(b.block_id)}")
        out.print(f"[bold]goal[/]: {escape(state.goal)}")
        for call in state.block_calls:
            shown = escape(call.result.text[:400])
            out.print(f"[dim]earlier call[/] {escape(call.tool)}: {shown}")
        for decision in state.decisions:
            out.print(
                f"[dim]earlier decision[/] call {decision.call_index}: "
                f"{decision.operation.kind}{f' ({decision.fallback})' if decision.fallback else ''}"
            )
        out.print(Syntax(b.code, "python", line_numbers=True, highlight_lines={b.line}))
        out.print(f"[bold]pending call[/] (line {b.line}): {escape(b.tool)}")
        out.print(escape(json.dumps(b.arguments, indent=2, ensure_ascii=False, default=str)))
        variables = {**b.module_vars, **b.local_vars}
        if variables:
            text = json.dumps(variables, ensure_ascii=False, default=str)[:1500]
            out.print(f"[bold]variables[/]: {escape(text)}")
        if b.output:
            out.print(f"[bold]printed output[/]:\n{escape(b.output[-1500:])}")
        for index, queued in enumerate(state.queued_blocks, 1):
            out.print(f"[bold]queued block {index}[/]:\n{escape(queued)}")
        notes = state.operation_notes(pending.granted)
        if notes:
            out.print(f"[yellow]{escape(notes)}[/]")

    def _payload(
        self, kind: OperationKind, pending: PendingReview, deadline: float | None
    ) -> dict[str, Any] | None:
        """The decision's fields for ``kind`` (None: go back to the choice)."""
        payload = operation_spec(kind).payload
        if payload == "none":
            return {}
        b = pending.state.boundary
        if payload == "arguments":
            code = sorted(code_parameters(pending.state.tool_schema))
            hint = f" (not {', '.join(code)}: code)" if code else ""
            text = self._line(f"new arguments as one JSON object{hint}> ", deadline)
            if text is None or not text.strip():
                return None
            try:
                return {"arguments": json.loads(text)}
            except json.JSONDecodeError as err:
                self.out.print(f"[red]not JSON[/]: {escape(str(err))}")
                return None
        start = rest_of_block(b.code, b.line) if operation_spec(kind).cancels else b.code
        edited = edit_in_editor(start)
        return None if edited is None else {"code": edited}

    def _line(self, prompt: str, deadline: float | None) -> str | None:
        """One line typed by the person; None at the deadline or the end of input."""
        self.out.print(prompt, end="")
        self.out.file.flush()
        if deadline is not None:
            left = deadline - time.monotonic()
            try:
                ready, _, _ = select.select([self.stdin], [], [], max(left, 0.0))
            except (OSError, ValueError):  # no descriptor: read without a limit
                ready = [self.stdin]
            if not ready:
                self.out.print()
                return None
        line = self.stdin.readline()
        return line.rstrip("\n") if line else None


def edit_in_editor(text: str) -> str | None:
    """``text`` after the person edited it in ``$VISUAL`` or ``$EDITOR`` (``vi`` when neither
    is set); None when the editor failed or left the file empty.

    Args:
        text: the code to start from.

    Returns:
        The edited code, or None.
    """
    editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
    with tempfile.TemporaryDirectory(prefix="controlscope-review-") as folder:
        path = Path(folder) / "decision.py"
        path.write_text(text, "utf-8")
        try:
            done = subprocess.run([*shlex.split(editor), str(path)], check=False)
        except OSError:
            return None
        edited = path.read_text("utf-8")
    if done.returncode != 0 or not edited.strip():
        return None
    return edited
