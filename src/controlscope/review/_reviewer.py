"""Reviews: who proposes an operation at a boundary, and the one path from proposal to execution.

A :class:`Reviewer` is anything with ``propose(state, condition) -> Proposal``: the model reviewer
(:class:`ModelReviewer`), a rule, a human at a prompt. :func:`review_boundary` is the only way a
proposal reaches the worker: it asks the reviewer, validates the proposal against the granted
scope with :func:`controlscope.scope.validate_operation`, records every step in the log and
returns the realized operation. Every way a review can fail to give an executable proposal is a
typed, recorded Keep fallback (paper A.4: "a malformed review response or review-stage provider
error produces a recorded Keep fallback, after which the existing program continues"):

- ``malformed``: the answer holds no parseable operation, or (JSON decisions) one that breaks
  the decision schema it was asked for;
- ``out_of_scope``: it names an operation the granted scope does not allow;
- ``syntax_error``: the code it proposes (a replacement, a new block) does not compile;
- ``invalid_arguments``: validation rejected it for any other reason (unknown argument, schema
  violation, code-valued parameter, structure change, empty patch);
- ``provider_error``: the model request failed (:class:`~controlscope.core.ProviderError`);
- ``timeout``: a person made no decision within the time limit
  (:class:`~controlscope.review.HumanReviewer`).

Granted Keep is answered without asking the reviewer: ``keep`` is the only operation it allows,
so the review costs nothing and never falls back (``ReviewOutcome.model_called`` is False).
The granted operation set is ``condition.operations`` (the scope read in the condition's
lattice); the reviewer is offered exactly it and validation judges against it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from controlscope.core import (
    MAX_RESPONSE_BYTES,
    ChatModel,
    Condition,
    Event,
    FallbackKind,
    HumanDecision,
    Keep,
    ModelRequest,
    ModelResponse,
    Operation,
    ProposalEvent,
    ProviderError,
    ProviderErrorKind,
    RealizedOperationEvent,
    ReviewerKind,
    ReviewRequestEvent,
    ScopeName,
    Validation,
    ValidationEvent,
    clip_text,
    model_call_event,
    recorded_operation,
    seeded_request,
)
from controlscope.review._operations import decision_schema, operation_tools, parse_decision
from controlscope.review._state import PublicState
from controlscope.review._views import render_view
from controlscope.scope import validate_operation

EventSink = Callable[[Event], object]
"""Where a review's events go as they happen (e.g. ``TrajectoryWriter.write``)."""


class Proposal(BaseModel):
    """What a reviewer proposes at one boundary, before validation.

    Attributes:
        operation: the proposed operation; None when nothing usable came back (a ``malformed``
            fallback, with ``problem`` saying why).
        reason: the reviewer's stated reason, if any.
        raw: the answer as text, as received (model text and tool calls).
        problem: why no operation could be read, when ``operation`` is None.
        request: the model request, for a model reviewer (recorded as a ``model_call``).
        response: the model response, when the request succeeded.
        error: the provider error's message, when the request failed (a ``provider_error``
            fallback).
        error_kind: the provider error's kind.
        error_status: the provider error's HTTP status, if any.
        human: how a person decided, when a person proposed
            (:class:`~controlscope.review.HumanReviewer`; recorded with the proposal).
    """

    model_config = ConfigDict(frozen=True)
    operation: Operation | None = None
    reason: str = ""
    raw: str = ""
    problem: str | None = None
    request: ModelRequest | None = None
    response: ModelResponse | None = None
    error: str | None = None
    error_kind: ProviderErrorKind | None = None
    error_status: int | None = None
    human: HumanDecision | None = None


@runtime_checkable
class Reviewer(Protocol):
    """Proposes an operation at a boundary (the extension point for rule-based or human
    reviewers; :class:`ModelReviewer` asks a model).

    The proposal is validated against ``condition.operations`` by :func:`review_boundary`, so
    a reviewer may propose anything: an operation outside the granted set becomes a recorded
    ``out_of_scope`` fallback, never an execution.
    """

    def propose(self, state: PublicState, condition: Condition) -> Proposal:
        """Return a proposal for the pending call in ``state`` under ``condition``.

        Args:
            state: the complete public state ``h`` at the boundary (paper section 3.1).
            condition: the run's condition (granted scope, view, sampling settings...).

        Returns:
            The proposal: the parsed operation (None when nothing parseable came back) with
            the raw answer and, for a model, its request and response.
        """
        ...


