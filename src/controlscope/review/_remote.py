"""A review desk in another process, reached over HTTP: what the runs of a panel reviewed by a
person post their boundaries to (the desk itself, a :class:`~controlscope.review.ReviewDesk`,
is served by the viewer's review page in the panel command's process).

:class:`RemoteDesk` has the two calls :class:`~controlscope.review.HumanReviewer` makes of a
desk (``post``, ``wait``): it posts the boundary (public state and granted set) and waits for
the decision with bounded long polls; the desk validates each decision as it does for a page
in its own process (one validation path). Every request is bounded (:data:`REQUEST_S` beyond
the desk's own hold), a failed one is retried at most :data:`RETRIES` times, and a desk that
stopped answering raises :class:`DeskUnreachable` (the reviewer records a fallback), never a
hang.

The desk's address and secret reach the runs' processes in the environment variable
:data:`DESK_VARIABLE` only (never argv, a log or a file): :func:`share_desk` sets it in the
process that starts them, :func:`claim_desk` reads it once and removes it from the environment
(so the run's tool server and worker, started later, never inherit it).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pydantic import TypeAdapter, ValidationError

from controlscope.core import Operation, OperationSet
from controlscope.review._desk import PendingReview
from controlscope.review._state import PublicState

DESK_VARIABLE = "CONTROLSCOPE_REVIEW_DESK"
"""The environment variable holding a panel's desk (JSON ``{"url", "secret"}``)."""

POLL_S = 5.0
"""The most seconds the desk holds one ``/_review/outcome`` request before answering."""

REQUEST_S = 10.0
"""The most seconds one request may take beyond the desk's hold (connect and answer)."""

RETRIES = 3
"""Failed requests retried in a row before the desk counts as gone (0.5, 1 and 2 s apart)."""

_OPERATION: TypeAdapter[Operation] = TypeAdapter(Operation)


class DeskUnreachable(Exception):
    """The desk did not answer (after the retries), refused the secret, answered what is no
    answer, or no longer holds the boundary: no decision can come."""


@dataclass(frozen=True)
class DeskAddress:
    """Where a desk is served, and its secret.

    Attributes:
        url: the viewer's address (``http://127.0.0.1:PORT/``).
        secret: the desk's secret (every request carries it).
    """

    url: str
    secret: str = field(repr=False)

    @property
    def where(self) -> str:
        """The review page's address without the secret (recorded with each decision)."""
        return f"{self.url}review"


_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""Opens the desk's address directly: never through an ``http_proxy`` of the environment,
which would see the secret (and cannot reach a loopback desk anyway)."""

_claimed: DeskAddress | None = None
_claim_lock = threading.Lock()


@contextlib.contextmanager
def share_desk(address: DeskAddress) -> Iterator[None]:
    """Hand ``address`` to the processes started inside the block (through
    :data:`DESK_VARIABLE`) and to this process's :func:`claim_desk`; both are gone after."""
    global _claimed
    with _claim_lock:
        _claimed = address
        os.environ[DESK_VARIABLE] = json.dumps({"url": address.url, "secret": address.secret})
    try:
        yield
    finally:
        with _claim_lock:
            _claimed = None
            os.environ.pop(DESK_VARIABLE, None)


def claim_desk() -> DeskAddress | None:
    """The desk this process's runs post to: read once from :data:`DESK_VARIABLE`, which is
    then removed from the environment (later calls return the same address).

    Returns:
        The address; None when no desk was shared (or the variable is not one).
    """
    global _claimed
    with _claim_lock:
        if _claimed is None:
            text = os.environ.pop(DESK_VARIABLE, None)
            try:
                data = json.loads(text) if text else None
                _claimed = DeskAddress(str(data["url"]), str(data["secret"])) if data else None
            except (ValueError, TypeError, KeyError):
                _claimed = None
        return _claimed


