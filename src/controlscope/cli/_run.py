"""``controlscope run``: one task under one scope and schedule, on real parts, recorded.

Parses the options into a :class:`~controlscope.run.RunSpec`, calls the library as
:func:`~controlscope.run.run_task` does (prepare, then run) and prints the verdict. Exit
status: 0 when the run completed, whatever its verdict; 2 on bad input (one line, before any
model is called); 1 when a replay diverged from its recording; 3 when the planner's model
failed; 4 when another part failed unexpectedly (both recorded and graded as they stand,
paper A.4); 130 when interrupted (recorded, not graded).
"""

from __future__ import annotations

import argparse
import contextlib

from pydantic import ValidationError
from rich.console import Console

from controlscope.cli._console import fail, inert, one_line
from controlscope.cli._run_args import add_arguments, spec_from_args
from controlscope.core import OPERATIONS, TaskError
from controlscope.models import ReplayMismatch
from controlscope.review import HumanReviewer
from controlscope.run import (
    PreparedRun,
    RunResult,
    RunSpec,
    SpecError,
    human_reviewer,
    prepare,
    run_prepared,
)

__all__ = ["add_arguments", "main", "spec_from_args"]

_DIVERGED_HELP = (
    "The options matched the recording, so the requests or the actions changed: the recording "
    "was made by code that prompts, shows, schedules or executes differently, the block drew on "
    "something no seed controls (the clock, os.urandom), or the environment answered "
    "differently. The diverged replay's log is in {out}; replay again into a new --out directory."
)


def main(args: argparse.Namespace) -> int:
    """Run one task; return the exit status (see the module docstring)."""
    console = Console(stderr=True, soft_wrap=True)
    try:
        spec = spec_from_args(args)
        person = spec.reviewer != "model"
        prepared = prepare(spec, build_reviewer=not person)  # every check before any model
    except ValidationError as err:
        return fail(console, "run", one_line(err), 2)
    except (ValueError, SpecError) as err:
        return fail(console, "run", str(err), 2)
    with contextlib.ExitStack() as stack:
        try:
            reviewer = _person(spec, stack, console) if person and spec.reviews else None
        except ValueError as err:  # the review page cannot listen (ViewError)
            return fail(console, "run", str(err), 2)
        return _run(args, spec, prepared, reviewer, console)


def _person(spec: RunSpec, stack: contextlib.ExitStack, console: Console) -> HumanReviewer:
    """The person who reviews: at this terminal, or at the review page, served for the run's
    duration on loopback (its address, with the run's secret, printed)."""
    if spec.reviewer == "human:terminal":
        return human_reviewer(spec)
    from controlscope.view import ViewServer

    reviewer = HumanReviewer("browser", timeout_s=spec.review_timeout_s, label=spec.out.name)
    server = stack.enter_context(ViewServer(spec.out, desk=reviewer.desk))
    console.print(f"review page: {server.review_url}", markup=False, highlight=False)
    return reviewer


def _run(
    args: argparse.Namespace,
    spec: RunSpec,
    prepared: PreparedRun,
    reviewer: HumanReviewer | None,
    console: Console,
) -> int:
    """Run the prepared spec with live progress; print the result; the exit status."""
    quiet = args.quiet or spec.reviewer == "human:terminal"  # the terminal is the person's
    try:  # a live line on standard error when it is a terminal (not with --quiet)
        result = run_prepared(prepared, reviewer=reviewer, progress=None if quiet else "auto")
    except (TaskError, SpecError) as err:
        return fail(console, "run", str(err), 2)
    except ReplayMismatch as err:
        fail(console, "run", f"the replay diverged from the recording: {err}", 1)
        console.print(inert(_DIVERGED_HELP.format(out=spec.out), lines=True))
        return 1
    except OSError as err:
        return fail(console, "run", str(err), 1)
    _print_result(spec, result)
    for warning in result.warnings:  # also in the log's run_start
        console.print(f"controlscope run: warning: {inert(warning)}")
    if result.end_reason == "planner_provider_error":
        return fail(console, "run", f"the planner's model failed: {result.detail}", 3)
    if result.end_reason == "error":
        return fail(console, "run", f"the run failed (recorded): {result.detail}", 4)
    return 0


def _print_result(spec: RunSpec, result: RunResult) -> None:
    s = result.summary
    verdict = "PASS" if result.verdict.success else "FAIL"
    out = Console(soft_wrap=True)
    revisions = "".join(
        f"{getattr(s, op.counter)} {op.label}, " for op in OPERATIONS if op.counter is not None
    )
    out.print(
        f"{inert(result.verdict.task_id)} seed={spec.seed} scope={spec.scope.name.lower()} "
        f"schedule={inert(spec.schedule)}: [bold]{verdict}[/bold] ({result.end_reason}; "
        f"{s.primitive_calls} calls, {s.planning_turns} turns, {s.reviews} reviews, "
        f"{revisions}{s.rejected_proposals} rejected)"
    )
    if result.detail:  # why it ended, when not by a final answer (a server that failed...)
        out.print(f"  why: {inert(result.detail, lines=True)}")
    for check in result.verdict.checks:
        mark = "ok " if check.passed else "bad"
        out.print(f"  {mark} {inert(check.name)}: {inert(check.reason, lines=True)}")
    out.print(f"log: {inert(str(spec.out / 'events.jsonl'))}")
