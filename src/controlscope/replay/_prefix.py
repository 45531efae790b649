"""Prefix replay to a boundary, or of a whole recorded run (paper sections 3.3 and A.4).

A fresh workspace from the task, its parameters and seed; the recorded models answer; every
request, boundary, decision and primitive call (tool, final arguments, observation) is checked
against the recording, clock readings masked and their raw differences recorded apart; the
files are compared at the end when the recording has them (its terminal files for a whole run,
a ``branch_point``'s for a prefix that a branch or prefix replay recorded there).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from controlscope.core import BranchPointEvent, BranchPurpose
from controlscope.record import RunSummary
from controlscope.replay._hook import Plan
from controlscope.replay._recording import Recording, ReplayError
from controlscope.replay._run import (
    Divergence,
    Outcome,
    fresh_out,
    load,
    masked_files,
    run_from_prefix,
)
from controlscope.run import Observer


@dataclass(frozen=True)
class PrefixReplay:
    """What a prefix replay (or a replay of a whole run) found.

    Attributes:
        run_dir: the replay's run directory (an ordinary run directory; ``run_start`` names
            the source run, the boundary and the prefix hash).
        call_index: the boundary the prefix ended at (None: the whole run was replayed).
        verified_calls: primitive calls checked against the recording (tool, final arguments
            and normalised observation).
        verified_requests: model requests answered from the recording and checked, by role.
        files_compared: whether files were compared with the recording's at the end.
        clock_differences: requests that differed from their recording only in masked clock
            readings (listed in the log's ``clock_differences`` events).
        point: the ``branch_point`` event at the boundary (None for a whole run).
        summary: the replay's summary (None when it diverged before it was written).
        divergence: the first place the replay left its recording; None when it did not.
        ok: True when the replay stayed on its recording.
    """

    run_dir: Path
    call_index: int | None
    verified_calls: int
    verified_requests: dict[str, int]
    files_compared: bool
    clock_differences: int
    point: BranchPointEvent | None
    summary: RunSummary | None
    divergence: Divergence | None

    @property
    def ok(self) -> bool:
        """True when the replay stayed on its recording."""
        return self.divergence is None


def replay_prefix(
    recording: Recording | str | Path,
    *,
    out: Path,
    until: int | None = None,
    workspace_root: Path | None = None,
    observer: Observer | None = None,
) -> PrefixReplay:
    """Replay a recorded run to boundary ``until``, or whole.

    Args:
        recording: the recording, or its run directory.
        out: the replay's run directory (must not hold a run).
        until: the call index of the boundary to stop at (the calls completed before it);
            None replays the whole run.
        workspace_root: where the fresh workspace is made (a temporary directory when None).
        observer: called with every event after it is written.

    Returns:
        What the replay found; a divergence is reported in it, not raised.

    Raises:
        ReplayError: a recording that cannot be replayed (see :meth:`Recording.load`), a
            boundary beyond the recorded ones, a recorded task that is not the task today
            (an edited ``run_start``: the field named) or whose generator changed
            (:meth:`Recording.check_task`), an ``out`` that holds a run; nothing has run.
    """
    rec = load(recording)
    position = _end_position(rec, until)
    fresh_out(out)
    rec.check_task(workspace_root)
    plan = Plan(position=position, condition=rec.condition, stop=position is not None)
    purpose: BranchPurpose = "whole" if position is None else "prefix"
    outcome = run_from_prefix(
        rec, plan, out=out, purpose=purpose, workspace_root=workspace_root, observer=observer
    )
    divergence, compared = outcome.divergence, False
    if divergence is None:
        divergence, compared = _compare_files(rec, outcome)
    hook = outcome.hook
    return PrefixReplay(
        run_dir=out,
        call_index=None if hook.point is None else hook.point.call_index,
        verified_calls=hook.verified_calls,
        verified_requests=hook.verified_requests,
        files_compared=compared,
        clock_differences=hook.masked,
        point=hook.point,
        summary=outcome.result.summary if outcome.result is not None else None,
        divergence=divergence,
    )


def _end_position(rec: Recording, until: int | None) -> int | None:
    """The boundary position a replay stops at: ``until``'s, the boundary where a recorded
    prefix replay stopped (its log replays to there), or None for the whole run.

    Raises:
        ReplayError: ``until`` is not recorded, or a whole replay of a frozen candidate's
            log (it stopped where no boundary marks it).
    """
    if until is not None:
        return rec.position_of(until)
    if rec.end_reason == "prefix_end" and rec.branch_points:
        return max(rec.branch_points)
    if rec.end_reason == "candidate_end":
        raise ReplayError(
            f"{rec.run_dir} is a frozen candidate's run: replay its prefix (--until K) or its "
            "source run's operation (--operation N --endpoint candidate)"
        )
    return None


def _compare_files(rec: Recording, outcome: Outcome) -> tuple[Divergence | None, bool]:
    """The replay's files against the recording's, where the recording has them: its
    terminal files (and verdict) for a whole run, a recorded ``branch_point``'s at a
    boundary. A file whose text holds clock readings agent code wrote is compared with them
    masked where both sides say so, and not by its bytes where only the replay can (the calls
    that wrote it were checked, masked). Returns the first difference and whether a
    comparison was made."""
    hook, result = outcome.hook, outcome.result
    assert result is not None
    if hook.point is not None:
        recorded_point = rec.branch_points.get(hook.point.boundary)
        if recorded_point is None:
            return None, False
        recorded = masked_files(recorded_point.file_hashes, recorded_point.clock_files)
        received = masked_files(hook.point.file_hashes, hook.point.clock_files)
        where = hook.point.call_index
    else:
        if rec.final is None or rec.final.state_hash is None:
            return None, False
        recorded, received = dict(rec.final.file_hashes), dict(result.summary.file_hashes)
        recorded["<verdict>"] = str(rec.final.success)
        received["<verdict>"] = str(result.verdict.success)
        where = None
    for path in sorted(set(recorded) | set(received)):
        left, right = recorded.get(path, "<absent>"), received.get(path, "<absent>")
        if left != right and not (where is None and path in hook.clock_files):
            whose = "the terminal" if where is None else f"boundary {where}'s"
            message = (
                f"{whose} files differ from the recording at {path}: recorded {left}, "
                f"replayed {right}"
            )
            return Divergence(message, path, left, right, where), True
    return None, True
