"""The filesystem experiments other than Table 1 and Table 4: Table 6's local intervention (M6),
feedback visibility (M7), five-call protection (M9), Table 3's student workload (M10, M11), the
file-organisation workload (M12, M4) and Figure 3's candidate replays (M3).

Every config loads and resolves at both sizes against the filesystem environment's tasks; each
runs end to end at a tiny size (one task, one seed, small budgets) with scripted models on real
parts (the npm filesystem server, the isolated worker, pool processes), writing every table,
figure and ``paper-vs-ours.md`` it promises.

The scripted planner writes one generic program for any filesystem task: a read
(``list_directory``), a unique direct read (``get_file_info``, the boundary the local and the
feedback rules both choose: call 1), then writes. The scripted reviewer replaces the rest of the
workflow at its first review (Arg cannot: a recorded out-of-scope fallback), patches a path at
its second, and keeps after that.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import controlscope as cs
from controlscope import experiments as ex
from controlscope import panel as cp
from controlscope.analysis import report
from controlscope.core import RunStartEvent
from controlscope.envs import get_environment
from controlscope.panel.testing import SyntheticRun, write_synthetic_panel

MINE = (
    "table6_local",
    "feedback_visibility",
    "protection_five_calls",
    "table3_students",
    "file_organisation",
    "figure3_candidates",
)

PROGRAM = """root = "/workspace"
names = list_directory(path=root)
info = get_file_info(path=root)
create_directory(path=root + "/scratch")
write_file(path=root + "/scratch/a.txt", content="a")
write_file(path=root + "/scratch/b.txt", content="b")
"""
REPLACEMENT = (
    'create_directory(path="/workspace/scratch")\n'
    'write_file(path="/workspace/scratch/r.txt", content="r")\n'
)
REPLACE = json.dumps(
    {"reason": "write it at once", "operation": "replace_workflow", "code": REPLACEMENT}
)
PATCH = json.dumps(
    {
        "reason": "the scratch folder",
        "operation": "patch_arguments",
        "arguments": {"path": "/workspace/scratch"},
    }
)
KEEP = json.dumps({"reason": "fine", "operation": "keep"})

TINY: dict[str, Any] = {
    "seeds": [0],
    "budgets": {"max_calls": 8, "max_turns": 3},
    "execution": {"workers": 2},
}
"""Every experiment at a tiny size: one data seed, small budgets."""
ALL_TASKS = {**TINY, "tasks": ["file_context/file_splitting"]}
"""The experiments over every task: one task."""


def models(tmp: Path, roles: list[str]) -> dict[str, str]:
    planner = tmp / "planner.json"
    fenced = f"```python\n{PROGRAM}\n```"
    planner.write_text(json.dumps({"by": "turn", "answers": [fenced, *["Done."] * 6]}))
    reviewer = tmp / "reviewer.json"
    reviewer.write_text(json.dumps([REPLACE, PATCH, *[KEEP] * 30]))
    found = {role: f"scripted:{reviewer}" for role in roles}
    found["planner"] = f"scripted:{planner}"
    return found


def run_tiny(name: str, tmp: Path, overrides: dict[str, Any]) -> ex.ExperimentResult:
    experiment = ex.load_experiment(name)
    out = tmp / name
    result = ex.run_experiment(
        experiment,
        out,
        models=models(tmp, experiment.experiment.roles),
        overrides=overrides,
        resamples=200,
    )
    assert result.complete
    for table in experiment.tables:
        assert (out / "tables" / f"{table.name}.md").stat().st_size > 0
        shown = pd.read_csv(out / "tables" / f"{table.name}.csv")
        assert list(shown.columns)[1:] == table.columns
        assert len(shown) == len(table.rows)
    vs = (out / "paper-vs-ours.md").read_text()
    assert vs.count("\n| ") - 2 == experiment.paper_cells()  # one line per paper cell
    assert (out / "report.md").read_text().startswith("#")
    return result


def table(result: ex.ExperimentResult, name: str) -> pd.DataFrame:
    return pd.read_csv(result.out / "tables" / f"{name}.csv", dtype=str).set_index("Unnamed: 0")


# --- every config -------------------------------------------------------------------------------


def test_every_config_loads_and_resolves_at_both_sizes(tmp_path: Path) -> None:
    """Each config checks at both sizes, its panels planned against the environment's tasks
    (with scripted models: planning a panel builds its models)."""
    scripted = {"*": f"scripted:{tmp_path / 'script.json'}"}
    (tmp_path / "script.json").write_text(json.dumps([KEEP]))
    env = get_environment("filesystem")
    known = {t.id for t in env.tasks()}
    assert set(MINE) <= set(ex.known_names())
    for name in MINE:
        experiment = ex.load_experiment(name)
        header = experiment.path.read_text().split("\n[experiment]")[0]
        for word in ("(paper", "Needs:", "Time:"):
            assert word in header, (name, word)
        assert experiment.paper_cells() > 0
        for size in ex.SIZES:
            configs = ex.resolve(experiment, size, scripted)
            assert [n for n, _ in configs] == [p.name for p in experiment.panels]
            for _, config in configs:
                assert config.env == "filesystem"
                if config.tasks != "all":
                    assert set(config.tasks) <= known
                plan = cp.plan_panel(config)
                assert plan.units, (name, size)


def test_sizes_and_the_papers_design() -> None:
    """Spot checks of the papers' designs (M6, M7, M9, M10, M12, M3)."""
    by = {n: dict(ex.resolve(ex.load_experiment(n), "paper")) for n in MINE}
    table6 = by["table6_local"]
    assert table6["fast"].start == "local_rule" and table6["fast"].draws == 3
    assert table6["reasoning"].reviewer.protocol == "reasoning"
    feedback = by["feedback_visibility"]
    assert {c.start for c in feedback.values()} == {"feedback_rule"}
    assert [c.reviewer.view for c in feedback.values()] == ["code_only", "with_feedback"]
    assert by["protection_five_calls"]["protected"].schedule == "protect:5"
    confirm = by["table3_students"]["confirm_fast"]
    assert confirm.seeds == [101, 102, 103] and confirm.sources == [1, 2]
    assert confirm.params["student_database/english_talent"] == {
        "students": 75,
        "pool": 0,
        "pool_size": 150,
    }
    explore = {n: c.params for n, c in by["table3_students"].items() if n.startswith("explore")}
    sizes = {p["student_database/english_talent"]["students"] for p in explore.values()}
    assert sizes == {25, 75, 150}
    organisation = by["file_organisation"]["confirmation"]
    assert organisation.params["file_property/time_classification"] == {"files": 16, "levels": 3}
    assert len(organisation.seeds) == 3
    figure3 = by["figure3_candidates"]
    assert [c.replace_boundary for c in figure3.values()] == ["block", "reply"]
    assert {c.reviewer.tool_choice for c in figure3.values()} == {"required"}


