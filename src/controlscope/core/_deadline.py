"""A run's wall-clock ceiling: a point on the monotonic clock that nothing in the run outlives.

Review and planning time are recorded apart from execution time and never charged to the
execution budget (paper section 4), so a run needs one more bound that counts everything: its
wall-clock ceiling (``TaskBudgets.wall_seconds``). Waits that can take a timeout take what is
left of it (tool calls, the worker's channel); model requests and reviews are waited for at most
that long (``controlscope.run``); a model client can read what is left from
:func:`remaining_seconds` to cap its own timeouts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar


class WallClockExceeded(RuntimeError):
    """The run's wall-clock ceiling was reached while something was still being waited for."""


class Deadline:
    """A wall-clock ceiling of ``seconds`` from now (``time.monotonic``).

    Args:
        seconds: the ceiling, in seconds (positive).

    Raises:
        ValueError: ``seconds`` is not a positive finite number.
    """

    def __init__(self, seconds: float) -> None:
        if not 0 < seconds < float("inf"):
            raise ValueError(f"a wall-clock ceiling must be a positive number, not {seconds!r}")
        self.seconds = float(seconds)
        self.at = time.monotonic() + self.seconds

    def remaining(self) -> float:
        """Seconds left (negative once the ceiling has passed)."""
        return self.at - time.monotonic()

    @property
    def passed(self) -> bool:
        """Whether the ceiling has been reached."""
        return self.remaining() <= 0


_CURRENT: ContextVar[Deadline | None] = ContextVar("controlscope_deadline", default=None)


@contextmanager
def running_until(deadline: Deadline | None) -> Iterator[None]:
    """Make ``deadline`` the current run's ceiling (see :func:`remaining_seconds`) in the body."""
    token = _CURRENT.set(deadline)
    try:
        yield
    finally:
        _CURRENT.reset(token)


def remaining_seconds() -> float | None:
    """Seconds left before the current run's wall-clock ceiling, or None outside a run.

    A model client may cap the timeout of a request (retries included) with it, so that a
    request never outlives its run.
    """
    deadline = _CURRENT.get()
    return None if deadline is None else deadline.remaining()
