"""A table cell's value: one metric of a panel's report (or of a replay's rows), computed with
the analysis' own functions (:func:`~controlscope.analysis.outcomes`,
:func:`~controlscope.analysis.paired_comparison`, :func:`~controlscope.analysis.cluster_bootstrap`,
:func:`~controlscope.analysis.goal_completion`, :func:`~controlscope.analysis.effort`); nothing
here is a statistic of its own.

A cell filters the report's runs (``Report.runs``: one row per planned run, eligible units only)
by its ``scope``, ``draw`` (Keep: draw 0, its one run reused by every draw), ``source``,
``split`` and ``tasks``. A cell that cannot be computed (no run matches, a unit without a
comparison) is ``n/a`` with the reason; it never raises once runs have been made.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from controlscope.analysis import (
    CLUSTER,
    Report,
    cluster_bootstrap,
    effort,
    goal_completion,
    outcomes,
    paired_comparison,
)
from controlscope.core import TaskError
from controlscope.envs import get_environment
from controlscope.experiments._across import (
    BASELINE,
    COMPARED,
    activations,
    matched_requests,
    paired_across,
)
from controlscope.experiments._config import Cell
from controlscope.experiments._derived import DERIVED_METRICS, derived
from controlscope.panel import KEEP, read_manifest, run_dir


@dataclass(frozen=True)
class CellValue:
    """A computed cell.

    Attributes:
        text: what the table shows (``13/20``, ``65.0%``, ``-15.0``, ``2/1``, ``n/a``).
        value: the number behind it (a share for ``successes``/``rate``/``tgc``/``sgc``, a
            share of units for ``difference``, a count otherwise); None for ``text`` and
            ``n/a``.
        low: the interval's lower end in the shown unit (% or percentage points); None
            without an interval.
        high: its upper end.
        note: why the cell is ``n/a``; empty otherwise.
        n: what the number counts over: the runs of a rate or count, the paired units of a
            comparison, the requests compared, the replayed rows; None for ``text`` and
            ``n/a``.
    """

    text: str
    value: float | None = None
    low: float | None = None
    high: float | None = None
    note: str = ""
    n: int | None = None

    @property
    def interval(self) -> str:
        """``[low, high]`` to one decimal, or empty."""
        if self.low is None or self.high is None:
            return ""
        return f"[{self.low:.1f}, {self.high:.1f}]"

    @property
    def shown(self) -> str:
        """The text with its interval in brackets (what tables print)."""
        return f"{self.text} {self.interval}" if self.interval else self.text


class _NotAvailable(Exception):
    """A cell that cannot be computed; its message is the reason."""


def cell_value(
    cell: Cell,
    reports: Mapping[str, Report],
    replays: pd.DataFrame | None = None,
    *,
    resamples: int = 10_000,
    seed: int = 0,
) -> CellValue:
    """Compute one cell.

    Args:
        cell: the cell.
        reports: each panel's report, by panel name.
        replays: every replay's rows (``replays.json``); None: none.
        resamples: cluster-bootstrap resamples of the intervals.
        seed: the bootstrap's seed.

    Returns:
        The value; ``n/a`` with the reason when it cannot be computed (never raises for a
        cell of a checked experiment).
    """
    try:
        return _compute(cell, reports, replays, resamples=resamples, seed=seed)
    except _NotAvailable as err:
        return CellValue(text="n/a", note=str(err))
    except (KeyError, ValueError) as err:
        return CellValue(text="n/a", note=f"{type(err).__name__}: {err}")


def _compute(
    cell: Cell,
    reports: Mapping[str, Report],
    replays: pd.DataFrame | None,
    *,
    resamples: int,
    seed: int,
) -> CellValue:
    if cell.metric == "text":
        return CellValue(text=cell.text or "")
    if cell.metric == "replays":
        return _replays(cell, replays)
    report = reports.get(cell.panel or "")
    if report is None:
        raise _NotAvailable(f"panel {cell.panel} has no report (it did not run)")
    if cell.metric in DERIVED_METRICS:
        return _derived(cell, report, reports)
    if cell.versus_panel is not None:
        return _across_panels(cell, report, reports, resamples=resamples, seed=seed)
    if cell.metric == "activations":
        runs = condition_runs(report, cell, cell.scope, cell.draw)
        count = activations(runs)
        return CellValue(text=str(count), value=float(count), n=len(runs))
    if cell.metric in ("difference", "wins_losses", "wins_losses_ties"):
        return _paired(cell, report, resamples=resamples, seed=seed)
    if cell.metric in ("tgc", "sgc"):
        return _goals(cell, report)
    runs = condition_runs(report, cell, cell.scope, cell.draw)
    if cell.metric in ("successes", "rate"):
        return _rate(cell, runs, resamples=resamples, seed=seed)
    if cell.metric == "sum":
        columns = [cell.column] if isinstance(cell.column, str) else list(cell.column or [])
        unknown = [c for c in columns if c not in runs.columns]
        if unknown:
            raise _NotAvailable(f"no run column {unknown[0]!r}")
        total = int(runs[columns].to_numpy().sum())
        return CellValue(text=f"{total:,}", value=float(total), n=len(runs))
    assert cell.metric == "within" and cell.k is not None
    count = int((effort(runs) <= cell.k).sum())
    return CellValue(text=str(count), value=float(count), n=len(runs))


def scoped_runs(report: Report, cell: Cell) -> pd.DataFrame:
    """The report's runs of eligible units that match the cell's ``source``, ``split`` and
    ``tasks`` (every scope and draw)."""
    runs = report.runs[~report.runs["unit"].isin(report.ineligible_units)]
    if cell.source is not None:
        runs = runs[runs["source_program"] == cell.source]
    if cell.split is not None:
        runs = runs[runs["task"].map(_splits(report)) == cell.split]
    if cell.tasks is not None:
        runs = runs[runs["task"].isin(cell.tasks) | runs["category"].isin(cell.tasks)]
    return runs


def _splits(report: Report) -> dict[str, str]:
    """Each task's split: its ``split`` metadata where its environment gives one (the apps'
    and AppWorld's ``test_normal``...), else the first part of its id (ALFWorld's cohort)."""
    env_name = read_manifest(report.panel).config.env
    return {task: _split(env_name, task) for task in report.runs["task"].unique()}


@functools.cache
def _split(env_name: str, task_id: str) -> str:
    try:
        split = get_environment(env_name).task(task_id).metadata.get("split")
    except (TaskError, ValueError, OSError):
        split = None
    return str(split) if split is not None else task_id.split("/")[0]


def condition_runs(report: Report, cell: Cell, scope: str, draw: int | str) -> pd.DataFrame:
    """The runs of one condition (Keep: its one run per unit, draw 0; ``draw="all"``: every
    draw of a reviewing scope)."""
    runs = scoped_runs(report, cell)
    chosen = runs[runs["scope"] == scope]
    if scope == KEEP or draw != "all":
        chosen = chosen[chosen["draw"] == (0 if scope == KEEP else draw)]
    if chosen.empty:
        raise _NotAvailable(f"no runs of {scope} draw {draw} match in panel {cell.panel}")
    return chosen


def _rate(cell: Cell, runs: pd.DataFrame, *, resamples: int, seed: int) -> CellValue:
    wins = runs["success"].astype(float).to_numpy()
    found = cluster_bootstrap(
        wins, runs[CLUSTER].to_numpy(), resamples=resamples, seed=seed, level=0.95
    )
    k, n = int(wins.sum()), len(wins)
    text = f"{k}/{n}" if cell.metric == "successes" else f"{100.0 * k / n:.1f}%"
    return CellValue(text=text, value=k / n, low=100.0 * found.low, high=100.0 * found.high, n=n)


def _paired(cell: Cell, report: Report, *, resamples: int, seed: int) -> CellValue:
    assert cell.versus is not None
    runs = scoped_runs(report, cell)
    for scope in (cell.versus, cell.scope):
        condition_runs(report, cell, scope, cell.draw)
    if cell.draw == "all":
        return _pooled_wins_losses(cell, runs)
    table = outcomes(runs, [cell.versus, cell.scope], cell.draw)
    return _compared(cell, table, cell.versus, cell.scope, resamples=resamples, seed=seed)


def _across_panels(
    cell: Cell, report: Report, reports: Mapping[str, Report], *, resamples: int, seed: int
) -> CellValue:
    """The cell's condition in its panel against ``versus`` (else the same scope) in
    ``versus_panel``, units paired across the two (:func:`paired_across`)."""
    if cell.metric not in ("difference", "wins_losses", "wins_losses_ties", "first_requests"):
        raise _NotAvailable(f"metric {cell.metric} does not pair panels")
    other = reports.get(cell.versus_panel or "")
    if other is None:
        raise _NotAvailable(f"panel {cell.versus_panel} has no report (it did not run)")
    there = cell.model_copy(update={"panel": cell.versus_panel})
    versus = cell.versus or cell.scope
    baseline = condition_runs(other, there, versus, cell.draw)
    compared = condition_runs(report, cell, cell.scope, cell.draw)
    table = paired_across(
        baseline,
        compared,
        condition_runs(other, there, KEEP, 0),
        condition_runs(report, cell, KEEP, 0),
    )
    if cell.metric == "first_requests":
        return _first_requests(table, baseline, compared, other, report)
    return _compared(cell, table, BASELINE, COMPARED, resamples=resamples, seed=seed)


def _derived(cell: Cell, report: Report, reports: Mapping[str, Report]) -> CellValue:
    """A derived cost cell (:mod:`controlscope.experiments._derived`): the cell's condition
    against ``versus`` (else its own scope) in ``versus_panel`` (else its own panel)."""
    other = reports.get(cell.versus_panel or cell.panel or "")
    if other is None:
        raise _NotAvailable(f"panel {cell.versus_panel} has no report (it did not run)")
    there = cell.model_copy(update={"panel": cell.versus_panel or cell.panel})
    baseline = condition_runs(other, there, cell.versus or cell.scope, cell.draw)
    compared = condition_runs(report, cell, cell.scope, cell.draw)
    columns = [cell.column] if isinstance(cell.column, str) else list(cell.column or [])
    try:
        text, value, n = derived(cell.metric, baseline, compared, columns, cell.k)
    except ValueError as err:
        raise _NotAvailable(str(err)) from None
    return CellValue(text=text, value=value, n=n)


def _first_requests(
    table: pd.DataFrame, baseline: pd.DataFrame, compared: pd.DataFrame, a: Report, b: Report
) -> CellValue:
    """``k/n``: the paired units whose first review requests match (:func:`matched_requests`)."""
    left, right = baseline.set_index("unit")["id"], compared.set_index("unit")["id"]
    pairs = [
        (run_dir(a.panel, left[unit]), run_dir(b.panel, right[unit])) for unit in table["unit"]
    ]
    equal, total, first = matched_requests(pairs)
    if total == 0:
        raise _NotAvailable("no paired unit asked a reviewer in both panels")
    return CellValue(text=f"{equal}/{total}", value=equal / total, note=first, n=total)


def _compared(
    cell: Cell, table: pd.DataFrame, a: str, b: str, *, resamples: int, seed: int
) -> CellValue:
    """Condition ``b`` against ``a`` in an outcome table, as the cell's metric shows it."""
    if cell.metric in ("wins_losses", "wins_losses_ties"):
        found = paired_comparison(table, a, b, resamples=None)
        ties = f"/{found.ties}" if cell.metric == "wins_losses_ties" else ""
        return CellValue(
            text=f"{found.wins}/{found.losses}{ties}", value=float(found.wins), n=len(table)
        )
    found = paired_comparison(table, a, b, resamples=resamples, seed=seed)
    assert found.interval is not None
    return CellValue(
        text=f"{100.0 * found.difference:+.1f}",
        value=found.difference,
        low=100.0 * found.interval.low,
        high=100.0 * found.interval.high,
        n=len(table),
    )


