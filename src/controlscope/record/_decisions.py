"""What a run's reviews did, folded from its events into its summary (paper 3.1, 5.1).

A summary counts revisions and fallbacks; a reader of a paired difference also wants to see
them: where each revision was realized, which operation with what, and each fallback to Keep
with what was proposed and why it was refused. :class:`DecisionNotes` folds them from the
events as :func:`~controlscope.record.summarize` reads them, so a report lists them from
``summary.json`` without reading any log.
"""

from __future__ import annotations

import json

from pydantic import BaseModel

from controlscope.core import (
    Event,
    FallbackKind,
    OperationKind,
    RealizedOperationEvent,
    operation_spec,
)

DETAIL_CHARS = 160
"""How much of one decision's description a summary keeps (clipped with ``…``)."""

DECISIONS_LISTED = 8
"""How many decisions a summary lists, the first in order; it counts the rest
(``RunSummary.decisions_omitted``: a run's page shows every one from its log)."""


class ReviewDecision(BaseModel):
    """One review that did not end in a Keep the reviewer chose.

    Attributes:
        call_index: the reviewed boundary's call index.
        operation: the realized operation (``keep`` for a fallback).
        fallback: why Keep ran in place of the reviewer's answer; None for a revision.
        detail: a revision's fields as JSON (a replacement's code follows, its lines joined
            with ``⏎``); for a fallback, what was proposed and why it was refused when the
            validation refused it, else empty. At most :data:`DETAIL_CHARS` characters.
    """

    call_index: int
    operation: OperationKind
    fallback: FallbackKind | None = None
    detail: str = ""


class DecisionNotes:
    """Folds ``validation`` and ``realized_operation`` events into :class:`ReviewDecision`\\ s."""

    def __init__(self) -> None:
        self.decisions: list[ReviewDecision] = []
        self.omitted = 0  # decisions past the first DECISIONS_LISTED
        self.revised = False  # whether any review realized a revision (listed or not)
        self._refused: dict[int, str] = {}  # call index -> what was proposed, why refused

    def add(self, event: Event) -> None:
        """Fold one event (any type; only validations and realized operations count)."""
        if event.type == "validation" and not event.validation.accepted:
            found = event.validation
            kind = found.proposal.kind if found.proposal is not None else "nothing parseable"
            why = f": {found.reason}" if found.reason is not None else ""
            self._refused[event.call_index] = f"proposed {kind}{why}"
        elif event.type == "realized_operation" and event.model_called:
            refused = self._refused.pop(event.call_index, "")
            if event.fallback is None and event.operation.kind == "keep":
                return
            self.revised = self.revised or event.fallback is None
            if len(self.decisions) >= DECISIONS_LISTED:
                self.omitted += 1
            elif event.fallback is not None:
                self.decisions.append(
                    ReviewDecision(
                        call_index=event.call_index,
                        operation=event.operation.kind,
                        fallback=event.fallback,
                        detail=clipped(refused),
                    )
                )
            else:
                self.decisions.append(_revision(event))


def clipped(text: str, limit: int = DETAIL_CHARS) -> str:
    """``text``, cut to ``limit`` characters with a closing ``…`` when longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _revision(event: RealizedOperationEvent) -> ReviewDecision:
    """A realized revision: its operation's shown fields, a replacement's code after them."""
    operation = event.operation
    detail = json.dumps(operation_spec(operation.kind).shown(operation), ensure_ascii=False)
    code = getattr(operation, "code", None)
    if isinstance(code, str):
        detail += " " + " ⏎ ".join(line.strip() for line in code.strip().splitlines())
    return ReviewDecision(
        call_index=event.call_index, operation=operation.kind, detail=clipped(detail)
    )
