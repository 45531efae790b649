"""Synthetic panel folders: recorded outcomes written without running anything, to check a
report against known numbers (tests, benchmarks, the paper's published counts).

Example::

    from controlscope.panel.testing import SyntheticRun, write_synthetic_panel

    write_synthetic_panel("panel", [
        SyntheticRun(unit="t/a", category="c1", scope="keep", success=True, calls=12),
        SyntheticRun(unit="t/a", category="c1", scope="full", success=False, calls=30),
    ])
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from controlscope.core import ClusterBy, Scope
from controlscope.panel._config import PanelConfig
from controlscope.panel._folder import (
    MANIFEST_FILE,
    PanelManifest,
    RunRecord,
    run_dir,
    write_record,
)
from controlscope.panel._plan import KEEP, PanelPlan, PlannedRun
from controlscope.record import RoleTotals, RunSummary, TokenTotals, write_summary


@dataclass(frozen=True)
class SyntheticRun:
    """One recorded run of a synthetic panel.

    Attributes:
        unit: its unit's id.
        category: the unit's category.
        scope: its scope.
        success: its verdict.
        draw: its reviewer draw (Keep: 0).
        template: the unit's template (None: the unit's id).
        source_program: the unit's source program.
        calls: primitive calls.
        output_tokens: the planner's logged output tokens.
        end_reason: its end reason.
    """

    unit: str
    category: str
    scope: str
    success: bool
    draw: int = 0
    template: str | None = None
    source_program: int = 0
    calls: int = 10
    output_tokens: int = 100
    end_reason: str = "final_answer"


def write_synthetic_panel(
    folder: str | os.PathLike[str],
    runs: Sequence[SyntheticRun],
    *,
    config: PanelConfig | None = None,
    cluster: ClusterBy = "category",
) -> PanelManifest:
    """Write a panel folder holding ``runs`` as finished runs (``summary.json`` and
    ``panel_run.json`` each; no event logs).

    Args:
        folder: the panel folder to write (created).
        runs: the runs; every unit needs a Keep run.
        config: the configuration recorded (None: one with the runs' scopes and draws).
        cluster: what the report resamples by default.

    Returns:
        The manifest written.
    """
    panel = Path(folder)
    scopes = sorted({r.scope for r in runs}, key=lambda s: Scope[s.upper()].value)
    draws = max(r.draw for r in runs) + 1
    cfg = config or PanelConfig(tasks="all", scopes=scopes, draws=draws)
    planned = [_planned(r) for r in runs]
    plan = PanelPlan(runs=tuple(sorted(planned, key=lambda p: p.scope != KEEP)), cluster=cluster)
    manifest = PanelManifest(config=cfg, plan=plan)
    panel.mkdir(parents=True, exist_ok=True)
    (panel / MANIFEST_FILE).write_text(manifest.model_dump_json(indent=2), encoding="utf-8")
    for run, plan_run in zip(runs, planned, strict=True):
        directory = run_dir(panel, plan_run.id)
        directory.mkdir(parents=True, exist_ok=True)
        write_summary(directory, _summary(run))
        write_record(
            directory,
            RunRecord(
                id=plan_run.id,
                status="done",
                success=run.success,
                end_reason=run.end_reason,
                primitive_calls=run.calls,
            ),
        )
    return manifest


def _planned(run: SyntheticRun) -> PlannedRun:
    name = KEEP if run.scope == KEEP else f"{run.scope}-d{run.draw}"
    return PlannedRun(
        id=f"{run.unit}/{name}",
        unit=run.unit,
        task=run.unit,
        category=run.category,
        template=run.template or run.unit,
        params={},
        seed=0,
        source_program=run.source_program,
        scope=run.scope,
        draw=run.draw,
        after=None if run.scope == KEEP else f"{run.unit}/{KEEP}",
    )


def _summary(run: SyntheticRun) -> RunSummary:
    output = TokenTotals(
        requests=1, input_tokens=10 * run.output_tokens, output_tokens=run.output_tokens
    )
    return RunSummary(
        task=run.unit,
        seed=0,
        scope=run.scope,
        schedule="continuous",
        view="with_feedback",
        replace_boundary="reply",
        models={"planner": "synthetic"},
        isolation="none",
        success=run.success,
        end_reason=run.end_reason,
        complete=True,
        primitive_calls=run.calls,
        tokens={"planner": RoleTotals(logical=output, uncached=output), "reviewer": RoleTotals()},
    )
