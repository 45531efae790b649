"""``run_task``: one run from a :class:`~controlscope.run.RunSpec`, the one path the CLI uses."""

from __future__ import annotations

from controlscope.core import ChatModel
from controlscope.review import ModelReviewer, Reviewer
from controlscope.run._frozen import FrozenSourcePlanner
from controlscope.run._spec import PreparedRun, RunSpec, prepare
from controlscope.run._trajectory import Observer, RunResult, run_trajectory


def run_task(
    spec: RunSpec,
    *,
    reviewer: Reviewer | None = None,
    planner: ChatModel | None = None,
    observer: Observer | None = None,
) -> RunResult:
    """Run one task under one condition on real parts, and record it in ``spec.out``.

    The same defaults and checks as ``controlscope run`` (which calls this function): the spec
    is prepared (:func:`~controlscope.run.prepare`), the models are built from their specs,
    and the trajectory runs (:func:`~controlscope.run.run_trajectory`).

    Args:
        spec: the run's specification.
        reviewer: a reviewer of your own (a rule, a human, another model setup) in place of the
            model reviewer built from ``spec.reviewer_model``; its proposals are validated
            against ``spec.scope`` like a model's.
        planner: a planner model object in place of the one built from ``spec.model``
            (``spec.model`` still sets the defaults that depend on the model kind).
        observer: called with every event after it is written (e.g. live progress).

    Returns:
        The run's summary, verdict, end reason and directory.

    Raises:
        SpecError: the spec cannot run (see :func:`~controlscope.run.prepare`); nothing ran.
        ReplayMismatch: a ``replay:`` model received a request its recording does not hold, or
            the replay's primitive calls left the recorded ones (``ActionMismatch``: tool,
            final arguments and normalised observation are compared); the run is recorded
            with end reason ``replay_diverged``.
    """
    prepared = prepare(spec, build_reviewer=reviewer is None)
    return run_prepared(prepared, reviewer=reviewer, planner=planner, observer=observer)


def run_prepared(
    prepared: PreparedRun,
    *,
    reviewer: Reviewer | None = None,
    planner: ChatModel | None = None,
    observer: Observer | None = None,
) -> RunResult:
    """Run a spec already checked by :func:`~controlscope.run.prepare` (see :func:`run_task`).

    A frozen source program (``spec.source``) is the planner's first reply
    (:class:`~controlscope.run.FrozenSourcePlanner`; a ``replay:`` planner answers it from its
    recording, checked against the program's hash by :func:`~controlscope.run.prepare`).

    Raises:
        ReplayMismatch: as :func:`run_task`.
    """
    spec, models = prepared.spec, prepared.models
    chosen: Reviewer | None = reviewer
    if chosen is None and models.reviewer is not None:
        chosen = ModelReviewer(models.reviewer)
    program = prepared.program
    used = planner or models.planner
    if program is not None and prepared.actions is None:
        used = FrozenSourcePlanner(used, program, prepared.condition.planner_format)
    return run_trajectory(
        prepared.env,
        prepared.task,
        seed=spec.seed,
        planner=used,
        source_file=program.file if program is not None else None,
        reviewer=chosen,
        condition=prepared.condition,
        out_dir=spec.out,
        observer=observer,
        actions=prepared.actions,
    )
