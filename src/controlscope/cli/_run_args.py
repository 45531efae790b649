"""``controlscope run``'s options, and the :class:`~controlscope.run.RunSpec` they describe: one
option per spec field (generated from its declaration: name, choices, description, range,
default), grouped by the section of settings it belongs to, and the few options that are not
fields (``--students``, ``--param``, ``--quiet``)."""

from __future__ import annotations

import argparse

from controlscope.cli._settings_args import add_settings, key_values, settings_from_args
from controlscope.envs.filesystem.tasks.student_database import MAX_STUDENTS
from controlscope.run import RunSpec
from controlscope.schedule import SCHEDULE_FORMS

__all__ = ["add_arguments", "key_values", "spec_from_args"]

TITLES = {"source_run": "condition", "cache": "planner", "out": "output"}
"""Spec fields shown in another section's group than their own."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``run``'s options, grouped: task, condition, planner, reviewer, budgets,
    execution, output."""
    groups = add_settings(
        parser,
        RunSpec,
        exclude=("params",),
        titles=TITLES,
        extra_help={"schedule": f"forms: {SCHEDULE_FORMS}"},
    )
    task = groups["task"].add_argument
    task(
        "--students",
        type=int,
        default=None,
        help=f"number of students (student tasks; at most {MAX_STUDENTS:,})",
    )
    task("--param", action="append", default=[], metavar="KEY=VALUE", help="a task parameter")
    groups["output"].add_argument("--quiet", action="store_true", help="no live progress")


def spec_from_args(args: argparse.Namespace) -> RunSpec:
    """The :class:`RunSpec` the options describe (only the options given are stated).

    Raises:
        ValueError: a malformed ``--param`` or ``--*-option``.
        pydantic.ValidationError: a value out of range.
    """
    params = key_values("--param", args.param, json_values=False)
    if args.students is not None:
        params["students"] = args.students
    return settings_from_args(args, RunSpec, params=params)
