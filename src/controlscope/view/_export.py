"""The viewer's pages written as static files that open from disk (``controlscope view PATH
--export DIR``): the folder's page as ``index.html``, each run of a set as ``runs/NAME.html``,
with relative links and no script (a static page does not refresh)."""

from __future__ import annotations

import re
from pathlib import Path

from controlscope.view._folders import Target, ViewError, find_target
from controlscope.view._render import Links, render_run, render_target


def _slugs(run_ids: list[str]) -> dict[str, str]:
    """A file name per run id: its position and its id's safe characters."""
    return {
        run_id: f"{i:04d}-{re.sub(r'[^A-Za-z0-9._-]+', '_', run_id)[:80]}.html"
        for i, run_id in enumerate(run_ids)
    }


def export(path: str | Path, out: str | Path) -> Path:
    """Write the viewer's pages for ``path`` into ``out`` as static files.

    Args:
        path: a run directory, a branch set or a folder of runs.
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
    slugs = _slugs(list(target.runs))
    out.mkdir(parents=True, exist_ok=True)
    index = out / "index.html"
    index.write_text(render_target(target, Links(exported=True, slugs=slugs)), "utf-8")
    if slugs:
        (out / "runs").mkdir()
        links = Links(exported=True, up="../", slugs=slugs)
        for run_id, name in slugs.items():
            (out / "runs" / name).write_text(render_run(target, run_id, links), "utf-8")
    return index
