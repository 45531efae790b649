"""The condition one trajectory runs under: what the paper compares across branches and panels.

A condition fixes the granted scope and its lattice (so the granted operation set), the
schedule, the reviewer's view and its bounds, the replacement boundary, how the planner and the
reviewer answer, the sampling settings of each role, the source-program index and the budgets
(paper sections 3.1, 3.2, 4 and A.1-A.5). It is written whole into the log's ``run_start``
event, so a recorded run says exactly what it was; :class:`controlscope.run.RunSpec` resolves
one from user options.
"""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field, model_validator

from controlscope.core._ceilings import (
    DrawIndex,
    Seconds,
    SourceIndex,
    Temperature,
    TokenCap,
    WorkerMemoryMb,
)
from controlscope.core._execution import ReplaceBoundary, View
from controlscope.core._models import DEFAULT_MAX_TOKENS
from controlscope.core._operations import (
    Lattice,
    OperationSet,
    Scope,
    ScopeName,
    lattice_operations,
)
from controlscope.core._tasks import TaskBudgets

PlannerFormat = Literal["tools", "fenced"]
"""How the planner emits a block: a native ``execute_python`` tool call (several in one reply
are queued blocks), or one fenced ```python block per reply (for models without tool calling)."""

PLANNER_FORMATS: tuple[PlannerFormat, ...] = get_args(PlannerFormat)
"""Every planner format."""

DecisionMode = Literal["tools", "json"]
"""How the reviewer answers: one call of a native operation tool, or one JSON decision object
decoded under a schema (paper A.3: both carry the same operation schema)."""

DECISION_MODES: tuple[DecisionMode, ...] = get_args(DecisionMode)
"""Every decision mode."""

IsolationRequest = Literal["auto", "bwrap", "none"]
"""The worker isolation asked for: ``auto`` (bubblewrap when it works, else none, loudly),
``bwrap`` (required) or ``none``."""

ReviewToolChoice = Literal["auto", "required"]
"""The reviewer's tool choice in the ``tools`` decision mode: ``auto`` (the paper's matched
configurations) or ``required`` (its fast reviewers, section 4 and 5.1)."""

Role = Literal["planner", "reviewer"]
"""A model's role in a run."""

ReviewFallback = Literal["keep", "plan_error"]
"""What a review that falls back does (paper section 4): the pending call is kept (``keep``,
paper A.4; the MCP environments and ALFWorld's reasoning reviewers), or the plan ends with a
plan error that ordinary recovery handles (``plan_error``, ALFWorld's fast reviewers)."""

ReviewerProtocol = Literal["fast", "reasoning"]
"""The paper's two ALFWorld reviewer protocols (sections 4 and 5.2, appendix C.3)."""

REVIEWER_PROTOCOLS: dict[ReviewerProtocol, dict[str, Any]] = {
    "fast": {
        "reviewer_tool_choice": "required",
        "reviewer_max_tokens": 8192,
        "review_fallback": "plan_error",
    },
    "reasoning": {
        "reviewer_tool_choice": "auto",
        "reviewer_max_tokens": 16384,
        "review_fallback": "keep",
    },
}
"""What each reviewer protocol fixes: fast reviewers make a required tool call under an
8,192-token cap, and a malformed review becomes a plan error handled by ordinary recovery;
reasoning reviewers choose tools automatically under a 16,384-token cap and Keep after an
invalid review (paper section 4)."""


AppProtocol = Literal["v1", "v2"]
"""The paper's two app-environment protocols (section 5.3, appendix A.2)."""

BlockAllowance = Literal["renew", "shared"]
"""What a replacement gets of its block's allowance of API requests: a new one (``renew``, the
V1 protocol: "starts a new 250-request block allowance") or what is left (``shared``, V2)."""

APP_BLOCKS = 40
"""Natural blocks per task under the app protocols (paper section 4, A.2)."""

APP_BLOCK_REQUESTS = 250
"""API requests per natural block under the app protocols (paper section 4, A.2)."""

