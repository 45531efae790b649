"""A panel's configuration: the TOML file ``controlscope panel`` reads, checked before any run.

A panel is tasks x source programs x scopes x reviewer draws, run paired (paper sections 3.2,
4 and A.5). The file names the environment and tasks, the source programs per task, the
scopes and draws, the condition every scope shares (lattice, schedule, view, replacement
boundary), where scope conditions start (``start``), the planner's and reviewer's settings,
the budgets, and how the runs are executed::

    env = "filesystem"                            # or "mcpmark:DIR", "taskspec:FILE"
    tasks = ["student_database/english_talent"]   # task ids, categories, KEY=VALUE, or "all"
    seeds = [0]
    source_programs = 1                           # P1, P2, ... sampled once, shared
    sources = [0]                                 # which of them this panel runs (default: all)
    scopes = ["keep", "arg", "full"]
    draws = 1                                     # reviewer draws per reviewing scope
    schedule = "continuous"
    start = "first_boundary"     # whole, first_boundary, midpoint, local_rule, feedback_rule

    [params."student_database/english_talent"]    # task parameters, by task id or category
    students = 25

    [planner]
    model = "local:0.5b"

    [reviewer]                                    # model: the planner's unless given
    tool_choice = "auto"

    [budgets]
    max_calls = 30

    [execution]
    backend = "local"                             # local | ray
    workers = 2                                   # default: sized to the machine
    cache_file = "../shared.sqlite"               # default: cache.sqlite in the panel folder

:func:`load_config` reads and checks a file; :class:`ConfigError` carries one line naming the
key and the problem.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from controlscope.core import (
    AppProtocol,
    BlockBudget,
    BlockRequests,
    CallBudget,
    ClusterBy,
    CpusPerRun,
    DecisionMode,
    Draws,
    IsolationRequest,
    Lattice,
    PlannerFormat,
    Repairs,
    ReplaceBoundary,
    ReviewerProtocol,
    ReviewToolChoice,
    Scope,
    Seconds,
    Seed,
    SourceIndex,
    SourcePrograms,
    Temperature,
    TokenCap,
    TurnBudget,
    View,
    WorkerMemoryMb,
    Workers,
    app_protocol_defaults,
    lattice_operations,
    read_toml,
)
from controlscope.envs import ENVIRONMENT_KINDS
from controlscope.models import base_url_problem
from controlscope.replay import ReplayError, branch_schedule
from controlscope.run import ViewBounds
from controlscope.schedule import schedule_name

Start = Literal["whole", "first_boundary", "midpoint", "local_rule", "feedback_rule"]
"""Where the reviewing scopes of a unit start (paper 3.1, 3.2, B.1, appendix B):

- ``whole``: from the task's initial state, each scope a whole run; the planner's requests go
  through the panel's exact-request cache, so the source program (the first reply) and every
  planning request that coincides are shared with the unit's Keep run;
- ``first_boundary``: branched from the unit's Keep run at its first boundary after a
  completed call (the first one the continuous rule reviews);
- ``midpoint``: branched at the Keep run's midpoint (K = floor(N/2) of its N calls, B.1);
- ``local_rule``: branched at the local rule's boundary (appendix B); a unit without one is
  ineligible and left out of the comparison, with the reason;
- ``feedback_rule``: branched at the feedback-visibility rule's boundary (A.3: the first
  same-block boundary after an information-returning call, at a unique direct call site
  outside control-flow constructs); a unit without one is ineligible, with the reason."""

STARTS: tuple[Start, ...] = ("whole", "first_boundary", "midpoint", "local_rule", "feedback_rule")
"""Every start."""

Backend = Literal["local", "ray"]
"""Where runs execute: a process pool on this machine, or Ray tasks (``RAY_ADDRESS`` names a
cluster; without it a local Ray instance is started)."""

FILE_MODELS = ("scripted", "replay")
"""Model spec kinds that name a path (``scripted:FILE.json``, ``replay:DIR``): a relative one
in a configuration file is read from the file's folder."""


