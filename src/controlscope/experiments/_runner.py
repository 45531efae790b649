"""``run_experiment``: every panel of an experiment (:func:`controlscope.panel.run_panel`, each
resumable), then its replays, then its results (:func:`write_results`); what
``controlscope experiment NAME`` does.

::

    OUT/experiment.json        name, size, models, overrides, the configuration's hash
    OUT/cache.sqlite           the exact-request cache every panel shares (paper 4, A.5)
    OUT/panels/NAME/           each panel's folder (and its own report in report/)
    OUT/replays/NAME/          each replay entry's runs and replays.json
    OUT/tables/TABLE.md|.csv   each table in the paper's shape
    OUT/figures/*.png
    OUT/paper-vs-ours.md, OUT/report.md
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from controlscope.core import (
    MAX_CONFIG_BYTES,
    InputFileError,
    Resamples,
    Workers,
    absolute_path,
    range_problem,
    read_json,
)
from controlscope.experiments._config import Experiment, ExperimentError, Size
from controlscope.experiments._replays import read_replays, run_replays
from controlscope.experiments._resolve import (
    SHARED_CACHE,
    resolve,
    role_models,
    role_options,
    unserved,
)
from controlscope.experiments._write import (
    FIGURES_DIR,
    PAPER_VS_OURS,
    REPORT_FILE,
    TABLES_DIR,
    panel_reports,
    paper_vs_ours,
    report_document,
    table_values,
    write_figure,
    write_table,
)
from controlscope.panel import (
    ConfigError,
    PanelConfig,
    PanelError,
    PanelResult,
    PanelStatus,
    difference,
    plan_panel,
    run_panel,
)

EXPERIMENT_FILE = "experiment.json"
"""The experiment's manifest in its output folder."""

ExperimentObserver = Callable[[str, PanelStatus], None]
"""Called with a panel's name and status whenever it changes (a live display)."""


@dataclass(frozen=True)
class ExperimentResult:
    """An experiment run (or resumed) and written.

    Attributes:
        experiment: the experiment.
        out: its output folder.
        size: its size.
        models: each role's model spec.
        panels: each panel's result, by name.
        replays: every replayed operation's row.
        tables: each table's Markdown file, by name.
        figures: each figure file, by name.
        unserved: what the models could not serve, one line each.
        problems: runs that could not run, cells that are ``n/a``, one line each.
        complete: every run of every panel finished (a property).
    """

    experiment: Experiment
    out: Path
    size: Size
    models: dict[str, str]
    panels: dict[str, PanelResult]
    replays: pd.DataFrame
    tables: dict[str, Path]
    figures: dict[str, Path]
    unserved: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """True when every run of every panel finished."""
        return all(p.complete for p in self.panels.values())


