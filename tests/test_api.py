"""The public API: ``controlscope.run_task`` on a ``RunSpec``, as the README shows it.

Real parts (the npm filesystem server, the isolated worker) with scripted models: the spec's
checks, the defaults a spec resolves to, a rule-based reviewer plugged in, and the same run from
the CLI.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

import controlscope as cs
from controlscope._proc import alive, cmdline, descendants
from controlscope.cli import main
from controlscope.core import Condition, ReplaceWorkflow
from controlscope.models import ScriptedModel

TASK = "file_context/file_splitting"

SOLVE = """
root = "/workspace"
text = read_text_file(path=root + "/large_file.txt")
lines = text.splitlines()
per = len(lines) // 5
create_directory(path=root + "/split")
for i in range(5):
    chunk = lines[i * per:(i + 1) * per]
    write_file(path=f"{root}/split/part_{i + 1:02d}.txt", content="\\n".join(chunk) + "\\n")
"""
BROKEN = SOLVE.replace("/split/part_", "/split/chunk_")


def script(tmp_path: Path, *answers: str) -> str:
    """A ``scripted:FILE`` model spec answering with ``answers`` in order."""
    path = tmp_path / f"script{len(list(tmp_path.glob('script*')))}.json"
    path.write_text(json.dumps(list(answers)))
    return f"scripted:{path}"


def test_every_public_name_is_importable() -> None:
    missing = [name for name in cs.__all__ if not hasattr(cs, name)]
    assert missing == []


def test_a_spec_checks_each_value_alone() -> None:
    for bad in (
        {"max_calls": 0},
        {"temperature": -0.1},
        {"temperature": float("nan")},
        {"max_seconds": float("inf")},
        {"draw": -1},
        {"seed": -1},
        {"schedule": "sometimes"},
        {"out": ""},
        {"model": "  "},
        {"scope": "everything"},
        {"scope": "params"},  # Params exists only in the v2 lattice (paper A.2)
        {"schedule": "once"},  # the local rule needs a recorded source run
        {"schedule": "continuous", "source_run": "runs/src"},  # nothing to place
        {"block_exec_s": 0},
        {"unknown_option": 1},
    ):
        with pytest.raises(ValidationError):
            cs.RunSpec(task=TASK, **{"out": "runs/x", **bad})  # type: ignore[arg-type]
    spec = cs.RunSpec(task=TASK, out=Path("runs/x"), schedule=" per_block + protect:2 ")
    assert spec.schedule == "per_block+protect:2" and spec.scope is cs.Scope.FULL
    with pytest.raises(ValidationError):
        spec.replace(max_turns=0)
    assert spec.replace(out="runs/y").out == Path("runs/y")
    assert (
        cs.RunSpec(task=TASK, out="runs/x", scope="params", lattice="v2").scope is cs.Scope.PARAMS
    )
    assert cs.RunSpec(task=TASK, out="runs/x", schedule="once", source_run="s").schedule == "once"


def test_prepare_resolves_the_condition_and_refuses_what_cannot_run(tmp_path: Path) -> None:
    spec = cs.RunSpec(task=TASK, model=script(tmp_path, "done"), max_calls=7, out=tmp_path / "a")
    prepared = cs.prepare(spec)
    condition = prepared.condition
    assert condition.budgets.primitive_calls == 7 and condition.budgets.planning_turns == 100
    assert (condition.planner_format, condition.review_mode) == ("tools", "tools")
    assert (condition.temperature, condition.max_tokens, condition.draw) == (0.7, 16_384, 0)
    assert condition.operations.operations == ("keep", "patch_arguments", "replace_workflow")
    assert condition.view_limits is None  # the complete state for a non-local reviewer
    assert condition.block_exec_s is None  # no per-block limit unless asked for
    assert (condition.source_program, condition.reviewer_tool_choice) == (0, "auto")
    assert (tmp_path / "a").is_dir()
    bounded = cs.prepare(spec.replace(view_bounds="bounded", out=tmp_path / "c")).condition
    assert bounded.view_limits is not None
    for bad, expected in (
        ({"task": "file_context/nope"}, "unknown filesystem task"),
        ({"env": "moon"}, "unknown environment"),
        ({"base_url": "http://127.0.0.1:9/v1"}, "base_url applies only to openai"),
        ({"model": "replay:" + str(tmp_path / "none")}, "no recorded run"),
        ({"params": {"students": 3}}, "students"),
    ):
        with pytest.raises(cs.SpecError, match=expected):
            cs.prepare(spec.replace(**bad, out=tmp_path / "b"))
    assert not (tmp_path / "b").exists()


def test_run_task_records_a_run_like_the_cli(tmp_path: Path) -> None:
    model = script(tmp_path, f"```python\n{SOLVE}\n```", "Done.")
    spec = cs.RunSpec(task=TASK, model=model, schedule="never", out=tmp_path / "api")
    result = cs.run_task(spec)
    assert result.verdict.success and result.end_reason == "final_answer"
    assert result.summary.primitive_calls == 7 and result.summary.reviews == 0
    assert cs.read_summary(tmp_path / "api") == result.summary
    model = script(tmp_path, f"```python\n{SOLVE}\n```", "Done.")
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "controlscope.cli",
            "run",
            "--task",
            TASK,
            "--model",
            model,
            "--schedule",
            "never",
            "--quiet",
            "--out",
            str(tmp_path / "cli"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 0, cli.stderr
    by_cli = cs.read_summary(tmp_path / "cli")
    assert (by_cli.success, by_cli.primitive_calls) == (True, result.summary.primitive_calls)
    starts = [cs.read_events(d)[0] for d in (tmp_path / "api", tmp_path / "cli")]
    assert starts[0].model_dump(exclude={"t", "models"}) == starts[1].model_dump(
        exclude={"t", "models"}
    )


class FixTheNames:
    """A rule-based reviewer: replaces any block that writes ``chunk_`` files."""

    def __init__(self) -> None:
        self.asked = 0

    def propose(self, state: cs.PublicState, condition: Condition) -> cs.Proposal:
        self.asked += 1
        if "chunk_" in state.boundary.code and state.boundary.tool == "create_directory":
            return cs.Proposal(operation=ReplaceWorkflow(code=SOLVE), reason="wrong names")
        return cs.Proposal(operation=cs.Keep())


def test_a_rule_based_reviewer_repairs_a_run(tmp_path: Path) -> None:
    model = script(tmp_path, f"```python\n{BROKEN}\n```", "Done.")
    spec = cs.RunSpec(task=TASK, model=model, scope="full", out=tmp_path / "r")
    reviewer = FixTheNames()
    result = cs.run_task(spec, reviewer=reviewer)
    assert result.verdict.success and reviewer.asked >= 1
    assert result.summary.replacements == 1 and result.summary.models["reviewer"] == "FixTheNames"
    narrower = spec.replace(
        scope="arg",
        model=script(tmp_path, f"```python\n{BROKEN}\n```", "Done."),
        out=tmp_path / "arg",
    )
    refused = cs.run_task(narrower, reviewer=FixTheNames())
    assert not refused.verdict.success and refused.summary.replacements == 0
    assert refused.summary.fallbacks["out_of_scope"] == 1
    assert refused.summary.rejected_proposals == 1


def test_a_planner_object_can_be_passed_in(tmp_path: Path) -> None:
    planner = ScriptedModel([f"```python\n{SOLVE}\n```", "Done."], model_id="mine")
    spec = cs.RunSpec(task=TASK, model=script(tmp_path), schedule="never", out=tmp_path / "p")
    result = cs.run_task(spec, planner=planner)
    assert result.verdict.success and result.summary.models["planner"] == "mine"


def test_cli_exit_status_4_for_a_part_that_fails_unexpectedly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    model = script(tmp_path, f"```python\n{SOLVE}\n```", "Done.")
    answer = ScriptedModel.complete

    def broken(self: ScriptedModel, request: cs.ModelRequest) -> cs.ModelResponse:
        if self.requests:  # the second planning turn: a bug in the model's client
            raise RuntimeError("a bug in the model client")
        return answer(self, request)

    monkeypatch.setattr(ScriptedModel, "complete", broken)
    argv = ["run", "--task", TASK, "--model", model, "--schedule", "never", "--quiet"]
    code = main([*argv, "--out", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert code == 4, err
    assert "the run failed (recorded)" in err and "a bug in the model client" in err
    summary = cs.read_summary(tmp_path / "r")
    assert summary.end_reason == "error" and summary.success is True


def test_a_terminated_cli_run_is_recorded_and_leaves_no_worker(tmp_path: Path) -> None:
    sleeper = 'print("started", flush=True)\nimport time\ntime.sleep(120)'
    model = script(tmp_path, f"```python\n{sleeper}\n```", "Done.")
    out = tmp_path / "r"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controlscope.cli",
            "run",
            "--task",
            TASK,
            "--model",
            model,
            "--schedule",
            "never",
            "--quiet",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            log = out / "events.jsonl"
            if log.exists() and '"type":"block_start"' in log.read_text():
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the block never started")
        time.sleep(0.5)
        children = {pid: cmdline(pid) for pid in descendants(proc.pid)}
        assert children, "the run has no worker or server process"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, err
    summary = cs.read_summary(out)
    assert summary.end_reason == "interrupted" and summary.complete and summary.success is None
    survivors = {pid: cmd for pid, cmd in children.items() if alive(pid)}
    assert survivors == {}, "processes of the run survived it"


def test_the_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's "From Python" example, with a scripted planner in place of the local model."""
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme.split("## From Python", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    block = "```python\nprint(list_directory(path='/workspace'))\n```"
    keep = json.dumps({"reason": "fine", "operation": "keep"})  # the reviewer shares the script
    planner = script(tmp_path, block, keep, "Done.")
    assert 'model="local"' in code
    monkeypatch.chdir(tmp_path)
    exec(compile(code.replace('model="local"', f"model={planner!r}"), "README", "exec"), {})
    for run in ("runs/py-demo", "runs/py-rule"):
        summary = cs.read_summary(tmp_path / run)
        assert summary.complete and summary.primitive_calls == 1 and summary.boundaries == 1
