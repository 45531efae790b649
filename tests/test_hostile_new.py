"""Hostile inputs to what landed last: the Inspect export, tracing, the review desk, logged
continuations, and two leftovers (a source program with a UTF-8 BOM, a schedule naming one
behaviour twice)."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from inspect_ai.log import read_eval_log

import controlscope as cs
from controlscope.cli import main as cli
from controlscope.core import RunStartEvent
from controlscope.export import export_inspect

FIXTURE = Path(__file__).parent / "fixtures" / "main_job"


# --- export ------------------------------------------------------------------------------------


@pytest.mark.parametrize("own", ["summary.json", "command.json"])
def test_export_never_replaces_a_file_of_the_run_it_exports(
    tmp_path: Path, own: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    before = (run / own).read_bytes()
    assert cli(["export", str(run), "--format", "inspect", "--out", str(run / own)]) == 2
    err = capsys.readouterr().err.strip()
    assert "not an earlier export" in err and "\n" not in err
    assert (run / own).read_bytes() == before
    # an earlier export inside the folder is replaced, as the docstring says
    again = run / "again.json"
    assert export_inspect(run, again) == again
    assert export_inspect(run, again) == again
    assert read_eval_log(str(again)).samples


def test_a_killed_run_exports_as_a_sample_with_an_error(tmp_path: Path) -> None:
    run = tmp_path / "killed"
    run.mkdir()
    lines = (FIXTURE / "events.jsonl").read_bytes().splitlines(keepends=True)
    cut = b"".join(lines[: len(lines) // 2]) + lines[len(lines) // 2][:40]  # a torn last line
    (run / "events.jsonl").write_bytes(cut)
    log = read_eval_log(str(export_inspect(run, tmp_path / "k.eval")))
    assert log.samples is not None
    error = log.samples[0].error
    assert error is not None and "no run_end" in error.message
    whole = read_eval_log(str(export_inspect(FIXTURE, tmp_path / "w.eval")))
    assert whole.samples is not None and whole.samples[0].error is None


# --- leftovers ---------------------------------------------------------------------------------


def test_a_source_program_with_a_utf8_bom_runs_as_python_runs_it(tmp_path: Path) -> None:
    from test_api import BROKEN
    from test_frozen_source import frozen_run

    source = tmp_path / "bom.py"
    source.write_bytes(b"\xef\xbb\xbf" + BROKEN.strip("\n").encode() + b"\n")
    result = frozen_run(tmp_path, source, planner_format="fenced")
    assert result.end_reason == "final_answer"
    assert result.summary.primitive_calls == 7  # the program ran, as without the mark
    start = cs.read_events(result.run_dir)[0]
    assert isinstance(start, RunStartEvent) and start.source_file is not None
    assert start.source_file.sha256 == hashlib.sha256(source.read_bytes()).hexdigest()
