"""Runs a panel takes from another panel of its experiment (paper 4, A.5, B.1, B.2).

- ``execution.keep_from``: a unit's Keep run is the other panel's, copied as it is (its log
  byte for byte) and checked by its log's SHA-256 and terminal state hash: one Keep run per
  unit of an experiment, reused by identity rather than run again through the cache.
- ``execution.diverge_from``: a reviewing run is the other panel's run of the same unit,
  scope and draw (a first schedule) replayed up to the first boundary where this panel's
  schedule decides otherwise, then live (:func:`controlscope.replay.branch_at_divergence`:
  started by fork where the environment allows it, else by its own prefix replay; the record's
  ``mechanism`` says which); its shared prefix is checked event by event and by hash
  afterwards.

Both read the other panel's manifest first: apart from the schedule, the scopes, the start and
how runs execute, its configuration must be this one's, or the runs would not pair (a panel of
whole runs may take Keep runs from a panel of another reviewer, draws or replacement boundary:
:func:`lending_difference`).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from controlscope.core import ChatModel
from controlscope.panel._config import PanelConfig
from controlscope.panel._folder import (
    RUN_MARKER,
    PanelError,
    RunRecord,
    branched_record,
    difference,
    finished,
    log_sha256,
    read_manifest,
    run_dir,
)
from controlscope.panel._plan import PlannedRun
from controlscope.record import read_summary
from controlscope.replay import (
    Mechanism,
    Recording,
    ReplayError,
    branch_at_divergence,
    branch_schedule,
    check_shared_prefix,
)
from controlscope.review import Reviewer

OWN_KEYS = ("schedule", "scopes", "execution", "start")
"""What a linked panel may set otherwise than the panel it takes runs from."""

KEEP_FREE = ("reviewer", "draws", "replace_boundary")
"""What a panel whose reviewing runs are whole runs may also set otherwise than the panel it
takes Keep runs from: its Keep runs ask no reviewer and its reviewing runs do not start from
them (a branched panel's branches take their condition from the Keep run's record)."""


def linked_folder(panel: Path, relative: str) -> Path:
    """The other panel's folder, ``relative`` read from ``panel``."""
    return (panel / relative).resolve()


def lending_difference(theirs: PanelConfig, mine: PanelConfig, *, keep: bool) -> str | None:
    """Why a panel of ``theirs`` cannot lend runs to one of ``mine``: the first difference
    outside :data:`OWN_KEYS` (and, for Keep runs lent to a panel of whole runs, outside
    :data:`KEEP_FREE` too); None when it can.

    Args:
        theirs: the lending panel's configuration.
        mine: the borrowing panel's.
        keep: only Keep runs are lent (``keep_from``), not first-schedule runs.
    """
    ignored = OWN_KEYS + (KEEP_FREE if keep and mine.start == "whole" else ())
    there, here = theirs.identity(), mine.identity()
    for key in ignored:
        there.pop(key, None)
        here.pop(key, None)
    return difference(there, here, "")


def _unlike(other: Path, config: PanelConfig, *, keep: bool = False) -> str | None:
    """Why the panel in ``other`` cannot lend runs to one of ``config``; None when it can."""
    try:
        theirs = read_manifest(other).config
    except PanelError as err:
        return str(err)
    found = lending_difference(theirs, config, keep=keep)
    return None if found is None else f"{other} is configured otherwise: {found}"


def reuse_keep(panel: Path, config: PanelConfig, run: PlannedRun, directory: Path) -> RunRecord:
    """The unit's Keep run copied from ``execution.keep_from`` into ``directory``.

    Returns:
        Its record: ``done`` with the other panel's verdict, naming where it came from and its
        terminal state hash; ``error`` (run again on resume) when the other panel's run has
        not finished, is configured otherwise, holds a link or a special file (never
        followed), or the copy is not its log byte for byte.
    """
    assert config.execution.keep_from is not None
    other = linked_folder(panel, config.execution.keep_from)
    problem = _unlike(other, config, keep=True)
    record = finished(other, run.id) if problem is None else None
    if problem is None and (record is None or record.status != "done"):
        problem = f"the Keep run {run.id} has not finished in {other}"
    if problem is not None or record is None:
        return RunRecord(id=run.id, status="error", detail=problem or "")
    source = run_dir(other, run.id)
    odd = _not_plain(source)
    if odd is not None:
        detail = f"the Keep run in {source} holds {odd}; a run folder holds files and folders"
        return RunRecord(id=run.id, status="error", detail=detail)
    shutil.copytree(  # links copied as links, never followed, should one appear since
        source,
        directory,
        symlinks=True,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns(RUN_MARKER),
    )
    if log_sha256(directory) != record.log_sha256:
        detail = f"the copy of {source}'s log differs from the log its record names"
        return RunRecord(id=run.id, status="error", detail=detail)
    terminal = read_summary(directory).state_hash
    return record.model_copy(
        update={"detail": f"reused: the Keep run of {other} (terminal state hash {terminal})"}
    )


