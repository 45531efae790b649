"""Runs of one state side by side (paper 3.1: every scope starts from the same ``(h, s)``; 5.1,
A.4): the shared prefix once, the decision each run made at the branch point, their call traces
aligned by call index with the first point where they differ marked, and their terminal
verdicts.

:func:`side_by_side` takes any runs: a branch set (the folder ``controlscope branch`` writes,
:data:`controlscope.replay.BRANCHES_FILE` and one run directory per scope and draw, read by
:func:`read_branches`) or a panel's unit (its Keep run and the runs that start from its state).
Each run is read with :func:`read_run` (its first page: a page holds
:data:`controlscope.view._timeline.PAGE_BOUNDARIES` boundaries) and its calls from its log.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from controlscope.core import (
    EVENTS_FILE,
    InputFileError,
    PrimitiveCall,
    PrimitiveCallEvent,
    read_regular,
)
from controlscope.record import LogError, TruncatedLogWarning, iter_events
from controlscope.replay import BRANCHES_FILE
from controlscope.view._paths import inside
from controlscope.view._text import shown_name
from controlscope.view._timeline import BoundaryView, RunPage, read_run

MAX_BRANCHES_BYTES = 4 * 1024 * 1024
"""The largest ``branches.json`` the viewer reads."""

MAX_CALLS = 2_000
"""The most calls of one run put side by side (the first ones; its own pages show all)."""


@dataclass
class BranchColumn:
    """One run of the set.

    Attributes:
        run_id: the run's id in what is shown (its page's id).
        page: the run's first page.
        decision: the boundary where the branch starts (the first at or after the branch
            point); for whole runs (no branch point given or recorded) the run's first
            boundary whose review proposed a change, else its first reviewed boundary, else
            its first boundary; None when it never reached one.
        calls: its primitive calls by call index.
        label: the run's scope and draw as its folder names them (``full-d0``).
    """

    run_id: str
    page: RunPage
    decision: BoundaryView | None
    calls: dict[int, PrimitiveCall]
    label: str = ""


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
        folder: the branch set's folder (a panel's, for a unit).
        info: ``branches.json`` as written (empty when it is missing or unreadable, and for a
            unit).
        columns: the runs, in order.
        call_index: the branch point's call index (K): given, or the recorded branch point
            of a run that starts from a prefix, or else the first call index where the traces
            differ; None when there is no run.
        replayed: whether the prefix before K was replayed from a recording and checked (a
            branch point is recorded), rather than found the same.
        shared: the prefix's calls (call index below K), from the first run.
        rows: the calls from K on, aligned by call index.
        first_divergence: the call index of the first row that differs; None when the call
            traces are the same.
        problems: what could not be read, each one sentence.
    """

    folder: Path
    info: dict[str, Any]
    columns: list[BranchColumn] = field(default_factory=list)
    call_index: int | None = None
    replayed: bool = False
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
    try:
        raw = read_regular(folder / BRANCHES_FILE, MAX_BRANCHES_BYTES)
    except OSError as err:
        return {}, f"{BRANCHES_FILE} cannot be opened: {err.strerror}"
    except InputFileError:
        return {}, f"{BRANCHES_FILE} is not a regular file of at most {MAX_BRANCHES_BYTES} bytes"
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
    k = info.get("call_index")
    page.columns, page.call_index, page.replayed, more = _compare(
        found, k if isinstance(k, int) else None
    )
    page.problems += more
    _align(page)
    return page


def side_by_side(
    runs: Mapping[str, Path],
    *,
    folder: Path,
    call_index: int | None = None,
    labels: Mapping[str, str] | None = None,
) -> BranchesPage:
    """Any runs of one state side by side: a panel's unit, or a branch set.

    Args:
        runs: run id to run directory, in the order of the columns.
        folder: the folder they belong to (shown).
        call_index: the branch point's call index, when known; None: a run's recorded
            branch point, else the first call index where the traces differ.
        labels: each run's column heading, by run id (default: the run id).

    Returns:
        The page; what cannot be read of a run is in ``problems``, prefixed by its id.
    """
    page = BranchesPage(folder=folder, info={})
    page.columns, page.call_index, page.replayed, page.problems = _compare(runs, call_index)
    for column in page.columns:
        column.label = (labels or {}).get(column.run_id, column.run_id)
    _align(page)
    return page


