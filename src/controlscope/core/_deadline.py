"""A run's wall-clock ceiling: a point on the monotonic clock that nothing in the run outlives.

Review and planning time are recorded apart from execution time and never charged to the
execution budget (paper section 4), so a run needs one more bound that counts everything: its
wall-clock ceiling (``TaskBudgets.wall_seconds``). Waits that can take a timeout take what is
left of it (tool calls, the worker's channel); model requests and reviews are waited for at most
that long (``controlscope.run``). Each model call also has a deadline of its own that covers all
of it (every attempt, every wait between attempts, the whole answer): the client's per-call
limit, or the run's (``Condition.request_timeout_s``), and never past the ceiling
(:func:`call_seconds`).
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
_CALL_LIMIT: ContextVar[float | None] = ContextVar("controlscope_call_limit", default=None)


@contextmanager
def running_until(deadline: Deadline | None, *, call_s: float | None = None) -> Iterator[None]:
    """Make ``deadline`` the current run's ceiling (see :func:`remaining_seconds`) and
    ``call_s`` its per-call limit (seconds; None: each client's own, see :func:`call_seconds`)
    in the body."""
    token = _CURRENT.set(deadline)
    limit = _CALL_LIMIT.set(call_s)
    try:
        yield
    finally:
        _CALL_LIMIT.reset(limit)
        _CURRENT.reset(token)


def remaining_seconds() -> float | None:
    """Seconds left before the current run's wall-clock ceiling, or None outside a run.

    A model client may cap the timeout of a request (retries included) with it, so that a
    request never outlives its run.
    """
    deadline = _CURRENT.get()
    return None if deadline is None else deadline.remaining()


def call_seconds(default_s: float) -> float:
    """Seconds the model call starting now may take, all of it counted (every attempt and wait).

    Args:
        default_s: the client's own per-call limit, in seconds.

    Returns:
        The current run's per-call limit when it sets one, else ``default_s``; never more than
        what is left of the run's wall-clock ceiling (zero or less once it has passed).
    """
    limit = _CALL_LIMIT.get()
    seconds = default_s if limit is None else limit
    left = remaining_seconds()
    return seconds if left is None else min(seconds, left)
