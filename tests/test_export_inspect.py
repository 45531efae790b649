"""Runs, sessions and panels exported as Inspect AI eval logs, read back by the real
``inspect_ai`` package (the version the ``inspect`` extra pins): ``read_eval_log``, the samples
dataframe, and ``inspect view`` serving the log on loopback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, get_args

import pytest
from inspect_ai.analysis import samples_df
from inspect_ai.event import ApprovalEvent, InfoEvent, ModelEvent, ScoreEvent, ToolEvent
from inspect_ai.event import Event as InspectEvent
from inspect_ai.log import read_eval_log

import _session_support
import controlscope as cs
from controlscope import panel as cp
from controlscope._proc import alive, descendants
from controlscope.cli import main as cli
from controlscope.core import (
    FinalVerdictEvent,
    ModelCallEvent,
    PrimitiveCallEvent,
    RealizedOperationEvent,
    RunStartEvent,
)
from controlscope.export import (
    INSPECT_EVENTS,
    NOT_EXPORTED,
    ExportError,
    event_kinds,
    export_inspect,
)
from controlscope.record import read_summary
from test_executor import PatchSecond, _fs
from test_panel import write_config

FIXTURE = Path(__file__).parent / "fixtures" / "main_job"

files = _session_support.files  # the fixtures, used by name
no_leftovers = _session_support.no_leftovers


def test_every_event_kind_of_the_log_maps_to_an_inspect_event_or_a_reason() -> None:
    kinds = event_kinds()
    assert {"run_start", "primitive_call", "realized_operation", "run_end"} <= kinds
    assert set(INSPECT_EVENTS).isdisjoint(NOT_EXPORTED)
    unmapped = kinds - set(INSPECT_EVENTS) - set(NOT_EXPORTED)
    assert not unmapped, f"event kinds without an Inspect mapping: {sorted(unmapped)}"
    assert not (set(INSPECT_EVENTS) | set(NOT_EXPORTED)) - kinds  # no stale entries
    inspect_kinds = {
        get_args(m.model_fields["event"].annotation)[0] for m in get_args(InspectEvent)
    }
    assert set(INSPECT_EVENTS.values()) <= inspect_kinds
    assert all(len(reason) > 20 for reason in NOT_EXPORTED.values())


def _events(sample: Any, kind: type) -> list[Any]:
    return [e for e in sample.events if isinstance(e, kind)]


def test_the_committed_run_reads_back_as_one_sample(tmp_path: Path) -> None:
    ours = cs.read_events(FIXTURE)
    out = export_inspect(FIXTURE, tmp_path / "main.eval")
    log = read_eval_log(str(out), resolve_attachments=True)
    assert log.status == "success" and log.samples is not None and len(log.samples) == 1
    sample = log.samples[0]
    start = ours[0]
    assert isinstance(start, RunStartEvent)
    assert sample.input == start.task.instruction
    assert {k: sample.metadata[k] for k in ("task", "seed", "source_program", "draw")} == {
        "task": start.task.id,
        "seed": start.seed,
        "source_program": start.config["source_program"],
        "draw": start.config["draw"],
    }
    assert (
        sample.metadata["condition"] == "full" and sample.metadata["schedule"] == "every_boundary"
    )
    calls = [e.call for e in ours if isinstance(e, PrimitiveCallEvent)]
    tools = _events(sample, ToolEvent)
    assert [(t.function, t.arguments, t.result) for t in tools] == [
        (c.tool, c.arguments, c.result.text) for c in calls
    ]
    models = [e for e in ours if isinstance(e, ModelCallEvent)]
    exported = _events(sample, ModelEvent)
    assert [m.role for m in exported] == [m.role for m in models]
    assert [len(m.input) for m in exported] == [len(m.request.messages) for m in models]
    assert exported[0].output.completion == models[0].response.text  # type: ignore[union-attr]
    _check_reviews(sample, [e for e in ours if isinstance(e, RealizedOperationEvent)])
    verdict = next(e for e in ours if isinstance(e, FinalVerdictEvent))
    (score,) = _events(sample, ScoreEvent)
    assert score.score.value == "I" and sample.scores["verifier"].value == "I"  # type: ignore[index]
    assert verdict.verdict.checks[0].reason in (score.score.explanation or "")
    assert sample.limit is not None and sample.limit.type == "turn"
    tokens = read_summary(FIXTURE).tokens
    for role in ("planner", "reviewer"):
        used, logged = sample.role_usage[role], tokens[role].logical
        assert used.input_tokens + (used.input_tokens_cache_read or 0) == logged.input_tokens
        assert used.output_tokens == logged.output_tokens
    last_planner = [m for m in models if m.role == "planner"][-1]
    assert len(sample.messages) == len(last_planner.request.messages) + 1
    assert sample.messages[0].role == "system"


def _check_reviews(sample: Any, realized: list[RealizedOperationEvent]) -> None:
    """The fixture's two reviews: a replacement that did not compile (a ``syntax_error``
    fallback: Keep, approved), then a replacement (the call rejected, the new code its own
    event)."""
    approvals = _events(sample, ApprovalEvent)
    assert len(approvals) == len(realized) == 2
    first, second = approvals
    assert first.decision == "approve" and first.metadata["fallback"] == "syntax_error"
    assert "syntax_error" in (first.explanation or "")
    assert first.call.function == "list_directory" and first.approver == "reviewer:model"
    assert first.metadata["proposed"]["operation"]["kind"] == "replace_workflow"
    assert first.metadata["refused"]["reason"] == "syntax_error"
    assert second.decision == "reject" and second.metadata["operation"] == "replace_workflow"
    replaced = [e for e in _events(sample, InfoEvent) if e.source == "replace_workflow"]
    assert [e.data["code"] for e in replaced] == [realized[1].operation.code]  # type: ignore[union-attr]
    assert sample.events.index(replaced[0]) == sample.events.index(second) + 1


def test_an_executor_session_exports_as_a_run(
    files: Path, tmp_path: Path, no_leftovers: None
) -> None:
    out = tmp_path / "session"
    settings = cs.RunSettings(scope="arg", schedule="every_boundary")
    reviewer = PatchSecond(str(files / "b.txt"))
    with cs.Executor(
        servers={"fs": _fs(files)}, settings=settings, reviewer=reviewer, out=out
    ) as ex:
        ex.execute(f"print(read_text_file(path={str(files / 'a.txt')!r}))")
        ex.execute(f"print(read_text_file(path={str(files / 'a.txt')!r}))")
    log = read_eval_log(str(export_inspect(out, tmp_path / "session.eval")))
    (sample,) = log.samples or []
    approvals = _events(sample, ApprovalEvent)
    assert [a.decision for a in approvals] == ["approve", "modify"]
    assert {a.approver for a in approvals} == {"reviewer:custom"}
    patched = approvals[1]
    assert patched.call.arguments == {"path": str(files / "a.txt")}
    assert patched.modified is not None
    assert patched.modified.arguments == {"path": str(files / "b.txt")}
    tools = _events(sample, ToolEvent)
    assert [t.result for t in tools] == ["alpha\n", "beta\n"]
    assert tools[1].metadata["requested"] == {"path": str(files / "a.txt")}
    assert sample.metadata["condition"] == "arg" and sample.id == "session"


# --- a scripted panel --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def panel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One unit of the split task under Keep, Arg and Full, scripted planner and reviewer (keep,
    patch the second call's path, replace at the third), branched at the first boundary."""
    tmp = tmp_path_factory.mktemp("panel")
    config = write_config(tmp)
    assert cli(["panel", str(config), "--out", str(tmp / "panel"), "--quiet"]) == 0
    runs = cp.read_manifest(tmp / "panel").plan.runs
    records = [cp.read_record(cp.run_dir(tmp / "panel", r.id)) for r in runs]
    assert all(r.status == "done" for r in records), [r.detail for r in records]
    return tmp / "panel"


