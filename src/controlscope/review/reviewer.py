"""The reviewer: one review at one boundary, from view to validated, realized operation.

A review renders a view of the public state (:func:`render_view`), offers the operations the
granted scope allows, asks the model, parses its answer and validates the proposal with
:func:`controlscope.scope.validate_operation`. Every way a review can fail to produce an executable
proposal is a typed, recorded Keep fallback (paper A.4: "a malformed review response or
review-stage provider error produces a recorded Keep fallback, after which the existing program
continues"):

- ``malformed``: the answer holds no parseable operation;
- ``out_of_scope``: it names an operation the granted scope does not allow;
- ``invalid_arguments``: validation rejected it for any other reason (unknown argument, schema
  violation, code-valued parameter, structure change, syntax error, empty patch);
- ``provider_error``: the model request failed (:class:`ProviderError`).

Granted Keep is answered without a model call: ``keep`` is the only operation it allows, so the
review costs nothing and never falls back (``ReviewOutcome.model_called`` is False).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal

from pydantic import BaseModel

from controlscope.core import (
    ChatModel,
    Event,
    FallbackKind,
    Keep,
    ModelRequest,
    ModelResponse,
    Operation,
    ProposalEvent,
    ProviderError,
    RealizedOperationEvent,
    ReviewRequestEvent,
    Scope,
    ScopeName,
    Validation,
    VerdictEvent,
    model_call_event,
)
from controlscope.review.operations import (
    DecisionMode,
    decision_schema,
    operation_tools,
    parse_decision,
)
from controlscope.review.state import PublicState
from controlscope.review.views import View, ViewLimits, render_view
from controlscope.scope import validate_operation

EventSink = Callable[[Event], object]
"""Where a review's events go as they happen (e.g. ``TrajectoryWriter.write``)."""


class ReviewOutcome(BaseModel):
    """Everything one review produced, for execution and for the log.

    Attributes:
        granted: the granted scope.
        request: the model request (None when no model was asked: granted Keep).
        response: the model response (None on a provider error or without a model call).
        proposal: the parsed proposal, None when nothing parseable came back.
        validation: the verdict; ``validation.realized`` is the operation to execute.
        fallback: the fallback kind when the realized ``keep`` is not the reviewer's choice.
        reason: the reviewer's stated reason, if any.
        raw: the answer as text (assistant text and tool calls).
        problem: why no operation could be read from the answer (``malformed``), if so.
        error: the provider error's message, for ``provider_error`` only.
        error_kind: the provider error's kind, for ``provider_error``.
        error_status: the provider error's HTTP status, if any.
        latency_s: wall seconds of the whole review (rendering, model, validation).
    """

    granted: ScopeName
    request: ModelRequest | None = None
    response: ModelResponse | None = None
    proposal: Operation | None = None
    validation: Validation
    fallback: FallbackKind | None = None
    reason: str = ""
    raw: str = ""
    problem: str | None = None
    error: str | None = None
    error_kind: str | None = None
    error_status: int | None = None
    latency_s: float = 0.0

    @property
    def realized(self) -> Operation:
        """The operation to execute at the boundary."""
        return self.validation.realized

    @property
    def model_called(self) -> bool:
        """True when a model request was made."""
        return self.request is not None


