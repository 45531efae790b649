"""The review desk: boundaries waiting for a person's decision, shared between the run that
waits (:class:`~controlscope.review.HumanReviewer`) and what shows them to the person (the
viewer's review page, a terminal).

A decision is judged when it is handed in, by the same path as a model's proposal
(:func:`~controlscope.review.parse_operation`, then
:func:`~controlscope.scope.validate_operation` against the granted set): a refused one is
answered with its reason at once and the boundary stays pending, so the person may try
again. A decision must carry the desk's secret (only the address the run prints holds it) and
name a boundary still pending; anything else is refused and changes nothing.
"""

from __future__ import annotations

import ast
import hmac
import itertools
import json
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Literal

from controlscope.core import MalformedOperationError, Operation, OperationSet
from controlscope.review._operations import parse_operation
from controlscope.review._state import PublicState
from controlscope.scope import validate_operation

Answer = Literal["accepted", "refused", "not_pending", "forbidden"]
"""What became of a decision handed in: accepted (the run goes on with it), refused by
validation (the boundary stays pending), for a boundary not pending (decided, timed out,
never posted), or without the desk's secret."""


@dataclass(frozen=True)
class DeskAnswer:
    """The desk's answer to a decision.

    Attributes:
        answer: what became of it (:data:`Answer`).
        detail: why it was refused (the validation's reason), else empty.
    """

    answer: Answer
    detail: str = ""


@dataclass
class PendingReview:
    """One boundary waiting for a person's decision.

    Attributes:
        ticket: its id on the desk (random; names it in a decision).
        label: which run it belongs to (its directory's name, or the caller's label).
        state: the public state a model reviewer would get (paper section 3.1).
        granted: the granted operation set: what the person may choose.
        posted: when it was posted (``time.monotonic()``).
        refused: the reason of each refused try, in order.
        operation: the accepted operation, once there is one.
        decision: the accepted decision as handed in (kind, payload), as JSON text.
        reason: the person's stated reason, if any.
        done: set once a decision is accepted.
    """

    ticket: str
    label: str
    state: PublicState
    granted: OperationSet
    posted: float
    refused: list[str] = field(default_factory=list)
    operation: Operation | None = None
    decision: str = ""
    reason: str = ""
    done: threading.Event = field(default_factory=threading.Event)


