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

    [source]                                      # frozen source programs (default: sampled)
    "student_database/english_talent" = "programs/english_talent.py"

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

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator

from controlscope.core import (
    BudgetOverrides,
    ClusterBy,
    ConditionSettings,
    CpusPerRun,
    DecisionMode,
    Draws,
    EndpointOptions,
    ExecutionOptions,
    Flag,
    HumanReview,
    ModelSpec,
    ParamValue,
    PlannerFormat,
    PlannerModel,
    PlannerSampling,
    Requested,
    ReviewerModel,
    ReviewerProtocol,
    ReviewerSampling,
    ReviewToolChoice,
    RunLimits,
    RunSettings,
    Scope,
    Seed,
    SourceIndex,
    SourcePrograms,
    Workers,
    absolute_path,
    app_protocol_defaults,
    lattice_operations,
    panel_key,
    read_toml,
    setting,
    setting_info,
)
from controlscope.envs import ENVIRONMENT_KINDS
from controlscope.models import base_url_problem
from controlscope.replay import ReplayError, branch_schedule
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


class ConfigError(ValueError):
    """A panel configuration that cannot run: a file that is not TOML, an unknown key, task,
    category, scope or model, a value out of range. The message is one line naming the key."""


class _PanelSection(Requested):
    """A part of a panel file: its keys are the settings' panel keys (:func:`panel_key`), so
    ``[planner] format`` sets ``planner_format`` and a problem is named ``planner.format``; a
    setting the file leaves out is not stated (each run takes its own default, or the one
    :func:`controlscope.run.prepare` resolves), and a key newer than the first file format is
    written only when it is not its default (see :class:`~controlscope.core.SettingInfo`), so
    panels and experiments written before it resume."""

    model_config = ConfigDict(
        frozen=True,
        extra="forbid",
        alias_generator=panel_key,
        validate_by_alias=True,
        validate_by_name=False,
        serialize_by_alias=True,
    )

    def _dumped(self, data: dict[str, Any]) -> dict[str, Any]:
        for name, field in type(self).model_fields.items():
            key = field.alias or name
            new = setting_info(field).since > 1 and key in data
            if new and getattr(self, name) == field.get_default(call_default_factory=True):
                del data[key]
        return data

    def as_written(self, name: str) -> Any:
        """The value the file gives setting ``name`` (by its name, not its key); None when
        the file leaves it out.

        Args:
            name: the setting's name (``planner_format``).

        Returns:
            The value, or None.
        """
        return getattr(self, name) if name in self.model_fields_set else None


class PlannerSettings(_PanelSection, EndpointOptions, PlannerSampling, PlannerModel):
    """The planner (it writes the source programs and does the ordinary planning): the file's
    ``[planner]`` section, keys ``model``, ``base_url``, ``format``, ``temperature``,
    ``max_tokens``, ``options`` and ``max_connections`` (each setting's description:
    :class:`~controlscope.core.PlannerModel`, :class:`~controlscope.core.PlannerSampling`,
    :class:`~controlscope.core.EndpointOptions`).

    Attributes:
        format: ``planner_format`` as the file gives it; None when it leaves it out.
        temperature: ``planner_temperature`` as the file gives it; None: the reviewer's.
        options: ``planner_options`` as the file gives it; None when it leaves it out.
    """

    @property
    def format(self) -> PlannerFormat | None:
        """``planner_format`` as the file gives it (None: by model kind)."""
        value: PlannerFormat | None = self.as_written("planner_format")
        return value

    @property
    def temperature(self) -> float | None:
        """``planner_temperature`` as the file gives it (None: the reviewer's)."""
        return self.planner_temperature

    @property
    def options(self) -> dict[str, Any] | None:
        """``planner_options`` as the file gives it (None: none)."""
        value: dict[str, Any] | None = self.as_written("planner_options")
        return value

    @field_validator("base_url")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        problem = None if value is None else base_url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value


