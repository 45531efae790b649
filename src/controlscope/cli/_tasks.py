"""``controlscope tasks``: list an environment's tasks (id, category, python_allowed, params,
and the short facts of their metadata: ALFWorld's cohort, task type and scene; an MCPMark
task's difficulty, the state it needs and whether it was found; an app task's split,
difficulty, instance and answer kind), and the folders an environment could not read."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.table import Table

from controlscope.cli._console import fail, inert
from controlscope.core import Task, TaskError
from controlscope.envs import environment_names, get_environment


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``tasks`` verb's options to ``parser``."""
    parser.add_argument(
        "--env",
        default="filesystem",
        help=f"environment to list (default: filesystem; known: {', '.join(environment_names())})",
    )
    parser.add_argument(
        "--mcpmark", default=None, metavar="ROOT", help="list the MCPMark task folders under ROOT"
    )
    parser.add_argument("--task-spec", default=None, metavar="FILE", help="list its tasks")
    parser.add_argument("--json", action="store_true", help="print a JSON array instead of a table")


def main(args: argparse.Namespace) -> int:
    """List the tasks of ``args.env`` (or of ``--mcpmark``, ``--task-spec``); return 0, or 2
    for an unknown environment or one whose tasks cannot be read."""
    name = args.env
    errors = Console(stderr=True, soft_wrap=True)
    if args.mcpmark is not None and args.task_spec is not None:
        return fail(errors, "tasks", "give --mcpmark or --task-spec, not both", 2)
    if args.mcpmark is not None:
        name = f"mcpmark:{args.mcpmark}"
    elif args.task_spec is not None:
        name = f"taskspec:{args.task_spec}"
    try:
        env = get_environment(name)
        tasks = env.tasks()
    except TaskError as error:  # an unknown environment, or its data is missing
        return fail(errors, "tasks", str(error), 2)
    # Folders that look like tasks but cannot be read (an MCPMark folder without verify.py).
    for problem in env.problems:
        errors.print(f"[yellow]skipped: {inert(problem)}[/yellow]")
    if args.json:
        print(json.dumps([_row(t) for t in tasks], indent=2))
        return 0
    table = Table(title=inert(f"{env.name}: {len(tasks)} tasks"))
    # A template column only when some task shares its scenario template with others.
    templates = any(t.template != t.id for t in tasks)
    facts = _short_facts(tasks)
    columns = ["id", "category", "python_allowed", *(["template"] if templates else [])]
    for column in [*columns, *facts, "params"]:
        table.add_column(column)
    for t in tasks:
        params = ", ".join(f"{k}={v}" for k, v in t.params.items())
        cells = [t.id, t.category, str(t.python_allowed), *([t.template] if templates else [])]
        cells += [str(t.metadata.get(k, "")) for k in facts]
        table.add_row(*(inert(c) for c in [*cells, params]))
    # Piped output is not cut to 80 columns.
    console = Console(width=None if sys.stdout.isatty() else 200)
    console.print(table)
    missing = _missing_states(tasks)
    if missing:
        console.print(inert(f"states missing: {missing}"))
    return 0


def _missing_states(tasks: list[Task]) -> str:
    """The initial states that tasks need and that were not found (MCPMark's ``state`` and
    ``state_found``), with how many tasks need each; empty when none is missing."""
    needed: dict[str, int] = {}
    for t in tasks:
        if t.metadata.get("state_found") is False:
            name = str(t.metadata.get("state", "?"))
            needed[name] = needed.get(name, 0) + 1
    if not needed:
        return ""
    listed = ", ".join(f"{n} ({k} task{'s' * (k > 1)})" for n, k in sorted(needed.items()))
    return (
        f"{listed}; unpack MCPMark's state archives into test_environments/ of the checkout, "
        "or give a state's directory with --state"
    )


def _short_facts(tasks: list[Task]) -> list[str]:
    """The metadata keys whose values are short text or numbers in every task (a column
    each); long values (paths) and lists stay in ``--json``."""
    keys: list[str] = list(tasks[0].metadata) if tasks else []
    return [
        k
        for k in keys
        if all(
            isinstance(t.metadata.get(k), str | int) and len(str(t.metadata[k])) <= 40
            for t in tasks
        )
    ]


def _row(task: Task) -> dict[str, object]:
    return {
        "id": task.id,
        "category": task.category,
        "python_allowed": task.python_allowed,
        "template": task.template,
        "params": task.params,
        "metadata": task.metadata,
    }
