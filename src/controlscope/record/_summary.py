"""A run's summary (``summary.json``), computed from its events alone.

Because :func:`summarize` reads nothing but the event log, a summary can be rebuilt from any log,
including the log of a killed run (``complete`` is then False).

Token accounting follows paper appendix A.5: *logical* totals count every response the trajectory
used, including responses served from the exact-request cache or replayed from a recording;
*uncached* totals count only the responses for which the model did work (neither ``cached`` nor
``replayed``). A trajectory whose every response was cached or replayed is *reused*
(``RunSummary.reused``; A.5: "reused Keep trajectories ... are identified").
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel, Field

from controlscope.core import FALLBACK_KINDS, BlockResult, Event, Scope, operation_spec
from controlscope.record._accounting import RoleTotals, TokenLedger
from controlscope.record._decisions import DecisionNotes, ReviewDecision


class RunSummary(BaseModel):
    """What ``summary.json`` holds for one run.

    Attributes:
        task: the task id.
        seed: the task's data seed.
        scope: the granted scope's name (``keep``, ``arg``, ``params``, ``full``).
        lattice: the lattice the scope was read in.
        operations: the granted operation set.
        schedule: the schedule's spec.
        view: the reviewer's view.
        replace_boundary: ``block`` or ``reply``.
        models: model id by role.
        isolation: the worker's isolation level.
        success: the native verifier's verdict; None when the run has no final verdict.
        end_reason: why the run ended; None when the log has no end (a killed run).
        complete: True when the log ends with ``run_end``.
        primitive_calls: primitive calls made on the environment server.
        planning_turns: ordinary planning turns started.
        blocks: blocks started (replacement blocks included).
        boundaries: boundaries reached.
        reviews: reviews: boundaries at which a reviewer was asked (granted Keep asks none).
        argument_patches: realized ``patch_arguments`` operations.
        block_data_patches: realized ``patch_block_data`` operations.
        replacements: realized ``replace_workflow`` operations.
        rejected_proposals: proposals the validation rejected (out of scope or invalid).
        fallbacks: Keep fallbacks by kind (every kind always present).
        tokens: token use by role (``planner``, ``reviewer``; both always present), as
            :class:`controlscope.record.TokenLedger` accounts it: logical vs uncached
            totals, cache hits, failed requests, model latency.
        wall_seconds: wall time from ``run_start`` to the last event.
        review_seconds: summed review latency (recorded apart from execution time, paper 4).
        model_seconds: summed model latency over both roles.
        budgets_hit: the budgets that were reached, in order.
        reused: True when the run made at least one model request and every response was
            cached or replayed: a reused trajectory, no new model work (paper A.5).
        clock_differences: requests of a replay that differed from their recording only in
            masked clock readings (listed in the log's ``clock_differences`` event).
        state_hash: the terminal workspace's hash (None when the run has no final verdict).
        file_hashes: SHA-256 of each terminal file by relative path.
        plans: plans that ended under ordinary recovery (``plan_end`` events; 0 without
            recovery).
        repairs: ordinary repairs asked for (``recovery`` events; paper 5.2 counts them).
        initial_plan_success: whether the goal was reached when the initial plan ended (paper
            5.2: initial-plan successes apart from those after recovery); None without
            recovery.
        plan_errors: reviews that fell back under the ``plan_error`` protocol.
        goal_actions: the actions the environment counted until its goal was first reached
            (the verdict's ``goal_actions``; Figure 2's thresholds); None when unknown.
        quota_rejections: requests refused because their block's allowance was spent (paper
            A.2's frozen aggregate).
        api_attempts: requests agent code attempted: those made (``primitive_calls``) and
            those refused as quota rejections (A.2).
        guard_refusals: blocks the private-runtime guard refused (the V2 protocol).
        allowance_renewals: replacements that started a new block allowance (V1: recorded,
            since the extra capacity favours Full).
        protected_failures: 1 when the verdict failed the protected criteria (a check named
            ``protected``: the app environments' whole-database diff), else 0.
        decisions: what the reviews did, in order: each realized revision and each fallback to
            Keep (:class:`~controlscope.record.ReviewDecision`; the Keeps the reviewer chose are
            not listed), the first :data:`~controlscope.record.DECISIONS_LISTED` of them; None
            in a summary written before summaries held them (read the log).
        decisions_omitted: the decisions past those listed (the run's log holds them).
    """

    task: str
    seed: int
    scope: str
    lattice: str = "default"
    operations: list[str] = Field(default_factory=list)
    schedule: str
    view: str
    replace_boundary: str
    models: dict[str, str]
    isolation: str
    success: bool | None = None
    end_reason: str | None = None
    complete: bool = False
    primitive_calls: int = 0
    planning_turns: int = 0
    blocks: int = 0
    boundaries: int = 0
    reviews: int = 0
    argument_patches: int = 0
    block_data_patches: int = 0
    replacements: int = 0
    rejected_proposals: int = 0
    fallbacks: dict[str, int] = Field(default_factory=lambda: {str(k): 0 for k in FALLBACK_KINDS})
    tokens: dict[str, RoleTotals] = Field(
        default_factory=lambda: {"planner": RoleTotals(), "reviewer": RoleTotals()}
    )
    wall_seconds: float = 0.0
    review_seconds: float = 0.0
    model_seconds: float = 0.0
    budgets_hit: list[str] = Field(default_factory=list)
    reused: bool = False
    clock_differences: int = 0
    state_hash: str | None = None
    file_hashes: dict[str, str] = Field(default_factory=dict)
    plans: int = 0
    repairs: int = 0
    initial_plan_success: bool | None = None
    plan_errors: int = 0
    goal_actions: int | None = None
    quota_rejections: int = 0
    api_attempts: int = 0
    guard_refusals: int = 0
    allowance_renewals: int = 0
    protected_failures: int = 0
    decisions: list[ReviewDecision] | None = None
    decisions_omitted: int = 0


class SummaryError(ValueError):
    """The events cannot be summarized (no ``run_start`` event first)."""


def summarize(events: Iterable[Event]) -> RunSummary:
    """Compute a run's summary from its events alone.

    Args:
        events: a run's events in ``seq`` order, starting with ``run_start`` (as yielded by
            :func:`controlscope.record.iter_events`: one pass, one event at a time); a killed
            run's prefix is fine.

    Returns:
        The summary. ``success`` comes from the ``final_verdict`` event, ``end_reason`` from
        ``run_end`` (or ``final_verdict``); counts of reviews, patches and replacements from
        ``realized_operation`` events; tokens from ``model_call`` events.

    Raises:
        SummaryError: the first event is not ``run_start``.
    """
    stream = iter(events)
    start = next(stream, None)
    if start is None or start.type != "run_start":
        raise SummaryError("a run's log must start with a run_start event")
    summary = RunSummary(
        task=start.task.id,
        seed=start.seed,
        scope=Scope(start.scope).name.lower(),
        lattice=start.lattice,
        operations=list(start.operations),
        schedule=start.schedule,
        view=start.view,
        replace_boundary=start.replace_boundary,
        models=dict(start.models),
        isolation=start.isolation,
    )
    ledger = TokenLedger()
    notes = DecisionNotes()
    last_t = start.t
    for event in stream:
        last_t = event.t
        notes.add(event)
        if event.type == "model_call":
            if event.response is None:
                ledger.add_failure(event.role)
            else:
                ledger.add(event.role, event.response)
        else:
            _count(summary, event)
    totals = ledger.summary()
    summary.tokens.update(totals.roles)
    summary.reused = totals.total.logical.requests > 0 and totals.total.uncached.requests == 0
    summary.wall_seconds = max(0.0, last_t - start.t)
    summary.model_seconds = sum(r.latency_s for r in summary.tokens.values())
    summary.api_attempts = summary.primitive_calls + summary.quota_rejections
    summary.decisions = notes.decisions
    summary.decisions_omitted = notes.omitted
    return summary


def _count(summary: RunSummary, event: Event) -> None:
    """Fold one event into ``summary``."""
    if event.type == "primitive_call":
        summary.primitive_calls += 1
    elif event.type == "planner_turn":
        summary.planning_turns += 1
    elif event.type == "block_start":
        summary.blocks += 1
    elif event.type == "block_end":
        _count_block(summary, event.result)
    elif event.type == "boundary":
        summary.boundaries += 1
    elif event.type == "review_request":
        summary.reviews += 1
    elif event.type == "validation":
        if event.validation.proposal is not None and not event.validation.accepted:
            summary.rejected_proposals += 1
    elif event.type == "realized_operation":
        summary.review_seconds += event.latency_s
        counter = operation_spec(event.operation.kind).counter
        if counter is not None:
            setattr(summary, counter, getattr(summary, counter) + 1)
        if event.fallback is not None:
            summary.fallbacks[event.fallback] = summary.fallbacks.get(event.fallback, 0) + 1
    elif event.type == "budget":
        summary.budgets_hit.append(event.budget)
    elif event.type == "final_verdict":
        summary.success = event.success
        summary.end_reason = summary.end_reason or event.end_reason
        summary.state_hash = event.state_hash
        summary.file_hashes = dict(event.file_hashes)
        summary.goal_actions = event.verdict.goal_actions
        protected = [c.passed for c in event.verdict.checks if c.name == "protected"]
        summary.protected_failures = int(not all(protected))
    elif event.type == "plan_end":
        if summary.plans == 0:
            summary.initial_plan_success = event.goal_reached
        summary.plans += 1
    elif event.type == "recovery":
        summary.repairs += 1
    elif event.type == "plan_error":
        summary.plan_errors += 1
    elif event.type == "clock_differences":
        summary.clock_differences += len(event.differences)
    elif event.type == "run_end":
        summary.end_reason = event.end_reason
        summary.complete = True


def _count_block(summary: RunSummary, result: BlockResult) -> None:
    """Fold one block's end into ``summary``: refusals and renewed allowances (paper A.2)."""
    if result.allowance_renewed:
        summary.allowance_renewals += 1
    if result.refusal is not None:
        if result.refusal.kind == "quota":
            summary.quota_rejections += 1
        else:
            summary.guard_refusals += 1