def test_a_cell_pools_every_draw_of_a_reviewing_scope(tmp_path: Path) -> None:
    """Table 6's rows pool three reviewer draws per state (``draw = "all"``): successes over
    every draw, paired wins and losses summed draw by draw; Keep stays one run per unit."""
    runs = []
    for i, category in enumerate(("a", "b", "c", "d")):
        unit = f"{category}/t/s0/p0"
        runs.append(SyntheticRun(unit, category, "keep", i < 2))
        for draw in range(3):
            runs.append(SyntheticRun(unit, category, "arg", i < 2, draw=draw))
            full = i < 2 if draw < 2 else i in (1, 2)  # draw 2: one win, one loss vs Arg
            runs.append(SyntheticRun(unit, category, "full", full, draw=draw, calls=5))
    write_synthetic_panel(tmp_path / "p", runs)
    reports = {"p": report(tmp_path / "p", write=False)}

    def value(**cell: Any) -> str:
        return ex.cell_value(ex.Cell(panel="p", **cell), reports, resamples=200).text

    assert value(metric="successes", scope="full", draw="all") == "6/12"
    assert value(metric="successes", scope="full", draw=2) == "2/4"
    assert value(metric="successes", scope="keep", draw="all") == "2/4"  # one run per unit
    assert value(metric="sum", scope="full", draw="all", column="primitive_calls") == "60"
    assert value(metric="wins_losses", scope="full", versus="arg", draw="all") == "1/1"
    assert value(metric="wins_losses", scope="full", versus="arg", draw=0) == "0/0"
    pooled = ex.cell_value(
        ex.Cell(panel="p", metric="difference", scope="full", versus="arg", draw="all"), reports
    )
    assert pooled.text == "n/a" and "give one draw" in pooled.note
    with pytest.raises(ValueError):
        ex.Cell(panel="p", metric="successes", draw="some")


# --- end to end at a tiny size ------------------------------------------------------------------


