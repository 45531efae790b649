"""Branches from one recorded prefix: one per scope and reviewer draw, from the same ``(h, s)``
(paper sections 3.1, 3.2, 5.1, A.4 and B.1).

Every branch replays the recorded prefix to the boundary in a workspace of its own (every
request and call checked), records the shared state there (a ``branch_point`` event) and goes
on under its own condition: its scope is offered at the boundary, its schedule decides after
(``once``: that one opportunity, then Keep; ``continuous`` and its modifiers: the paper's
continuous rule), and the live planner plans. The first review requests of all branches must
be identical except for the operation set offered: their hash (the request rendered for every
operation) is compared across branches and recorded.

Branches are started by fork where they can be (``mechanism="auto"``): the prefix is
replayed once, checked, and the trajectory paused at the boundary is forked once per branch
(worker, controller and workspace, :mod:`._fork`); the first review requests and workspaces
are compared across branches exactly as for replayed ones. Where a fork cannot be used (the
environment keeps state outside its workspace, the worker's forks are not supervised), every
branch replays the prefix itself and the set says why (``mechanism_note``).

Either way each branch starts from the reviewer and the planner as they were at the boundary
(which the recording reaches without them): a forked branch runs in a copy of the trunk's
process, a replayed one in a process forked before it starts (:mod:`._apart`), so a reviewer
that keeps state (a scripted model, a Python reviewer) gives every branch what it would have
given the first, whichever mechanism ran it.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal, NoReturn

from pydantic import ValidationError

from controlscope._tree import remove_tree
from controlscope.core import (
    EVENTS_FILE,
    BranchPointEvent,
    ChatModel,
    Condition,
    Draws,
    RunEndEvent,
    Scope,
    ScopeName,
    SourceBoundary,
    lattice_operations,
    range_problem,
)
from controlscope.record import RunSummary, iter_events, summarize
from controlscope.replay._apart import run_apart
from controlscope.replay._fork import PREFIX_DIR, close_record, fork_branches
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
from controlscope.review import Reviewer
from controlscope.run import place_schedule, read_source
from controlscope.schedule import Schedule, ScheduleSpec

Mechanism = Literal["auto", "fork", "replay"]
"""How branches start: by fork where possible, else by prefix replay (``auto``); by fork or
not at all (``fork``); each by its own prefix replay (``replay``)."""

MECHANISM_NOTES = {
    "fork": "fork: the prefix replayed once (every request and call checked), then the "
    "trajectory paused at the boundary forked once per branch (worker, controller, workspace)",
    "replay": "prefix replay: each branch re-runs the recorded prefix in its own workspace, "
    "every request and call checked",
}
"""How branches were started, in words (printed by ``controlscope branch``)."""

BRANCHES_FILE = "branches.json"
"""The file ``branch`` writes in its output directory: the branch set as JSON."""


BOUNDARY_RULES = ("midpoint", "local-rule", "feedback-rule")
"""The named boundaries :func:`resolve_boundary` places from a source trajectory (paper B.1,
appendix B, A.3); ``_`` may stand for ``-``."""


@dataclass(frozen=True)
class BoundaryChoice:
    """Where a branch starts in a recording.

    Attributes:
        call_index: the boundary's call index (K: the calls completed before it).
        position: the boundary's 0-based position among the recording's boundaries.
        source: where the boundary came from when a source-run rule placed it (the midpoint,
            paper B.1; the local rule, appendix B); None for a number given.
    """

    call_index: int
    position: int
    source: SourceBoundary | None = None


@dataclass(frozen=True)
class BranchResult:
    """One branch.

    Attributes:
        scope: the granted scope.
        draw: the reviewer draw.
        run_dir: its run directory (an ordinary run directory).
        summary: its summary (None when it diverged in the prefix).
        request_hash: its first review request's hash with the operation set left out.
        state_hash: the workspace's hash at the boundary.
        files: each file's hash at the boundary (by its masked text where it holds clock
            readings agent code wrote).
        divergence: where the branch left the recording in its prefix (None when it did
            not).
        mechanism: how it started: ``fork`` or ``replay``.
        problem: why the branch's process ended abnormally (its summary then says its log
            has no end), if it did.
    """

    scope: str
    draw: int
    run_dir: Path
    summary: RunSummary | None
    request_hash: str | None
    state_hash: str | None
    files: dict[str, str]
    divergence: Divergence | None = None
    mechanism: str = "replay"
    problem: str | None = None


@dataclass(frozen=True)
class BranchSet:
    """The branches of one prefix.

    Attributes:
        source_run: the recording's run directory.
        call_index: the boundary's call index.
        position: the boundary's position among the recording's boundaries.
        prefix_hash: the recorded prefix's hash.
        schedule: the branches' schedule as recorded (e.g. ``once:7``).
        mechanism: how the branches were started: ``fork``, ``replay``, or ``mixed`` (forking
            stopped part way; each branch says how it started).
        mechanism_note: why branches were not forked, when some were not.
        branches: the branches run, in order.
        request_hash: the first review request's hash every branch shares (None when they do
            not share one, or none was run).
        divergence: why the set is not trustworthy: a branch that left the recording in its
            prefix, or branches whose first requests or workspaces differ; None when all is
            well.
        ok: True when every branch replayed its prefix and all share ``(h, s)``.
    """

    source_run: Path
    call_index: int
    position: int
    prefix_hash: str
    schedule: str
    mechanism: str
    branches: tuple[BranchResult, ...]
    request_hash: str | None
    divergence: Divergence | None
    mechanism_note: str = ""

    @property
    def ok(self) -> bool:
        """True when every branch replayed its prefix and all share ``(h, s)``."""
        return self.divergence is None


def resolve_boundary(recording: Recording, at: int | str) -> BoundaryChoice:
    """The boundary ``at`` names in ``recording``.

    Args:
        recording: the recording.
        at: a call index (K); ``midpoint`` (K = floor(N/2) of the recording's N calls, paper
            B.1); ``local-rule`` (the paper's local rule, appendix B); or ``feedback-rule``
            (the feedback-visibility rule, A.3: the first same-block boundary after an
            information-returning call, at a unique direct call site outside control-flow
            constructs; information-returning: the environment's ``read_tools``). The rules
            need a completed Keep recording (a source trajectory).

    Returns:
        The boundary.

    Raises:
        ReplayError: an unknown name, a boundary beyond the recorded ones, a recording that
            is not a source trajectory, or one the local or feedback rule finds ineligible (the
            reason is named).
    """
    if isinstance(at, int) or at.strip().isdigit():
        k = int(at)
        return BoundaryChoice(k, recording.position_of(k))
    rule = at.strip().replace("_", "-")
    if rule not in BOUNDARY_RULES:
        raise ReplayError(f"--at takes a call index, {', '.join(BOUNDARY_RULES)}, not {at!r}")
    try:
        source = read_source(recording.run_dir)
        env = recording.env
        bare = "midpoint" if rule == "midpoint" else "once"
        _, placed = place_schedule(
            bare,
            source,
            write_tools=env.write_tools,
            read_tools=env.read_tools,
            once_rule="feedback" if rule == "feedback-rule" else "local",
        )
    except (FileNotFoundError, ValueError) as err:
        raise ReplayError(str(err)) from None
    return BoundaryChoice(placed.call_index, recording.position_of(placed.call_index), placed)


def branch_schedule(spec: str, call_index: int) -> tuple[str, Callable[[], Schedule]]:
    """A branch's schedule: its name as recorded and a factory of what decides after the
    boundary.

    Args:
        spec: ``once`` (the boundary's one opportunity, then Keep, paper 3.2) or a continuous
            schedule (``continuous``, ``protect:n``, ``retain_first``, or ``continuous`` with
            those joined by ``+``).
        call_index: the boundary's call index (K).

    Returns:
        ``once:K`` or ``once:K+continuous[+...]``, and a factory of fresh schedules.

    Raises:
        ReplayError: any other schedule, or a spec that is not one (the grammar's words).
    """
    try:
        recorded, after = ScheduleSpec.parse(spec).for_branch(call_index)
    except ValueError as err:
        raise ReplayError(str(err)) from None
    return recorded.name, partial(after.build, write_tools=frozenset(), read_tools=frozenset())


def branch_condition(
    recording: Recording,
    scope: ScopeName,
    *,
    draw: int,
    schedule: str,
    source: SourceBoundary | None,
) -> Condition:
    """The recorded condition with a branch's scope, draw, schedule and source boundary.

    Raises:
        ReplayError: the scope is not in the recording's lattice.
    """
    data = recording.condition.model_dump()
    data.update(scope=scope, draw=draw, schedule=schedule, source=source)
    try:
        return Condition.model_validate(data)
    except (ValidationError, ValueError) as err:
        raise ReplayError(f"the branch's condition is not valid: {err}") from None


def branch(
    recording: Recording | str | Path,
    *,
    at: int | str,
    scopes: Sequence[ScopeName | str],
    out: Path,
    planner: ChatModel | None,
    reviewer: Reviewer | None,
    draws: int = 1,
    schedule: str = "once",
    workspace_root: Path | None = None,
    mechanism: Mechanism = "auto",
) -> BranchSet:
    """Start one branch per scope and reviewer draw from the same recorded prefix.

    Each branch is the run directory ``out/SCOPE-dDRAW`` (Keep runs one draw: it asks no
    reviewer); ``out/branches.json`` holds the set; branches started by fork share the
    prefix replayed once in ``out/prefix`` (the module docstring).

    Args:
        recording: the recording, or its run directory.
        at: the boundary (see :func:`resolve_boundary`).
        scopes: the granted scopes, by name (``keep``, ``arg``, ``params``, ``full``).
        out: the directory of the branches.
        planner: the live planner after the boundary; None: the recording answers on (a
            branch that leaves the recorded trajectory then diverges).
        reviewer: the branches' reviewer (each draw's requests carry its draw index); needed
            unless every scope is Keep. Each branch gets it as it is now (and so the planner):
            what one branch does to its state never reaches the next, whatever the mechanism.
        draws: reviewer draws per scope (1 to :data:`~controlscope.core.MAX_DRAWS`).
        schedule: what decides after the boundary (see :func:`branch_schedule`).
        workspace_root: where the branches' workspaces are made.
        mechanism: how branches start (:data:`Mechanism`).

    Returns:
        The set; a divergence is reported in it, not raised.

    Raises:
        ReplayError: bad input, before anything runs: see :func:`resolve_boundary`,
            :func:`branch_schedule` and :meth:`Recording.check_task`; an unknown scope or one
            outside the recording's lattice, or one given twice; a scope that reviews with no
            reviewer; draws out of range; an ``out`` that holds branches; an unknown mechanism.
            With ``mechanism="fork"``, also when the branches cannot be forked (the reason;
            what the attempt wrote is removed).
    """
    if mechanism not in ("auto", "fork", "replay"):
        raise ReplayError(f"mechanism is auto, fork or replay, not {mechanism!r}")
    rec = load(recording)
    choice = resolve_boundary(rec, at)
    name, after = branch_schedule(schedule, choice.call_index)
    conditions = _conditions(rec, scopes, draws, name, choice.source, reviewer)
    names = [f"{scope}-d{draw}" for scope, draw, _ in conditions] + [PREFIX_DIR]
    _fresh_branches(out, names)
    rec.check_task(workspace_root)
    made = _absent(out, names)
    plans = [
        (scope, draw, Plan(position=choice.position, condition=condition, after=after()))
        for scope, draw, condition in conditions
    ]
    forked: dict[str, BranchResult] = {}
    divergence: Divergence | None = None
    note = "replay was asked for"
    if mechanism != "replay":
        forked, note, divergence = by_fork(
            rec, choice, plans, out, planner, reviewer, workspace_root
        )
        if mechanism == "fork" and note:
            _refuse_fork(made, note)
    results: list[BranchResult] = []
    for scope_name, draw, plan in plans if divergence is None else []:
        found = forked.get(f"{scope_name}-d{draw}")
        if found is None:
            found = _replayed(rec, plan, out, planner, reviewer, workspace_root)
        results.append(found)
        divergence = found.divergence
        if divergence is not None:
            break
    return _finish_set(rec, choice, name, out, results, divergence, note)


def _absent(out: Path, names: Sequence[str]) -> list[Path]:
    """The folders of ``out/NAME`` (and ``out`` itself) that do not exist yet."""
    return [out / n for n in names if not (out / n).exists()] + ([] if out.exists() else [out])


def _refuse_fork(made: Sequence[Path], note: str) -> NoReturn:
    """Remove what a refused fork attempt made (``made``) and say why it was refused.

    Raises:
        ReplayError: always, naming ``note``.
    """
    for path in made:
        if path.is_dir():
            remove_tree(path)
    raise ReplayError(f"the branches cannot be forked: {note}")


def by_fork(
    rec: Recording,
    choice: BoundaryChoice,
    plans: Sequence[tuple[str, int, Plan]],
    out: Path,
    planner: ChatModel | None,
    reviewer: Reviewer | None,
    workspace_root: Path | None,
) -> tuple[dict[str, BranchResult], str, Divergence | None]:
    """Start ``plans`` by fork from one replay of the prefix (:func:`fork_branches`).

    Returns:
        The forked branches by name (``SCOPE-dDRAW``), why the others were not forked (empty
        when all were), and where the prefix left the recording (then nothing was forked).
    """
    targets = [(out / f"{scope}-d{draw}", plan) for scope, draw, plan in plans]
    outcome, fanout = fork_branches(
        rec,
        targets,
        position=choice.position,
        out=out,
        planner=planner,
        reviewer=reviewer,
        workspace_root=workspace_root,
    )
    if outcome is not None and outcome.divergence is not None:
        return {}, "", outcome.divergence
    found: dict[str, BranchResult] = {}
    for (scope, draw, _), forked in zip(plans, fanout.branches, strict=True):
        if forked.forked:
            found[f"{scope}-d{draw}"] = _logged_result(scope, draw, forked.out, forked.problem)
    return found, fanout.failure or "", None


def _logged_result(
    scope: str, draw: int, run_dir: Path, problem: str | None, mechanism: str = "fork"
) -> BranchResult:
    """A branch run in a process of its own, as its run directory records it."""
    events = list(iter_events(run_dir)) if (run_dir / EVENTS_FILE).is_file() else []
    point = next((e for e in events if isinstance(e, BranchPointEvent)), None)
    end = next((e for e in events if isinstance(e, RunEndEvent)), None)
    divergence = None
    if end is not None and end.end_reason == "replay_diverged":  # the recording answered on
        where = point.call_index if point else None
        divergence = Divergence(end.detail, "", None, None, where)
    return BranchResult(
        scope=scope,
        draw=draw,
        run_dir=run_dir,
        summary=summarize(events) if events else None,
        request_hash=point.request_hash if point else None,
        state_hash=point.state_hash if point else None,
        files=masked_files(point.file_hashes, point.clock_files) if point else {},
        divergence=divergence,
        mechanism=mechanism,
        problem=problem,
    )


def _replayed(
    rec: Recording,
    plan: Plan,
    out: Path,
    planner: ChatModel | None,
    reviewer: Reviewer | None,
    workspace_root: Path | None,
) -> BranchResult:
    """One branch by its own prefix replay, in a process of its own (:mod:`._apart`): it
    starts from the reviewer and planner as they were before the first branch, as a forked
    branch does."""
    scope, draw = plan.condition.scope.name.lower(), plan.condition.draw
    run_dir = out / f"{scope}-d{draw}"
    if workspace_root is not None:
        workspace_root.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="cs-branch-", dir=workspace_root))

    def replayed() -> BranchResult:
        try:
            outcome = run_from_prefix(
                rec,
                plan,
                out=run_dir,
                purpose="branch",
                planner=planner,
                reviewer=reviewer,
                workspace_root=root,
            )
        finally:  # the branch removed its workspace; its root goes too (a killed parent won't)
            remove_tree(root)
        return _result(scope, draw, outcome)

    try:
        found, problem = run_apart(replayed, plan.condition.budgets.wall_seconds)
    finally:  # what a branch whose process died left of its workspace
        remove_tree(root)
    if found is None:  # its process died: recorded as far as its log goes
        close_record(run_dir)
        return _logged_result(scope, draw, run_dir, problem, "replay")
    return found if problem is None else dataclasses.replace(found, problem=problem)


def _finish_set(
    rec: Recording,
    choice: BoundaryChoice,
    schedule: str,
    out: Path,
    results: list[BranchResult],
    divergence: Divergence | None,
    note: str,
) -> BranchSet:
    """The branch set, written to ``out/branches.json``."""
    kinds = {r.mechanism for r in results}
    found = BranchSet(
        source_run=rec.run_dir,
        call_index=choice.call_index,
        position=choice.position,
        prefix_hash=rec.prefix_hash(choice.position),
        schedule=schedule,
        mechanism=kinds.pop() if len(kinds) == 1 else ("mixed" if kinds else "replay"),
        branches=tuple(results),
        request_hash=_shared(results),
        divergence=divergence or _unshared(results, choice.call_index),
        mechanism_note=note,
    )
    _write(out, found)
    return found


def run_branch(
    recording: Recording | str | Path,
    *,
    at: int | str,
    scope: ScopeName | str,
    out: Path,
    planner: ChatModel | None,
    reviewer: Reviewer | None,
    draw: int = 0,
    schedule: str = "once",
    workspace_root: Path | None = None,
) -> BranchResult:
    """Run one branch of a recorded prefix: what :func:`branch` does for each of its scopes
    and draws, as a unit of its own (a panel runs its branches in parallel, paper 3.2, A.5).

    Args:
        recording: the recording, or its run directory.
        at: the boundary (see :func:`resolve_boundary`).
        scope: the granted scope.
        out: the branch's run directory (must not hold a run).
        planner: the live planner after the boundary (None: the recording answers on).
        reviewer: the branch's reviewer (its requests carry ``draw``); needed unless the
            scope is Keep.
        draw: the reviewer draw index (at least 0).
        schedule: what decides after the boundary (see :func:`branch_schedule`).
        workspace_root: where the branch's workspace is made.

    Returns:
        The branch; a divergence in its prefix is reported in it (``divergence``), not raised.

    Raises:
        ReplayError: bad input, before anything runs: see :func:`resolve_boundary`,
            :func:`branch_schedule` and :meth:`Recording.check_task`; an unknown scope or one
            outside the recording's lattice; a scope that reviews with no reviewer; a
            negative draw; an ``out`` that holds a run.
    """
    if draw < 0:
        raise ReplayError(f"a draw is at least 0, not {draw}")
    rec = load(recording)
    choice = resolve_boundary(rec, at)
    name, after = branch_schedule(schedule, choice.call_index)
    scope_name, _, condition = _condition_of(
        rec, _scope(scope), draw, name, choice.source, reviewer
    )
    fresh_out(out)
    rec.check_task(workspace_root)
    plan = Plan(position=choice.position, condition=condition, after=after())
    outcome = run_from_prefix(
        rec,
        plan,
        out=out,
        purpose="branch",
        planner=planner,
        reviewer=reviewer,
        workspace_root=workspace_root,
    )
    return _result(scope_name, draw, outcome)


def _fresh_branches(out: Path, names: Sequence[str]) -> None:
    """Refuse an ``out`` that already holds branches.

    Raises:
        ReplayError: ``out/branches.json`` or one of the branch directories' logs exists.
    """
    for name in names:
        fresh_out(out / name)
    check_branches_out(out)


def check_branches_out(out: Path) -> None:
    """Refuse an ``out`` that cannot take a new set of branches; cheap, so a caller checks it
    before it builds any model.

    Args:
        out: the directory of the branches.

    Raises:
        ReplayError: ``out`` (or the nearest of its folders that exists) is not a
            directory, or it holds branches (``branches.json``).
    """
    fresh_out(out / PREFIX_DIR)  # the nearest folder that exists is a directory
    if (out / BRANCHES_FILE).exists():
        raise ReplayError(f"{out} already holds branches; choose a new out directory")


def _result(scope: str, draw: int, outcome: Outcome) -> BranchResult:
    point = outcome.hook.point
    return BranchResult(
        scope=scope,
        draw=draw,
        run_dir=outcome.run_dir,
        summary=outcome.result.summary if outcome.result is not None else None,
        request_hash=point.request_hash if point else None,
        state_hash=point.state_hash if point else None,
        files=masked_files(point.file_hashes, point.clock_files) if point else {},
        divergence=outcome.divergence,
    )


def _conditions(
    rec: Recording,
    scopes: Sequence[ScopeName | str],
    draws: int,
    schedule: str,
    source: SourceBoundary | None,
    reviewer: Reviewer | None,
) -> list[tuple[str, int, Condition]]:
    """Each branch's scope name, draw and condition, checked before anything runs."""
    problem = range_problem("draws", Draws, draws)
    if problem is not None:
        raise ReplayError(problem)
    if not scopes:
        raise ReplayError("give at least one scope")
    out: list[tuple[str, int, Condition]] = []
    seen: set[Scope] = set()
    for given in scopes:
        scope = _scope(given)
        if scope in seen:  # its branches would share one run directory
            raise ReplayError(f"scope {scope.name.lower()} is given twice; give each scope once")
        seen.add(scope)
        for draw in range(1 if scope is Scope.KEEP else draws):
            out.append(_condition_of(rec, scope, draw, schedule, source, reviewer))
    return out


def _condition_of(
    rec: Recording,
    scope: Scope,
    draw: int,
    schedule: str,
    source: SourceBoundary | None,
    reviewer: Reviewer | None,
) -> tuple[str, int, Condition]:
    """One branch's scope name, draw and condition.

    Raises:
        ReplayError: a scope outside the recording's lattice, or one that reviews with no
            reviewer.
    """
    try:
        lattice_operations(scope, rec.condition.lattice)
    except ValueError as err:
        raise ReplayError(str(err)) from None
    if scope is not Scope.KEEP and reviewer is None:
        raise ReplayError(f"scope {scope.name.lower()} reviews: give a reviewer model")
    condition = branch_condition(rec, scope, draw=draw, schedule=schedule, source=source)
    return scope.name.lower(), draw, condition


def _scope(given: ScopeName | str) -> Scope:
    if isinstance(given, Scope):
        return given
    try:
        return Scope[str(given).strip().upper()]
    except KeyError:
        known = ", ".join(s.name.lower() for s in Scope)
        raise ReplayError(f"unknown scope {given!r}; known: {known}") from None


def _shared(results: Sequence[BranchResult]) -> str | None:
    hashes = {r.request_hash for r in results}
    return hashes.pop() if len(hashes) == 1 else None


def _unshared(results: Sequence[BranchResult], call_index: int) -> Divergence | None:
    """The branches' first review requests and workspaces must coincide (paper 3.1, A.4);
    the first pair that does not, named."""
    if not results:
        return None
    first = results[0]
    for other in results[1:]:
        pair = f"branches {first.scope}-d{first.draw} and {other.scope}-d{other.draw}"
        if first.request_hash != other.request_hash:
            message = (
                f"{pair} do not share the first review request at boundary {call_index}: "
                f"{first.request_hash} vs {other.request_hash}"
            )
            return Divergence(
                message, "request", first.request_hash, other.request_hash, call_index
            )
        for path in sorted(set(first.files) | set(other.files)):
            left, right = first.files.get(path, "<absent>"), other.files.get(path, "<absent>")
            if left != right:
                message = f"{pair} differ at boundary {call_index} in {path}: {left} vs {right}"
                return Divergence(message, path, left, right, call_index)
    return None


def _write(out: Path, found: BranchSet) -> None:
    out.mkdir(parents=True, exist_ok=True)
    data = {
        "source_run": str(found.source_run),
        "call_index": found.call_index,
        "position": found.position,
        "prefix_hash": found.prefix_hash,
        "schedule": found.schedule,
        "mechanism": found.mechanism,
        "mechanism_note": found.mechanism_note,
        "request_hash": found.request_hash,
        "divergence": found.divergence.message if found.divergence else None,
        "branches": [
            {
                "scope": b.scope,
                "draw": b.draw,
                "run_dir": str(b.run_dir),
                "success": b.summary.success if b.summary else None,
                "calls": b.summary.primitive_calls if b.summary else None,
                "end_reason": b.summary.end_reason if b.summary else None,
                "request_hash": b.request_hash,
                "state_hash": b.state_hash,
                "mechanism": b.mechanism,
                "problem": b.problem,
            }
            for b in found.branches
        ],
    }
    (out / BRANCHES_FILE).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
