"""What a folder given to the viewer is: a run, a branch set, a panel or a folder of runs; and
the stamp that tells a live page its files changed.

Each kind is recognised by the files its writer leaves: a run directory by its log
(``events.jsonl``), a branch set by ``branches.json`` (``controlscope branch``), a panel by its
manifest (``panel.json``, ``controlscope panel``), anything else holding run directories below
it by those. One detector per kind in :data:`DETECTORS`, tried in order.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from controlscope.core import EVENTS_FILE
from controlscope.panel import MANIFEST_FILE, RUN_MARKER, PanelError, read_manifest, run_dir
from controlscope.record import SUMMARY_FILE
from controlscope.replay import BRANCHES_FILE
from controlscope.view._branches import branch_ids
from controlscope.view._paths import inside
from controlscope.view._text import shown_name

TargetKind = Literal["run", "branches", "panel", "runs"]
"""A run directory, a branch set, a panel folder, or a folder of runs."""

MAX_RUNS = 10_000
"""The most run directories a folder of runs lists (the rest are counted, not listed)."""

MAX_DEPTH = 4
"""How deep below a folder of runs the viewer looks for run directories."""

PANEL_DEPTH = 8
"""How deep below a panel whose manifest cannot be read the viewer looks for its run
directories (``runs/TASK/sSEED/pSOURCE/NAME``, a task's id having up to three parts)."""


class ViewError(ValueError):
    """A path the viewer cannot show: missing, not a directory, or holding no run; or a page
    of it that does not exist."""


@dataclass(frozen=True)
class Target:
    """A folder the viewer shows.

    Attributes:
        path: the folder.
        kind: what it is.
        runs: the run directories a page may link to, by id (a branch's folder name, or a
            run's path below ``path``, as :func:`shown_name` writes it): the only run pages
            served besides ``path`` itself.
        more: run directories found beyond :data:`MAX_RUNS` (not listed).
        outside: run directories below ``path`` by name whose directory or log is a link
            leading out of it (left out, see :func:`controlscope.view._paths.inside`).
        units: a panel's paired units, each with its planned runs' ids (Keep first), in the
            plan's order; a panel's ``runs`` are its planned runs whose directory exists.
        problem: why a panel's manifest cannot be read (then ``runs`` are the run directories
            found below it, as for a folder of runs).
    """

    path: Path
    kind: TargetKind
    runs: dict[str, Path] = field(default_factory=dict)
    more: int = 0
    outside: list[str] = field(default_factory=list)
    units: dict[str, tuple[str, ...]] = field(default_factory=dict)
    problem: str | None = None


def _run(path: Path) -> Target | None:
    return Target(path, "run") if (path / EVENTS_FILE).is_file() else None


def _branches(path: Path) -> Target | None:
    if not (path / BRANCHES_FILE).is_file():
        return None
    return Target(path, "branches", branch_ids(path))


def _runs(path: Path, max_depth: int = MAX_DEPTH) -> Target | None:
    found: dict[str, Path] = {}
    outside: list[str] = []
    more = 0
    stack = [(path, 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            children = sorted((p for p in folder.iterdir() if p.is_dir()), reverse=True)
        except OSError:
            continue
        for child in children:
            log = child / EVENTS_FILE
            if log.is_file():
                run_id = shown_name(child.relative_to(path).as_posix())
                if (child.is_symlink() or log.is_symlink()) and not inside(path, log):
                    outside.append(run_id)
                elif len(found) < MAX_RUNS:
                    found[run_id] = child
                else:
                    more += 1
            elif depth + 1 < max_depth and not child.is_symlink():
                stack.append((child, depth + 1))
    if not found:
        return None
    return Target(path, "runs", dict(sorted(found.items())), more, sorted(outside))


def _panel(path: Path) -> Target | None:
    if not (path / MANIFEST_FILE).is_file():
        return None
    try:
        plan = read_manifest(path).plan
    except (PanelError, OSError) as err:
        found = _runs(path, PANEL_DEPTH) or Target(path, "runs")
        return Target(path, "panel", found.runs, outside=found.outside, problem=str(err))
    units: dict[str, list[str]] = {}
    runs: dict[str, Path] = {}
    outside: list[str] = []
    root = path.resolve()
    for planned in plan.runs:
        units.setdefault(planned.unit, []).append(planned.id)
        directory = run_dir(path, planned.id)
        if not _is_dir(directory):
            continue
        if inside(path, directory / EVENTS_FILE, resolved=root):  # its folder's links too
            runs[planned.id] = directory
        else:
            outside.append(shown_name(planned.id))
    grouped = {unit: tuple(ids) for unit, ids in units.items()}
    return Target(path, "panel", runs, outside=outside, units=grouped)


def _is_dir(path: Path) -> bool:
    """Whether ``path`` is a folder; False for a name the file system refuses (too long)."""
    try:
        return path.is_dir()
    except OSError:
        return False


DETECTORS: tuple[Callable[[Path], Target | None], ...] = (_run, _branches, _panel, _runs)
"""Tried in order; the first that recognises a folder decides what it is."""


def find_target(path: Path) -> Target:
    """What ``path`` is.

    Args:
        path: the folder given to the viewer.

    Returns:
        The folder, what it is, and the runs its pages may link to.

    Raises:
        ViewError: ``path`` is missing, not a directory or a name the file system refuses,
            or holds no run directory (``events.jsonl``) within :data:`MAX_DEPTH` levels.
    """
    try:
        exists, folder = path.exists(), path.is_dir()
    except OSError as err:  # a name the file system refuses (too long...)
        raise ViewError(f"{path} cannot be looked at: {err.strerror}") from None
    if not exists:
        raise ViewError(f"{path} does not exist")
    if not folder:
        raise ViewError(
            f"{path} is not a folder: give a run directory, a branch set, a panel or a folder "
            "of runs"
        )
    for detect in DETECTORS:
        found = detect(path)
        if found is not None:
            return found
    raise ViewError(
        f"{path} is not a run directory (no {EVENTS_FILE}), a branch set (no {BRANCHES_FILE}), "
        f"a panel (no {MANIFEST_FILE}) or a folder of runs (no run directory within "
        f"{MAX_DEPTH} levels)"
    )


def stamp(paths: list[Path]) -> str:
    """A short text that changes when any of ``paths`` (logs, summaries) changes: their sizes
    and modification times."""
    parts = []
    for path in paths:
        try:
            info = os.stat(path)
        except OSError:
            parts.append("-")
            continue
        parts.append(f"{info.st_size}.{info.st_mtime_ns}")
    return ":".join(parts)


def watched(target: Target, run_id: str | None = None, unit: str | None = None) -> list[Path]:
    """The files whose change should refresh a page: a run's log and summary; those of every
    run of a set (and ``branches.json``) or of a panel's unit; a panel's manifest and its
    runs' records (a panel's page changes when a run finishes)."""
    if target.kind == "run" or run_id is not None:
        directory = target.path if run_id is None else target.runs[run_id]
        return [directory / EVENTS_FILE, directory / SUMMARY_FILE]
    if unit is not None:
        ids = [i for i in target.units.get(unit, ()) if i in target.runs]
        return [target.runs[i] / name for i in ids for name in (EVENTS_FILE, SUMMARY_FILE)]
    if target.kind == "panel":
        return [target.path / MANIFEST_FILE, *(d / RUN_MARKER for d in target.runs.values())]
    files = [target.path / BRANCHES_FILE] if target.kind == "branches" else []
    for directory in target.runs.values():
        files += [directory / EVENTS_FILE, directory / SUMMARY_FILE]
    return files