def _pooled_wins_losses(cell: Cell, runs: pd.DataFrame) -> CellValue:
    """Paired wins and losses summed over every draw of the cell's scope (a pooled
    ``difference`` has no paper estimator here: ``n/a``)."""
    assert cell.versus is not None
    if cell.metric != "wins_losses":
        raise _NotAvailable(f"a pooled {cell.metric} is not defined: give one draw")
    reviewing = runs[(runs["scope"] == cell.scope) & (runs["scope"] != KEEP)]
    draws = sorted({int(d) for d in reviewing["draw"]}) or [0]
    wins = losses = pairs = 0
    for draw in draws:
        table = outcomes(runs, [cell.versus, cell.scope], draw)
        found = paired_comparison(table, cell.versus, cell.scope, resamples=None)
        wins, losses, pairs = wins + found.wins, losses + found.losses, pairs + len(table)
    return CellValue(text=f"{wins}/{losses}", value=float(wins), n=pairs)


def _goals(cell: Cell, report: Report) -> CellValue:
    if cell.draw == "all":
        raise _NotAvailable(f"a pooled {cell.metric} is not defined: give one draw")
    runs = scoped_runs(report, cell)
    condition_runs(report, cell, cell.scope, cell.draw)
    by_template = runs.assign(**{CLUSTER: runs["template"]})
    table = outcomes(by_template, [cell.scope], cell.draw)
    found = goal_completion(table, cell.scope)
    share = found.tgc if cell.metric == "tgc" else found.sgc
    return CellValue(text=f"{100.0 * share:.2f}%", value=share, n=len(table))


def _replays(cell: Cell, replays: pd.DataFrame | None) -> CellValue:
    if replays is None or replays.empty:
        raise _NotAvailable(f"replay {cell.replay} has no rows (no operation to replay)")
    rows = replays[replays["replay"] == cell.replay]
    if cell.program is not None:
        rows = rows[rows["source_program"] == cell.program]
    if rows.empty:
        raise _NotAvailable(f"replay {cell.replay} has no rows for this cell")
    hits = int(rows[cell.field].fillna(False).astype(bool).sum())
    return CellValue(text=f"{hits}/{len(rows)}", value=hits / len(rows), n=len(rows))
