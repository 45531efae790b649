"""The paper's experiments (``controlscope.experiments``): every packaged file loads and resolves
at both sizes against the real task list; bad files are one-line errors; the metrics match
known values on synthetic panels (one interval from the paper's seven categories); Table 1 and
Table 4 run end to end at a tiny size with scripted models on the real npm server and worker,
producing every table, figure and paper-vs-ours; a frozen candidate replay feeds a table cell
and Figure 3.

The scripted planner and reviewer are test_panel's: the planner's program names the split
files wrongly, the reviewer keeps, then patches the second call's path, then replaces the rest
of the block: Keep and Arg fail, Full succeeds.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

import controlscope as cs
from controlscope import experiments as ce
from controlscope import panel as cp
from controlscope.analysis import report
from controlscope.cli import main as cli
from controlscope.experiments import _settings_table as ce_settings
from controlscope.experiments import _write as ce_write
from controlscope.panel.testing import SyntheticRun, write_synthetic_panel
from test_analysis import CATEGORIES
from test_api import TASK
from test_panel import KEEP, PATCH, scripts

REPO = Path(__file__).resolve().parents[1]


def models(tmp: Path) -> dict[str, str]:
    """The scripted planner for the planner role, the scripted reviewer for every other."""
    found = scripts(tmp)
    return {"planner": found["planner"], "*": found["reviewer"]}


# --- the packaged files -------------------------------------------------------------------------


def test_every_packaged_experiment_loads_and_resolves_at_both_sizes() -> None:
    names = ce.known_names()
    assert {"table1_sustained", "table4_midpoint"} <= set(names)
    assert sorted(p.stem for p in (REPO / "examples").glob("*.toml")) == names
    for name in names:
        experiment = ce.load_experiment(name)
        assert experiment.experiment.title and experiment.experiment.reproduces
        header = (ce.EXPERIMENTS_DIR / f"{name}.toml").read_text().splitlines()[:12]
        assert any("Needs:" in line for line in header) and any("Time:" in line for line in header)
        assert experiment.paper_cells() > 0
        if experiment.base.get("env", "filesystem") != "filesystem":
            continue  # ALFWorld's and the apps': tests/test_experiments_env.py
        for size in ce.SIZES:
            configs = ce.resolve(experiment, size)
            assert [n for n, _ in configs] == [p.name for p in experiment.panels]
            for _, config in configs:
                plan = cp.plan_panel(config, check_models=False)  # real task ids
                assert config.execution.cache_file == "../../cache.sqlite"
                assert config.planner.model == "local"
                if size == "paper" and config.tasks == "all":
                    assert len({r.task for r in plan.runs}) == 20  # the paper's 20 tasks


def test_table1_resolves_the_papers_panels() -> None:
    configs = dict(ce.resolve(ce.load_experiment("table1_sustained"), "paper", {"fast": "f"}))
    block, reasoning = configs["p1_fast_block"], configs["p2_reasoning"]
    assert (block.sources, block.draws, block.replace_boundary) == ([0], 2, "block")
    assert block.reviewer.tool_choice == "required" and block.reviewer.model == "f"
    assert configs["p2_fast_auto"].reviewer.tool_choice == "auto"
    assert (reasoning.sources, reasoning.draws, reasoning.reviewer.protocol) == (
        [1],
        2,
        "reasoning",
    )
    assert reasoning.reviewer.model == "local"
    plan = cp.plan_panel(block, check_models=False)
    assert len(plan.runs) == 20 * 5 and {r.source_program for r in plan.runs} == {0}
    lacking = ce.unserved(list(configs.items()))
    assert [line.split(":")[0] for line in lacking] == ["panel p1_reasoning", "panel p2_reasoning"]
    given = dict(
        ce.resolve(
            ce.load_experiment("table1_sustained"),
            "quick",
            {"reasoning": "openai:r1"},
            {"reviewer": {"options": {"reasoning_effort": "high"}}},
        )
    )
    assert ce.unserved(list(given.items())) == []
    alone = dict(
        ce.resolve(
            ce.load_experiment("table1_sustained"),
            "quick",
            {"reasoning": "openai:r1", "fast": "openai:f1"},
            options={"reasoning": {"reasoning_effort": "high"}},
        )
    )  # the reasoning role's options reach its panels' reviews and nothing else
    assert alone["p2_reasoning"].reviewer.options == {"reasoning_effort": "high"}
    assert alone["p2_fast_auto"].reviewer.options is None
    assert all(c.planner.options is None for c in alone.values())
    assert ce.unserved(list(alone.items())) == []
    with pytest.raises(ce.ExperimentError, match=r"role 'judge'.*its roles: planner, fast"):
        ce.role_options(ce.load_experiment("table4_midpoint"), {"judge": {"x": 1}})


@pytest.mark.network
def test_the_configs_are_packaged_in_the_wheel(tmp_path: Path) -> None:
    """What ``pip install .`` installs: the configs are package data of the wheel (built as
    pip builds it, in an isolated environment: pip fetches the build backend)."""
    import shutil
    import subprocess
    import sys

    tree = tmp_path / "tree"  # a copy: the build writes build/ and *.egg-info where it runs
    shutil.copytree(REPO / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(REPO / name, tree / name)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", str(tree), "-w", str(tmp_path)],
        check=True, capture_output=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("controlscope-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for name in ce.known_names():
        assert f"controlscope/experiments/configs/{name}.toml" in names
    for path in ce.EXPERIMENTS_DIR.rglob("*.json"):  # the files configs name (scripted models)
        assert f"controlscope/experiments/configs/{path.relative_to(ce.EXPERIMENTS_DIR)}" in names


# --- bad input ----------------------------------------------------------------------------------

GOOD = """
[experiment]
title = "t"
reproduces = "r"
needs = "n"
roles = ["planner", "fast"]
[base]
tasks = ["file_context/file_splitting"]
[[panels]]
name = "a"
reviewer = "fast"
[[tables]]
name = "t1"
title = "T"
columns = ["Keep"]
[[tables.rows]]
label = "row"
cells = [{ panel = "a", metric = "successes", scope = "keep" }]
"""


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("[experiment]", "[experiment"), "not TOML"),
        (('title = "t"', 'title = "t"\ncolour = 1'), "experiment.colour: unknown key"),
        (('metric = "successes"', 'metric = "best"'), "metric"),
        (('{ panel = "a"', '{ panel = "b"'), "panel 'b' is not defined; defined: a"),
        (('metric = "successes"', 'metric = "difference"'), "needs versus"),
        (("cells = [{", 'cells = [{ text = "x" }, {'), "has 2 cells for 1 columns"),
        (('reviewer = "fast"', 'reviewer = "slow"'), "reviewer role 'slow' is not among"),
        (('name = "a"', 'name = "A b"'), "lowercase"),
        (('roles = ["planner", "fast"]', 'roles = ["fast"]'), "planner role"),
        (
            ('reviewer = "fast"', 'reviewer = "fast"\n[panels.set.execution]\nkeep_from = "../a"'),
            "panel a: execution.keep_from names an earlier panel of the experiment (../NAME), "
            "not '../a'; earlier panels: none",
        ),
        (
            ('{ panel = "a"', '{ versus_panel = "z", panel = "a"'),
            "row 'row': versus_panel 'z' is not defined",
        ),
    ],
)
def test_a_bad_experiment_file_is_one_line(
    tmp_path: Path, change: tuple[str, str], message: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(GOOD.replace(*change, 1))
    with pytest.raises(ce.ExperimentError) as caught:
        ce.load_experiment(path)
    text = str(caught.value)
    assert message in text and "\n" not in text, text


def test_a_panel_takes_its_keep_runs_from_the_first_earlier_panel_that_can_lend_them() -> None:
    """One Keep run per unit of an experiment (paper 4, A.5): whole-run panels of one source
    share it whatever their reviewers; a branched panel only from one configured alike."""
    linked = {
        name: config.execution.keep_from
        for name, config in ce.resolve(ce.load_experiment("table1_sustained"))
    }
    assert linked == {
        "p1_fast_block": None,
        "p1_reasoning": "../p1_fast_block",
        "p2_fast_required": None,
        "p2_fast_auto": "../p2_fast_required",
        "p2_reasoning": "../p2_fast_required",
    }
    local = ce.resolve(ce.load_experiment("table6_local"))  # branched, another reviewer
    assert [config.execution.keep_from for _, config in local] == [None, None]


def test_resolving_names_the_panel_and_key_that_does_not_check(tmp_path: Path) -> None:
    path = tmp_path / "x.toml"
    path.write_text(GOOD.replace("[base]", '[base]\ndraws = 0\nschedule = "often"'))
    experiment = ce.load_experiment(path)
    with pytest.raises(ce.ExperimentError, match=r"x: panel a: .*draws"):
        ce.resolve(experiment)
    with pytest.raises(ce.ExperimentError, match="unknown size 'huge'"):
        ce.resolve(ce.load_experiment(path.with_name("x.toml")), "huge")  # type: ignore[arg-type]
    with pytest.raises(ce.ExperimentError, match="model role 'reasoning' is not used"):
        ce.role_models(ce.load_experiment("table4_midpoint"), {"reasoning": "local"})
    panel_file = tmp_path / "panel.toml"
    panel_file.write_text('tasks = ["desktop"]\n')
    with pytest.raises(ce.ExperimentError, match="is a panel file, not an experiment"):
        ce.load_experiment(panel_file)


def test_the_command_lists_refuses_in_one_line_and_says_a_panel_file_is_not_one(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert cli(["experiment", "list"]) == 0
    printed = capsys.readouterr().out
    assert "table1_sustained: Table 1" in printed and "table4_midpoint" in printed
    assert "not measured" in printed
    for argv, message in [
        (["experiment", "table9"], "no experiment named 'table9'; known: "),
        (["experiment", "table4_midpoint", "--model", "fast="], "give ROLE=SPEC"),
        (["experiment", "table4_midpoint", "--workers", "0"], "--workers: expected an integer"),
        (["experiment", "table4_midpoint", "--model", "judge=local"], "role 'judge' is not"),
        (["experiment", "table4_midpoint", "--size", "huge"], "invalid choice"),
        (["experiment", "table4_midpoint", "--option", "fast"], "expects ROLE:KEY=JSON"),
        (["experiment", "table4_midpoint", "--option", "fast:top_k"], "expects KEY=VALUE"),
        (["experiment", "table4_midpoint", "--option", "judge:x=1"], "does not use it"),
        (["panel", str(REPO / "examples" / "table1_sustained.toml"), "--out", str(tmp_path)],
         "is an experiment file, not a panel file"),
    ]:  # fmt: skip
        assert cli(argv) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1, err
    assert not list(tmp_path.iterdir())


def test_deep_merge_merges_tables_and_replaces_everything_else() -> None:
    base = {"a": {"x": 1, "y": [1]}, "b": 1}
    merged = ce.deep_merge(base, {"a": {"y": [2], "z": 3}}, None, {"b": {"c": 1}})
    assert merged == {"a": {"x": 1, "y": [2], "z": 3}, "b": {"c": 1}}
    assert base == {"a": {"x": 1, "y": [1]}, "b": 1}


# --- metrics on synthetic panels ----------------------------------------------------------------


def synthetic(folder: Path) -> cs.Report:
    """20 units in the paper's seven categories, P1 and P2 alike; Full wins one unit of
    student_database and loses one of legal_document against Keep (the paper's matched fast
    panel, section 5.1); Arg draw 0 equals Keep; every successful run takes 10 calls, except
    Full's, which take 30."""
    runs = []
    for category, size in CATEGORIES.items():
        for i in range(size):
            keep = full = i % 2 == 0
            if category == "student_database" and i == 1:
                full = True
            if category == "legal_document" and i == 0:
                full = False
            unit = f"{category}/t{i}"
            runs.append(SyntheticRun(unit=unit, category=category, scope="keep", success=keep))
            runs.append(SyntheticRun(unit=unit, category=category, scope="arg", success=keep))
            runs.append(
                SyntheticRun(unit=unit, category=category, scope="full", success=full, calls=30)
            )
    write_synthetic_panel(folder, runs)
    return report(folder, write=False)


