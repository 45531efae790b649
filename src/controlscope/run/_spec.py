"""A run's specification: every option of ``controlscope run``, its default and its check.

:class:`RunSpec` is what the CLI builds from its arguments and what a Python caller builds by
hand; both then call :func:`controlscope.run_task`, so the two get the same experiment.
Validation happens in two steps, both before any model is called:

1. constructing the spec checks each value alone and together (ranges, finite numbers, the
   schedule's grammar, a scope its lattice has, a bare ``once``/``midpoint`` with a source
   run, non-empty strings, stated settings a protocol fixes) and raises
   :class:`pydantic.ValidationError`;
2. :func:`prepare` checks what needs the outside world (the environment and task exist, the
   output directory is usable, a source run places the schedule, a replay's options match its
   recording, the models can be built) and raises :class:`SpecError`.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, ValidationError, field_validator, model_validator

from controlscope.core import (
    APP_BLOCK_REQUESTS,
    APP_BLOCKS,
    APP_PROTOCOLS,
    Condition,
    Flag,
    ModelSpec,
    ParamValue,
    ProviderError,
    RunSettings,
    Scope,
    Seed,
    SourceBoundary,
    SourceProgram,
    Task,
    TaskBudgets,
    TaskError,
    ViewBounds,
    absolute_path,
    read_source_program,
    setting,
)
from controlscope.envs import Environment, get_environment
from controlscope.envs.external import grant_network
from controlscope.models import CacheError, WeightsError, base_url_problem
from controlscope.record import RecordedActions
from controlscope.run._frozen import frozen_reply
from controlscope.run._models import RunModels, build_models
from controlscope.run._replay_check import check_replay, recorded_settings, recorded_start
from controlscope.run._source import place_schedule, read_source
from controlscope.schedule import needs_source, schedule_name

__all__ = ["PreparedRun", "RunSpec", "SpecError", "ViewBounds", "prepare", "settings_condition"]


class SpecError(ValueError):
    """A run specification that cannot run (unknown task, unusable directory, a replay whose
    options differ from its recording, a model that cannot be built); nothing has run."""


class RunSpec(RunSettings):
    """Everything that defines one run: the task, where to write, and every run setting
    (:class:`~controlscope.core.RunSettings`, each declared once with its default, range and
    description: ``RunSpec.model_fields[name].description``, ``controlscope run --help``).

    A setting reads as its value, or its default when it is not stated. Nine are resolved by
    :func:`prepare` when nobody states them, from a replayed recording (``replay:DIR``), else
    by the models' kind (``planner_format``, ``review_mode``, ``max_tokens``) or the default
    (``reviewer_tool_choice``, ``temperature``, the provider options, ``draw``,
    ``source_program``): an unstated
    ``spec.max_tokens`` reads 16,384 while a local model gets 1,024. What runs is
    ``prepare(spec).condition``; what was asked is :meth:`stated_settings`. An explicit None
    for a resolved setting means "not stated", and ``model_dump`` writes an unstated one as
    None. Every number is checked against its range before anything runs (the ceilings of
    :mod:`controlscope.core`).

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
        seed: the task's data seed (for the student tasks the subset seed).
        source_run: a recorded source run (a completed Keep trajectory of the same task and
            seed) that places a bare ``once`` (the local rule, paper appendix B) or ``midpoint``
            (N = its calls, B.1).
        cache: an SQLite exact-request cache file shared between runs; None for none.
        out: the run directory to write (must not hold a recorded run).
        environment: the environment's name as the run resolves it (a property):
            ``mcpmark:DIR`` or ``taskspec:FILE`` when they are given, else ``env``.
        reviews: whether the condition can review at all (not Keep, not ``never``).

    Raises:
        pydantic.ValidationError: a value out of range or of the wrong form.
    """

    group: ClassVar[str] = "task"
    task: str | None = setting(
        None, "the task id, e.g. student_database/english_talent", shown_default="the only task"
    )
    env: str = setting("filesystem", "the environment")
    mcpmark: Path | None = setting(None, "an MCPMark task folder (or a checkout)")
    state: Path | None = setting(None, "the MCPMark task's initial-state directory")
    task_spec: Path | None = setting(None, "a TOML task spec (any MCP server)")
    allow_network: Flag = setting(False, "a task spec's server may use the network")
    params: dict[str, ParamValue] = Field(default_factory=dict)
    seed: Seed = setting(0, "the task's data seed (student tasks: the subset seed)")
    source_run: Path | None = setting(None, "a recorded run that places a bare once or midpoint")
    cache: Path | None = setting(None, "an SQLite exact-request cache file to use")
    out: Path = setting(description="the run directory to write")

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
    def _sourced(self) -> RunSpec:
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
        return self

    @field_validator("task", "env")
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

    @field_validator(
        "mcpmark", "state", "task_spec", "source_run", "source", "cache", "out", mode="before"
    )
    @classmethod
    def _named_path(cls, value: object) -> object:
        # Path("") is the current folder: a blank (an unset shell variable) must not become it.
        if isinstance(value, str) and not value.strip():
            raise ValueError("an empty path; name a file or folder")
        return value

    def replace(self, **changes: Any) -> RunSpec:
        """A copy with ``changes`` applied and checked like a new spec (``model_copy`` would
        not check them); what the spec left unstated stays unstated.

        Raises:
            pydantic.ValidationError: a changed value is out of range.
        """
        return RunSpec.model_validate({**self.model_dump(), **changes})

    @property
    def reviews(self) -> bool:
        """Whether the condition can review at all (not Keep, not ``never``)."""
        return self.schedule != "never" and self.scope != Scope.KEEP


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
        program: the frozen source program (``spec.source``), read and hashed; None when
            the planner samples it.
    """

    spec: RunSpec
    env: Environment
    task: Task
    condition: Condition
    models: RunModels
    actions: RecordedActions | None = None
    program: SourceProgram | None = None


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
            recording, or models that cannot be built (missing weights or files); a frozen
            source program that cannot be read, is not Python, or differs from the one a
            replayed recording ran (its SHA-256 is compared).
    """
    try:
        _check_paths(spec)
        program = read_source_program(spec.source) if spec.source is not None else None
        env = get_environment(spec.environment)
        if spec.allow_network:
            env = grant_network(env)
        task = _task(spec, env)
        budgets = _budgets(spec, task)
        schedule, source = _placed_schedule(spec, env, task)
        recordings = _recordings(spec)
        for recording in recordings:
            check_replay(recording, spec, task, budgets, schedule, program=program)
        since = recorded_start(recordings[0]) if recordings else None
        models = build_models(
            planner=spec.model,
            reviewer=spec.reviewer_model,
            base_url=spec.base_url,
            cache_path=spec.cache,
            need_reviewer=build_reviewer and spec.reviews,
            normalise=functools.partial(env.normalise_observation, since=since),
        )
        condition = _condition(spec, models, budgets, schedule=schedule, source=source)
        if program is not None:
            frozen_reply(program, condition.planner_format)  # the format can carry it
        actions = None
        planner = _parsed(spec.model)
        if planner is not None and planner.kind == "replay" and planner.path is not None:
            actions = RecordedActions.from_run_dir(
                planner.path, normalise=env.normalise_observation
            )
        _make_out(spec.out)
    except (TaskError, ValueError, FileNotFoundError, ProviderError, WeightsError, CacheError) as e:
        raise SpecError(str(e)) from e
    return PreparedRun(
        spec=spec,
        env=env,
        task=task,
        condition=condition,
        models=models,
        actions=actions,
        program=program,
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


def _parsed(text: str | None) -> ModelSpec | None:
    """The model spec ``text`` names; None when none is given or it names none (building the
    model then says why, in the model factory's words)."""
    if text is None:
        return None
    try:
        return ModelSpec.parse(text)
    except ValueError:
        return None


def _recordings(spec: RunSpec) -> list[Path]:
    """The recordings ``replay:DIR`` models answer from (the planner's first)."""
    parsed = (_parsed(text) for text in (spec.model, spec.reviewer_model))
    return [p.path for p in parsed if p is not None and p.kind == "replay" and p.path is not None]


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
    above = next((p for p in out.parents if os.path.lexists(p)), None)
    if above is not None and not above.is_dir():  # found before any model is built
        raise ValueError(f"out {out} cannot be made: {above} is not a directory")
    cache = spec.cache
    if (
        cache is not None
        and absolute_path(cache).parent == absolute_path(out)
        and cache.name in ("events.jsonl", "summary.json")
    ):
        raise ValueError(f"cache {cache} would overwrite the run's {cache.name}")
    kinds = {p.kind for p in (_parsed(spec.model), _parsed(spec.reviewer_model)) if p}
    if spec.base_url is not None and "openai" not in kinds:
        raise ValueError("base_url applies only to openai:NAME models")


def settings_condition(settings: RunSettings, task: Task, models: RunModels) -> Condition:
    """The condition of a run configured by ``settings`` alone, resolved as :func:`prepare`
    resolves a spec's (an agent's session, :class:`controlscope.Executor`): the task's budgets
    with the settings' overrides, the models' defaults for what the settings leave unstated.

    Args:
        settings: the run settings.
        task: the task (its budgets are the defaults).
        models: the run's models (their kind decides the unstated formats and token caps).

    Returns:
        The condition.

    Raises:
        SpecError: a schedule that is not valid or needs a recorded source run (a bare
            ``once`` or ``midpoint``), or settings the condition refuses.
    """
    try:
        schedule = schedule_name(settings.schedule)
        if needs_source(schedule):
            raise ValueError(
                f"schedule {schedule!r} takes its boundary from a recorded source run; give a "
                "number (once:K, midpoint:N)"
            )
        budgets = _budgets(settings, task)
        return _condition(settings, models, budgets, schedule=schedule, source=None)
    except ValueError as err:
        raise SpecError(str(err)) from err


def _budgets(spec: RunSettings, task: Task) -> TaskBudgets:
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
    spec: RunSettings,
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
    planner = _parsed(spec.model)
    if planner is not None and planner.kind == "replay" and planner.path is not None:
        settings.update(recorded_settings(planner.path))
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
