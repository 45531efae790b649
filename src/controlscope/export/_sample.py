"""One recorded run as one Inspect AI sample: its events, messages, score, usage and metadata.

The mapping per event kind is :data:`~controlscope.export.INSPECT_EVENTS`; a review is an
approval, read from the operation's registry entry: an operation without payload (Keep) ->
``approve``; one that changes the call's data (an argument or block-data patch) -> ``modify``
with the call as made; one that cancels the pending call (a replacement) -> ``reject``,
followed by an ``info`` event named after the operation carrying the new code; a fallback ->
``approve`` with its kind in the metadata.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from inspect_ai.event import (
    ApprovalEvent,
    InfoEvent,
    ModelEvent,
    SampleLimitEvent,
    ScoreEvent,
    ToolEvent,
)
from inspect_ai.event import Event as InspectEvent
from inspect_ai.log import EvalError, EvalSample, EvalSampleLimit
from inspect_ai.model import ChatMessage, ModelOutput, ModelUsage
from inspect_ai.scorer import CORRECT, INCORRECT, Score
from inspect_ai.tool import ToolCall, ToolCallError, ToolInfo

import controlscope.export._messages as msg
from controlscope.core import (
    Boundary,
    BoundaryEvent,
    BudgetEvent,
    Event,
    FinalVerdictEvent,
    Message,
    ModelCallEvent,
    PrimitiveCallEvent,
    ProposalEvent,
    RealizedOperationEvent,
    ReviewRequestEvent,
    RunEndEvent,
    RunStartEvent,
    Scope,
    ToolSpec,
    Usage,
    ValidationEvent,
    operation_spec,
)
from controlscope.export._runs import ExportError
from controlscope.panel import PlannedRun
from controlscope.record import LogError, read_log

_LIMITS: dict[str, Any] = {
    "planning_turns": "turn",
    "execution_seconds": "working",
    "wall_seconds": "time",
    "tokens": "token",
}
"""Our budgets as Inspect's limit types (the others are ``custom``)."""

_HIDDEN = {"schema_version", "seq", "t", "type"}


def call_id(call_index: int) -> str:
    """The id of a primitive call's tool call and approval (``call-N``)."""
    return f"call-{call_index}"


def stamp(t: float) -> datetime:
    """Seconds since the epoch as an aware UTC time."""
    return datetime.fromtimestamp(t, tz=UTC)


def read_run(directory: Path) -> list[Event]:
    """A run's events; the first is its ``run_start``.

    Raises:
        ExportError: an unreadable log, or one that does not start with ``run_start``.
    """
    try:
        events = read_log(directory).events
    except (OSError, LogError) as err:
        raise ExportError(f"{directory}: cannot read the log: {err}") from None
    if not events or not isinstance(events[0], RunStartEvent):
        raise ExportError(f"{directory}: the log does not start with run_start")
    return events


