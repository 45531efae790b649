"""A recorded run's actions, checked one by one against a replay's (paper A.4).

A replay answers the models from the recording (:class:`controlscope.models.ReplayModel`), but a
model request does not always show the action it leads to: under the ``code_only`` view the
reviewer never sees the pending call's arguments, so a recorded ``keep`` can be applied to a
different call and every later request still match. :class:`RecordedActions` closes that gap:
every primitive call the replay makes is compared with the recorded call at the same position
(tool, final arguments, observation, after the environment's normalisation), and the first
difference ends the replay naming it. Prefix replay and branching (paper section 3.3) use the
same check while they rebuild a saved state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from controlscope.core import PrimitiveCall, PrimitiveCallEvent
from controlscope.record._divergence import ABSENT, ReplayMismatch, first_difference, map_strings
from controlscope.record._store import read_events

__all__ = ["ActionMismatch", "RecordedActions"]


class ActionMismatch(ReplayMismatch):
    """A primitive call of a replay differs from the recorded one, or one side has no call at
    that position (``path`` is then ``""`` and the missing side ``"<absent>"``)."""

    def __init__(self, index: int, path: str, recorded: Any, received: Any) -> None:
        if path:
            super().__init__(index, path, recorded, received, what="primitive call")
            return
        if recorded == ABSENT:
            text = f"primitive call {index} was not recorded: the replay made {_call(received)}"
        else:
            text = f"primitive call {index} was recorded ({_call(recorded)}) but not made"
        AssertionError.__init__(self, text)
        self.index, self.path, self.recorded, self.received = index, path, recorded, received


def _call(compared: Any) -> str:
    if not isinstance(compared, dict):
        return str(compared)
    return f"{compared.get('tool')}({compared.get('arguments')})"


class RecordedActions:
    """The primitive calls of a recorded run, in order, to check a replay's calls against.

    Args:
        calls: the recorded calls in the order they were made.
        normalise: applied to every string of both the recorded and the replayed call before
            they are compared (the environment's ``normalise_observation``, which masks clock
            readings no seed controls); None compares them as they are.

    Attributes:
        position: how many calls have been checked.
    """

    def __init__(
        self, calls: Sequence[PrimitiveCall], *, normalise: Callable[[str], str] | None = None
    ) -> None:
        self._calls = tuple(calls)
        self._normalise = normalise
        self.position = 0

    def __len__(self) -> int:
        """The number of recorded calls."""
        return len(self._calls)

    @classmethod
    def from_run_dir(
        cls, run_dir: str | Path, *, normalise: Callable[[str], str] | None = None
    ) -> RecordedActions:
        """The calls of a run directory's log (its ``primitive_call`` events, in order).

        Raises:
            FileNotFoundError: the run directory has no log.
            controlscope.record.LogError: the log cannot be read.
        """
        events = read_events(run_dir)
        calls = [e.call for e in events if isinstance(e, PrimitiveCallEvent)]
        return cls(calls, normalise=normalise)

    def compared(self, call: PrimitiveCall) -> dict[str, Any]:
        """What is compared of a call: its tool, final arguments and observation, normalised."""
        data = {
            "tool": call.tool,
            "arguments": call.arguments,
            "observation": {"text": call.result.text, "is_error": call.result.is_error},
        }
        return map_strings(data, self._normalise) if self._normalise is not None else data

    def check(self, call: PrimitiveCall) -> None:
        """Check the replay's next call against the recorded one at the same position.

        Raises:
            ActionMismatch: the call differs (naming the first differing field, e.g.
                ``arguments.path``), or the recording holds no further call.
        """
        index = self.position
        received = self.compared(call)
        if index >= len(self._calls):
            raise ActionMismatch(index, "", ABSENT, received)
        found = first_difference(self.compared(self._calls[index]), received)
        if found is not None:
            raise ActionMismatch(index, *found)
        self.position += 1

    def finish(self) -> None:
        """Check that the replay made every recorded call (at the end of a replayed run).

        Raises:
            ActionMismatch: naming the first recorded call the replay did not make.
        """
        if self.position < len(self._calls):
            recorded = self.compared(self._calls[self.position])
            raise ActionMismatch(self.position, "", recorded, ABSENT)
