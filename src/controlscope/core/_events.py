"""The trajectory log's event schema: one pydantic model per event type, one discriminated union.

Every model request and response, block, boundary, review, decision and primitive call of a run is
an event, written as it happens (``docs/architecture.md``, "Execution contract"; paper section 3.3
and A.4: "trajectory continuation preserves saved requests, responses, contexts, and decisions").

Each event carries ``schema_version`` (:data:`SCHEMA_VERSION`), ``seq`` (0-based position in the
log), ``t`` (wall clock, seconds since the epoch) and ``type`` (the discriminator). The writer
(:class:`controlscope.record.TrajectoryWriter`) assigns ``seq`` and ``t``; construct events
with the defaults and let it stamp them.

Scopes are written by name (``"full"``) and read back from a name or an integer.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from controlscope.core._execution import (
    BlockResult,
    Boundary,
    PrimitiveCall,
    ReplaceBoundary,
    View,
)
from controlscope.core._models import (
    ModelRequest,
    ModelResponse,
    ProviderError,
    ProviderErrorKind,
    Usage,
)
from controlscope.core._op_registry import Operation, Validation
from controlscope.core._operations import (
    LATTICE_OPERATIONS,
    FallbackKind,
    Lattice,
    OperationKind,
    Scope,
    ScopeName,
)
from controlscope.core._source_program import SourceFile
from controlscope.core._tasks import Task, TaskBudgets, Verdict
from controlscope.core._tools import ToolRisk

SCHEMA_VERSION = 9
"""Version of the event schema written by this code; readers refuse newer versions and upgrade
older ones (:func:`upgrade_event`).

==  ========================================================================================
1   the first schema. Scopes are written by name and read from a name or an integer.
2   the validation of a proposal is a ``validation`` event (was ``verdict``, a word now kept
    for the verifier's ``final_verdict``); enumerations (view, isolation, end reason, error
    kind, budget name) are typed.
3   ``run_start`` records the lattice and the granted operation set (``operations``); the
    condition (``config``) gains the lattice, the view's bounds, per-role sampling settings,
    the source-program index, a recorded source boundary, and ``block_exec_s`` may be None;
    model responses carry ``replayed``; ``final_verdict`` carries the terminal workspace hash
    and per-file hashes; a replay's masked clock differences are a ``clock_differences``
    event. Older logs are read as runs of the ``v2`` lattice (their Full granted
    ``patch_block_data``).
    ``run_start`` records the tool server's name and version (``server``) and the budgets the
    run's wall-clock ceiling (``wall_seconds``); a run that reaches it ends with
    ``budget:wall_seconds``. Older logs read with an empty ``server`` and the default ceiling.
    A boundary carries the controller-derived ``literal_slots``, ``params_refusal`` and
    ``source_line``; a primitive call its realized ``operation``, the ``requested``
    arguments and a ``notice``; ``run_start`` the ``worker_seed``; a validation may be
    rejected as ``data_not_editable``; older events read with these fields' defaults.
