"""The ``controlscope`` command: ``run``, ``replay``, ``branch``, ``panel``, ``experiment``,
``report``, ``view``, ``tasks``, ``model``, ``clean``, ``serve``, ``setup``,
``export``.

Each verb lives in its own module, which only parses its arguments, calls the library and prints
(the library does the work: :func:`controlscope.run_task` for ``run``). Exit status: 0 on
success, 2 on bad input (one line on stderr, before anything runs), others per verb. A request
that needs an optional extra this installation lacks (``local``, ``ray``, ``alfworld``) is bad
input in every verb: one line naming the ``pip install`` to run, exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
from collections.abc import Sequence
from types import FrameType

from controlscope._extras import MissingExtra
from controlscope.core import escape_untrusted

#: verb -> (module, help); each module has ``add_arguments(parser)`` and ``main(args) -> int``.
_COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("controlscope.cli._run", "run one task under one scope and schedule, and record it"),
    "replay": (
        "controlscope.cli._replay",
        "replay a recorded run (whole or to a boundary, checked), or one recorded operation frozen",
    ),
    "branch": (
        "controlscope.cli._branch",
        "branches from one recorded prefix: one per scope and reviewer draw, same (h, s)",
    ),
    "panel": (
        "controlscope.cli._panel",
        "run or resume a paired panel: tasks x source programs x scopes x reviewer draws",
    ),
    "experiment": (
        "controlscope.cli._experiment",
        "the paper's experiments: experiment list; experiment NAME [--size] [--model ROLE=SPEC]",
    ),
    "report": (
        "controlscope.cli._report",
        "a panel's report: successes, Table 1, paired differences with intervals, figures",
    ),
    "view": (
        "controlscope.cli._view",
        "a run, a branch set, a panel or a folder of runs in the browser (or as static pages)",
    ),
    "tasks": ("controlscope.cli._tasks", "list the tasks of an environment"),
    "model": (
        "controlscope.cli._model",
        "fetch and list the embedded local model's weights (model pull, model list)",
    ),
    "clean": (
        "controlscope.cli._clean",
        "remove the workspaces and directories that killed runs left behind (--dry-run)",
    ),
    "serve": (
        "controlscope.cli._serve",
        "an MCP server with one tool, execute_python, whose code runs reviewed (stdio or HTTP)",
    ),
    "export": (
        "controlscope.cli._export",
        "runs, sessions or a panel as an Inspect AI eval log (--format inspect --out FILE.eval)",
    ),
    "setup": (
        "controlscope.cli._setup",
        "install the pinned MCP filesystem server into the user's cache with npm (--weights: "
        "and fetch the embedded model's weights)",
    ),
}


class _ArgumentParser(argparse.ArgumentParser):
    """argparse with its errors as one line and exit status 2 (no usage dump); what the
    message quotes of the command line (an unrecognized argument) is escaped, so it cannot
    break the line or drive the terminal."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: {escape_untrusted(message)}\n")


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser with every verb registered.

    Args:
        verb: the verb the command line names, when known: only its module is imported and
            its options registered (the others are listed by name and help), so a command
            does not pay for every verb's imports. None: every verb's options.
    """
    parser = _ArgumentParser(
        prog="controlscope",
        description="Run code-writing agents under workflow-revision scopes and record them.",
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_ArgumentParser)
    for name, (module_name, help_text) in _COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if verb is None or name == verb:
            module = importlib.import_module(module_name)
            module.add_arguments(p)
            p.set_defaults(_module=module)
    return parser


def _verb(argv: Sequence[str]) -> str | None:
    """The verb ``argv`` names (its first word not an option) when it is one, else None."""
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in _COMMANDS else None


def _terminate(signum: int, frame: FrameType | None) -> None:
    """SIGTERM ends the command like Ctrl-C, so every clean-up runs (processes, workspace)."""
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``controlscope`` command; returns the process exit status."""
    try:
        words = sys.argv[1:] if argv is None else list(argv)
        args = build_parser(_verb(words)).parse_args(words)
    except SystemExit as stop:  # a bad option (one line printed), or --help
        return stop.code if isinstance(stop.code, int) else 2
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        code: int = args._module.main(args)
    except MissingExtra as err:  # one line whatever the verb: the pip install to run
        print(f"controlscope {args.command}: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("controlscope: interrupted", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)
    return code
