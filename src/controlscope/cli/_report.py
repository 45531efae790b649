"""``controlscope report PANEL_DIR``: a panel's tables, intervals and figures (paper 3.2, 4, 5,
A.2, A.5, B).

Calls :func:`controlscope.analysis.report` (the same function and defaults as from Python),
which writes ``report.md`` (or ``report.tex``), one CSV per table, ``runs.csv``,
``report.json`` and the figures; prints the successes per condition, the paired
differences, what the reviewers did per condition and, last, the command that opens the viewer
on the panel (or, with ``--json``, the whole report as JSON). Exit status: 0; 2 on bad input
(not a panel folder, a bad option: one line).
"""

from __future__ import annotations

import argparse
import json

from rich.console import Console

from controlscope.analysis import Report, pair_lines, report
from controlscope.cli._console import NumberOption, fail, inert, path_option
from controlscope.core import Coverage, Resamples, Seed
from controlscope.panel import PanelError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``report``'s options."""
    parser.add_argument("panel", type=path_option, metavar="PANEL_DIR", help="the panel folder")
    parser.add_argument("--out", type=path_option, default=None, help="default: PANEL_DIR/report")
    resamples, seed, level = NumberOption(Resamples), NumberOption(Seed), NumberOption(Coverage)
    parser.add_argument(
        "--resamples",
        type=resamples,
        default=10_000,
        help=f"bootstrap resamples ({resamples.span})",
    )
    parser.add_argument("--seed", type=seed, default=0, help=f"the bootstrap's seed ({seed.span})")
    parser.add_argument(
        "--level", type=level, default=0.95, help=f"intervals' coverage ({level.span})"
    )
    parser.add_argument(
        "--cluster",
        choices=("category", "template", "task"),
        default=None,
        help="what the bootstrap resamples (default: the panel's; category for filesystem)",
    )
    parser.add_argument("--format", choices=("markdown", "latex"), default="markdown")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")


def main(args: argparse.Namespace) -> int:
    """Build and write the report; return the exit status (see the module docstring)."""
    console = Console(stderr=True, soft_wrap=True)
    try:
        built = report(
            args.panel,
            out=args.out,
            resamples=args.resamples,
            seed=args.seed,
            level=args.level,
            cluster=args.cluster,
            fmt=args.format,
        )
    except (PanelError, ValueError) as err:
        return fail(console, "report", str(err), 2)
    except OSError as err:  # the report's folder cannot be written
        return fail(console, "report", f"cannot write the report: {err}", 2)
    if args.json:
        print(json.dumps(built.to_json(), indent=2))
        return 0
    _print(built)
    return 0


def _print(built: Report) -> None:
    out = Console(soft_wrap=True)
    for name in ("successes", "table1", "paired"):
        table = built.tables.get(name)
        if table is not None and not table.empty:
            out.print(inert(table.to_markdown(index=False), lines=True))
            out.print()
    if built.reviewers:
        out.print("What the reviewers did:")
        for line in built.reviewers:
            out.print(inert(f"  {line}"))
        out.print()
    if built.endpoint_line is not None:
        out.print(inert(built.endpoint_line))
    if built.pairs:
        out.print("Paired outcomes and the decisions behind them:")
        for line in pair_lines(built.pairs[:50]):
            out.print(inert(f"  {line}"))
        out.print()
    for unit, shown in built.frozen_sources.items():
        out.print(inert(f"  frozen source program of {unit}: {shown}"))
    for problem in built.problems[:20]:
        out.print(inert(f"  {problem}"))
    folder = built.out or built.panel
    out.print(inert(f"report: {folder} (report.md, a CSV per table, figures, report.json)"))
    out.print(inert(f"open the viewer on it: {built.viewer}"))
