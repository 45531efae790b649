"""``controlscope tasks``: list an environment's tasks (id, category, python_allowed, params)."""

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
    except TaskError as error:
        print(f"controlscope tasks: {error}", file=sys.stderr)
        return 2
    tasks = env.tasks()
    if args.json:
        print(json.dumps([_row(t) for t in tasks], indent=2))
        return 0
    table = Table(title=escape(f"{env.name}: {len(tasks)} tasks"))
    # A template column only when some task shares its scenario template with others.
    templates = any(t.template != t.id for t in tasks)
    columns = ["id", "category", "python_allowed", *(["template"] if templates else []), "params"]
    for column in columns:
        table.add_column(column)
    for t in tasks:
        params = ", ".join(f"{k}={v}" for k, v in t.params.items())
        cells = [t.id, t.category, str(t.python_allowed), *([t.template] if templates else [])]
        table.add_row(*(escape(c) for c in [*cells, params]))
    # Piped output is not cut to 80 columns.
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    return 0


def _row(task: Task) -> dict[str, object]:
    return {
        "id": task.id,
        "category": task.category,
        "python_allowed": task.python_allowed,
        "template": task.template,
        "params": task.params,
    }