class ConfigError(ValueError):
    """A panel configuration that cannot run: a file that is not TOML, an unknown key, task,
    category, scope or model, a value out of range. The message is one line naming the key."""


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class PlannerSettings(_Section):
    """The planner (it writes the source programs and does the ordinary planning).

    Attributes:
        model: its model spec (see :func:`controlscope.models.make_model`).
        base_url: the OpenAI-compatible endpoint of ``openai`` specs.
        format: ``fenced`` or ``tools``; None: by model kind.
        temperature: the planner's temperature; None: 0.7 (paper section 4).
        max_tokens: per-request token cap; None: by model kind (16,384; 1,024 local).
        options: provider options passed with every planner request.
    """

    model: str = "local"
    base_url: str | None = None
    format: PlannerFormat | None = None
    temperature: Temperature | None = None
    max_tokens: TokenCap | None = None
    options: dict[str, Any] | None = None

    @field_validator("base_url")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        problem = None if value is None else base_url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value


class ReviewerSettings(_Section):
    """The reviewer, and what it is shown.

    Attributes:
        model: its model spec; None: the planner's.
        mode: ``tools`` or ``json``; None: by model kind.
        tool_choice: ``auto`` or ``required``; None: ``auto`` (paper section 4).
        temperature: the reviewer's temperature; None: 0.7.
        max_tokens: its per-request cap; None: the planner's.
        options: provider options passed with every review request (a reasoning mode).
        view: ``with_feedback`` or ``code_only`` (paper A.3).
        view_bounds: ``complete`` or ``bounded``; None: bounded for local models.
        protocol: ``fast`` or ``reasoning`` (paper section 4, ALFWorld): fixes the tool
            choice, the token cap and what an invalid review does
            (:data:`controlscope.core.REVIEWER_PROTOCOLS`); None: the settings one by one.
    """

    model: str | None = None
    mode: DecisionMode | None = None
    tool_choice: ReviewToolChoice | None = None
    protocol: ReviewerProtocol | None = None
    temperature: Temperature | None = None
    max_tokens: TokenCap | None = None
    options: dict[str, Any] | None = None
    view: View = "with_feedback"
    view_bounds: ViewBounds | None = None


class BudgetSettings(_Section):
    """Budgets of every run (paper section 4); None keeps the task's (100 calls, 100 turns,
    1,800 execution seconds, ALFWorld's five ordinary repairs) and the 10,800 s wall-clock
    ceiling. Each is checked against the range a run spec's option has (the ceilings of
    :mod:`controlscope.core`, e.g. :data:`~controlscope.core.MAX_CALLS`)."""

    max_calls: CallBudget | None = None
    max_turns: TurnBudget | None = None
    max_seconds: Seconds | None = None
    max_repairs: Repairs | None = None
    max_wall_seconds: Seconds | None = None
    max_blocks: BlockBudget | None = None
    max_block_requests: BlockRequests | None = None
    block_exec_s: Seconds | None = None
    worker_memory_mb: WorkerMemoryMb = 2048