def test_metrics_match_known_values_and_the_papers_interval(tmp_path: Path) -> None:
    reports = {"p": synthetic(tmp_path / "p")}

    def value(**cell: Any) -> ce.CellValue:
        return ce.cell_value(ce.Cell(panel="p", **cell), reports)

    keep = value(metric="successes", scope="keep")
    assert keep.text == "12/20" and keep.value == pytest.approx(0.6)
    assert keep.low is not None and keep.high is not None and keep.low < 60.0 < keep.high
    assert value(metric="rate", scope="full").text == "60.0%"
    diff = value(metric="difference", scope="full", versus="keep")
    assert diff.text == "+0.0" and diff.interval == "[-14.3, 16.7]"  # paper section 5.1
    assert value(metric="wins_losses", scope="full", versus="keep").text == "1/1"
    assert value(metric="wins_losses", scope="full", versus="arg").text == "1/1"
    assert value(metric="sum", scope="full", column="primitive_calls").text == "600"
    both = ["planner_logical_output", "primitive_calls"]
    assert value(metric="sum", scope="keep", column=both).text == f"{20 * 100 + 20 * 10:,}"
    assert value(metric="within", scope="keep", k=10).text == "12"
    assert value(metric="within", scope="full", k=29).text == "0"
    assert value(metric="successes", scope="keep", tasks=["papers"]).text == "2/3"
    assert value(metric="successes", scope="keep", split="desktop").text == "2/3"
    assert value(metric="tgc", scope="full").text == "60.00%"
    assert value(metric="sgc", scope="keep").text == "60.00%"  # templates are the units
    missing = value(metric="successes", scope="full", draw=3)
    assert missing.text == "n/a" and "no runs of full draw 3" in missing.note
    assert value(metric="successes", scope="keep", source=1).text == "n/a"
    gone = ce.cell_value(ce.Cell(panel="q", metric="successes"), reports)
    assert gone.text == "n/a" and "did not run" in gone.note
    assert ce.cell_value(ce.Cell(text="Block"), reports).shown == "Block"


