"""A run's specification: every option of ``controlscope run``, its default and its check.

:class:`RunSpec` is what the CLI builds from its arguments and what a Python caller builds by
hand; both then call :func:`controlscope.run_task`, so the two get the same experiment.
Validation happens in two steps, both before any model is called:

1. constructing the spec checks each value alone and together (ranges, finite numbers, the
   schedule's grammar, a scope its lattice has, a bare ``once``/``midpoint`` with a source
   run, non-empty strings) and raises :class:`pydantic.ValidationError`;
2. :func:`prepare` checks what needs the outside world (the environment and task exist, the
   output directory is usable, a source run places the schedule, a replay's options match its
   recording, the models can be built) and raises :class:`SpecError`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from controlscope.core import (
    APP_BLOCK_REQUESTS,
    APP_BLOCKS,
    APP_PROTOCOLS,
    REVIEWER_PROTOCOLS,
    AppProtocol,
    BlockBudget,
    BlockRequests,
    CallBudget,
    Condition,
    DecisionMode,
    DrawIndex,
    IsolationRequest,
    Lattice,
    PlannerFormat,
    ProviderError,
    Repairs,
    ReplaceBoundary,
    ReviewerProtocol,
    ReviewToolChoice,
    Scope,
    ScopeName,
    Seconds,
    Seed,
    SourceBoundary,
    SourceIndex,
    Task,
    TaskBudgets,
    TaskError,
    Temperature,
    TokenCap,
    TurnBudget,
    View,
    ViewLimits,
    WorkerMemoryMb,
    app_protocol_conflict,
    app_protocol_defaults,
    lattice_operations,
)
from controlscope.envs import Environment, get_environment
from controlscope.envs.external import grant_network
from controlscope.models import CacheError, WeightsError, base_url_problem
from controlscope.record import RecordedActions
from controlscope.run._models import RunModels, build_models
from controlscope.run._replay_check import check_replay, recorded_settings, recorded_start
from controlscope.run._source import place_schedule, read_source
from controlscope.schedule import needs_source, schedule_name

ViewBounds = Literal["complete", "bounded"]
"""How much of the public state a review shows: all of it (the paper's ``h``) or a bounded
view (:class:`~controlscope.core.ViewLimits`) for small contexts."""


class SpecError(ValueError):
    """A run specification that cannot run (unknown task, unusable directory, a replay whose
    options differ from its recording, a model that cannot be built); nothing has run."""


class RunSpec(BaseModel):
    """Everything that defines one run, with the defaults ``controlscope run`` uses.

    Attributes:
        task: the task id, e.g. ``student_database/english_talent``; None: the only task of
            ``mcpmark`` or ``task_spec``.
        env: the environment's name (``filesystem``, ``alfworld``, ``mcpmark:DIR``,
            ``taskspec:FILE``); set by ``mcpmark`` or ``task_spec`` when they are given.
        mcpmark: an MCPMark task folder, or a folder above task folders (an MCPMark checkout;
            name the task with ``task``): the environment ``mcpmark:DIR``.
        state: the directory of an MCPMark task's initial state (its ``state`` parameter);
            None: the state it names, in ``test_environments/`` above its folder.
        task_spec: a task spec file (TOML: any MCP server's tasks): the environment
            ``taskspec:FILE``.
        allow_network: grant the network to a task spec's server that asks for it (otherwise
            such a spec is refused).
        params: the task's generator parameters (e.g. ``{"students": 25}``).
        seed: the task's data seed (0 to 2**63 - 1; for the student tasks the subset seed).
            Every number is checked against its range before anything runs (the ceilings of
            :mod:`controlscope.core`: :data:`~controlscope.core.MAX_CALLS` calls,
            :data:`~controlscope.core.MAX_SECONDS` seconds,
            :data:`~controlscope.core.MAX_TOKENS` tokens...).
        scope: the granted scope (``keep``, ``arg``, ``params``, ``full``; paper section 3.1).
        lattice: ``default`` (Keep ⊂ Arg ⊂ Full, paper 3.1) or ``v2`` (Keep ⊂ Arg ⊂ Params ⊂
            Full, A.2); ``params`` exists only under ``v2``.
        schedule: when to review (see :func:`controlscope.schedule.parse_schedule`); stored in
            canonical form. A bare ``once`` or ``midpoint`` needs ``source_run``.
        source_run: a recorded source run (a completed Keep trajectory of the same task and
            seed) that places a bare ``once`` (the local rule, paper appendix B) or ``midpoint``
            (N = its calls, B.1).
        view: the reviewer's view (paper A.3).
        view_bounds: ``complete`` (the whole public state, paper 3.1) or ``bounded``; None:
            bounded for a local reviewer model (8,192-token context), complete otherwise (a
            replay: the recording's).
        replace_boundary: what a replacement replaces (paper A.1).
        model: the planner's model spec (``local``, ``local:0.5b``, ``PATH.gguf``,
            ``openai:NAME``, ``replay:DIR``; see :func:`controlscope.models.make_model`).
        reviewer_model: the reviewer's model spec; None means the planner's.
        base_url: the OpenAI-compatible endpoint for ``openai`` specs (``http`` or ``https``,
            naming a host).
        planner_format: how the planner emits code; None: ``fenced`` for local models,
            ``tools`` otherwise (a replay: the recording's).
        review_mode: how the reviewer answers; None: ``json`` for local models, ``tools``
            otherwise (a replay: the recording's).
        reviewer_tool_choice: ``auto`` or ``required`` for the reviewer's operation tools;
            None: ``auto`` (paper section 4's matched configurations).
        reviewer_protocol: ``fast`` or ``reasoning`` (paper section 4, ALFWorld): fixes the
            reviewer's tool choice, token cap and what an invalid review does
            (:data:`~controlscope.core.REVIEWER_PROTOCOLS`); recorded in the condition. A
            stated ``reviewer_tool_choice`` or ``reviewer_max_tokens`` must agree with it.
            None: the settings one by one, an invalid review Keeps.
        temperature: sampling temperature of the reviewer, and of the planner unless
            ``planner_temperature`` is given; None: 0.7 (paper section 4).
        planner_temperature: the planner's temperature apart; None: ``temperature``.
        max_tokens: per-request token cap; None: 16,384 (paper section 4), 1,024 for the local
            model.
        reviewer_max_tokens: the reviewer's cap apart; None: ``max_tokens``.
        planner_options: provider options passed through with planner requests.
        reviewer_options: provider options passed through with review requests (e.g. a
            reasoning mode).
        draw: the reviewer draw index; None: 0.
        source_program: the source-program index (P1 = 0, P2 = 1; the planner requests'
            draw); None: 0.
        max_calls: the primitive-call budget; None: the task's (100).
        max_turns: the planning-turn budget; None: the task's (100).
        max_seconds: the execution-seconds budget; None: the task's (1,800).
        max_repairs: ordinary repairs after a failed plan (paper section 4); None: the task's
            (ALFWorld: 5; the filesystem tasks: no recovery protocol).
        max_wall_seconds: the run's wall-clock ceiling, everything counted (planning, reviews,
            execution, waits); None: 10,800 (three hours). Recorded in ``run_start``.
        max_blocks: natural blocks per task; None: the task's, else the app protocol's (40),
            else no cap.
        max_block_requests: API requests per natural block; None: the task's, else the app
            protocol's (250), else no cap.
        app_protocol: ``v1`` or ``v2`` (paper section 5.3, appendix A.2;
            :data:`~controlscope.core.APP_PROTOCOLS`): its lattice, replacement boundary and,
            for V1, per-block schedule are the defaults of those options (a stated one must
            agree, the schedule aside); it fixes what a replacement gets of its block's
            allowance and the private-runtime guard, and caps blocks and requests per block.
            Recorded in the condition. None: the settings one by one.
        block_exec_s: execution seconds one block may run; None (the default): no per-block
            limit, the task's execution budget governs.
        request_timeout_s: seconds one model call may take, every attempt, wait and the whole
            answer counted; None: each model's own (600 s). Recorded in the condition.
        isolation: the worker isolation asked for.
        worker_memory_mb: the worker's whole memory in MiB (from
            :data:`~controlscope.core.MIN_WORKER_MEMORY_MB` to
            :data:`~controlscope.core.MAX_WORKER_MEMORY_MB`).
        cache: an SQLite exact-request cache file shared between runs; None for none.
        out: the run directory to write (must not hold a recorded run).
        environment: the environment's name as the run resolves it (a property):
            ``mcpmark:DIR`` or ``taskspec:FILE`` when they are given, else ``env``.
        reviews: whether the condition can review at all (not Keep, not ``never``).

    Raises:
        pydantic.ValidationError: a value out of range or of the wrong form.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    task: str | None = None
    env: str = "filesystem"
    mcpmark: Path | None = None
    state: Path | None = None
    task_spec: Path | None = None
    allow_network: bool = False
    params: dict[str, int | str] = Field(default_factory=dict)
    seed: Seed = 0
    scope: ScopeName = Scope.FULL
    lattice: Lattice = "default"
    schedule: str = "continuous"
    source_run: Path | None = None
    view: View = "with_feedback"
    view_bounds: ViewBounds | None = None
    replace_boundary: ReplaceBoundary = "reply"
    model: str = "local"
    reviewer_model: str | None = None
    base_url: str | None = None
    planner_format: PlannerFormat | None = None
    review_mode: DecisionMode | None = None
    reviewer_tool_choice: ReviewToolChoice | None = None
    reviewer_protocol: ReviewerProtocol | None = None
    temperature: Temperature | None = None
    planner_temperature: Temperature | None = None
    max_tokens: TokenCap | None = None
    reviewer_max_tokens: TokenCap | None = None
    planner_options: dict[str, Any] | None = None
    reviewer_options: dict[str, Any] | None = None
    draw: DrawIndex | None = None
    source_program: SourceIndex | None = None
    max_calls: CallBudget | None = None
    max_turns: TurnBudget | None = None
    max_seconds: Seconds | None = None
    max_repairs: Repairs | None = None
    max_wall_seconds: Seconds | None = None
    max_blocks: BlockBudget | None = None
    max_block_requests: BlockRequests | None = None
    app_protocol: AppProtocol | None = None
    block_exec_s: Seconds | None = None
    request_timeout_s: Seconds | None = None
    isolation: IsolationRequest = "auto"
    worker_memory_mb: WorkerMemoryMb = 2048
    cache: Path | None = None
    out: Path

    @model_validator(mode="before")
    @classmethod
    def _protocol_defaults(cls, data: Any) -> Any:
        return app_protocol_defaults(data)

    @field_validator("schedule")
    @classmethod
    def _canonical_schedule(cls, value: str) -> str:
        return schedule_name(value)

    @model_validator(mode="after")
    def _one_task(self) -> RunSpec:
        if self.mcpmark is not None and self.task_spec is not None:
            raise ValueError("give mcpmark (--mcpmark) or task_spec (--task-spec), not both")
        if (self.mcpmark is not None or self.task_spec is not None) and self.env != "filesystem":
            raise ValueError("mcpmark and task_spec name the environment; leave env out")
        if self.task is None and self.mcpmark is None and self.task_spec is None:
            raise ValueError(
                "name a task: task (--task), an MCPMark task folder (--mcpmark) or a task spec "
                "(--task-spec)"
            )
        if self.state is not None and not self.environment.startswith("mcpmark:"):
            raise ValueError("state (--state) is the initial state of an MCPMark task")
        if self.state is not None and "state" in self.params:
            raise ValueError("give the state once: state (--state) or the parameter state")
        return self

    @property
    def environment(self) -> str:
        """The environment's name: ``mcpmark:DIR`` or ``taskspec:FILE`` when they are given,
        else ``env``."""
        if self.mcpmark is not None:
            return f"mcpmark:{self.mcpmark}"
        if self.task_spec is not None:
            return f"taskspec:{self.task_spec}"
        return self.env

    @model_validator(mode="after")
    def _coherent(self) -> RunSpec:
        lattice_operations(self.scope, self.lattice)  # Params only under v2
        if self.app_protocol is not None:
            conflict = app_protocol_conflict(
                self.app_protocol, lattice=self.lattice, replace_boundary=self.replace_boundary
            )
            if conflict is not None:
                raise ValueError(conflict)
        if needs_source(self.schedule) and self.source_run is None:
            raise ValueError(
                f"schedule {self.schedule!r} takes its boundary from a recorded source run: "
                "give source_run (--source-run DIR), or a number (once:K, midpoint:N)"
            )
        if self.source_run is not None and not needs_source(self.schedule):
            raise ValueError(
                "source_run places a bare once or midpoint schedule; the schedule "
                f"{self.schedule!r} has neither"
            )
        if self.reviewer_protocol is not None:
            fixed = REVIEWER_PROTOCOLS[self.reviewer_protocol]
            for name in ("reviewer_tool_choice", "reviewer_max_tokens"):
                value = getattr(self, name)
                if value is not None and value != fixed[name]:
                    raise ValueError(
                        f"the {self.reviewer_protocol} reviewer protocol has {name} "
                        f"{fixed[name]!r}, not {value!r}"
                    )
        return self

    @field_validator("model", "reviewer_model", "base_url", "task", "env")
    @classmethod
    def _stripped(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("is blank; give a value")
        return value.strip() if value is not None else None

    @field_validator("base_url")
    @classmethod
    def _endpoint(cls, value: str | None) -> str | None:
        problem = None if value is None else base_url_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("mcpmark", "state", "task_spec", "source_run", "cache", "out", mode="before")
    @classmethod
    def _named_path(cls, value: object) -> object:
        # Path("") is the current folder: a blank (an unset shell variable) must not become it.
        if isinstance(value, str) and not value.strip():
            raise ValueError("an empty path; name a file or folder")
        return value

    def replace(self, **changes: Any) -> RunSpec:
        """A copy with ``changes`` applied and checked like a new spec (``model_copy`` would
        not check them).

        Raises:
            pydantic.ValidationError: a changed value is out of range.
        """
        return RunSpec.model_validate({**self.model_dump(), **changes})

    @property
    def reviews(self) -> bool:
        """Whether the condition can review at all (not Keep, not ``never``)."""
        return self.schedule != "never" and self.scope != Scope.KEEP

    def stated_settings(self) -> dict[str, Any]:
        """The request-shaping settings this spec states, in the condition's terms (those of
        :data:`~controlscope.run.REPLAYED_SETTINGS` that are not None)."""
        stated: dict[str, Any] = {
            "planner_format": self.planner_format,
            "review_mode": self.review_mode,
            "reviewer_tool_choice": self.reviewer_tool_choice,
            "max_tokens": self.max_tokens,
            "reviewer_max_tokens": self.reviewer_max_tokens,
            "temperature": self.temperature,
            "planner_temperature": self.planner_temperature,
            "planner_options": self.planner_options,
            "reviewer_options": self.reviewer_options,
            "draw": self.draw,
            "source_program": self.source_program,
            "view_limits": None,
        }
        if self.view_bounds is not None:
            bounded = self.view_bounds == "bounded"
            stated["view_limits"] = ViewLimits().model_dump() if bounded else "complete"
        if self.reviewer_protocol is not None:
            stated.update(REVIEWER_PROTOCOLS[self.reviewer_protocol])
            stated["reviewer_protocol"] = self.reviewer_protocol
        return {k: v for k, v in stated.items() if v is not None}


@dataclass(frozen=True)
class PreparedRun:
    """A spec resolved against the outside world, ready to run.

    Attributes:
        spec: the spec.
        env: the environment.
        task: the task with its parameters.
        condition: the resolved condition (defaults filled in from the models or a recording).
        models: the planner and reviewer models (the reviewer None when no review can happen
            or a custom reviewer is given).
        actions: when the planner replays a recorded run (``replay:DIR``), that run's
            primitive calls, which the replay's calls must equal (paper A.4); else None.
    """

    spec: RunSpec
    env: Environment
    task: Task
    condition: Condition
    models: RunModels
    actions: RecordedActions | None = None


def prepare(spec: RunSpec, *, build_reviewer: bool = True) -> PreparedRun:
    """Check ``spec`` against the outside world and build what the run needs.

    Args:
        spec: the run's specification.
        build_reviewer: False when the caller brings its own reviewer.

    Returns:
        The prepared run. Its output directory is created.

    Raises:
        SpecError: an unknown environment or task (an MCPMark folder without
            ``description.md`` or ``verify.py``, a missing state, a task spec naming a command
            that does not exist), bad task parameters, an unusable ``out`` or ``cache``,
            ``base_url`` with no ``openai`` model, a replay whose options differ from its
            recording, or models that cannot be built (missing weights or files).
    """
    try:
        _check_paths(spec)
        env = get_environment(spec.environment)
        if spec.allow_network:
            env = grant_network(env)
        task = _task(spec, env)
        budgets = _budgets(spec, task)
        schedule, source = _placed_schedule(spec, env, task)
        replay = _replay_dir(spec)
        for model_spec in (spec.model, spec.reviewer_model):
            if model_spec is not None and model_spec.startswith("replay:"):
                check_replay(Path(model_spec.partition(":")[2]), spec, task, budgets, schedule)
        since = recorded_start(replay) if replay is not None else None
        models = build_models(
            planner=spec.model,
            reviewer=spec.reviewer_model,
            base_url=spec.base_url,
            cache_path=spec.cache,
            need_reviewer=build_reviewer and spec.reviews,
            normalise=functools.partial(env.normalise_observation, since=since),
        )
        condition = _condition(spec, models, budgets, schedule=schedule, source=source)
        actions = None
        if spec.model.startswith("replay:"):
            recording = Path(spec.model.partition(":")[2])
            actions = RecordedActions.from_run_dir(recording, normalise=env.normalise_observation)
        _make_out(spec.out)
    except (TaskError, ValueError, FileNotFoundError, ProviderError, WeightsError, CacheError) as e:
        raise SpecError(str(e)) from e
    return PreparedRun(
        spec=spec, env=env, task=task, condition=condition, models=models, actions=actions
    )


def _task(spec: RunSpec, env: Environment) -> Task:
    """The spec's task with its parameters (``state`` among them); without a task id, the
    environment's only task.

    Raises:
        TaskError: unknown task or bad parameters; no id and not exactly one task.
    """
    params: dict[str, Any] = dict(spec.params)
    if spec.state is not None:
        params["state"] = str(spec.state)
    task_id = spec.task
    if task_id is None:
        ids = [t.id for t in env.tasks()]
        if len(ids) != 1:
            shown = ", ".join(ids[:8]) + (", ..." if len(ids) > 8 else "")
            raise TaskError(
                f"{env.name} holds {len(ids)} tasks ({shown}); name one with task (--task)"
            )
        task_id = ids[0]
    return env.task(task_id, **params)


def _replay_dir(spec: RunSpec) -> Path | None:
    """The recording a ``replay:DIR`` model answers from (the planner's, else the reviewer's)."""
    for model_spec in (spec.model, spec.reviewer_model):
        if model_spec is not None and model_spec.startswith("replay:"):
            return Path(model_spec.partition(":")[2])
    return None


def _placed_schedule(
    spec: RunSpec, env: Environment, task: Task
) -> tuple[str, SourceBoundary | None]:
    """The schedule with a bare ``once``/``midpoint`` placed from the source run.

    Raises:
        FileNotFoundError, ValueError: the source run is missing, not a completed Keep
            trajectory of this task, parameters and seed, or ineligible for the local rule.
    """
    if spec.source_run is None:
        return spec.schedule, None
    source = read_source(spec.source_run)
    if (source.task.id, dict(source.task.params), source.seed) != (
        task.id,
        dict(task.params),
        spec.seed,
    ):
        raise ValueError(
            f"the source run in {spec.source_run} is task {source.task.id} "
            f"{dict(source.task.params)} seed {source.seed}, not {task.id} {dict(task.params)} "
            f"seed {spec.seed}"
        )
    return place_schedule(
        spec.schedule, source, write_tools=env.write_tools, read_tools=env.read_tools
    )


def _check_paths(spec: RunSpec) -> None:
    """The output directory and cache file are usable; ``base_url`` has an ``openai`` model."""
    out = spec.out
    if out.exists() and not out.is_dir():
        raise ValueError(f"out {out} exists and is not a directory")
    if (out / "events.jsonl").exists():
        raise ValueError(f"{out} already holds a recorded run; choose a new out directory")
    cache = spec.cache
    if (
        cache is not None
        and cache.resolve().parent == out.resolve()
        and cache.name in ("events.jsonl", "summary.json")
    ):
        raise ValueError(f"cache {cache} would overwrite the run's {cache.name}")
    if spec.base_url is not None and not any(
        s is not None and s.startswith("openai") for s in (spec.model, spec.reviewer_model)
    ):
        raise ValueError("base_url applies only to openai:NAME models")


def _budgets(spec: RunSpec, task: Task) -> TaskBudgets:
    given = {
        "primitive_calls": spec.max_calls,
        "planning_turns": spec.max_turns,
        "execution_seconds": spec.max_seconds,
        "wall_seconds": spec.max_wall_seconds,
        "repairs": spec.max_repairs,
        "blocks": spec.max_blocks,
        "block_requests": spec.max_block_requests,
    }
    base = task.budgets.model_dump()
    base.update({k: v for k, v in given.items() if v is not None})
    if spec.app_protocol is not None:  # the protocol's caps where neither spec nor task has one
        base["blocks"] = base.get("blocks") or APP_BLOCKS
        base["block_requests"] = base.get("block_requests") or APP_BLOCK_REQUESTS
    return TaskBudgets(**base)


def _condition(
    spec: RunSpec,
    models: RunModels,
    budgets: TaskBudgets,
    *,
    schedule: str,
    source: SourceBoundary | None,
) -> Condition:
    """The condition: the spec's values, else a replay's recording, else the models' defaults."""
    settings: dict[str, Any] = {
        "planner_format": models.planner_format,
        "review_mode": models.review_mode,
        "max_tokens": models.max_tokens,
        "view_limits": models.view_limits,
    }
    if spec.model.startswith("replay:"):
        settings.update(recorded_settings(Path(spec.model.partition(":")[2])))
    settings.update(spec.stated_settings())
    if settings.get("view_limits") == "complete":
        settings["view_limits"] = None
    if spec.app_protocol is not None:
        fixed = APP_PROTOCOLS[spec.app_protocol]
        settings.update(
            app_protocol=spec.app_protocol,
            block_allowance=fixed["block_allowance"],
            runtime_guard=fixed["runtime_guard"],
        )
    try:
        return Condition(
            scope=spec.scope,
            lattice=spec.lattice,
            schedule=schedule,
            source=source,
            view=spec.view,
            replace_boundary=spec.replace_boundary,
            budgets=budgets,
            block_exec_s=spec.block_exec_s,
            request_timeout_s=spec.request_timeout_s,
            isolation=spec.isolation,
            worker_memory_mb=spec.worker_memory_mb,
            **settings,
        )
    except ValidationError as err:  # a recording with settings this version refuses
        raise ValueError(f"the run's settings are not valid: {err}") from None


def _make_out(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ValueError(f"cannot create out {out}: {err}") from None