class ExecutionSettings(_Section):
    """How the runs execute; ``backend`` and ``workers`` can change between a panel and its
    resumption, the rest cannot.

    Attributes:
        backend: ``local`` (a process pool) or ``ray``.
        workers: runs at a time; None: the machine's cores for models that do not run here,
            one for the embedded local model (which uses every core).
        cpus_per_run: CPUs a run declares to Ray (``num_cpus`` of its task).
        isolation: the worker isolation asked for.
        cache: whether planning requests go through the panel's exact-request cache (paper
            A.5); without it, whole-run scopes do not share their source program.
        cache_file: the exact-request cache's file; a relative path is read from the panel
            folder (``../../cache.sqlite``: one cache several panels share, as an
            experiment's panels do, paper 4 and A.5); None: ``cache.sqlite`` in the panel
            folder.
    """

    backend: Backend = "local"
    workers: Workers | None = None
    cpus_per_run: CpusPerRun = 1.0
    isolation: IsolationRequest = "auto"
    cache: bool = True
    cache_file: str | None = None

    @field_validator("cache_file")
    @classmethod
    def _cache_file(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("give a file name, or leave it out for cache.sqlite in the panel")
        return value


class PanelConfig(_Section):
    """A panel's configuration (see the module docstring for the file).

    Attributes:
        env: the environment.
        tasks: task ids, categories and metadata groups ``KEY=VALUE`` (ALFWorld's
            ``cohort=valid_seen``, the apps' ``split=test_normal``), or ``"all"`` (every task
            the environment lists).
        exclude: task ids left out of ``tasks``.
        python_allowed_only: leave out tasks whose instruction restricts Python (paper
            section 4 and appendix B: the main filesystem comparison excludes four).
        params: task parameters by task id or category (an id's override its category's).
        seeds: the tasks' data seeds (0 to :data:`~controlscope.core.MAX_SEED`); each seed is
            a unit of its own.
        source_programs: source programs per task (P1, P2, ...: the planner's draw; at most
            :data:`~controlscope.core.MAX_SOURCE_PROGRAMS`).
        sources: which source-program indices the panel runs (P1 = 0); None: every one of
            ``range(source_programs)``. A panel of P2 alone (``sources = [1]``) shares P2's
            planning with another panel's through a shared cache (paper 4, Table 1).
        scopes: the scopes compared; ``keep`` is required (the baseline every unit reuses).
        draws: reviewer draws per reviewing scope (at most
            :data:`~controlscope.core.MAX_DRAWS`).
        lattice: ``default`` or ``v2``.
        schedule: when reviewing scopes review; a branched start takes ``once`` or a
            continuous schedule; under a ``whole`` start a bare ``once`` or ``midpoint`` is
            placed on the unit's Keep run (its source run, paper appendix B and B.1).
        start: where reviewing scopes start (:data:`Start`).
        replace_boundary: what a replacement replaces (paper A.1).
        app_protocol: ``v1`` or ``v2`` (paper A.2): the default lattice, replacement
            boundary and (V1) schedule, the block allowance and the private-runtime guard of
            every run (:data:`~controlscope.core.APP_PROTOCOLS`); None: none.
        cluster: what the report's bootstrap resamples; None: ``category`` for the
            filesystem and MCPMark's tasks, ``template`` otherwise.
        planner: the planner's settings.
        reviewer: the reviewer's settings.
        budgets: the runs' budgets.
        execution: how runs execute.
        reviewing_scopes: the scopes other than Keep (a property).
        source_indices: the source-program indices the panel runs (a property).
    """

    env: str = "filesystem"
    tasks: list[str] | Literal["all"]
    exclude: list[str] = Field(default_factory=list)
    python_allowed_only: bool = True
    params: dict[str, dict[str, int | str]] = Field(default_factory=dict)
    seeds: list[Seed] = Field(default_factory=lambda: [0])
    source_programs: SourcePrograms = 1
    sources: list[SourceIndex] | None = None
    scopes: list[str] = Field(default_factory=lambda: ["keep", "arg", "full"])
    draws: Draws = 1
    lattice: Lattice = "default"
    schedule: str = "continuous"
    start: Start = "whole"
    replace_boundary: ReplaceBoundary = "reply"
    app_protocol: AppProtocol | None = None
    cluster: ClusterBy | None = None
    planner: PlannerSettings = Field(default_factory=PlannerSettings)
    reviewer: ReviewerSettings = Field(default_factory=ReviewerSettings)
    budgets: BudgetSettings = Field(default_factory=BudgetSettings)
    execution: ExecutionSettings = Field(default_factory=ExecutionSettings)

    @model_validator(mode="before")
    @classmethod
    def _protocol_defaults(cls, data: Any) -> Any:
        return app_protocol_defaults(data)

    @field_validator("tasks")
    @classmethod
    def _some_tasks(cls, value: list[str] | str) -> list[str] | str:
        if isinstance(value, list) and not [v for v in value if v.strip()]:
            raise ValueError('name at least one task or category, or "all"')
        return value

    @field_validator("seeds")
    @classmethod
    def _seeds(cls, value: list[int]) -> list[int]:
        if not value or len(set(value)) != len(value) or min(value) < 0:
            raise ValueError("give distinct seeds of at least 0")
        return value

    @field_validator("sources")
    @classmethod
    def _sources(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and (not value or len(set(value)) != len(value) or min(value) < 0):
            raise ValueError("give distinct source-program indices of at least 0 (P1 = 0)")
        return value

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, value: list[str]) -> list[str]:
        names = [v.strip().lower() for v in value]
        known = [s.name.lower() for s in Scope]
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"unknown scope {unknown[0]!r}; known: {', '.join(known)}")
        if len(set(names)) != len(names):
            raise ValueError("a scope is named twice")
        if "keep" not in names:
            raise ValueError("keep is required: every unit's Keep run is its baseline")
        return sorted(names, key=known.index)

    @field_validator("schedule")
    @classmethod
    def _schedule(cls, value: str) -> str:
        return schedule_name(value)

    @model_validator(mode="after")
    def _coherent(self) -> PanelConfig:
        if self.sources is not None and max(self.sources) >= self.source_programs:
            raise ValueError(
                f"sources: index {max(self.sources)} needs source_programs > "
                f"{max(self.sources)} (P1 = 0), not {self.source_programs}"
            )
        for scope in self.scopes:
            lattice_operations(Scope[scope.upper()], self.lattice)
        if self.start != "whole":
            try:
                branch_schedule(self.schedule, 1)
            except ReplayError as err:
                raise ValueError(f"start {self.start!r}: {err}") from None
        return self

    @property
    def source_indices(self) -> list[int]:
        """The source-program indices the panel runs (``sources``, else every one)."""
        return list(self.sources) if self.sources is not None else list(range(self.source_programs))

    @property
    def reviewing_scopes(self) -> list[str]:
        """The scopes other than Keep, in lattice order."""
        return [s for s in self.scopes if s != "keep"]

    def identity(self) -> dict[str, Any]:
        """What makes two panels the same experiment: everything but ``execution.backend``,
        ``execution.workers`` and ``execution.cpus_per_run`` (a panel may resume elsewhere)."""
        data = self.model_dump(mode="json")
        for key in ("backend", "workers", "cpus_per_run"):
            data["execution"].pop(key)
        return data