# --- end to end with scripted models ------------------------------------------------------------


@pytest.mark.slow  # 19 runs in five panels: about a minute on two idle cores
def test_table1_runs_end_to_end_and_writes_every_table_and_figure(tmp_path: Path) -> None:
    experiment = ce.load_experiment("table1_sustained")
    out = tmp_path / "t1"
    result = ce.run_experiment(
        experiment, out, models=models(tmp_path), overrides={"tasks": [TASK]}, resamples=200
    )
    assert result.complete and set(result.panels) == {p.name for p in experiment.panels}
    assert set(result.tables) == {
        "table1",
        "table1_full_keep",
        "table1_rejected",
        "table1_matched",
        "table5_settings",
    }
    for path in [*result.tables.values(), *(p.with_suffix(".csv") for p in result.tables.values())]:
        assert path.stat().st_size > 0
    rows = (out / "tables" / "table1.csv").read_text().splitlines()
    assert rows[0] == ",Replace,Keep,Arg,Full,F W/L" and len(rows) == 8
    assert rows[1].startswith('"P1 fast (required), draw 1",Block,"0/1') and rows[1].endswith(
        '"1/1 [100.0, 100.0]",1/0'
    )
    assert (out / "figures" / "p2_fast_auto_effort.png").read_bytes()[:4] == b"\x89PNG"
    versus = (out / "paper-vs-ours.md").read_text()
    assert versus.count("\n| table1") == experiment.paper_cells()
    assert (
        "| table1 | P2 fast (required) | Full | 10/20 | 20 | 1/1 | 1 | differ | [100.0, 100.0] |"
        in versus
    )
    text = (out / "report.md").read_text()
    assert "## What the models could not serve" in text and "panel p2_reasoning" in text
    assert "size: quick" in text and "reasoning = scripted:" in text
    # one cache for every panel, and one Keep run per unit: a later panel's is the first's
    assert (out / "cache.sqlite").exists() and not list(out.glob("panels/*/cache.sqlite"))
    keep = cp.run_dir(out / "panels" / "p2_reasoning", f"{TASK}/s0/p1/keep")
    first = cp.run_dir(out / "panels" / "p2_fast_required", f"{TASK}/s0/p1/keep")
    assert (keep / "events.jsonl").read_bytes() == (first / "events.jsonl").read_bytes()
    assert "reused: the Keep run of" in cp.read_record(keep).detail


