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

import json
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
)
from controlscope.record import read_events

__all__ = ["ReplayExhausted", "ReplayMismatch", "ReplayModel", "first_difference"]

_ABSENT = "<absent>"


def _first_char_difference(left: str, right: str) -> int:
    """The index of the first character where two texts differ (the shorter's length if one
    is a prefix of the other)."""
    return next(
        (i for i, (a, b) in enumerate(zip(left, right, strict=False)) if a != b),
        min(len(left), len(right)),
    )


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def first_difference(recorded: Any, received: Any, path: str = "") -> tuple[str, Any, Any] | None:
    """Find the first place where two JSON values differ.

    Mappings are walked in the recorded value's key order (then keys only the received value has),
    lists by index; a list that is longer or shorter differs at the first missing index.

    Args:
        recorded: the recorded JSON value.
        received: the received JSON value.
        path: the path of these values (``""`` at the root).

    Returns:
        ``(path, recorded_part, received_part)`` for the first difference, where a missing part is
        the string ``"<absent>"``; ``None`` when the values are equal.
    """
    if isinstance(recorded, dict) and isinstance(received, dict):
        keys = list(recorded) + [key for key in received if key not in recorded]
        for key in keys:
            sub = f"{path}.{key}" if path else str(key)
            if key not in recorded or key not in received:
                return sub, recorded.get(key, _ABSENT), received.get(key, _ABSENT)
            found = first_difference(recorded[key], received[key], sub)
            if found is not None:
                return found
        return None
    if isinstance(recorded, list) and isinstance(received, list):
        for index, (left, right) in enumerate(zip(recorded, received, strict=False)):
            found = first_difference(left, right, f"{path}[{index}]")
            if found is not None:
                return found
        if len(recorded) != len(received):
            index = min(len(recorded), len(received))
            left = recorded[index] if index < len(recorded) else _ABSENT
            right = received[index] if index < len(received) else _ABSENT
            return f"{path}[{index}]", left, right
        return None
    if type(recorded) is not type(received) and not (
        isinstance(recorded, int | float) and isinstance(received, int | float)
    ):
        return path, recorded, received
    return None if recorded == received else (path, recorded, received)


class ReplayMismatch(AssertionError):
    """A request differs from the recorded one.

    Attributes:
        index: the 0-based position of the request in the recording.
        path: the first differing field, e.g. ``messages[3].content`` (``""`` when the recording
            has no request at this position).
        recorded: the recorded value there (``"<absent>"`` if none).
        received: the received value there.
    """

    def __init__(
        self, index: int, path: str, recorded: Any, received: Any, *, role: str | None = None
    ) -> None:
        where = ""
        if isinstance(recorded, str) and isinstance(received, str):
            # Long texts (prompts) often share a long head: show both around the first change.
            at = _first_char_difference(recorded, received)
            if at > 40:
                where = f" (from character {at})"
                recorded, received = recorded[at - 20 :], received[at - 20 :]
        whose = f"the {role}'s " if role else ""
        super().__init__(
            f"{whose}request {index} differs from the recording at {path}{where}: recorded "
            f"{_short(recorded)}, received {_short(received)}"
        )
        self.index = index
        self.path = path
        self.recorded = recorded
        self.received = received


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
        self.recorded = _ABSENT
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

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Check ``request`` against the next recorded one and return its recorded response.

        Raises:
            ReplayMismatch: when the request differs; names the first differing field.
            ReplayExhausted: when the recording has no further request.
            ProviderError: when the recorded call failed with one.
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
                want, got = _map_strings(want, self._normalise), _map_strings(got, self._normalise)
            found = first_difference(want, got)
            if found is not None:
                raise ReplayMismatch(index, *found, role=self._role)
            if raw is not None:
                self.masked.append(_masked(self._role or "", index, *raw))
            self.position += 1
        if isinstance(outcome, ProviderError):
            raise ProviderError(str(outcome), status=outcome.status, kind=outcome.kind)
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
    at = _first_char_difference(left, right)
    return ClockDifference(
        role=role, request=index, path=path, recorded=around(left, at), received=around(right, at)
    )


def _map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """``value`` (JSON data) with ``fn`` applied to every string in it (keys excepted)."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [_map_strings(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _map_strings(v, fn) for k, v in value.items()}
    return value


def _pair_from_event(event: ModelCallEvent) -> tuple[ModelRequest, ModelResponse | ProviderError]:
    if event.response is not None:
        return event.request, event.response
    if event.error is not None:
        kind = event.error_kind or "other"
        return event.request, ProviderError(event.error, status=event.error_status, kind=kind)
    raise ValueError(f"model call event {event.seq} has neither a response nor an error")
