"""A run's events as OpenTelemetry spans, following the GenAI semantic conventions.

One :class:`RunSpans` per run receives the run's events in order, as they are written (or read
back from a recorded log) and builds its spans; every time comes from the events' own clocks
(``t``, a call's ``started_at`` and ``elapsed_ms``, a response's ``latency_s``), so a log traced
again gives the same spans. The span tree:

- ``invoke_agent controlscope``: the run (``run_start`` to ``run_end``): the condition, the
  end reason and the verdict;
- ``planning_turn``: one ordinary planning turn (``planner_turn`` to the next turn or the
  verdict), under the run;
- ``chat MODEL``: one model call (``model_call``; ``gen_ai.operation.name`` ``chat``,
  ``gen_ai.request.model``, ``gen_ai.usage.input_tokens`` / ``output_tokens``, and
  ``controlscope.role``: ``planner`` or ``reviewer``), under its turn, or under its review;
- ``execute_tool TOOL``: one primitive call (``primitive_call``; ``gen_ai.tool.name``, and
  whether its boundary was reviewed), under its turn;
- ``review``: one boundary review (``review_request`` to ``realized_operation``): the granted
  scope, the proposed and the realized operation, whether the proposal was accepted, the
  fallback kind (paper 3.1, A.4), under its turn.

Every other event is a span event on the span it happened in (:data:`EVENT_SPANS` maps each
event type of the log's schema to its handler; :data:`NOT_TRACED` lists, with a reason, the
types deliberately left out). Texts (prompts, code, observations) are not copied into spans.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from opentelemetry import trace
from opentelemetry.trace import Span, Status, StatusCode, Tracer

from controlscope.core import (
    BlockEndEvent,
    BlockStartEvent,
    BoundaryEvent,
    BranchPointEvent,
    BudgetEvent,
    ClockDifferencesEvent,
    EndReason,
    Event,
    FinalVerdictEvent,
    ModelCallEvent,
    PlanEndEvent,
    PlanErrorEvent,
    PlannerTurnEvent,
    PrimitiveCallEvent,
    ProposalEvent,
    RealizedOperationEvent,
    RecoveryEvent,
    ReviewRequestEvent,
    RunEndEvent,
    RunStartEvent,
    Scope,
    ValidationEvent,
)

AttributeValue = str | bool | int | float | list[str]

AGENT_NAME = "controlscope"
"""``gen_ai.agent.name`` of a run's span."""

FAILED_ENDS: frozenset[EndReason] = frozenset(
    {"error", "environment_error", "planner_provider_error", "replay_diverged"}
)
"""End reasons that set the run span's status to error (a part failed; a budget, a final
answer or an interruption is an outcome, not a failure)."""

_DETAIL_CHARS = 500


def _ns(seconds: float) -> int:
    """Epoch seconds as OpenTelemetry's epoch nanoseconds."""
    return int(seconds * 1e9)


def _attrs(values: Mapping[str, Any]) -> dict[str, AttributeValue]:
    """The values a span can hold: None left out, tuples as lists of strings."""
    out: dict[str, AttributeValue] = {}
    for key, value in values.items():
        if value is None:
            continue
        if isinstance(value, (list, tuple)):
            out[key] = [str(item) for item in value]
        else:
            out[key] = value
    return out


def _scope(value: Scope | int) -> str:
    return Scope(value).name.lower()