def test_table4_runs_by_the_command_resumes_and_refuses_another_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "t4"
    given = models(tmp_path)
    argv = ["experiment", "table4_midpoint", "--out", str(out), "--quiet", "--workers", "2"]
    argv += ["--model", given["*"], "--model", f"planner={given['planner']}"]
    argv += ["--option", "fast:top_k=5", "--option", "fast:note=as text"]
    assert cli(argv) == 0  # quick size: the one split task, 12 calls
    printed = capsys.readouterr().out
    assert "table table4:" in printed and "paper-vs-ours.md" in printed
    rows = (out / "tables" / "table4.csv").read_text().splitlines()
    assert rows[2].startswith("Arg,") and rows[3].startswith("Full,")
    paired = (out / "tables" / "table4_paired.md").read_text()
    assert "| Full vs Keep" in paired
    for panel in ("one_time", "continuous"):
        config = cp.read_manifest(out / "panels" / panel).config
        assert config.start == "midpoint" and config.sources == [1]
        assert config.reviewer.options == {"top_k": 5, "note": "as text"}
        assert config.planner.options is None
    once = report(out / "panels" / "one_time", write=False).tables["resources"]
    assert set(once.loc[once["scope"] != "keep", "reviews"]) == {1}  # one review at the midpoint
    assert (out / "figures" / "continuous_tokens.png").exists()
    assert "| table4 | Full | Continuous | 14/20 | 20 |" in (out / "paper-vs-ours.md").read_text()
    before = (out / "panels" / "continuous" / "runs").stat().st_mtime_ns
    experiment = ce.load_experiment("table4_midpoint")
    with pytest.raises(ce.ExperimentError, match="config_hash is"):  # the options differ
        ce.run_experiment(experiment, out, models=given, resamples=100)
    options = {"fast": {"top_k": 5, "note": "as text"}}
    again = ce.run_experiment(experiment, out, models=given, options=options, resamples=100)
    assert all(p.status.skipped == p.status.total for p in again.panels.values())
    assert (out / "panels" / "continuous" / "runs").stat().st_mtime_ns == before
    with pytest.raises(ce.ExperimentError, match="size is 'quick' there, 'paper' here"):
        ce.run_experiment(experiment, out, size="paper", models=given)


