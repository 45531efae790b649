"""The environment registry and the ``controlscope tasks`` command.

``controlscope tasks [--env filesystem] [--json]`` lists an environment's tasks with id, category,
``python_allowed`` and scenario template (issue 4). Environments are imported lazily, so importing
this module is cheap.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable

from controlscope.core import TaskError
from controlscope.envs._base import Environment

__all__ = ["ENVIRONMENTS", "add_arguments", "environment_names", "get_environment", "main"]

ENVIRONMENTS: dict[str, str] = {
    "filesystem": "controlscope.envs.filesystem.environment:FilesystemEnvironment",
}
"""Environment name -> ``module:factory`` (a zero-argument callable returning the environment)."""


def environment_names() -> list[str]:
    """The registered environment names, sorted."""
    return sorted(ENVIRONMENTS)


def get_environment(name: str) -> Environment:
    """Build the environment called ``name``.

    Raises:
        TaskError: unknown name (the message lists the known ones).
    """
    target = ENVIRONMENTS.get(name)
    if target is None:
        raise TaskError(f"unknown environment {name!r}; known: {', '.join(environment_names())}")
    module_name, _, attr = target.partition(":")
    factory: Callable[[], Environment] = getattr(importlib.import_module(module_name), attr)
    return factory()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``tasks`` subcommand's options to ``parser``."""
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
        rows = [
            {
                "id": t.id,
                "category": t.category,
                "python_allowed": t.python_allowed,
                "template": t.template,
                "params": t.params,
            }
            for t in tasks
        ]
        print(json.dumps(rows, indent=2))
        return 0
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"{env.name}: {len(tasks)} tasks")
    # A template column only when some task shares its scenario template with others.
    templates = any(t.template != t.id for t in tasks)
    columns = ["id", "category", "python_allowed", *(["template"] if templates else []), "params"]
    for column in columns:
        table.add_column(column)
    for t in tasks:
        params = ", ".join(f"{k}={v}" for k, v in t.params.items())
        cells = [t.id, t.category, str(t.python_allowed)]
        table.add_row(*cells, *([t.template] if templates else []), params)
    # Piped output is not cut to 80 columns.
    Console(width=None if sys.stdout.isatty() else 200).print(table)
    return 0
