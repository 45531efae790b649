"""Units paired across two panels of one experiment (paper B.1, B.2, A.3, A.4).

A panel's cells pair conditions inside it; the paper also pairs conditions that run in
different panels of one experiment: B.1's one-time against continuous review within a scope,
B.2's protected against continuous Full, A.3's code-only against with-feedback view. A unit
pairs across two panels when it is the same task, data seed and source program (the same
unit id) and its Keep run is the same in both: their terminal state hashes are equal (one
Keep run per unit of an experiment, reused by identity, ``execution.keep_from``). A unit whose
Keep runs differ is not paired: the cell is ``n/a`` and names it.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd

from controlscope.analysis import CLUSTER, UNIT
from controlscope.core import ModelCallEvent
from controlscope.record import LogError, first_difference, iter_events

MATCHED_FIELDS = ("messages", "tools", "json_schema", "tool_choice", "max_tokens")
"""What two first review requests must share to match (paper 5.1, A.4: "messages, schemas,
tool choice, token cap, and model identifier"; reasoning settings and draws may differ), the
answering model's identifier besides."""

BASELINE = "baseline"
"""The outcome table's column of the baseline panel's condition."""

COMPARED = "compared"
"""The outcome table's column of the compared panel's condition."""


def paired_across(
    baseline: pd.DataFrame,
    compared: pd.DataFrame,
    baseline_keep: pd.DataFrame,
    compared_keep: pd.DataFrame,
) -> pd.DataFrame:
    """The outcome table of two conditions run in two panels, over the units both ran.

    Args:
        baseline: the baseline condition's runs (one per unit: ``unit``, ``cluster``,
            ``success``).
        compared: the compared condition's runs, in the other panel.
        baseline_keep: the baseline panel's Keep runs (``unit``, ``terminal_hash``).
        compared_keep: the compared panel's Keep runs.

    Returns:
        One row per unit both panels ran: ``unit``, ``cluster``, :data:`BASELINE` and
        :data:`COMPARED` (booleans), the input of
        :func:`~controlscope.analysis.paired_comparison`.

    Raises:
        ValueError: no unit in common; a unit whose Keep runs differ (or one without a
            terminal state), named with both hashes.
    """
    joined = baseline[[UNIT, CLUSTER, "success"]].merge(
        compared[[UNIT, "success"]], on=UNIT, suffixes=("_a", "_b")
    )
    if joined.empty:
        raise ValueError("the two panels have no unit in common")
    keeps = baseline_keep[[UNIT, "terminal_hash"]].merge(
        compared_keep[[UNIT, "terminal_hash"]], on=UNIT, how="right", suffixes=("_a", "_b")
    )
    hashes = keeps.set_index(UNIT)
    for unit in joined[UNIT]:
        left = hashes["terminal_hash_a"].get(unit) if unit in hashes.index else None
        right = hashes["terminal_hash_b"].get(unit) if unit in hashes.index else None
        if not isinstance(left, str) or not isinstance(right, str):
            raise ValueError(
                f"unit {unit} does not pair across the panels: a panel has no finished Keep "
                "run of it (no terminal state hash)"
            )
        if left != right:
            raise ValueError(
                f"unit {unit} does not pair across the panels: their Keep runs differ "
                f"(terminal state hash {_short(left)} vs {_short(right)})"
            )
    return pd.DataFrame(
        {
            UNIT: joined[UNIT],
            CLUSTER: joined[CLUSTER],
            BASELINE: joined["success_a"].astype(bool),
            COMPARED: joined["success_b"].astype(bool),
        }
    )


def activations(runs: pd.DataFrame) -> int:
    """The units whose run parted from its first schedule's (``diverged_at`` set): for B.2's
    protected Full, the tasks where protection withheld a review ("protection activates on
    eight tasks").

    Args:
        runs: one condition's runs (``unit``, ``diverged_at``).

    Returns:
        The count of units.
    """
    return int(runs.loc[runs["diverged_at"].notna(), UNIT].nunique())


def _short(value: object) -> str:
    return f"{value[:12]}…" if isinstance(value, str) else "none"


def first_review_request(run_dir: Path) -> dict[str, Any] | None:
    """A run's first review request as the matched-interface check compares it
    (:data:`MATCHED_FIELDS` and ``model``, the answering model's identifier); None when the
    run asked no reviewer or its log cannot be read."""
    try:
        for event in iter_events(run_dir):
            if isinstance(event, ModelCallEvent) and event.role == "reviewer":
                data = event.request.model_dump(mode="json", include=set(MATCHED_FIELDS))
                data["model"] = event.response.model if event.response is not None else None
                return data
    except (OSError, LogError):
        return None
    return None


def matched_requests(pairs: Iterable[tuple[Path, Path]]) -> tuple[int, int, str]:
    """How many paired runs' first review requests match (paper 5.1, A.4: "forty P2 first
    requests match in messages, schemas, tool choice, token cap, and model identifier").

    Args:
        pairs: the two run directories of each paired unit.

    Returns:
        The pairs whose requests match, the pairs where both asked a reviewer, and the first
        difference found (``unit field``), empty when none.
    """
    equal = total = 0
    first = ""
    for left, right in pairs:
        a, b = first_review_request(left), first_review_request(right)
        if a is None or b is None:
            continue
        total += 1
        found = first_difference(a, b)
        if found is None:
            equal += 1
        elif not first:
            first = f"{right.name}: {found[0]}"
    return equal, total, first
