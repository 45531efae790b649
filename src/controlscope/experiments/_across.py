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

import pandas as pd

from controlscope.analysis import CLUSTER, UNIT

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
