"""The ``controlscope`` command line: ``run``, ``tasks``, ``model pull``.

Each subcommand's work lives in its own module; this file only parses arguments and dispatches.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

#: subcommand -> "module:function"; each function takes the parsed namespace and returns an exit
#: code, and each module has ``add_arguments(parser)``.
_COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("controlscope.run_cli", "run one task under one scope and schedule, and record it"),
    "tasks": ("controlscope.envs.catalog", "list the tasks of an environment"),
    "model": (
        "controlscope.models.weights",
        "fetch and list the embedded local model's weights (model pull, model list)",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """Return the top-level parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="controlscope",
        description="Run code-writing agents under workflow-revision scopes and record them.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module_name, help_text) in _COMMANDS.items():
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        module.add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``controlscope`` command; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args._module.main(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
