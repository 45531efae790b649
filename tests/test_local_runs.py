"""Runs whose local model process dies, for real: a SIGSEGV of the real llama.cpp process in the
middle of a request, in a run on the real filesystem environment (npm MCP server, worker).

- planner stage: ``controlscope run`` ends with exit status 3, the run recorded (``run_end``)
  and summarised (``summary.json``);
- reviewer stage: a recorded ``provider_error`` fallback, and the run goes on with a new process;
- a run stopped by SIGTERM leaves no model process behind.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from _process_support import (
    SignalWhenBusy,
    alive,
    cpu_seconds,
    model_children,
    wait_for,
    wait_until_busy,
)
from controlscope.core import (
    Condition,
    Message,
    ModelCallEvent,
    ModelRequest,
    ModelResponse,
    RealizedOperationEvent,
    RunEndEvent,
    Scope,
)
from controlscope.envs import get_environment
from controlscope.models import LocalModel, ScriptedModel
from controlscope.record import read_events, read_summary
from controlscope.review import ModelReviewer
from controlscope.run import run_trajectory

pytestmark = [pytest.mark.slow, pytest.mark.needs_weights]

TASK = "file_context/file_splitting"
MODEL = "0.5b"

BLOCK = """
root = ROOT
print(list_directory(path=root))
text = read_text_file(path=root + "/large_file.txt")
create_directory(path=root + "/split")
print(len(text))
"""


def _controlscope_run(out: Path, *extra: str) -> subprocess.Popen[str]:
    """``controlscope run`` with its own temporary directory next to ``out``: a run killed by
    SIGKILL cannot remove its workspace, and that one is the test's to discard."""
    tmp = out.parent / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "controlscope.cli",
            "run",
            "--task",
            TASK,
            "--model",
            f"local:{MODEL}",
            "--quiet",
            "--out",
            str(out),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "COLUMNS": "400", "TMPDIR": str(tmp)},
    )


def _first_model_process(run: subprocess.Popen[str]) -> int:
    wait_for(lambda: bool(model_children(run.pid)), 120, "the run's model process")
    return model_children(run.pid)[0]


def _loading_cpu_seconds() -> float:
    """CPU seconds a model process of MODEL takes here to start and load its weights (CPUs
    differ: where llama.cpp repacks the weights for wider vector units, loading takes longer)."""
    with LocalModel(MODEL) as model:
        model.start("planner")
        return cpu_seconds(model.pids["planner"])


def test_planner_process_crash_ends_the_run_with_exit_3_recorded_and_graded(
    tmp_path: Path,
) -> None:
    loading = _loading_cpu_seconds()
    out = tmp_path / "run"
    run = _controlscope_run(out, "--schedule", "never")
    try:
        child = _first_model_process(run)
        # past its loading, the planner's first prompt takes many more CPU seconds than 2.5
        wait_until_busy(child, cpu_s=loading + 2.5)
        os.kill(child, signal.SIGSEGV)
        stdout, stderr = run.communicate(timeout=300)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    assert run.returncode == 3, (stdout, stderr)
    flat = " ".join(stderr.split())
    assert "the planner's model failed" in flat
    assert "killed by signal SIGSEGV" in flat and "while answering a complete request" in flat
    events = read_events(out)
    (end,) = [e for e in events if isinstance(e, RunEndEvent)]
    assert end.end_reason == "planner_provider_error" and "SIGSEGV" in end.detail
    (call,) = [e for e in events if isinstance(e, ModelCallEvent)]
    assert call.role == "planner" and call.error_kind == "runtime_crash"
    summary = read_summary(out)
    assert summary.end_reason == "planner_provider_error" and not summary.success
    assert not alive(child)


def _root(request: ModelRequest) -> str:
    for message in request.messages:
        if message.role == "user" and message.content and "Allowed directory:" in message.content:
            return message.content.split("Allowed directory:", 1)[1].strip().splitlines()[0]
    raise AssertionError("the task message names no allowed directory")


class _KillFirstReview:
    """The real local model as reviewer; its process gets SIGSEGV during the first review."""

    def __init__(self, model: LocalModel) -> None:
        self.model = model
        self.killer: SignalWhenBusy | None = None
        self.pids: list[int] = []

    @property
    def model_id(self) -> str:
        return self.model.model_id

    def complete(self, request: ModelRequest) -> ModelResponse:
        pid = self.model.pids.get("reviewer")
        if pid is not None:
            self.pids.append(pid)
        if self.killer is None:
            assert pid is not None, "start the reviewer's process first"
            self.killer = SignalWhenBusy(pid, signal.SIGSEGV)
            self.killer.start()
        return self.model.complete(request)


def test_reviewer_process_crash_is_a_fallback_and_the_run_goes_on(tmp_path: Path) -> None:
    env = get_environment("filesystem")
    task = env.task(TASK)
    planner = ScriptedModel(
        [
            lambda r: ModelResponse(
                text=f"```python\n{BLOCK.replace('ROOT', repr(_root(r)))}\n```"
            ),
            ModelResponse(text="Done."),
        ]
    )
    with LocalModel(MODEL, n_ctx=4096) as model:
        warm = ModelRequest(
            messages=(Message(role="user", content="Say OK."),), max_tokens=2, purpose="reviewer"
        )
        model.complete(warm)  # the reviewer's process is loaded: the signal lands mid-request
        reviewer = _KillFirstReview(model)
        result = run_trajectory(
            env,
            task,
            seed=0,
            planner=planner,
            reviewer=ModelReviewer(reviewer),
            condition=Condition(
                planner_format="fenced",
                review_mode="json",
                schedule="every_boundary",
                scope=Scope.ARG,
                temperature=0.0,
                max_tokens=48,
            ),
            out_dir=tmp_path / "run",
            workspace_root=tmp_path / "ws",
        )
        assert reviewer.killer is not None
        reviewer.killer.join(5)
        assert reviewer.killer.error is None and reviewer.killer.sent
        first_pid = reviewer.pids[0]
        assert not alive(first_pid)
        assert model.pids["reviewer"] != first_pid  # a new process served the later reviews

    events = read_events(result.run_dir)
    calls = [e for e in events if isinstance(e, ModelCallEvent) and e.role == "reviewer"]
    realized = [e for e in events if isinstance(e, RealizedOperationEvent)]
    assert len(calls) == len(realized) == 3  # one review per primitive call
    assert calls[0].error_kind == "runtime_crash" and "SIGSEGV" in (calls[0].error or "")
    assert realized[0].fallback == "provider_error" and realized[0].operation.kind == "keep"
    assert all(c.error is None and c.response is not None for c in calls[1:])
    assert result.summary.fallbacks.get("provider_error") == 1
    assert result.summary.primitive_calls == 3
    assert result.end_reason == "final_answer"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_run_stopped_by_a_signal_leaves_no_model_process(
    tmp_path: Path, sig: signal.Signals
) -> None:
    run = _controlscope_run(tmp_path / "run", "--schedule", "never")
    try:
        child = _first_model_process(run)
        wait_until_busy(child, cpu_s=2.5)
        run.send_signal(sig)
        run.communicate(timeout=60)
        wait_for(lambda: not alive(child), 5.0, f"model process {child} to end")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    # SIGTERM ends the command like Ctrl-C (exit 130, the run recorded); SIGKILL cannot be caught
    assert run.returncode == (130 if sig == signal.SIGTERM else -sig)
