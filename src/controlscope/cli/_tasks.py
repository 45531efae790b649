"""``controlscope tasks``: list an environment's tasks (id, category, python_allowed, params,
and the short facts of their metadata: ALFWorld's cohort, task type and scene)."""

from __future__ import annotations

import argparse
import json
import sys

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from controlscope.core import Task, TaskError
from controlscope.envs import environment_names, get_environment


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``tasks`` verb's options to ``parser``."""
    parser.add_argument(
        "--env",
        default="filesystem",
        help=f"environment to list (default: filesystem; known: {', '.join(environment_names())})",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON array instead of a table")


def main(args: argparse.Namespace) -> int:
    """List the tasks of ``args.env``; return 0, or 2 for an unknown environment."""
    try:
        env = get_environment(args.env)
        tasks = env.tasks()
    except TaskError as error:  # an unknown environment, or its data is missing
        print(f"controlscope tasks: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([_row(t) for t in tasks], indent=2))
        return 0
    table = Table(title=escape(f"{env.name}: {len(tasks)} tasks"))
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
        table.add_row(*(escape(c) for c in [*cells, params]))
    # Piped output is not cut to 80 columns.
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    return 0


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
