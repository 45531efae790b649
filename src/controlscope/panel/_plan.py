"""A panel's plan: its configuration resolved against the environment into units and runs.

The paired unit is a task-source-program instance (paper section 3.2): one task with its
parameters and data seed, one source program. Each unit has one Keep run, which samples the
source program (the planner's draw is the source-program index) and is reused by every
reviewer draw (paper section 4, A.5), and one run per reviewing scope and draw, which starts
from the Keep run's state: whole from the initial state with planning shared through the
exact-request cache, or branched from the Keep run's recorded prefix. A unit whose source
program is frozen (the panel's ``source``) reads it from its file in every one of its runs.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
)

from controlscope._extras import MissingExtra, require_extra
from controlscope.core import (
    ClusterBy,
    ProviderError,
    Scope,
    Task,
    TaskError,
    read_source_program,
)
from controlscope.envs import Environment, get_environment
from controlscope.models import CacheError, WeightsError
from controlscope.panel._config import ConfigError, PanelConfig
from controlscope.run import RunSpec, build_models
from controlscope.schedule import needs_source

DEFAULT_TEMPERATURE = 0.7
"""The sampling temperature of both roles unless set (paper section 4)."""

KEEP = "keep"
"""The Keep scope's name: every unit's baseline and source trajectory."""


class PlannedRun(BaseModel):
    """One run of a panel.

    Attributes:
        id: its path under the panel's ``runs/`` (``TASK/sSEED/pSOURCE/SCOPE-dDRAW``, the
            Keep run ``.../keep``).
        unit: its paired unit (``TASK/sSEED/pSOURCE``).
        task: the task id.
        category: the task's category.
        template: the task's scenario template.
        params: the task's parameters.
        seed: the task's data seed.
        source_program: the source-program index (P1 = 0).
        scope: the granted scope.
        draw: the reviewer draw (0 for Keep, which is reused by every draw).
        after: the run it starts from (the unit's Keep run); None for the Keep run.
        source_file: the unit's frozen source program (an absolute path); None when the
            planner samples it.
    """

    model_config = ConfigDict(frozen=True)
    id: str
    unit: str
    task: str
    category: str
    template: str
    params: dict[str, Any]
    seed: int
    source_program: int
    scope: str
    draw: int
    after: str | None = None
    source_file: str | None = None

    @model_serializer(mode="wrap")
    def _sampled_source_unwritten(self, handler: SerializerFunctionWrapHandler) -> Any:
        # a sampled source program is written as before frozen ones existed: manifests of
        # earlier panels are read, and written, unchanged
        data = handler(self)
        if isinstance(data, dict) and data.get("source_file") is None:
            data.pop("source_file", None)
        return data


class PanelPlan(BaseModel):
    """Every run of a panel, Keep runs first.

    Attributes:
        runs: the runs, each id once.
        cluster: what the report's bootstrap resamples (``category``, ``template``, ``task``).
    """

    model_config = ConfigDict(frozen=True)
    runs: tuple[PlannedRun, ...]
    cluster: ClusterBy

    @field_validator("runs")
    @classmethod
    def _one_folder_per_run(cls, runs: tuple[PlannedRun, ...]) -> tuple[PlannedRun, ...]:
        """Each run's id (its folder) is its own: one folder is never read for two runs."""
        counts = Counter(r.id for r in runs)
        twice = sorted(run_id for run_id, n in counts.items() if n > 1)
        if twice:
            raise ValueError(f"run ids appear more than once: {twice[:3]}")
        return runs

    @property
    def units(self) -> list[str]:
        """The paired units, in order."""
        return list(dict.fromkeys(r.unit for r in self.runs))

    def by_id(self) -> dict[str, PlannedRun]:
        """The runs by id."""
        return {r.id: r for r in self.runs}


def plan_panel(config: PanelConfig, *, check_models: bool = True) -> PanelPlan:
    """Resolve ``config`` against its environment: tasks, parameters, models; nothing runs.

    Args:
        config: the checked configuration.
        check_models: build the models once (a missing weights file or script, an unknown
            spec) before any run starts.

    Returns:
        The plan.

    Raises:
        ConfigError: an unknown environment, an environment that cannot list its tasks (its
            data missing: its own message), an unknown task or category, parameters a task
            refuses, a parameter key that names no selected task or category, no task left,
            a model that cannot be built, the ``ray`` backend without the ``ray`` extra, or
            a frozen source program that is missing, unreadable or not Python, or a
            ``source`` table key that names no selected task.
    """
    if config.execution.backend == "ray":
        try:
            require_extra("ray", "ray", "the panel's ray backend")
        except MissingExtra as err:
            raise ConfigError(f"execution.backend: {err}") from None
    try:
        env = get_environment(config.env)
    except ValueError as err:
        raise ConfigError(f"env: {err}") from None
    tasks = [_with_params(env, task, config) for task in _selected(env, config)]
    _unused_params(config, tasks)
    if check_models:
        _check_models(config)
    files = _source_files(config, tasks)
    runs: list[PlannedRun] = []
    for task in tasks:
        for seed in config.seeds:
            for source in config.source_indices:
                runs.extend(_unit_runs(config, task, seed, source, files.get((task.id, source))))
    keep_first = sorted(runs, key=lambda r: r.scope != KEEP)
    cluster = config.cluster or env.cluster_by
    return PanelPlan(runs=tuple(keep_first), cluster=cluster)


def _selected(env: Environment, config: PanelConfig) -> list[Task]:
    try:
        known = env.tasks()
    except TaskError as err:  # the environment's own message: data missing (ALFWorld, AppWorld)
        raise ConfigError(f"env {config.env}: {err}") from None
    by_id = {t.id: t for t in known}
    categories = sorted({t.category for t in known})
    if config.tasks == "all":
        chosen = list(known)
    else:
        chosen = []
        for i, name in enumerate(n.strip() for n in config.tasks):
            if name in by_id:
                chosen.append(by_id[name])
            elif name in categories:
                chosen.extend(t for t in known if t.category == name)
            elif "=" in name:
                chosen.extend(_with_metadata(known, name, f"tasks[{i}]"))
            else:
                raise ConfigError(
                    f"tasks[{i}]: unknown task or category {name!r} in {config.env}; "
                    f"categories: {', '.join(categories)} (controlscope tasks lists the ids)"
                )
    for i, name in enumerate(config.exclude):
        if name not in by_id:
            raise ConfigError(f"exclude[{i}]: unknown task {name!r}")
    unique = list({t.id: t for t in chosen}.values())
    left = [t for t in unique if t.id not in config.exclude]
    if config.python_allowed_only:
        left = [t for t in left if t.python_allowed]
    if not left:
        raise ConfigError("tasks: no task left (after exclude and python_allowed_only)")
    return left


def _with_metadata(known: list[Task], selector: str, where: str) -> list[Task]:
    """The tasks whose metadata ``KEY`` is ``VALUE`` (``selector`` is ``KEY=VALUE``, compared
    as text): an environment's own groups, ALFWorld's ``cohort=valid_seen`` (outside the
    excluded scenes, as the environment lists them) or the apps' ``split=test_normal``.

    Raises:
        ConfigError: no task has that value; the message names the values there are.
    """
    key, _, value = (part.strip() for part in selector.partition("="))
    found = [t for t in known if key in t.metadata and str(t.metadata[key]) == value]
    if not found:
        values = sorted({str(t.metadata[key]) for t in known if key in t.metadata})
        there = f"values of {key!r}: {', '.join(values)}" if values else f"no task has {key!r}"
        raise ConfigError(f"{where}: no task has {key} = {value!r} ({there})")
    return found


def _with_params(env: Environment, task: Task, config: PanelConfig) -> Task:
    params = {**config.params.get(task.category, {}), **config.params.get(task.id, {})}
    try:
        return env.task(task.id, **params)
    except (TaskError, TypeError, ValueError) as err:
        raise ConfigError(f"params of {task.id}: {err}") from None


def _unused_params(config: PanelConfig, tasks: list[Task]) -> None:
    names = {t.id for t in tasks} | {t.category for t in tasks}
    for key in config.params:
        if key not in names:
            raise ConfigError(f"params.{key}: names no selected task or category")


def _check_models(config: PanelConfig) -> None:
    try:
        build_models(
            planner=config.planner.model,
            reviewer=config.reviewer.model,
            base_url=config.planner.base_url,
            need_reviewer=bool(config.reviewing_scopes),
        )
    except (ValueError, FileNotFoundError, ProviderError, WeightsError, CacheError) as err:
        raise ConfigError(f"planner.model / reviewer.model: {err}") from None


def _source_files(config: PanelConfig, tasks: list[Task]) -> dict[tuple[str, int], str]:
    """The frozen source program of each (task id, source index) the panel's ``source`` names,
    each read once to check it.

    Raises:
        ConfigError: a table key that names no selected task, a list too short for the
            panel's source indices, a folder or program that is missing, unreadable or not
            Python (the key is named).
    """
    given = config.source
    if given is None:
        return {}
    found: dict[tuple[str, int], str] = {}
    if isinstance(given, str):
        if not Path(given).is_dir():
            raise ConfigError(f"source: {given} is not a folder of source programs")
        for task in tasks:
            for index in config.source_indices:
                name = f"{task.id}.py" if index == 0 else f"{task.id}.p{index + 1}.py"
                found[(task.id, index)] = str(Path(given) / name)
    else:
        names = {t.id for t in tasks}
        for key, files in given.items():
            if key not in names:
                raise ConfigError(f"source.{key}: names no selected task")
            listed = [files] if isinstance(files, str) else files
            for index in config.source_indices:
                if index >= len(listed):
                    raise ConfigError(
                        f"source.{key}: {len(listed)} program(s) for source index {index} "
                        "(P1 = 0); give one file per source program"
                    )
                found[(key, index)] = listed[index]
    for (task_id, _), path in found.items():
        try:
            read_source_program(path)
        except ValueError as err:
            raise ConfigError(f"source of {task_id}: {err}") from None
    return found


def _unit_runs(
    config: PanelConfig, task: Task, seed: int, source: int, source_file: str | None
) -> list[PlannedRun]:
    unit = f"{task.id}/s{seed}/p{source}"
    common: dict[str, Any] = {
        "unit": unit,
        "task": task.id,
        "category": task.category,
        "template": task.template,
        "params": dict(task.params),
        "seed": seed,
        "source_program": source,
        "source_file": source_file,
    }
    keep_id = f"{unit}/{KEEP}"
    runs = [PlannedRun(id=keep_id, scope=KEEP, draw=0, **common)]
    for scope in config.reviewing_scopes:
        for draw in range(config.draws):
            run_id = f"{unit}/{scope}-d{draw}"
            runs.append(PlannedRun(id=run_id, scope=scope, draw=draw, after=keep_id, **common))
    return runs


def run_spec(config: PanelConfig, run: PlannedRun, *, out: Path, source: Path | None) -> RunSpec:
    """The :class:`RunSpec` of a whole run of the panel (the Keep run, or a reviewing scope
    under a ``whole`` start); a branch's condition is its Keep run's with the scope, draw and
    schedule changed (:func:`controlscope.replay.run_branch`).

    Args:
        config: the panel's configuration.
        run: the run.
        out: its run directory.
        source: the unit's Keep run, which places a bare ``once`` or ``midpoint`` of a
            reviewing scope (ignored otherwise).

    Raises:
        pydantic.ValidationError: a value out of range (checked with the config already).
    """
    given = config.settings().stated()
    if "temperature" in given and "planner_temperature" not in given:
        given["planner_temperature"] = DEFAULT_TEMPERATURE  # the reviewer's is not the planner's
    schedule = config.schedule
    source_run = None
    if needs_source(schedule):
        if run.scope == KEEP:
            schedule = "never"
        else:
            source_run = source
    if run.scope == KEEP and config.start != "whole":
        schedule = "never"
    given.update(
        schedule=schedule,
        source_run=source_run,
        scope=Scope[run.scope.upper()],
        draw=run.draw,
        source_program=run.source_program,
        source=Path(run.source_file) if run.source_file is not None else None,
    )
    return RunSpec(
        **given, task=run.task, env=config.env, params=run.params, seed=run.seed, out=out
    )


def condition_label(scope: str, draw: int, draws: int) -> str:
    """A condition's name in progress and reports: the scope (``keep``, ``arg``...), with its
    draw (``full-d1``) when the panel has more than one."""
    return scope if scope == KEEP or draws == 1 else f"{scope}-d{draw}"
