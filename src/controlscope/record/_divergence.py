"""Comparing a run with its recording: the first difference between two JSON values.

A replay (paper section 3.3, A.4: "replays check API names, arguments and observations")
compares what it does with what was recorded, request by request
(:class:`controlscope.models.ReplayModel`) and primitive call by primitive call
(:class:`controlscope.record.RecordedActions`); the first difference ends it with a
:class:`ReplayMismatch` naming the field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from controlscope.record._decisions import clipped

__all__ = ["ABSENT", "ReplayMismatch", "first_difference", "map_strings"]

ABSENT = "<absent>"
"""What :func:`first_difference` reports for a part one side does not have."""


def _short(value: Any, limit: int = 120) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return clipped(text, limit)


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
                return sub, recorded.get(key, ABSENT), received.get(key, ABSENT)
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
            left = recorded[index] if index < len(recorded) else ABSENT
            right = received[index] if index < len(received) else ABSENT
            return f"{path}[{index}]", left, right
        return None
    if type(recorded) is not type(received) and not (
        isinstance(recorded, int | float) and isinstance(received, int | float)
    ):
        return path, recorded, received
    return None if recorded == received else (path, recorded, received)


def first_char_difference(left: str, right: str) -> int:
    """The index of the first character where two texts differ (the shorter's length when one
    is a prefix of the other)."""
    return next(
        (i for i, (a, b) in enumerate(zip(left, right, strict=False)) if a != b),
        min(len(left), len(right)),
    )


class ReplayMismatch(AssertionError):
    """A request (or, for :class:`~controlscope.record.ActionMismatch`, a primitive call)
    differs from the recorded one.

    Args:
        index: see the attribute.
        path: see the attribute.
        recorded: see the attribute.
        received: see the attribute.
        role: whose request it is (``planner``, ``reviewer``), named in the message.
        what: what differs (``request``, ``primitive call``), named in the message.

    Attributes:
        index: the 0-based position of the request in the recording.
        path: the first differing field, e.g. ``messages[3].content`` (``""`` when the recording
            has no request at this position).
        recorded: the recorded value there (``"<absent>"`` if none).
        received: the received value there.
    """

    def __init__(
        self,
        index: int,
        path: str,
        recorded: Any,
        received: Any,
        *,
        role: str | None = None,
        what: str = "request",
    ) -> None:
        where = ""
        if isinstance(recorded, str) and isinstance(received, str):
            # Long texts (prompts) often share a long head: show both around the first change.
            at = first_char_difference(recorded, received)
            if at > 40:
                where = f" (from character {at})"
                recorded, received = recorded[at - 20 :], received[at - 20 :]
        whose = f"the {role}'s " if role else ""
        super().__init__(
            f"{whose}{what} {index} differs from the recording at {path}{where}: recorded "
            f"{_short(recorded)}, received {_short(received)}"
        )
        self.index = index
        self.path = path
        self.recorded = recorded
        self.received = received


def map_strings(value: Any, fn: Callable[[str], str]) -> Any:
    """``value`` (JSON data) with ``fn`` applied to every string in it (keys excepted)."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [map_strings(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: map_strings(v, fn) for k, v in value.items()}
    return value
