"""Loose input is refused at once (exit status 2, one line, before any request or run), and what
a model hands back beyond its bounds is a recorded provider error, not a traceback: a base URL
that is not one, a too-broad MCPMark root, an empty viewer host, an unknown model to pull, a
scripted model run dry, a 200 MB answer, a 2,000,000-line replacement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import controlscope as cs
from controlscope.core import ModelCallEvent, ProviderError, ValidationEvent
from controlscope.models import ScriptedModel
from controlscope.record import read_events, read_summary
from fixtures.big_server import BigServer

TASK = "file_context/file_splitting"


def controlscope(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "controlscope.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "COLUMNS": "200"},
        check=False,
    )


def refused(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    """Exit status 2 and one line on stderr naming ``words``, no traceback."""
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and all(w in lines[0] for w in words), proc.stderr


def script(tmp_path: Path, *answers: str) -> str:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(list(answers)))
    return f"scripted:{path}"


def test_a_base_url_that_is_not_a_url_is_refused_before_any_request(tmp_path: Path) -> None:
    out = tmp_path / "r"
    proc = controlscope(
        "run", "--task", TASK, "--model", "openai:m", "--base-url", "notaurl", "--quiet",
        "--out", str(out),
    )  # fmt: skip
    refused(proc, "--base-url", "notaurl", "http")
    assert not out.exists()
    panel = tmp_path / "panel.toml"
    panel.write_text(f'tasks = ["{TASK}"]\n[planner]\nmodel = "openai:m"\nbase_url = "ftp://x/"\n')
    refused(controlscope("panel", str(panel), "--out", str(tmp_path / "p")), "base_url", "http")
    with pytest.raises(ValueError, match="base_url"):
        cs.RunSpec(task=TASK, model="openai:m", base_url="localhost:8000", out="runs/x")


@pytest.mark.parametrize("root", ["/", "~", "/tmp"])
def test_tasks_refuses_a_root_far_broader_than_a_checkout(root: str) -> None:
    proc = controlscope("tasks", "--mcpmark", os.path.expanduser(root), timeout=60)
    refused(proc, "not an MCPMark task folder or checkout")


def test_view_refuses_an_empty_host(tmp_path: Path) -> None:
    refused(controlscope("view", str(tmp_path), "--host", "", timeout=30), "--host", "empty")
    from controlscope.view import ViewError, ViewServer

    with pytest.raises(ViewError, match="empty host"):
        ViewServer(tmp_path, host=" ")


def test_model_pull_of_no_known_model_exits_2_in_one_line(tmp_path: Path) -> None:
    refused(controlscope("model", "pull", "--model", "bogus"), "bogus", "neither a known model")
    not_weights = tmp_path / "w.gguf"
    not_weights.write_bytes(b"not a gguf")
    refused(controlscope("model", "pull", "--model", str(not_weights)), "not a GGUF")


def _planner_failure(run_dir: Path, kind: str) -> ModelCallEvent:
    """The run ended recorded on a planner provider error of ``kind``: its failed call."""
    events = read_events(run_dir)
    assert events[-1].type == "run_end" and events[-1].end_reason == "planner_provider_error"
    assert read_summary(run_dir).end_reason == "planner_provider_error"
    failed = [e for e in events if isinstance(e, ModelCallEvent) and e.error is not None]
    assert len(failed) == 1 and failed[0].error_kind == kind, failed
    return failed[0]


def test_a_scripted_model_run_dry_is_a_recorded_provider_error(tmp_path: Path) -> None:
    out = tmp_path / "r"
    model = script(tmp_path, "```python\nprint(1)\n```")  # no second answer
    proc = controlscope("run", "--task", TASK, "--model", model, "--schedule", "never",
                        "--quiet", "--out", str(out))  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "scripted model exhausted" in lines[0], proc.stderr
    failed = _planner_failure(out, "other")
    assert "scripted model exhausted" in (failed.error or "")


def test_a_200_mb_answer_is_a_recorded_provider_error_response_too_large(tmp_path: Path) -> None:
    server = BigServer("chunked", size=200_000_000)
    out = tmp_path / "r"
    try:
        proc = controlscope(
            "run", "--task", TASK, "--model", "openai:big-model", "--base-url", server.base_url,
            "--schedule", "never", "--quiet", "--out", str(out),
        )  # fmt: skip
    finally:
        server.close()
    assert proc.returncode == 3, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "response too large" in lines[0], proc.stderr
    failed = _planner_failure(out, "response_too_large")
    assert "response too large" in (failed.error or "")
    assert server.requests == 1  # never retried


class _Huge:
    """A reviewer of the user's own that proposes a 2,000,000-line replacement."""

    def propose(self, state: cs.PublicState, condition: cs.Condition) -> cs.Proposal:
        return cs.Proposal(operation=cs.ReplaceWorkflow(code="x = 1\n" * 2_000_000))