class RemoteDesk:
    """A desk served in another process (see the module docstring).

    Args:
        address: where it is served, and its secret.
        poll_s: the most seconds the desk holds one wait (:data:`POLL_S`).
        retries: failed requests retried in a row (:data:`RETRIES`).
        request_s: the most seconds one request may take beyond the desk's hold
            (:data:`REQUEST_S`).

    Attributes:
        where: the review page's address without the secret (recorded with each decision).
    """

    def __init__(
        self,
        address: DeskAddress,
        *,
        poll_s: float = POLL_S,
        retries: int = RETRIES,
        request_s: float = REQUEST_S,
    ) -> None:
        self.address = address
        self.where = address.where
        self.poll_s = poll_s
        self.retries = retries
        self.request_s = request_s
        self._gone: str | None = None

    def post(self, state: PublicState, granted: OperationSet, *, label: str = "") -> PendingReview:
        """Put a boundary on the desk.

        Raises:
            DeskUnreachable: the desk did not take it (or stopped answering earlier).
        """
        body = {"label": label, "state": state.model_dump(mode="json")}
        body["granted"] = granted.model_dump(mode="json")
        posted = time.monotonic()
        answer = self._request("POST", "_review/post", body)
        ticket = answer.get("ticket")
        if not isinstance(ticket, str) or not ticket:
            raise self._lost("the desk answered a post without a ticket")
        return PendingReview(ticket, label, state, granted, posted)

    def wait(self, pending: PendingReview, timeout_s: float | None) -> Operation | None:
        """Wait for the accepted decision (long polls); the boundary leaves the desk either way.

        Returns:
            The accepted operation; None when none came within ``timeout_s``.

        Raises:
            DeskUnreachable: the desk stopped answering or forgot the boundary.
        """
        deadline = None if timeout_s is None else pending.posted + timeout_s
        done = False
        try:
            while not done:
                left = self.poll_s if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    break
                query = urllib.parse.urlencode({"t": pending.ticket, "s": min(left, self.poll_s)})
                done = self._take(pending, self._request("GET", f"_review/outcome?{query}"))
        finally:
            if not done and self._gone is None:  # out of time, or interrupted: withdraw it
                with contextlib.suppress(DeskUnreachable):
                    body = {"ticket": pending.ticket}
                    self._take(pending, self._request("POST", "_review/withdraw", body, 0))
        return pending.operation

    def _take(self, pending: PendingReview, answer: dict[str, Any]) -> bool:
        """Read an outcome into ``pending``; True once decided."""
        refused = answer.get("refused")
        if isinstance(refused, list):
            pending.refused[:] = [str(r) for r in refused]
        status = answer.get("status")
        if status in ("waiting", "withdrawn"):
            return False
        if status != "decided":
            raise self._lost(f"the desk no longer holds this boundary ({status!r})")
        try:
            pending.operation = _OPERATION.validate_python(answer.get("operation"))
        except ValidationError:
            raise self._lost("the desk answered a decision that is no operation") from None
        pending.reason = str(answer.get("reason") or "")
        pending.decision = str(answer.get("decision") or "")
        pending.done.set()
        return True

    def _request(
        self, method: str, path: str, body: dict[str, Any] | None = None, retries: int | None = None
    ) -> dict[str, Any]:
        """One request (retried), its JSON answer.

        Raises:
            DeskUnreachable: no answer after the retries, the secret refused, no JSON object.
        """
        if self._gone is not None:
            raise DeskUnreachable(self._gone)
        data = None if body is None else json.dumps(body).encode()
        headers = {"X-Review-Key": self.address.secret, "Content-Type": "application/json"}
        request = urllib.request.Request(self.address.url + path, data, headers, method=method)
        tries = 1 + (self.retries if retries is None else retries)
        for attempt in range(tries):
            if attempt:
                time.sleep(0.5 * 2 ** (attempt - 1))
            try:
                with _DIRECT.open(request, timeout=self.poll_s + self.request_s) as answer:
                    return _json_object(answer.read())
            except urllib.error.HTTPError as err:
                if err.code == 403:
                    raise self._lost("the desk refused this panel's secret") from None
                if err.code < 500:
                    raise self._lost(f"the desk answered HTTP {err.code}") from None
                failure = f"the desk answered HTTP {err.code}"
            except (OSError, ValueError) as err:  # refused, reset, timed out, not JSON
                failure = f"the desk at {self.where} did not answer: {err}"
        raise self._lost(f"{failure} ({tries} tries)")

    def _lost(self, why: str) -> DeskUnreachable:
        """Remember that the desk is gone (later calls fail at once); the error to raise."""
        self._gone = why
        return DeskUnreachable(why)


def _json_object(raw: bytes) -> dict[str, Any]:
    """``raw`` as a JSON object.

    Raises:
        ValueError: it is not one.
    """
    value = json.loads(raw)
    if not isinstance(value, dict):
        raise ValueError("the desk's answer is not a JSON object")
    return value
