"""An experiment's results written from its output folder: each table in the paper's shape
(Markdown and CSV, pandas), its figures (the analysis' Figure 2 functions; Figure 3's
candidate scatter with matplotlib), ``paper-vs-ours.md`` and ``report.md``.

Everything is read back from ``OUT/`` (the panels' folders, the replays' rows,
``experiment.json``), so the results can be written again without running anything.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from controlscope.analysis import Report, effort_figure, report, tokens_figure
from controlscope.core import escape_untrusted
from controlscope.experiments._config import Cell, Experiment, FigureEntry, Table
from controlscope.experiments._metrics import CellValue, cell_value
from controlscope.panel import read_manifest

TABLES_DIR = "tables"
FIGURES_DIR = "figures"
PAPER_VS_OURS = "paper-vs-ours.md"
REPORT_FILE = "report.md"


@dataclass(frozen=True)
class Written:
    """What :func:`write_tables` and :func:`write_figures` wrote.

    Attributes:
        tables: each table's Markdown file, by name.
        figures: each figure file, by name.
        values: each table's computed cells (rows of :class:`CellValue`).
        notes: why cells are ``n/a``, one line each.
    """

    tables: dict[str, Path]
    figures: dict[str, Path]
    values: dict[str, list[list[CellValue]]]
    notes: list[str]


def panel_reports(
    out: Path, experiment: Experiment, *, resamples: int, seed: int
) -> dict[str, Report]:
    """Each panel's report (written into its panel folder's ``report/``), by panel name;
    panels without a folder are left out."""
    found = {}
    for entry in experiment.panels:
        folder = out / "panels" / entry.name
        if (folder / "panel.json").is_file():
            found[entry.name] = report(folder, resamples=resamples, seed=seed)
    return found


def table_values(
    table: Table, reports: Mapping[str, Report], replays: pd.DataFrame, *, resamples: int, seed: int
) -> list[list[CellValue]]:
    """Every cell of ``table``, row by row."""
    return [
        [cell_value(c, reports, replays, resamples=resamples, seed=seed) for c in row.cells]
        for row in table.rows
    ]


def write_table(
    table: Table, values: list[list[CellValue]], folder: Path
) -> tuple[Path, list[str]]:
    """Write ``NAME.md`` and ``NAME.csv``; return the Markdown file and the ``n/a`` notes."""
    folder.mkdir(parents=True, exist_ok=True)
    shown = pd.DataFrame(
        [
            [row.label, *(v.shown for v in cells)]
            for row, cells in zip(table.rows, values, strict=True)
        ],
        columns=["", *table.columns],
    )
    shown.to_csv(folder / f"{table.name}.csv", index=False)
    notes = [
        f"{table.name}, {row.label}, {column}: n/a: {v.note}"
        for row, cells in zip(table.rows, values, strict=True)
        for column, v in zip(table.columns, cells, strict=True)
        if v.note
    ]
    lines = [f"## {table.title}", "", shown.to_markdown(index=False), ""]
    if table.notes:
        lines += [table.notes, ""]
    lines += [f"- {escape_untrusted(n)}" for n in notes]
    path = folder / f"{table.name}.md"
    path.write_text("\n".join(lines).rstrip() + "\n", encoding="utf-8")
    return path, notes


def write_figure(
    figure: FigureEntry, reports: Mapping[str, Report], replays: pd.DataFrame, folder: Path
) -> list[Path]:
    """Write one figure's PNGs: a panel's effort and token figures (paper Figure 2), or a
    replay's candidate scatter (Figure 3). Nothing when its panel did not run."""
    folder.mkdir(parents=True, exist_ok=True)
    if figure.kind == "candidates":
        rows = replays[replays["replay"] == figure.replay]
        return [candidates_figure(rows, folder / f"{figure.name}.png")]
    found = reports.get(figure.panel or "")
    if found is None:
        return []
    runs = found.runs[~found.runs["unit"].isin(found.ineligible_units)]
    if runs.empty:
        return []
    budget = _budget(found)
    return [
        effort_figure(runs, found.draws, budget, folder / f"{figure.name}_effort.png"),
        tokens_figure(runs, found.draws, folder / f"{figure.name}_tokens.png"),
    ]


def _budget(found: Report) -> int:
    return read_manifest(found.panel).config.budgets.max_calls or 100


