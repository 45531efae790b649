"""Frozen replays of one recorded operation at its recorded prefix (paper 3.3, 6.2, C.1, C.2).

- ``candidate`` (Figure 3, C.2): the recorded review is replayed at its boundary, so the
  recorded replacement runs; it runs to its end or to the remaining original call budget,
  with no review and no further planning; the verifier runs where it stops (the block's end
  or the budget). Reports goal reached, block finished, calls.
- ``retained`` (3.3, 6.2, C.2): the recorded replacement (or any recorded revision: an
  argument or block-data patch, as A.2's frozen pagination candidates) is kept, later reviews
  are Keep, ordinary planning goes on with the live planner. Reports success and calls.
- ``shared_patch`` (3.3, C.1): one recorded argument patch is proposed, without a model, under
  the Arg label and under the Full label from the same prefix; later reviews are Keep and
  ordinary planning goes on, its identical requests sharing answers (an exact-request cache
  couples the two, paper A.5). Call traces, terminal file bytes and scores are compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from controlscope.core import (
    OPERATIONS,
    ChatModel,
    Event,
    OperationKind,
    PrimitiveCallEvent,
    Scope,
)
from controlscope.models import CachedModel, RequestCache
from controlscope.record import RunSummary, first_difference, map_strings, read_events
from controlscope.replay._branch import branch_condition
from controlscope.replay._hook import Plan
from controlscope.replay._recording import RecordedReview, Recording, ReplayError
from controlscope.replay._run import Divergence, Outcome, fresh_out, load, run_from_prefix

Endpoint = Literal["candidate", "retained", "shared_patch"]
"""Which frozen replay of a recorded operation (see the module docstring)."""

ENDPOINTS: tuple[Endpoint, ...] = get_args(Endpoint)
"""Every endpoint."""

ENDPOINT_KINDS: dict[Endpoint, tuple[OperationKind, ...]] = {
    "candidate": tuple(s.kind for s in OPERATIONS if s.cancels),
    "retained": tuple(s.kind for s in OPERATIONS if s.counter is not None),
    "shared_patch": tuple(s.kind for s in OPERATIONS if s.payload == "arguments"),
}
"""The operation kinds each endpoint replays: ``candidate`` a replacement (its kind cancels the
pending call), ``retained`` any recorded revision (every kind but keep), ``shared_patch`` an
argument patch (new argument values, proposable under the Arg label and the Full label)."""

SHARED_CACHE = "planner-cache.sqlite"
"""The exact-request cache a shared-patch replay couples its two labels' planners with (in
its output directory, unless the planner comes with a cache of its own)."""


@dataclass(frozen=True)
class EndpointRun:
    """One run of a frozen operation replay.

    Attributes:
        label: ``candidate``, ``retained``, or the scope label (``arg``, ``full``).
        run_dir: its run directory.
        summary: its summary (None when it diverged in the prefix).
        success: the verifier's verdict where the run stopped (goal reached).
        calls: primitive calls of the whole trajectory (the prefix's included).
    """

    label: str
    run_dir: Path
    summary: RunSummary | None

    @property
    def success(self) -> bool | None:
        """The verifier's verdict where the run stopped (goal reached)."""
        return self.summary.success if self.summary is not None else None

    @property
    def calls(self) -> int | None:
        """Primitive calls of the whole trajectory (the prefix's included)."""
        return self.summary.primitive_calls if self.summary is not None else None


@dataclass(frozen=True)
class OperationReplay:
    """A frozen replay of one recorded operation.

    Attributes:
        endpoint: which replay.
        operation: the operation's index among the recording's reviewed boundaries.
        call_index: its boundary's call index.
        runs: the runs (one; two for ``shared_patch``: ``arg`` then ``full``).
        block_finished: ``candidate``: whether the replacement block completed (False when
            the budget or an error ended it); None otherwise.
        matched: ``shared_patch``: whether traces, terminal files and scores all match.
        difference: ``shared_patch``: the first difference between the labels, if any.
        divergence: a run that left the recording in its prefix; None when none did.
        ok: True when every run replayed its prefix faithfully.
    """

    endpoint: Endpoint
    operation: int
    call_index: int
    runs: tuple[EndpointRun, ...]
    block_finished: bool | None = None
    matched: bool | None = None
    difference: str | None = None
    divergence: Divergence | None = None

    @property
    def ok(self) -> bool:
        """True when every run replayed its prefix faithfully."""
        return self.divergence is None


def replay_operation(
    recording: Recording | str | Path,
    operation: int,
    endpoint: Endpoint,
    *,
    out: Path,
    planner: ChatModel | None = None,
    workspace_root: Path | None = None,
) -> OperationReplay:
    """Replay recorded operation ``operation`` frozen at its recorded prefix.

    Args:
        recording: the recording, or its run directory.
        operation: the operation's 0-based index among the recording's reviewed boundaries.
        endpoint: ``candidate``, ``retained`` or ``shared_patch``.
        out: the run directory (``candidate``, ``retained``), or the directory of the two
            label runs ``arg`` and ``full`` (``shared_patch``).
        planner: the live planner of ordinary planning after the boundary (``retained``,
            ``shared_patch``; ``candidate`` plans no more).
        workspace_root: where the workspaces are made.

    Returns:
        What the replay found.

    Raises:
        ReplayError: an unknown endpoint; an operation that is not recorded, or not a
            replacement (``candidate``), a revision (``retained``) or an argument patch
            (``shared_patch``); no planner where one is needed; see also
            :meth:`Recording.load` and :meth:`Recording.check_task`; nothing has run.
    """
    if endpoint not in ENDPOINTS:
        raise ReplayError(f"unknown endpoint {endpoint!r}; known: {', '.join(ENDPOINTS)}")
    rec = load(recording)
    review = rec.operation(operation)
    if review.realized.kind not in ENDPOINT_KINDS[endpoint]:
        raise ReplayError(
            f"operation {operation} of {rec.run_dir} (call {review.call_index}) realized "
            f"{review.realized.kind}; the {endpoint} endpoint replays "
            + " or ".join(ENDPOINT_KINDS[endpoint])
        )
    if endpoint != "candidate" and planner is None:
        raise ReplayError(f"the {endpoint} endpoint plans on: give a planner model")
    check_operation_out(out, endpoint)
    rec.check_task(workspace_root)
    if endpoint == "shared_patch":
        assert planner is not None
        return _shared_patch(rec, review, out, planner, workspace_root)
    return _kept(rec, review, endpoint, out, planner, workspace_root)


def _kept(
    rec: Recording,
    review: RecordedReview,
    endpoint: Endpoint,
    out: Path,
    planner: ChatModel | None,
    workspace_root: Path | None,
) -> OperationReplay:
    """``candidate`` or ``retained``: the recorded review replayed at its boundary, Keep
    after it."""
    condition = rec.condition_for(review).model_copy(
        update={"schedule": f"once:{review.call_index}", "source": None}
    )
    candidate = endpoint == "candidate"
    plan = Plan(review.boundary, condition, review="recorded", candidate=candidate)
    outcome = run_from_prefix(
        rec,
        plan,
        out=out,
        purpose=endpoint,
        planner=None if candidate else planner,
        operation=review.index,
        workspace_root=workspace_root,
    )
    status = outcome.hook.block_status
    return OperationReplay(
        endpoint=endpoint,
        operation=review.index,
        call_index=review.call_index,
        runs=(_run(endpoint, outcome),),
        block_finished=(status == "completed") if candidate and status is not None else None,
        divergence=outcome.divergence,
    )


def _shared_patch(
    rec: Recording,
    review: RecordedReview,
    out: Path,
    planner: ChatModel,
    workspace_root: Path | None,
) -> OperationReplay:
    """The recorded patch under the Arg and the Full label, compared."""
    out.mkdir(parents=True, exist_ok=True)
    if not isinstance(planner, CachedModel):
        planner = CachedModel(planner, RequestCache(out / SHARED_CACHE))
    outcomes: list[Outcome] = []
    for scope in (Scope.ARG, Scope.FULL):
        name = scope.name.lower()
        schedule = f"once:{review.call_index}"
        condition = branch_condition(rec, scope, draw=review.draw, schedule=schedule, source=None)
        plan = Plan(review.boundary, condition, review="frozen", frozen=review.realized)
        outcome = run_from_prefix(
            rec,
            plan,
            out=out / name,
            purpose="shared_patch",
            planner=planner,
            operation=review.index,
            workspace_root=workspace_root,
        )
        outcomes.append(outcome)
        if outcome.divergence is not None:
            break
    runs = tuple(_run(o.run_dir.name, o) for o in outcomes)
    divergence = next((o.divergence for o in outcomes if o.divergence is not None), None)
    difference = None if divergence else _label_difference(rec, runs)
    return OperationReplay(
        endpoint="shared_patch",
        operation=review.index,
        call_index=review.call_index,
        runs=runs,
        matched=None if divergence else difference is None,
        difference=difference,
        divergence=divergence,
    )


def _run(label: str, outcome: Outcome) -> EndpointRun:
    summary = outcome.result.summary if outcome.result is not None else None
    return EndpointRun(label=label, run_dir=outcome.run_dir, summary=summary)


def _label_difference(rec: Recording, runs: tuple[EndpointRun, ...]) -> str | None:
    """The first difference between the two labels' call traces, terminal files or scores
    (None when they match)."""
    arg, full = runs
    assert arg.summary is not None and full.summary is not None
    traces = [_trace(rec, read_events(r.run_dir)) for r in runs]
    found = first_difference(traces[0], traces[1])
    if found is not None:
        return f"the call traces differ at {found[0]}: arg {found[1]!r}, full {found[2]!r}"
    if arg.summary.file_hashes != full.summary.file_hashes:
        left, right = arg.summary.file_hashes, full.summary.file_hashes
        path = next(p for p in sorted(set(left) | set(right)) if left.get(p) != right.get(p))
        return f"the terminal files differ at {path}: arg {left.get(path)}, full {right.get(path)}"
    if arg.summary.success != full.summary.success:
        return f"the scores differ: arg {arg.summary.success}, full {full.summary.success}"
    return None


def _trace(rec: Recording, events: list[Event]) -> list[Any]:
    """A run's primitive calls as compared: tool, final arguments, observation (clock
    readings masked)."""
    calls = [
        {"tool": e.call.tool, "arguments": e.call.arguments, "observation": e.call.result.text}
        for e in events
        if isinstance(e, PrimitiveCallEvent)
    ]
    return [map_strings(c, rec.normalise) for c in calls]


def check_operation_out(out: Path, endpoint: Endpoint) -> None:
    """Refuse an ``out`` that cannot take an operation's replay at ``endpoint``; cheap, so a
    caller checks it before it builds any model.

    Args:
        out: the replay's output directory.
        endpoint: the endpoint replayed (``shared_patch`` writes ``out/arg`` and
            ``out/full``).

    Raises:
        ReplayError: ``out`` (``out/arg`` and ``out/full`` for ``shared_patch``), or the
            nearest of its folders that exists, is not a directory, or it holds a run.
    """
    labels = ("arg", "full") if endpoint == "shared_patch" else (endpoint,)
    for label in labels:
        fresh_out(out / label if endpoint == "shared_patch" else out)