4   ``run_start`` records the task data's hash (``task_data_hash``: the initial workspace's
    state hash, so a replay sees a generator that changed) and, for a branch or a prefix
    replay, where it comes from (``branch``: source run, boundary, prefix hash, mechanism); a
    ``branch_point`` event marks the boundary where a replayed prefix ends; a run can end
    ``prefix_end`` (a prefix replay reached its boundary) or ``candidate_end`` (a frozen
    candidate's block ended, no further planning). Older logs read with no task-data hash
    and no branch.
5   a model response carries ``schema_error`` (why an answer breaks its request's JSON
    schema); a provider error can be ``schema_unsupported``; the condition records the
    per-call deadline (``request_timeout_s``). Older events read with no schema error and no
    per-call deadline.
6   ordinary recovery (paper section 4, ALFWorld): the budgets gain ``repairs``, the
    condition the reviewer protocol and what an invalid review does (``review_fallback``);
    ``plan_end``, ``recovery`` and ``plan_error`` events; a run can end ``goal_reached`` or
    ``budget:repairs``; a task carries ``metadata`` and a verdict ``goal_actions``. Older
    logs read with no recovery (``repairs`` None) and Keep after an invalid review.
7   the app protocols (paper A.2): the budgets gain ``blocks`` (natural blocks per task) and
    ``block_requests`` (requests per block); the condition records the app protocol, what a
    replacement gets of its block's allowance (``block_allowance``) and the private-runtime
    guard; a block result records its allowance, whether a replacement renewed it, and a
    refusal (a quota rejection or the guard); a run can end ``budget:blocks``. Older logs
    read with no block caps and no refusals.
8   a provider error can be ``response_too_large`` and a validation ``too_large``; a
    ``block_start`` says how the planner's block was read from its reply (``extracted``;
    None in older logs); a proposal records who made it (``reviewer``: ``model``, ``human``
    or ``custom``) and a person's decision (``human``: the channel, where, how long the
    person took, the refused tries); a fallback can be ``timeout`` (a person did not decide
    in time); a failed ``model_call`` records the tokens counted of the answer it did not
    finish (``usage``); ``run_start`` records a frozen source program's file and SHA-256
    (``source_file``; None in older logs and for sampled programs). Older logs read as
    before, as a model's proposals. (Some version-7 logs written before this bump hold these
    values and fields; they read the same.)
9   ``run_start`` records warnings about the run's set-up (``warnings``: tools named like
    Python builtins, which replace them in the agent's program). A ``model_call`` may be
    written as a continuation (``messages_from``: the ``seq`` of the same role's previous
    ``model_call``, whose request's messages this request's begin with; its request then
    holds only the messages added after them), so a log grows with what each request adds,
    not with the whole history; the reader gives every request whole. Older logs read with
    no warnings and whole requests.
==  ========================================================================================

A new version is due whenever the log gains a field, an event type or a value of one of its
enumerations: a reader of the previous version then refuses the log by its version, in one
line, instead of failing on what it does not know.
"""

EVENTS_FILE = "events.jsonl"
"""The log's file name inside a run directory."""

EndReason = Literal[
    "final_answer",
    "budget:primitive_calls",
    "budget:planning_turns",
    "budget:execution_seconds",
    "budget:wall_seconds",
    "planner_provider_error",
    "context_limit",
    "environment_error",
    "error",
    "replay_diverged",
    "interrupted",
    "prefix_end",
    "candidate_end",
    "goal_reached",
    "budget:repairs",
    "budget:blocks",
]
"""Why a run ended: the planner's final answer; a budget (paper section 4) or the run's
wall-clock ceiling; under ordinary recovery, the goal seen reached after a plan, or the
repairs spent (paper section 4, ALFWorld); a planner-stage
provider error or an oversized planner context (the workspace is graded as it stands, paper A.4);
the environment's server failed; another part failed unexpectedly (``error``, graded as it
stands); a replay left its recording, or the run was interrupted (no verdict); a prefix replay
reached its boundary, or a frozen candidate's replacement block ended (paper 3.3, C.2; both
graded as they stand)."""

Isolation = Literal["bwrap", "none"]
"""The isolation the worker ran under: bubblewrap, or none (a loud fallback)."""

BudgetName = Literal[
    "primitive_calls",
    "planning_turns",
    "execution_seconds",
    "wall_seconds",
    "tokens",
    "blocks",
    "requests_per_block",
    "repairs",
]
"""A budget's name in ``budget`` events (paper section 4 and A.2)."""


ModelRole = Literal["planner", "reviewer"]

ProgramExtraction = Literal["tool_call", "text"]
"""How a planner's block was read from its reply (paper sections 4 and A.1): from a native
``execute_python`` tool call, or as fenced code from the reply's text (a model or a server that
returned no native tool call)."""


