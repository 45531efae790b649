"""Nothing a run records stops working on a later date.

A task state's file times count as the task's own when they are older than a day before the
run started; a replay dates them from its recording's start, not from the day it runs, so the
files of a task folder written the day a run was recorded (a user's new task, a fresh checkout)
hash the same when the run is replayed days later.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

import controlscope as cs
from controlscope import replay
from controlscope.replay import Recording
from test_mcpmark import SOLVE, copy_task, program, script

DAY_S = 86_400.0


def test_a_task_folder_written_the_day_it_was_recorded_replays_days_later(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = copy_task(tmp_path)
    state = tmp_path / "mcpmark" / "test_environments" / "notes"
    hour_ago = time.time() - 3600
    for path in state.rglob("*"):
        os.utime(path, (hour_ago, hour_ago))  # written an hour before the recording
    spec = cs.RunSpec(
        mcpmark=folder,
        model=script(tmp_path, program(SOLVE), "Done."),
        schedule="never",
        out=tmp_path / "recorded",
    )
    assert cs.run_task(spec).verdict.success

    now = time.time
    monkeypatch.setattr(time, "time", lambda: now() + 2 * DAY_S)  # two days later
    recording = Recording.load(tmp_path / "recorded")
    assert recording.check_task() == recording.start.task_data_hash
    found = replay.replay_prefix(recording, out=tmp_path / "later")
    assert found.ok, found.divergence
    assert found.summary is not None and found.summary.success
    assert found.summary.file_hashes == recording.final.file_hashes  # type: ignore[union-attr]