class Reviewer:
    """Reviews boundaries with one model under one granted scope.

    Args:
        model: the reviewer model.
        scope: the granted scope.
        view: what the reviewer sees (paper A.3).
        mode: ``tools`` (native operation tools) or ``json`` (one JSON decision, decoded under
            :func:`decision_schema`; for the local model, which follows a schema reliably).
        draw: the reviewer draw index (separately sampled draws never share cache entries).
        temperature: sampling temperature (paper 4: 0.7).
        max_tokens: per-request output cap (paper 4: 16,384).
        tool_choice: ``auto`` (paper's matched configurations) or ``required`` (fast reviewers).
        seed: sampling seed passed to the model, if any.
        limits: size bounds of the rendered view.
    """

    def __init__(
        self,
        model: ChatModel,
        scope: Scope,
        *,
        view: View = "with_feedback",
        mode: DecisionMode = "tools",
        draw: int = 0,
        temperature: float = 0.7,
        max_tokens: int = 16_384,
        tool_choice: Literal["auto", "required"] = "auto",
        seed: int | None = None,
        limits: ViewLimits | None = None,
    ) -> None:
        if view not in ("code_only", "with_feedback"):
            raise ValueError(f"unknown view {view!r}; expected code_only or with_feedback")
        if mode not in ("tools", "json"):
            raise ValueError(f"unknown decision mode {mode!r}; expected tools or json")
        self.model = model
        self.scope = Scope(scope)
        self.view: View = view
        self.mode: DecisionMode = mode
        self.draw = draw
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.tool_choice = tool_choice
        self.seed = seed
        self.limits = limits or ViewLimits()

    def build_request(self, state: PublicState) -> ModelRequest:
        """The model request for a review of ``state`` (a pure function of state and config)."""
        messages = render_view(state, self.view, self.scope, mode=self.mode, limits=self.limits)
        if self.mode == "tools":
            return ModelRequest(
                messages=tuple(messages),
                tools=tuple(operation_tools(self.scope)),
                tool_choice=self.tool_choice,
                temperature=self.temperature,
                max_tokens=self.max_tokens,
                seed=self.seed,
                draw=self.draw,
                purpose="reviewer",
            )
        return ModelRequest(
            messages=tuple(messages),
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            seed=self.seed,
            json_schema=decision_schema(self.scope),
            draw=self.draw,
            purpose="reviewer",
        )

    def review(self, state: PublicState, *, log: EventSink | None = None) -> ReviewOutcome:
        """Review the boundary in ``state``.

        Args:
            state: the public state at the boundary.
            log: if given, receives the review's events as they happen: ``review_request``,
                ``model_call``, ``proposal``, ``verdict``, ``realized_operation`` (for granted
                Keep only ``realized_operation``, with ``model_called=False``).

        Returns:
            The outcome; ``outcome.realized`` is already validated against the granted scope.

        Raises:
            Exception: anything the model raises other than :class:`ProviderError` (a bug in
                the model or a test double, not a review outcome).
        """
        started = time.perf_counter()
        boundary = state.boundary
        if self.scope == Scope.KEEP:
            outcome = ReviewOutcome(
                granted=self.scope,
                proposal=Keep(),
                validation=Validation(
                    granted=self.scope, proposal=Keep(), accepted=True, realized=Keep()
                ),
                latency_s=time.perf_counter() - started,
            )
            _emit(log, _realized_event(outcome, state))
            return outcome

        request = self.build_request(state)
        _emit(
            log,
            ReviewRequestEvent(
                call_index=boundary.call_index,
                block_id=boundary.block_id,
                view=self.view,
                granted=self.scope,
                draw=self.draw,
            ),
        )
        try:
            response = self.model.complete(request)
        except ProviderError as err:
            _emit(
                log,
                model_call_event("reviewer", request, err, call_index=boundary.call_index),
            )
            outcome = ReviewOutcome(
                granted=self.scope,
                request=request,
                validation=Validation(
                    granted=self.scope,
                    proposal=None,
                    accepted=False,
                    detail=f"review-stage provider error ({err.kind}): {err}",
                    realized=Keep(),
                ),
                fallback="provider_error",
                error=str(err),
                error_kind=err.kind,
                error_status=err.status,
                latency_s=time.perf_counter() - started,
            )
            _emit(log, _realized_event(outcome, state))
            return outcome
        _emit(log, model_call_event("reviewer", request, response, call_index=boundary.call_index))

        parsed = parse_decision(response, self.mode)
        _emit(
            log,
            ProposalEvent(
                call_index=boundary.call_index, raw=parsed.raw, operation=parsed.operation
            ),
        )
        validation = validate_operation(
            parsed.operation, self.scope, boundary=boundary, tool=state.tool_schema
        )
        if parsed.operation is None and parsed.problem:
            validation = validation.model_copy(update={"detail": parsed.problem})
        _emit(log, VerdictEvent(call_index=boundary.call_index, validation=validation))
        outcome = ReviewOutcome(
            granted=self.scope,
            request=request,
            response=response,
            proposal=parsed.operation,
            validation=validation,
            fallback=_fallback_kind(validation),
            reason=parsed.reason,
            raw=parsed.raw,
            problem=parsed.problem,
            latency_s=time.perf_counter() - started,
        )
        _emit(log, _realized_event(outcome, state))
        return outcome


def _fallback_kind(validation: Validation) -> FallbackKind | None:
    """Map a verdict to the fallback kind (None when accepted)."""
    if validation.accepted:
        return None
    if validation.proposal is None:
        return "malformed"
    if validation.reason == "out_of_scope":
        return "out_of_scope"
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