class ReviewerSettings(_PanelSection, HumanReview, ReviewerSampling, ReviewerModel):
    """The reviewer, and what it is shown: the file's ``[reviewer]`` section, keys ``model``
    (None: the planner's), ``mode``, ``tool_choice``, ``protocol``, ``temperature``,
    ``max_tokens``, ``options``, ``view``, ``view_bounds``, and ``reviewer`` and
    ``review_timeout_s`` (``reviewer = "human"``: a person decides at the panel's review page
    in place of the model) (each setting's description:
    :class:`~controlscope.core.ReviewerModel`, :class:`~controlscope.core.ReviewerSampling`,
    :class:`~controlscope.core.HumanReview`).

    Attributes:
        model: ``reviewer_model`` as the file gives it; None: the planner's.
        mode: ``review_mode`` as the file gives it; None: by model kind.
        tool_choice: ``reviewer_tool_choice`` as the file gives it; None when left out.
        protocol: ``reviewer_protocol`` as the file gives it; None: none.
        max_tokens: ``reviewer_max_tokens`` as the file gives it; None: the planner's.
        options: ``reviewer_options`` as the file gives it; None when left out.
    """

    @property
    def model(self) -> str | None:
        """``reviewer_model`` as the file gives it (None: the planner's)."""
        return self.reviewer_model

    @property
    def person(self) -> bool:
        """Whether a person reviews (at the panel's review page) in place of a model."""
        return self.reviewer != "model"

    @field_validator("reviewer")
    @classmethod
    def _at_the_page(cls, value: str) -> str:
        if value == "human:terminal":
            raise ValueError(
                "a panel's runs run in other processes, away from this terminal: a person "
                "reviews a panel at its review page (human)"
            )
        return value

    @property
    def mode(self) -> DecisionMode | None:
        """``review_mode`` as the file gives it (None: by model kind)."""
        value: DecisionMode | None = self.as_written("review_mode")
        return value

    @property
    def tool_choice(self) -> ReviewToolChoice | None:
        """``reviewer_tool_choice`` as the file gives it (None: ``auto``)."""
        value: ReviewToolChoice | None = self.as_written("reviewer_tool_choice")
        return value

    @property
    def protocol(self) -> ReviewerProtocol | None:
        """``reviewer_protocol`` as the file gives it (None: none)."""
        return self.reviewer_protocol

    @property
    def max_tokens(self) -> int | None:
        """``reviewer_max_tokens`` as the file gives it (None: the planner's)."""
        return self.reviewer_max_tokens

    @property
    def options(self) -> dict[str, Any] | None:
        """``reviewer_options`` as the file gives it (None: none)."""
        value: dict[str, Any] | None = self.as_written("reviewer_options")
        return value


class BudgetSettings(_PanelSection, RunLimits, BudgetOverrides):
    """Budgets and limits of every run (paper section 4): the file's ``[budgets]`` section;
    an override left out keeps the task's (100 calls, 100 turns, 1,800 execution seconds,
    ALFWorld's five ordinary repairs) and the 10,800 s wall-clock ceiling. Each setting is
    described, and its range declared, in :class:`~controlscope.core.BudgetOverrides` and
    :class:`~controlscope.core.RunLimits`."""


