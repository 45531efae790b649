"""The trajectory log's event schema: one pydantic model per event type, one discriminated union.

Every model request and response, block, boundary, review, decision and primitive call of a run
is an event, written as it happens (design.md, "Execution contract"; paper section 3.3 and A.4:
"trajectory continuation preserves saved requests, responses, contexts, and decisions").

Each event carries ``schema_version`` (:data:`SCHEMA_VERSION`), ``seq`` (0-based position in the
log), ``t`` (wall clock, seconds since the epoch) and ``type`` (the discriminator). The writer
(:class:`controlscope.record.store.TrajectoryWriter`) assigns ``seq`` and ``t``; construct events
with the defaults and let it stamp them.

Scopes are written by name (``"full"``) and read back from a name or an integer.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, TypeAdapter

from controlscope.envs.base import Task, TaskBudgets, Verdict
from controlscope.models.types import ModelRequest, ModelResponse, ProviderError
from controlscope.scope import Operation, Scope, ScopeName, Validation
from controlscope.worker.types import BlockResult, Boundary, PrimitiveCall, ReplaceBoundary

SCHEMA_VERSION = 1
"""Version of the event schema written by this code; readers refuse newer versions."""

FallbackKind = Literal["malformed", "out_of_scope", "invalid_arguments", "provider_error"]
"""Why a review was executed as ``keep`` although the reviewer did not choose it (paper A.4)."""


ModelRole = Literal["planner", "reviewer"]


class _Event(BaseModel):
    """Fields every event has; ``seq`` and ``t`` are assigned by the writer."""

    schema_version: int = SCHEMA_VERSION
    seq: int = 0
    t: float = 0.0


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
        budgets: the task's budgets.
        config: anything else that defines the condition (token cap, draw, temperature...).
    """

    type: Literal["run_start"] = "run_start"
    task: Task
    seed: int
    scope: ScopeName
    schedule: str
    view: str
    replace_boundary: ReplaceBoundary = "reply"
    models: dict[str, str] = Field(default_factory=dict)
    isolation: str = "none"
    budgets: TaskBudgets = Field(default_factory=TaskBudgets)
    config: dict[str, Any] = Field(default_factory=dict)


class ModelCallEvent(_Event):
    """One model request and its response or error.

    The field names ``role``, ``request``, ``response``, ``error`` and ``error_kind`` are read by
    :class:`controlscope.models.replay.ReplayModel`; do not rename them.

    Attributes:
        role: ``planner`` or ``reviewer``.
        request: the request as sent.
        response: the response, None when the request failed.
        error: the provider error's message when it failed.
        error_kind: the provider error's kind (``rate_limit``, ``server``, ``timeout``,
            ``runtime_crash``...).
        error_status: the provider error's HTTP status, if any.
        turn: the planning turn (planner calls).
        call_index: the boundary's call index (reviewer calls).
    """

    type: Literal["model_call"] = "model_call"
    role: ModelRole
    request: ModelRequest
    response: ModelResponse | None = None
    error: str | None = None
    error_kind: str | None = None
    error_status: int | None = None
    turn: int | None = None
    call_index: int | None = None


class PlannerTurnEvent(_Event):
    """An ordinary planning turn begins (paper section 3.2: every condition keeps it)."""

    type: Literal["planner_turn"] = "planner_turn"
    turn: int


class BlockStartEvent(_Event):
    """A block starts running.

    Attributes:
        block_id: the block's id.
        code: its source.
        replaces: the block it replaces, for a replacement block.
        turn: the planning turn whose reply queued it.
    """

    type: Literal["block_start"] = "block_start"
    block_id: str
    code: str
    replaces: str | None = None
    turn: int = 0


class BlockEndEvent(_Event):
    """A block ended (completed, raised, was cancelled or hit a budget)."""

    type: Literal["block_end"] = "block_end"
    result: BlockResult


class BoundaryEvent(_Event):
    """A block paused at a primitive call.

    Attributes:
        boundary: the pending call and the public runtime state.
        review: whether the schedule chose to review here.
    """

    type: Literal["boundary"] = "boundary"
    boundary: Boundary
    review: bool = False


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
    view: str
    granted: ScopeName
    draw: int = 0


class ProposalEvent(_Event):
    """What the reviewer proposed, raw and parsed.

    Attributes:
        call_index: the boundary's call index.
        raw: the reviewer's answer text and tool calls, as received.
        operation: the parsed operation, None when nothing parseable came back.
    """

    type: Literal["proposal"] = "proposal"
    call_index: int
    raw: str = ""
    operation: Operation | None = None


class VerdictEvent(_Event):
    """The validation of a proposal against the granted scope (``scope.validate_operation``)."""

    type: Literal["verdict"] = "verdict"
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
    """A primitive call made on the environment server (after any patch), with its observation."""

    type: Literal["primitive_call"] = "primitive_call"
    call: PrimitiveCall


class BudgetEvent(_Event):
    """A budget was reached.

    Attributes:
        budget: ``primitive_calls``, ``planning_turns``, ``execution_seconds``, ``tokens``,
            ``blocks`` or ``requests_per_block``.
        limit: the budget's limit.
        value: the value that reached it.
    """

    type: Literal["budget"] = "budget"
    budget: str
    limit: float
    value: float


class FinalVerdictEvent(_Event):
    """The native verifier's verdict on the terminal workspace.

    Attributes:
        verdict: the checks.
        success: the verdict's success (stored so readers need not recompute it).
        end_reason: why the run ended (see :class:`RunEndEvent`).
    """

    type: Literal["final_verdict"] = "final_verdict"
    verdict: Verdict
    success: bool
    end_reason: str


class RunEndEvent(_Event):
    """The run ended.

    Attributes:
        end_reason: ``final_answer``, ``budget:<name>``, ``planner_provider_error``, ``error``
            or another short word the agent loop documents.
        detail: a human-readable explanation.
    """

    type: Literal["run_end"] = "run_end"
    end_reason: str
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
    | VerdictEvent
    | RealizedOperationEvent
    | PrimitiveCallEvent
    | BudgetEvent
    | FinalVerdictEvent
    | RunEndEvent,
    Field(discriminator="type"),
]
"""Any trajectory event; parse one with :data:`EVENT_ADAPTER`."""

EVENT_ADAPTER: TypeAdapter[Event] = TypeAdapter(Event)
"""Validates and dumps :data:`Event` values (``EVENT_ADAPTER.validate_json(line)``)."""


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
            **fields,
        )
    return ModelCallEvent(role=role, request=request, response=outcome, **fields)
