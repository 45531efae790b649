"""The runs behind each cell of a report's tables: which runs (and units) a count counts.

Each table's rows are made here as the table builders make them (:mod:`._tables`: the same
helpers, the same order, matched by the row's key columns), so a cell of a count holds exactly
the runs or units it counts: ``successes`` the runs that succeeded, ``wins`` the units the
compared scope won (paper eq. 4-5), ``replacements`` the runs that made one. A cell that is no
count (a label, a share, an interval, a token total) holds every run of its row.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import combinations
from typing import Any

import pandas as pd

from controlscope.analysis._paired import CLUSTER, UNIT
from controlscope.analysis._records import COUNTS, FALLBACK_COLUMNS
from controlscope.analysis._report import Report
from controlscope.analysis._tables import MISSING, by_condition, by_source, eligible, outcomes
from controlscope.panel import KEEP, condition_label


@dataclass(frozen=True)
class CellRuns:
    """The runs one cell of a report's table counts.

    Attributes:
        label: what they are, in a few words (``full-d0: successes``).
        runs: their run ids (paths under the panel's ``runs/``), in the report's order.
        units: the paired units the cell counts (wins, losses, ties), or the units of its
            runs.
    """

    label: str
    runs: tuple[str, ...]
    units: tuple[str, ...]


_Row = tuple[CellRuns, dict[str, CellRuns]]
"""A row's every run, and the cells that count fewer (by column)."""


def report_cells(built: Report) -> dict[str, list[dict[str, CellRuns]]]:
    """The runs behind every cell of ``built``'s tables.

    Args:
        built: a report (:func:`controlscope.analysis.report`).

    Returns:
        For each table of ``built.tables``, one mapping per row (in the table's order) from
        each of its columns to the cell's runs.

    Raises:
        ValueError: a table row this function does not make (the report and its cells
            disagree: a bug, never a panel's fault).
    """
    used = ["id", UNIT, "scope", "draw", "success", "status", "budget_exhausted"]
    used += ["provider_failure", "template", CLUSTER, "source_program", *COUNTS, *FALLBACK_COLUMNS]
    scored, _ = eligible(built.runs[used])  # the columns a cell selects by, nothing copied more
    makers = {
        "successes": lambda: _successes(scored, built.draws),
        "table1": lambda: _table1(scored, list(built.scopes), built.draws),
        "paired": lambda: _paired(scored, list(built.scopes), built.draws),
        "resources": lambda: _resources(scored, list(built.scopes), built.draws),
        "goals": lambda: _goals(scored, list(built.scopes), built.draws),
        "goal_gains": lambda: _goal_gains(scored, list(built.scopes), built.draws),
    }
    keys = {
        "successes": ("condition",),
        "table1": ("source", "draw"),
        "paired": ("source", "draw", "comparison"),
        "resources": ("draw", "scope"),
        "goals": ("condition",),
        "goal_gains": ("draw", "comparison"),
    }
    cells: dict[str, list[dict[str, CellRuns]]] = {}
    for name, table in built.tables.items():
        if table.empty or name not in makers:
            cells[name] = [{} for _ in range(len(table))]
            continue
        made = dict(makers[name]())
        cells[name] = [_row_cells(name, made, row, keys[name]) for row in _records(table)]
    return cells


def _records(table: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): v for k, v in r.items()} for r in table.to_dict(orient="records")]


def _row_cells(
    name: str, made: dict[tuple[Any, ...], _Row], row: dict[str, Any], key: tuple[str, ...]
) -> dict[str, CellRuns]:
    found = made.get(tuple(_plain(row[k]) for k in key))
    if found is None:
        raise ValueError(f"the {name} table has a row {[row[k] for k in key]} made elsewhere")
    every, counted = found
    return {column: counted.get(column, every) for column in row}


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _cell(label: str, runs: pd.DataFrame, units: pd.Series | None = None) -> CellRuns:
    chosen = runs[UNIT] if units is None else units
    return CellRuns(label, tuple(str(i) for i in runs["id"]), tuple(dict.fromkeys(chosen)))


def _condition(runs: pd.DataFrame, scope: str, draw: int) -> pd.DataFrame:
    """The runs of one condition (Keep's are its draw-0 runs, reused by every draw)."""
    return runs[(runs["scope"] == scope) & (runs["draw"] == (0 if scope == KEEP else draw))]


def _of_units(runs: pd.DataFrame, units: pd.Series) -> pd.DataFrame:
    return runs[runs[UNIT].isin(set(units))]


def _successes(scored: pd.DataFrame, draws: int) -> Iterator[tuple[tuple[Any, ...], _Row]]:
    for scope, draw, group in by_condition(scored):
        label = condition_label(scope, draw, draws)
        counted = {
            "successes": _cell(f"{label}: successes", group[group["success"]]),
            "missing": _cell(f"{label}: missing", group[group["status"].isin(MISSING)]),
            "budget_exhausted": _cell(
                f"{label}: budget exhausted", group[group["budget_exhausted"]]
            ),
            "provider_failures": _cell(
                f"{label}: provider failures", group[group["provider_failure"]]
            ),
        }
        yield (label,), (_cell(f"{label}: every run", group), counted)


