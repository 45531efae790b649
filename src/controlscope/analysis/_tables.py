"""The report's tables, built from a panel's run table (:func:`read_panel`).

Counts keep small denominators visible (paper section 4): successes out of units, wins,
losses and ties; intervals are the cluster bootstrap's (the paper's estimator, section 5.1).
"""

from __future__ import annotations

from itertools import combinations
from typing import Any

import pandas as pd

from controlscope.analysis._goals import goal_completion
from controlscope.analysis._paired import CLUSTER, UNIT, paired_comparison
from controlscope.analysis._records import COUNTS, FALLBACK_COLUMNS, TOKEN_COLUMNS
from controlscope.panel import KEEP, condition_label

MISSING = ("missing", "corrupt", "no_verdict")
"""Statuses counted as missing (failures that stay in the denominator)."""


def eligible(runs: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The runs of units with no ineligible run, and the units left out."""
    bad = sorted(set(runs.loc[runs["status"] == "ineligible", "unit"]))
    return runs[~runs["unit"].isin(bad)], bad


def unshared_requests(runs: pd.DataFrame) -> list[str]:
    """Units whose branches do not share their first review request (paper A.4, 5.1: the
    first public inputs of every scope's branch must coincide), one line each."""
    branches = runs[(runs["scope"] != KEEP) & runs["request_hash"].notna()]
    lines = []
    for unit, hashes in branches.groupby("unit")["request_hash"]:
        if hashes.nunique() > 1:
            lines.append(f"{unit}: its branches' first review requests differ")
    return lines


def outcomes(runs: pd.DataFrame, scopes: list[str], draw: int) -> pd.DataFrame:
    """One row per unit: ``unit``, ``cluster``, ``source_program`` and one boolean column per
    scope for reviewer draw ``draw`` (Keep's is the unit's one Keep run, reused by every
    draw)."""
    keep = runs[runs["scope"] == KEEP].set_index("unit")
    table = pd.DataFrame(
        {
            UNIT: keep.index,
            CLUSTER: keep[CLUSTER].to_numpy(),
            "source_program": keep["source_program"].to_numpy(),
            KEEP: keep["success"].astype(bool).to_numpy(),
        }
    )
    for scope in scopes:
        if scope == KEEP:
            continue
        chosen = runs[(runs["scope"] == scope) & (runs["draw"] == draw)].set_index("unit")
        table[scope] = chosen["success"].reindex(table[UNIT]).fillna(False).astype(bool).to_numpy()
    return table


def by_condition(runs: pd.DataFrame) -> list[tuple[str, int, pd.DataFrame]]:
    """Each (scope, draw) of ``runs`` with its runs, in order of first appearance."""
    pairs = runs[["scope", "draw"]].drop_duplicates().to_numpy().tolist()
    return [
        (str(scope), int(draw), runs[(runs["scope"] == scope) & (runs["draw"] == draw)])
        for scope, draw in pairs
    ]


def by_source(table: pd.DataFrame) -> list[tuple[int, pd.DataFrame]]:
    """Each source program of an outcome table with its rows, in order."""
    sources = sorted(int(s) for s in table["source_program"].unique().tolist())
    return [(s, table[table["source_program"] == s]) for s in sources]


def successes(runs: pd.DataFrame, draws: int) -> pd.DataFrame:
    """Per condition: units, successes, missing runs, budget exhaustion, provider failures
    (all in the denominator, paper 3.2)."""
    rows = []
    for scope, draw, group in by_condition(runs):
        rows.append(
            {
                "condition": condition_label(scope, draw, draws),
                "units": len(group),
                "successes": int(group["success"].sum()),
                "success_pct": round(100.0 * group["success"].mean(), 1) if len(group) else 0.0,
                "missing": int(group["status"].isin(MISSING).sum()),
                "budget_exhausted": int(group["budget_exhausted"].sum()),
                "provider_failures": int(group["provider_failure"].sum()),
            }
        )
    return pd.DataFrame(rows)


def table1(
    runs: pd.DataFrame, scopes: list[str], draws: int, replace_boundary: str
) -> pd.DataFrame:
    """The paper's Table 1: per source program and reviewer draw, the replacement boundary,
    each scope's successes out of the units, and Full's paired wins and losses against Keep."""
    rows = []
    top = scopes[-1]
    for draw in range(draws):
        table = outcomes(runs, scopes, draw)
        for source, group in by_source(table):
            row: dict[str, Any] = {
                "source": f"P{source + 1}",
                "draw": draw,
                "replace": replace_boundary.capitalize(),
                "units": len(group),
            }
            row.update({scope: int(group[scope].sum()) for scope in scopes})
            if top != KEEP:
                row[f"{top}_wins"] = int((group[top] & ~group[KEEP]).sum())
                row[f"{top}_losses"] = int((~group[top] & group[KEEP]).sum())
            rows.append(row)
    return pd.DataFrame(rows)


def paired(
    runs: pd.DataFrame, scopes: list[str], draws: int, *, resamples: int, seed: int, level: float
) -> pd.DataFrame:
    """Paired differences of every pair of scopes (Arg-Keep, Full-Arg, Full-Keep, and Params
    where granted; paper eq. 4-5) per source program and reviewer draw, and over all source
    programs of a draw: wins, losses, ties, the difference and its cluster-bootstrap
    interval, in percentage points."""
    rows = []
    for draw in range(draws):
        table = outcomes(runs, scopes, draw)
        groups = [(f"P{s + 1}", g) for s, g in by_source(table)]
        if len(groups) > 1:
            groups.append(("all", table))
        for source, group in groups:
            for a, b in combinations(scopes, 2):
                found = paired_comparison(group, a, b, resamples=resamples, seed=seed, level=level)
                interval = found.interval
                rows.append(
                    {
                        "source": source,
                        "draw": draw,
                        "comparison": f"{b}-{a}",
                        "units": found.units,
                        "wins": found.wins,
                        "losses": found.losses,
                        "ties": found.ties,
                        "difference_pp": round(100.0 * found.difference, 1),
                        "ci_low_pp": round(100.0 * interval.low, 1) if interval else None,
                        "ci_high_pp": round(100.0 * interval.high, 1) if interval else None,
                        "clusters": interval.clusters if interval else None,
                    }
                )
    return pd.DataFrame(rows)


def resources(runs: pd.DataFrame, scopes: list[str], draws: int) -> pd.DataFrame:
    """Per reviewer draw and scope: runs, calls, reviews, patches, replacements, rejected
    proposals, fallbacks by kind, planner and reviewer tokens logical and uncached (paper A.5).
    The Keep runs are counted in every draw's rows (their logical totals) and marked reused
    after the first (no new model work: their uncached totals are zero there)."""
    sums = [*COUNTS, *FALLBACK_COLUMNS, *TOKEN_COLUMNS]
    rows = []
    for draw in range(draws):
        for scope in scopes:
            chosen = runs[
                (runs["scope"] == scope) & (runs["draw"] == (0 if scope == KEEP else draw))
            ]
            row: dict[str, Any] = {"draw": draw, "scope": scope, "runs": len(chosen)}
            row["keep_reused"] = scope == KEEP and draw > 0
            row.update({name: int(chosen[name].sum()) for name in sums})
            if row["keep_reused"]:
                row.update({name: 0 for name in TOKEN_COLUMNS if "_uncached_" in name})
            rows.append(row)
    return pd.DataFrame(rows)


def goals(
    runs: pd.DataFrame, scopes: list[str], draws: int, *, resamples: int, seed: int, level: float
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Task and scenario goal completion per condition (TGC, SGC), and paired TGC gains with
    template-cluster intervals (paper 5.3, A.2); empty tables when no template has more than
    one unit."""
    by_template = runs.assign(**{CLUSTER: runs["template"]})
    if by_template[by_template["scope"] == KEEP].groupby(CLUSTER).size().max() < 2:
        return pd.DataFrame(), pd.DataFrame()
    rows, gains = [], []
    for draw in range(draws):
        table = outcomes(by_template, scopes, draw)
        for scope in scopes:
            if scope == KEEP and draw > 0:
                continue
            found = goal_completion(table, scope)
            rows.append(
                {
                    "condition": condition_label(scope, draw, draws),
                    "tasks": found.tasks,
                    "tasks_solved": found.tasks_solved,
                    "tgc_pct": round(100 * found.tgc, 2),
                    "scenarios": found.scenarios,
                    "scenarios_solved": found.scenarios_solved,
                    "sgc_pct": round(100 * found.sgc, 2),
                }
            )
        for scope in scopes[1:]:
            found_pair = paired_comparison(
                table, KEEP, scope, resamples=resamples, seed=seed, level=level
            )
            interval = found_pair.interval
            assert interval is not None
            gains.append(
                {
                    "draw": draw,
                    "comparison": f"{scope}-{KEEP}",
                    "wins": found_pair.wins,
                    "losses": found_pair.losses,
                    "tgc_gain_pp": round(100 * found_pair.difference, 2),
                    "ci_low_pp": round(100 * interval.low, 2),
                    "ci_high_pp": round(100 * interval.high, 2),
                    "templates": interval.clusters,
                }
            )
    return pd.DataFrame(rows), pd.DataFrame(gains)
