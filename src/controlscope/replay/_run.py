"""Running one trajectory from a recorded prefix, and what a replay reports when it leaves
its recording."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from controlscope.core import EVENTS_FILE, BranchOrigin, BranchPurpose, ChatModel
from controlscope.record import ReplayMismatch
from controlscope.replay._hook import FROZEN_NOTE, FrozenOperation, Plan, PrefixHook, Splitter
from controlscope.replay._recording import Recording, ReplayError
from controlscope.review import Reviewer
from controlscope.run import Observer, RunResult, run_trajectory


@dataclass(frozen=True)
class Divergence:
    """The first place a replay left its recording (paper A.4: the checks name it).

    Attributes:
        message: the divergence in words: whose request, which call or boundary, which field,
            both values.
        field: the first differing field (e.g. ``messages[3].content``, ``arguments.path``,
            a file's path); empty when one side has nothing there.
        recorded: the recorded value.
        received: the replay's value.
        boundary: the call index of the last boundary the replay reached (None before the
            first).
    """

    message: str
    field: str
    recorded: Any
    received: Any
    boundary: int | None


@dataclass(frozen=True)
class Outcome:
    """One trajectory run from a recorded prefix.

    Attributes:
        result: the run's result; None when it diverged from the recording.
        hook: the hook that steered it (counts, the ``branch_point`` it wrote).
        divergence: where it left the recording, if it did.
        run_dir: its run directory.
    """

    result: RunResult | None
    hook: PrefixHook
    divergence: Divergence | None
    run_dir: Path


def masked_files(file_hashes: dict[str, str], clock_files: dict[str, str]) -> dict[str, str]:
    """Each file's hash, by its text with clock readings masked where it holds some (a
    ``branch_point``'s ``clock_files``), else by its bytes.

    Args:
        file_hashes: the hashes of the files' bytes, by relative path.
        clock_files: the hashes of the masked texts of the files that hold clock readings.

    Returns:
        The hashes to compare, by relative path.
    """
    return {path: clock_files.get(path, digest) for path, digest in file_hashes.items()}


def load(recording: Recording | str | Path) -> Recording:
    """``recording`` itself, or the recording read from a run directory.

    Raises:
        ReplayError: see :meth:`Recording.load`.
    """
    return recording if isinstance(recording, Recording) else Recording.load(recording)


def fresh_out(out: Path) -> None:
    """Refuse an output directory that already holds a run (a log is never overwritten).

    Raises:
        ReplayError: ``out``, or the nearest of its folders that exists, is not a directory
            (a file, a link that leads nowhere or loops), or ``out`` holds a log.
    """
    for folder in (out, *out.parents):  # the nearest that exists: a directory, not a link loop
        if os.path.lexists(folder):
            if folder == out and not folder.is_dir():
                raise ReplayError(f"out {out} exists and is not a directory")
            if not folder.is_dir():
                raise ReplayError(f"out {out} cannot be made: {folder} is not a directory")
            break
    if (out / EVENTS_FILE).exists():
        raise ReplayError(f"{out} already holds a recorded run; choose a new out directory")


def run_from_prefix(
    recording: Recording,
    plan: Plan,
    *,
    out: Path,
    purpose: BranchPurpose,
    planner: ChatModel | None = None,
    reviewer: Reviewer | None = None,
    operation: int | None = None,
    workspace_root: Path | None = None,
    observer: Observer | None = None,
    fanout: Splitter | None = None,
) -> Outcome:
    """Run one trajectory whose prefix answers from ``recording`` (see :class:`PrefixHook`).

    Args:
        recording: the recording.
        plan: where the prefix ends and what happens there and after.
        out: the run directory.
        purpose: what the run is (recorded in ``run_start``'s ``branch``).
        planner: the live planner after the prefix (None: the recording answers on).
        reviewer: the branch's reviewer, when the plan's boundary is decided by it.
        operation: the recorded operation a frozen replay repeats.
        workspace_root: where the fresh workspace is made.
        observer: called with every event after it is written.
        fanout: branches to fork at the plan's boundary (this run is then their trunk; a
            forked child ends its process when its branch is recorded, :mod:`._fork`).

    Returns:
        The outcome; a divergence ends the run ``replay_diverged`` and is reported, not
        raised.
    """
    hook = PrefixHook(recording, plan, reviewer=reviewer, planner=planner)
    hook.fanout = fanout
    position = plan.position
    origin = BranchOrigin(
        source_run=str(recording.run_dir),
        call_index=None if position is None else recording.boundaries[position][0].call_index,
        boundary=position,
        prefix_hash=hook.prefix_hash,
        purpose=purpose,
        operation=operation,
    )
    shown: Reviewer | None = reviewer  # the reviewer run_start names
    if plan.frozen is not None:
        shown = FrozenOperation(plan.frozen, FROZEN_NOTE)
    elif plan.review == "recorded" or purpose in ("prefix", "whole"):
        shown = hook.recorded_reviewer
    failed = True
    try:
        result = run_trajectory(
            recording.env,
            recording.task,
            seed=recording.seed,
            planner=hook.planner,
            reviewer=shown,
            condition=plan.condition,
            out_dir=out,
            workspace_root=workspace_root,
            observer=observer,
            hook=hook,
            origin=origin,
            since=recording.start.t,  # the recording's state, hashed as it was
            source_file=recording.start.source_file,
        )
        failed = False
    except ReplayMismatch as err:
        failed = False
        return Outcome(None, hook, _divergence(err, hook, recording), out)
    finally:
        if fanout is not None and fanout.child is not None:
            fanout.exit_child(failed)  # a forked branch's process ends here
    return Outcome(result, hook, None, out)


def _divergence(err: ReplayMismatch, hook: PrefixHook, recording: Recording) -> Divergence:
    boundary = None
    if 0 <= hook.position < len(recording.boundaries):
        boundary = recording.boundaries[hook.position][0].call_index
    where = f" (at boundary {boundary})" if boundary is not None else " (before the first boundary)"
    return Divergence(
        message=f"{err}{where}",
        field=err.path,
        recorded=err.recorded,
        received=err.received,
        boundary=boundary,
    )