def _pair(scored: pd.DataFrame, units: pd.Series, a: str, b: str, draw: int) -> pd.DataFrame:
    """The runs of ``units`` under conditions ``a`` and ``b`` of reviewer draw ``draw``."""
    both = pd.concat([_condition(scored, a, draw), _condition(scored, b, draw)])
    return _of_units(both, units).drop_duplicates("id")


def _table1(
    scored: pd.DataFrame, scopes: list[str], draws: int
) -> Iterator[tuple[tuple[Any, ...], _Row]]:
    top = scopes[-1]
    for draw in range(draws):
        table = outcomes(scored, scopes, draw)
        for source, group in by_source(table):
            where = f"P{source + 1}, draw {draw}"
            runs = pd.concat([_condition(scored, s, draw) for s in scopes])
            every = _cell(f"{where}: every run", _of_units(runs, group[UNIT]))
            counted = {
                scope: _cell(
                    f"{where}: {scope} successes",
                    _of_units(_condition(scored, scope, draw), group.loc[group[scope], UNIT]),
                )
                for scope in scopes
            }
            if top != KEEP:
                for name, chosen in (
                    ("wins", group[top] & ~group[KEEP]),
                    ("losses", ~group[top] & group[KEEP]),
                ):
                    units = group.loc[chosen, UNIT]
                    runs_of = _pair(scored, units, KEEP, top, draw)
                    counted[f"{top}_{name}"] = _cell(f"{where}: {top} {name}", runs_of, units)
            yield (f"P{source + 1}", draw), (every, counted)


def _paired(
    scored: pd.DataFrame, scopes: list[str], draws: int
) -> Iterator[tuple[tuple[Any, ...], _Row]]:
    for draw in range(draws):
        table = outcomes(scored, scopes, draw)
        groups = [(f"P{s + 1}", g) for s, g in by_source(table)]
        if len(groups) > 1:
            groups.append(("all", table))
        for source, group in groups:
            for a, b in combinations(scopes, 2):
                where = f"{b}-{a}, {source}, draw {draw}"
                every = _cell(f"{where}: every unit", _pair(scored, group[UNIT], a, b, draw))
                counted = {}
                for name, chosen in (
                    ("wins", group[b] & ~group[a]),
                    ("losses", ~group[b] & group[a]),
                    ("ties", group[b] == group[a]),
                ):
                    units = group.loc[chosen, UNIT]
                    counted[name] = _cell(
                        f"{where}: {name}", _pair(scored, units, a, b, draw), units
                    )
                yield (source, draw, f"{b}-{a}"), (every, counted)


def _resources(
    scored: pd.DataFrame, scopes: list[str], draws: int
) -> Iterator[tuple[tuple[Any, ...], _Row]]:
    for draw in range(draws):
        for scope in scopes:
            chosen = _condition(scored, scope, draw)
            where = f"{scope}, draw {draw}"
            counted = {
                name: _cell(
                    f"{where}: runs with {name.replace('_', ' ')}", chosen[chosen[name] > 0]
                )
                for name in (*COUNTS, *FALLBACK_COLUMNS)
            }
            yield (draw, scope), (_cell(f"{where}: every run", chosen), counted)


def _goal_rows(scored: pd.DataFrame) -> pd.DataFrame:
    return scored.assign(**{CLUSTER: scored["template"]})


def _goals(
    scored: pd.DataFrame, scopes: list[str], draws: int
) -> Iterator[tuple[tuple[Any, ...], _Row]]:
    by_template = _goal_rows(scored)
    for draw in range(draws):
        table = outcomes(by_template, scopes, draw)
        for scope in scopes:
            if scope == KEEP and draw > 0:
                continue
            label = condition_label(scope, draw, draws)
            runs = _condition(scored, scope, draw)
            solved = table.loc[table[scope], UNIT]
            whole = table[scope].groupby(table[CLUSTER]).transform("all")
            counted = {
                "tasks_solved": _cell(f"{label}: tasks solved", _of_units(runs, solved)),
                "scenarios_solved": _cell(
                    f"{label}: tasks of scenarios solved whole",
                    _of_units(runs, table.loc[whole.astype(bool), UNIT]),
                ),
            }
            yield (label,), (_cell(f"{label}: every run", runs), counted)


def _goal_gains(
    scored: pd.DataFrame, scopes: list[str], draws: int
) -> Iterator[tuple[tuple[Any, ...], _Row]]:
    by_template = _goal_rows(scored)
    for draw in range(draws):
        table = outcomes(by_template, scopes, draw)
        for scope in scopes[1:]:
            where = f"{scope}-{KEEP}, draw {draw}"
            every = _cell(f"{where}: every unit", _pair(scored, table[UNIT], KEEP, scope, draw))
            counted = {}
            for name, chosen in (
                ("wins", table[scope] & ~table[KEEP]),
                ("losses", ~table[scope] & table[KEEP]),
            ):
                units = table.loc[chosen, UNIT]
                counted[name] = _cell(
                    f"{where}: {name}", _pair(scored, units, KEEP, scope, draw), units
                )
            yield (draw, f"{scope}-{KEEP}"), (every, counted)
