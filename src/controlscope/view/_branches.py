"""Branches of one recorded prefix side by side (paper 3.1: every scope starts from the same
``(h, s)``; 5.1, A.4): the shared prefix once, the decision each branch made at the branch
point, their call traces aligned by call index with the first point where they differ marked,
and their terminal verdicts.

A branch set is the folder ``controlscope branch`` writes (:data:`controlscope.replay.BRANCHES_FILE`
and one run directory per scope and draw); each branch is read with :func:`read_run`.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from controlscope.core import EVENTS_FILE, PrimitiveCall
from controlscope.replay import BRANCHES_FILE
from controlscope.view._paths import inside
from controlscope.view._text import shown_name
from controlscope.view._timeline import BoundaryView, RunPage, read_run

MAX_BRANCHES_BYTES = 4 * 1024 * 1024
"""The largest ``branches.json`` the viewer reads."""


@dataclass
class BranchColumn:
    """One branch.

    Attributes:
        run_id: the branch's run directory's name in the set (its page's id).
        page: the branch's run, read whole.
        decision: the boundary where the branch starts (the first after its branch point);
            None when it never reached one.
        calls: its primitive calls by call index.
        label: the branch's scope and draw as its folder names them (``full-d0``).
    """

    run_id: str
    page: RunPage
    decision: BoundaryView | None
    calls: dict[int, PrimitiveCall]

    @property
    def label(self) -> str:
        """The branch's scope and draw as its folder names them (``full-d0``)."""
        return self.run_id


@dataclass
class TraceRow:
    """One call index after the branch point, across the branches.

    Attributes:
        call_index: the call index.
        cells: each branch's call there (None: it made no call with this index).
        differs: whether the branches' calls differ here (tool or arguments, or a missing
            call).
        first: whether this is the first row that differs.
    """

    call_index: int
    cells: list[PrimitiveCall | None]
    differs: bool
    first: bool = False


@dataclass
class BranchesPage:
    """A branch set as the viewer shows it.

    Attributes:
        folder: the branch set's folder.
        info: ``branches.json`` as written (empty when it is missing or unreadable).
        columns: the branches, in the file's order.
        call_index: the branch point's call index (K; None when unknown).
        shared: the prefix's calls (call index below K), from the first branch.
        rows: the calls from K on, aligned by call index.
        first_divergence: the call index of the first row that differs; None when the call
            traces are the same.
        problems: what could not be read, each one sentence.
    """

    folder: Path
    info: dict[str, Any]
    columns: list[BranchColumn] = field(default_factory=list)
    call_index: int | None = None
    shared: list[PrimitiveCall] = field(default_factory=list)
    rows: list[TraceRow] = field(default_factory=list)
    first_divergence: int | None = None
    problems: list[str] = field(default_factory=list)


def branch_ids(folder: Path) -> dict[str, Path]:
    """The branch run directories of the set in ``folder``: the ones ``branches.json`` names
    (by their folder's name), else every sub-folder holding a log, sorted. A name that is no
    sub-folder of ``folder`` (missing, ``..``, a link leading out of it) is left out.

    Returns:
        Run id (the sub-folder's name, as :func:`shown_name` writes it) to its directory.
    """
    return {
        shown_name(n): folder / n
        for n in _branch_names(folder)
        if n and (folder / n).is_dir() and inside(folder, folder / n / EVENTS_FILE)
    }


def _branch_names(folder: Path) -> list[str]:
    info, _ = read_branches_file(folder)
    names = [Path(str(b.get("run_dir", ""))).name for b in _branch_entries(info)]
    if not names:
        names = sorted(p.name for p in folder.iterdir() if (p / EVENTS_FILE).is_file())
    return names


def read_branches_file(folder: Path) -> tuple[dict[str, Any], str | None]:
    """``folder/branches.json`` as a JSON object, and the reason when it cannot be read."""
    path = folder / BRANCHES_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as err:
        return {}, f"{BRANCHES_FILE} cannot be opened: {err.strerror}"
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_BRANCHES_BYTES:
            return (
                {},
                f"{BRANCHES_FILE} is not a regular file of at most {MAX_BRANCHES_BYTES} bytes",
            )
        raw = f.read(MAX_BRANCHES_BYTES + 1)
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as err:
        return {}, f"{BRANCHES_FILE} is not JSON: {err}"
    if not isinstance(data, dict):
        return {}, f"{BRANCHES_FILE} does not hold a JSON object"
    return data, None


def _branch_entries(info: dict[str, Any]) -> list[dict[str, Any]]:
    entries = info.get("branches")
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def read_branches(folder: Path) -> BranchesPage:
    """Read a branch set into a :class:`BranchesPage`.

    Args:
        folder: the folder ``controlscope branch --out`` wrote.

    Returns:
        The page; anything unreadable is in ``problems``.
    """
    info, problem = read_branches_file(folder)
    page = BranchesPage(folder=folder, info=info)
    if problem is not None:
        page.problems.append(problem)
    found = branch_ids(folder)
    left_out = [shown_name(n) for n in _branch_names(folder) if shown_name(n) not in found]
    if left_out:
        page.problems.append(
            f"{BRANCHES_FILE} names run directories that are not folders of this set (missing, "
            f"or leading out of it), not shown: {', '.join(left_out)}"
        )
    for run_id, run_dir in found.items():
        run = read_run(run_dir)
        page.problems += [f"{run_id}: {p}" for p in run.problems]
        page.columns.append(_column(run_id, run))
    k = info.get("call_index")
    page.call_index = k if isinstance(k, int) else _branch_point(page.columns)
    _align(page)
    return page


def _column(run_id: str, run: RunPage) -> BranchColumn:
    """One branch: its calls by index, and its first boundary at or after the branch point."""
    calls = {b.call.call_index: b.call for b in run.boundaries if b.call is not None}
    origin = run.start.branch if run.start is not None else None
    k = origin.call_index if origin is not None else None
    decision = next(
        (b for b in run.boundaries if k is not None and b.boundary.call_index >= k), None
    )
    return BranchColumn(run_id=run_id, page=run, decision=decision, calls=calls)


def _branch_point(columns: list[BranchColumn]) -> int | None:
    for column in columns:
        start = column.page.start
        if start is not None and start.branch is not None:
            return start.branch.call_index
    return None


def _align(page: BranchesPage) -> None:
    """The shared prefix, the rows from the branch point on, and the first that differs."""
    if not page.columns:
        return
    k = page.call_index if page.call_index is not None else 0
    first = page.columns[0]
    page.shared = [c for i, c in sorted(first.calls.items()) if i < k]
    indices = sorted({i for column in page.columns for i in column.calls if i >= k})
    for i in indices:
        cells = [column.calls.get(i) for column in page.columns]
        keys = {None if c is None else _trace_key(c) for c in cells}
        row = TraceRow(call_index=i, cells=cells, differs=len(keys) > 1)
        if row.differs and page.first_divergence is None:
            row.first = True
            page.first_divergence = i
        page.rows.append(row)


def _trace_key(call: PrimitiveCall) -> str:
    """What two branches' calls must share to be the same step of a call trace: the tool and
    the arguments it was made with."""
    return json.dumps([call.tool, call.arguments], sort_keys=True, default=str)
