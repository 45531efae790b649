"""Panels that take runs from another panel of their experiment (paper 4, A.5, B.1, B.2): the
Keep run reused by identity (``execution.keep_from``) and a second schedule branched from the
first schedule's runs where the two part (``execution.diverge_from``), on real parts (the npm
filesystem server, pool processes) with scripted models."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import controlscope as cs
from controlscope import experiments as ex
from controlscope import panel as cp
from controlscope import replay
from controlscope.analysis import report
from controlscope.core import ModelCallEvent, ReviewRequestEvent, RunStartEvent
from controlscope.experiments import _across as ex_across
from controlscope.panel import _linked as cp_linked
from controlscope.panel import _unit as cp_unit
from controlscope.view._folders import find_target
from controlscope.view._panel import read_panel_page
from test_api import TASK
from test_panel import write_config

UNIT = f"{TASK}/s0/p0"


def linked(config: cp.PanelConfig, **update: object) -> cp.PanelConfig:
    """``config`` with its execution section updated (``keep_from``, ``diverge_from``...)."""
    execution = config.execution.model_copy(update=update)
    return config.model_copy(update={"execution": execution})


@pytest.fixture(scope="module")
def panels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """B.1's design on one unit: one-time Arg and Full from the Keep run's midpoint (K = 3 of
    7 calls), then the continuous panel from the one-time panel's runs."""
    tmp = tmp_path_factory.mktemp("linked")
    one_time = cp.load_config(write_config(tmp, start="midpoint", schedule="once"))
    continuous = linked(
        one_time.model_copy(update={"schedule": "continuous"}),
        keep_from="../one_time",
        diverge_from="../one_time",
    )
    folders = {"one_time": tmp / "one_time", "continuous": tmp / "continuous"}
    assert cp.run_panel(one_time, folders["one_time"]).complete
    assert cp.run_panel(continuous, folders["continuous"]).complete
    return folders


def first_review(run_dir: Path) -> tuple[str, str]:
    call = next(
        e for e in cs.read_events(run_dir) if isinstance(e, ModelCallEvent) and e.role == "reviewer"
    )
    assert call.response is not None
    return call.request.model_dump_json(), call.response.text


def test_the_keep_run_is_reused_by_identity_not_run_again(panels: dict[str, Path]) -> None:
    ours = cp.run_dir(panels["continuous"], f"{UNIT}/keep")
    theirs = cp.run_dir(panels["one_time"], f"{UNIT}/keep")
    record = cp.read_record(ours)
    assert record.log_sha256 == cp.read_record(theirs).log_sha256 is not None
    assert (ours / "events.jsonl").read_bytes() == (theirs / "events.jsonl").read_bytes()
    terminal = cs.read_summary(theirs).state_hash
    assert f"reused: the Keep run of {panels['one_time']}" in record.detail
    assert f"terminal state hash {terminal}" in record.detail


def test_continuous_runs_share_the_one_time_first_review_and_part_after_it(
    panels: dict[str, Path],
) -> None:
    for scope in ("arg", "full"):
        run_id = f"{UNIT}/{scope}-d0"
        first = cp.run_dir(panels["one_time"], run_id)
        second = cp.run_dir(panels["continuous"], run_id)
        record = cp.read_record(second)
        assert record.status == "done" and record.detail == "" and record.diverged_at == 4
        assert first_review(second) == first_review(first)
        reviewed = [
            e.call_index for e in cs.read_events(second) if isinstance(e, ReviewRequestEvent)
        ]
        assert reviewed[0] == 3 and reviewed[1] == 4
        assert replay.check_shared_prefix(first, second).shared_reviews == 1


