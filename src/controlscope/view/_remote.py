"""The review desk's routes for runs of other processes (a panel's runs, each through a
:class:`~controlscope.review.RemoteDesk`): they post their boundaries to the desk the review
page shows, and wait there for the person's decision.

Routes, each with the desk's secret in the ``X-Review-Key`` header (403 without it):
``/_review/post`` (POST, JSON ``{"label", "state", "granted"}``: the public state and the
granted set; answers ``{"ticket"}``), ``/_review/outcome?t=TICKET&s=N`` (held until the
boundary is decided, at most ``N`` seconds and at most :data:`HOLD_S`; answers ``{"status":
"waiting" | "decided" | "gone", "refused", "operation", "reason", "decision"}``) and
``/_review/withdraw`` (POST ``{"ticket"}``: the boundary leaves the desk; answers its outcome,
``withdrawn`` when it was not decided). A posted boundary is on the desk itself, so the review
page lists, shows and decides it as one of this process, through the same validation.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from typing import Any

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from controlscope.core import OperationSet
from controlscope.review import PendingReview, PublicState, ReviewDesk
from controlscope.view._review import bounded_body

MAX_POST_BYTES = 64_000_000
"""The largest boundary a run posts (its public state, as JSON)."""

HOLD_S = 10.0
"""The longest a ``/_review/outcome`` request is held before it answers ``waiting``."""

MAX_HELD = 10_000
"""The most posted boundaries held at once (decided ones not yet fetched included)."""


class RemotePosts:
    """The handlers of the routes above for one desk.

    Args:
        desk: the desk the boundaries are posted on.
        headers: the headers of every answer.
    """

    def __init__(self, desk: ReviewDesk, headers: dict[str, str]) -> None:
        self.desk = desk
        self.headers = headers
        self.held: dict[str, PendingReview] = {}

    def _answer(self, body: dict[str, Any], status: int = 200) -> Response:
        return JSONResponse(body, status_code=status, headers=self.headers)

    def _forbidden(self, request: Request) -> Response | None:
        """A 403 answer when the request does not carry the desk's secret, else None."""
        secret = request.headers.get("x-review-key", "")
        if hmac.compare_digest(secret.encode(), self.desk.secret.encode()):
            return None
        return self._answer({"detail": "this request does not carry the desk's secret"}, 403)

    async def post(self, request: Request) -> Response:
        """Put a posted boundary on the desk; ``{"ticket"}`` (400: not a boundary; 503: the
        desk holds :data:`MAX_HELD`)."""
        refused = self._forbidden(request)
        if refused is not None:
            return refused
        try:
            data = json.loads(await bounded_body(request, MAX_POST_BYTES))
            if not isinstance(data, dict):
                raise ValueError("a boundary is a JSON object")
            state = PublicState.model_validate(data.get("state"))
            granted = OperationSet.model_validate(data.get("granted"))
            label = data.get("label", "")
            if not isinstance(label, str):
                raise ValueError("'label' is a string")
        except (ValueError, RecursionError) as err:  # ValidationError, JSONDecodeError too
            detail = err.errors()[0]["msg"] if isinstance(err, ValidationError) else str(err)
            return self._answer({"detail": f"not a boundary: {detail}"}, 400)
        if len(self.held) >= MAX_HELD:
            return self._answer({"detail": "the desk holds too many boundaries"}, 503)
        pending = self.desk.post(state, granted, label=label)
        self.held[pending.ticket] = pending
        return self._answer({"ticket": pending.ticket})

    async def outcome(self, request: Request) -> Response:
        """The boundary's outcome, once decided or after the hold (see the module)."""
        refused = self._forbidden(request)
        if refused is not None:
            return refused
        pending = self.held.get(request.query_params.get("t", ""))
        try:
            hold = min(max(float(request.query_params.get("s", "0")), 0.0), HOLD_S)
        except ValueError:
            hold = 0.0
        loop = asyncio.get_running_loop()
        until = loop.time() + hold
        while pending is not None and not pending.done.is_set() and loop.time() < until:
            if self.desk.closed:
                break
            await asyncio.sleep(0.05)
        return self._answer(self._outcome(pending, "waiting"))

    async def withdraw(self, request: Request) -> Response:
        """Take a boundary off the desk; its outcome (``withdrawn`` when undecided)."""
        refused = self._forbidden(request)
        if refused is not None:
            return refused
        try:
            data = json.loads(await bounded_body(request, 10_000))
            ticket = data.get("ticket", "") if isinstance(data, dict) else ""
        except (ValueError, RecursionError):
            ticket = ""
        pending = self.held.get(ticket) if isinstance(ticket, str) else None
        if pending is not None:
            self.desk.close(pending)
        return self._answer(self._outcome(pending, "withdrawn"))

    def _outcome(self, pending: PendingReview | None, undecided: str) -> dict[str, Any]:
        """What a run is told of ``pending``: decided (then it is no longer held), ``gone``
        (not held, or the desk shut), else ``undecided``."""
        if pending is None or (self.desk.closed and not pending.done.is_set()):
            return {"status": "gone"}
        body: dict[str, Any] = {"status": undecided, "refused": list(pending.refused)}
        if pending.done.is_set() and pending.operation is not None:
            self.held.pop(pending.ticket, None)
            body.update(
                status="decided",
                operation=pending.operation.model_dump(mode="json"),
                reason=pending.reason,
                decision=pending.decision,
            )
        elif undecided == "withdrawn":
            self.held.pop(pending.ticket, None)
        return body


def remote_routes(desk: ReviewDesk, headers: dict[str, str]) -> list[Route]:
    """The routes runs of other processes post to (see the module docstring)."""
    posts = RemotePosts(desk, headers)
    return [
        Route("/_review/post", posts.post, methods=["POST"]),
        Route("/_review/outcome", posts.outcome),
        Route("/_review/withdraw", posts.withdraw, methods=["POST"]),
    ]
