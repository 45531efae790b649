"""A replay repeats its recording's condition: what a ``replay:DIR`` model spec is checked for.

A replay answers every model request from a recorded run, so it only makes sense under the
recorded run's task, parameters, seed and condition; the request settings it does not state are
taken from the recording, so the replayed requests can match the recorded ones.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from controlscope.core import (
    EVENTS_FILE,
    REQUEST_SETTINGS,
    Lattice,
    ReplaceBoundary,
    RunEndEvent,
    RunStartEvent,
    Scope,
    SourceProgram,
    Task,
    TaskBudgets,
    View,
    changed_data,
)
from controlscope.record import read_events
from controlscope.schedule import schedule_name

REPLAYED_SETTINGS = (*REQUEST_SETTINGS, "view_limits", "review_fallback", "reviewer_protocol")
"""Run settings that shape model requests: a replay takes them from the recorded run unless the
spec states them (and then they must match)."""


class ReplayOptions(Protocol):
    """What :func:`check_replay` reads of a replay's specification (a
    :class:`~controlscope.run.RunSpec` has it all)."""

    @property
    def seed(self) -> int:
        """The task's data seed."""

    @property
    def scope(self) -> Scope:
        """The granted scope."""

    @property
    def lattice(self) -> Lattice:
        """The lattice."""

    @property
    def view(self) -> View:
        """The reviewer's view."""

    @property
    def replace_boundary(self) -> ReplaceBoundary:
        """What a replacement replaces."""

    def stated_settings(self) -> dict[str, Any]:
        """The request-shaping settings the spec states, in the condition's terms."""


def _recording(run_dir: Path) -> RunStartEvent:
    """A recorded run's ``run_start``.

    Raises:
        FileNotFoundError: no log in ``run_dir``.
        ValueError: the log has no ``run_start``, or it is a replay that diverged.
    """
    if not (run_dir / EVENTS_FILE).exists():
        raise FileNotFoundError(f"no recorded run at {run_dir} ({EVENTS_FILE} is missing)")
    events = read_events(run_dir)
    start = next((e for e in events if isinstance(e, RunStartEvent)), None)
    if start is None:
        raise ValueError(f"the log in {run_dir} has no run_start event")
    if any(isinstance(e, RunEndEvent) and e.end_reason == "replay_diverged" for e in events):
        raise ValueError(
            f"{run_dir} holds a replay that diverged from its recording; replay the original run"
        )
    return start


def recorded_settings(run_dir: Path) -> dict[str, Any]:
    """The request settings of a recorded run (:data:`REPLAYED_SETTINGS` of its condition).

    Raises:
        FileNotFoundError, ValueError: see :func:`check_replay`.
    """
    config = _recording(run_dir).config
    return {k: config[k] for k in REPLAYED_SETTINGS if k in config}


def recorded_start(run_dir: Path) -> float:
    """When the recorded run started (its ``run_start`` time, seconds since the epoch): what
    separates the clock readings of that run from the times its task set (paper A.4).

    Raises:
        FileNotFoundError, ValueError: see :func:`check_replay`.
    """
    return _recording(run_dir).t


def check_replay(
    run_dir: Path,
    spec: ReplayOptions,
    task: Task,
    budgets: TaskBudgets,
    schedule: str,
    *,
    program: SourceProgram | None = None,
) -> None:
    """Refuse a replay whose condition differs from the recorded run's.

    Compared: the task id and parameters, its files' hashes (users' own tasks), the seed,
    scope, lattice, schedule (canonical, as placed), view, replacement boundary, the four
    budgets (repairs included), those of :data:`REPLAYED_SETTINGS` that the spec states, and
    a frozen source program the spec gives with the one the recording ran (its SHA-256: a
    program edited since the recording is refused).

    Args:
        run_dir: the recorded run.
        spec: the replay's specification.
        task: the replay's task (with parameters).
        budgets: the replay's budgets.
        schedule: the replay's schedule, a bare ``once``/``midpoint`` placed from its source.
        program: the replay's frozen source program, if it gives one.

    Raises:
        FileNotFoundError: ``run_dir`` holds no log.
        ValueError: naming every setting whose value differs from the recording, with both
            values; or the recording is itself a replay that diverged.
    """
    start = _recording(run_dir)
    recorded = _recorded_options(start)
    given: dict[str, object] = {
        "task": task.id,
        "params": dict(task.params),
        "seed": spec.seed,
        "scope": spec.scope.name.lower(),
        "lattice": spec.lattice,
        "schedule": schedule,
        "view": spec.view,
        "replace_boundary": spec.replace_boundary,
        "max_calls": budgets.primitive_calls,
        "max_turns": budgets.planning_turns,
        "max_seconds": budgets.execution_seconds,
        "max_repairs": budgets.repairs,
        **spec.stated_settings(),
    }
    differ = [
        f"{name} (recorded {recorded[name]!r}, given {value!r})"
        for name, value in given.items()
        if name in recorded and recorded[name] != value
    ]
    changed = changed_data(start.task, task)
    if changed:
        differ.append(f"the task's files ({', '.join(changed)} changed since the recording)")
    if program is not None:
        differ.extend(_source_differs(start, program))
    if differ:
        raise ValueError(
            f"the replay's options differ from the recorded run in {run_dir}: "
            + "; ".join(differ)
            + ". A replay repeats the recorded run's options."
        )


def _source_differs(start: RunStartEvent, program: SourceProgram) -> list[str]:
    """How a replay's frozen source program differs from the recording's (empty: it does
    not)."""
    recorded = start.source_file
    if recorded is None:
        return [f"source_file (recorded none: the planner sampled it, given {program.file.path})"]
    if recorded.sha256 != program.file.sha256:
        return [
            f"source_file.sha256 (recorded {recorded.sha256[:12]}…, given "
            f"{program.file.sha256[:12]}… in {program.file.path}: the program was edited "
            "since the recording)"
        ]
    return []


def _recorded_options(start: RunStartEvent) -> dict[str, object]:
    """A recording's options, named as :func:`check_replay` compares them."""
    settings = {k: start.config[k] for k in REPLAYED_SETTINGS if k in start.config}
    if "view_limits" in settings and settings["view_limits"] is None:
        settings["view_limits"] = "complete"
    return {
        "task": start.task.id,
        "params": dict(start.task.params),
        "seed": start.seed,
        "scope": start.scope.name.lower(),
        "lattice": start.lattice,
        "schedule": _canonical(start.schedule),
        "view": start.view,
        "replace_boundary": start.replace_boundary,
        "max_calls": start.budgets.primitive_calls,
        "max_turns": start.budgets.planning_turns,
        "max_seconds": start.budgets.execution_seconds,
        "max_repairs": start.budgets.repairs,
        **settings,
    }


def _canonical(schedule: str) -> str:
    try:
        return schedule_name(schedule)
    except ValueError:
        return schedule
