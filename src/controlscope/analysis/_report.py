"""A panel's report: tables, intervals and figures, written as Markdown (or LaTeX), CSV and
PNG, or given as JSON (what ``controlscope report`` writes; paper sections 3.2, 4, 5, A.2,
A.5 and B)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from controlscope.analysis._decisions import PairedOutcome, paired_outcomes
from controlscope.analysis._figures import (
    EFFORT_FILE,
    TOKENS_FILE,
    effort_png,
    tokens_png,
)
from controlscope.analysis._paired import CLUSTER
from controlscope.analysis._records import PanelRuns, read_panel
from controlscope.analysis._reviews import plural, review_lines, viewer_command
from controlscope.analysis._tables import (
    eligible,
    goals,
    paired,
    resources,
    successes,
    table1,
    unshared_requests,
)
from controlscope.core import Coverage, Resamples, Seed, escape_untrusted, range_problem
from controlscope.panel import ENDPOINT_FILE, EndpointSession, endpoint_line, read_endpoint, run_dir

PROBLEMS_TITLE = "Problems: runs missing, corrupt, without a verdict, ineligible or failing a check"
"""The heading of the report's list of problems."""

ReportFormat = Literal["markdown", "latex"]
"""The report document's format."""

CLUSTER_PLURALS = {"category": "categories", "template": "templates", "task": "tasks"}
"""What the bootstrap resamples, by cluster column, in the plural."""

REPORT_DIR = "report"
"""Where a report is written inside its panel folder by default."""

TABLE_TITLES = {
    "successes": "Successes per condition (missing runs, budget exhaustion and provider "
    "failures stay in the denominator)",
    "table1": "Table 1: successes per source program and reviewer draw",
    "paired": "Paired differences (percentage points) with cluster-bootstrap intervals",
    "resources": "Calls, reviews, operations, fallbacks and tokens (logical and uncached)",
    "goals": "Task and scenario goal completion (TGC, SGC)",
    "goal_gains": "Paired TGC gains with template-cluster intervals",
}
"""Each table's title, in the report's order."""


