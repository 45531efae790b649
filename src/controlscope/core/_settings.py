"""The run settings, each declared once: its type, default, range and one-sentence description.

A setting is a field of one of the sections below, grouped by where a panel file puts it and
whether the condition records it. Everything that configures a run is made of these sections:
:class:`RunSettings` (all of them: what ``controlscope run``'s options, a panel's keys and
:class:`~controlscope.run.RunSpec` set), :class:`~controlscope.core.Condition` (the recorded
ones), the panel file's sections (``controlscope.panel``) and the command line's options, which
are generated from the fields (their names, types, descriptions, defaults and ranges; the ranges
come from the annotated types of :mod:`controlscope.core`'s ceilings).

A request (:class:`RunSettings`, a run spec, a panel section) tells a *stated* setting from one
left to its default: :meth:`Requested.stated` reads pydantic's ``model_fields_set``. Nine
settings are *resolved* when nobody states them: from a replayed recording, else by the models
(``resolved="model"``: the embedded model plans in fenced code, reviews in JSON, with 1,024
tokens) or as the recorded default (``resolved="recording"``);
:func:`controlscope.run.prepare` decides them, and its condition holds what runs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, cast, get_args

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from controlscope.core._ceilings import (
    BlockBudget,
    BlockRequests,
    CallBudget,
    Connections,
    DrawIndex,
    Repairs,
    Seconds,
    SourceIndex,
    Temperature,
    TokenCap,
    TurnBudget,
    WorkerMemoryMb,
)
from controlscope.core._execution import ReplaceBoundary, View
from controlscope.core._model_spec import MODEL_SPEC_FORMS
from controlscope.core._models import DEFAULT_MAX_TOKENS
from controlscope.core._operations import Lattice, Scope, ScopeName, lattice_operations
from controlscope.core._protocols import (
    REVIEWER_PROTOCOLS,
    AppProtocol,
    ReviewerProtocol,
    app_protocol_conflict,
    app_protocol_defaults,
)

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

ViewBounds = Literal["complete", "bounded"]
"""How much of the public state a review shows: all of it (the paper's ``h``) or a bounded
view (:class:`~controlscope.core.ViewLimits`) for small contexts."""


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


Resolver = Literal["model", "recording"]
"""Who decides a setting nobody states: a replayed recording (its value), else the models' kind
(``model``: the embedded model's formats and token cap) or the recorded default
(``recording``)."""

REQUEST_SETTINGS = (
    "planner_format",
    "review_mode",
    "reviewer_tool_choice",
    "max_tokens",
    "reviewer_max_tokens",
    "temperature",
    "planner_temperature",
    "planner_options",
    "reviewer_options",
    "draw",
    "source_program",
)
"""The settings that shape model requests (a replay repeats its recording's unless stated)."""


@dataclass(frozen=True)
class SettingInfo:
    """What a setting's field declares besides its type, default and description.

    Attributes:
        key: its key in a panel file's section when that is not its name (``[planner]
            format`` is ``planner_format``); None when it is its name.
        resolved: who decides it when nobody states it (:data:`Resolver`); None: its default.
        since: the panel file format its key appeared in (1: the first); a newer key is left
            out of a panel's ``panel.json`` and identity while it holds its default, so panels
            and experiments written before it resume.
        shown_default: the default in words where the value alone would mislead (``per
            model``, ``the task's (100)``); None: the default itself.
    """

    key: str | None = None
    resolved: Resolver | None = None
    since: int = 1
    shown_default: str | None = None


def setting(
    default: Any = PydanticUndefined,
    description: str = "",
    *,
    key: str | None = None,
    resolved: Resolver | None = None,
    since: int = 1,
    shown_default: str | None = None,
    default_factory: Callable[[], Any] | None = None,
) -> Any:
    """A run setting's field: pydantic's ``Field`` with the description and the
    :class:`SettingInfo` (read back with :func:`setting_info`). Its range is its annotated
    type's (``TokenCap``, ``Seconds``...).

    Args:
        default: the default (the recorded one, for a resolved setting).
        description: one sentence: the command line's help, the panel documentation and the
            docstring at once.
        key: its panel key when that is not its name.
        resolved: who decides it when nobody states it.
        since: the panel file format its key appeared in.
        shown_default: the default in words, for the help.
        default_factory: a factory in place of ``default`` (a dict).

    Returns:
        The field (a ``FieldInfo``, typed ``Any`` so it can be a class attribute's value).
    """
    info = SettingInfo(key=key, resolved=resolved, since=since, shown_default=shown_default)
    extra: dict[str, Any] = {"setting": info.__dict__}
    if default_factory is not None:
        return Field(
            default_factory=default_factory, description=description, json_schema_extra=extra
        )
    return Field(default, description=description, json_schema_extra=extra)


def setting_info(field: FieldInfo) -> SettingInfo:
    """The :class:`SettingInfo` of a field :func:`setting` made (a plain one for any other)."""
    extra = field.json_schema_extra
    found = extra.get("setting") if isinstance(extra, dict) else None
    return (
        SettingInfo(**cast("dict[str, Any]", found)) if isinstance(found, dict) else SettingInfo()
    )


class Section(BaseModel):
    """A group of run settings (frozen; an unknown key is refused).

    Attributes:
        group: the title of its options in ``controlscope run --help`` (a class constant).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    group: ClassVar[str] = "settings"


class ConditionSettings(Section):
    """The condition every run of a panel shares (the panel file's top level; recorded)."""

    group: ClassVar[str] = "condition"
    lattice: Lattice = setting(
        "default",
        "the lattice the scope is read in: default (Keep < Arg < Full, paper 3.1) or v2 "
        "(Keep < Arg < Params < Full, A.2)",
        shown_default="the default lattice (v2 under app protocol v2)",
    )
    schedule: str = setting(
        "continuous",
        "when to review (forms joined with +); a bare once or midpoint is placed from a source "
        "run; stored in canonical form",
        shown_default="continuous (per_block under app protocol v1)",
    )
    replace_boundary: ReplaceBoundary = setting(
        "reply",
        "what a replacement replaces: the rest of the block or of the reply (paper A.1)",
        shown_default="reply (block under an app protocol)",
    )
    app_protocol: AppProtocol | None = setting(
        None,
        "an app protocol (paper A.2): v1 reviews per natural block and a Full replacement "
        "renews the block's allowance; v2 shares it, grants Params and guards the private "
        "runtime; both cap blocks and requests per block; recorded",
        shown_default="none",
    )


class RunIndex(Section):
    """Which run of a panel's unit this is (the panel sets them per run; recorded)."""

    group: ClassVar[str] = "condition"
    scope: ScopeName = setting(
        Scope.FULL, "the granted scope (paper 3.1); params exists only under lattice v2"
    )
    draw: DrawIndex = setting(
        0,
        "the reviewer draw index: separately sampled reviews never share a cache entry",
        resolved="recording",
    )
    source_program: SourceIndex = setting(
        0,
        "the source-program index (P1 = 0, P2 = 1; paper 4): the planner requests' draw",
        resolved="recording",
    )


class PlannerModel(Section):
    """The planner's model (a panel's ``[planner]``; not recorded in the condition)."""

    group: ClassVar[str] = "planner"
    model: str = setting("local", f"the planner's model: {MODEL_SPEC_FORMS}")
    base_url: str | None = setting(
        None,
        "the OpenAI-compatible endpoint of openai specs (http or https, naming a host)",
        shown_default="OPENAI_BASE_URL",
    )


class SourceProgramFile(Section):
    """A frozen source program (not a panel section's key: a panel names one per task with
    its top-level ``source``; ``run_start`` records the program's SHA-256, not the
    condition)."""

    group: ClassVar[str] = "planner"
    source: Path | None = setting(
        None,
        "a frozen source program: a Python file whose code is the planner's first reply in "
        "place of a sampled one (paper 5 holds P1 and P2 fixed); its SHA-256 is recorded",
        shown_default="none: the planner samples it",
    )


class EndpointOptions(Section):
    """How many requests a panel keeps in flight to its served endpoint (a panel's
    ``[planner]``; not a run setting: it bounds the panel's runs together, and is not
    recorded in the condition)."""

    group: ClassVar[str] = "planner"
    max_connections: Connections = setting(
        16,
        "requests a panel keeps in flight at once to the served endpoint (both roles "
        "together); its runs at a time follow from it, not from the machine's cores",
        since=2,
    )


class PlannerSampling(Section):
    """How the planner is asked (a panel's ``[planner]``; recorded)."""

    group: ClassVar[str] = "planner"
    planner_format: PlannerFormat = setting(
        "tools",
        "how the planner emits a block: a native tool call, or one fenced python block per reply",
        key="format",
        resolved="model",
        shown_default="fenced for local models, tools otherwise",
    )
    planner_temperature: Temperature | None = setting(
        None,
        "the planner's own sampling temperature (source programs are sampled at 0.7, paper 4)",
        key="temperature",
        shown_default="temperature",
    )
    max_tokens: TokenCap = setting(
        DEFAULT_MAX_TOKENS,
        "the per-request output cap in tokens (paper 4: 16,384), the reviewer's too unless "
        "reviewer_max_tokens is set",
        resolved="model",
        shown_default="16,384; 1,024 for local models",
    )
    planner_options: dict[str, Any] = setting(
        description="provider options sent with every planner request",
        key="options",
        resolved="recording",
        default_factory=dict,
        shown_default="none",
    )


class ReviewerModel(Section):
    """The reviewer's model and how much it is shown (a panel's ``[reviewer]``; not
    recorded as such: the condition records the view's bounds)."""

    group: ClassVar[str] = "reviewer"
    reviewer_model: str | None = setting(
        None, "the reviewer's model (same forms)", key="model", shown_default="the planner's"
    )
    view_bounds: ViewBounds | None = setting(
        None,
        "how much of the public state a review shows: complete (paper 3.1) or bounded for "
        "small contexts",
        shown_default="bounded for a local reviewer, complete otherwise (a replay: the "
        "recording's)",
    )


class ReviewerSampling(Section):
    """How the reviewer is asked and what it sees (a panel's ``[reviewer]``; recorded)."""

    group: ClassVar[str] = "reviewer"
    review_mode: DecisionMode = setting(
        "tools",
        "how the reviewer answers: one operation tool call or one JSON decision (paper A.3)",
        key="mode",
        resolved="model",
        shown_default="json for local models, tools otherwise",
    )
    reviewer_tool_choice: ReviewToolChoice = setting(
        "auto",
        "the reviewer's tool choice in the tools mode (paper 4)",
        key="tool_choice",
        resolved="recording",
    )
    reviewer_protocol: ReviewerProtocol | None = setting(
        None,
        "a reviewer protocol (paper 4, ALFWorld): fast (a required tool, 8,192 tokens, an "
        "invalid review is a plan error) or reasoning (auto, 16,384 tokens, Keep); recorded",
        key="protocol",
        shown_default="none",
    )
    temperature: Temperature = setting(
        0.7,
        "the reviewer's sampling temperature, the planner's too unless planner_temperature is "
        "set (paper 4)",
        resolved="recording",
    )
    reviewer_max_tokens: TokenCap | None = setting(
        None, "the reviewer's per-request cap apart", key="max_tokens", shown_default="max_tokens"
    )
    reviewer_options: dict[str, Any] = setting(
        description="provider options sent with every review request (e.g. a reasoning mode)",
        key="options",
        resolved="recording",
        default_factory=dict,
        shown_default="none",
    )
    view: View = setting("with_feedback", "what the reviewer sees (paper A.3)")


ReviewerChoice = Literal["model", "human", "human:browser", "human:terminal"]
"""Who reviews a ``controlscope run``: the reviewer model, or a person at the review page in a
browser (``human`` is ``human:browser``) or at this terminal."""


class HumanReview(Section):
    """Who reviews, and how long a person may take (``controlscope run``,
    :class:`~controlscope.run.RunSpec`, and a panel's ``[reviewer]`` keys ``reviewer`` and
    ``review_timeout_s``: a person at the panel's review page, ``human`` only)."""

    group: ClassVar[str] = "reviewer"
    reviewer: ReviewerChoice = setting(
        "model",
        "who reviews: the reviewer model, or a person in the browser (human, human:browser: "
        "the run prints the review page's address) or at this terminal (human:terminal)",
        since=2,
    )
    review_timeout_s: Seconds | None = setting(
        None,
        "seconds a person may take to decide at a boundary; a decision not made in time is a "
        "recorded timeout fallback (Keep)",
        shown_default="none: the person is waited for, within the run's wall-clock ceiling",
        since=2,
    )

    @model_validator(mode="after")
    def _timeout_for_a_person(self) -> HumanReview:
        if self.review_timeout_s is not None and self.reviewer == "model":
            raise ValueError(
                "review_timeout_s is how long a person may take; it needs reviewer human, "
                "human:browser or human:terminal (a model's requests have request_timeout_s)"
            )
        return self


class BudgetOverrides(Section):
    """The task's budgets a run overrides (a panel's ``[budgets]``; the condition records the
    budgets in force)."""

    group: ClassVar[str] = "budgets"
    max_calls: CallBudget | None = setting(
        None, "the primitive-call budget", shown_default="the task's (100)"
    )
    max_turns: TurnBudget | None = setting(
        None, "the planning-turn budget", shown_default="the task's (100)"
    )
    max_seconds: Seconds | None = setting(
        None, "the execution-seconds budget", shown_default="the task's (1,800)"
    )
    max_repairs: Repairs | None = setting(
        None,
        "ordinary repairs after a failed plan (paper 4)",
        shown_default="the task's (ALFWorld: 5)",
    )
    max_wall_seconds: Seconds | None = setting(
        None,
        "the run's wall-clock ceiling, everything counted (planning, reviews, execution, waits)",
        shown_default="10,800",
    )
    max_blocks: BlockBudget | None = setting(
        None,
        "natural blocks per task",
        shown_default="the task's, else the app protocol's (40), else none",
    )
    max_block_requests: BlockRequests | None = setting(
        None,
        "API requests per natural block",
        shown_default="the task's, else the app protocol's (250), else none",
    )


class RunLimits(Section):
    """Limits on one block, one model call and the worker (a panel's ``[budgets]``;
    recorded)."""

    group: ClassVar[str] = "budgets"
    block_exec_s: Seconds | None = setting(
        None,
        "execution seconds one block may run before its worker is killed",
        shown_default="none: the execution budget governs",
    )
    request_timeout_s: Seconds | None = setting(
        None,
        "seconds one model call may take, every attempt, wait and the whole answer counted",
        since=2,
        shown_default="each model's own (600)",
    )
    worker_memory_mb: WorkerMemoryMb = setting(
        2048, "the worker's whole memory in MiB (address space, /tmp and /dev/shm)"
    )


class ExecutionOptions(Section):
    """How a run's worker executes (a panel's ``[execution]``; recorded)."""

    group: ClassVar[str] = "execution"
    isolation: IsolationRequest = setting(
        "auto",
        "the worker isolation: auto (bubblewrap when it works, else none, loudly), bwrap "
        "(required) or none",
    )


SECTIONS: tuple[type[Section], ...] = (
    ConditionSettings,
    RunIndex,
    PlannerModel,
    PlannerSampling,
    SourceProgramFile,
    ReviewerModel,
    ReviewerSampling,
    HumanReview,
    BudgetOverrides,
    RunLimits,
    ExecutionOptions,
)
"""Every section of run settings, in the order the command line's help shows them."""

PANEL_KEYS: dict[str, str] = {
    name: info.key
    for section in SECTIONS
    for name, field in section.model_fields.items()
    if (info := setting_info(field)).key is not None
}
"""Each setting whose panel key is not its name -> that key (``planner_format`` -> ``format``)."""


def panel_key(name: str) -> str:
    """A setting's key in a panel file's section (the alias generator of those sections).

    Args:
        name: the setting's name.

    Returns:
        ``format`` for ``planner_format``...; the name itself when the key is the name.
    """
    return PANEL_KEYS.get(name, name)


@functools.cache
def _resolved(model: type[BaseModel]) -> dict[str, str]:
    """The resolved settings of ``model``: name -> the key it is given and dumped under."""
    return {
        name: field.alias or name
        for name, field in model.model_fields.items()
        if setting_info(field).resolved is not None
    }


class Requested(Section):
    """Settings as a person states them, telling what they state from what they leave out.

    A setting is *stated* when the data names it (pydantic's ``model_fields_set``). An explicit
    None for a resolved setting (``RunSpec(max_tokens=None)``, ``"format": null`` in a
    ``panel.json``) means "not stated", as does leaving it out; a resolved setting nobody
    stated dumps as None (``model_dump``, ``panel.json``, a panel's identity), while reading it
    gives its recorded default.
    """

    @model_validator(mode="before")
    @classmethod
    def _none_is_not_stated(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        keys = set(_resolved(cls).values()) | set(_resolved(cls))
        return {k: v for k, v in data.items() if not (v is None and k in keys)}

    @model_serializer(mode="wrap")
    def _not_stated_as_none(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        if isinstance(data, dict):
            for name, key in _resolved(type(self)).items():
                if name not in self.model_fields_set:
                    for shown in (key, name):
                        if shown in data:
                            data[shown] = None
                            break
            data = self._dumped(data)
        return data

    def _dumped(self, data: dict[str, Any]) -> dict[str, Any]:
        """``data`` (this request's dump) as it is written; a subclass may leave keys out."""
        return data

    def stated(self) -> dict[str, Any]:
        """The settings this request states (by field name), None values left out.

        Returns:
            Name -> value, in field order.
        """
        return {
            name: getattr(self, name)
            for name in type(self).model_fields
            if name in self.model_fields_set and getattr(self, name) is not None
        }


class RunSettings(  # the bases last to first: pydantic puts the last base's fields first
    Requested,
    ExecutionOptions,
    RunLimits,
    BudgetOverrides,
    HumanReview,
    ReviewerSampling,
    ReviewerModel,
    SourceProgramFile,
    PlannerSampling,
    PlannerModel,
    RunIndex,
    ConditionSettings,
):
    """Every setting of one run: what ``controlscope run``'s options, a panel file's keys and
    :class:`~controlscope.run.RunSpec`'s fields set, each declared once in a section of
    :mod:`controlscope.core` with its type, default, range and description
    (``RunSettings.model_fields[name].description``; ``controlscope run --help`` shows them).

    Reading a setting gives its value, or its default when it is not stated; a resolved one
    (``planner_format``, ``review_mode``, ``max_tokens``, ``reviewer_tool_choice``,
    ``temperature``, ``planner_options``, ``reviewer_options``, ``draw``, ``source_program``)
    is then decided by :func:`controlscope.run.prepare` (by the models or a replayed
    recording), so ``RunSpec(model="local").max_tokens`` reads 16,384 while the run gets
    1,024: ``prepare(spec).condition`` holds what runs, and :meth:`stated_settings` what was
    asked.

    Raises:
        pydantic.ValidationError: a value out of its range or of the wrong form, a blank model
            spec, a scope its lattice does not have, a stated setting that contradicts the app
            or reviewer protocol.
    """

    @model_validator(mode="before")
    @classmethod
    def _protocol_defaults(cls, data: Any) -> Any:
        return app_protocol_defaults(data)

    @field_validator("model", "reviewer_model", "base_url")
    @classmethod
    def _named_model(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("is blank; give a value")
        return value.strip() if value is not None else None

    @model_validator(mode="after")
    def _protocols_agree(self) -> RunSettings:
        lattice_operations(self.scope, self.lattice)  # Params only under v2
        if self.app_protocol is not None:
            conflict = app_protocol_conflict(
                self.app_protocol, lattice=self.lattice, replace_boundary=self.replace_boundary
            )
            if conflict is not None:
                raise ValueError(conflict)
        if self.reviewer_protocol is not None:
            fixed = REVIEWER_PROTOCOLS[self.reviewer_protocol]
            stated = self.stated()
            for name in ("reviewer_tool_choice", "reviewer_max_tokens"):
                if name in stated and stated[name] != fixed[name]:
                    raise ValueError(
                        f"the {self.reviewer_protocol} reviewer protocol has {name} "
                        f"{fixed[name]!r}, not {stated[name]!r}"
                    )
        return self

    def _dumped(self, data: dict[str, Any]) -> dict[str, Any]:
        """Who reviews is left out of the dump unless stated, so a run reviewed by its model
        dumps as before these settings (specs written before them read the same)."""
        for name in HumanReview.model_fields:
            if name not in self.model_fields_set:
                data.pop(name, None)
        return data

    def stated_settings(self) -> dict[str, Any]:
        """The request-shaping settings this request states, in the condition's terms: those
        of :data:`REQUEST_SETTINGS` it states, the view's bounds (``view_limits``: the bounded
        view's limits, or ``"complete"``) and what a stated reviewer protocol fixes.

        Returns:
            Name -> value.
        """
        given = self.stated()
        stated = {name: given[name] for name in REQUEST_SETTINGS if name in given}
        if self.view_bounds is not None:
            bounded = self.view_bounds == "bounded"
            stated["view_limits"] = ViewLimits().model_dump() if bounded else "complete"
        if self.reviewer_protocol is not None:
            stated.update(REVIEWER_PROTOCOLS[self.reviewer_protocol])
            stated["reviewer_protocol"] = self.reviewer_protocol
        return stated
