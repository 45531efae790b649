"""A panel's branches started by fork (paper 3.1, 3.2, A.4, A.5), on real parts (the npm
filesystem server, the isolated worker and its fork supervisor) with scripted models.

Where the environment's state is its workspace and each run has a process of its own, a
unit's branches start together from one replay of its Keep run's prefix, forked once per
branch: the prefix's tool calls reach the server once for all of them, not once per branch,
and every branch ends as the branch that replays the prefix itself ends.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import controlscope as cs
from controlscope import panel as cp
from controlscope import replay
from controlscope.core import BranchPointEvent, PrimitiveCallEvent
from controlscope.envs import McpToolServer
from controlscope.panel import _runner
from test_api import BROKEN, TASK
from test_linked_panels import linked
from test_panel import write_config
from test_replay import KEEP, PATCH, REPLACE, fenced

COMPARED = ("status", "success", "end_reason", "primitive_calls", "request_hash", "state_hash")


def config(tmp: Path, reviews: list[str], **extra: Any) -> cp.PanelConfig:
    planner, reviewer = tmp / "planner.json", tmp / "reviewer.json"
    planner.write_text(json.dumps({"by": "turn", "answers": [fenced(BROKEN), "Done."]}))
    reviewer.write_text(json.dumps(reviews))
    return cp.parse_config(
        {
            "tasks": [TASK],
            "seeds": [0],
            "scopes": ["keep", "arg", "full"],
            "start": "first_boundary",
            "planner": {"model": f"scripted:{planner}"},
            "reviewer": {"model": f"scripted:{reviewer}"},
            **extra,
        }
    )


def outcomes(result: cp.PanelResult) -> dict[str, tuple[Any, ...]]:
    """Each branch's record fields and terminal files."""
    found = {}
    for run_id, record in result.records.items():
        if run_id.endswith("/keep"):
            continue
        summary = cs.read_summary(cp.run_dir(result.panel, run_id))
        fields = tuple(getattr(record, name) for name in COMPARED)
        found[run_id] = (*fields, summary.file_hashes, summary.replacements)
    return found


def test_a_panels_branches_are_forked_and_end_as_replayed_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two units, Arg and Full with two reviewer draws each (a patch, a replacement): by fork
    (the default here) and by prefix replay, the same records and terminal files; each
    record says how its branch started."""
    cfg = config(tmp_path, [KEEP, PATCH, REPLACE, *[KEEP] * 10], seeds=[0, 1], draws=2)
    forked = cp.run_panel(cfg, tmp_path / "fork", workers=2)
    monkeypatch.setattr(_runner, "branches_by_fork", lambda backend, config: False)
    replayed = cp.run_panel(cfg, tmp_path / "replay", workers=2)
    assert forked.complete and replayed.complete
    f, r = outcomes(forked), outcomes(replayed)
    assert len(f) == 8 and f == {k.replace("/replay/", "/fork/"): v for k, v in r.items()}
    assert {v[1] for v in f.values()} == {False, True}  # Arg fails, Full's replacement solves
    branches = [rec for rid, rec in forked.records.items() if not rid.endswith("/keep")]
    assert {rec.mechanism for rec in branches} == {"fork"}
    assert {rec.mechanism for rid, rec in replayed.records.items() if "keep" not in rid} == {
        "replay"
    }
    for unit in forked.plan.units:
        unit_dir = cp.run_dir(forked.panel, f"{unit}/keep").parent
        assert cs.read_summary(unit_dir / "prefix").end_reason == "prefix_end"
        start = cs.read_events(unit_dir / "arg-d1")[0]
        assert start.branch is not None and start.branch.mechanism == "fork"  # type: ignore[attr-defined]
    assert cs.report(forked.panel, write=False).problems == []


@pytest.fixture
def server_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A file every tool call a tool server receives is written to (one line each, from
    this process and every process forked from it)."""
    calls = tmp_path / "server-calls.txt"
    real = McpToolServer.call

    def counted(
        self: McpToolServer, name: str, arguments: dict[str, Any], *a: Any, **k: Any
    ) -> Any:
        with open(calls, "a", encoding="utf-8") as f:
            f.write(json.dumps([name, arguments]) + "\n")
        return real(self, name, arguments, *a, **k)

    monkeypatch.setattr(McpToolServer, "call", counted)
    return calls