def _not_plain(source: Path) -> str | None:
    """The first entry under ``source`` that is neither a regular file nor a folder (a link,
    a FIFO, a device, a socket), named with its kind; None when there is none. Copying one
    would follow it out of the run (a link to ``/``, or to ``/dev/zero``: a copy without end)
    or wait on it."""
    for root, folders, files in os.walk(source):  # links to folders are listed, not entered
        for name in (*folders, *files):
            mode = os.lstat(os.path.join(root, name)).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                kind = "a link" if stat.S_ISLNK(mode) else "a special file"
                return f"{kind} ({os.path.relpath(os.path.join(root, name), source)})"
    return None


def second_schedule(schedule: str, recording: Recording) -> str:
    """This panel's schedule as it runs on the first schedule's run: numbered from the first
    run's branch point when that run is a branch (``continuous`` from a midpoint branch at
    call K is ``once:K+continuous``, paper B.1), else as written (``protect:5``, B.2).

    Raises:
        ReplayError: a schedule a branch cannot take.
    """
    origin = recording.start.branch
    if origin is None or origin.purpose != "branch" or origin.call_index is None:
        return schedule
    return branch_schedule(schedule, origin.call_index)[0]


def diverged(
    panel: Path,
    config: PanelConfig,
    run: PlannedRun,
    directory: Path,
    *,
    planner: ChatModel,
    reviewer: Reviewer,
    mechanism: Mechanism = "replay",
) -> RunRecord:
    """The reviewing run ``run`` branched from ``execution.diverge_from``'s run of the same
    unit, scope and draw at the divergence point (see the module docstring), started as
    ``mechanism`` says (``auto``: by fork where it can).

    Returns:
        Its record: ``done`` with its verdict and the divergence point's call index
        (``diverged_at``, None when the schedules share the whole run); ``ineligible`` when
        the first run was; ``error`` (run again on resume) when the other panel's run has
        not finished, the panels are configured otherwise, or the first run cannot be
        replayed. A prefix that left its recording is ``done`` with the reason in
        ``detail``, as a branch's divergence is; a shared prefix that fails its check
        (:func:`~controlscope.replay.check_shared_prefix`) is ``done`` with the failure in
        ``problem``, which the report lists among its problems.
    """
    assert config.execution.diverge_from is not None
    other = linked_folder(panel, config.execution.diverge_from)
    problem = _unlike(other, config)
    record = finished(other, run.id) if problem is None else None
    if problem is None and record is None:
        problem = f"the first schedule's run {run.id} has not finished in {other}"
    if problem is not None or record is None:
        return RunRecord(id=run.id, status="error", detail=problem or "")
    if record.status == "ineligible":
        return RunRecord(id=run.id, status="ineligible", detail=record.detail)
    first = run_dir(other, run.id)
    try:
        recording = Recording.load(first)
        schedule = second_schedule(config.schedule, recording)
        point, found = branch_at_divergence(
            recording,
            schedule=schedule,
            out=directory,
            planner=planner,
            reviewer=reviewer,
            mechanism=mechanism,
        )
    except ReplayError as err:
        return RunRecord(id=run.id, status="error", detail=str(err))
    detail = found.divergence.message if found.divergence else ""
    problem = ""
    if not detail:
        try:
            check_shared_prefix(recording, directory)
        except ReplayError as err:
            problem = f"its shared prefix with {first} fails its check: {err}"
    return branched_record(
        run.id,
        found,
        detail,
        diverged_at=point.call_index,
        problem=problem,
        mechanism=found.mechanism,
    )