def test_a_scripted_panel_is_one_log_one_row_per_run(
    panel: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "logs" / "panel.eval"
    capsys.readouterr()
    assert cli(["export", str(panel), "--format", "inspect", "--out", str(out)]) == 0
    assert "3 run(s)" in capsys.readouterr().out
    plan = cp.read_manifest(panel).plan
    frame = samples_df(str(out))
    assert len(frame) == len(plan.runs) == 3
    assert sorted(frame["id"]) == sorted(r.id for r in plan.runs)
    by_id = frame.set_index("id")
    for run in plan.runs:
        row = by_id.loc[run.id]
        assert row["metadata_condition"] == run.scope and row["metadata_unit"] == run.unit
        assert row["metadata_draw"] == run.draw and row["metadata_seed"] == run.seed
        success = cp.read_record(cp.run_dir(panel, run.id)).success
        assert row["score_verifier"] == ("C" if success else "I")
    log = read_eval_log(str(out), resolve_attachments=True)
    assert log.results is not None
    metrics = log.results.scores[0].metrics
    assert metrics["success_full"].value == 1.0 and metrics["success_keep"].value == 0.0
    samples = {s.id: s for s in log.samples or []}
    full = samples[next(r.id for r in plan.runs if r.scope == "full")]
    decisions = [a.decision for a in _events(full, ApprovalEvent)]
    assert decisions[:3] == ["approve", "modify", "reject"]
    modify = _events(full, ApprovalEvent)[1]
    made = next(t for t in _events(full, ToolEvent) if t.id == modify.call.id)
    assert modify.modified is not None and modify.modified.arguments == made.arguments
    assert modify.modified.arguments != modify.call.arguments  # the patched path
    arg = samples[next(r.id for r in plan.runs if r.scope == "arg")]
    fallbacks = [a.metadata["fallback"] for a in _events(arg, ApprovalEvent)]
    assert "out_of_scope" in fallbacks


def test_inspect_view_serves_the_exported_panel(panel: Path, tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    export_inspect(panel, logs / "panel.eval")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    inspect = Path(sys.executable).parent / "inspect"
    command = [str(inspect), "view", "start", "--log-dir", str(logs)]
    command += ["--host", "127.0.0.1", "--port", str(port)]
    viewer = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True
    )
    try:
        listing = _get(port, "/api/log-files", viewer)
        (entry,) = listing["files"]
        assert entry["name"].endswith("panel.eval") and entry["task"] == panel.name
        log = _get(port, "/api/logs/" + urllib.parse.quote(entry["name"], safe=""), viewer)
        assert log["status"] == "success" and log["results"]["total_samples"] == 3
        assert {s["id"] for s in log["samples"]} == {
            r.id for r in cp.read_manifest(panel).plan.runs
        }
        below = descendants(viewer.pid)
    finally:
        viewer.terminate()
        try:
            viewer.wait(timeout=30)
        except subprocess.TimeoutExpired:
            viewer.kill()
            viewer.wait(timeout=30)
    assert viewer.returncode is not None
    assert not [pid for pid in below if alive(pid)]  # nothing it started is left
    with pytest.raises(OSError):  # nothing serves the port any more
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def _get(port: int, path: str, viewer: subprocess.Popen[bytes]) -> Any:
    """GET a JSON answer of the viewer, waiting (bounded) for it to listen."""
    deadline = time.monotonic() + 90
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as answer:
                return json.loads(answer.read())
        except (ConnectionError, urllib.error.URLError):
            if viewer.poll() is not None or time.monotonic() > deadline:
                stderr = viewer.stderr.read().decode() if viewer.stderr else ""
                raise AssertionError(f"inspect view did not serve: {stderr[-2000:]}") from None
            time.sleep(0.3)


# --- bad input ---------------------------------------------------------------------------------


def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out = str(tmp_path / "x.eval")
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("not a folder")
    cases = [
        ([str(tmp_path / "missing")], "is not a directory"),
        ([str(tmp_path / "empty")], "neither a run directory"),
        ([str(FIXTURE), "--out", str(tmp_path / "file" / "x.eval")], "cannot write"),
        ([str(FIXTURE), "--out", str(tmp_path / "x.txt")], "must end in .eval or .json"),
    ]
    for words, expected in cases:
        argv = ["export", *words, "--format", "inspect"]
        argv += [] if "--out" in words else ["--out", out]
        assert cli(argv) == 2
        err = capsys.readouterr().err.strip()
        assert expected in err and "\n" not in err and "Traceback" not in err
    assert not Path(out).exists()
    with pytest.raises(ExportError):
        export_inspect(tmp_path / "empty", out)
    monkeypatch.setitem(sys.modules, "inspect_ai", None)  # as if the extra were not installed
    assert cli(["export", str(FIXTURE), "--format", "inspect", "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert "pip install 'controlscope[inspect]'" in err and "\n" not in err
