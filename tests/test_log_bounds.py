"""The trajectory log: what the writer accepts the reader reads back, and the reader trusts
nothing that sits at ``events.jsonl`` (a FIFO, a device, an endless line, a huge log)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from controlscope.core import (
    Boundary,
    BoundaryEvent,
    BudgetEvent,
    CallSite,
    Deadline,
    PlannerTurnEvent,
    RunStartEvent,
    Scope,
    Task,
    TaskBudgets,
)
from controlscope.record import (
    MAX_EVENT_BYTES,
    LogError,
    TrajectoryWriter,
    iter_events,
    read_events,
)
from controlscope.worker import ExecutionClock

TASK = Task(id="c/t", env="filesystem", category="c", instruction="do it", template="t")


def boundary_event(arguments: dict[str, Any]) -> BoundaryEvent:
    return BoundaryEvent(
        boundary=Boundary(
            block_id="b",
            call_index=0,
            block_call_index=0,
            tool="write_file",
            arguments=arguments,
            line=1,
            call_site=CallSite(module="block_b"),
            code="",
        )
    )


def nested(depth: int) -> Any:
    value: Any = "leaf"
    for _ in range(depth):
        value = [value]
    return value


def start_event() -> RunStartEvent:
    return RunStartEvent(task=TASK, seed=0, scope=Scope.FULL, schedule="never", view="code_only")


@pytest.mark.parametrize("depth", [100, 180, 200, 220, 260, 300])
def test_a_log_the_writer_accepts_the_reader_reads_back(tmp_path: Path, depth: int) -> None:
    with TrajectoryWriter(tmp_path) as writer:
        writer.write(start_event())
        try:
            writer.write(boundary_event({"content": nested(depth)}))
            written = True
        except LogError:
            written = False
        writer.write(PlannerTurnEvent(turn=1))  # the writer goes on after a refusal
    events = read_events(tmp_path)
    assert [e.type for e in events] == ["run_start", *(["boundary"] * written), "planner_turn"]
    assert [e.seq for e in events] == list(range(len(events)))
    assert written == (depth < 190)  # the reader's parser stops near 200 levels in all


@pytest.mark.parametrize(
    "event",
    [
        boundary_event({"x": float("nan")}),
        boundary_event({"x": [1.0, float("inf")]}),
        boundary_event({"x": "\ud800"}),
        BudgetEvent(budget="execution_seconds", limit=float("inf"), value=1.0),
    ],
    ids=["nan", "inf", "surrogate", "typed-inf"],
)
def test_the_writer_refuses_what_is_not_standard_json(tmp_path: Path, event: Any) -> None:
    with TrajectoryWriter(tmp_path) as writer:
        writer.write(start_event())
        with pytest.raises(LogError, match="cannot be recorded"):
            writer.write(event)
    assert len(read_events(tmp_path)) == 1


@pytest.mark.parametrize("where", ["first", "middle", "last"])
def test_a_line_nested_deeper_than_json_parses_is_an_error_not_a_crash(
    tmp_path: Path, where: str
) -> None:
    """A hand-made line nested 100,000 levels deep: Python's json raises RecursionError on
    it, which must not escape the reader (nor ``controlscope replay``) as a traceback."""
    with TrajectoryWriter(tmp_path) as writer:
        writer.write(start_event())
        writer.write(PlannerTurnEvent(turn=1))
    lines = (tmp_path / "events.jsonl").read_text().splitlines()
    deep = '{"schema_version": 4, "type": "planner_turn", "x": ' + "[" * 100_000
    deep += "]" * 100_000 + "}"
    at = {"first": 0, "middle": 1, "last": 2}[where]
    lines.insert(at, deep)
    (tmp_path / "events.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(LogError, match=f":{at + 1}: unreadable event"):
        read_events(tmp_path)
    replay = subprocess.run(
        [
            sys.executable,
            "-m",
            "controlscope.cli",
            "replay",
            str(tmp_path),
            "--out",
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert replay.returncode == 2 and len(replay.stderr.splitlines()) == 1, replay.stderr


def test_non_finite_budgets_are_refused_at_input() -> None:
    for field in ("execution_seconds", "wall_seconds"):
        with pytest.raises(ValueError):
            TaskBudgets(**{field: float("inf")})
    with pytest.raises(ValueError):
        Deadline(float("nan"))


def test_the_execution_clock_answers_to_the_run_ceiling() -> None:
    clock = ExecutionClock(block_s=300, task_s=1800, cancel_grace_s=2, deadline=Deadline(0.5))
    left, kind = clock.remaining()
    assert kind == "wall" and 0 < left <= 0.5
    time.sleep(0.6)
    assert clock.remaining()[0] < 0


def record_cli(run_dir: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlscope.record", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_a_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "events.jsonl")
    with pytest.raises(LogError, match="not a regular file"):
        read_events(tmp_path)
    cli = record_cli(tmp_path, timeout=30)
    assert cli.returncode == 2 and "not a regular file" in cli.stderr
    with pytest.raises(FileExistsError, match="not a regular file"):
        TrajectoryWriter(tmp_path)  # nor opened for writing (that would block too)


def test_a_link_to_a_device_is_refused(tmp_path: Path) -> None:
    (tmp_path / "events.jsonl").symlink_to("/dev/zero")
    cli = record_cli(tmp_path, timeout=30)
    assert cli.returncode == 2 and "not a regular file" in cli.stderr


def test_an_endless_line_is_refused_with_bounded_memory(tmp_path: Path) -> None:
    with TrajectoryWriter(tmp_path) as writer:
        writer.write(start_event())
    with (tmp_path / "events.jsonl").open("ab") as f:
        f.write(b"x" * (MAX_EVENT_BYTES + 10) + b"\n")
        f.write(b'{"type": "run_end"}\n')
    with pytest.raises(LogError, match="longer than"):
        read_events(tmp_path)


def _log_of(tmp_path: Path, name: str, boundaries: int) -> Path:
    run_dir = tmp_path / name
    with TrajectoryWriter(run_dir) as writer:
        writer.write(start_event())
        for i in range(boundaries):
            writer.write(boundary_event({"path": f"/workspace/f{i}", "content": "y" * 4000}))
    return run_dir


def _peak_rss_mb(run_dir: Path) -> float:
    """Peak resident memory of ``python -m controlscope.record RUN_DIR``, in MiB."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "controlscope.record", str(run_dir)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    return usage.ru_maxrss / 1024  # KiB on Linux


def test_memory_stays_flat_in_the_length_of_the_log(tmp_path: Path) -> None:
    small = _log_of(tmp_path, "small", 200)  # about 1 MB
    large = _log_of(tmp_path, "large", 8000)  # about 40 MB
    assert (large / "events.jsonl").stat().st_size > 30 * 2**20
    growth = _peak_rss_mb(large) - _peak_rss_mb(small)
    assert growth < 30, growth  # reading all of it at once took about 16 MiB per MB
    assert resource.getrlimit(resource.RLIMIT_AS)  # (the limit is the machine's own)
    assert sum(1 for _ in iter_events(large)) == 8001