def parse_config(data: dict[str, Any], *, source: str = "config") -> PanelConfig:
    """A :class:`PanelConfig` from TOML-shaped data.

    Raises:
        ConfigError: one line naming the key and the problem.
    """
    try:
        return PanelConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{source}: {config_problem(err)}") from None


def load_config(path: str | Path) -> PanelConfig:
    """Read and check a panel's TOML file (nothing runs).

    Args:
        path: the TOML file.

    Returns:
        The configuration, every default filled in.

    Raises:
        ConfigError: the file is missing or not TOML, or a value is wrong (see
            :func:`parse_config`). Relative paths of an environment named with a path
            (``mcpmark:DIR``, ``taskspec:FILE``), of MCPMark ``state`` parameters and of
            file-backed models (``scripted:FILE``, ``replay:DIR``) are read from the file's
            folder. Tasks, parameters and models are checked against the
            environment by :func:`controlscope.panel.plan_panel`.
    """
    file = Path(path)
    try:
        data = read_toml(file)
    except ValueError as err:
        raise ConfigError(str(err)) from None
    if isinstance(data.get("experiment"), dict):
        raise ConfigError(
            f"{file} is an experiment file, not a panel file: run it with "
            f"controlscope experiment {file}"
        )
    return parse_config(anchor_paths(data, file.parent), source=str(file))


def anchor_paths(data: dict[str, Any], folder: Path) -> dict[str, Any]:
    """``data`` with the relative paths it names read from the configuration's ``folder``:
    an environment named with a path (``env = "mcpmark:tasks"``, ``taskspec:FILE``), the
    MCPMark tasks' ``state`` parameters, and the planner's and reviewer's file-backed models
    (``scripted:FILE.json``, ``replay:DIR``). A panel then runs, and resumes, from any
    directory."""
    out = dict(data)
    env = out.get("env")
    kind, colon, path = env.partition(":") if isinstance(env, str) else ("", "", "")
    if colon and kind in ENVIRONMENT_KINDS and path.strip():
        out["env"] = f"{kind}:{_resolved(path.strip(), folder)}"
    params = out.get("params")
    if isinstance(params, dict):
        out["params"] = dict(params)
        for key, value in params.items():
            state = value.get("state") if isinstance(value, dict) else None
            if isinstance(state, str) and state.strip():
                out["params"][key] = {**value, "state": _resolved(state.strip(), folder)}
    for role in ("planner", "reviewer"):
        section = out.get(role)
        model = section.get("model") if isinstance(section, dict) else None
        kind, colon, path = model.partition(":") if isinstance(model, str) else ("", "", "")
        if isinstance(section, dict) and colon and kind in FILE_MODELS and path.strip():
            out[role] = {**section, "model": f"{kind}:{_resolved(path.strip(), folder)}"}
    return out


def _resolved(path: str, folder: Path) -> str:
    """``path`` made absolute against ``folder`` (``~`` expanded)."""
    given = Path(path).expanduser()
    return str(given if given.is_absolute() else (folder / given).resolve())


def config_problem(err: ValidationError) -> str:
    """A validation error as one line: ``KEY: problem (got VALUE)``, problems ``; ``-joined."""
    parts = []
    for e in err.errors():
        where = ".".join(str(p) for p in e["loc"]) or "config"
        message = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            message = "unknown key"
        elif e["type"] == "missing":
            message = "missing"
        got = "" if e["type"] in ("missing", "extra_forbidden") else f" (got {e.get('input')!r})"
        parts.append(f"{where}: {message}{got}")
    return "; ".join(parts)
