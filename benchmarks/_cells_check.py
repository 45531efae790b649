"""Every determined cell of an experiment's tables, computed again from the panel folders'
files alone (``panel.json``, each run's ``panel_run.json`` and ``summary.json``), without the
analysis package, and compared with the published tables (``tables/NAME.csv``).

Checked: ``successes`` (``k/n``), ``wins_losses`` (``W/L``), ``wins_losses_ties``
(``W/L/T``), ``difference`` (percentage points to one decimal), ``activations``, ``sum``
of the summaries' counts, token totals and fallbacks, and the derived cost cells (``ratio``,
``change``, ``gap_share``, ``units_more`` of two conditions' summed columns); within a panel
or across two
(``versus_panel``: units paired by id, their Keep runs by terminal state hash); and
``replays`` (a replay's rows whose field is true, from ``replays/NAME/replays.json``). Other
metrics (intervals, ``within``, TGC/SGC, request matching, text) are not checked. A
published ``n/a`` where this computes a value is an undefined cell.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlscope.experiments import Cell, Experiment

CHECKED = (
    "successes",
    "wins_losses",
    "wins_losses_ties",
    "difference",
    "activations",
    "sum",
    "ratio",
    "change",
    "gap_share",
    "units_more",
    "replays",
)
"""The metrics this module recomputes."""


@dataclass
class Tally:
    """What a check found.

    Attributes:
        checked: cells recomputed and compared.
        wrong: cells whose published value differs, one line each.
        undefined: published ``n/a`` cells this computes a value for, one line each.
    """

    checked: int = 0
    wrong: list[str] = field(default_factory=list)
    undefined: list[str] = field(default_factory=list)


def _json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _runs(panel: Path) -> list[dict[str, Any]]:
    """Every planned run with its record and summary (None where missing), eligible units
    only (a unit with an ineligible run is left out, as the report leaves it)."""
    rows = []
    for run in _json(panel / "panel.json")["plan"]["runs"]:
        folder = panel / "runs" / run["id"]
        record = _json(folder / "panel_run.json") if (folder / "panel_run.json").is_file() else {}
        summary = _json(folder / "summary.json") if (folder / "summary.json").is_file() else None
        rows.append({**run, "record": record, "summary": summary})
    bad = {r["unit"] for r in rows if r["record"].get("status") == "ineligible"}
    return [r for r in rows if r["unit"] not in bad]


def _chosen(runs: list[dict[str, Any]], cell: Cell, scope: str) -> list[dict[str, Any]]:
    """The runs of one condition the cell names (Keep: draw 0)."""
    out = []
    for r in runs:
        if r["scope"] != scope or (cell.source is not None and r["source_program"] != cell.source):
            continue
        if cell.tasks is not None and not {r["task"], r["category"]} & set(cell.tasks):
            continue
        if scope == "keep" and r["draw"] != 0:
            continue
        if scope != "keep" and cell.draw != "all" and r["draw"] != cell.draw:
            continue
        out.append(r)
    return out


def _success(run: dict[str, Any]) -> bool:
    record = run["record"]
    return record.get("status") == "done" and bool(record.get("success"))


def _column(summary: dict[str, Any] | None, name: str) -> int:
    if summary is None:
        return 0
    if name in summary and isinstance(summary[name], int):
        return int(summary[name])
    if name.startswith("fallback_"):
        return int(summary.get("fallbacks", {}).get(name.removeprefix("fallback_"), 0))
    if name == "kept_reviews":  # reviews whose realized operation was Keep
        revised = ("argument_patches", "block_data_patches", "replacements")
        return int(summary["reviews"]) - sum(int(summary[k]) for k in revised)
    parts = name.split("_")  # planner_logical_output
    if len(parts) != 3 or parts[1] not in ("logical", "uncached"):
        raise KeyError(name)
    totals = summary.get("tokens", {}).get(parts[0])
    return int(totals[parts[1]][f"{parts[2]}_tokens"]) if totals else 0


def _pairs(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> list[tuple[bool, bool]]:
    by_unit = {r["unit"]: r for r in a}
    return [(_success(by_unit[r["unit"]]), _success(r)) for r in b if r["unit"] in by_unit]


def _paired_text(metric: str, pairs: list[tuple[bool, bool]]) -> str | None:
    if not pairs:
        return None
    wins = sum(1 for x, y in pairs if y and not x)
    losses = sum(1 for x, y in pairs if x and not y)
    if metric == "wins_losses":
        return f"{wins}/{losses}"
    if metric == "wins_losses_ties":
        return f"{wins}/{losses}/{len(pairs) - wins - losses}"
    return f"{100.0 * (wins - losses) / len(pairs):+.1f}"


def _keep_pairs(one: list[dict[str, Any]], two: list[dict[str, Any]]) -> bool:
    """Whether every unit's Keep runs in two panels share a terminal state hash."""
    first = {r["unit"]: (r["summary"] or {}).get("state_hash") for r in one}
    return all(
        r["unit"] not in first
        or (first[r["unit"]] and first[r["unit"]] == (r["summary"] or {}).get("state_hash"))
        for r in two
    )


