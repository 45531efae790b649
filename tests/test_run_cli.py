"""``controlscope run`` as a user runs it: a real subprocess, real server, recorded runs."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from controlscope.core import RealizedOperationEvent
from controlscope.record import read_events, read_summary

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
@pytest.mark.needs_weights
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


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("destructiv", "unknown schedule 'destructiv'"),
        ("destructive:1", "destructive takes no argument"),
        ("destructive+per_block", "only protect:n, retain_first, continuous or destructive"),
        ("destructive+protect", "protect needs a call count"),
    ],
)
def test_a_misspelt_destructive_schedule_is_one_line(tmp_path: Path, spec: str, says: str) -> None:
    out = controlscope(
        "run", "--task", "file_context/uppercase", "--schedule", spec, "--out", str(tmp_path)
    )
    assert out.returncode == 2 and says in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not (tmp_path / "events.jsonl").exists()


def test_bad_model_files_and_a_stray_base_url_are_clear_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    task = ("run", "--task", "file_context/uppercase", "--out", str(tmp_path / "r"))
    for model, expected in [
        (str(tmp_path / "nothere.gguf"), "neither a known model"),
        ("local:7b", "neither a known model"),
        (str(empty), "not a GGUF file"),
    ]:
        out = controlscope(*task, "--model", model)
        assert out.returncode == 2, out.stderr
        assert expected in out.stderr and "Traceback" not in out.stderr
    out = controlscope(*task, "--model", "local:0.5b", "--base-url", "http://127.0.0.1:9/v1")
    assert out.returncode == 2 and "base_url applies only to openai" in out.stderr
    out = controlscope(*task, "--model", "openai:m", "--base-url", "")
    assert out.returncode == 2 and "--base-url: Value error, is blank" in out.stderr
    assert not (tmp_path / "r").exists()


def test_a_replay_with_other_options_is_refused_before_it_runs(tmp_path: Path) -> None:
    args = json.loads((FIXTURE / "command.json").read_text())["args"]
    args[args.index("--students") + 1] = "26"
    args[args.index("--seed") + 1] = "1"
    out = controlscope("run", *args, "--model", f"replay:{FIXTURE}", "--out", str(tmp_path / "r"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "seed (recorded 0, given 1)" in out.stderr
    assert "params (recorded {'students': 25" in out.stderr
    assert "given {'students': 26" in out.stderr
    assert not (tmp_path / "r").exists()
    same = json.loads((FIXTURE / "command.json").read_text())["args"]
    for extra, named in [
        (["--max-turns", "1"], "max_turns (recorded 4, given 1)"),  # command.json: 4
        (["--temperature", "0.1"], "temperature (recorded 0.7, given 0.1)"),
        (["--reviewer-model", f"replay:{tmp_path}"], "events.jsonl"),  # no recording there
    ]:
        out = controlscope(
            "run", *same, *extra, "--model", f"replay:{FIXTURE}", "--out", str(tmp_path / "r")
        )
        assert out.returncode == 2 and named in out.stderr, out.stderr
        assert "Traceback" not in out.stderr
    # another spelling of the same schedule is the same condition
    schedule = same[same.index("--schedule") + 1]
    spaced = [f" {a} " if a == schedule else a for a in same]
    out = controlscope("run", *spaced, "--model", f"replay:{FIXTURE}", "--out", str(tmp_path / "s"))
    assert out.returncode == 0, out.stderr
    assert f"schedule={schedule}:" in out.stdout


def test_a_diverging_replay_names_the_role_and_leaves_a_complete_log(tmp_path: Path) -> None:
    """A recording whose planner prompt differs from what this code sends (as after a change
    to the prompts): the replay stops at the first request, names it, and ends its log."""
    recording = tmp_path / "recording"
    recording.mkdir()
    lines = (FIXTURE / "events.jsonl").read_text().splitlines()
    first_call = next(i for i, line in enumerate(lines) if '"type":"model_call"' in line)
    event = json.loads(lines[first_call])
    event["request"]["messages"][0]["content"] += " (an older prompt)"
    lines[first_call] = json.dumps(event)
    (recording / "events.jsonl").write_text("\n".join(lines) + "\n")
    args = json.loads((FIXTURE / "command.json").read_text())["args"]
    out = controlscope("run", *args, "--model", f"replay:{recording}", "--out", str(tmp_path / "r"))
    assert out.returncode == 1
    assert "the planner's request 0 differs from the recording at messages[0].content" in out.stderr
    assert "new --out directory" in out.stderr and "Traceback" not in out.stderr
    summary = read_summary(tmp_path / "r")
    assert summary.end_reason == "replay_diverged" and summary.success is None
    again = f"replay:{tmp_path / 'r'}"
    out = controlscope("run", *args, "--model", again, "--out", str(tmp_path / "q"))
    assert out.returncode == 2 and "diverged from its recording" in out.stderr


def test_unusable_out_and_cache_paths_are_clear_errors(tmp_path: Path) -> None:
    args = json.loads((FIXTURE / "command.json").read_text())["args"]
    task = ("run", *args, "--model", f"replay:{FIXTURE}")
    a_file = tmp_path / "file"
    a_file.write_text("not a database\n")
    for extra, expected in [
        (["--out", str(a_file)], "is not a directory"),
        (["--out", str(tmp_path / "r"), "--cache", str(tmp_path)], "request cache"),
        (["--out", str(tmp_path / "r"), "--cache", str(a_file)], "request cache"),
        (["--out", str(tmp_path / "r"), "--cache", str(tmp_path / "r" / "events.jsonl")], "would"),
    ]:
        out = controlscope(*task, *extra)
        assert out.returncode == 2 and expected in out.stderr, out.stderr
        assert "Traceback" not in out.stderr


class _Refusing(http.server.BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that refuses every request (HTTP 400) with ``body``."""

    body = b'{"error": {"message": "model not found", "type": "invalid_request_error"}}'

    def do_POST(self) -> None:
        body = self.body
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_a_failing_planner_provider_is_graded_and_exits_3(tmp_path: Path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Refusing)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        out = controlscope(
            "run", "--task", "file_context/uppercase", "--model", "openai:nothing",
            "--base-url", url, "--quiet", "--out", str(tmp_path / "r"),
        )  # fmt: skip
    finally:
        server.shutdown()
    assert out.returncode == 3, out.stderr
    assert "planner's model failed" in out.stderr and "model not found" in out.stderr
    assert url in out.stderr  # the endpoint is named
    summary = read_summary(tmp_path / "r")
    assert summary.end_reason == "planner_provider_error" and summary.success is False


def test_the_fixture_holds_real_calls_and_a_reviewed_patch_or_replacement() -> None:
    """What the replay test compares must not be empty: the recorded run made primitive calls,
    and at a reviewed boundary the reviewer proposed a patch or a replacement (realized or
    rejected), so a replay checks a review request, a decision and what followed it."""
    events = read_events(FIXTURE)
    calls = [e for e in events if e.type == "primitive_call"]
    proposed = [
        e
        for e in events
        if e.type == "proposal" and e.operation is not None and e.operation.kind != "keep"
    ]
    assert calls and proposed, "re-record the fixture with scripts/record_fixture.sh"
    realized = [e for e in events if e.type == "realized_operation"]
    assert {e.call_index for e in proposed} <= {e.call_index for e in realized}