REPLAYED = """
[experiment]
title = "Candidates"
reproduces = "Figure 3"
needs = "filesystem"
roles = ["planner", "fast"]
[base]
tasks = ["file_context/file_splitting"]
scopes = ["keep", "full"]
[[panels]]
name = "fast"
reviewer = "fast"
[[replays]]
name = "candidates"
panel = "fast"
scope = "full"
operations = "replacements"
endpoint = "candidate"
[[tables]]
name = "candidates"
title = "Frozen candidates reaching the goal"
columns = ["Goal reached", "Block finished"]
[[tables.rows]]
label = "P1"
[[tables.rows.cells]]
replay = "candidates"
metric = "replays"
field = "goal_reached"
program = 0
paper = "49/71"
[[tables.rows.cells]]
replay = "candidates"
metric = "replays"
field = "block_finished"
[[figures]]
name = "figure3"
kind = "candidates"
replay = "candidates"
"""


def test_frozen_candidate_replays_feed_a_cell_and_figure_3(tmp_path: Path) -> None:
    path = tmp_path / "candidates.toml"
    path.write_text(REPLAYED)
    out = tmp_path / "out"
    result = ce.run_experiment(ce.load_experiment(path), out, models=models(tmp_path))
    rows = json.loads((out / "replays" / "candidates" / "replays.json").read_text())
    assert len(rows) == 1 and len(result.replays) == 1
    (row,) = rows
    assert row["run"] == f"{TASK}/s0/p0/full-d0" and row["ok"] is True
    assert row["endpoint"] == "candidate" and (row["call_index"], row["calls"]) == (3, 7)
    assert row["goal_reached"] is True and row["block_finished"] is True  # as test_replay's
    versus = (out / "paper-vs-ours.md").read_text()
    assert "| candidates | P1 | Goal reached | 49/71 | 71 | 1/1 | 1 | differ |" in versus
    assert (out / "tables" / "candidates.csv").read_text().splitlines()[1] == "P1,1/1,1/1"
    assert (out / "figures" / "figure3.png").read_bytes()[:4] == b"\x89PNG"
    marker = out / "replays" / "candidates" / row["run"] / f"op{row['operation']}" / "row.json"
    stamp = marker.stat().st_mtime_ns
    ce.run_experiment(ce.load_experiment(path), out, models=models(tmp_path))
    assert marker.stat().st_mtime_ns == stamp  # a replayed operation is not replayed again