@dataclass(frozen=True)
class Report:
    """A panel's report.

    Attributes:
        panel: the panel folder.
        cluster: what the bootstrap resampled (``category``, ``template``, ``task``).
        resamples: bootstrap resamples.
        seed: the bootstrap's seed.
        level: the intervals' coverage.
        units: the paired units compared (eligible ones).
        tables: the tables by name (see :data:`TABLE_TITLES`); ``goals`` and ``goal_gains``
            are empty when no template has more than one unit.
        runs: every planned run, one row each (``runs.csv``).
        problems: one line per run missing, corrupt, without a verdict or ineligible, or
            that failed a check its record names (counted with its verdict).
        ineligible_units: units left out (no boundary to branch at).
        figures: the figures written, by name.
        out: the folder the report was written to (None: not written).
        scopes: the panel's scopes, in the lattice's order (the conditions compared).
        draws: the panel's reviewer draws.
        frozen_sources: the units whose source program was frozen (read from a file, not
            sampled): unit -> ``FILE (sha256 PREFIX…)``.
        pairs: every reviewing run against its unit's Keep run, with the decisions behind
            its outcome (:func:`~controlscope.analysis.paired_outcomes`).
        call_budget: the panel's call budget (the effort figure's x axis ends there).
        viewer: the command that opens the viewer on the panel (quoted, one inert line).
        reviewers: one sentence per condition saying what its reviewers did (reviews,
            changes proposed, realized, refused with their reasons).
        endpoint: the served endpoint's counts, one entry per panel command that ran runs
            against it (``endpoint.json``; requests, waits on answers and on rate limits);
            empty when the panel's models are not served.
        endpoint_line: ``endpoint`` in one sentence (a property; None when not served).
    """

    panel: Path
    cluster: str
    resamples: int
    seed: int
    level: float
    units: int
    tables: dict[str, pd.DataFrame]
    runs: pd.DataFrame
    problems: list[str]
    ineligible_units: list[str]
    figures: dict[str, Path] = field(default_factory=dict)
    out: Path | None = None
    scopes: tuple[str, ...] = ()
    draws: int = 1
    frozen_sources: dict[str, str] = field(default_factory=dict)
    pairs: list[PairedOutcome] = field(default_factory=list)
    reviewers: list[str] = field(default_factory=list)
    call_budget: int = 100
    endpoint: list[EndpointSession] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The report as JSON data (tables as lists of records, NaN as null)."""
        return {
            "panel": str(self.panel),
            "cluster": self.cluster,
            "resamples": self.resamples,
            "seed": self.seed,
            "level": self.level,
            "units": self.units,
            "tables": {name: _records(t) for name, t in self.tables.items()},
            "problems": self.problems,
            "ineligible_units": self.ineligible_units,
            "frozen_sources": self.frozen_sources,
            "pairs": [{**p.__dict__, "label": p.label} for p in self.pairs],
            "figures": {name: str(p) for name, p in self.figures.items()},
            "out": str(self.out) if self.out is not None else None,
            "reviewers": self.reviewers,
            "viewer": self.viewer,
            "endpoint": self.endpoint_json(),
        }

    def endpoint_json(self) -> dict[str, Any] | None:
        """The endpoint's counts summed over the panel commands, and each command's (None
        when the panel's models are not served)."""
        if not self.endpoint:
            return None
        return {
            "requests": sum(s.requests for s in self.endpoint),
            "busy_s": round(sum(s.busy_s for s in self.endpoint), 3),
            "rate_limits": sum(s.rate_limits for s in self.endpoint),
            "rate_limited_s": round(sum(s.rate_limited_s for s in self.endpoint), 3),
            "sessions": [s.model_dump() for s in self.endpoint],
        }

    @property
    def endpoint_line(self) -> str | None:
        """The endpoint's counts in one sentence: requests, waits on answers and on rate
        limits (None when the panel's models are not served)."""
        return endpoint_line(self.endpoint)

    def figure_images(self) -> dict[str, bytes]:
        """The figures as PNG bytes by name (``effort``, ``tokens``; paper Figure 2), each
        with its title, n and axes; empty when no run was scored."""
        scored, _ = eligible(self.runs)
        if scored.empty:
            return {}
        return {
            "effort": effort_png(scored, self.draws, self.call_budget),
            "tokens": tokens_png(scored, self.draws),
        }

    @property
    def viewer(self) -> str:
        """The command that opens the viewer on the panel (quoted, one inert line)."""
        return viewer_command(self.panel)

    def document(self, fmt: ReportFormat = "markdown") -> str:
        """The report as one Markdown (or LaTeX) document."""
        return _latex(self) if fmt == "latex" else _markdown(self)


def report(
    panel: str | Path,
    *,
    out: str | Path | None = None,
    resamples: int = 10_000,
    seed: int = 0,
    level: float = 0.95,
    cluster: str | None = None,
    fmt: ReportFormat = "markdown",
    write: bool = True,
) -> Report:
    """Build a panel's report and (with ``write``) write it: ``report.md`` (or
    ``report.tex``), one CSV per table, ``runs.csv``, ``report.json`` and the figures.

    Args:
        panel: the panel folder (its runs need not all have finished: the missing ones are
            counted and named).
        out: where to write; None: ``PANEL/report``.
        resamples: cluster-bootstrap resamples (paper: 10,000 here by default; at most
            :data:`~controlscope.core.MAX_RESAMPLES`).
        seed: the bootstrap's seed (0 to :data:`~controlscope.core.MAX_SEED`).
        level: the intervals' coverage (above 0, below 1).
        cluster: ``category``, ``template`` or ``task``; None: the panel's (``category`` for
            the filesystem, paper section 3.2).
        fmt: ``markdown`` or ``latex``.
        write: False builds the report without writing anything (no figures).

    Returns:
        The report.

    Raises:
        PanelError: ``panel`` is not a panel folder.
        ValueError: an unknown ``cluster``, or ``resamples``, ``seed`` or ``level`` out of
            its range.
    """
    if cluster not in (None, "category", "template", "task"):
        raise ValueError(f"cluster must be category, template or task, not {cluster!r}")
    for name, setting, value in (
        ("resamples", Resamples, resamples),
        ("seed", Seed, seed),
        ("level", Coverage, level),
    ):
        problem = range_problem(name, setting, value)
        if problem is not None:
            raise ValueError(problem)
    found = read_panel(panel)
    chosen = cluster or found.plan.cluster
    built = _build(found, chosen, resamples=resamples, seed=seed, level=level)
    built = _with_endpoint(built)
    if not write:
        return built
    target = Path(out) if out is not None else found.panel / REPORT_DIR
    return write_report(built, target, fmt=fmt)


def _build(found: PanelRuns, cluster: str, *, resamples: int, seed: int, level: float) -> Report:
    config = found.config
    runs = found.runs.assign(**{CLUSTER: found.runs[cluster]})
    scored, left_out = eligible(runs)
    scopes, draws = config.scopes, config.draws
    tables: dict[str, pd.DataFrame] = {
        "successes": successes(scored, draws),
        "table1": table1(scored, scopes, draws, config.replace_boundary),
    }
    if len(scopes) > 1 and not scored.empty:
        tables["paired"] = paired(
            scored, scopes, draws, resamples=resamples, seed=seed, level=level
        )
    tables["resources"] = resources(scored, scopes, draws)
    if len(scopes) > 1 and not scored.empty:
        tables["goals"], tables["goal_gains"] = goals(
            scored, scopes, draws, resamples=resamples, seed=seed, level=level
        )
    return Report(
        panel=found.panel,
        cluster=cluster,
        resamples=resamples,
        seed=seed,
        level=level,
        units=int(scored["unit"].nunique()),
        tables=tables,
        runs=runs,
        problems=[*found.problems, *unshared_requests(scored)],
        ineligible_units=left_out,
        scopes=tuple(scopes),
        draws=draws,
        frozen_sources=frozen_sources(runs),
        pairs=paired_outcomes(
            runs,
            draws,
            {str(i): run_dir(found.panel, str(i)) for i in runs["id"]},
            found.decisions,
        ),
        reviewers=review_lines(scored, draws),
        call_budget=config.budgets.max_calls or 100,
    )


def _with_endpoint(built: Report) -> Report:
    """``built`` with the panel's endpoint counts; an unreadable ``endpoint.json`` is a
    problem line, not a failure."""
    try:
        sessions = read_endpoint(built.panel)
    except (OSError, ValueError) as err:
        problem = f"{ENDPOINT_FILE} cannot be read, its waits are not counted: {err}"
        return replace(built, problems=[*built.problems, problem])
    return replace(built, endpoint=sessions)


def frozen_sources(runs: pd.DataFrame) -> dict[str, str]:
    """The units whose source program was frozen: unit -> ``FILE (sha256 PREFIX…)``, the
    file's name as the plan holds it and the SHA-256 its Keep run recorded ("not recorded"
    when that run has no readable log yet).

    Args:
        runs: the panel's runs (:func:`~controlscope.analysis.read_panel`).
    """
    out: dict[str, str] = {}
    if "source_file" not in runs:
        return out
    for row in runs[runs["source_file"].notna()].itertuples():
        shown = out.get(str(row.unit))
        sha = row.source_sha256 if isinstance(row.source_sha256, str) else None
        if shown is None or (sha is not None and "not recorded" in shown):
            where = f"sha256 {sha[:12]}…" if sha else "sha256 not recorded"
            out[str(row.unit)] = f"{Path(str(row.source_file)).name} ({where})"
    return out


def pair_lines(pairs: list[PairedOutcome]) -> list[str]:
    """The paired outcomes as text, one line per pair and one per decision below it:
    ``UNIT CONDITION: keep ✗ -> ✓ (win, 3 reviews)``."""
    mark = {True: "✓", False: "✗", None: "-"}
    lines: list[str] = []
    for p in pairs:
        lines.append(
            f"{p.unit} {p.condition}: keep {mark[p.keep_success]} -> {mark[p.success]} "
            f"({p.label}, {plural(p.reviews, 'review')})"
        )
        lines += [f"    {d}" for d in p.decisions]
    return lines


def write_report(built: Report, out: Path, *, fmt: ReportFormat = "markdown") -> Report:
    """Write ``built`` into ``out`` (figures included) and return it with its figures."""
    out.mkdir(parents=True, exist_ok=True)
    files = {"effort": EFFORT_FILE, "tokens": TOKENS_FILE}
    figures: dict[str, Path] = {}
    for name, image in built.figure_images().items():
        figures[name] = out / files[name]
        figures[name].write_bytes(image)
    done = Report(**{**built.__dict__, "figures": figures, "out": out})
    for name, table in done.tables.items():
        if not table.empty:
            table.to_csv(out / f"{name}.csv", index=False)
    done.runs.to_csv(out / "runs.csv", index=False)
    name = "report.tex" if fmt == "latex" else "report.md"
    (out / name).write_text(done.document(fmt), encoding="utf-8")
    (out / "report.json").write_text(json.dumps(done.to_json(), indent=2) + "\n", "utf-8")
    return done


def _records(table: pd.DataFrame) -> list[dict[str, Any]]:
    rows = table.to_dict(orient="records")
    return [
        {
            str(k): (None if isinstance(v, float) and math.isnan(v) else _plain(v))
            for k, v in r.items()
        }
        for r in rows
    ]


def _plain(value: Any) -> Any:
    """A numpy scalar as a plain Python value."""
    return value.item() if hasattr(value, "item") else value


def _header(r: Report) -> list[str]:
    """The report's first line; the panel's name (any file name) escaped to one inert line
    without backticks, so it cannot end a Markdown code span or a LaTeX comment."""
    name = escape_untrusted(r.panel.name).replace("`", "'")
    return [
        f"Panel `{name}`: {plural(r.units, 'paired unit')}; intervals: {round(r.level * 100)}% "
        f"percentile cluster bootstrap of the pooled difference, resampling "
        f"{CLUSTER_PLURALS.get(r.cluster, r.cluster)} ({r.resamples:,} resamples, seed "
        f"{r.seed}).",
    ]


def _markdown(r: Report) -> str:
    lines = ["# Panel report", "", *_header(r), ""]
    if r.endpoint_line is not None:
        lines += [f"Served {r.endpoint_line}.", ""]
    for name, title in TABLE_TITLES.items():
        table = r.tables.get(name)
        if table is None or table.empty:
            continue
        lines += [f"## {title}", "", table.to_markdown(index=False), ""]
    if r.reviewers:
        lines += ["## What the reviewers did", ""]
        lines += [f"- {escape_untrusted(line)}" for line in r.reviewers] + [""]
    for name, path in r.figures.items():
        lines += [f"![{name}]({path.name})", ""]
    if r.pairs:
        lines += _text_section(
            "Paired outcomes by unit and the decisions behind them", pair_lines(r.pairs)
        )
    if r.frozen_sources:
        lines += _text_section(
            "Frozen source programs (read from files, not sampled)",
            [f"{unit}: {shown}" for unit, shown in r.frozen_sources.items()],
        )
    if r.problems:
        lines += _text_section(PROBLEMS_TITLE, r.problems)
    lines += ["Open the runs in the viewer:", "", "```sh", r.viewer, "```", ""]
    return "\n".join(lines)


def _text_section(title: str, lines: list[str]) -> list[str]:
    """A report section of untrusted text lines in one ``text`` block, each line escaped to one
    inert line without backticks (none can end the block)."""
    body = [escape_untrusted(line).replace("`", "'") for line in lines]
    return [f"## {title}", "", "```text", *body, "```", ""]


def _latex(r: Report) -> str:
    served = [f"served {r.endpoint_line}"] if r.endpoint_line is not None else []
    parts = [f"% {line}" for line in (*_header(r), *served, *r.reviewers, f"viewer: {r.viewer}")]
    for name, title in TABLE_TITLES.items():
        table = r.tables.get(name)
        if table is None or table.empty:
            continue
        body = table.to_latex(index=False, escape=True, caption=title, label=f"tab:{name}")
        parts.append(body)
    return "\n".join(parts)
