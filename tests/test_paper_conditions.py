"""Conditions the paper's panels need, on real parts (the npm filesystem server, the isolated
worker) with scripted models: operation sets in ``run_start``, ``once`` and ``midpoint`` placed
from recorded source runs (appendix B, B.1), the reviewer's and planner's settings apart
(section 4), the per-block limit (off by default), terminal hashes (3.3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import controlscope as cs
from controlscope.core import (
    BlockEndEvent,
    ModelCallEvent,
    ReviewRequestEvent,
    RunStartEvent,
    SourceBoundary,
)
from controlscope.run import read_source
from test_api import SOLVE, TASK, script

ROOT = "/workspace"
LOOK = f'print(list_directory(path="{ROOT}"))'
KEEP = json.dumps({"reason": "fine", "operation": "keep"})


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def run(tmp_path: Path, name: str, planner: list[str], **spec: object) -> cs.RunResult:
    model = script(tmp_path, *planner)
    reviewer = script(tmp_path, *[KEEP] * 12)
    options: dict[str, object] = {"task": TASK, "model": model, "reviewer_model": reviewer}
    options.update(spec)
    return cs.run_task(cs.RunSpec(out=tmp_path / name, **options))  # type: ignore[arg-type]


def source_run(tmp_path: Path, name: str, planner: list[str], seed: int = 0) -> Path:
    """A recorded source trajectory: the program's own run, no reviews (a Keep run)."""
    result = run(tmp_path, name, planner, scope="keep", schedule="never", seed=seed)
    return result.run_dir


def reviewed(run_dir: Path) -> list[int]:
    return [e.call_index for e in cs.read_events(run_dir) if isinstance(e, ReviewRequestEvent)]


def test_run_start_records_the_granted_operation_set(tmp_path: Path) -> None:
    """Paper 3.1: "we log both the granted condition and every realized operation"."""
    planner = [fenced(SOLVE), "Done."]
    default = run(tmp_path, "default", planner, scope="full", review_mode="tools")
    v2 = run(tmp_path, "v2", planner, scope="params", lattice="v2", review_mode="tools")
    for result, operations in (
        (default, ("keep", "patch_arguments", "replace_workflow")),
        (v2, ("keep", "patch_arguments", "patch_block_data")),
    ):
        start = cs.read_events(result.run_dir)[0]
        assert isinstance(start, RunStartEvent) and start.operations == operations
        assert tuple(result.summary.operations) == operations
        offered = [
            tuple(t.name for t in e.request.tools)
            for e in cs.read_events(result.run_dir)
            if isinstance(e, ModelCallEvent) and e.role == "reviewer"
        ]
        assert offered and set(offered) == {operations}  # offered exactly, at every review


def test_once_is_placed_by_the_local_rule_on_a_recorded_source(tmp_path: Path) -> None:
    """Appendix B: the first supported module-level internal boundary of the earliest
    multi-call writer block; the source's first block makes one call, the second is the
    writer, whose internal boundaries start at its second call (create_directory, call 2)."""
    planner = [fenced(LOOK), fenced(SOLVE), "Done."]
    src = source_run(tmp_path, "src", planner)
    source = read_source(src)
    assert source.calls == 8 and [b.block_id for b in source.blocks] == ["t0.b0", "t1.b0"]
    result = run(tmp_path, "once", planner, schedule="once", source_run=src)
    start = cs.read_events(result.run_dir)[0]
    assert isinstance(start, RunStartEvent)
    assert start.schedule == "once:2"
    assert SourceBoundary.model_validate(start.config["source"]) == SourceBoundary(
        run=str(src), rule="local", calls=8, call_index=2, block_id="t1.b0"
    )
    assert reviewed(result.run_dir) == [2]  # one review, at the chosen boundary
    midpoint = run(tmp_path, "mid", planner, schedule="midpoint", source_run=src)
    assert cs.read_events(midpoint.run_dir)[0].schedule == "midpoint:8"  # type: ignore[union-attr]
    assert reviewed(midpoint.run_dir) == [4]  # after floor(8 / 2) completed calls


def test_ineligible_and_unusable_sources_are_refused_before_any_model(tmp_path: Path) -> None:
    one_call_blocks = [fenced(LOOK), fenced(LOOK), "Done."]
    src = source_run(tmp_path, "src", one_call_blocks)
    with pytest.raises(cs.SpecError, match="ineligible for the local rule"):
        run(tmp_path, "once", one_call_blocks, schedule="once", source_run=src)
    assert not (tmp_path / "once").exists()
    # a source of another seed is another task instance
    good = source_run(tmp_path, "good", [fenced(SOLVE), "Done."], seed=3)
    with pytest.raises(cs.SpecError, match="seed 3"):
        run(tmp_path, "seed", [fenced(SOLVE), "Done."], schedule="once", source_run=good)
    # a source that realized a revision is not the program's own trajectory
    revised = tmp_path / "revised"
    replace = json.dumps({"reason": "r", "operation": "replace_workflow", "code": SOLVE})
    cs.run_task(
        cs.RunSpec(
            task=TASK,
            model=script(tmp_path, fenced(LOOK + "\n" + LOOK), "Done."),
            reviewer_model=script(tmp_path, replace, *[KEEP] * 8),
            out=revised,
        )
    )
    with pytest.raises(cs.SpecError, match="realized 1 revision"):
        run(tmp_path, "rev", [fenced(SOLVE), "Done."], schedule="once", source_run=revised)