def test_table6_local_end_to_end(tmp_path: Path) -> None:
    """M6: one opportunity at the local rule's boundary (call 1); Arg's replacement is a
    recorded fallback counted in Keep, Full's a replacement; later decisions Keep."""
    result = run_tiny("table6_local", tmp_path, ALL_TASKS)
    shown = table(result, "table6")
    assert list(shown.loc["Fast, Arg"]) == ["1", "1", "0", "0", "0", "0"]
    assert list(shown.loc["Fast, Full"]) == ["1", "0", "0", "1", "0", "0"]
    outcomes = table(result, "table6_outcomes")
    assert outcomes.loc["Reasoning", "Full vs Arg W/L"] == "0/0"
    run = next((result.out / "panels" / "fast" / "runs").rglob("full-d0"))
    start = cs.read_events(run)[0]
    assert isinstance(start, RunStartEvent) and start.branch is not None
    assert start.branch.call_index == 1 and start.config is not None
    assert start.config["source"]["rule"] == "local"
    # the paper's 108 beside our 1 (the paper's n between them)
    assert re.search(
        r"^\| table6 \| Fast, Arg \| Decisions \| 108 \| [^|]* \| 1 \|",
        (result.out / "paper-vs-ours.md").read_text(),
        re.M,
    )


def test_feedback_visibility_end_to_end(tmp_path: Path) -> None:
    """M7: both views branch at the A.3 boundary (call 1) of each source program, one Full
    opportunity each."""
    result = run_tiny("feedback_visibility", tmp_path, ALL_TASKS)
    shown = table(result, "feedback_visibility")
    assert shown.loc["P1", "Success (code)"].startswith("0/1")
    assert shown.loc["Total", "Replacements (code)"] == "2"  # one per source program
    assert shown.loc["Total", "Replacements (feedback)"] == "2"
    for view in ("code_only", "with_feedback"):
        runs = sorted((result.out / "panels" / view / "runs").rglob("full-d0"))
        assert len(runs) == 2
        for run in runs:
            start = cs.read_events(run)[0]
            assert isinstance(start, RunStartEvent) and start.config is not None
            assert start.config["source"]["rule"] == "feedback"
            assert start.config["view"] == view


@pytest.mark.slow
def test_protection_five_calls_end_to_end(tmp_path: Path) -> None:
    """M9: continuous and protected Full; after the first replacement protect:5 reviews no
    more within this budget."""
    result = run_tiny("protection_five_calls", tmp_path, ALL_TASKS)
    shown = table(result, "protection")
    continuous = int(shown.loc["Scope reviews", "Continuous Full"])
    protected = int(shown.loc["Scope reviews", "Protected Full"])
    assert protected < continuous
    assert table(result, "protection_conditions").shape == (1, 6)


@pytest.mark.slow
def test_table3_students_end_to_end(tmp_path: Path) -> None:
    """M10 and M11: the confirmation, the exploration grid and the retained first
    replacements of the confirmation's Full runs."""
    result = run_tiny("table3_students", tmp_path, TINY)
    assert len(result.panels) == 8
    shown = table(result, "table3")
    assert shown.loc["Fast", "Success Keep"].startswith("0/2")  # two new programs, one seed
    rows = result.replays
    assert set(rows["replay"]) == {"batch_read_fast", "batch_read_reasoning"}
    assert set(rows["endpoint"]) == {"retained"} and len(rows) == 4
    assert table(result, "workload_exploration").shape == (6, 3)


@pytest.mark.slow
def test_file_organisation_end_to_end(tmp_path: Path) -> None:
    """M12 and M4: the grid, the confirmation, the retained-first and first-alone replays."""
    result = run_tiny("file_organisation", tmp_path, TINY)
    rows = result.replays
    assert set(rows["replay"]) == {"retained_first", "first_alone"}
    shown = table(result, "retained_first")
    assert shown.loc["First replacement retained (every Full run)", "Success"].endswith("/1")


def test_figure3_candidates_end_to_end(tmp_path: Path) -> None:
    """M3: every replacement of each failing Full run replayed as a candidate; the figure."""
    result = run_tiny("figure3_candidates", tmp_path, TINY)
    rows = result.replays
    assert set(rows["endpoint"]) == {"candidate"} and set(rows["replay"]) == {
        "program1",
        "program2",
    }
    for name in ("figure3_program1", "figure3_program2"):
        assert (result.out / "figures" / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    shown = table(result, "figure3")
    assert shown.loc["Program 1 (P1 fast required, block)", "Goal reached"].endswith(
        f"/{int((rows['replay'] == 'program1').sum())}"
    )
