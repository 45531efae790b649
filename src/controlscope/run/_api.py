"""``run_task``: one run from a :class:`~controlscope.run.RunSpec`, the one path the CLI uses."""

from __future__ import annotations

from contextlib import ExitStack

from controlscope.core import ChatModel, Event
from controlscope.review import HumanReviewer, ModelReviewer, Reviewer
from controlscope.run._frozen import FrozenSourcePlanner
from controlscope.run._progress import (
    ProgressOption,
    ProgressTracker,
    TerminalProgress,
    terminal_wanted,
)
from controlscope.run._spec import PreparedRun, RunSpec, SpecError, prepare
from controlscope.run._trajectory import Observer, RunResult, run_trajectory


def run_task(
    spec: RunSpec,
    *,
    reviewer: Reviewer | None = None,
    planner: ChatModel | None = None,
    observer: Observer | None = None,
    progress: ProgressOption = "auto",
) -> RunResult:
    """Run one task under one condition on real parts, and record it in ``spec.out``.

    The same defaults and checks as ``controlscope run`` (which calls this function): the spec
    is prepared (:func:`~controlscope.run.prepare`), the models are built from their specs,
    and the trajectory runs (:func:`~controlscope.run.run_trajectory`).

    Args:
        spec: the run's specification.
        reviewer: a reviewer of your own (a rule, a :class:`~controlscope.review.HumanReviewer`,
            another model setup) in place of the model reviewer built from
            ``spec.reviewer_model``; its proposals are validated against ``spec.scope`` like a
            model's. None with ``spec.reviewer`` ``human:terminal``: a person at this terminal.
        planner: a planner model object in place of the one built from ``spec.model``
            (``spec.model`` still sets the defaults that depend on the model kind).
        observer: called with every event after it is written.
        progress: ``"auto"`` shows a live line (turn, block, calls, reviews, elapsed) on
            standard error when it is a terminal; a callback of yours is called with a
            :class:`~controlscope.run.RunProgress` after every event; None shows nothing.

    Returns:
        The run's summary, verdict, end reason and directory.

    Raises:
        SpecError: the spec cannot run (see :func:`~controlscope.run.prepare`; a person in the
            browser with no reviewer given: :func:`human_reviewer`); nothing ran.
        ReplayMismatch: a ``replay:`` model received a request its recording does not hold, or
            the replay's primitive calls left the recorded ones (``ActionMismatch``: tool,
            final arguments and normalised observation are compared); the run is recorded
            with end reason ``replay_diverged``.
    """
    if reviewer is None and spec.reviewer != "model":
        reviewer = human_reviewer(spec)
    prepared = prepare(spec, build_reviewer=reviewer is None)
    return run_prepared(
        prepared, reviewer=reviewer, planner=planner, observer=observer, progress=progress
    )


def human_reviewer(spec: RunSpec) -> HumanReviewer:
    """The person who reviews ``spec``'s run at this terminal (``reviewer="human:terminal"``).

    Raises:
        SpecError: a person in the browser: the review page must be served, so bring the
            reviewer (``HumanReviewer()``, its desk served by ``view.ViewServer(out,
            desk=reviewer.desk)``) or use ``controlscope run --reviewer human``.
    """
    if spec.reviewer != "human:terminal":
        raise SpecError(
            f"reviewer {spec.reviewer!r} decides on the review page, which this call does not "
            "serve: pass reviewer=HumanReviewer() and serve reviewer.desk with "
            "view.ViewServer(out, desk=reviewer.desk), or use controlscope run --reviewer human"
        )
    return HumanReviewer("terminal", timeout_s=spec.review_timeout_s, label=spec.out.name)


def run_prepared(
    prepared: PreparedRun,
    *,
    reviewer: Reviewer | None = None,
    planner: ChatModel | None = None,
    observer: Observer | None = None,
    progress: ProgressOption = "auto",
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
    with ExitStack() as shown:
        callback = progress
        if progress == "auto":
            callback = shown.enter_context(TerminalProgress()) if terminal_wanted() else None
        observers = [o for o in (observer, _tracker(prepared, callback)) if o is not None]
        return run_trajectory(
            prepared.env,
            prepared.task,
            seed=spec.seed,
            planner=used,
            source_file=program.file if program is not None else None,
            reviewer=chosen,
            condition=prepared.condition,
            out_dir=spec.out,
            observer=_each(observers) if observers else None,
            actions=prepared.actions,
        )


def _tracker(prepared: PreparedRun, callback: ProgressOption) -> Observer | None:
    """An observer feeding ``callback`` the run's progress (None without a callback)."""
    if callback is None or callback == "auto":
        return None
    budget = prepared.condition.budgets.primitive_calls
    return ProgressTracker(prepared.task.id, budget, callback).observe


def _each(observers: list[Observer]) -> Observer:
    """One observer calling each of ``observers`` in order."""

    def observe(event: Event) -> None:
        for observer in observers:
            observer(event)

    return observe