class RunSpans:
    """Builds one run's spans from its events, in order (:meth:`add`).

    Spans still open when the log is closed without a ``run_end`` (a forked branch's copy of
    its trunk) are dropped, never ended: each run's spans are exported once, by the process
    that records its end.

    Args:
        provider: an OpenTelemetry ``TracerProvider``.
        run_dir: the run's directory (an attribute of the run span), if known.
        flush_s: how long ``run_end`` waits at most for the provider to export.
    """

    def __init__(self, provider: Any, *, run_dir: Path | None = None, flush_s: float = 5.0):
        self._provider = provider
        self._tracer: Tracer = provider.get_tracer("controlscope")
        self._run_dir = run_dir
        self._flush_s = flush_s
        self.run: Span | None = None
        self.turn: Span | None = None
        self.reviews: dict[int, Span] = {}
        self.boundaries: dict[int, dict[str, Any]] = {}
        self.models: dict[str, str] = {}
        self.last_t = 0.0

    def add(self, event: Event) -> None:
        """Turn one event into spans or span events (events before ``run_start`` or after
        ``run_end`` go to the caller's current span, if any)."""
        handler = EVENT_SPANS.get(event.type)
        if handler is not None:
            handler(self, event)
        self.last_t = event.t

    def close(self) -> None:
        """Drop what is still open (a run ended by ``run_end`` has nothing open)."""
        self.run, self.turn, self.reviews, self.boundaries = None, None, {}, {}

    def start(
        self, name: str, t: float, attributes: Mapping[str, Any], parent: Span | None
    ) -> Span:
        """A span started at epoch seconds ``t`` under ``parent`` (None: the current context)."""
        context = None if parent is None else trace.set_span_in_context(parent)
        return self._tracer.start_span(
            name, context=context, start_time=_ns(t), attributes=_attrs(attributes)
        )

    def where(self) -> Span | None:
        """The innermost open span events go to: the turn, else the run."""
        return self.turn if self.turn is not None else self.run

    def mark(self, span: Span | None, name: str, t: float, attributes: Mapping[str, Any]) -> None:
        """A span event at epoch seconds ``t`` (on ``span``, else on the current span)."""
        target = span if span is not None else trace.get_current_span()
        target.add_event(name, attributes=_attrs(attributes), timestamp=_ns(t))

    def on_review(
        self, call_index: int, name: str, t: float, attributes: Mapping[str, Any]
    ) -> None:
        """Attributes of the open review at ``call_index``; without one, a span event."""
        review = self.reviews.get(call_index)
        if review is not None:
            review.set_attributes(_attrs(attributes))
        else:
            self.mark(self.where(), name, t, attributes)

    def end_turn(self, t: float) -> None:
        """End the open turn span, if any, at epoch seconds ``t``."""
        if self.turn is not None:
            self.turn.end(end_time=_ns(t))
            self.turn = None

    def flush(self) -> None:
        """Ask the provider to export what it holds; wait at most ``flush_s`` seconds (an
        exporter's own timeout and retries can take longer: a collector that does not answer
        is left to them, on a thread of their own)."""
        flush = getattr(self._provider, "force_flush", None)
        if flush is not None:
            worker = threading.Thread(
                target=flush, args=(int(self._flush_s * 1000),), name="cs-trace-flush", daemon=True
            )
            worker.start()
            worker.join(self._flush_s)

    @property
    def run_dir(self) -> Path | None:
        """The run's directory, if known."""
        return self._run_dir


def _run_start(spans: RunSpans, event: RunStartEvent) -> None:
    spans.models = {role: model for role, model in event.models.items() if model}
    branch = event.branch
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": AGENT_NAME,
        "gen_ai.request.model": spans.models.get("planner"),
        "controlscope.run_dir": None if spans.run_dir is None else str(spans.run_dir),
        "controlscope.task.id": event.task.id,
        "controlscope.task.env": event.task.env,
        "controlscope.seed": event.seed,
        "controlscope.scope": _scope(event.scope),
        "controlscope.lattice": event.lattice,
        "controlscope.operations": event.operations,
        "controlscope.schedule": event.schedule,
        "controlscope.view": event.view,
        "controlscope.replace_boundary": event.replace_boundary,
        "controlscope.model.planner": spans.models.get("planner"),
        "controlscope.model.reviewer": spans.models.get("reviewer"),
        "controlscope.isolation": event.isolation,
        "controlscope.branch.purpose": None if branch is None else branch.purpose,
        "controlscope.branch.source_run": None if branch is None else branch.source_run,
    }
    spans.run = spans.start(f"invoke_agent {AGENT_NAME}", event.t, attributes, None)


def _planner_turn(spans: RunSpans, event: PlannerTurnEvent) -> None:
    spans.end_turn(event.t)
    attributes = {"controlscope.turn": event.turn, "controlscope.role": "planner"}
    spans.turn = spans.start("planning_turn", event.t, attributes, spans.run)