class ModelReviewer:
    """A reviewer that asks a language model (paper section 3.1 and A.3).

    The request follows the condition: the view (and its bounds, ``view_limits``) rendered
    from the public state, the granted operation set as native tools (``review_mode="tools"``,
    with ``reviewer_tool_choice``) or one JSON decision under a schema (``"json"``), the
    reviewer's temperature, token cap and provider options, and the draw index.

    Args:
        model: the reviewer model.
        seed: sampling seed passed to the model, if any.
    """

    def __init__(self, model: ChatModel, *, seed: int | None = None) -> None:
        self.model = model
        self.seed = seed

    def build_request(self, state: PublicState, condition: Condition) -> ModelRequest:
        """The model request for a review of ``state`` (a pure function of its arguments)."""
        granted, mode = condition.operations, condition.review_mode
        messages = render_view(
            state, condition.view, granted, mode=mode, limits=condition.view_limits
        )
        tools = tuple(operation_tools(granted, state)) if mode == "tools" else ()
        return ModelRequest(
            messages=tuple(messages),
            tools=tools,
            tool_choice=condition.reviewer_tool_choice if mode == "tools" else "auto",
            temperature=condition.temperature_for("reviewer"),
            max_tokens=condition.max_tokens_for("reviewer"),
            seed=self.seed,
            json_schema=decision_schema(granted, state) if mode == "json" else None,
            provider_options=dict(condition.reviewer_options),
            draw=condition.draw,
            purpose="reviewer",
        )

    def propose(self, state: PublicState, condition: Condition) -> Proposal:
        """Ask the model and read its proposal (a provider error becomes ``Proposal.error``).

        The request is sent and recorded with the seed the model samples it with
        (:func:`~controlscope.core.seeded_request`).
        """
        request = seeded_request(self.model, self.build_request(state, condition))
        try:
            response = self.model.complete(request)
        except ProviderError as err:
            return Proposal(
                request=request, error=str(err), error_kind=err.kind, error_status=err.status
            )
        parsed = parse_decision(
            response, condition.review_mode, schema=request.json_schema, boundary=state.boundary
        )
        return Proposal(
            operation=parsed.operation,
            reason=parsed.reason,
            raw=parsed.raw,
            problem=parsed.problem,
            request=request,
            response=response,
        )


class ReviewOutcome(BaseModel):
    """Everything one review produced, for execution and for the log.

    Attributes:
        granted: the granted scope.
        proposal: what the reviewer proposed (None when the reviewer was not asked: granted
            Keep).
        validation: the verdict; ``validation.realized`` is the operation to execute.
        fallback: the fallback kind when the realized ``keep`` is not the reviewer's choice.
        latency_s: wall seconds of the whole review (rendering, model, validation).
        realized: the operation to execute at the boundary (``validation.realized``).
        model_called: True when a model request was made.
    """

    granted: ScopeName
    proposal: Proposal | None = None
    validation: Validation
    fallback: FallbackKind | None = None
    latency_s: float = 0.0

    @property
    def realized(self) -> Operation:
        """The operation to execute at the boundary."""
        return self.validation.realized

    @property
    def model_called(self) -> bool:
        """True when a model request was made."""
        return self.proposal is not None and self.proposal.request is not None


def review_boundary(
    reviewer: Reviewer, state: PublicState, condition: Condition, *, log: EventSink | None = None
) -> ReviewOutcome:
    """Review the boundary in ``state``: ask, validate, record; return what to execute.

    Args:
        reviewer: who proposes.
        state: the public state at the boundary.
        condition: the run's condition (``condition.operations`` is the granted set).
        log: if given, receives the review's events as they happen: ``review_request``,
            ``model_call`` (model reviewers), ``proposal``, ``verdict``, ``realized_operation``
            (for granted Keep only ``realized_operation``, with ``model_called=False``).

    Returns:
        The outcome; ``outcome.realized`` is already validated against the granted scope.

    Raises:
        Exception: anything the reviewer raises (a bug in a reviewer, not a review outcome;
            a model reviewer turns provider errors into fallbacks itself).
    """
    started = time.perf_counter()
    scope, boundary = condition.scope, state.boundary
    if condition.operations.keep_only:
        keep = Validation(granted=scope, proposal=Keep(), accepted=True, realized=Keep())
        outcome = ReviewOutcome(
            granted=scope, validation=keep, latency_s=time.perf_counter() - started
        )
        _emit(log, _realized_event(outcome, state))
        return outcome
    _emit(
        log,
        ReviewRequestEvent(
            call_index=boundary.call_index,
            block_id=boundary.block_id,
            view=condition.view,
            granted=scope,
            draw=condition.draw,
        ),
    )
    proposal = reviewer.propose(state, condition)
    validation = _judge(proposal, state, condition, log)
    outcome = ReviewOutcome(
        granted=scope,
        proposal=proposal,
        validation=validation,
        fallback=_fallback_kind(proposal, validation),
        latency_s=time.perf_counter() - started,
    )
    _emit(log, _realized_event(outcome, state))
    return outcome