def test_the_cli_sets_and_records_the_panels_settings(tmp_path: Path) -> None:
    """Paper section 4: a reviewer token cap and tool choice apart, provider reasoning options
    passed through, the planner's temperature apart, a source-program index."""
    out = tmp_path / "r"
    cli = subprocess.run(
        [
            *(sys.executable, "-m", "controlscope.cli", "run", "--task", TASK, "--quiet"),
            *("--model", script(tmp_path, fenced(SOLVE), "Done.")),
            *("--reviewer-model", script(tmp_path, *[KEEP] * 8)),
            *("--temperature", "0.2", "--planner-temperature", "0.7"),
            *("--max-tokens", "16384", "--reviewer-max-tokens", "8192"),
            *("--reviewer-tool-choice", "required", "--source-program", "1"),
            *("--reviewer-option", 'reasoning_effort="high"'),
            *("--planner-option", "top_k=20", "--out", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert cli.returncode == 0, cli.stderr
    events = cs.read_events(out)
    config = events[0].config  # type: ignore[union-attr]
    assert config["reviewer_tool_choice"] == "required" and config["reviewer_max_tokens"] == 8192
    assert (config["temperature"], config["planner_temperature"]) == (0.2, 0.7)
    assert config["reviewer_options"] == {"reasoning_effort": "high"}
    assert (config["planner_options"], config["source_program"]) == ({"top_k": 20}, 1)
    assert config["block_exec_s"] is None and config["view_limits"] is None
    calls = [e for e in events if isinstance(e, ModelCallEvent)]
    planner = next(e.request for e in calls if e.role == "planner")
    reviewer = next(e.request for e in calls if e.role == "reviewer")
    assert (planner.draw, planner.temperature, planner.max_tokens) == (1, 0.7, 16384)
    assert planner.provider_options == {"top_k": 20}
    assert (reviewer.draw, reviewer.temperature, reviewer.max_tokens) == (0, 0.2, 8192)
    assert reviewer.tool_choice == "required"
    assert reviewer.provider_options == {"reasoning_effort": "high"}


def test_the_per_block_limit_is_off_unless_set(tmp_path: Path) -> None:
    """The paper has no per-block limit; the 1,800 s task budget governs. Set, it is enforced."""
    slow = fenced("import time\ntime.sleep(2.5)\nprint('woke')")
    free = run(tmp_path, "free", [slow, "Done."], schedule="never")
    limited = run(tmp_path, "limited", [slow, "Done."], schedule="never", block_exec_s=1.0)
    ends = {
        name: [e.result for e in cs.read_events(r.run_dir) if isinstance(e, BlockEndEvent)]
        for name, r in (("free", free), ("limited", limited))
    }
    assert ends["free"][0].status == "completed" and "woke" in ends["free"][0].output
    assert ends["limited"][0].status == "timeout"
    assert cs.read_events(limited.run_dir)[0].config["block_exec_s"] == 1.0  # type: ignore[union-attr]


def test_terminal_hashes_are_recorded(tmp_path: Path) -> None:
    """Paper 3.3: replays compare terminal files; the final events and summary carry them."""
    broken = SOLVE.replace("/split/part_", "/split/chunk_")
    first = run(tmp_path, "a", [fenced(SOLVE), "Done."], schedule="never")
    again = run(tmp_path, "b", [fenced(SOLVE), "Done."], schedule="never")
    other = run(tmp_path, "c", [fenced(broken), "Done."], schedule="never")
    verdict = next(e for e in cs.read_events(first.run_dir) if e.type == "final_verdict")
    assert verdict.state_hash == first.summary.state_hash is not None  # type: ignore[union-attr]
    assert verdict.file_hashes == first.summary.file_hashes  # type: ignore[union-attr]
    files = first.summary.file_hashes
    assert {"large_file.txt", "split/part_01.txt", "split/part_05.txt"} <= set(files)
    assert all(len(h) == 64 for h in files.values())
    assert (again.summary.state_hash, again.summary.file_hashes) == (
        first.summary.state_hash,
        files,
    )
    assert other.summary.state_hash != first.summary.state_hash
    assert other.summary.file_hashes["large_file.txt"] == files["large_file.txt"]
    assert "split/chunk_01.txt" in other.summary.file_hashes