def _model_call(spans: RunSpans, event: ModelCallEvent) -> None:
    response, request = event.response, event.request
    model = spans.models.get(event.role) or (response.model if response is not None else "")
    usage = response.usage if response is not None else event.usage
    latency = response.latency_s if response is not None else 0.0
    begin = event.t - latency if latency > 0 else min(spans.last_t or event.t, event.t)
    attributes = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": model.split(":", 1)[0] if model else None,
        "gen_ai.request.model": model or None,
        "gen_ai.request.temperature": request.temperature,
        "gen_ai.request.max_tokens": request.max_tokens,
        "gen_ai.request.top_p": request.top_p,
        "gen_ai.request.seed": request.seed,
        "gen_ai.response.model": (response.model or None) if response is not None else None,
        "gen_ai.response.finish_reasons": None if response is None else [response.finish_reason],
        "gen_ai.usage.input_tokens": None if usage is None else usage.input_tokens,
        "gen_ai.usage.output_tokens": None if usage is None else usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": None if usage is None else usage.cached_tokens,
        "controlscope.role": event.role,
        "controlscope.turn": event.turn,
        "controlscope.call_index": event.call_index,
        "controlscope.draw": request.draw,
        "controlscope.cached": None if response is None else response.cached,
        "controlscope.replayed": None if response is None else response.replayed,
        "error.type": event.error_kind,
    }
    parent = spans.reviews.get(event.call_index) if event.call_index is not None else None
    span = spans.start(f"chat {model}".strip(), begin, attributes, parent or spans.where())
    if event.error is not None:
        span.set_status(Status(StatusCode.ERROR, event.error[:_DETAIL_CHARS]))
    span.end(end_time=_ns(event.t))


def _primitive_call(spans: RunSpans, event: PrimitiveCallEvent) -> None:
    call = event.call
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": call.tool,
        "gen_ai.tool.type": "function",
        "gen_ai.tool.call.id": f"{call.block_id}:{call.call_index}",
        "controlscope.call_index": call.call_index,
        "controlscope.block_id": call.block_id,
        "controlscope.operation": call.operation,
        "controlscope.patched": call.requested is not None,
        "controlscope.notice": call.notice,
        "error.type": "tool_error" if call.result.is_error else None,
        **spans.boundaries.pop(call.call_index, {}),
    }
    span = spans.start(f"execute_tool {call.tool}", call.started_at, attributes, spans.where())
    if call.result.is_error:
        span.set_status(Status(StatusCode.ERROR, call.result.text[:_DETAIL_CHARS]))
    span.end(end_time=_ns(call.started_at + call.elapsed_ms / 1000))


def _review_request(spans: RunSpans, event: ReviewRequestEvent) -> None:
    attributes = {
        "controlscope.call_index": event.call_index,
        "controlscope.block_id": event.block_id,
        "controlscope.view": event.view,
        "controlscope.review.granted_scope": _scope(event.granted),
        "controlscope.draw": event.draw,
    }
    spans.reviews[event.call_index] = spans.start("review", event.t, attributes, spans.where())


def _proposal(spans: RunSpans, event: ProposalEvent) -> None:
    proposed = "none" if event.operation is None else event.operation.kind
    human = event.human
    attributes = {
        "controlscope.review.proposed": proposed,
        "controlscope.review.reviewer": event.reviewer,
        "controlscope.review.human.channel": None if human is None else human.channel,
        "controlscope.review.human.decided_s": None if human is None else human.decided_s,
    }
    spans.on_review(event.call_index, "proposal", event.t, attributes)


def _validation(spans: RunSpans, event: ValidationEvent) -> None:
    validation = event.validation
    attributes = {
        "controlscope.review.accepted": validation.accepted,
        "controlscope.review.rejection": validation.reason,
    }
    spans.on_review(event.call_index, "validation", event.t, attributes)


def _realized_operation(spans: RunSpans, event: RealizedOperationEvent) -> None:
    attributes = {
        "controlscope.call_index": event.call_index,
        "controlscope.block_id": event.block_id or None,
        "controlscope.review.granted_scope": _scope(event.granted),
        "controlscope.review.operation": event.operation.kind,
        "controlscope.review.fallback": event.fallback,
        "controlscope.review.latency_s": event.latency_s,
        "controlscope.review.model_called": event.model_called,
    }
    review = spans.reviews.pop(event.call_index, None)
    if review is None:  # a review answered without a review request
        begin = event.t - max(event.latency_s, 0.0)
        review = spans.start("review", begin, attributes, spans.where())
    review.set_attributes(_attrs(attributes))
    review.end(end_time=_ns(event.t))


def _final_verdict(spans: RunSpans, event: FinalVerdictEvent) -> None:
    spans.end_turn(event.t)
    passed = sum(check.passed for check in event.verdict.checks)
    attributes = {
        "controlscope.success": event.success,
        "controlscope.checks.passed": passed,
        "controlscope.checks.total": len(event.verdict.checks),
    }
    if spans.run is not None:
        spans.run.set_attributes(_attrs(attributes))
    spans.mark(spans.run, "final_verdict", event.t, attributes)


