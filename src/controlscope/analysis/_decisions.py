"""Each paired outcome of a panel with the decisions behind it (paper 3.2, 5.1, 6.1).

A paired difference is a reviewing scope's outcome less its unit's Keep outcome (paper eq. 4-5).
Tables count them; a reader also wants to see what caused each one: the revisions the reviewer
realized in that run (where, which operation, with what), or that it kept at every review,
and the reviews that fell back to Keep. :func:`paired_outcomes` reads them from the runs' logs
(only the reviewing runs'; every other number comes from their summaries).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from controlscope.analysis._reviews import plural
from controlscope.core import RealizedOperationEvent, ValidationEvent, operation_spec
from controlscope.panel import KEEP, condition_label
from controlscope.record import LogError, iter_events

DECISION_CHARS = 160
"""How much of one decision's description the report shows."""


@dataclass(frozen=True)
class PairedOutcome:
    """One reviewing run against its unit's Keep run.

    Attributes:
        unit: the paired unit (``TASK/sSEED/pSOURCE``).
        condition: the reviewing condition's label (``arg``, ``full-d1``...).
        keep_run: the unit's Keep run (its id under ``runs/``).
        run: the reviewing run.
        keep_success: Keep's verdict (None: no scored verdict).
        success: the reviewing run's verdict (None: no scored verdict).
        difference: ``success - keep_success`` (+1, 0, -1; None when either is missing).
        reviews: the reviews the run made.
        decisions: what its reviews did, in order: each revision realized (``call 3:
            patch_arguments {...}``) and each fallback to Keep (its kind, and for a refused
            proposal what was proposed and why it was refused); ``kept at every review`` first
            when it revised nothing.
    """

    unit: str
    condition: str
    keep_run: str
    run: str
    keep_success: bool | None
    success: bool | None
    difference: int | None
    reviews: int
    decisions: tuple[str, ...]

    @property
    def label(self) -> str:
        """``win``, ``loss``, ``tie`` or ``not scored``."""
        if self.difference is None:
            return "not scored"
        return {1: "win", -1: "loss"}.get(self.difference, "tie")


def paired_outcomes(
    runs: pd.DataFrame, draws: int, run_dirs: dict[str, Path]
) -> list[PairedOutcome]:
    """Every reviewing run of ``runs`` against its unit's Keep run, with its decisions.

    Args:
        runs: the panel's runs (:func:`~controlscope.analysis.read_panel`).
        draws: the panel's reviewer draws (for the condition labels).
        run_dirs: each run's directory, by run id (a run whose log cannot be read shows
            why in its decisions).

    Returns:
        One outcome per reviewing run, in the plan's order.
    """
    scored = runs["status"] == "done"
    verdict = {
        str(i): (bool(s) if ok else None)
        for i, s, ok in zip(runs["id"], runs["success"], scored, strict=True)
    }
    keep_of = {
        str(u): str(i)
        for u, i, s in zip(runs["unit"], runs["id"], runs["scope"], strict=True)
        if s == KEEP
    }
    out: list[PairedOutcome] = []
    for row in runs[runs["scope"] != KEEP].itertuples():
        keep = keep_of.get(str(row.unit))
        if keep is None:
            continue
        a, b = verdict.get(keep), verdict[str(row.id)]
        reviews, decisions = _decisions(run_dirs.get(str(row.id)))
        out.append(
            PairedOutcome(
                unit=str(row.unit),
                condition=condition_label(str(row.scope), int(str(row.draw)), draws),
                keep_run=keep,
                run=str(row.id),
                keep_success=a,
                success=b,
                difference=None if a is None or b is None else int(b) - int(a),
                reviews=reviews,
                decisions=decisions,
            )
        )
    return out


def _decisions(directory: Path | None) -> tuple[int, tuple[str, ...]]:
    """A run's reviews and decisions (see :class:`PairedOutcome`) from its log."""
    if directory is None:
        return 0, ("its log is missing",)
    lines: list[str] = []
    rejected: dict[int, str] = {}  # call index -> what was proposed and why it was refused
    reviews = revisions = 0
    try:
        for event in iter_events(directory):
            if isinstance(event, ValidationEvent) and not event.validation.accepted:
                found = event.validation
                kind = found.proposal.kind if found.proposal is not None else "nothing parseable"
                why = f": {found.reason}" if found.reason is not None else ""
                rejected[event.call_index] = f"proposed {kind}{why}"
            if not isinstance(event, RealizedOperationEvent) or not event.model_called:
                continue
            reviews += 1
            if event.fallback is not None:
                why = rejected.pop(event.call_index, "")
                lines.append(
                    _clipped(
                        f"call {event.call_index}: kept, a fallback "
                        f"({event.fallback}{'; ' + why if why else ''})"
                    )
                )
            elif event.operation.kind != "keep":
                revisions += 1
                lines.append(_shown(event))
    except (OSError, ValueError, LogError) as err:
        return reviews, (f"its log cannot be read: {err}",)
    if not reviews:
        return 0, ("no review",)
    if not lines:
        return reviews, ("kept at every review",)
    chosen = reviews - len(lines)  # the keeps the reviewer chose
    if not revisions and chosen:
        lines.insert(0, f"kept by choice at {plural(chosen, 'review')}")
    return reviews, tuple(lines)


def _clipped(text: str) -> str:
    return text if len(text) <= DECISION_CHARS else text[: DECISION_CHARS - 1] + "…"


def _shown(event: RealizedOperationEvent) -> str:
    """One realized revision in a line: where, which operation, with what."""
    operation = event.operation
    detail = json.dumps(operation_spec(operation.kind).shown(operation), ensure_ascii=False)
    code = getattr(operation, "code", None)
    if isinstance(code, str):  # a replacement: its first lines say what it does
        detail += " " + " ⏎ ".join(line.strip() for line in code.strip().splitlines())
    return _clipped(f"call {event.call_index}: {operation.kind} {detail}")