@pytest.mark.slow
@pytest.mark.needs_weights
@pytest.mark.timeout(1800)  # a loaded 2-core machine: a request of the 0.5B model can take minutes
def test_table4_runs_on_the_embedded_model_at_quick_size(tmp_path: Path) -> None:
    """Table 4 at quick size on the embedded model (the 0.5B one, every role; two planning turns
    to keep it short): every run ends recorded, both schedules branch from the same Keep run,
    every table and paper-vs-ours are written, and the header says which model served each
    role."""
    out = tmp_path / "t4"
    experiment = ce.load_experiment("table4_midpoint")
    result = ce.run_experiment(
        experiment,
        out,
        models={"*": "local:0.5b"},
        overrides={"budgets": {"max_turns": 2}},
        resamples=200,
    )
    assert result.complete and set(result.tables) == {
        "table4",
        "table4_within",
        "table4_paired",
        "table5_settings",
    }
    for name in ("one_time", "continuous"):
        for run in result.panels[name].plan.runs:
            record = cp.read_record(cp.run_dir(out / "panels" / name, run.id))
            assert record.status in ("done", "ineligible"), record
    (keep,) = [r.id for r in result.panels["one_time"].plan.runs if r.id.endswith("/p1/keep")]
    keeps = [
        cs.read_summary(cp.run_dir(out / "panels" / n, keep)).primitive_calls
        for n in ("one_time", "continuous")
    ]
    assert keeps[0] == keeps[1]  # one Keep run, its planning shared through the cache
    assert "fast = local:0.5b" in (out / "report.md").read_text()
    assert (out / "paper-vs-ours.md").read_text().count("| table4 |") == experiment.paper_cells()


def test_the_live_display_shows_one_line_per_panel() -> None:
    import io

    from rich.console import Console

    from controlscope.cli._experiment import _Live

    stream = io.StringIO()
    console = Console(file=stream, width=120, force_terminal=False)
    with _Live(console) as live:
        live("one_time", cp.PanelStatus(total=5, finished=2))
        live("one_time", cp.PanelStatus(total=5, finished=5))
        assert live.name == "one_time" and live.progress is not None
        live("continuous", cp.PanelStatus(total=5))
        assert live.name == "continuous"
    assert live.progress is None
    shown = stream.getvalue()
    assert "panel one_time" in shown and "panel continuous" in shown


