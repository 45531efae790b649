"""``controlscope experiment list`` and ``controlscope experiment NAME``: the paper's experiments,
each one command (paper sections 4-6, Tables 1-7, Figures 2-3).

``list`` prints every packaged experiment with what it reproduces and its measured quick-size
minutes. ``NAME`` (a packaged experiment's name or an experiment file) parses its options,
calls :func:`controlscope.experiments.run_experiment` (the same function a Python caller uses,
with the same defaults) with a live display per panel, and prints where its tables are.
Exit status: 0 when every run finished (whatever its verdict); 1 when some could not run
(they run again when the same command is repeated); 2 on bad options, an unknown name or a
configuration problem (one line, before any run starts); 130 when interrupted.
"""

from __future__ import annotations

import argparse
from types import TracebackType
from typing import Any

from rich.console import Console

from controlscope.cli._console import fail, inert, path_option
from controlscope.cli._settings_args import add_settings, key_values
from controlscope.core import PlannerModel
from controlscope.experiments import (
    SIZES,
    ExperimentError,
    ExperimentResult,
    list_experiments,
    load_experiment,
    run_experiment,
)
from controlscope.panel import ExecutionSettings, PanelProgress, PanelStatus


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``experiment``'s options."""
    parser.add_argument(
        "name", metavar="NAME", help="list, an experiment's name, or an experiment's TOML file"
    )
    parser.add_argument("--size", choices=SIZES, default="quick", help="default: quick")
    parser.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="ROLE=SPEC",
        help="a role's model (repeatable); SPEC alone sets every role (default: local)",
    )
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="ROLE:KEY=JSON",
        help="a provider option passed with a role's requests (repeatable), e.g. "
        "reasoning:reasoning_effort=high",
    )
    add_settings(parser, PlannerModel, fields=("base_url",), title="models", keep_defaults=True)
    parser.add_argument(
        "--out", type=path_option, default=None, help="output folder (default: experiments/NAME)"
    )
    add_settings(
        parser,
        ExecutionSettings,
        fields=("workers",),
        title="execution",
        keep_defaults=True,
        checked=True,
    )
    parser.add_argument("--quiet", action="store_true", help="no live progress")


def parse_models(given: list[str]) -> dict[str, str]:
    """``--model`` options as role -> spec (``*`` for a bare spec).

    Raises:
        ValueError: an empty role or spec.
    """
    models: dict[str, str] = {}
    for item in given:
        role, sep, spec = item.partition("=")
        if not sep:
            role, spec = "*", item
        if not role.strip() or not spec.strip():
            raise ValueError(f"--model {item!r}: give ROLE=SPEC or SPEC")
        models[role.strip()] = spec.strip()
    return models


def parse_options(given: list[str]) -> dict[str, dict[str, Any]]:
    """``--option ROLE:KEY=JSON`` items as role -> provider options (values read as JSON
    when they parse, else as text).

    Raises:
        ValueError: an item without a role, a key or ``=``.
    """
    by_role: dict[str, list[str]] = {}
    for item in given:
        role, sep, rest = item.partition(":")
        if not sep or not role.strip() or "=" in role:
            raise ValueError(f"--option expects ROLE:KEY=JSON, got {item!r}")
        by_role.setdefault(role.strip(), []).append(rest)
    return {
        role: key_values("--option", items, json_values=True) for role, items in by_role.items()
    }


class _Live:
    """One live progress line per panel, each closed when the next panel starts."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.name: str | None = None
        self.progress: PanelProgress | None = None

    def __call__(self, name: str, status: PanelStatus) -> None:
        if name != self.name:
            self.close()
            self.name = name
            self.console.print(inert(f"panel {name}"))
            self.progress = PanelProgress(self.console).__enter__()
        assert self.progress is not None
        self.progress(status)

    def close(self) -> None:
        if self.progress is not None:
            self.progress.__exit__(None, None, None)
            self.progress = None

    def __enter__(self) -> _Live:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def main(args: argparse.Namespace) -> int:
    """List or run; return the exit status (see the module docstring)."""
    console = Console(stderr=True, soft_wrap=True)
    if args.name == "list":
        _list()
        return 0
    try:
        experiment = load_experiment(args.name)
        out = args.out or f"experiments/{experiment.name}"
        given = {
            "size": args.size,
            "models": parse_models(args.model),
            "base_url": args.base_url,
            "options": parse_options(args.option),
        }
        if args.quiet:
            result = run_experiment(experiment, out, workers=args.workers, **given)
        else:
            with _Live(console) as live:
                result = run_experiment(
                    experiment, out, workers=args.workers, observer=live, **given
                )
    except (ExperimentError, ValueError) as err:
        return fail(console, "experiment", str(err), 2)
    _print(result)
    failed = [r for p in result.panels.values() for r in p.records.values() if r.status == "error"]
    if failed:
        for record in failed[:10]:
            console.print(inert(f"  could not run {record.id}: {record.detail}"))
        return fail(console, "experiment", f"{len(failed)} run(s) could not run; repeat it", 1)
    return 0


def _list() -> None:
    out = Console(soft_wrap=True)
    for info in list_experiments():
        if info.problem is not None:
            out.print(inert(f"{info.name}: does not load: {info.problem}"))
            continue
        minutes = f"{info.quick_minutes:g} min" if info.quick_minutes else "not measured"
        out.print(inert(f"{info.name}: {info.title}"))
        out.print(inert(f"  reproduces {info.reproduces}; needs {info.needs}"))
        out.print(inert(f"  quick size on the embedded model: {minutes}"))


def _print(result: ExperimentResult) -> None:
    out = Console(soft_wrap=True)
    runs = sum(len(p.records) for p in result.panels.values())
    out.print(
        inert(
            f"experiment {result.experiment.name} ({result.size}): {len(result.panels)} panels, "
            f"{runs} runs, {len(result.replays)} replayed operations"
        )
    )
    for line in result.unserved:
        out.print(inert(f"  note: {line}"))
    for name, path in result.tables.items():
        out.print(inert(f"  table {name}: {path}"))
    out.print(inert(f"report: {result.out / 'report.md'}"))
    out.print(inert(f"paper vs ours: {result.out / 'paper-vs-ours.md'}"))
