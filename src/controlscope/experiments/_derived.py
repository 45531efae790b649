"""Derived cost and workload cells: one condition's summed run column against another's (paper
5.2, 6.1, 7).

The paper derives a few numbers from its totals rather than reporting them as counts:

* ``ratio``: the compared total over the baseline total ("Full gains two terminal successes
  over Keep with 29.7 times its output tokens", 5.2): ``29.7x``.
* ``change``: the compared total's relative change from the baseline total, computed from
  unrounded totals ("34.5% lower total output than Arg", 5.2; "23.4% fewer ... 81.1% fewer",
  6.1; "logged output falls 19.4%", 7): ``-34.5%``.
* ``gap_share``: the share of the baseline-minus-compared total gap held by the ``k`` units
  with the largest gaps ("concentrates 98.3% in two heating tasks", 5.2; the paper's two are
  the heating tasks where Arg's reviews were invalid): ``98.3%``.
* ``units_more``: the paired units where the compared condition's total exceeds the
  baseline's ("Full logs more output on 60 of 87 tasks", 5.2): ``60/87``.

Each takes two conditions' runs (``unit`` and the columns) and returns the cell's text, value
and n (what it counts over); a zero total, or no unit in common, raises ``ValueError`` with
the reason (the cell is then ``n/a``).
"""

from __future__ import annotations

import pandas as pd

from controlscope.analysis import UNIT

DERIVED_METRICS = ("ratio", "change", "gap_share", "units_more")
"""The metrics this module computes."""


def _totals(runs: pd.DataFrame, columns: list[str]) -> pd.Series:
    """Each unit's total of ``columns`` (a Series by unit)."""
    missing = [c for c in columns if c not in runs.columns]
    if missing:
        raise ValueError(f"no run column {missing[0]!r}")
    return runs.groupby(UNIT)[columns].sum().sum(axis=1).astype(float)


def derived(
    metric: str, baseline: pd.DataFrame, compared: pd.DataFrame, columns: list[str], k: int | None
) -> tuple[str, float, int]:
    """One derived cell of ``compared`` against ``baseline``.

    Args:
        metric: one of :data:`DERIVED_METRICS`.
        baseline: the baseline condition's runs (``unit``, the columns).
        compared: the compared condition's runs.
        columns: the run columns summed (``planner_logical_output``...).
        k: ``gap_share``'s number of units (the paper's "two heating tasks": 2).

    Returns:
        (text, value, n): ``ratio`` ``29.7x`` (value the ratio, n the compared runs);
        ``change`` ``-34.5%`` (value the relative change); ``gap_share`` ``98.3%`` (value the
        share, n the paired units); ``units_more`` ``60/87`` (n the paired units).

    Raises:
        ValueError: an unknown metric or column, no unit in common, a zero baseline total
            (or, for ``gap_share``, a total gap that is not positive), ``k`` missing.
    """
    a, b = _totals(baseline, columns), _totals(compared, columns)
    if metric in ("ratio", "change"):
        if a.sum() == 0:
            raise ValueError(f"the baseline's total of {'+'.join(columns)} is 0")
        ratio = float(b.sum() / a.sum())
        if metric == "ratio":
            return f"{ratio:.1f}x", ratio, len(b)
        return f"{100.0 * (ratio - 1.0):+.1f}%", ratio - 1.0, len(b)
    common = a.index.intersection(b.index)
    if common.empty:
        raise ValueError("the two conditions have no unit in common")
    a, b = a[common], b[common]
    if metric == "units_more":
        more = int((b > a).sum())
        return f"{more}/{len(common)}", float(more), len(common)
    if metric != "gap_share":
        raise ValueError(f"metric {metric} is not a derived metric")
    if k is None:
        raise ValueError("gap_share needs k (how many units)")
    gap = a - b
    if gap.sum() <= 0:
        raise ValueError(f"the compared total is not below the baseline's (gap {gap.sum():g})")
    top = gap.sort_values(ascending=False, kind="stable").head(k)
    share = float(top.sum() / gap.sum())
    return f"{100.0 * share:.1f}%", share, len(common)