def config_hash(configs: list[tuple[str, PanelConfig]], experiment: Experiment) -> str:
    """The hash of what makes two runs of an experiment the same: each panel's identity and
    the replays (not the tables: they can change and be written again)."""
    data = {
        "panels": [(name, c.identity()) for name, c in configs],
        "replays": [r.model_dump(mode="json") for r in experiment.replays],
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _open(out: Path, meta: dict[str, Any]) -> None:
    """Create ``OUT/experiment.json``, or check that the folder holds this experiment."""
    path = out / EXPERIMENT_FILE
    if path.is_file():
        try:
            found = read_json(path, MAX_CONFIG_BYTES)
        except InputFileError as err:
            raise ExperimentError(str(err)) from None
        keys = ("name", "size", "models", "config_hash")  # the first difference in this order
        where = next(
            (d for k in keys if (d := difference(found.get(k), meta[k], k)) is not None), None
        )
        if where is not None:
            raise ExperimentError(
                f"{out} holds another experiment run: {where}; resume with the same "
                "options or choose a new --out"
            )
        return
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ExperimentError(f"{out} is not empty and holds no experiment; choose a new --out")
    out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")


def _check_numbers(workers: int | None, resamples: int) -> None:
    """Raise ExperimentError when ``workers`` or ``resamples`` is out of its range."""
    for name, setting, value in (
        ("workers", Workers, workers),
        ("resamples", Resamples, resamples),
    ):
        problem = None if value is None else range_problem(name, setting, value)
        if problem is not None:
            raise ExperimentError(problem)


def run_experiment(
    experiment: Experiment,
    out: str | os.PathLike[str],
    *,
    size: Size = "quick",
    models: Mapping[str, str] | None = None,
    base_url: str | None = None,
    workers: int | None = None,
    overrides: Mapping[str, Any] | None = None,
    observer: ExperimentObserver | None = None,
    resamples: int = 10_000,
    options: Mapping[str, Mapping[str, Any]] | None = None,
) -> ExperimentResult:
    """Run (or resume) an experiment into ``out`` and write its results.

    The local backend starts its processes with ``spawn``: call this under
    ``if __name__ == "__main__":`` in a script.

    Args:
        experiment: the experiment (:func:`load_experiment`).
        out: its output folder (created; an existing one must hold the same experiment).
        size: ``quick`` or ``paper``.
        models: role -> model spec (``*``: every role not named); the rest the embedded model.
        base_url: the OpenAI-compatible endpoint of ``openai`` specs.
        workers: runs at a time (None: each panel's default).
        overrides: panel keys deep-merged last into every panel.
        observer: called with each panel's name and status as it runs.
        resamples: bootstrap resamples of the tables' intervals.
        options: role -> provider options (a reasoning mode for the ``reasoning`` role:
            ``{"reasoning": {"reasoning_effort": "high"}}``; see
            :func:`controlscope.experiments.role_options`).

    Returns:
        What ran and what was written.

    Raises:
        ExperimentError: a panel that does not check or cannot plan (before any run),
            ``workers`` or ``resamples`` out of its range, or ``out`` holding another
            experiment run (the difference named).
        KeyboardInterrupt: interrupted; the same call resumes.
    """
    _check_numbers(workers, resamples)
    folder = absolute_path(out)
    specs = role_models(experiment, models)
    extra = role_options(experiment, options)
    configs = resolve(experiment, size, specs, overrides, base_url=base_url, options=extra)
    meta = {
        "name": experiment.name,
        "size": size,
        "models": specs,
        "base_url": base_url,
        "overrides": dict(overrides or {}),
        "options": extra,
        "config_hash": config_hash(configs, experiment),
    }
    _planned(experiment, configs)
    _open(folder, meta)
    panels = _run_panels(experiment, configs, folder, workers, observer)
    by_name = dict(configs)
    for entry in experiment.replays:
        run_replays(
            entry,
            folder / "panels" / entry.panel,
            by_name[entry.panel],
            folder / "replays" / entry.name,
            folder / SHARED_CACHE,
        )
    written = write_results(experiment, folder, resamples=resamples)
    return ExperimentResult(
        experiment=experiment,
        out=folder,
        size=size,
        models=specs,
        panels=panels,
        replays=read_replays(folder / "replays"),
        tables=written["tables"],
        figures=written["figures"],
        unserved=written["unserved"],
        problems=written["problems"],
    )


def _planned(experiment: Experiment, configs: list[tuple[str, PanelConfig]]) -> None:
    """Plan every panel before any run (tasks, data, models: the environments' messages)."""
    for name, config in configs:
        try:
            plan_panel(config)
        except ConfigError as err:
            raise ExperimentError(f"{experiment.name}: panel {name}: {err}") from None


def _run_panels(
    experiment: Experiment,
    configs: list[tuple[str, PanelConfig]],
    folder: Path,
    workers: int | None,
    observer: ExperimentObserver | None,
) -> dict[str, PanelResult]:
    """Run (or resume) every panel in ``folder/panels``."""
    panels: dict[str, PanelResult] = {}
    for name, config in configs:
        notify = (lambda s, n=name: observer(n, s)) if observer else None
        try:
            panels[name] = run_panel(
                config, folder / "panels" / name, workers=workers, observer=notify
            )
        except (ConfigError, PanelError) as err:
            raise ExperimentError(f"{experiment.name}: panel {name}: {err}") from None
    return panels


def write_results(
    experiment: Experiment, out: str | os.PathLike[str], *, resamples: int = 10_000, seed: int = 0
) -> dict[str, Any]:
    """Write the tables, figures, ``paper-vs-ours.md`` and ``report.md`` of an experiment's
    output folder from what it holds (nothing runs; missing runs stay in the denominators
    and are named, as the panel report does).

    Args:
        experiment: the experiment.
        out: its output folder (with ``experiment.json``).
        resamples: bootstrap resamples of the intervals.
        seed: the bootstrap's seed.

    Returns:
        ``tables`` and ``figures`` (name -> file), ``unserved`` and ``problems`` (lines).

    Raises:
        ExperimentError: ``out`` holds no experiment run.
    """
    folder = Path(out)
    try:
        meta = read_json(folder / EXPERIMENT_FILE, MAX_CONFIG_BYTES)
    except InputFileError as err:
        raise ExperimentError(
            f"{folder} holds no experiment run ({EXPERIMENT_FILE}: {err})"
        ) from None
    configs = resolve(
        experiment,
        meta["size"],
        meta["models"],
        meta.get("overrides"),
        base_url=meta.get("base_url"),
        options=meta.get("options"),
    )
    reports = panel_reports(folder, experiment, resamples=resamples, seed=seed)
    replays = read_replays(folder / "replays")
    tables: dict[str, Path] = {}
    values = {}
    problems = [f"panel {n}: {p}" for n, r in reports.items() for p in r.problems]
    for table in experiment.tables:
        values[table.name] = table_values(table, reports, replays, resamples=resamples, seed=seed)
        tables[table.name], notes = write_table(table, values[table.name], folder / TABLES_DIR)
        problems += notes
    figures: dict[str, Path] = {}
    for figure in experiment.figures:
        for path in write_figure(figure, reports, replays, folder / FIGURES_DIR):
            figures[path.stem] = path
    (folder / PAPER_VS_OURS).write_text(paper_vs_ours(experiment, values), encoding="utf-8")
    lacking = unserved(configs)
    document = report_document(experiment, meta, lacking, problems, tables, figures)
    (folder / REPORT_FILE).write_text(document, encoding="utf-8")
    return {"tables": tables, "figures": figures, "unserved": lacking, "problems": problems}