def _compare(
    runs: Mapping[str, Path], call_index: int | None
) -> tuple[list[BranchColumn], int | None, bool, list[str]]:
    """Each run read, the branch point, whether it was replayed, and what could not be read."""
    problems: list[str] = []
    read: list[tuple[str, RunPage, dict[int, PrimitiveCall]]] = []
    for run_id, run_dir in runs.items():
        run = read_run(run_dir)
        problems += [f"{run_id}: {p}" for p in run.problems]
        calls, more = _calls(run_dir)
        if more:
            problems.append(
                f"{run_id}: only its first {MAX_CALLS} calls are put side by side; its own "
                f"pages show all {len(calls) + more}"
            )
        read.append((run_id, run, calls))
    recorded = _branch_point([run for _, run, _ in read])
    k = call_index if call_index is not None else recorded
    if k is None and read:
        k = _first_difference([calls for _, _, calls in read])
    columns = [
        BranchColumn(
            run_id,
            run,
            _decision(run, k) if recorded is not None or call_index is not None else _first(run),
            calls,
            label=run_id,
        )
        for run_id, run, calls in read
    ]
    return columns, k, recorded is not None, problems


def _calls(run_dir: Path) -> tuple[dict[int, PrimitiveCall], int]:
    """A run's first :data:`MAX_CALLS` primitive calls by call index, from its whole log
    (every page), and how many more it holds; the calls a log holds past what can be read are
    left out (its page says why)."""
    calls: dict[int, PrimitiveCall] = {}
    more = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncatedLogWarning)
        try:
            for event in iter_events(run_dir):
                if not isinstance(event, PrimitiveCallEvent):
                    continue
                if len(calls) < MAX_CALLS:
                    calls.setdefault(event.call.call_index, event.call)
                else:
                    more += 1
        except (OSError, LogError, ValidationError, RecursionError):
            pass
    return calls, more


def _decision(run: RunPage, k: int | None) -> BoundaryView | None:
    """The run's first boundary at or after the branch point."""
    if k is None:
        return None
    return next((b for b in run.boundaries if b.boundary.call_index >= k), None)


def _first(run: RunPage) -> BoundaryView | None:
    """A whole run's first decision worth comparing: its first boundary whose review proposed
    something other than Keep (realized, refused or a fallback), else its first reviewed
    boundary, else its first boundary (None: it reached none)."""
    changed = next((b for b in run.boundaries if _proposes_change(b)), None)
    reviewed = next((b for b in run.boundaries if b.request is not None), None)
    return changed or reviewed or next(iter(run.boundaries), None)


def _proposes_change(b: BoundaryView) -> bool:
    """Whether the review at ``b`` changed the program, proposed a change or fell back."""
    if b.operation != "keep" or (b.realized is not None and b.realized.fallback is not None):
        return True
    proposed = b.proposal.operation if b.proposal is not None else None
    return proposed is not None and proposed.kind != "keep"


def _branch_point(runs: list[RunPage]) -> int | None:
    for run in runs:
        if run.start is not None and run.start.branch is not None:
            return run.start.branch.call_index
    return None


def _first_difference(traces: list[dict[int, PrimitiveCall]]) -> int:
    """The first call index where the traces differ (their length when they do not)."""
    indices = sorted({i for calls in traces for i in calls})
    for i in indices:
        keys = {None if calls.get(i) is None else _trace_key(calls[i]) for calls in traces}
        if len(keys) > 1:
            return i
    return indices[-1] + 1 if indices else 0


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