def _unit_totals(runs: list[dict[str, Any]], cell: Cell) -> dict[str, int]:
    names = [cell.column] if isinstance(cell.column, str) else list(cell.column or [])
    totals: dict[str, int] = {}
    for r in runs:
        totals[r["unit"]] = totals.get(r["unit"], 0) + sum(_column(r["summary"], n) for n in names)
    return totals


def _derived(cell: Cell, base: list[dict[str, Any]], mine: list[dict[str, Any]]) -> str | None:
    """A derived cost cell: ``mine``'s summed columns against ``base``'s."""
    a, b = _unit_totals(base, cell), _unit_totals(mine, cell)
    if cell.metric in ("ratio", "change"):
        if not a or not b or sum(a.values()) == 0:
            return None
        ratio = sum(b.values()) / sum(a.values())
        return f"{ratio:.1f}x" if cell.metric == "ratio" else f"{100.0 * (ratio - 1):+.1f}%"
    common = [u for u in b if u in a]
    if not common:
        return None
    if cell.metric == "units_more":
        return f"{sum(b[u] > a[u] for u in common)}/{len(common)}"
    gaps = sorted((a[u] - b[u] for u in common), reverse=True)
    if sum(gaps) <= 0 or cell.k is None:
        return None
    return f"{100.0 * sum(gaps[: cell.k]) / sum(gaps):.1f}%"


def expected(cell: Cell, panels: dict[str, list[dict[str, Any]]]) -> str | None:
    """The cell's text as computed here (its first token), None when it is not defined."""
    runs = panels.get(cell.panel or "")
    if runs is None:
        return None
    mine = _chosen(runs, cell, cell.scope)
    if cell.metric == "replays":
        return None  # read by _replayed
    if cell.metric in CHECKED[6:10]:
        other = panels.get(cell.versus_panel or cell.panel or "")
        if other is None or not mine:
            return None
        return _derived(cell, _chosen(other, cell, cell.versus or cell.scope), mine)
    if cell.versus_panel is not None:
        other = panels.get(cell.versus_panel)
        if other is None or not _keep_pairs(
            _chosen(other, cell, "keep"), _chosen(runs, cell, "keep")
        ):
            return None
        return _paired_text(
            cell.metric, _pairs(_chosen(other, cell, cell.versus or cell.scope), mine)
        )
    if not mine:
        return None
    if cell.metric == "successes":
        return f"{sum(_success(r) for r in mine)}/{len(mine)}"
    if cell.metric == "activations":
        return str(len({r["unit"] for r in mine if r["record"].get("diverged_at") is not None}))
    if cell.metric == "sum":
        names = [cell.column] if isinstance(cell.column, str) else list(cell.column or [])
        try:
            return f"{sum(_column(r['summary'], n) for r in mine for n in names):,}"
        except KeyError:  # a column this does not recompute
            return None
    if cell.draw == "all" or cell.versus is None:
        return None  # a pooled comparison is not recomputed here
    base = _chosen(runs, cell, cell.versus)
    return _paired_text(cell.metric, _pairs(base, mine))


def _replayed(cell: Cell, rows: list[dict[str, Any]]) -> str | None:
    """A ``replays`` cell: the replay's rows (of the cell's program) whose field is true."""
    mine = [
        r
        for r in rows
        if r["replay"] == cell.replay and cell.program in (None, r["source_program"])
    ]
    return f"{sum(bool(r[cell.field]) for r in mine)}/{len(mine)}" if mine else None


def check(experiment: Experiment, out: Path) -> Tally:
    """Recompute every checked cell of ``experiment``'s tables in its output folder ``out``."""
    panels = {p.name: _runs(out / "panels" / p.name) for p in experiment.panels}
    replayed = [
        row
        for r in experiment.replays
        if (out / "replays" / r.name / "replays.json").is_file()
        for row in _json(out / "replays" / r.name / "replays.json")
    ]
    tally = Tally()
    for table in experiment.tables:
        with (out / "tables" / f"{table.name}.csv").open(encoding="utf-8") as f:
            rows = list(csv.reader(f))[1:]
        for row, shown in zip(table.rows, rows, strict=True):
            for cell, text in zip(row.cells, shown[1:], strict=True):
                if cell.metric not in CHECKED or cell.split is not None:
                    continue
                replay = cell.metric == "replays"
                want = _replayed(cell, replayed) if replay else expected(cell, panels)
                got = text.split(" ")[0] if text else ""
                where = f"{experiment.name} {table.name} {row.label!r} {cell.metric}"
                if want is None:
                    continue
                if got == "n/a":
                    tally.undefined.append(f"{where}: n/a, {want} here")
                    continue
                tally.checked += 1
                if got != want:
                    tally.wrong.append(f"{where}: {got} published, {want} here")
    return tally
