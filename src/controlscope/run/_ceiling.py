"""The run's wall-clock ceiling around waits that take no timeout: model requests and reviews.

Planning and review time are recorded apart from execution time (paper section 4), so the
execution budget does not bound them; a model endpoint that accepts a connection and never
answers, or a reviewer that never returns, would hold the run for ever. Such a call runs on a
helper thread and is waited for until the ceiling (:class:`~controlscope.core.Deadline`); a call
still running then is abandoned (its answer is never used, and the client's own timeout ends
it) and :class:`~controlscope.core.WallClockExceeded` ends the run as a budget.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable
from typing import Any, TypeVar

from controlscope.core import Condition, Deadline, WallClockExceeded
from controlscope.review import Proposal, PublicState, Reviewer

_T = TypeVar("_T")


def call_within(deadline: Deadline | None, func: Callable[..., _T], *args: Any) -> _T:
    """``func(*args)``, waited for at most until ``deadline``.

    Args:
        deadline: the run's ceiling; None calls ``func`` directly.
        func: the call (a model request, a review).
        *args: its arguments.

    Returns:
        What ``func`` returned.

    Raises:
        WallClockExceeded: the ceiling passed before ``func`` returned (or before it started).
        Exception: whatever ``func`` raised.
    """
    if deadline is None:
        return func(*args)
    left = deadline.remaining()
    if left <= 0:
        raise WallClockExceeded(_message(deadline))
    outcome: list[Any] = []
    done = threading.Event()
    context = contextvars.copy_context()  # the run's ceiling stays visible to model clients

    def target() -> None:
        try:
            outcome.append((True, context.run(func, *args)))
        except BaseException as exc:
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=target, name="controlscope-wait", daemon=True).start()
    if not done.wait(left):
        raise WallClockExceeded(_message(deadline))
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def _message(deadline: Deadline) -> str:
    return f"the run's wall-clock ceiling of {deadline.seconds:g} s was reached"


class CeilingReviewer:
    """A reviewer whose proposals are waited for at most until the run's ceiling.

    Args:
        inner: the reviewer.
        deadline: the run's ceiling.
    """

    def __init__(self, inner: Reviewer, deadline: Deadline) -> None:
        self.inner = inner
        self.deadline = deadline

    def propose(self, state: PublicState, condition: Condition) -> Proposal:
        """The inner reviewer's proposal.

        Raises:
            WallClockExceeded: no proposal before the ceiling.
        """
        return call_within(self.deadline, self.inner.propose, state, condition)
