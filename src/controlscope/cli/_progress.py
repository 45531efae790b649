"""Live progress of one run on the terminal (``rich``): calls, reviews, decisions."""

from __future__ import annotations

from rich.console import Console
from rich.live import Live
from rich.text import Text

from controlscope.cli._console import inert
from controlscope.core import (
    BlockEndEvent,
    Event,
    ModelCallEvent,
    PlannerTurnEvent,
    PrimitiveCallEvent,
    RealizedOperationEvent,
)


class LiveProgress:
    """A one-line live status fed with trajectory events (``observe``), plus a line per decision
    that changes the program (patch, block-data patch, replacement) or falls back."""

    def __init__(self, console: Console, task_id: str, call_budget: int) -> None:
        self._console = console
        self._task_id = task_id
        self._budget = call_budget
        self._turn = 0
        self._calls = 0
        self._reviews = 0
        self._changes = 0
        self._fallbacks = 0
        self._last = "starting"
        self._live = Live(self._render(), console=console, refresh_per_second=4, transient=True)

    def start(self) -> None:
        """Show the status line."""
        self._live.start()

    def stop(self) -> None:
        """Remove the status line."""
        self._live.stop()

    def observe(self, event: Event) -> None:
        """Update the status from one trajectory event."""
        if isinstance(event, PlannerTurnEvent):
            self._turn = event.turn + 1
            self._last = f"planning turn {self._turn}"
        elif isinstance(event, ModelCallEvent) and event.error:
            self._console.print(f"[yellow]{event.role} error: {inert(event.error)}[/yellow]")
        elif isinstance(event, PrimitiveCallEvent):
            self._calls += 1
            self._last = f"call {event.call.tool}"
        elif isinstance(event, RealizedOperationEvent):
            self._reviews += 1
            kind = event.operation.kind
            if event.fallback is not None:
                self._fallbacks += 1
                self._console.print(
                    f"  review at call {event.call_index}: fallback ({event.fallback}) -> keep"
                )
            elif kind != "keep":
                self._changes += 1
                self._console.print(f"  review at call {event.call_index}: [bold]{kind}[/bold]")
            self._last = f"review -> {kind}"
        elif isinstance(event, BlockEndEvent):
            self._last = f"block {event.result.block_id} {event.result.status}"
        self._live.update(self._render())

    def _render(self) -> Text:
        return Text(
            f"{self._task_id}  turn {self._turn}  calls {self._calls}/{self._budget}  "
            f"reviews {self._reviews}  changes {self._changes}  fallbacks {self._fallbacks}  "
            f"| {self._last}"
        )