class ExecutionSettings(_PanelSection, ExecutionOptions):
    """How the runs execute: the file's ``[execution]`` section (``isolation``:
    :class:`~controlscope.core.ExecutionOptions`); ``backend``, ``workers`` and
    ``cpus_per_run`` can change between a panel and its resumption, the rest cannot.

    Attributes:
        backend: ``local`` (a process pool) or ``ray``.
        workers: runs at a time; None: twice ``[planner] max_connections``
            for served models (``openai`` specs: they wait on their endpoint), the machine's
            cores for other models that do not run here, one for the embedded local model
            (which uses every core).
        cpus_per_run: CPUs a run declares to Ray (``num_cpus`` of its task).
        cache: whether planning requests go through the panel's exact-request cache (paper
            A.5); without it, whole-run scopes do not share their source program.
        cache_file: the exact-request cache's file; a relative path is read from the panel
            folder (``../../cache.sqlite``: one cache several panels share, as an
            experiment's panels do, paper 4 and A.5); None: ``cache.sqlite`` in the panel
            folder.
        keep_from: another panel's folder (relative to this one) whose Keep runs this panel
            reuses: each unit's Keep run is that panel's, copied as it is and checked by its
            log's SHA-256 and terminal state hash, not run again (one Keep run per unit of an
            experiment, paper 4, A.5); None: the panel runs its own.
        diverge_from: another panel's folder (relative to this one) whose reviewing runs ran
            a first schedule: each reviewing run of this panel is that panel's run of the same
            unit, scope and draw replayed up to the first boundary where this panel's schedule
            decides otherwise, then live (paper B.1, B.2:
            :func:`controlscope.replay.branch_at_divergence`); None: runs start as ``start``
            says.
    """

    backend: Backend = setting("local", "where runs execute: local (a process pool) or ray")
    workers: Workers | None = setting(
        None,
        "runs at a time",
        shown_default="2 x max_connections for served models, else sized to the machine "
        "(one for the embedded model)",
    )
    cpus_per_run: CpusPerRun = setting(1.0, "CPUs a run declares to Ray")
    cache: Flag = setting(True, "planning requests go through the panel's exact-request cache")
    cache_file: str | None = setting(
        None, "the exact-request cache's file, relative to the panel folder"
    )
    keep_from: str | None = setting(
        None, "the panel folder whose Keep runs this panel reuses, relative to it", since=2
    )
    diverge_from: str | None = setting(
        None,
        "the panel folder whose runs of a first schedule this panel's reviewing runs branch "
        "from where the schedules part, relative to it",
        since=2,
    )

    @field_validator("keep_from", "diverge_from")
    @classmethod
    def _panel_folder(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("give another panel's folder, or leave it out")
        return value

    @field_validator("cache_file")
    @classmethod
    def _cache_file(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("give a file name, or leave it out for cache.sqlite in the panel")
        return value


class PanelConfig(_PanelSection, ConditionSettings):
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
        source: frozen source programs, read from files instead of sampled (paper 5 holds P1
            and P2 fixed): a table from task id to a Python file, or to a list of files (P1,
            P2, ...), a task it does not name being sampled; or a folder, which holds
            ``TASK_ID.py`` for P1 and ``TASK_ID.pN.py`` for PN (N >= 2) of every task the panel
            runs. Relative paths are read from the panel file's folder.
        sources: which source-program indices the panel runs (P1 = 0); None: every one of
            ``range(source_programs)``. A panel of P2 alone (``sources = [1]``) shares P2's
            planning with another panel's through a shared cache (paper 4, Table 1).
        scopes: the scopes compared; ``keep`` is required (the baseline every unit reuses).
        draws: reviewer draws per reviewing scope (at most
            :data:`~controlscope.core.MAX_DRAWS`).
        start: where reviewing scopes start (:data:`Start`). The schedule
            (:class:`~controlscope.core.ConditionSettings`, like the lattice, the replacement
            boundary and the app protocol at the top level): a branched start takes ``once``
            or a continuous schedule; under a ``whole`` start a bare ``once`` or ``midpoint``
            is placed on the unit's Keep run (its source run, paper appendix B and B.1).
        cluster: what the report's bootstrap resamples; None: the environment's
            ``cluster_by`` (``category`` for the filesystem and MCPMark's tasks, ``template``
            otherwise).
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
    python_allowed_only: Flag = True
    params: dict[str, dict[str, ParamValue]] = Field(default_factory=dict)
    seeds: list[Seed] = Field(default_factory=lambda: [0])
    source_programs: SourcePrograms = 1
    source: str | dict[str, str | list[str]] | None = setting(
        None,
        "frozen source programs: a table from task id to a Python file (or a list: P1, P2, "
        "...), or a folder of TASK_ID.py files",
        since=2,
        shown_default="none: the planner samples them",
    )
    sources: list[SourceIndex] | None = None
    scopes: list[str] = Field(default_factory=lambda: ["keep", "arg", "full"])
    draws: Draws = 1
    start: Start = "whole"
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
        self._person_coherent()
        if self.sources is not None and max(self.sources) >= self.source_programs:
            raise ValueError(
                f"sources: index {max(self.sources)} needs source_programs > "
                f"{max(self.sources)} (P1 = 0), not {self.source_programs}"
            )
        for scope in self.scopes:
            lattice_operations(Scope[scope.upper()], self.lattice)
        try:  # what each run's settings would refuse (a protocol's fixed settings)
            self.settings()
        except ValidationError as err:
            raise ValueError(err.errors()[0]["msg"].removeprefix("Value error, ")) from None
        if self.start != "whole":
            try:
                branch_schedule(self.schedule, 1)
            except ReplayError as err:
                raise ValueError(f"start {self.start!r}: {err}") from None
        return self

    def _person_coherent(self) -> None:
        """A panel a person reviews: one draw (a person's decisions are not samples of a
        model) on this machine (the review desk listens on loopback)."""
        if not self.reviewer.person:
            return
        if self.draws != 1:
            raise ValueError(
                f"draws: {self.draws} with a person reviewing; a person's decisions are no "
                "samples: give draws = 1 (run another panel for another person)"
            )
        if self.execution.backend != "local":
            raise ValueError(
                f"execution.backend: {self.execution.backend} with a person reviewing; the "
                "review desk listens on this machine's loopback: use local"
            )

    @property
    def source_indices(self) -> list[int]:
        """The source-program indices the panel runs (``sources``, else every one)."""
        return list(self.sources) if self.sources is not None else list(range(self.source_programs))

    @property
    def reviewing_scopes(self) -> list[str]:
        """The scopes other than Keep, in lattice order."""
        return [s for s in self.scopes if s != "keep"]

    def settings(self) -> RunSettings:
        """The run settings the file states (top level and sections, by name), each run's
        scope, draw and source program aside.

        Returns:
            The settings; those the file leaves out are not stated.

        Raises:
            pydantic.ValidationError: stated settings that contradict a protocol.
        """
        top = {k: v for k, v in self.stated().items() if not isinstance(v, _PanelSection)}
        given = {
            **{k: v for k, v in top.items() if k != "source"},  # sections apart; source per task
            **self.planner.stated(),
            **self.reviewer.stated(),
            **self.budgets.stated(),
            **self.execution.stated(),
        }
        return RunSettings(**{k: v for k, v in given.items() if k in RunSettings.model_fields})

    def identity(self) -> dict[str, Any]:
        """What makes two panels the same experiment: everything but ``execution.backend``,
        ``execution.workers``, ``execution.cpus_per_run`` and ``planner.max_connections`` (a
        panel may resume elsewhere, at another concurrency); a key newer than the first file
        format only when it is not its default."""
        data = self.model_dump(mode="json")
        for key in ("backend", "workers", "cpus_per_run"):
            data["execution"].pop(key)
        data["planner"].pop("max_connections", None)
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
    MCPMark tasks' ``state`` parameters, the frozen source programs (``source``), and the
    planner's and reviewer's file-backed models (``scripted:FILE.json``, ``replay:DIR``). A
    panel then runs, and resumes, from any directory."""
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
    source = out.get("source")
    if isinstance(source, str) and source.strip():
        out["source"] = _resolved(source.strip(), folder)
    elif isinstance(source, dict):
        out["source"] = {task: _anchored(files, folder) for task, files in source.items()}
    for role in ("planner", "reviewer"):
        section = out.get(role)
        model = _file_model(section.get("model") if isinstance(section, dict) else None)
        if isinstance(section, dict) and model is not None:
            out[role] = {**section, "model": str(model.anchored(folder))}
    return out


def _anchored(files: object, folder: Path) -> object:
    """A ``source`` table's value (a file, or a list of files) read from ``folder``; anything
    else as it is (the configuration's check names it)."""
    if isinstance(files, list):
        return [_anchored(f, folder) for f in files]
    return _resolved(files.strip(), folder) if isinstance(files, str) and files.strip() else files


def _file_model(text: object) -> ModelSpec | None:
    """The model spec ``text`` names when it names a file (``scripted:FILE``, ``replay:DIR``);
    None otherwise, a spec that is no spec included (the plan names the problem)."""
    try:
        spec = ModelSpec.parse(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return spec if spec is not None and spec.names_path else None


def _resolved(path: str, folder: Path) -> str:
    """``path`` made absolute against ``folder`` (``~`` expanded)."""
    given = Path(path).expanduser()
    return str(given if given.is_absolute() else absolute_path(folder / given))


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
        whole = not e["loc"]  # a check of the whole file: its input is the whole file
        bare = whole or e["type"] in ("missing", "extra_forbidden")
        got = "" if bare else f" (got {e.get('input')!r})"
        parts.append(f"{where}: {message}{got}")
    return "; ".join(parts)
