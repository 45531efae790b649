"""Tests of controlscope.analysis: paired counts, the cluster bootstrap, goal completion.

The bootstrap is checked against the paper's own filesystem intervals (section 5.1): seven task
categories of sizes 3, 3, 4, 2, 3, 3, 2 and the reported P2 Full-Keep intervals.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from controlscope.analysis import (
    cluster_bootstrap,
    goal_completion,
    paired_comparison,
)

CATEGORIES = {
    "desktop": 3,
    "desktop_template": 3,
    "file_context": 4,
    "file_property": 2,
    "legal_document": 3,
    "papers": 3,
    "student_database": 2,
}


def filesystem_panel(full_minus_keep: dict[str, int]) -> pd.DataFrame:
    """20 units in the paper's seven categories; ``full`` wins (+n) or loses (-n) n units of a
    category against ``keep``, which solves half of each category's other units."""
    rows = []
    for category, size in CATEGORIES.items():
        change = full_minus_keep.get(category, 0)
        for i in range(size):
            keep = i % 2 == 0
            full = keep
            if change > 0 and i < change:
                keep, full = False, True
            elif change < 0 and i < -change:
                keep, full = True, False
            rows.append(
                {"unit": f"{category}/{i}", "cluster": category, "keep": keep, "full": full}
            )
    return pd.DataFrame(rows)


@pytest.mark.parametrize(
    ("differences", "low", "high"),
    [
        ({"student_database": 1, "legal_document": -1}, -14.3, 16.7),
        ({"file_context": 1, "student_database": 2}, 0.0, 38.9),
        (
            {"desktop_template": 1, "file_context": 1, "student_database": 1, "legal_document": -1},
            -10.0,
            27.8,
        ),
    ],
)
def test_the_papers_filesystem_intervals(
    differences: dict[str, int], low: float, high: float
) -> None:
    panel = filesystem_panel(differences)
    result = paired_comparison(panel, "keep", "full", resamples=10_000, seed=0)
    assert result.interval is not None
    assert result.interval.low * 100 == pytest.approx(low, abs=0.05)
    assert result.interval.high * 100 == pytest.approx(high, abs=0.05)
    assert result.units == 20 and result.interval.clusters == 7
    assert result.wins == sum(d for d in differences.values() if d > 0)
    assert result.losses == -sum(d for d in differences.values() if d < 0)
    assert result.difference == pytest.approx(sum(differences.values()) / 20)


def test_the_low_end_moves_only_by_monte_carlo_noise() -> None:
    panel = filesystem_panel(
        {"desktop_template": 1, "file_context": 1, "student_database": 1, "legal_document": -1}
    )
    lows = {
        round(paired_comparison(panel, "keep", "full", seed=s).interval.low * 100, 1)  # type: ignore[union-attr]
        for s in range(8)
    }
    assert lows <= {-10.0, -9.5} and -10.0 in lows


def test_one_unit_per_cluster_agrees_with_scipy_percentile_bootstrap() -> None:
    rng = np.random.default_rng(7)
    values = rng.integers(-1, 2, size=60).astype(float)
    ours = cluster_bootstrap(values, np.arange(60), resamples=20_000, seed=1)
    theirs = stats.bootstrap(
        (values,), np.mean, n_resamples=20_000, method="percentile", random_state=1
    ).confidence_interval
    assert ours.low == pytest.approx(theirs.low, abs=0.02)
    assert ours.high == pytest.approx(theirs.high, abs=0.02)


def test_the_interval_is_seeded_and_resamples_whole_clusters() -> None:
    values = [1, 1, 1, 1, 0, 0, 0, 0]
    grouped = ["a", "a", "a", "a", "b", "b", "c", "d"]
    clustered = cluster_bootstrap(values, grouped, seed=3)
    assert clustered == cluster_bootstrap(values, grouped, seed=3)
    assert clustered != cluster_bootstrap(values, grouped, seed=4)
    # The four wins of cluster "a" are drawn together, so resamples vary far more than when
    # each unit is drawn alone: a draw without "a" has no win at all.
    alone = cluster_bootstrap(values, list(range(8)), seed=3)
    assert clustered.low == 0.0 and alone.low > 0.0
    assert clustered.high - clustered.low > alone.high - alone.low
    same = cluster_bootstrap([0.5] * 6, list("aabbcc"), resamples=50)
    assert same.low == same.high == 0.5


def test_bad_inputs_are_refused() -> None:
    with pytest.raises(ValueError, match="equal length"):
        cluster_bootstrap([1, 0], ["a"])
    with pytest.raises(ValueError, match="level"):
        cluster_bootstrap([1], ["a"], level=1.5)
    panel = filesystem_panel({})
    with pytest.raises(ValueError, match="no column"):
        paired_comparison(panel, "keep", "arg")
    with pytest.raises(ValueError, match="booleans"):
        paired_comparison(panel.assign(full=panel["full"].astype(int)), "keep", "full")
    twice = pd.concat([panel, panel.iloc[:1]])
    with pytest.raises(ValueError, match="more than once"):
        paired_comparison(twice, "keep", "full")
    no_cluster = panel.astype({"cluster": object})
    no_cluster.loc[0, "cluster"] = None
    with pytest.raises(ValueError, match="no cluster"):
        paired_comparison(no_cluster, "keep", "full")


def test_goal_completion_counts_tasks_and_whole_scenarios() -> None:
    outcomes = pd.DataFrame(
        {
            "unit": ["t1/1", "t1/2", "t1/3", "t2/1", "t2/2", "t2/3", "t3/1", "t3/2", "t3/3"],
            "cluster": ["t1"] * 3 + ["t2"] * 3 + ["t3"] * 3,
            "keep": [True, True, True, True, False, True, False, False, False],
        }
    )
    result = goal_completion(outcomes, "keep")
    assert (result.tasks, result.tasks_solved, result.scenarios, result.scenarios_solved) == (
        9,
        5,
        3,
        1,
    )
    assert result.tgc == pytest.approx(5 / 9) and result.sgc == pytest.approx(1 / 3)