class ReviewDesk:
    """Boundaries waiting for a person's decision (thread-safe; one per review page).

    Args:
        secret: the secret every decision must carry; None draws a random one (use the
            default: only the address the run prints should hold it).

    Attributes:
        secret: the desk's secret.
        where: where the person decides (the review page's address without the secret, or
            a terminal's name); recorded with each decision.
    """

    def __init__(self, secret: str | None = None) -> None:
        self.secret = secret or secrets.token_urlsafe(24)
        self.where = ""
        self._lock = threading.Lock()
        self._pending: dict[str, PendingReview] = {}
        self._version = itertools.count(1)
        self.version = 0
        """A number that changes whenever a boundary is posted or leaves the desk."""
        self.closed = False
        """True once :meth:`shut`: the page's waits answer at once (its server may stop)."""

    def shut(self) -> None:
        """Tell whoever waits for a change that none will come (the page's server stops)."""
        with self._lock:
            self.closed = True
            self.version = next(self._version)

    def post(self, state: PublicState, granted: OperationSet, *, label: str = "") -> PendingReview:
        """Put a boundary on the desk; the person sees it from now on.

        Args:
            state: the public state at the boundary.
            granted: the granted operation set.
            label: which run it belongs to.

        Returns:
            The pending review (wait for it with :meth:`wait`).
        """
        pending = PendingReview(
            ticket=secrets.token_urlsafe(9),
            label=label,
            state=state,
            granted=granted,
            posted=time.monotonic(),
        )
        with self._lock:
            self._pending[pending.ticket] = pending
            self.version = next(self._version)
        return pending

    def wait(self, pending: PendingReview, timeout_s: float | None) -> Operation | None:
        """Wait for an accepted decision; the boundary leaves the desk either way.

        The wait wakes up often, so Ctrl-C (``KeyboardInterrupt``) ends it at once.

        Args:
            pending: what :meth:`post` returned.
            timeout_s: the most seconds to wait; None waits until a decision.

        Returns:
            The accepted operation; None when none came in time.
        """
        deadline = None if timeout_s is None else pending.posted + timeout_s
        try:
            while not pending.done.is_set():
                left = 0.25 if deadline is None else min(0.25, deadline - time.monotonic())
                if left <= 0:
                    break
                pending.done.wait(left)
        finally:
            self.close(pending)
        return pending.operation

    def close(self, pending: PendingReview) -> None:
        """Take a boundary off the desk (a later decision for it is ``not_pending``)."""
        with self._lock:
            if self._pending.pop(pending.ticket, None) is not None:
                self.version = next(self._version)

    def pending(self) -> list[PendingReview]:
        """The boundaries waiting, oldest first."""
        with self._lock:
            return sorted(self._pending.values(), key=lambda p: p.posted)

    def get(self, ticket: str) -> PendingReview | None:
        """The pending boundary ``ticket`` names, if it is still waiting."""
        with self._lock:
            return self._pending.get(ticket)

    def decide(
        self, ticket: str, secret: str, kind: str, payload: dict[str, Any] | None = None
    ) -> DeskAnswer:
        """Hand in a decision for the boundary ``ticket``.

        Args:
            ticket: the pending boundary.
            secret: the desk's secret, as the person's page or terminal holds it.
            kind: the operation kind (``keep``, ``patch_arguments``...).
            payload: its fields (``arguments``, ``code``, ``reason``), as a model's decision.

        Returns:
            ``forbidden`` without the secret; ``not_pending`` for a boundary not waiting;
            ``refused`` with the validation's reason (the boundary stays pending);
            ``accepted`` (the waiting run goes on with it).
        """
        if not hmac.compare_digest(secret.encode(), self.secret.encode()):
            return DeskAnswer("forbidden", "this decision does not carry the run's secret")
        with self._lock:
            pending = self._pending.get(ticket)
            if pending is None or pending.done.is_set():
                return DeskAnswer("not_pending", "this boundary is no longer waiting")
            detail = _refusal(pending, kind, payload or {})
            if detail is not None:
                pending.refused.append(detail)
                return DeskAnswer("refused", detail)
            reason = (payload or {}).get("reason")
            pending.reason = reason if isinstance(reason, str) else ""
            pending.decision = json.dumps({"operation": kind, **(payload or {})}, default=str)
            pending.done.set()
            del self._pending[ticket]  # decided: it leaves the desk at once
            self.version = next(self._version)
        return DeskAnswer("accepted")


def _refusal(pending: PendingReview, kind: str, payload: dict[str, Any]) -> str | None:
    """Why the decision cannot run (None: it can; ``pending.operation`` is then set)."""
    try:
        operation = parse_operation(kind, payload)
    except MalformedOperationError as err:
        return str(err)
    state = pending.state
    validation = validate_operation(
        operation, pending.granted, boundary=state.boundary, tool=state.tool_schema
    )
    if not validation.accepted:
        return f"{validation.reason}: {validation.detail}"
    pending.operation = validation.realized
    return None


def rest_of_block(code: str, line: int) -> str:
    """The block from the top-level statement holding ``line`` on: what a replacement of the
    rest of the block starts from (valid Python when the block is).

    Args:
        code: the running block's source.
        line: the pending call's 1-based line (0: unknown).

    Returns:
        The statements from there to the end (the whole block when ``line`` is not in it or
        the block does not parse).
    """
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return code
    lines = code.splitlines(keepends=True)
    for stmt in tree.body:
        end = stmt.end_lineno or stmt.lineno
        if stmt.lineno <= line <= end:
            return "".join(lines[stmt.lineno - 1 :])
    return code