def test_a_panel_configured_otherwise_lends_no_runs(
    panels: dict[str, Path], tmp_path: Path
) -> None:
    config = cp.read_manifest(panels["one_time"]).config
    budgets = config.budgets.model_copy(update={"max_calls": 9})
    other = linked(
        config.model_copy(update={"schedule": "continuous", "budgets": budgets}),
        keep_from=str(panels["one_time"]),
        diverge_from=str(panels["one_time"]),
    )
    result = cp.run_panel(other, tmp_path / "other")
    assert not result.complete
    records = [cp.read_record(cp.run_dir(tmp_path / "other", r.id)) for r in result.plan.runs]
    assert {r.status for r in records} == {"error"}
    assert all("is configured otherwise: budgets" in r.detail for r in records)


# --- cells that pair units across panels (Table 4's within-scope change, B.2's W/L/T) ---------

UPPER = "file_context/uppercase"  # one call: no boundary a continuous review follows


@pytest.fixture(scope="module")
def protection(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """B.2's design on two units: continuous Full (a replacement at call 3 of the split task;
    no review on the uppercase task), then protected Full from the continuous panel's runs."""
    tmp = tmp_path_factory.mktemp("protection")
    continuous = cp.load_config(
        write_config(tmp, tasks=[TASK, UPPER], scopes=["keep", "full"], start="whole")
    )
    continuous = continuous.model_copy(update={"schedule": "continuous"})
    protected = linked(
        continuous.model_copy(update={"schedule": "protect:5"}),
        keep_from="../continuous",
        diverge_from="../continuous",
    )
    folders = {"continuous": tmp / "continuous", "protected": tmp / "protected"}
    assert cp.run_panel(continuous, folders["continuous"]).complete
    assert cp.run_panel(protected, folders["protected"]).complete
    return folders


def outcomes_by_unit(folder: Path, scope: str) -> dict[str, bool]:
    """Each unit's success under ``scope`` (draw 0), read from the run records alone."""
    plan = cp.read_manifest(folder).plan
    return {
        r.unit: bool(cp.read_record(cp.run_dir(folder, r.id)).success)
        for r in plan.runs
        if r.scope == scope
    }


def across(folders: dict[str, Path], panel: str, baseline: str, **cell: Any) -> ex.CellValue:
    """The cell of ``panel`` against ``baseline`` (its ``versus_panel``)."""
    reports = {name: report(path, write=False, resamples=200) for name, path in folders.items()}
    found = ex.Cell(panel=panel, versus_panel=baseline, **cell)
    return ex.cell_value(found, reports, resamples=200)


def expected(base: dict[str, bool], other: dict[str, bool]) -> tuple[int, int, int, float]:
    """Wins, losses, ties and the paired difference of ``other`` against ``base``."""
    diffs = [int(other[u]) - int(base[u]) for u in base]
    wins, losses = diffs.count(1), diffs.count(-1)
    return wins, losses, diffs.count(0), sum(diffs) / len(diffs)


def test_the_within_scope_change_pairs_continuous_with_one_time(panels: dict[str, Path]) -> None:
    """Table 4 (B.1): continuous minus one-time within each scope."""
    for scope in ("arg", "full"):
        base = outcomes_by_unit(panels["one_time"], scope)
        other = outcomes_by_unit(panels["continuous"], scope)
        wins, losses, ties, diff = expected(base, other)
        found = across(panels, "continuous", "one_time", metric="wins_losses_ties", scope=scope)
        assert found.text == f"{wins}/{losses}/{ties}"
        change = across(panels, "continuous", "one_time", metric="difference", scope=scope)
        assert change.value == pytest.approx(diff) and change.text == f"{100 * diff:+.1f}"


def test_protection_counts_wins_losses_ties_and_activations(
    protection: dict[str, Path],
) -> None:
    """B.2: protected against continuous Full; protection activates where the two part."""
    base = outcomes_by_unit(protection["continuous"], "full")
    other = outcomes_by_unit(protection["protected"], "full")
    assert len(base) == 2
    wins, losses, ties, diff = expected(base, other)
    found = across(protection, "protected", "continuous", metric="wins_losses_ties")
    assert found.text == f"{wins}/{losses}/{ties}"
    parted = 0
    for run_dir in sorted((protection["protected"] / cp.RUNS_DIR).rglob("full-d0")):
        start = cs.read_events(run_dir)[0]
        assert isinstance(start, RunStartEvent) and start.branch is not None
        assert start.branch.purpose == "divergence"
        parted += start.branch.boundary is not None
    assert parted == 1  # the split task parts after its replacement; uppercase never does
    reports = {n: report(p, write=False, resamples=200) for n, p in protection.items()}
    cell = ex.Cell(panel="protected", metric="activations", scope="full")
    assert ex.cell_value(cell, reports).text == str(parted)
    change = across(protection, "protected", "continuous", metric="difference")
    assert change.value == pytest.approx(diff)


def test_units_whose_keep_runs_differ_do_not_pair() -> None:
    runs = pd.DataFrame({"unit": ["u1", "u2"], "cluster": ["a", "b"], "success": [True, False]})
    keep = pd.DataFrame({"unit": ["u1", "u2"], "terminal_hash": ["h1", "h2"]})
    table = ex_across.paired_across(runs, runs, keep, keep)
    assert list(table[ex_across.COMPARED]) == [True, False]
    other = keep.assign(terminal_hash=["h1", "zz"])
    with pytest.raises(ValueError, match="unit u2 does not pair across the panels: their Keep"):
        ex_across.paired_across(runs, runs, keep, other)


def test_the_matched_interface_check_compares_paired_first_requests(
    panels: dict[str, Path],
) -> None:
    """A.4, 5.1: paired first review requests coincide in messages, schemas, tool choice,
    token cap and model; Arg's and Full's differ in the operations offered (the schema)."""
    same = across(panels, "continuous", "one_time", metric="first_requests", scope="full")
    assert same.text == "1/1"
    apart = across(
        panels, "continuous", "one_time", metric="first_requests", scope="arg", versus="full"
    )
    requests = [
        next(
            e.request
            for e in cs.read_events(cp.run_dir(panels[name], f"{UNIT}/{scope}-d0"))
            if isinstance(e, ModelCallEvent) and e.role == "reviewer"
        )
        for name, scope in (("one_time", "full"), ("continuous", "arg"))
    ]
    fields = ("messages", "tools", "json_schema", "tool_choice", "max_tokens")
    differ = [f for f in fields if getattr(requests[0], f) != getattr(requests[1], f)]
    assert differ and apart.text == "0/1" and apart.note.split(": ")[1].split("[")[0] in differ


def test_a_shared_prefix_that_fails_its_check_is_a_listed_problem(
    panels: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second-schedule run whose shared prefix fails its check keeps its verdict and is
    named among the report's problems (and on the viewer's panel page), not hidden in its
    record's detail."""
    for name, folder in panels.items():
        shutil.copytree(folder, tmp_path / name)
    folder = tmp_path / "continuous"
    config = cp.read_manifest(folder).config
    planned = next(r for r in cp.read_manifest(folder).plan.runs if r.scope == "full")

    def failing(first: object, second: object) -> None:
        raise replay.ReplayError("the shared prefix differs at its event 7 (model_call)")

    monkeypatch.setattr(cp_linked, "check_shared_prefix", failing)
    record = cp_unit.execute(cp_unit.RunJob(panel=folder, config=config, run=planned))
    assert record.status == "done" and record.success is not None and record.detail == ""
    assert "fails its check: the shared prefix differs at its event 7" in record.problem
    built = report(folder, write=False, resamples=200)
    listed = [p for p in built.problems if p.startswith(f"{planned.id}: failed a check")]
    assert len(listed) == 1 and "event 7 (model_call)" in listed[0]
    row = built.runs.set_index("id").loc[planned.id]
    assert row["status"] == "done" and bool(row["success"]) == record.success
    assert "## Problems: runs missing" in built.document("markdown")
    assert any("event 7 (model_call)" in n for n in read_panel_page(find_target(folder)).notes)
