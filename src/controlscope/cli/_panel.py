"""``controlscope panel CONFIG.toml --out DIR``: run or resume a paired panel (paper 3.2, 4,
A.5).

Parses its options, calls :func:`controlscope.panel.run_panel` (the same function a Python
caller uses, with the same defaults) with a live display, and prints the runs' counts and the
successes per condition. Exit status: 0 when every run finished (whatever its verdict); 1 when
some could not run (named; they run again when the same command is repeated); 2 on a bad
configuration or panel folder (one line, before any run starts); 130 when interrupted
(running runs end recorded as interrupted and run again on resumption).

A panel a person reviews (``[reviewer] reviewer = "human"``) serves its review desk with the
viewer's review page on loopback while its runs run, and prints the page's address (with the
desk's secret: the one place it is printed) on standard error: the queue of the boundaries
waiting in all the panel's runs, oldest first.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterator
from pathlib import Path

from rich.console import Console

from controlscope.cli._console import fail, inert, path_option
from controlscope.cli._settings_args import add_settings
from controlscope.panel import (
    ConfigError,
    ExecutionSettings,
    PanelError,
    PanelProgress,
    PanelResult,
    PlannerSettings,
    ReviewDeskServer,
    load_config,
    run_panel,
)
from controlscope.review import DeskAddress, ReviewDesk


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``panel``'s options."""
    parser.add_argument("config", type=path_option, metavar="CONFIG.toml", help="the panel's file")
    parser.add_argument("--out", type=path_option, required=True, help="the panel folder")
    add_settings(
        parser,
        ExecutionSettings,
        fields=("workers",),
        title="execution",
        keep_defaults=True,
        checked=True,
    )
    add_settings(
        parser, PlannerSettings, fields=("max_connections",), title="execution", checked=True
    )
    parser.add_argument("--quiet", action="store_true", help="no live progress")


def main(args: argparse.Namespace) -> int:
    """Run the panel; return the exit status (see the module docstring)."""
    console = Console(stderr=True, soft_wrap=True)
    try:
        config = load_config(args.config)
        connections = getattr(args, "max_connections", None)
        desk = _review_desk(console) if config.reviewer.person else None
        if args.quiet:
            result = run_panel(
                config,
                args.out,
                workers=args.workers,
                max_connections=connections,
                review_desk=desk,
            )
        else:
            with PanelProgress(console) as progress:
                result = run_panel(
                    config,
                    args.out,
                    workers=args.workers,
                    max_connections=connections,
                    observer=progress,
                    review_desk=desk,
                )
    except (ConfigError, PanelError) as err:
        return fail(console, "panel", str(err), 2)
    _print(result)
    failed = [r for r in result.records.values() if r.status == "error"]
    if failed:
        for record in failed[:10]:
            console.print(inert(f"  could not run {record.id}: {record.detail}"))
        return fail(console, "panel", f"{len(failed)} run(s) could not run; repeat the command", 1)
    return 0


def _review_desk(console: Console) -> ReviewDeskServer:
    """What serves the panel's review desk (see the module docstring)."""

    @contextlib.contextmanager
    def served(panel: Path) -> Iterator[DeskAddress]:
        from controlscope.view import ViewError, ViewServer

        desk = ReviewDesk()
        try:
            server = ViewServer(panel, desk=desk).start()
        except ViewError as err:
            raise PanelError(f"the review desk cannot be served: {err}") from None
        try:
            console.print(f"review page: {server.review_url}", markup=False, highlight=False)
            yield DeskAddress(server.url, desk.secret)
        finally:
            server.stop()

    return served


def _print(result: PanelResult) -> None:
    out = Console(soft_wrap=True)
    s = result.status
    ran = s.finished - s.skipped
    out.print(
        inert(
            f"panel {result.panel}: {s.finished}/{s.total} runs finished ({ran} run now, "
            f"{s.skipped} found finished), {s.failed} could not run, {s.ineligible} ineligible"
        )
    )
    for label, seen in s.verdicts.items():
        out.print(inert(f"  {label}: {s.successes.get(label, 0)}/{seen} successes"))
    if s.endpoint is not None:
        e = s.endpoint
        out.print(
            f"  endpoint: {e.requests} requests, at most {e.peak} in flight, "
            f"{e.busy_s:.0f} s waiting on answers; waited {e.rate_limited_s:.1f} s on rate "
            f"limits ({e.rate_limits} rate-limit answer{'' if e.rate_limits == 1 else 's'})",
            highlight=False,
        )
    out.print(inert(f"report: controlscope report {result.panel}"))