def _run_end(spans: RunSpans, event: RunEndEvent) -> None:
    for review in spans.reviews.values():
        review.end(end_time=_ns(event.t))
    spans.reviews = {}
    spans.end_turn(event.t)
    run = spans.run
    if run is not None:
        run.set_attribute("controlscope.end_reason", event.end_reason)
        if event.end_reason in FAILED_ENDS:
            detail = event.detail[:_DETAIL_CHARS] or event.end_reason
            run.set_status(Status(StatusCode.ERROR, detail))
        run.end(end_time=_ns(event.t))
    spans.run = None
    spans.flush()


def _block_start(spans: RunSpans, event: BlockStartEvent) -> None:
    attributes = {
        "controlscope.block_id": event.block_id,
        "controlscope.replaces": event.replaces,
        "controlscope.extracted": event.extracted,
    }
    spans.mark(spans.where(), "block_start", event.t, attributes)


def _block_end(spans: RunSpans, event: BlockEndEvent) -> None:
    result = event.result
    attributes = {
        "controlscope.block_id": result.block_id,
        "controlscope.block.status": result.status,
        "controlscope.block.calls": result.calls,
        "controlscope.block.exec_s": result.exec_s,
        "controlscope.block.replaced_by": result.replaced_by,
        "controlscope.block.refusal": None if result.refusal is None else result.refusal.kind,
    }
    spans.mark(spans.where(), "block_end", event.t, attributes)


def _boundary(spans: RunSpans, event: BoundaryEvent) -> None:
    spans.boundaries[event.boundary.call_index] = {
        "controlscope.reviewed": event.review,
        "controlscope.risky": None if event.risk is None else event.risk.risky,
    }


def _budget(spans: RunSpans, event: BudgetEvent) -> None:
    attributes = {
        "controlscope.budget": event.budget,
        "controlscope.budget.limit": event.limit,
        "controlscope.budget.value": event.value,
    }
    spans.mark(spans.run, "budget", event.t, attributes)


def _clock_differences(spans: RunSpans, event: ClockDifferencesEvent) -> None:
    attributes = {"controlscope.differences": len(event.differences)}
    spans.mark(spans.run, "clock_differences", event.t, attributes)


def _branch_point(spans: RunSpans, event: BranchPointEvent) -> None:
    attributes = {
        "controlscope.call_index": event.call_index,
        "controlscope.boundary": event.boundary,
        "controlscope.prefix_hash": event.prefix_hash,
        "controlscope.state_hash": event.state_hash,
    }
    spans.mark(spans.run, "branch_point", event.t, attributes)


def _plan_end(spans: RunSpans, event: PlanEndEvent) -> None:
    attributes = {
        "controlscope.plan": event.plan,
        "controlscope.plan.cause": event.cause,
        "controlscope.goal_reached": event.goal_reached,
        "controlscope.calls": event.calls,
    }
    spans.mark(spans.where(), "plan_end", event.t, attributes)


def _recovery(spans: RunSpans, event: RecoveryEvent) -> None:
    attributes = {"controlscope.repair": event.repair, "controlscope.plan.cause": event.cause}
    spans.mark(spans.run, "recovery", event.t, attributes)


def _plan_error(spans: RunSpans, event: PlanErrorEvent) -> None:
    attributes = {
        "controlscope.call_index": event.call_index,
        "controlscope.block_id": event.block_id,
        "controlscope.review.fallback": event.fallback,
    }
    spans.mark(spans.where(), "plan_error", event.t, attributes)


EVENT_SPANS: dict[str, Callable[[RunSpans, Any], None]] = {
    "run_start": _run_start,  # opens the run span
    "planner_turn": _planner_turn,  # opens a turn span (ends the previous one)
    "model_call": _model_call,  # a chat span
    "primitive_call": _primitive_call,  # an execute_tool span
    "review_request": _review_request,  # opens a review span
    "proposal": _proposal,  # attributes of the review span
    "validation": _validation,  # attributes of the review span
    "realized_operation": _realized_operation,  # ends the review span
    "final_verdict": _final_verdict,  # ends the turn; on the run span
    "run_end": _run_end,  # ends every open span, the run's last
    "boundary": _boundary,  # attributes of its call's execute_tool span
    "block_start": _block_start,  # span events on the turn
    "block_end": _block_end,
    "plan_end": _plan_end,
    "plan_error": _plan_error,
    "budget": _budget,  # span events on the run
    "clock_differences": _clock_differences,
    "branch_point": _branch_point,
    "recovery": _recovery,
}
"""What each event type of the log's schema becomes: its handler (a span opened, ended or
made whole, or a span event)."""

NOT_TRACED: dict[str, str] = {}
"""Event types deliberately left out of traces, each with the reason (none today: every type
of the schema is a span or a span event)."""
