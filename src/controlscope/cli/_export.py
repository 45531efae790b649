"""``controlscope export RUN_DIR|PANEL_DIR|SESSION_DIR --format inspect --out FILE.eval``: runs
in another tool's format.

Calls :func:`controlscope.export.export_inspect` (the same function as from Python) and prints
the log written and how many runs it holds. Exit status: 0; 2 on bad input (not a run, session
or panel folder, an unreadable log, an output that cannot be written, the ``inspect`` extra
missing: one line).
"""

from __future__ import annotations

import argparse

from rich.console import Console

from controlscope.cli._console import fail, inert, path_option
from controlscope.export import ExportError, export_inspect


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``export``'s options."""
    parser.add_argument(
        "path",
        type=path_option,
        metavar="RUN_DIR|PANEL_DIR|SESSION_DIR",
        help="a run directory, an executor's session directory or a panel folder",
    )
    parser.add_argument(
        "--format",
        choices=("inspect",),
        required=True,
        help="inspect: an Inspect AI eval log, one sample per run (extra 'inspect')",
    )
    parser.add_argument(
        "--out", type=path_option, required=True, help="the log to write (FILE.eval or FILE.json)"
    )


def main(args: argparse.Namespace) -> int:
    """Write the log; return the exit status (see the module docstring)."""
    console = Console(stderr=True, soft_wrap=True)
    try:
        written = export_inspect(args.path, args.out)
    except ExportError as err:
        return fail(console, "export", str(err), 2)
    from inspect_ai.log import read_eval_log

    header = read_eval_log(str(written), header_only=True)
    count = header.results.total_samples if header.results is not None else 0
    left = len(header.eval.metadata.get("not_exported") or {}) if header.eval.metadata else 0
    note = f"; {left} not exported (the log's metadata, not_exported, says why)" if left else ""
    Console(soft_wrap=True).print(
        f"{inert(str(written))}: {count} run(s) as Inspect AI samples{note}"
    )
    return 0