def test_paper_vs_ours_says_each_rows_size_and_whether_the_sizes_differ() -> None:
    """A quick-size 0/1 beside the paper's 13/20 says n 1 against n 20; a ``paper_n`` gives the
    paper's size where its text does not."""
    experiment = ce.load_experiment("table1_sustained")
    values = {
        t.name: [[ce.CellValue(text="0/1", n=1) for _ in row.cells] for row in t.rows]
        for t in experiment.tables
    }
    text = ce_write.paper_vs_ours(experiment, values)
    assert "| paper | paper n | ours | our n | sizes |" in text
    assert "| table1 | P1 reasoning | Keep | 13/20 | 20 | 0/1 | 1 | differ |" in text
    assert "| table1 | P1 reasoning | F W/L | 2/0 | ? | 0/1 | 1 | unknown |" in text
    keep = experiment.tables[0].rows[2].cells[1]
    assert ce_write.paper_size(keep.model_copy(update={"paper": "13/20", "paper_n": 1})) == 1
    values["table1"][2][1] = ce.CellValue(text="1/20", n=20)
    assert "| Keep | 13/20 | 20 | 1/20 | 20 | same |" in ce_write.paper_vs_ours(experiment, values)


def test_table6_replays_each_full_argument_patch_under_both_labels(tmp_path: Path) -> None:
    """C.1: every Full argument patch of Table 6's panels is replayed from its recorded prefix
    under the Arg and the Full label (``shared_patch``), one row each, and the table counts
    the rows whose labels matched."""
    found = scripts(tmp_path)
    (tmp_path / "reviewer.json").write_text(json.dumps([PATCH, *[KEEP] * 10]))
    given = {"planner": found["planner"], "*": found["reviewer"]}
    experiment = ce.load_experiment("table6_local")
    out = tmp_path / "out"
    result = ce.run_experiment(
        experiment, out, models=given, overrides={"tasks": [TASK]}, resamples=100
    )
    assert result.complete
    for mode in ("fast", "reasoning"):
        patches = sum(
            cs.read_summary(cp.run_dir(out / "panels" / mode, r.id)).argument_patches
            for r in cp.read_manifest(out / "panels" / mode).plan.runs
            if r.scope == "full"
        )
        rows = json.loads((out / "replays" / f"{mode}_shared_patch" / "replays.json").read_text())
        assert patches >= 1 and len(rows) == patches
        assert {r["endpoint"] for r in rows} == {"shared_patch"}
        matched = sum(bool(r["matched"]) for r in rows)
        table = pd.read_csv(out / "tables" / "table6_shared_patch.csv", index_col=0)
        assert table.loc[f"{mode.capitalize()}, Full patches", "Labels matched"] == (
            f"{matched}/{len(rows)}"
        )


def test_table5_gives_each_panels_settings_and_budgets_from_its_resolved_configuration(
    tmp_path: Path,
) -> None:
    """Table 5 is generated from the resolved configurations: a setting every panel shares
    shows its value once, one they differ in says so."""
    experiment = ce.load_experiment("table4_midpoint")
    configs = ce.resolve(experiment, "quick", models(tmp_path))
    path = ce_settings.write_settings(configs, tmp_path / "tables")
    table = pd.read_csv(path.with_suffix(".csv"), index_col="setting", dtype=str)
    assert list(table.columns) == [*(n for n, _ in configs), "shared"]
    for name, config in configs:
        assert table.loc["budget max_calls", name] == str(config.budgets.max_calls)
        assert table.loc["schedule", name] == config.schedule
    assert table.loc["budget max_calls", "shared"] == "12"  # the quick size's budget
    assert {c.schedule for _, c in configs} == {"once", "continuous"}
    assert table.loc["schedule", "shared"] == "differs"
    assert "## Table 5: shared settings and budgets" in path.read_text()