def _judge(
    proposal: Proposal, state: PublicState, condition: Condition, log: EventSink | None
) -> Validation:
    """Record the model exchange and the proposal, and validate it against the granted set."""
    scope = condition.scope
    call_index = state.boundary.call_index
    if proposal.request is not None:
        outcome: ModelResponse | ProviderError | None = proposal.response
        if proposal.error is not None:
            kind = proposal.error_kind or "other"
            outcome = ProviderError(proposal.error, status=proposal.error_status, kind=kind)
        if outcome is not None:
            event = model_call_event("reviewer", proposal.request, outcome, call_index=call_index)
            _emit(log, event)
    if proposal.error is not None:
        failed = Validation(
            granted=scope,
            proposal=None,
            accepted=False,
            detail=f"review-stage provider error ({proposal.error_kind}): {proposal.error}",
            realized=Keep(),
        )
        if proposal.human is not None:  # a person's desk failed: who was asked, and why
            _emit(log, _proposal_event(call_index, proposal))
            _emit(log, ValidationEvent(call_index=call_index, validation=failed))
        return failed
    _emit(log, _proposal_event(call_index, proposal))
    validation = validate_operation(
        proposal.operation, condition.operations, boundary=state.boundary, tool=state.tool_schema
    )
    if proposal.operation is None and proposal.problem:
        validation = validation.model_copy(update={"detail": proposal.problem})
    _emit(log, ValidationEvent(call_index=call_index, validation=validation))
    return validation


def _proposal_event(call_index: int, proposal: Proposal) -> ProposalEvent:
    """The proposal as recorded: an operation's code longer than
    :data:`~controlscope.core.MAX_CODE_CHARS` clipped (it is refused, ``too_large``), and the
    raw answer to what a model may answer (a custom reviewer's may be anything), so the log's
    one event holds them."""
    raw = None if proposal.raw is None else clip_text(proposal.raw, MAX_RESPONSE_BYTES)
    return ProposalEvent(
        call_index=call_index,
        raw=raw,
        operation=recorded_operation(proposal.operation),
        reviewer=_reviewer_kind(proposal),
        human=proposal.human,
    )


def _reviewer_kind(proposal: Proposal) -> ReviewerKind:
    """Who proposed: a person (``human`` set), a model (a request made), else ``custom``."""
    if proposal.human is not None:
        return "human"
    return "model" if proposal.request is not None else "custom"


def _fallback_kind(proposal: Proposal, validation: Validation) -> FallbackKind | None:
    """Map a verdict to the fallback kind (None when accepted)."""
    if validation.accepted:
        return None
    if proposal.error is not None:
        return "provider_error"
    if proposal.human is not None and proposal.human.timed_out:
        return "timeout"
    if validation.proposal is None:
        return "malformed"
    if validation.reason == "out_of_scope":
        return "out_of_scope"
    if validation.reason == "syntax_error":
        return "syntax_error"
    return "invalid_arguments"


def _realized_event(outcome: ReviewOutcome, state: PublicState) -> RealizedOperationEvent:
    return RealizedOperationEvent(
        call_index=state.boundary.call_index,
        block_id=state.boundary.block_id,
        granted=outcome.granted,
        operation=outcome.realized,
        fallback=outcome.fallback,
        latency_s=outcome.latency_s,
        model_called=outcome.model_called,
    )


def _emit(log: EventSink | None, event: Event) -> None:
    if log is not None:
        log(event)
