"""A replay model: answers from a recorded trajectory, checking every request against it.

Prefix replay (paper section 3.3) rebuilds a saved state by re-running a trajectory; the model side
of that is this class. Each request must equal the recorded one; the first that differs fails with
:class:`ReplayMismatch` naming the first differing field (e.g. ``messages[3].content``), so a
divergent prefix is caught at the request where it diverges. Differences that only the
normaliser's masking hid (clock readings) are kept apart in :attr:`ReplayModel.masked` (paper
A.4: "raw clock differences remain available"). Every response it returns is marked
``replayed``: it counts in logical token totals only (A.5, B.2).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any

from controlscope.core import (
    ClockDifference,
    ModelCallEvent,
    ModelRequest,
    ModelResponse,
    ProviderError,
    response_size_problem,
)
from controlscope.record import (
    ABSENT,
    ReplayMismatch,
    first_char_difference,
    first_difference,
    map_strings,
    read_events,
)

__all__ = ["ReplayExhausted", "ReplayMismatch", "ReplayModel", "first_difference"]


class ReplayExhausted(ReplayMismatch):
    """More requests arrived than the recording holds."""

    def __init__(self, index: int, recorded_count: int, *, role: str | None = None) -> None:
        whose = f"the {role}'s " if role else ""
        AssertionError.__init__(
            self,
            f"{whose}request {index} was not recorded: the recording holds {recorded_count} "
            "request(s)",
        )
        self.index = index
        self.path = ""
        self.recorded = ABSENT
        self.received = None


class ReplayModel:
    """Answers requests from a recorded trajectory, in order.

    Args:
        pairs: the recorded ``(request, response)`` pairs in order; a :class:`ProviderError` in
            place of a response is raised again (a fresh error of the same kind and status) when
            its request is replayed, as the recorded call failed.
        model_id: the id reported.
        ignore: top-level request fields left out of the comparison (e.g. ``{"draw"}``).
        normalise: applied to every string of both the recorded and the received request
            before they are compared (e.g. an environment's
            :meth:`~controlscope.envs._base.Environment.normalise_observation`, which masks clock
            readings that differ between two identical runs); the mismatch quotes the
            normalised values. None compares the strings as they are.
        role: whose requests these are (``planner``, ``reviewer``), named in mismatch messages.

    Attributes:
        position: how many requests have been answered.
        masked: differences between recorded and received requests that only the normaliser
            hid, one per request (raw excerpts around the first one).

    Raises:
        ValueError: when ``ignore`` names a field that requests do not have.
    """

    def __init__(
        self,
        pairs: Sequence[tuple[ModelRequest, ModelResponse | ProviderError]],
        *,
        model_id: str = "replay",
        ignore: Collection[str] = (),
        normalise: Callable[[str], str] | None = None,
        role: str | None = None,
    ) -> None:
        unknown = set(ignore) - set(ModelRequest.model_fields)
        if unknown:
            raise ValueError(f"cannot ignore unknown request fields {sorted(unknown)}")
        self._pairs = tuple(pairs)
        self._model_id = model_id
        self._ignore = frozenset(ignore)
        self._normalise = normalise
        self._role = role
        self.position = 0
        self.masked: list[ClockDifference] = []
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        """The id given at construction."""
        return self._model_id

    def __len__(self) -> int:
        """The number of recorded requests."""
        return len(self._pairs)

    def sampling_seed(self, request: ModelRequest) -> int | None:
        """The seed the recorded model sampled the next request with (see
        :class:`~controlscope.core.SeededModel`): ``request``'s own when it sets one, else the
        next recorded request's (a model that chose the seed itself recorded it there; None in
        logs written before it was), so the replayed request is the recorded one."""
        if request.seed is not None:
            return request.seed
        with self._lock:
            if self.position < len(self._pairs):
                return self._pairs[self.position][0].seed
        return None

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Check ``request`` against the next recorded one and return its recorded response.

        Raises:
            ReplayMismatch: when the request differs; names the first differing field.
            ReplayExhausted: when the recording has no further request.
            ProviderError: when the recorded call failed with one; ``response_too_large`` when
                the recorded response is larger than
                :data:`~controlscope.core.MAX_RESPONSE_BYTES` (as a live model's would be).
        """
        with self._lock:
            index = self.position
            if index >= len(self._pairs):
                raise ReplayExhausted(index, len(self._pairs), role=self._role)
            recorded, outcome = self._pairs[index]
            exclude = set(self._ignore)
            want = recorded.model_dump(mode="json", exclude=exclude)
            got = request.model_dump(mode="json", exclude=exclude)
            raw = first_difference(want, got)
            if self._normalise is not None and raw is not None:
                want, got = map_strings(want, self._normalise), map_strings(got, self._normalise)
            found = first_difference(want, got)
            if found is not None:
                raise ReplayMismatch(index, *found, role=self._role)
            if raw is not None:
                self.masked.append(_masked(self._role or "", index, *raw))
            self.position += 1
        if isinstance(outcome, ProviderError):
            raise ProviderError(str(outcome), status=outcome.status, kind=outcome.kind)
        problem = response_size_problem(outcome)
        if problem is not None:
            raise ProviderError(f"{problem} (recorded answer {index})", kind="response_too_large")
        return outcome.model_copy(update={"replayed": True})

    @classmethod
    def from_run_dir(
        cls,
        run_dir: str | Path,
        role: str,
        *,
        ignore: Collection[str] = (),
        normalise: Callable[[str], str] | None = None,
    ) -> ReplayModel:
        """Load the model calls of one role from a run directory's log.

        Every ``model_call`` event of ``role`` becomes a recorded pair: its request and its
        response, or, when the call failed, a :class:`~controlscope.core.ProviderError` of the
        recorded kind and status. The log is read by :func:`controlscope.record.read_events`
        (a last line cut short by a killed run is skipped).

        Args:
            run_dir: the run directory.
            role: ``planner`` or ``reviewer``.
            ignore, normalise: passed to the constructor.

        Raises:
            FileNotFoundError: when the run directory has no log.
            controlscope.record.LogError: when the log cannot be read (names file and line).
            ValueError: a model call with neither a response nor an error.
        """
        pairs: list[tuple[ModelRequest, ModelResponse | ProviderError]] = []
        for event in read_events(run_dir):
            if isinstance(event, ModelCallEvent) and event.role == role:
                pairs.append(_pair_from_event(event))
        return cls(pairs, model_id=f"replay:{role}", ignore=ignore, normalise=normalise, role=role)


def _masked(role: str, index: int, path: str, recorded: Any, received: Any) -> ClockDifference:
    """A masked difference, with 80 characters of raw text either side of where it starts."""

    def around(text: str, at: int) -> str:
        return text[max(0, at - 80) : at + 80]

    left, right = str(recorded), str(received)
    at = first_char_difference(left, right)
    return ClockDifference(
        role=role, request=index, path=path, recorded=around(left, at), received=around(right, at)
    )


def _pair_from_event(event: ModelCallEvent) -> tuple[ModelRequest, ModelResponse | ProviderError]:
    if event.response is not None:
        return event.request, event.response
    if event.error is not None:
        kind = event.error_kind or "other"
        return event.request, ProviderError(event.error, status=event.error_status, kind=kind)
    raise ValueError(f"model call event {event.seq} has neither a response nor an error")
