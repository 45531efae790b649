"""Panels that take runs from another panel of their experiment (paper 4, A.5, B.1, B.2): the
Keep run reused by identity (``execution.keep_from``) and a second schedule branched from the
first schedule's runs where the two part (``execution.diverge_from``), on real parts (the npm
filesystem server, pool processes) with scripted models."""

from __future__ import annotations

from pathlib import Path

import pytest

import controlscope as cs
from controlscope import panel as cp
from controlscope import replay
from controlscope.core import ModelCallEvent, ReviewRequestEvent
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
