"""``controlscope run`` as a user runs it: a real subprocess, real server, recorded runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from controlscope.record.events import RealizedOperationEvent
from controlscope.record.store import read_events, read_summary

FIXTURE = Path(__file__).parent / "fixtures" / "main_job"
"""A real run of the README's main job with the embedded 1.5B model (see fixtures/README.md)."""


def controlscope(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlscope.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def test_unknown_task_is_a_clear_error_before_any_model(tmp_path: Path) -> None:
    out = controlscope("run", "--task", "student_database/english", "--out", str(tmp_path / "r"))
    assert out.returncode == 2
    assert "english_talent" in out.stderr  # suggests the close match
    assert not (tmp_path / "r").exists()


def test_bad_student_count_is_a_clear_error(tmp_path: Path) -> None:
    out = controlscope(
        "run",
        "--task",
        "student_database/english_talent",
        "--students",
        "0",
        "--out",
        str(tmp_path / "r"),
    )
    assert out.returncode == 2 and "students" in out.stderr


def test_bad_scope_and_missing_replay_dir_are_rejected(tmp_path: Path) -> None:
    out = controlscope("run", "--task", "file_context/uppercase", "--scope", "most")
    assert out.returncode == 2 and "--scope" in out.stderr
    out = controlscope(
        "run",
        "--task",
        "file_context/uppercase",
        "--model",
        f"replay:{tmp_path / 'nothing'}",
        "--out",
        str(tmp_path / "r"),
    )
    assert out.returncode == 2 and "events.jsonl" in out.stderr


def _decisions(run_dir: Path) -> list[tuple[int, str]]:
    return [
        (e.call_index, e.operation.kind)
        for e in read_events(run_dir)
        if isinstance(e, RealizedOperationEvent)
    ]


@pytest.mark.skipif(not (FIXTURE / "events.jsonl").exists(), reason="no recorded main job")
def test_replaying_the_recorded_main_job_gives_the_same_run(tmp_path: Path) -> None:
    recorded = read_summary(FIXTURE)
    config = json.loads((FIXTURE / "command.json").read_text())
    out = controlscope(
        "run", *config["args"], "--model", f"replay:{FIXTURE}", "--out", str(tmp_path / "r")
    )
    assert out.returncode == 0, out.stderr
    replayed = read_summary(tmp_path / "r")
    assert replayed.success == recorded.success
    assert replayed.primitive_calls == recorded.primitive_calls
    assert replayed.planning_turns == recorded.planning_turns
    assert replayed.end_reason == recorded.end_reason
    assert _decisions(tmp_path / "r") == _decisions(FIXTURE)
    assert ("PASS" if recorded.success else "FAIL") in out.stdout


@pytest.mark.slow
def test_live_run_with_the_local_model_completes_and_writes_its_log(tmp_path: Path) -> None:
    run_dir = tmp_path / "live"
    out = controlscope(
        "run",
        "--task",
        "file_context/file_splitting",
        "--scope",
        "full",
        "--schedule",
        "per_block",
        "--model",
        "local",
        "--max-turns",
        "2",
        "--max-calls",
        "12",
        "--max-tokens",
        "400",
        "--quiet",
        "--out",
        str(run_dir),
        timeout=1500,
    )
    assert out.returncode == 0, out.stderr
    summary = read_summary(run_dir)
    assert summary.complete and summary.end_reason is not None
    assert summary.planning_turns >= 1
    assert summary.tokens["planner"].logical.output_tokens > 0
    assert summary.models["planner"].startswith("local:")
    assert f"log: {run_dir}" in out.stdout.replace("\n", "")


def test_bad_schedule_and_a_used_run_directory_are_clear_errors(tmp_path: Path) -> None:
    out = controlscope(
        "run", "--task", "file_context/uppercase", "--schedule", "bogus", "--out", str(tmp_path)
    )
    assert out.returncode == 2 and "unknown schedule" in out.stderr
    assert "Traceback" not in out.stderr
    (tmp_path / "events.jsonl").write_text("")
    out = controlscope("run", "--task", "file_context/uppercase", "--out", str(tmp_path))
    assert out.returncode == 2 and "already holds a recorded run" in out.stderr