def test_a_forked_group_sends_its_prefix_to_the_server_once(
    tmp_path: Path, server_calls: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Branched at the Keep run's midpoint (three calls before it): the unit's two branches
    started by fork send the prefix's calls to the server once, by replay once each; they
    end the same."""
    cfg = config(tmp_path, [KEEP] * 20, start="midpoint")
    monkeypatch.setattr(_runner, "branches_by_fork", lambda backend, config: False)
    folder = tmp_path / "panel"
    assert cp.run_panel(cfg, folder, workers=1).complete  # the Keep run, in a pool process
    plan = cp.read_manifest(folder).plan
    lead, sibling = (r for r in plan.runs if r.scope != "keep")

    server_calls.write_text("")
    replayed = [cp.execute(cp.RunJob(folder, cfg, run)) for run in (lead, sibling)]
    by_replay = server_calls.read_text().splitlines()
    server_calls.write_text("")
    first = cp.execute(cp.RunJob(folder, cfg, lead, (sibling,)))
    by_fork = server_calls.read_text().splitlines()
    forked = [first, cp.read_record(cp.run_dir(folder, sibling.id))]

    for f, r in zip(forked, replayed, strict=True):
        assert [getattr(f, n) for n in COMPARED] == [getattr(r, n) for n in COMPARED]
        assert (f.mechanism, r.mechanism) == ("fork", "replay")
    log = cs.read_events(cp.run_dir(folder, lead.id))
    point = next(i for i, e in enumerate(log) if isinstance(e, BranchPointEvent))
    prefix = sum(isinstance(e, PrimitiveCallEvent) for e in log[:point])
    assert prefix == 3  # BROKEN's seven calls, the boundary at the midpoint
    assert len(by_replay) == 2 * 7  # each branch: the prefix's 3 calls, then its own 4
    assert len(by_fork) == 3 + 2 * 4, by_fork  # the prefix's calls once
    assert sorted(by_fork + by_replay[:3]) == sorted(by_replay)


def test_a_unit_whose_branches_all_start_at_once_is_one_job(tmp_path: Path) -> None:
    """One unit, more workers than it has branches: its four branches go to one job (none
    of them is submitted again on its own) and each is recorded by it."""
    cfg = config(tmp_path, [KEEP] * 20, draws=2)
    result = cp.run_panel(cfg, tmp_path / "panel", workers=4)
    assert result.complete and len(result.records) == 5
    branches = [r for rid, r in result.records.items() if not rid.endswith("/keep")]
    assert [r.mechanism for r in branches] == ["fork"] * 4
    assert {r.status for r in branches} == {"done"}


def test_a_second_schedules_runs_are_forked_and_end_as_replayed_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """B.2's design (continuous Full replaces at call 3; protect:5 parts at call 4): the
    protected panel's runs (``diverge_from``) start by fork from one replay of the shared
    prefix, and end with the records, shared prefix and terminal files of runs that replay
    it themselves; each record says how it started, and no trunk is left behind."""
    first = cp.load_config(write_config(tmp_path, scopes=["keep", "full"], start="whole"))
    first = first.model_copy(update={"schedule": "continuous"})
    second = linked(
        first.model_copy(update={"schedule": "protect:5"}),
        keep_from="../continuous",
        diverge_from="../continuous",
    )
    assert cp.run_panel(first, tmp_path / "continuous").complete
    forked = cp.run_panel(second, tmp_path / "fork")
    monkeypatch.setattr(_runner, "diverged_by_fork", lambda backend, config: False)
    replayed = cp.run_panel(second, tmp_path / "replay")
    assert forked.complete and replayed.complete
    ends = {}
    for result in (forked, replayed):
        run_id = next(r for r in result.records if r.endswith("/full-d0"))
        record = result.records[run_id]
        run = cp.run_dir(result.panel, run_id)
        assert record.diverged_at == 4 and record.problem == "" and record.detail == ""
        shared = replay.check_shared_prefix(cp.run_dir(tmp_path / "continuous", run_id), run)
        files = cs.read_summary(run).file_hashes
        fields = tuple(getattr(record, name) for name in COMPARED)
        ends[record.mechanism] = (fields, files, shared, [e.type for e in cs.read_events(run)])
        assert not [p for p in run.parent.iterdir() if p.name.startswith(".")]  # the trunk
    assert sorted(ends) == ["fork", "replay"] and ends["fork"] == ends["replay"]
    assert ends["fork"][2].shared_reviews == 3  # keep, patch, the first replacement
