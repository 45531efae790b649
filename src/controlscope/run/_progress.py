"""A single run's progress: where it is (turn, block, calls, reviews, elapsed time), built
from its events, given to a callback, and shown on a terminal with ``rich``.

:class:`ProgressTracker` turns the trajectory's events into :class:`RunProgress` snapshots
and hands each to a callback of the caller's; :class:`TerminalProgress` is the callback
``controlscope run`` and :func:`~controlscope.run.run_task` use when standard error is a
terminal: one live status line on standard error, plus a line for each review that changed
the program or fell back.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import TracebackType
from typing import Literal

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.text import Text

from controlscope.core import (
    BlockEndEvent,
    BlockStartEvent,
    Event,
    ModelCallEvent,
    PlannerTurnEvent,
    PrimitiveCallEvent,
    RealizedOperationEvent,
    escape_untrusted,
)


@dataclass(frozen=True)
class RunProgress:
    """Where a run is.

    Attributes:
        task_id: the task's id.
        turn: planning turns started (1 during the first).
        block: the block running or last run (``t0.b0``); None before the first.
        calls: primitive calls made.
        call_budget: the primitive-call budget.
        reviews: reviews realized (boundaries where an operation was realized).
        changes: reviews that changed the program (a patch, a block-data patch, a
            replacement).
        fallbacks: reviews executed as Keep because the review failed (paper A.4).
        elapsed_s: seconds since the run started (monotonic clock).
        doing: what the run did last, in words (``planning turn 1``, ``call write_file``).
        news: a line worth keeping for this event (a review that changed the program, fell
            back, or a model error); None for most events.
    """

    task_id: str
    turn: int = 0
    block: str | None = None
    calls: int = 0
    call_budget: int = 0
    reviews: int = 0
    changes: int = 0
    fallbacks: int = 0
    elapsed_s: float = 0.0
    doing: str = "starting"
    news: str | None = None

    def line(self, elapsed_s: float | None = None) -> str:
        """The status as one line (``elapsed_s``: in place of the recorded one)."""
        spent = self.elapsed_s if elapsed_s is None else elapsed_s
        return (
            f"{self.task_id}  turn {self.turn}  block {self.block or '-'}  "
            f"calls {self.calls}/{self.call_budget}  reviews {self.reviews}  changes "
            f"{self.changes}  fallbacks {self.fallbacks}  {_clock(spent)}  | {self.doing}"
        )


ProgressCallback = Callable[[RunProgress], None]
"""Called with a :class:`RunProgress` after every event of the run."""

ProgressOption = ProgressCallback | Literal["auto"] | None
"""What a run does with its progress: a callback of yours, ``"auto"`` (a live line on
standard error when it is a terminal, nothing otherwise) or None (nothing)."""


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


class ProgressTracker:
    """Turns a run's events into :class:`RunProgress` snapshots for ``callback``.

    Args:
        task_id: the task's id.
        call_budget: the primitive-call budget.
        callback: called with the progress after every event.
        clock: the monotonic clock (seconds).
    """

    def __init__(
        self,
        task_id: str,
        call_budget: int,
        callback: ProgressCallback,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._callback = callback
        self._clock = clock
        self._start = clock()
        self.progress = RunProgress(task_id=task_id, call_budget=call_budget)

    def observe(self, event: Event) -> None:
        """Update the progress from one event and give it to the callback (an observer)."""
        self.progress = replace(
            _advance(self.progress, event), elapsed_s=self._clock() - self._start
        )
        self._callback(self.progress)


def _advance(p: RunProgress, event: Event) -> RunProgress:
    """The progress after ``event``."""
    if isinstance(event, PlannerTurnEvent):
        return replace(p, turn=event.turn + 1, doing=f"planning turn {event.turn + 1}", news=None)
    if isinstance(event, BlockStartEvent):
        return replace(p, block=event.block_id, doing=f"block {event.block_id}", news=None)
    if isinstance(event, PrimitiveCallEvent):
        return replace(p, calls=p.calls + 1, doing=f"call {event.call.tool}", news=None)
    if isinstance(event, BlockEndEvent):
        doing = f"block {event.result.block_id} {event.result.status}"
        return replace(p, doing=doing, news=None)
    if isinstance(event, ModelCallEvent) and event.error:
        return replace(p, news=f"{event.role} error: {event.error}")
    if isinstance(event, RealizedOperationEvent):
        kind = event.operation.kind
        at = f"review at call {event.call_index}"
        if event.fallback is not None:
            news: str | None = f"{at}: fallback ({event.fallback}) -> keep"
            return replace(p, reviews=p.reviews + 1, fallbacks=p.fallbacks + 1, news=news)
        changed = kind != "keep"
        return replace(
            p,
            reviews=p.reviews + 1,
            changes=p.changes + changed,
            doing=f"review -> {kind}",
            news=f"{at}: {kind}" if changed else None,
        )
    return replace(p, news=None)


class TerminalProgress:
    """A live status line on a ``rich`` console (standard error by default): the callback
    ``controlscope run`` uses. The elapsed time moves on while a model answers. Use it as a
    context manager (or call :meth:`start` and :meth:`stop`).

    Args:
        console: where to draw (default: standard error).
    """

    def __init__(self, console: Console | None = None) -> None:
        self._console = console or Console(stderr=True, soft_wrap=True)
        self._progress: RunProgress | None = None
        self._since = time.monotonic()
        self._live = Live(self, console=self._console, refresh_per_second=4, transient=True)

    def __call__(self, progress: RunProgress) -> None:
        """Show ``progress`` (a :data:`ProgressCallback`)."""
        self._progress, self._since = progress, time.monotonic()
        if progress.news is not None:
            self._console.print(escape(escape_untrusted(f"  {progress.news}")))

    def __rich__(self) -> Text:
        """The status line, its elapsed time counted to now."""
        if self._progress is None:
            return Text("starting")
        now = self._progress.elapsed_s + time.monotonic() - self._since
        return Text(escape_untrusted(self._progress.line(now)))

    def start(self) -> None:
        """Show the status line."""
        self._live.start()

    def stop(self) -> None:
        """Remove the status line."""
        self._live.stop()

    def __enter__(self) -> TerminalProgress:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.stop()


def terminal_wanted() -> bool:
    """Whether ``"auto"`` progress is shown: standard error is a terminal."""
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False
