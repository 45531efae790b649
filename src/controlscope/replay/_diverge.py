"""A second schedule branched from a first schedule's run at the divergence point (paper B.1,
B.2).

Two schedules of one scope often decide alike for a while: B.1's one-time and continuous
conditions both review at the midpoint and part at the next boundary a further call follows;
B.2's continuous and protected Full both review every boundary until the first replacement
and part where the protection window withholds a review. The paper's conditions share that
part exactly: "each scope's one-time and continuous conditions replay the exact first review
request, response, and decision" (B.1); "the first selected replacement and every earlier
review decision match exactly between the two Full schedules" (B.2).

:func:`schedule_divergence` reads the first schedule's recorded run and finds the first
boundary where the second schedule decides otherwise; :func:`branch_at_divergence` runs the
second schedule as a prefix replay of the first run up to that boundary (every request,
answer, decision and call answered from the recording and checked; the second schedule asked
at every boundary and checked to decide as recorded), then goes on live under the second
schedule. Where the two never part, the second run is a replay of the whole first run. So the
shared part is shared by construction; :func:`check_shared_prefix` checks it afterwards, event
by event, and compares the recorded prefix hashes.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from controlscope.core import BlockId, ChatModel, Condition, Keep, Scope
from controlscope.record import first_difference
from controlscope.replay._branch import (
    BranchResult,
    Mechanism,
    _logged_result,
    _result,
    branch_condition,
)
from controlscope.replay._fork import fork_branches
from controlscope.replay._hook import Plan
from controlscope.replay._recording import RecordedReview, Recording, ReplayError
from controlscope.replay._run import fresh_out, load, run_from_prefix
from controlscope.review import Reviewer
from controlscope.schedule import Schedule, ScheduleContext, ScheduleSpec

QUEUE_READERS = frozenset({"once_online"})
"""Schedule kinds whose decision reads the blocks queued behind the running one, which a log
does not hold: refused as a second schedule."""


@dataclass(frozen=True)
class DivergencePoint:
    """Where a second schedule first decides otherwise than a recorded run's.

    Attributes:
        first: the recorded run's schedule (as recorded).
        second: the second schedule (canonical).
        position: the boundary's 0-based position among the recording's boundaries; None
            when the two decide alike at every recorded boundary.
        call_index: that boundary's call index (None with ``position``).
        shared_reviews: the recorded reviews before it (every one when ``position`` is None):
            the decisions the two runs share.
        second_reviews: whether the second schedule reviews there (None with ``position``).
    """

    first: str
    second: str
    position: int | None
    call_index: int | None
    shared_reviews: tuple[RecordedReview, ...]
    second_reviews: bool | None = None


def _second(recording: Recording, schedule: str) -> tuple[str, Schedule]:
    """The second schedule's canonical name and a fresh instance of it.

    Raises:
        ReplayError: a malformed spec, a bare ``once``/``midpoint``, or a kind that reads the
            queue of blocks.
    """
    try:
        spec = ScheduleSpec.parse(schedule, numbered=True)
    except ValueError as err:
        raise ReplayError(f"the second schedule: {err}") from None
    readers = sorted({kind for kind, _ in spec.parts} & QUEUE_READERS)
    if readers:
        raise ReplayError(
            f"the second schedule {spec.name!r} reads the queued blocks ({readers[0]}), which "
            "a recorded run does not hold; it cannot be placed on one"
        )
    env = recording.env
    return spec.name, spec.build(write_tools=env.write_tools, read_tools=env.read_tools)


def schedule_divergence(recording: Recording | str | Path, schedule: str) -> DivergencePoint:
    """The first boundary of ``recording`` where ``schedule`` decides otherwise.

    The second schedule is asked at every recorded boundary, with the context read from the
    log (the running block's code, whether it is a replacement, the calls completed before
    it), and told what was executed there, until it answers otherwise than the recording.

    Args:
        recording: the first schedule's run (or its directory).
        schedule: the second schedule, numbered (``once:12+continuous``, ``protect:5``).

    Returns:
        The divergence point.

    Raises:
        ReplayError: an unreadable recording, or a schedule that cannot be placed (see
            :func:`_second`).
    """
    rec = load(recording)
    name, second = _second(rec, schedule)
    calls, position = 0, -1
    for event in rec.events:
        if event.type == "primitive_call":
            calls += 1
        if event.type != "boundary":
            continue
        position += 1
        boundary = event.boundary
        ctx = ScheduleContext(
            code=boundary.code,
            is_replacement=BlockId.parse(boundary.block_id).is_replacement,
            calls_completed=calls,
        )
        decided = second.should_review(boundary, ctx)
        shared = tuple(r for r in rec.reviews if r.boundary < position)
        if decided != event.review:
            return DivergencePoint(
                rec.condition.schedule, name, position, boundary.call_index, shared, decided
            )
        review = rec.review_at(position)
        second.observe(boundary, review.realized if review is not None else Keep())
    return DivergencePoint(rec.condition.schedule, name, None, None, rec.reviews)


def branch_at_divergence(
    recording: Recording | str | Path,
    *,
    schedule: str,
    out: Path,
    planner: ChatModel | None,
    reviewer: Reviewer | None,
    workspace_root: Path | None = None,
    mechanism: Mechanism = "auto",
) -> tuple[DivergencePoint, BranchResult]:
    """Run ``schedule`` in the first run's scope and draw from the first run's recorded prefix
    up to the divergence point, then live (paper B.1, B.2; see the module docstring).

    The second run starts by fork where it can, as branches do: the prefix is replayed once
    in a trunk (a temporary folder beside ``out``, removed after), the second schedule
    deciding and checked at every prefix boundary there, and the trunk forked at the
    divergence point into ``out``; its record is the one a prefix replay writes (the same
    events and hashes), with ``fork`` as its origin's mechanism. Where it cannot be forked
    (the environment keeps state outside its workspace, the worker cannot be forked, the
    schedules never part, the prefix leaves the recording), it replays the prefix itself.

    Args:
        recording: the first schedule's run (or its directory).
        schedule: the second schedule, numbered.
        out: the second run's directory (must not hold a run).
        planner: the live planner after the divergence point (None: the recording answers
            on).
        reviewer: the second run's reviewer after the divergence point (its requests carry
            the first run's draw); needed unless the scope is Keep.
        workspace_root: where the run's workspace is made.
        mechanism: how it starts (:data:`~controlscope.replay.Mechanism`: ``auto`` by fork
            where it can, ``fork`` or not at all, ``replay``).

    Returns:
        The divergence point and the second run (a divergence from the recording in its
        prefix is reported in it, not raised; ``mechanism`` names how it started).

    Raises:
        ReplayError: bad input before anything runs: see :func:`schedule_divergence`; a
            reviewing scope with no reviewer; an ``out`` that holds a run; a task that
            changed since the recording; with ``mechanism="fork"``, a run that cannot be
            forked (the reason).
    """
    rec, point, condition = _checked(recording, schedule, out, reviewer, mechanism)
    scope = rec.condition.scope
    rec.check_task(workspace_root)
    note = "replay was asked for" if mechanism == "replay" else "the schedules never part"
    if point.position is not None and mechanism != "replay":
        plan = Plan(
            position=point.position,
            condition=condition,
            after=_second(rec, point.second)[1],
            decides=True,
        )
        forked, note = _forked(rec, plan, out, planner, reviewer, workspace_root)
        if forked is not None:
            return point, forked
    if mechanism == "fork":
        raise ReplayError(f"the second run cannot be forked: {note}")
    _, after = _second(rec, point.second)  # fresh: a trunk's schedule has observed its prefix
    plan = Plan(position=point.position, condition=condition, after=after, decides=True)
    outcome = run_from_prefix(
        rec,
        plan,
        out=out,
        purpose="divergence",
        planner=planner,
        reviewer=reviewer,
        workspace_root=workspace_root,
    )
    return point, _result(scope.name.lower(), rec.condition.draw, outcome)


def _checked(
    recording: Recording | str | Path,
    schedule: str,
    out: Path,
    reviewer: Reviewer | None,
    mechanism: Mechanism,
) -> tuple[Recording, DivergencePoint, Condition]:
    """The first run, the divergence point and the second run's condition, once the input is
    checked (see :func:`branch_at_divergence`'s errors)."""
    if mechanism not in ("auto", "fork", "replay"):
        raise ReplayError(f"mechanism is auto, fork or replay, not {mechanism!r}")
    rec = load(recording)
    point = schedule_divergence(rec, schedule)
    scope = rec.condition.scope
    if scope is not Scope.KEEP and reviewer is None:
        raise ReplayError(f"scope {scope.name.lower()} reviews: give a reviewer model")
    condition = branch_condition(
        rec, scope, draw=rec.condition.draw, schedule=point.second, source=rec.condition.source
    )
    fresh_out(out)
    return rec, point, condition


def _forked(
    rec: Recording,
    plan: Plan,
    out: Path,
    planner: ChatModel | None,
    reviewer: Reviewer | None,
    workspace_root: Path | None,
) -> tuple[BranchResult | None, str]:
    """The second run forked at ``plan``'s boundary from one replay of the shared prefix
    (:func:`~controlscope.replay._fork.fork_branches`); None and why when it was not forked.
    In the forked process this does not return."""
    assert plan.position is not None
    with tempfile.TemporaryDirectory(prefix=f".{out.name}-trunk-", dir=out.parent) as trunk:
        outcome, fanout = fork_branches(
            rec,
            [(out, plan)],
            position=plan.position,
            out=Path(trunk),
            planner=planner,
            reviewer=reviewer,
            workspace_root=workspace_root,
            trunk=plan,
            purpose="divergence",
        )
    if outcome is not None and outcome.divergence is not None:
        return None, f"the shared prefix left the recording: {outcome.divergence.message}"
    branch = fanout.branches[0]
    if not branch.forked:
        return None, fanout.failure or "no process was forked"
    scope = rec.condition.scope.name.lower()
    return _logged_result(scope, rec.condition.draw, out, branch.problem), ""


@dataclass(frozen=True)
class SharedPrefix:
    """Two runs' shared prefix, checked.

    Attributes:
        position: the divergence point's boundary position (None: the whole run is shared).
        prefix_hash: the shared prefix's hash (both runs' and the one the second recorded).
        parts: the events compared.
        shared_reviews: the reviews in the shared prefix, each the same request, answer and
            decision in both runs.
    """

    position: int | None
    prefix_hash: str
    parts: int
    shared_reviews: int


def check_shared_prefix(
    first: Recording | str | Path, second: Recording | str | Path
) -> SharedPrefix:
    """Check that ``second`` (a run of :func:`branch_at_divergence`) shares ``first``'s
    prefix up to its divergence point: every model call (request and answer), block,
    boundary, decision and primitive call, event by event, and the prefix hash ``second``
    recorded when it started.

    Args:
        first: the first schedule's run.
        second: the second schedule's run.

    Returns:
        What was checked.

    Raises:
        ReplayError: ``second`` is no such run, or the prefixes differ: the first differing
            event, its type and field, both values (a log edited since, or runs that never
            shared a prefix).
    """
    one, two = load(first), load(second)
    origin = two.start.branch
    if origin is None or origin.purpose != "divergence":
        raise ReplayError(f"{two.run_dir} is not a run branched at a divergence point")
    position = origin.boundary
    left, right = one.prefix_parts(position), two.prefix_parts(position)
    for index, (a, b) in enumerate(zip(left, right, strict=False)):
        found = first_difference(a, b)
        if found is not None:
            where, there, here = found
            raise ReplayError(
                f"the shared prefix differs at its event {index} ({a.get('type')}): {where} is "
                f"{str(there)[:80]!r} in {one.run_dir}, {str(here)[:80]!r} in {two.run_dir}"
            )
    if len(left) != len(right):
        raise ReplayError(
            f"the shared prefix holds {len(left)} events in {one.run_dir} and {len(right)} in "
            f"{two.run_dir}"
        )
    digest = one.prefix_hash(position)
    for name, value in (("recorded", origin.prefix_hash), ("replayed", two.prefix_hash(position))):
        if value != digest:
            raise ReplayError(
                f"the shared prefix's hash differs: prefix_hash {value[:12]}… {name} in "
                f"{two.run_dir}, {digest[:12]}… of {one.run_dir}"
            )
    reviews = sum(1 for r in one.reviews if position is None or r.boundary < position)
    return SharedPrefix(position, digest, len(left), reviews)
