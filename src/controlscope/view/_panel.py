"""A panel as the viewer shows it: the report's tables (built by
:func:`controlscope.analysis.report`, never recomputed here) with every cell linked to the runs
it counts (:func:`controlscope.analysis.report_cells`), and the paired units with their runs'
verdicts (paper 3.2, 4, 5.1, A.5, B). A unit's runs side by side are
:func:`controlscope.view._branches.side_by_side`.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from controlscope.analysis import TABLE_TITLES, CellRuns, Report, report, report_cells
from controlscope.panel import KEEP, PanelError, condition_label
from controlscope.view._folders import Target


@dataclass(frozen=True)
class TableCell:
    """One cell of a report's table.

    Attributes:
        text: the value as shown.
        cell: the cell's id (``TABLE/ROW/COLUMN``), what its link names.
        runs: how many runs it links to.
        number: whether the value is a number (aligned right).
    """

    text: str
    cell: str
    runs: int
    number: bool = False


@dataclass(frozen=True)
class TableView:
    """One table of the report.

    Attributes:
        name: its name (``successes``, ``table1``...).
        title: its title.
        columns: its columns.
        rows: its rows, one cell per column.
    """

    name: str
    title: str
    columns: list[str]
    rows: list[list[TableCell]]


@dataclass(frozen=True)
class RunCell:
    """One run of a unit, as the units table shows it.

    Attributes:
        run_id: the run's id (its path under ``runs/``).
        status: ``done``, ``ineligible``, ``missing``, ``corrupt`` or ``no_verdict`` (the
            report's).
        success: its verdict (None: no verdict).
    """

    run_id: str
    status: str
    success: bool | None


@dataclass(frozen=True)
class UnitRow:
    """One paired unit: its runs by condition.

    Attributes:
        unit: the unit's id (``TASK/sSEED/pSOURCE``).
        task: its task.
        runs: its runs by condition label (``keep``, ``full-d0``...).
    """

    unit: str
    task: str
    runs: dict[str, RunCell]


@dataclass
class PanelPage:
    """A panel folder as the viewer shows it.

    Attributes:
        folder: the panel folder.
        report: the report (None: it could not be built; ``problems`` says why).
        tables: the report's tables, in the report's order.
        cells: the runs behind each cell, by cell id.
        conditions: the condition labels, Keep first.
        units: every paired unit of the plan.
        planned: runs planned.
        finished: runs finished (recorded, whatever their verdict).
        problems: what could not be read (the manifest, the report), each one sentence.
        notes: the report's own list of runs missing, corrupt, without a verdict or
            ineligible.
        figures: the report's figures (paper Figure 2) as ``data:`` URLs of PNGs, by name.
        complete: whether every planned run has finished (and the report was built).
    """

    folder: Path
    report: Report | None = None
    tables: list[TableView] = field(default_factory=list)
    cells: dict[str, CellRuns] = field(default_factory=dict)
    conditions: list[str] = field(default_factory=list)
    units: list[UnitRow] = field(default_factory=list)
    planned: int = 0
    finished: int = 0
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    figures: dict[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """Whether every planned run has finished."""
        return self.report is not None and self.finished == self.planned


def read_panel_page(target: Target) -> PanelPage:
    """Build a panel's page: its report, the runs behind each cell, its units.

    Args:
        target: a panel folder (``target.kind == "panel"``).

    Returns:
        The page; a manifest or report that cannot be read or built is in ``problems``.
    """
    page = PanelPage(folder=target.path)
    if target.problem is not None:
        page.problems.append(f"this panel cannot be read: {target.problem}")
        return page
    try:
        built = report(target.path, write=False)
    except (PanelError, OSError, ValueError, KeyError) as err:
        page.problems.append(f"this panel's report cannot be built: {type(err).__name__}: {err}")
        return page
    page.report = built
    page.notes = [*built.problems, *(f"{u}: ineligible" for u in built.ineligible_units)]
    runs = built.runs
    page.planned = len(runs)
    page.finished = int((~runs["status"].isin(["missing"])).sum())
    page.conditions = [
        condition_label(s, d, built.draws)
        for s in built.scopes
        for d in (range(1) if s == KEEP else range(built.draws))
    ]
    cells = report_cells(built)
    for name, title in TABLE_TITLES.items():
        table = built.tables.get(name)
        if table is not None and not table.empty:
            page.tables.append(_table(name, title, table, cells[name], page.cells))
    page.units = _units(runs, built.draws)
    page.figures = {
        name: "data:image/png;base64," + base64.b64encode(image).decode("ascii")
        for name, image in built.figure_images().items()
    }
    return page


def _table(
    name: str,
    title: str,
    table: pd.DataFrame,
    cells: list[dict[str, CellRuns]],
    by_id: dict[str, CellRuns],
) -> TableView:
    columns = [str(c) for c in table.columns]
    rows = []
    for index, (values, row_cells) in enumerate(
        zip(table.itertuples(index=False), cells, strict=True)
    ):
        row = []
        for column, value in zip(columns, values, strict=True):
            cell_id = f"{name}/{index}/{column}"
            found = row_cells.get(column)
            if found is not None:
                by_id[cell_id] = found
            count = len(found.runs) if found else 0
            row.append(TableCell(_text(value), cell_id, count, _is_number(value)))
        rows.append(row)
    return TableView(name, title, columns, rows)


def _is_number(value: Any) -> bool:
    value = value.item() if hasattr(value, "item") else value
    return isinstance(value, int | float) and not isinstance(value, bool)


def _text(value: Any) -> str:
    """A table's value as text: integers without a point, missing values as a dash."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if hasattr(value, "item"):
        return _text(value.item())
    if isinstance(value, float):
        return f"{value:g}" if value == int(value) else str(value)
    return str(value)


def _units(runs: pd.DataFrame, draws: int) -> list[UnitRow]:
    units: dict[str, UnitRow] = {}
    columns = ["id", "unit", "task", "scope", "draw", "status", "success"]
    for run_id, unit, task, scope, draw, status, success in runs[columns].to_numpy().tolist():
        row = units.setdefault(str(unit), UnitRow(str(unit), str(task), {}))
        label = condition_label(str(scope), int(draw), draws)
        verdict = bool(success) if status == "done" else None
        row.runs[label] = RunCell(str(run_id), str(status), verdict)
    return list(units.values())
