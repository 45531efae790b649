"""What the reviewers did, per condition, in words: reviews, the changes proposed, those
realized and those refused with their reasons (paper A.4: a refused or failed review is a
recorded Keep fallback; Table 6 counts fallbacks among the Keeps).

Counts come from the runs' summaries (:func:`read_panel`'s table); the sentences are the
report's section "What the reviewers did" and part of ``controlscope report``'s output.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pandas as pd

from controlscope.analysis._records import FALLBACK_COLUMNS, REVISION_COUNTS
from controlscope.analysis._tables import by_condition
from controlscope.core import escape_untrusted
from controlscope.panel import KEEP, condition_label

REFUSALS = ("out_of_scope", "syntax_error", "invalid_arguments")
"""Fallback kinds of a proposal the validation refused (the rest, ``malformed`` and
``provider_error``, are reviews that gave no proposal)."""


def plural(n: int, word: str, many: str | None = None) -> str:
    """``n`` and ``word`` in the number ``n`` asks for (``1 paired unit``, ``2 paired units``).

    Args:
        n: the count.
        word: the singular.
        many: the plural when it is not ``word + "s"`` (``categories``).
    """
    return f"{n:,} {word if n == 1 else (many or word + 's')}"


def _kinds(row: pd.Series, names: tuple[str, ...], prefix: str = "") -> str:
    """``name n`` for each nonzero count, comma-separated (empty when all are zero)."""
    found = [(name, int(row[f"{prefix}{name}"])) for name in names]
    return ", ".join(f"{name} {n}" for name, n in found if n)


def review_lines(runs: pd.DataFrame, draws: int) -> list[str]:
    """One sentence per condition saying what its reviewers did.

    Args:
        runs: the scored runs (:func:`read_panel`'s table, eligible units).
        draws: the panel's reviewer draws (conditions are labelled ``full-d0``... when more
            than one).

    Returns:
        The sentences, in the conditions' order: reviews, reviews the reviewer answered with
        Keep, changes proposed, realized (by operation kind) and refused (by reason, each run
        as Keep), and answers with no proposal (malformed, provider errors).
    """
    lines = []
    for scope, draw, group in by_condition(runs):
        label = condition_label(scope, draw, draws)
        runs_text = plural(len(group), "run")
        if scope == KEEP:
            lines.append(f"{label}: granted Keep, no reviewer asked ({runs_text}).")
            continue
        total = group[["reviews", *REVISION_COUNTS, *FALLBACK_COLUMNS]].sum()
        reviews = int(total["reviews"])
        if reviews == 0:
            lines.append(f"{label}: no boundary reviewed in {runs_text}.")
            continue
        lines.append(f"{label}: {_sentence(total, reviews)} in {runs_text}.")
    return lines


def _sentence(total: pd.Series, reviews: int) -> str:
    realized = sum(int(total[name]) for name in REVISION_COUNTS)
    refused = sum(int(total[f"fallback_{kind}"]) for kind in REFUSALS)
    unanswered = int(total["fallback_malformed"]) + int(total["fallback_provider_error"])
    kept = reviews - realized - refused - unanswered
    parts = [
        plural(reviews, "review"),
        f"the reviewer chose Keep {plural(kept, 'time')}",
        f"proposed {plural(realized + refused, 'change')}",
        f"{realized} realized" + (f" ({_kinds(total, REVISION_COUNTS)})" if realized else ""),
    ]
    if refused:
        reasons = _kinds(total, REFUSALS, prefix="fallback_")
        parts.append(f"{refused} refused and run as Keep ({reasons})")
    if unanswered:
        kinds = _kinds(total, ("malformed", "provider_error"), prefix="fallback_")
        parts.append(f"{plural(unanswered, 'answer')} without a proposal, run as Keep ({kinds})")
    return ", ".join(parts)


def viewer_command(panel: Path) -> str:
    """The command that opens the viewer on ``panel``, quoted for a POSIX shell and escaped to
    one inert line (a folder's name may hold anything)."""
    return escape_untrusted(f"controlscope view {shlex.quote(str(panel))}")