def candidates_figure(rows: pd.DataFrame, path: Path) -> Path:
    """The paper's Figure 3: one point per replayed replacement, at its call index, one line
    per replayed run (program); filled where the goal was reached, a cross where it was not,
    a ring where it was reached without the block finishing."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 3.5), dpi=100)
    ax = fig.subplots()
    runs = list(dict.fromkeys(rows["run"].tolist()))
    for y, run in enumerate(runs):
        mine = rows[rows["run"] == run]
        reached = mine["goal_reached"].fillna(False).astype(bool)
        finished = mine["block_finished"].fillna(False).astype(bool)
        x = mine["call_index"].astype(float)
        ax.scatter(x[reached & finished], [y] * int((reached & finished).sum()), marker="o")
        ax.scatter(x[reached & ~finished], [y] * int((reached & ~finished).sum()), marker="o",
                   facecolors="none", edgecolors="C0")  # fmt: skip
        ax.scatter(x[~reached], [y] * int((~reached).sum()), marker="x", color="C3")
    ax.set_yticks(range(len(runs)), [f"Program {i + 1}" for i in range(len(runs))])
    ax.set_xlabel("call index of the replacement")
    ax.set_title("Frozen candidate replays: goal reached (o), not reached (x)")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    return path


FRACTION_METRICS = ("successes", "first_requests", "replays", "units_more")
"""Metrics whose text is ``k/n``: the paper's value then says its own n."""


def paper_size(cell: Cell) -> int | None:
    """What the paper's value of ``cell`` counts over: ``paper_n``, else the n of a ``k/n``
    the paper prints for a :data:`FRACTION_METRICS` cell; None when neither says it."""
    if cell.paper_n is not None:
        return cell.paper_n
    parts = (cell.paper or "").split("/")
    if cell.metric in FRACTION_METRICS and len(parts) == 2 and parts[1].strip().isdigit():
        return int(parts[1])
    return None


def paper_vs_ours(experiment: Experiment, values: Mapping[str, list[list[CellValue]]]) -> str:
    """``paper-vs-ours.md``: every cell carrying the paper's value, next to ours, each with
    the size it counts over (the paper's n and ours: a quick-size 0/1 is no estimate of a
    paper's 13/20), and whether the sizes differ."""
    lines = [
        f"# {experiment.experiment.title}: the paper's numbers and ours",
        "",
        "n: what each number counts over (runs, paired units, requests, replays); where the "
        "paper's n and ours differ, the numbers are of different sizes (a quick or partial "
        "run) and are not comparable as counts.",
        "",
        "| table | row | column | paper | paper n | ours | our n | sizes | our 95% interval |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for table in experiment.tables:
        for row, cells in zip(table.rows, values[table.name], strict=True):
            for column, cell, value in zip(table.columns, row.cells, cells, strict=True):
                if cell.paper is None:
                    continue
                theirs = paper_size(cell)
                parts = [
                    table.name,
                    row.label,
                    column,
                    cell.paper,
                    _size(theirs),
                    value.text,
                    _size(value.n),
                    _sizes(theirs, value.n),
                    value.interval,
                ]
                lines.append("| " + " | ".join(_md(p) for p in parts) + " |")
    return "\n".join(lines) + "\n"


def _size(n: int | None) -> str:
    return "?" if n is None else str(n)


def _sizes(paper: int | None, ours: int | None) -> str:
    """Whether the two sizes are the same: ``same``, ``differ``, or ``unknown``."""
    if paper is None or ours is None:
        return "unknown"
    return "same" if paper == ours else "differ"


def _md(text: str) -> str:
    return escape_untrusted(text).replace("|", "\\|")


def report_document(
    experiment: Experiment,
    meta: Mapping[str, Any],
    unserved: list[str],
    problems: list[str],
    tables: Mapping[str, Path],
    figures: Mapping[str, Path],
) -> str:
    """``report.md``: the experiment, size, models, what the models could not serve and the
    problems, then every table and figure."""
    header = experiment.experiment
    models = ", ".join(f"{role} = {spec}" for role, spec in meta["models"].items())
    lines = [
        f"# {header.title}",
        "",
        f"- experiment: `{experiment.name}` (reproduces {header.reproduces})",
        f"- size: {meta['size']}",
        f"- models: {_md(models)}"
        + (f" at {_md(meta['base_url'])}" if meta.get("base_url") else ""),
        f"- needs: {header.needs}",
        "- the paper's numbers next to ours: [paper-vs-ours.md](paper-vs-ours.md)",
        "",
    ]
    if unserved:
        lines += ["## What the models could not serve", ""]
        lines += [f"- {_md(u)}" for u in unserved] + [""]
    if problems:
        lines += ["## Problems", ""]
        lines += [f"- {_md(p)}" for p in problems[:50]]
        if len(problems) > 50:
            lines.append(f"- ... and {len(problems) - 50} more (see each panel's report)")
        lines.append("")
    for path in tables.values():
        lines += [path.read_text(encoding="utf-8"), ""]
    for name, path in figures.items():
        lines += [f"![{name}]({FIGURES_DIR}/{path.name})", ""]
    return "\n".join(lines).rstrip() + "\n"
