"""Paired comparisons of binary terminal success between two conditions (paper section 3.2).

The paired unit is a task-source-program instance (or a branch point): every condition runs on
the same units, so a comparison counts the units each condition wins, loses and ties, and the
paired difference ``Δ = E[Y(b) - Y(a)]`` keeps every unit in the denominator, whatever ended it
(budgets, provider failures: paper section 3.2 and B).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from controlscope.analysis._bootstrap import ClusterInterval, cluster_bootstrap

UNIT = "unit"
"""The outcome table's column naming each paired unit."""

CLUSTER = "cluster"
"""The outcome table's column naming each unit's cluster (task category, scenario template,
scene): what the bootstrap resamples."""


@dataclass(frozen=True)
class PairedComparison:
    """Condition ``b`` against condition ``a`` over the same units.

    Attributes:
        a: the baseline condition (e.g. ``keep``).
        b: the compared condition (e.g. ``full``).
        units: paired units (both conditions observed).
        successes_a: units ``a`` solved.
        successes_b: units ``b`` solved.
        wins: units ``b`` solved and ``a`` did not.
        losses: units ``a`` solved and ``b`` did not.
        ties: units with the same outcome.
        difference: ``(successes_b - successes_a) / units``, a share (0.1 is 10 points).
        interval: the cluster-bootstrap interval of ``difference``, when asked for.
    """

    a: str
    b: str
    units: int
    successes_a: int
    successes_b: int
    wins: int
    losses: int
    ties: int
    difference: float
    interval: ClusterInterval | None = None


def check_outcomes(outcomes: pd.DataFrame, conditions: list[str]) -> None:
    """Check an outcome table: one row per unit, a cluster per unit, boolean outcomes.

    Raises:
        ValueError: a missing column, a repeated unit, a missing cluster or outcome, or an
            outcome that is not boolean.
    """
    missing = [c for c in (UNIT, CLUSTER, *conditions) if c not in outcomes.columns]
    if missing:
        raise ValueError(f"the outcome table has no column {missing}")
    if outcomes[UNIT].duplicated().any():
        repeated = outcomes.loc[outcomes[UNIT].duplicated(), UNIT].tolist()[:5]
        raise ValueError(f"units appear more than once: {repeated}")
    if outcomes[[CLUSTER, *conditions]].isna().any().any():
        raise ValueError("a unit has no cluster or no outcome; every unit must have both")
    for condition in conditions:
        if outcomes[condition].dtype != bool:
            raise ValueError(f"outcomes of {condition!r} must be booleans (success or not)")


def paired_comparison(
    outcomes: pd.DataFrame,
    a: str,
    b: str,
    *,
    resamples: int | None = 10_000,
    seed: int = 0,
    level: float = 0.95,
) -> PairedComparison:
    """Compare condition ``b`` with ``a`` unit by unit (paper eq. 4-5).

    Args:
        outcomes: one row per unit: ``unit``, ``cluster`` and one boolean column per condition.
        a: the baseline condition's column.
        b: the compared condition's column.
        resamples: bootstrap resamples of the clusters (None for no interval).
        seed: the bootstrap's seed.
        level: the interval's coverage.

    Returns:
        The counts, the paired difference and (optionally) its cluster-bootstrap interval.

    Raises:
        ValueError: see :func:`check_outcomes`; or no units.
    """
    check_outcomes(outcomes, [a, b])
    if outcomes.empty:
        raise ValueError("no units to compare")
    ya, yb = outcomes[a].to_numpy(), outcomes[b].to_numpy()
    diffs = yb.astype(np.int64) - ya.astype(np.int64)
    interval = None
    if resamples is not None:
        interval = cluster_bootstrap(
            diffs, outcomes[CLUSTER].to_numpy(), resamples=resamples, seed=seed, level=level
        )
    return PairedComparison(
        a=a,
        b=b,
        units=len(outcomes),
        successes_a=int(ya.sum()),
        successes_b=int(yb.sum()),
        wins=int((diffs > 0).sum()),
        losses=int((diffs < 0).sum()),
        ties=int((diffs == 0).sum()),
        difference=float(diffs.mean()),
        interval=interval,
    )