def test_a_two_million_line_replacement_is_a_refused_proposal_recorded_as_a_fallback(
    tmp_path: Path,
) -> None:
    block = "```python\nprint(list_directory(path='/workspace'))\n```"
    spec = cs.RunSpec(
        task=TASK, model=script(tmp_path, block, "Done."), scope="full",
        schedule="every_boundary", out=tmp_path / "r",
    )  # fmt: skip
    result = cs.run_task(spec, reviewer=_Huge())
    events = read_events(result.run_dir)
    [validation] = [e.validation for e in events if isinstance(e, ValidationEvent)]
    assert validation.reason == "too_large" and not validation.accepted, validation.detail
    assert "12,000,000 characters" in validation.detail
    recorded = validation.proposal
    assert recorded is not None and len(recorded.code) < 1_100_000  # type: ignore[union-attr]
    [realized] = [e for e in events if e.type == "realized_operation"]
    assert realized.operation.kind == "keep" and realized.fallback == "invalid_arguments"
    assert result.summary.replacements == 0 and result.summary.rejected_proposals == 1
    assert events[-1].type == "run_end" and result.end_reason == "final_answer"


FAKE_CHILD = textwrap.dedent(
    """
    import sys
    sys.stdin.readline()  # its configuration
    out = sys.stdout.buffer
    out.write(b'{"ok": true, "pad": "')
    for _ in range(80):
        out.write(b"x" * (1 << 20))
    out.write(b'"}\\n')
    out.flush()
    """
)


def test_a_local_model_process_that_writes_too_long_a_line_is_response_too_large(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from controlscope.models import _local_process

    (tmp_path / "fake_child.py").write_text(FAKE_CHILD)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    monkeypatch.setattr(_local_process, "_CHILD_MODULE", "fake_child")
    with pytest.raises(ProviderError) as caught:
        _local_process.ModelProcess("planner", {}, start_timeout_s=60)
    assert caught.value.kind == "response_too_large", caught.value
    assert "response too large" in str(caught.value)


def test_scripted_and_replayed_answers_over_the_bound_are_response_too_large() -> None:
    from controlscope.core import MAX_RESPONSE_BYTES, Message, ModelRequest, ModelResponse
    from controlscope.models import ReplayModel

    request = ModelRequest(messages=(Message(role="user", content="hi"),))
    huge = "é" * (MAX_RESPONSE_BYTES // 2 + 1)  # two bytes a character
    with pytest.raises(ProviderError) as caught:
        ScriptedModel([huge]).complete(request)
    assert caught.value.kind == "response_too_large"
    replay = ReplayModel([(request, ModelResponse(text=huge))])
    with pytest.raises(ProviderError) as caught:
        replay.complete(request)
    assert caught.value.kind == "response_too_large"
    fits = "x" * (MAX_RESPONSE_BYTES - 100)
    assert ScriptedModel([fits]).complete(request).text == fits