APP_PROTOCOLS: dict[AppProtocol, dict[str, Any]] = {
    "v1": {
        "lattice": "default",
        "schedule": "per_block",
        "replace_boundary": "block",
        "block_allowance": "renew",
        "runtime_guard": False,
    },
    "v2": {
        "lattice": "v2",
        "replace_boundary": "block",
        "block_allowance": "shared",
        "runtime_guard": True,
    },
}
"""What each app protocol fixes (paper A.2). V1: one review per natural block, Keep ⊂ Arg ⊂
Full, a Full replacement edits the unfinished current block and starts a new allowance (its
``schedule`` is the default a run spec takes; a branch or a one-time review places its own).
V2: the
replacement shares the block's remaining allowance, Params (coordinated data editing) is granted
and Full includes it, and a private-runtime guard refuses code that reaches for the runtime's
private state; its schedule is the panel's (the paper's V2 diagnostic is local). Both cap a task
at :data:`APP_BLOCKS` natural blocks of :data:`APP_BLOCK_REQUESTS` requests (the budgets'
``blocks`` and ``block_requests``)."""


PROTOCOL_DEFAULTED = ("lattice", "schedule", "replace_boundary")
"""The settings an app protocol gives a run spec or a panel that leaves them out."""


def app_protocol_defaults(data: Any) -> Any:
    """``data`` (a run spec's or panel's fields) with the settings its ``app_protocol`` fixes
    filled in where it leaves them out (:data:`PROTOCOL_DEFAULTED`); other data unchanged.
    A stated setting is kept (and checked against the protocol by the model's own checks)."""
    if not isinstance(data, dict) or data.get("app_protocol") not in APP_PROTOCOLS:
        return data
    fixed = APP_PROTOCOLS[data["app_protocol"]]
    filled = dict(data)
    for name in PROTOCOL_DEFAULTED:
        if name in fixed and filled.get(name) is None:
            filled[name] = fixed[name]
    return filled


def app_protocol_conflict(protocol: AppProtocol, **settings: Any) -> str | None:
    """The first of ``settings`` (lattice, replace_boundary...) that contradicts ``protocol``,
    in words; None when none does (the schedule is only a default)."""
    for name, value in settings.items():
        fixed = APP_PROTOCOLS[protocol].get(name)
        if name != "schedule" and fixed is not None and value != fixed:
            return f"the {protocol} app protocol has {name} {fixed!r}, not {value!r}"
    return None


class ViewLimits(BaseModel):
    """Character bounds of a *bounded* review view (about 4 characters per token).

    The paper's reviewer sees the complete public record ``h`` (section 3.1); a bounded view is
    our option for models with small contexts (the embedded 1.5B model has 8,192 tokens). Every
    cut is marked in the view, and the bounds in force are recorded in ``run_start`` as part of
    the condition (``Condition.view_limits``; None there means the complete state).

    Attributes:
        history_chars: all history messages together (the first message, with the goal, and
            the newest are kept).
        message_chars: one history message.
        code_chars: one block's code.
        queued_chars: all queued blocks together.
        observation_chars: one observation or tool message.
        block_calls: observations shown from the running block (newest kept).
        output_chars: printed output (its end is kept).
        variables_chars: all variables together.
        value_chars: one variable's value.
        decisions: earlier decisions shown (newest kept).
        description_chars: one tool's documentation (cut to its first sentence as well).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    history_chars: int = Field(default=4000, ge=1)
    message_chars: int = Field(default=1200, ge=1)
    code_chars: int = Field(default=4000, ge=1)
    queued_chars: int = Field(default=2000, ge=1)
    observation_chars: int = Field(default=600, ge=1)
    block_calls: int = Field(default=6, ge=1)
    output_chars: int = Field(default=1000, ge=1)
    variables_chars: int = Field(default=1500, ge=1)
    value_chars: int = Field(default=200, ge=1)
    decisions: int = Field(default=8, ge=1)
    description_chars: int = Field(default=160, ge=1)


SourceRule = Literal["local", "midpoint", "feedback"]
"""How a one-time review's boundary was placed from a recorded source trajectory: the paper's
local rule (appendix B), the source-trajectory midpoint (B.1) or the feedback-visibility rule
(A.3: the first same-block boundary after an information-returning call)."""


class SourceBoundary(BaseModel):
    """A one-time review's boundary, chosen from a recorded source trajectory before the run
    (paper appendix B, B.1 and A.3: "the boundary is fixed before intervention runs").

    Attributes:
        run: the source run's directory, as given.
        rule: ``local``, ``midpoint`` or ``feedback``.
        calls: the source trajectory's primitive calls (N).
        call_index: ``local`` and ``feedback``: the chosen boundary's call index;
            ``midpoint``: floor(N/2), the completed calls before the review.
        block_id: ``local`` and ``feedback``: the source block whose boundary was chosen
            (empty for midpoint).
        read_fallback: ``local``: True when no multi-call writer block had a supported
            boundary and the rule fell back to a read block.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    run: str
    rule: SourceRule
    calls: int = Field(ge=0)
    call_index: int = Field(ge=0)
    block_id: str = ""
    read_fallback: bool = False


