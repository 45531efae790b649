"""What each event kind of the trajectory log becomes in an Inspect AI eval log.

Every kind of :data:`controlscope.core.Event` is either exported (:data:`INSPECT_EVENTS`: the
Inspect event it becomes) or left out with the reason (:data:`NOT_EXPORTED`); a kind added to
the log without an entry in one of the two fails the export's tests.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, get_args

from controlscope.core import Event

INSPECT_EVENTS: MappingProxyType[str, str] = MappingProxyType(
    {
        "run_start": "info",
        "model_call": "model",
        "planner_turn": "info",
        "block_start": "info",
        "block_end": "info",
        "proposal": "approval",
        "validation": "approval",
        "realized_operation": "approval",
        "primitive_call": "tool",
        "budget": "sample_limit",
        "final_verdict": "score",
        "clock_differences": "info",
        "branch_point": "info",
        "plan_end": "info",
        "recovery": "info",
        "plan_error": "info",
        "run_end": "info",
    }
)
"""Event kind -> the Inspect event it becomes (``inspect_ai.event``: ``model``, ``tool``,
``approval``, ``score``, ``sample_limit``, ``info``). A ``proposal`` and its ``validation``
are merged into the ``approval`` of their boundary's ``realized_operation`` (the reviewer's
answer, the proposed operation and why it was refused are in its metadata); a replacement adds
an ``info`` event carrying the new code (source ``replace_workflow``)."""

NOT_EXPORTED: MappingProxyType[str, str] = MappingProxyType(
    {
        "boundary": "the pending call is the approval's call when it was reviewed and the tool "
        "event when it was made; the runtime state shown to the reviewer is in the reviewer's "
        "model event",
        "review_request": "the reviewer's request is the following model event; its draw and "
        "granted scope are in the approval's metadata",
    }
)
"""Event kind -> why it has no Inspect event of its own."""


def event_kinds() -> frozenset[str]:
    """Every event kind of the trajectory log's schema (the ``type`` of each event model)."""
    union: Any = get_args(Event)[0]
    return frozenset(
        kind
        for model in get_args(union)
        for kind in get_args(model.model_fields["type"].annotation)
    )
