"""Frozen source programs: a run or a panel takes its source program from a file (on real parts:
the npm filesystem server, the worker, pool processes; scripted models)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

import controlscope as cs
from controlscope import panel as cp
from controlscope.analysis import paired_outcomes, read_panel, report
from controlscope.cli import main as cli
from controlscope.core import ModelCallEvent, RunStartEvent
from controlscope.replay import Recording, ReplayError
from controlscope.run import FROZEN_MODEL_ID
from test_api import BROKEN, SOLVE, TASK, script
from test_replay import KEEP, PATCH


def program_file(folder: Path, code: str = BROKEN, name: str = "split.py") -> Path:
    path = folder / name
    path.write_text(code.strip("\n") + "\n")
    return path


def frozen_run(tmp: Path, source: Path, name: str = "run", **spec: object) -> cs.RunResult:
    options: dict[str, object] = {
        "task": TASK,
        "model": script(tmp, "Done."),  # asked once: after the frozen program
        "scope": "keep",
        "source": source,
        "out": tmp / name,
        **spec,
    }
    return cs.run_task(cs.RunSpec(**options))


def test_a_frozen_program_is_the_first_reply_and_its_hash_is_recorded(tmp_path: Path) -> None:
    source = program_file(tmp_path)
    result = frozen_run(tmp_path, source, planner_format="fenced")
    assert result.end_reason == "final_answer"
    assert result.summary.primitive_calls == 7  # read, mkdir, five writes: the program ran
    assert not result.verdict.success  # the program's own mistake (chunk_ names) stands
    log = cs.read_events(result.run_dir)
    start = log[0]
    assert isinstance(start, RunStartEvent) and start.source_file is not None
    assert start.source_file.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
    assert start.source_file.path == str(source.resolve())
    planner = [e for e in log if isinstance(e, ModelCallEvent) and e.role == "planner"]
    first = planner[0].response
    assert first is not None and first.model == FROZEN_MODEL_ID
    assert first.text is not None and BROKEN.strip("\n") in first.text
    assert len(planner) == 2 and planner[1].response is not None
    assert planner[1].response.text == "Done."  # ordinary planning goes on after it


def test_a_frozen_program_in_the_tools_format_is_one_execute_python_call(tmp_path: Path) -> None:
    source = program_file(tmp_path, SOLVE)
    result = frozen_run(tmp_path, source, planner_format="tools")
    assert result.verdict.success
    planner = [e for e in cs.read_events(result.run_dir) if isinstance(e, ModelCallEvent)]
    first = planner[0].response
    assert first is not None and first.tool_calls[0].parsed == {"code": SOLVE.strip("\n")}


@pytest.mark.parametrize(
    ("text", "problem"),
    [("", "is empty"), ("for x in\n", "not valid Python"), (None, "cannot be read")],
)
def test_a_bad_program_file_is_refused_before_anything_runs(
    tmp_path: Path, text: str | None, problem: str
) -> None:
    source = tmp_path / "bad.py"
    if text is not None:
        source.write_text(text)
    with pytest.raises(cs.SpecError, match=problem):
        frozen_run(tmp_path, source)
    assert not (tmp_path / "run" / "events.jsonl").exists()
    code = cli(["run", "--task", TASK, "--source", str(source), "--out", str(tmp_path / "c")])
    assert code == 2


def test_a_replay_refuses_an_edited_program_naming_the_field(tmp_path: Path) -> None:
    source = program_file(tmp_path)
    recorded = frozen_run(tmp_path, source).run_dir
    Recording.load(recorded).check_task(tmp_path)  # unchanged: accepted
    again = frozen_run(tmp_path, source, name="again", model=f"replay:{recorded}")
    assert again.summary.primitive_calls == 7  # the replay with the same program runs
    start = cs.read_events(again.run_dir)[0]
    assert isinstance(start, RunStartEvent) and start.source_file is not None
    source.write_text(BROKEN.replace("chunk_", "piece_"))
    with pytest.raises(ReplayError, match=r"source_file\.sha256"):
        Recording.load(recorded).check_task(tmp_path)
    with pytest.raises(cs.SpecError, match=r"source_file\.sha256 \(recorded"):
        frozen_run(tmp_path, source, name="edited", model=f"replay:{recorded}")


def test_a_panel_with_frozen_sources_runs_and_its_report_names_the_units(tmp_path: Path) -> None:
    programs = tmp_path / "programs"
    programs.mkdir()
    program_file(programs, BROKEN, "split.py")
    planner = tmp_path / "planner.json"
    planner.write_text(json.dumps(["Done."] * 6))
    reviewer = tmp_path / "reviewer.json"  # Arg keeps twice, then patches the first write
    reviewer.write_text(json.dumps([KEEP, KEEP, PATCH, *[KEEP] * 12]))
    config = tmp_path / "panel.toml"
    config.write_text(
        f'tasks = ["{TASK}", "file_context/uppercase"]\nscopes = ["keep", "arg"]\n'
        'start = "whole"\nschedule = "every_boundary"\n'
        f'[source]\n"{TASK}" = "programs/split.py"\n'
        f'[planner]\nmodel = "scripted:{planner}"\n'
        f'[reviewer]\nmodel = "scripted:{reviewer}"\n[execution]\nworkers = 1\n'
    )
    plan = cp.plan_panel(cp.load_config(config), check_models=False)
    unit = f"{TASK}/s0/p0"
    assert {r.unit for r in plan.runs if r.source_file is not None} == {unit}
    runs = {r.id: r for r in plan.runs}
    assert runs[f"{unit}/arg-d0"].source_file == str((programs / "split.py").resolve())
    out = tmp_path / "panel"
    assert cli(["panel", str(config), "--out", str(out), "--quiet"]) == 0
    for name in ("keep", "arg-d0"):
        start = cs.read_events(cp.run_dir(out, f"{unit}/{name}"))[0]
        assert isinstance(start, RunStartEvent) and start.source_file is not None
    built = report(out)
    sha = hashlib.sha256((programs / "split.py").read_bytes()).hexdigest()
    assert built.frozen_sources == {unit: f"split.py (sha256 {sha[:12]}…)"}
    text = (out / "report" / "report.md").read_text()
    assert "Frozen source programs" in text and f"{unit}: split.py" in text
    assert "file_context/uppercase/s0/p0: " not in text.split("Frozen source programs")[1]
    pair = next(p for p in built.pairs if p.unit == unit)
    assert pair.condition == "arg" and pair.reviews == 7
    assert any("patch_arguments" in d and "part_01" in d for d in pair.decisions)
    other = next(p for p in built.pairs if p.unit != unit)
    assert other.decisions == ("no review",)  # its sampled "program" was a final answer
    listed = cs.read_summary(cp.run_dir(out, f"{unit}/arg-d0")).decisions
    assert listed is not None and [d.operation for d in listed] == ["patch_arguments"]
    found = read_panel(out)  # a summary that predates the list: its log says the same
    dirs = {str(i): cp.run_dir(out, str(i)) for i in found.runs["id"]}
    assert paired_outcomes(found.runs, 1, dirs) == built.pairs


def _no_log(*_: object, **__: object) -> object:
    raise AssertionError("the report read a log for the decisions its summaries list")


def test_the_report_lists_decisions_from_the_summaries_without_reading_logs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reviewer = tmp_path / "reviewer.json"
    reviewer.write_text(json.dumps([KEEP, KEEP, PATCH, *[KEEP] * 12]))
    planner = tmp_path / "planner.json"
    planner.write_text(json.dumps(["Done."] * 6))
    config = tmp_path / "panel.toml"
    config.write_text(
        f'tasks = ["{TASK}"]\nscopes = ["keep", "arg"]\nstart = "whole"\n'
        f'schedule = "every_boundary"\n[source]\n"{TASK}" = "split.py"\n'
        f'[planner]\nmodel = "scripted:{planner}"\n'
        f'[reviewer]\nmodel = "scripted:{reviewer}"\n[execution]\nworkers = 1\n'
    )
    program_file(tmp_path, BROKEN, "split.py")
    out = tmp_path / "panel"
    assert cli(["panel", str(config), "--out", str(out), "--quiet"]) == 0
    monkeypatch.setattr("controlscope.analysis._decisions.iter_events", _no_log)
    (pair,) = report(out).pairs
    assert pair.reviews == 7 and any("patch_arguments" in d for d in pair.decisions)


def test_a_panel_source_folder_names_a_missing_program(tmp_path: Path) -> None:
    (tmp_path / "programs").mkdir()
    config = tmp_path / "panel.toml"
    config.write_text(f'tasks = ["{TASK}"]\nsource = "programs"\n')
    with pytest.raises(cp.ConfigError, match=f"source of {TASK}: .*{TASK}.py cannot be read"):
        cp.plan_panel(cp.load_config(config), check_models=False)
    (tmp_path / "programs" / "file_context").mkdir()
    program_file(tmp_path / "programs" / "file_context", BROKEN, "file_splitting.py")
    plan = cp.plan_panel(cp.load_config(config), check_models=False)
    assert {r.source_file for r in plan.runs} == {
        str(tmp_path / "programs" / "file_context" / "file_splitting.py")
    }
    config.write_text(f'tasks = ["{TASK}"]\n[source]\n"desktop/nothing" = "x.py"\n')
    with pytest.raises(cp.ConfigError, match=r"source\.desktop/nothing: names no selected task"):
        cp.plan_panel(cp.load_config(config), check_models=False)


def test_a_resumed_panel_refuses_a_program_edited_since_its_keep_run(tmp_path: Path) -> None:
    program = program_file(tmp_path, BROKEN, "split.py")
    reviewer = tmp_path / "reviewer.json"
    reviewer.write_text(json.dumps([KEEP] * 12))
    config = tmp_path / "panel.toml"
    config.write_text(
        f'tasks = ["{TASK}"]\nscopes = ["keep", "arg"]\nschedule = "every_boundary"\n'
        f'[source]\n"{TASK}" = "split.py"\n[planner]\nmodel = "scripted:{reviewer}"\n'
        f'[reviewer]\nmodel = "scripted:{reviewer}"\n[budgets]\nmax_turns = 1\n'
    )
    out = tmp_path / "panel"
    assert cli(["panel", str(config), "--out", str(out), "--quiet"]) == 0
    arg = cp.run_dir(out, f"{TASK}/s0/p0/arg-d0")
    assert cp.read_record(arg).status == "done"
    (arg / cp.RUN_MARKER).unlink()  # the Arg run is run again on resume...
    program.write_text(SOLVE.strip("\n") + "\n")  # ...after the program was edited
    cli(["panel", str(config), "--out", str(out), "--quiet"])
    record = cp.read_record(arg)
    assert record.status == "error"
    assert "was edited since the unit's Keep run" in record.detail
    assert "source_file.sha256" in record.detail