class Condition(BaseModel):
    """The condition a task runs under (recorded in ``run_start``).

    Attributes:
        scope: the granted scope (paper section 3.1).
        lattice: the lattice the scope is read in (``default`` or ``v2``, paper 3.1 and A.2).
        schedule: the schedule's canonical spec (``never``, ``continuous``, ``every_boundary``,
            ``per_block``, ``once:K``, ``once_online``, ``midpoint:N``, ``protect:n``,
            ``retain_first``; see :func:`controlscope.schedule.parse_schedule`).
        view: the reviewer's view of the public state (paper A.3).
        view_limits: the bounds of a bounded view; None shows the complete public state (the
            paper's ``h``, section 3.1).
        replace_boundary: what a replacement replaces: the rest of the block or of the reply
            (paper A.1).
        planner_format: how the planner emits blocks.
        review_mode: how the reviewer answers.
        reviewer_tool_choice: the reviewer's tool choice in the ``tools`` mode (paper 4).
        temperature: the reviewer's sampling temperature, and the planner's unless
            ``planner_temperature`` is set (paper section 4: 0.7).
        planner_temperature: the planner's temperature apart (source programs are sampled at
            0.7 in the paper); None: ``temperature``.
        max_tokens: per-request output cap in tokens (paper section 4: 16,384).
        reviewer_max_tokens: the reviewer's cap apart (the paper's ALFWorld fast reviewers use
            8,192); None: ``max_tokens``.
        planner_options: provider options passed through with every planner request.
        reviewer_options: provider options passed through with every review request (e.g. a
            reasoning mode, paper section 4).
        draw: the reviewer draw index (separately sampled reviews never share a cache entry).
        source_program: the source-program index (the paper's P1 = 0, P2 = 1, section 4): the
            planner requests' draw, so independent source programs never share a cache entry.
        source: where a one-time review's boundary came from, when a recorded source run
            placed it.
        budgets: primitive calls, planning turns and execution seconds (paper section 4).
        block_exec_s: execution seconds one block may run before its worker is killed; None
            (the default) sets no per-block limit: the task's execution budget governs (the
            paper has no per-block limit).
        request_timeout_s: seconds one model call may take, all of it counted (every attempt,
            the waits between them and the whole answer); None: each model's own limit (600 s
            for the local and OpenAI-compatible models). Never past the run's wall-clock ceiling.
        isolation: the worker isolation asked for.
        operations: the granted operation set (``scope`` read in ``lattice``).
        worker_memory_mb: the worker's whole memory in MiB (address space, ``/tmp`` and
            ``/dev/shm``; see ``controlscope.worker.Limits``).
        review_fallback: what a review that falls back does: ``keep`` (paper A.4) or
            ``plan_error`` (the plan ends; ordinary recovery handles it).
        reviewer_protocol: the reviewer protocol the settings follow (:data:`REVIEWER_PROTOCOLS`),
            recorded; None when the settings were chosen one by one.
        block_allowance: what a replacement gets of its block's allowance of requests
            (``budgets.block_requests``): ``renew`` or ``shared`` (paper A.2).
        runtime_guard: whether the private-runtime guard refuses blocks that reach for the
            runtime's private state (the V2 protocol, paper A.2).
        app_protocol: the app protocol the settings follow (:data:`APP_PROTOCOLS`), recorded;
            None when they were chosen one by one.

    Raises:
        pydantic.ValidationError: a value out of its range (a negative temperature, draw or
            budget, a token cap below 1, a value above its ceiling such as :data:`MAX_TOKENS`
            or :data:`MAX_WORKER_MEMORY_MB`, a non-finite number), a scope the lattice does
            not have, or a reviewer protocol whose settings the condition does not have.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    scope: ScopeName = Scope.FULL
    lattice: Lattice = "default"
    schedule: str = "continuous"
    view: View = "with_feedback"
    view_limits: ViewLimits | None = None
    replace_boundary: ReplaceBoundary = "reply"
    planner_format: PlannerFormat = "tools"
    review_mode: DecisionMode = "tools"
    reviewer_tool_choice: ReviewToolChoice = "auto"
    temperature: Temperature = 0.7
    planner_temperature: Temperature | None = None
    max_tokens: TokenCap = DEFAULT_MAX_TOKENS
    reviewer_max_tokens: TokenCap | None = None
    planner_options: dict[str, Any] = Field(default_factory=dict)
    reviewer_options: dict[str, Any] = Field(default_factory=dict)
    draw: DrawIndex = 0
    source_program: SourceIndex = 0
    source: SourceBoundary | None = None
    budgets: TaskBudgets = Field(default_factory=TaskBudgets)
    block_exec_s: Seconds | None = None
    request_timeout_s: Seconds | None = None
    isolation: IsolationRequest = "auto"
    worker_memory_mb: WorkerMemoryMb = 2048
    review_fallback: ReviewFallback = "keep"
    reviewer_protocol: ReviewerProtocol | None = None
    block_allowance: BlockAllowance = "shared"
    runtime_guard: bool = False
    app_protocol: AppProtocol | None = None

    @model_validator(mode="after")
    def _scope_in_lattice(self) -> Condition:
        lattice_operations(self.scope, self.lattice)  # raises for Params outside v2
        if self.reviewer_protocol is not None:
            for name, value in REVIEWER_PROTOCOLS[self.reviewer_protocol].items():
                if getattr(self, name) != value:
                    raise ValueError(
                        f"the {self.reviewer_protocol} reviewer protocol has {name}={value!r}, "
                        f"not {getattr(self, name)!r}"
                    )
        if self.app_protocol is not None:
            self._follows_app_protocol(self.app_protocol)
        return self

    def _follows_app_protocol(self, protocol: AppProtocol) -> None:
        """Raise ValueError when a setting contradicts the app protocol or its caps are unset."""
        conflict = app_protocol_conflict(
            protocol, **{name: getattr(self, name) for name in APP_PROTOCOLS[protocol]}
        )
        if conflict is not None:
            raise ValueError(conflict)
        if self.budgets.blocks is None or self.budgets.block_requests is None:
            raise ValueError(
                f"the {protocol} app protocol caps blocks per task and requests per block; "
                "the budgets set neither"
            )

    @property
    def operations(self) -> OperationSet:
        """The granted operation set: ``scope`` read in ``lattice`` (paper 3.1, A.2)."""
        return OperationSet.of(self.scope, self.lattice)

    def temperature_for(self, role: Role) -> float:
        """The sampling temperature of ``role``'s requests."""
        if role == "planner" and self.planner_temperature is not None:
            return self.planner_temperature
        return self.temperature

    def max_tokens_for(self, role: Role) -> int:
        """The per-request token cap of ``role``'s requests."""
        if role == "reviewer" and self.reviewer_max_tokens is not None:
            return self.reviewer_max_tokens
        return self.max_tokens
