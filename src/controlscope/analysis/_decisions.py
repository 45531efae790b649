"""Each paired outcome of a panel with the decisions behind it (paper 3.2, 5.1, 6.1).

A paired difference is a reviewing scope's outcome less its unit's Keep outcome (paper eq. 4-5).
Tables count them; a reader also wants to see what caused each one: the revisions the reviewer
realized in that run (where, which operation, with what), or that it kept at every review,
and the reviews that fell back to Keep. :func:`paired_outcomes` reads them from the runs'
summaries (``RunSummary.decisions``), and from the log of a run whose summary predates them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from controlscope.analysis._records import REVISION_COUNTS, Listed
from controlscope.analysis._reviews import plural
from controlscope.panel import KEEP, condition_label
from controlscope.record import DecisionNotes, LogError, ReviewDecision, iter_events


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
    runs: pd.DataFrame,
    draws: int,
    run_dirs: dict[str, Path],
    recorded: Mapping[str, Listed | None] | None = None,
) -> list[PairedOutcome]:
    """Every reviewing run of ``runs`` against its unit's Keep run, with its decisions.

    Args:
        runs: the panel's runs (:func:`~controlscope.analysis.read_panel`).
        draws: the panel's reviewer draws (for the condition labels).
        run_dirs: each run's directory, by run id (a run whose log cannot be read shows
            why in its decisions).
        recorded: each run's decisions as its summary lists them
            (:attr:`~controlscope.analysis.PanelRuns.decisions`); a run absent here, or whose
            summary predates the list, has its log read.

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
    known = recorded or {}
    out: list[PairedOutcome] = []
    for row in runs[runs["scope"] != KEEP].itertuples():
        keep = keep_of.get(str(row.unit))
        if keep is None:
            continue
        a, b = verdict.get(keep), verdict[str(row.id)]
        listed = known.get(str(row.id))
        if listed is not None:
            reviews = int(str(row.reviews))
            revised = any(int(str(getattr(row, n))) for n in REVISION_COUNTS)
            decisions = _lines(reviews, *listed, revised=revised)
        else:
            reviews, decisions = _from_log(run_dirs.get(str(row.id)))
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


def _from_log(directory: Path | None) -> tuple[int, tuple[str, ...]]:
    """A run's reviews and decisions read from its log (a summary that predates the list)."""
    if directory is None:
        return 0, ("its log is missing",)
    notes = DecisionNotes()
    reviews = 0
    try:
        for event in iter_events(directory):
            notes.add(event)
            reviews += event.type == "review_request"
    except (OSError, ValueError, LogError) as err:
        return reviews, (f"its log cannot be read: {err}",)
    return reviews, _lines(reviews, notes.decisions, notes.omitted, revised=notes.revised)


def _lines(
    reviews: int, decisions: list[ReviewDecision], omitted: int, *, revised: bool
) -> tuple[str, ...]:
    """What :attr:`PairedOutcome.decisions` shows for ``reviews`` reviews, of which
    ``decisions`` are listed, ``omitted`` more are not, and ``revised`` says whether any
    realized a revision."""
    if not reviews:
        return ("no review",)
    lines = [_line(d) for d in decisions]
    if not lines:
        return ("kept at every review",)
    if omitted:
        lines.append(f"… and {plural(omitted, 'more decision')} (the run's page shows each)")
    chosen = reviews - len(decisions) - omitted  # the keeps the reviewer chose
    if not revised and chosen:
        lines.insert(0, f"kept by choice at {plural(chosen, 'review')}")
    return tuple(lines)


def _line(decision: ReviewDecision) -> str:
    """One decision in a line: where, which operation (or fallback), with what."""
    if decision.fallback is None:
        return f"call {decision.call_index}: {decision.operation} {decision.detail}"
    why = f"; {decision.detail}" if decision.detail else ""
    return f"call {decision.call_index}: kept, a fallback ({decision.fallback}{why})"
