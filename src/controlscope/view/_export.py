"""The viewer's pages written as static files that open from disk (``controlscope view PATH
--export DIR``): the folder's page as ``index.html``, each run of a set as ``runs/NAME.html``
(a long run's later pages as ``NAME-p2.html``...), and for a panel each unit's runs side by side
as ``units/NAME.html`` and the runs behind each cell of its report as ``cells/NAME.html``; with
relative links and no script (a static page does not refresh)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path

from controlscope.analysis import CellRuns
from controlscope.view._folders import Target, ViewError, find_target
from controlscope.view._panel import PanelPage, read_panel_page
from controlscope.view._render import (
    Links,
    paged,
    render_cell,
    render_panel,
    render_run_page,
    render_target,
    render_unit,
)
from controlscope.view._timeline import iter_run_pages


def _slugs(ids: Iterable[str]) -> dict[str, str]:
    """A file name per id: its position and its id's safe characters."""
    return {
        key: f"{i:04d}-{re.sub(r'[^A-Za-z0-9._-]+', '_', key)[:80]}.html"
        for i, key in enumerate(ids)
    }


def _cell_slugs(cells: dict[str, CellRuns]) -> dict[str, str]:
    """A file name per cell; cells behind which are the same runs share one."""
    names: dict[CellRuns, str] = {}
    for cell, runs in cells.items():
        names.setdefault(runs, f"{len(names):04d}-{re.sub(r'[^A-Za-z0-9_-]+', '_', cell)}.html")
    return {cell: names[runs] for cell, runs in cells.items()}


def export(path: str | Path, out: str | Path) -> Path:
    """Write the viewer's pages for ``path`` into ``out`` as static files.

    Args:
        path: a run directory, a branch set, a panel or a folder of runs.
        out: the folder to write (created; it must be empty or missing).

    Returns:
        The path of the folder's page, ``out/index.html``.

    Raises:
        ViewError: ``path`` is not something the viewer shows (see
            :func:`controlscope.view.find_target`), ``out`` is not an empty folder, or it
            cannot be written (what was written before the failure stays).
    """
    target = find_target(Path(path))
    out = Path(out)
    try:
        return _write(target, out)
    except OSError as err:
        raise ViewError(f"cannot write the export to {out}: {err.strerror or err}") from None


def _write(target: Target, out: Path) -> Path:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ViewError(f"{out} is not an empty folder; choose a new export folder")
    out.mkdir(parents=True, exist_ok=True)
    panel = read_panel_page(target) if target.kind == "panel" else None
    links = Links(
        exported=True,
        slugs=_slugs(target.runs),
        units=_slugs(target.units),
        cells=_cell_slugs(panel.cells) if panel is not None else {},
    )
    index = out / "index.html"
    if target.kind == "run":
        for run in iter_run_pages(target.path):
            (out / paged("index.html", run.number)).write_text(
                render_run_page(run, None, links, None), "utf-8"
            )
        return index
    if panel is not None:
        index.write_text(render_panel(panel, target, links, None), "utf-8")
        _write_panel(panel, target, out, links)
    else:
        index.write_text(render_target(target, links), "utf-8")
    below = replace(links, up="../")
    if links.slugs:
        (out / "runs").mkdir()
        for run_id, name in links.slugs.items():
            for run in iter_run_pages(target.runs[run_id]):
                (out / "runs" / paged(name, run.number)).write_text(
                    render_run_page(run, run_id, below, None), "utf-8"
                )
    return index


def _write_panel(panel: PanelPage, target: Target, out: Path, links: Links) -> None:
    """A panel's unit pages and the pages of the runs behind its report's cells."""
    below = replace(links, up="../")
    if links.units:
        (out / "units").mkdir()
        for unit, name in links.units.items():
            (out / "units" / name).write_text(render_unit(target, unit, below), "utf-8")
    if links.cells:
        (out / "cells").mkdir()
        written: set[str] = set()
        for cell, name in links.cells.items():
            if name not in written:
                written.add(name)
                page = render_cell(panel, target, cell, below)
                (out / "cells" / name).write_text(page, "utf-8")
