"""The condition one trajectory runs under: what the paper compares across branches and panels.

A condition fixes the granted scope and its lattice (so the granted operation set), the
schedule, the reviewer's view and its bounds, the replacement boundary, how the planner and the
reviewer answer, the sampling settings of each role, the source-program index and the budgets
(paper sections 3.1, 3.2, 4 and A.1-A.5). It is written whole into the log's ``run_start``
event, so a recorded run says exactly what it was; :func:`controlscope.run.prepare` resolves
one from a run spec. Its settings are the recorded sections of :mod:`controlscope.core`'s run
settings (each declared once there); the fields below are the record's own.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from controlscope.core._operations import OperationSet, lattice_operations
from controlscope.core._protocols import (
    APP_PROTOCOLS,
    REVIEWER_PROTOCOLS,
    AppProtocol,
    app_protocol_conflict,
)
from controlscope.core._settings import (
    ConditionSettings,
    ExecutionOptions,
    PlannerSampling,
    ReviewerSampling,
    RunIndex,
    RunLimits,
    ViewLimits,
)
from controlscope.core._tasks import TaskBudgets

Role = Literal["planner", "reviewer"]
"""A model's role in a run."""

ReviewFallback = Literal["keep", "plan_error"]
"""What a review that falls back does (paper section 4): the pending call is kept (``keep``,
paper A.4; the MCP environments and ALFWorld's reasoning reviewers), or the plan ends with a
plan error that ordinary recovery handles (``plan_error``, ALFWorld's fast reviewers)."""

BlockAllowance = Literal["renew", "shared"]
"""What a replacement gets of its block's allowance of API requests: a new one (``renew``, the
V1 protocol: "starts a new 250-request block allowance") or what is left (``shared``, V2)."""

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


class Condition(  # the bases last to first: pydantic puts the last base's fields first
    ExecutionOptions, RunLimits, ReviewerSampling, PlannerSampling, RunIndex, ConditionSettings
):
    """The condition a task runs under (recorded in ``run_start``): the recorded run settings
    (:class:`~controlscope.core.ConditionSettings`, :class:`~controlscope.core.RunIndex`,
    :class:`~controlscope.core.PlannerSampling`, :class:`~controlscope.core.ReviewerSampling`,
    :class:`~controlscope.core.RunLimits`, :class:`~controlscope.core.ExecutionOptions`: each
    field's description says what it is) as they were resolved, and what the record adds.

    Attributes:
        view_limits: the bounds of a bounded view; None shows the complete public state (the
            paper's ``h``, section 3.1).
        source: where a one-time review's boundary came from, when a recorded source run
            placed it.
        budgets: primitive calls, planning turns and execution seconds (paper section 4).
        review_fallback: what a review that falls back does: ``keep`` (paper A.4) or
            ``plan_error`` (the plan ends; ordinary recovery handles it).
        block_allowance: what a replacement gets of its block's allowance of requests
            (``budgets.block_requests``): ``renew`` or ``shared`` (paper A.2).
        runtime_guard: whether the private-runtime guard refuses blocks that reach for the
            runtime's private state (the V2 protocol, paper A.2).
        operations: the granted operation set (``scope`` read in ``lattice``).

    Raises:
        pydantic.ValidationError: a value out of its range (a negative temperature, draw or
            budget, a token cap below 1, a value above its ceiling such as :data:`MAX_TOKENS`
            or :data:`MAX_WORKER_MEMORY_MB`, a non-finite number), a scope the lattice does
            not have, or a reviewer protocol whose settings the condition does not have.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    view_limits: ViewLimits | None = None
    source: SourceBoundary | None = None
    budgets: TaskBudgets = Field(default_factory=TaskBudgets)
    review_fallback: ReviewFallback = "keep"
    block_allowance: BlockAllowance = "shared"
    runtime_guard: bool = False

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