class _Event(BaseModel):
    """Fields every event has; ``seq`` and ``t`` are assigned by the writer.

    Attributes:
        schema_version: the schema version the event was written under (:data:`SCHEMA_VERSION`).
        seq: the event's 0-based position in the log.
        t: when it was written (wall clock, seconds since the epoch).
    """

    # Non-finite numbers in free-form data are written as NaN/Infinity (never silently as null),
    # so the writer can refuse them: the log holds standard JSON only.
    model_config = ConfigDict(ser_json_inf_nan="constants")

    schema_version: int = SCHEMA_VERSION
    seq: int = 0
    t: float = 0.0


BranchPurpose = Literal[
    "prefix", "whole", "branch", "candidate", "retained", "shared_patch", "divergence"
]
"""What a run that starts from a recorded prefix is (paper 3.3, 6.2, C.1, C.2, B.1, B.2): a
prefix replay to a boundary, a replay of a whole recorded run, a branch under its own
condition, a frozen replay of a recorded operation (its candidate block alone, retained with
ordinary planning, or one argument patch under a scope label), or a second schedule branched
from a first's run at the first boundary where the two decide differently."""


class BranchOrigin(BaseModel):
    """Where a run that starts from a recorded prefix comes from (paper 3.1: branches begin
    from the same ``(h, s)``; 3.3: prefix replay).

    Attributes:
        source_run: the recorded run's directory, as given.
        call_index: the boundary's call index (the calls completed before it); None for a
            replay of the whole run.
        boundary: the boundary's 0-based position among the recording's boundaries; None for
            a replay of the whole run.
        prefix_hash: the SHA-256 of the recorded prefix (requests, answers, boundaries,
            decisions and calls up to the boundary, clock readings masked).
        mechanism: how the prefix state was rebuilt: ``replay`` (the prefix re-run in a fresh
            workspace, every request and call checked) or ``fork`` (the prefix run once, every
            request and call checked, and the paused trajectory forked at the boundary:
            worker, controller and a copy of the workspace, ``controlscope.run._fork``).
        purpose: what the run is.
        operation: the recorded operation's index among the recording's reviewed boundaries,
            for a frozen operation replay.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    source_run: str
    call_index: int | None = None
    boundary: int | None = None
    prefix_hash: str
    mechanism: Literal["replay", "fork"] = "replay"
    purpose: BranchPurpose
    operation: int | None = None


class RunStartEvent(_Event):
    """A run begins: the condition it runs under.

    Attributes:
        task: the task (id, instruction, parameters).
        seed: the task's data seed.
        scope: the granted scope.
        schedule: the schedule's spec (``continuous``, ``protect:5``...).
        view: the reviewer's view (``code_only`` or ``with_feedback``).
        replace_boundary: what a replacement replaces (``block`` or ``reply``).
        models: model id by role (``{"planner": ..., "reviewer": ...}``).
        isolation: the worker's isolation in force (``bwrap`` or ``none``).
        server: the tool server's name and version as it reported them (MCP ``initialize``):
            releases differ in behaviour that reaches agents and replays.
        budgets: the task's budgets.
        config: the whole condition (:class:`~controlscope.core.Condition`, as JSON).
        lattice: the lattice the scope is read in (paper 3.1, A.2).
        operations: the granted operation set, exactly as offered to the reviewer.
        worker_seed: the seed of the worker's ``random`` module (each block reseeds it from
            this seed and the block's id, so a replay draws the same numbers); None in logs
            written before it was recorded.
        task_data_hash: the initial workspace's state hash (``Environment.state_hash`` right
            after set-up): a replay compares it to see whether the task's generator changed;
            None in logs written before it was recorded.
        branch: for a run that starts from a recorded prefix, where it comes from; None for
            an ordinary run.
        source_file: the frozen source program the planner's first reply was read from (its
            file and SHA-256); None when the planner sampled it.
        warnings: one line per thing in the run's set-up that may surprise the agent, e.g.
            tools named like Python builtins (:func:`~controlscope.core.shadowing_warning`).
    """

    type: Literal["run_start"] = "run_start"
    task: Task
    seed: int
    scope: ScopeName
    lattice: Lattice = "default"
    operations: tuple[OperationKind, ...] = ()
    schedule: str
    view: View
    replace_boundary: ReplaceBoundary = "reply"
    models: dict[str, str] = Field(default_factory=dict)
    isolation: Isolation = "none"
    server: dict[str, str] = Field(default_factory=dict)
    budgets: TaskBudgets = Field(default_factory=TaskBudgets)
    config: dict[str, Any] = Field(default_factory=dict)
    worker_seed: int | None = None
    task_data_hash: str | None = None
    branch: BranchOrigin | None = None
    source_file: SourceFile | None = None
    warnings: tuple[str, ...] = ()


class ModelCallEvent(_Event):
    """One model request and its response or error.

    The field names ``role``, ``request``, ``response``, ``error`` and ``error_kind`` are read by
    :class:`controlscope.models._replay.ReplayModel`; do not rename them.

    Attributes:
        role: ``planner`` or ``reviewer``.
        request: the request as sent.
        response: the response, None when the request failed.
        error: the provider error's message when it failed.
        error_kind: the provider error's kind (``rate_limit``, ``server``, ``timeout``...).
        error_status: the provider error's HTTP status, if any.
        turn: the planning turn (planner calls).
        call_index: the boundary's call index (reviewer calls).
        usage: for a failed call, the tokens counted of the answer it did not finish (a
            streamed answer cut by the call's deadline); None otherwise (a response carries
            its own).
        messages_from: as written in the log: the ``seq`` of the same role's previous
            ``model_call``, whose request's messages this request's begin with; the written
            request then holds only the messages added after them. None in every event a
            reader gives (:func:`controlscope.record.iter_events` joins them) and in one
            written whole.
    """

    type: Literal["model_call"] = "model_call"
    role: ModelRole
    request: ModelRequest
    response: ModelResponse | None = None
    error: str | None = None
    error_kind: ProviderErrorKind | None = None
    error_status: int | None = None
    turn: int | None = None
    call_index: int | None = None
    usage: Usage | None = None
    messages_from: int | None = None


class PlannerTurnEvent(_Event):
    """An ordinary planning turn begins (paper section 3.2: every condition keeps it).

    Attributes:
        turn: the turn's number (1-based).
    """

    type: Literal["planner_turn"] = "planner_turn"
    turn: int


class BlockStartEvent(_Event):
    """A block starts running.

    Attributes:
        block_id: the block's id.
        code: its source.
        replaces: the block it replaces, for a replacement block.
        turn: the planning turn whose reply queued it.
        extracted: how the planner's block was read from its reply (:data:`ProgramExtraction`);
            None for a replacement (the reviewer's code) and in older logs.
    """

    type: Literal["block_start"] = "block_start"
    block_id: str
    code: str
    replaces: str | None = None
    turn: int = 0
    extracted: ProgramExtraction | None = None


class BlockEndEvent(_Event):
    """A block ended (completed, raised, was cancelled or hit a budget).

    Attributes:
        result: the block's result: status, output, error, calls made and clocks.
    """

    type: Literal["block_end"] = "block_end"
    result: BlockResult


class BoundaryEvent(_Event):
    """A block paused at a primitive call.

    Attributes:
        boundary: the pending call and the public runtime state.
        review: whether the schedule chose to review here.
        risk: how a schedule that reads tool annotations (``destructive``) judged the pending
            call, with the hints it read; None under a schedule that reads none.
    """

    type: Literal["boundary"] = "boundary"
    boundary: Boundary
    review: bool = False
    risk: ToolRisk | None = None


class ReviewRequestEvent(_Event):
    """A review was asked for; the model request itself is the following ``model_call``.

    Attributes:
        call_index: the boundary's call index.
        block_id: the running block.
        view: ``code_only`` or ``with_feedback``.
        granted: the granted scope.
        draw: the reviewer draw index.
    """

    type: Literal["review_request"] = "review_request"
    call_index: int
    block_id: str
    view: View
    granted: ScopeName
    draw: int = 0


ReviewerKind = Literal["model", "human", "custom"]
"""Who proposed at a boundary: a model, a person, or a reviewer of the caller's own."""

HumanChannel = Literal["browser", "terminal"]
"""Where a person decided: the review page in a browser, or a terminal."""


class HumanDecision(BaseModel):
    """How a person decided at one boundary (recorded with the proposal).

    Attributes:
        channel: the browser's review page or a terminal.
        where: the page's address without its secret (``http://127.0.0.1:PORT/review``) or
            the terminal's name (``/dev/pts/3``).
        decided_s: seconds from the boundary being shown to the accepted decision (or to the
            time limit).
        refused: the validation's reason for each earlier try that was refused, in order.
        timed_out: True when no decision was made within the time limit (a ``timeout``
            fallback).
    """

    model_config = ConfigDict(frozen=True)
    channel: HumanChannel
    where: str = ""
    decided_s: float = 0.0
    refused: tuple[str, ...] = ()
    timed_out: bool = False


class ProposalEvent(_Event):
    """What the reviewer proposed, raw and parsed.

    Attributes:
        call_index: the boundary's call index.
        raw: the reviewer's answer text and tool calls, as received.
        operation: the parsed operation, None when nothing parseable came back.
        reviewer: who proposed (``model``, ``human``, ``custom``).
        human: a person's decision, when a person proposed.
    """

    type: Literal["proposal"] = "proposal"
    call_index: int
    raw: str = ""
    operation: Operation | None = None
    reviewer: ReviewerKind = "model"
    human: HumanDecision | None = None


class ValidationEvent(_Event):
    """The validation of a proposal against the granted scope
    (:func:`controlscope.scope.validate_operation`). Not to be confused with the verifier's
    verdict on the terminal workspace (:class:`FinalVerdictEvent`).

    Attributes:
        call_index: the boundary's call index.
        validation: whether the proposal was accepted, and why not.
    """

    type: Literal["validation"] = "validation"
    call_index: int
    validation: Validation


class RealizedOperationEvent(_Event):
    """The operation executed at a reviewed boundary (granted vs realized scope, paper 3.1).

    Attributes:
        call_index: the boundary's call index.
        block_id: the running block.
        granted: the granted scope.
        operation: the realized operation (``keep`` on any fallback).
        fallback: why a ``keep`` was executed in place of the reviewer's answer, if it was.
        latency_s: wall seconds of the review (recorded apart from execution time, paper 4).
        model_called: False when the review was answered without a model (granted Keep).
    """

    type: Literal["realized_operation"] = "realized_operation"
    call_index: int
    block_id: str = ""
    granted: ScopeName = Scope.KEEP
    operation: Operation
    fallback: FallbackKind | None = None
    latency_s: float = 0.0
    model_called: bool = True


class PrimitiveCallEvent(_Event):
    """A primitive call made on the environment server (after any patch), with its observation.

    Attributes:
        call: the call as executed, its observation and timing.
    """

    type: Literal["primitive_call"] = "primitive_call"
    call: PrimitiveCall


class BudgetEvent(_Event):
    """A budget was reached.

    Attributes:
        budget: ``primitive_calls``, ``planning_turns``, ``execution_seconds``,
            ``wall_seconds`` (the run's ceiling), ``tokens``, ``blocks`` or
            ``requests_per_block``.
        limit: the budget's limit.
        value: the value that reached it.
    """

    type: Literal["budget"] = "budget"
    budget: BudgetName
    limit: float
    value: float


class FinalVerdictEvent(_Event):
    """The native verifier's verdict on the terminal workspace.

    Attributes:
        verdict: the checks.
        success: the verdict's success (stored so readers need not recompute it).
        end_reason: why the run ended (see :class:`RunEndEvent`).
        state_hash: the terminal workspace's hash (``Environment.state_hash``; paper 3.3: prefix
            and shared-patch replays compare terminal files); None when it could not be
            computed.
        file_hashes: SHA-256 of each terminal file's bytes by relative path
            (``Environment.file_hashes``).
    """

    type: Literal["final_verdict"] = "final_verdict"
    verdict: Verdict
    success: bool
    end_reason: EndReason
    state_hash: str | None = None
    file_hashes: dict[str, str] = Field(default_factory=dict)


class ClockDifference(BaseModel):
    """One difference between a recorded and a replayed request that masking hid.

    Attributes:
        role: whose request it was.
        request: the request's 0-based index among that role's requests.
        path: the first differing field, e.g. ``messages[3].content``.
        recorded: the recorded text around the difference (raw, unmasked).
        received: the replayed text around the difference (raw, unmasked).
    """

    role: str
    request: int
    path: str
    recorded: str
    received: str


class ClockDifferencesEvent(_Event):
    """Clock readings that differed between a replay and its recording (paper A.4: "raw clock
    differences remain available in the execution records"). They were masked before the
    requests were compared, so they did not end the replay; they are reported here apart.

    Attributes:
        differences: one entry per request whose raw text differed only in masked readings.
    """

    type: Literal["clock_differences"] = "clock_differences"
    differences: list[ClockDifference] = Field(default_factory=list)


class BranchPointEvent(_Event):
    """A replayed prefix reached its boundary: the shared state ``(h, s)`` every branch of it
    starts from (paper 3.1, A.4: "identical first public inputs").

    Attributes:
        call_index: the boundary's call index.
        boundary: the boundary's 0-based position among the run's boundaries.
        prefix_hash: the recorded prefix's hash (as in ``run_start``'s ``branch``).
        state_hash: the workspace's state hash at the boundary (``s``); None when it could
            not be read.
        file_hashes: each file's hash at the boundary, by relative path.
        request_hash: the SHA-256 of the first review request at the boundary with the
            operation set left out: the request rendered for every operation of the ``v2``
            lattice, draw 0, clock readings masked. Equal across the scopes and draws of one
            prefix when they see the same ``h``.
        clock_files: the files whose text holds clock readings no seed controls (agent code
            wrote them, e.g. a ``get_file_info`` answer): the SHA-256 of the text with those
            readings masked, compared in place of the bytes (paper A.4).
    """

    type: Literal["branch_point"] = "branch_point"
    call_index: int
    boundary: int
    prefix_hash: str
    state_hash: str | None = None
    file_hashes: dict[str, str] = Field(default_factory=dict)
    request_hash: str
    clock_files: dict[str, str] = Field(default_factory=dict)


PlanCause = Literal["completed", "error", "plan_error", "no_program"]
"""How a plan ended under ordinary recovery: its blocks ran to their end; one of them raised
or was stopped otherwise; a review fell back under the ``plan_error`` protocol (paper section 4,
ALFWorld's fast reviewers); the planner answered without a program."""


class PlanEndEvent(_Event):
    """A plan (one planner reply) ended under ordinary recovery, and the verifier was asked
    whether the goal is reached (paper sections 4 and 5.2: initial-plan successes are counted
    apart from successes after recovery).

    Attributes:
        plan: the plan's index: 0 for the initial plan, then one per repair.
        cause: how it ended.
        goal_reached: whether the verifier sees the goal reached now.
        calls: primitive calls made so far in the run.
    """

    type: Literal["plan_end"] = "plan_end"
    plan: int
    cause: PlanCause
    goal_reached: bool
    calls: int


class RecoveryEvent(_Event):
    """Ordinary recovery: a plan ended without the goal and the planner is asked for a new
    one (the same procedure in every scope, paper sections 3.2 and 4).

    Attributes:
        repair: the repair's number (1-based; at most the ``repairs`` budget).
        cause: how the failed plan ended.
        detail: what the planner is told, in words.
    """

    type: Literal["recovery"] = "recovery"
    repair: int
    cause: PlanCause
    detail: str = ""


class PlanErrorEvent(_Event):
    """A review fell back under the ``plan_error`` protocol: its realized Keep is not
    executed; the pending call is not made and the plan ends (its block unwinds, queued blocks
    get receipts), and ordinary recovery takes over (paper section 4: "malformed reviews
    become plan errors handled by ordinary recovery").

    Attributes:
        call_index: the boundary's call index.
        block_id: the block that was stopped.
        fallback: the fallback kind of the review.
        detail: why the review could not be used.
    """

    type: Literal["plan_error"] = "plan_error"
    call_index: int
    block_id: str
    fallback: FallbackKind
    detail: str = ""


class RunEndEvent(_Event):
    """The run ended.

    Attributes:
        end_reason: why it ended (one of :data:`EndReason`).
        detail: a human-readable explanation.
    """

    type: Literal["run_end"] = "run_end"
    end_reason: EndReason
    detail: str = ""


Event = Annotated[
    RunStartEvent
    | ModelCallEvent
    | PlannerTurnEvent
    | BlockStartEvent
    | BlockEndEvent
    | BoundaryEvent
    | ReviewRequestEvent
    | ProposalEvent
    | ValidationEvent
    | RealizedOperationEvent
    | PrimitiveCallEvent
    | BudgetEvent
    | FinalVerdictEvent
    | ClockDifferencesEvent
    | BranchPointEvent
    | PlanEndEvent
    | RecoveryEvent
    | PlanErrorEvent
    | RunEndEvent,
    Field(discriminator="type"),
]
"""Any trajectory event; parse one with :data:`EVENT_ADAPTER`."""

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
"""Validates and dumps :data:`Event` values (``EVENT_ADAPTER.validate_json(line)``)."""


def upgrade_event(data: dict[str, Any]) -> dict[str, Any]:
    """An event written by an older schema version (as parsed JSON) in today's shape.

    Args:
        data: one event as a JSON object.

    Returns:
        The same event for :data:`SCHEMA_VERSION` (a copy; ``data`` itself when it is current).
    """
    version = data.get("schema_version")
    if not isinstance(version, int) or version >= SCHEMA_VERSION:
        return data
    upgraded = dict(data)
    if version < 2 and upgraded.get("type") == "verdict":
        upgraded["type"] = "validation"
    if version < 3 and upgraded.get("type") == "run_start":
        _upgrade_run_start(upgraded)
    upgraded["schema_version"] = SCHEMA_VERSION
    return upgraded


def _upgrade_run_start(data: dict[str, Any]) -> None:
    """A run_start of schema 1 or 2: its scopes nested Keep ⊂ Arg ⊂ Params ⊂ Full with Full
    granting every operation, the ``v2`` lattice."""
    data["lattice"] = "v2"
    scope = data.get("scope")
    names: dict[object, Scope] = {s.name.lower(): s for s in Scope} | {s.value: s for s in Scope}
    chosen = names.get(scope.lower() if isinstance(scope, str) else scope)
    if chosen is not None:
        data["operations"] = list(LATTICE_OPERATIONS["v2"][chosen])
    config = data.get("config")
    if isinstance(config, dict):
        data["config"] = {**config, "lattice": "v2"}


def model_call_event(
    role: ModelRole,
    request: ModelRequest,
    outcome: ModelResponse | ProviderError,
    **fields: Any,
) -> ModelCallEvent:
    """Build the ``model_call`` event for a response or a provider error.

    Args:
        role: ``planner`` or ``reviewer``.
        request: the request as sent.
        outcome: the response, or the :class:`ProviderError` the request ended in.
        **fields: ``turn`` or ``call_index``.
    """
    if isinstance(outcome, ProviderError):
        return ModelCallEvent(
            role=role,
            request=request,
            error=str(outcome),
            error_kind=outcome.kind,
            error_status=outcome.status,
            usage=outcome.usage,
            **fields,
        )
    return ModelCallEvent(role=role, request=request, response=outcome, **fields)
