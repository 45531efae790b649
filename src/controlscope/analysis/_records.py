"""A panel folder read back as a table: one row per planned run, every run accounted for.

A run that did not finish, whose record or summary cannot be read (a corrupt run folder), or
that ended without a verdict stays in its unit's denominator as a failure and is counted as
missing, with the reason (paper 3.2 and B: budget exhaustion and provider failures are kept in
the denominators, and so is what is missing). A unit whose branches have no boundary to start
from is ineligible and left out of every comparison, with the reason (paper appendix B).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import ValidationError

from controlscope._paths import inside
from controlscope.core import FALLBACK_KINDS, OPERATIONS, RunStartEvent
from controlscope.panel import (
    MANIFEST_FILE,
    PanelConfig,
    PanelError,
    PanelPlan,
    PlannedRun,
    RunRecord,
    read_manifest,
    read_record,
    record_problem,
    run_dir,
)
from controlscope.record import LogError, ReviewDecision, RunSummary, iter_events, read_summary

ROLES = ("planner", "reviewer")
"""The roles whose tokens are accounted."""

REVISION_COUNTS = tuple(s.counter for s in OPERATIONS if s.counter is not None)
"""The counts of realized revisions, one per operation kind but keep (argument patches,
block-data patches, replacements: the kinds' ``RunSummary`` counters)."""

COUNTS = (
    "primitive_calls",
    "planning_turns",
    "reviews",
    *REVISION_COUNTS,
    "rejected_proposals",
    "repairs",
    "plan_errors",
    "api_attempts",
    "quota_rejections",
    "protected_failures",
    "guard_refusals",
    "allowance_renewals",
)
"""The per-run counts the report sums (from ``summary.json``; ordinary repairs and plan errors
are zero outside ALFWorld; API attempts, quota rejections, protected-criterion failures, guard
refusals and renewed allowances are the app protocols' frozen aggregate, paper A.2)."""

TOKEN_COLUMNS = tuple(
    f"{role}_{kind}_{side}"
    for role in ROLES
    for kind in ("logical", "uncached")
    for side in ("input", "output")
)
"""Token columns: ``planner_logical_input``... (paper A.5: logical totals include cached and
replayed responses; uncached ones count only the model's own work)."""

FALLBACK_COLUMNS = tuple(f"fallback_{kind}" for kind in FALLBACK_KINDS)
"""Keep fallbacks by kind."""

KEPT_REVIEWS = "kept_reviews"
"""The column of reviews whose realized operation was Keep, the reviewer's own choice or a
recorded fallback: reviews less patches and replacements (paper Table 6: "KEEP counts include
recorded fallbacks")."""

PROVIDER_ENDS = ("planner_provider_error", "context_limit")
"""End reasons that are provider failures at the planning stage (graded as they stand)."""


Listed = tuple[list[ReviewDecision], int]
"""A run's decisions as its summary lists them, and how many more it omitted."""


@dataclass(frozen=True)
class PanelRuns:
    """A panel folder's runs.

    Attributes:
        panel: the folder.
        config: its configuration.
        plan: its plan.
        runs: one row per planned run (see :func:`read_panel`).
        problems: one line per run that is missing, corrupt, without a verdict or
            ineligible, or that failed a check its record names (counted with its verdict:
            ``RunRecord.problem``), with the reason.
        decisions: what each run's reviews did, by run id, as its summary lists them
            (``RunSummary.decisions`` and how many more it omitted; None: its summary predates
            the list, read the log); runs without a readable summary are absent.
    """

    panel: Path
    config: PanelConfig
    plan: PanelPlan
    runs: pd.DataFrame
    problems: list[str]
    decisions: dict[str, Listed | None] = field(default_factory=dict)


def read_panel(panel: str | Path) -> PanelRuns:
    """Read every planned run of a panel folder.

    Columns of ``runs``: the plan's (``id``, ``unit``, ``task``, ``category``, ``template``,
    ``seed``, ``source_program``, ``scope``, ``draw``); ``status`` (``done``, ``ineligible``,
    ``missing``, ``corrupt``, ``no_verdict``); ``success`` (bool: False unless the verifier
    passed it); ``end_reason``; ``budget_exhausted``, ``provider_failure``, ``reused``
    (bools); :data:`COUNTS`; :data:`FALLBACK_COLUMNS`; :data:`TOKEN_COLUMNS`;
    :data:`KEPT_REVIEWS`;
    ``request_hash`` (a branch's first review request); ``terminal_hash`` (the terminal
    workspace's state hash: two panels' Keep runs of a unit pair when it is equal);
    ``diverged_at`` (a run branched from a first schedule's: where the two parted, None when
    they share the whole run); ``source_file`` (the unit's frozen
    source program, None when sampled) and ``source_sha256`` (its SHA-256 as the run's
    ``run_start`` records it); under ordinary recovery
    ``initial_plan_success`` (bool; paper 5.2) and ``goal_actions`` (the environment's actions
    until its goal, Figure 2; None when unknown).

    A run whose folder (its links followed) leads out of the panel folder (an id with
    ``..``, a link) is not read, and one whose record names another run or another log
    (:func:`~controlscope.panel.record_problem`) is not counted: each counts as corrupt, with
    the reason, until the panel is resumed (which runs the latter again).

    Raises:
        PanelError: the folder has no readable manifest, or its plan holds no run.
    """
    folder = Path(panel)
    manifest = read_manifest(folder)
    if not manifest.plan.runs:
        raise PanelError(f"{folder / MANIFEST_FILE} plans no run: there is nothing to report")
    rows: list[dict[str, Any]] = []
    problems: list[str] = []
    decisions: dict[str, Listed | None] = {}
    root = folder.resolve()
    for run in manifest.plan.runs:
        row, problem = _row(folder, run, root, decisions)
        rows.append(row)
        if problem:
            problems.append(f"{run.id}: {problem}")
    table = pd.DataFrame(rows)
    return PanelRuns(folder, manifest.config, manifest.plan, table, problems, decisions)


def _row(
    panel: Path,
    run: PlannedRun,
    root: Path,
    decisions: dict[str, Listed | None],
) -> tuple[dict[str, Any], str]:
    """One run's row and, when it is not a scored run, why (``root``: the panel resolved;
    the run's summary's decisions go into ``decisions``)."""
    row: dict[str, Any] = run.model_dump(exclude={"params", "after"})
    row.update(_empty())
    directory = run_dir(panel, run.id)
    if not inside(panel, directory, resolved=root):
        row["status"] = "corrupt"
        return row, "corrupt: its folder leads out of the panel folder, not read"
    try:
        record = read_record(directory)
    except FileNotFoundError:
        row["status"] = "missing"
        return row, "missing: the run has not finished (run the panel again to resume it)"
    except (OSError, ValueError) as err:
        row["status"] = "corrupt"
        return row, f"corrupt run folder, counted as missing: {_first_line(err)}"
    wrong = record_problem(directory, run.id, record)  # copied from another run, or its log
    if wrong is not None:  # replaced: the panel runs it again when resumed
        row["status"] = "corrupt"
        return row, (
            f"corrupt run folder, counted as missing: {wrong} (resuming the panel runs it again)"
        )
    if record.status != "done":
        row["status"] = "ineligible" if record.status == "ineligible" else "missing"
        return row, f"{row['status']}: {record.detail}"
    try:
        summary = read_summary(directory)
    except (OSError, ValueError, LogError, ValidationError) as err:
        row["status"] = "corrupt"
        return row, f"corrupt run folder, counted as missing: {_first_line(err)}"
    row.update(_from_summary(summary, record))
    listed = summary.decisions
    decisions[run.id] = None if listed is None else (listed, summary.decisions_omitted)
    row["source_sha256"] = _source_sha256(directory) if run.source_file is not None else None
    if summary.success is None:
        row["status"] = "no_verdict"
        return row, f"no verdict ({summary.end_reason}), counted as missing: {record.detail}"
    if record.problem:  # scored with its verdict, and listed
        return row, f"failed a check, counted with its verdict: {record.problem}"
    return row, ""


def _empty() -> dict[str, Any]:
    empty: dict[str, Any] = {
        "status": "done",
        "success": False,
        "end_reason": None,
        "budget_exhausted": False,
        "provider_failure": False,
        "reused": False,
        "request_hash": None,
        "terminal_hash": None,
        "diverged_at": None,
        "initial_plan_success": False,
        "goal_actions": None,
        "source_sha256": None,
    }
    empty.update(dict.fromkeys((*COUNTS, *FALLBACK_COLUMNS, *TOKEN_COLUMNS, KEPT_REVIEWS), 0))
    return empty


def _from_summary(summary: RunSummary, record: RunRecord) -> dict[str, Any]:
    end = summary.end_reason or ""
    row: dict[str, Any] = {
        "success": bool(summary.success),
        "end_reason": summary.end_reason,
        "budget_exhausted": end.startswith("budget:"),
        "provider_failure": end in PROVIDER_ENDS,
        "reused": summary.reused,
        "request_hash": record.request_hash,
        "terminal_hash": summary.state_hash,
        "diverged_at": record.diverged_at,
        "initial_plan_success": bool(summary.initial_plan_success),
        "goal_actions": summary.goal_actions,
    }
    row.update({name: getattr(summary, name) for name in COUNTS})
    revised = sum(getattr(summary, name) for name in REVISION_COUNTS)
    row[KEPT_REVIEWS] = summary.reviews - revised
    row.update({f"fallback_{k}": summary.fallbacks.get(k, 0) for k in FALLBACK_KINDS})
    for role in ROLES:
        totals = summary.tokens.get(role)
        for kind in ("logical", "uncached"):
            side = getattr(totals, kind) if totals is not None else None
            row[f"{role}_{kind}_input"] = side.input_tokens if side else 0
            row[f"{role}_{kind}_output"] = side.output_tokens if side else 0
    return row


def _source_sha256(directory: Path) -> str | None:
    """The frozen source program's SHA-256 the run's ``run_start`` records (None: none, or
    the log cannot be read: its summary already counted the run)."""
    try:
        start = next(iter_events(directory), None)
    except (OSError, ValueError, LogError):
        return None
    if isinstance(start, RunStartEvent) and start.source_file is not None:
        return start.source_file.sha256
    return None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"