class SampleBuilder:
    """Converts one run's events, in log order, to Inspect events (:meth:`sample`).

    Args:
        events: the run's events (:func:`read_run`).
        planned: the panel's plan entry for the run; None for a lone run.
        sample_id: the sample's id (the panel's run id, or the run directory's name).
    """

    def __init__(self, events: list[Event], planned: PlannedRun | None, sample_id: str) -> None:
        start = events[0]
        assert isinstance(start, RunStartEvent)
        self.start = start
        self.events = events
        self.planned = planned
        self.sample_id = sample_id
        self.t0 = start.t
        self.boundaries: dict[int, Boundary] = {}
        self.proposals: dict[int, ProposalEvent] = {}
        self.validations: dict[int, ValidationEvent] = {}
        self.draws: dict[int, int] = {}
        self.calls = {e.call.call_index: e for e in events if isinstance(e, PrimitiveCallEvent)}
        self.planner: ModelCallEvent | None = None
        self.usage: dict[str, Usage] = {}
        self.end_reason: str | None = None
        self.success: bool | None = None
        self._chat: dict[tuple[Any, ...], ChatMessage] = {}
        self._tools: dict[tuple[str, str, str], ToolInfo] = {}
        self.score: Score | None = None
        self.limit: EvalSampleLimit | None = None

    def _message(self, m: Message) -> ChatMessage:
        """A request message as Inspect's, one object per distinct message of the run (the
        requests repeat their conversation: the log writer pools it once)."""
        calls = tuple((c.id, c.name, c.arguments) for c in m.tool_calls)
        key = (m.role, m.content, m.tool_call_id, m.name, calls)
        found = self._chat.get(key)
        if found is None:
            found = self._chat[key] = msg.message(m)
        return found

    def _tool_info(self, spec: ToolSpec) -> ToolInfo:
        key = (spec.name, spec.description, json.dumps(spec.parameters, sort_keys=True))
        found = self._tools.get(key)
        if found is None:
            found = self._tools[key] = msg.tool_info(spec)
        return found

    def _base(self, t: float) -> dict[str, Any]:
        return {"timestamp": stamp(t), "working_start": max(0.0, t - self.t0)}

    def _info(self, event: Event) -> InfoEvent:
        data = event.model_dump(mode="json", exclude=_HIDDEN)
        return InfoEvent(source=event.type, data=data, **self._base(event.t))

    def convert(self) -> list[InspectEvent]:
        """Every exported event, in log order."""
        out: list[InspectEvent] = []
        for event in self.events:
            out.extend(self._one(event))
        return out

    def _one(self, event: Event) -> list[InspectEvent]:
        if isinstance(event, BoundaryEvent):
            self.boundaries[event.boundary.call_index] = event.boundary
            return []
        if isinstance(event, ReviewRequestEvent):
            self.draws[event.call_index] = event.draw
            return []
        if isinstance(event, ProposalEvent):
            self.proposals[event.call_index] = event
            return []
        if isinstance(event, ValidationEvent):
            self.validations[event.call_index] = event
            return []
        if isinstance(event, ModelCallEvent):
            return [self._model(event)]
        if isinstance(event, RealizedOperationEvent):
            return self._approval(event)
        if isinstance(event, PrimitiveCallEvent):
            return [self._tool(event)]
        if isinstance(event, BudgetEvent):
            return [self._limit(event)]
        if isinstance(event, FinalVerdictEvent):
            self.success, self.end_reason = event.success, event.end_reason
            return [self._score(event)]
        if isinstance(event, RunEndEvent):
            self.end_reason = event.end_reason
        return [self._info(event)]

    def _model(self, event: ModelCallEvent) -> ModelEvent:
        request = event.request
        model = self.start.models.get(event.role, event.role)
        if event.role == "planner":
            self.planner = event
        if event.response is not None:  # every response's tokens (the summary's logical ones)
            self._count(event.role, event.response.usage)
        notes: dict[str, Any] = {
            "turn": event.turn,
            "call_index": event.call_index,
            "draw": request.draw,
        }
        if request.json_schema is not None:
            notes["json_schema"] = request.json_schema
        latency = event.response.latency_s if event.response is not None else None
        return ModelEvent(
            model=model,
            role=event.role,
            input=[self._message(m) for m in request.messages],
            tools=[self._tool_info(t) for t in request.tools],
            tool_choice=msg.tool_choice(request.tool_choice),
            config=msg.generate_config(request),
            output=msg.output(event, model),
            error=event.error,
            working_time=latency,
            metadata={k: v for k, v in notes.items() if v is not None},
            **self._base(event.t),
        )

    def _count(self, role: str, used: Usage) -> None:
        total = self.usage.get(role, Usage())
        self.usage[role] = Usage(
            input_tokens=total.input_tokens + used.input_tokens,
            output_tokens=total.output_tokens + used.output_tokens,
            cached_tokens=total.cached_tokens + used.cached_tokens,
        )

    def _tool(self, event: PrimitiveCallEvent) -> ToolEvent:
        call = event.call
        error = ToolCallError("unknown", call.result.text) if call.result.is_error else None
        notes = {
            "block_id": call.block_id,
            "operation": call.operation,
            "requested": call.requested,
            "notice": call.notice,
        }
        return ToolEvent(
            id=call_id(call.call_index),
            function=call.tool,
            arguments=call.arguments,
            result=call.result.text,
            error=error,
            completed=stamp(call.started_at + call.elapsed_ms / 1000),
            working_time=call.elapsed_ms / 1000,
            metadata={k: v for k, v in notes.items() if v is not None},
            timestamp=stamp(call.started_at),
            working_start=max(0.0, call.started_at - self.t0),
        )

    def _approval(self, event: RealizedOperationEvent) -> list[InspectEvent]:
        index = event.call_index
        boundary = self.boundaries.get(index)
        function = boundary.tool if boundary is not None else ""
        pending = ToolCall(
            id=call_id(index),
            function=function,
            arguments=dict(boundary.arguments) if boundary is not None else {},
        )
        kind = event.operation.kind
        decision, modified, explanation = self._decision(event, pending)
        proposal = self.proposals.get(index)
        validation = self.validations.get(index)
        notes: dict[str, Any] = {
            "operation": kind,
            "granted": Scope(event.granted).name.lower(),
            "fallback": event.fallback,
            "block_id": event.block_id,
            "draw": self.draws.get(index, 0),
            "latency_s": event.latency_s,
            "model_called": event.model_called,
        }
        if proposal is not None:
            notes["proposed"] = {"raw": proposal.raw, "reviewer": proposal.reviewer}
            if proposal.operation is not None:
                notes["proposed"]["operation"] = proposal.operation.model_dump(mode="json")
        if validation is not None and not validation.validation.accepted:
            notes["refused"] = validation.validation.model_dump(mode="json")
        if proposal is not None:
            approver = f"reviewer:{proposal.reviewer}"
        else:  # no proposal: a granted Keep answered without asking, or no answer came
            approver = "reviewer:model" if event.model_called else "granted_keep"
        approval = ApprovalEvent(
            message=f"{kind} at call {index} ({function}) under scope {notes['granted']}",
            call=pending,
            approver=approver,
            decision=decision,
            modified=modified,
            explanation=explanation,
            metadata=notes,
            **self._base(event.t),
        )
        if event.fallback is not None or not operation_spec(kind).cancels:
            return [approval]
        code = event.model_dump(mode="json")["operation"].get("code", "")
        data = {"call_index": index, "block_id": event.block_id, "code": code}
        return [approval, InfoEvent(source=kind, data=data, **self._base(event.t))]

    def _decision(
        self, event: RealizedOperationEvent, pending: ToolCall
    ) -> tuple[Any, ToolCall | None, str | None]:
        """(Inspect decision, the modified call, explanation) of a realized operation."""
        kind = event.operation.kind
        spec = operation_spec(kind)
        if event.fallback is not None:
            return "approve", None, f"fallback {event.fallback}: the reviewer's answer was not used"
        if spec.payload == "none":
            return "approve", None, None
        if spec.cancels:
            return "reject", None, f"{kind}: the pending call was not made; new code runs instead"
        made = self.calls.get(event.call_index)
        if made is not None:
            arguments = dict(made.call.arguments)
        else:  # the call was not made (a budget or the run's end came first)
            patch = event.model_dump(mode="json")["operation"].get("arguments", {})
            arguments = {**pending.arguments, **patch}
        modified = ToolCall(id=pending.id, function=pending.function, arguments=arguments)
        return "modify", modified, f"{kind}: the call was made with the modified arguments"

    def _limit(self, event: BudgetEvent) -> SampleLimitEvent:
        kind = _LIMITS.get(event.budget, "custom")
        text = f"budget {event.budget} reached ({event.value:g} of {event.limit:g})"
        self.limit = EvalSampleLimit(type=kind, limit=event.limit, reason=text)
        return SampleLimitEvent(type=kind, message=text, limit=event.limit, **self._base(event.t))

    def _score(self, event: FinalVerdictEvent) -> ScoreEvent:
        checks = [c.model_dump(mode="json") for c in event.verdict.checks]
        lines = [f"{c['name']}: {'pass' if c['passed'] else 'fail'} {c['reason']}" for c in checks]
        self.score = Score(
            value=CORRECT if event.success else INCORRECT,
            explanation="\n".join(line.strip() for line in lines),
            metadata={"checks": checks, "end_reason": event.end_reason},
        )
        return ScoreEvent(score=self.score, scorer="verifier", **self._base(event.t))

    def messages(self) -> tuple[list[ChatMessage], ModelOutput]:
        """The planner's conversation as its last request and answer left it, and that answer."""
        last = self.planner
        if last is None:
            return [], ModelOutput()
        model = self.start.models.get("planner", "planner")
        chat = [self._message(m) for m in last.request.messages]
        if last.response is not None:
            chat.append(msg.assistant(last.response, model))
        return chat, msg.output(last, model)

    def metadata(self) -> dict[str, Any]:
        """The sample's condition and the unit's pairing keys (task, seed, source, draw)."""
        start = self.start
        scope = Scope(start.scope).name.lower()
        planned = self.planned
        source = planned.source_program if planned else start.config.get("source_program")
        draw = planned.draw if planned else start.config.get("draw", 0)
        unit = planned.unit if planned else f"{start.task.id}/s{start.seed}/p{source}"
        return {
            "condition": scope,
            "scope": scope,
            "schedule": start.schedule,
            "view": start.view,
            "lattice": start.lattice,
            "task": start.task.id,
            "category": start.task.category,
            "seed": start.seed,
            "source_program": source,
            "draw": draw,
            "unit": unit,
            "run": self.sample_id,
            "models": dict(start.models),
        }

    def sample(self) -> EvalSample:
        """The run as one sample (epoch 1)."""
        events = self.convert()
        chat, answer = self.messages()
        roles = {role: msg.usage(used) for role, used in self.usage.items()}
        end = self.events[-1].t
        meta = self.metadata() | {"end_reason": self.end_reason, "success": self.success}
        return EvalSample(
            id=self.sample_id,
            epoch=1,
            input=self.start.task.instruction,
            target="",
            messages=chat,
            output=answer,
            scores={"verifier": self.score} if self.score is not None else None,
            metadata=meta,
            events=events,
            role_usage=roles,
            model_usage=_model_usage(self.start.models, roles),
            started_at=stamp(self.t0).isoformat(),
            completed_at=stamp(end).isoformat(),
            total_time=max(0.0, end - self.t0),
            limit=self.limit,
            error=_unfinished(self.events),
        )


def _unfinished(events: list[Event]) -> EvalError | None:
    """The sample's error when the log has no ``run_end``: the run was killed (or is still
    running), so its events stop where the process did."""
    if any(isinstance(e, RunEndEvent) for e in events):
        return None
    last = events[-1].seq
    message = f"the log has no run_end (the run was killed or is still running); last seq {last}"
    return EvalError(message=message, traceback="", traceback_ansi="")


def _model_usage(models: dict[str, str], roles: dict[str, ModelUsage]) -> dict[str, ModelUsage]:
    """Usage per model id (a model serving both roles adds up)."""
    out: dict[str, ModelUsage] = {}
    for role, used in roles.items():
        name = models.get(role, role)
        out[name] = out[name] + used if name in out else used
    return out
