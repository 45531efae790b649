"""The agent loop end to end with scripted models, the real npm MCP server and the real worker.

Task: ``file_context/file_splitting`` (split ``large_file.txt`` into ``split/part_01..05.txt``).
The scripted planner reads the workspace root from the task message, as a model would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from controlscope.core import (
    BlockEndEvent,
    BlockStartEvent,
    ClockDifferencesEvent,
    Condition,
    ModelCallEvent,
    ModelRequest,
    ModelResponse,
    PrimitiveCall,
    PrimitiveCallEvent,
    ProviderError,
    RealizedOperationEvent,
    RunEndEvent,
    RunStartEvent,
    Scope,
    TaskBudgets,
    ToolCall,
    ToolResult,
    ToolSchema,
    ToolServer,
    editable_constants,
)
from controlscope.envs._catalog import get_environment
from controlscope.envs.filesystem._planning import LOCAL_FILE_HINT
from controlscope.envs.filesystem.environment import FilesystemEnvironment
from controlscope.models._replay import ReplayModel
from controlscope.models._scripted import ScriptedModel
from controlscope.record import (
    ActionMismatch,
    RecordedActions,
    ReplayMismatch,
    read_events,
    read_summary,
)
from controlscope.review import ModelReviewer
from controlscope.run import RunResult, RunSpec, run_task, run_trajectory

TASK_ID = "file_context/file_splitting"

SOLVE = """
root = ROOT
text = read_text_file(path=root + "/large_file.txt")
lines = text.splitlines()
per = len(lines) // 5
create_directory(path=root + "/split")
for i in range(5):
    chunk = lines[i * per:(i + 1) * per]
    write_file(path=f"{root}/split/part_{i + 1:02d}.txt", content="\\n".join(chunk) + "\\n")
print("parts written", per)
"""


def _root(request: ModelRequest) -> str:
    for message in request.messages:
        if message.role == "user" and message.content and "Allowed directory:" in message.content:
            return message.content.split("Allowed directory:", 1)[1].strip().splitlines()[0]
    raise AssertionError("the task message names no allowed directory")


def _code(template: str) -> Callable[[ModelRequest], str]:
    return lambda request: template.replace("ROOT", repr(_root(request)))


def fenced(template: str) -> Callable[[ModelRequest], ModelResponse]:
    """A planner answer with one fenced block whose ROOT is the task's directory."""
    return lambda request: ModelResponse(text=f"```python\n{_code(template)(request)}\n```")


def native(*templates: str) -> Callable[[ModelRequest], ModelResponse]:
    """A planner answer with one ``execute_python`` call per template (queued blocks)."""

    def answer(request: ModelRequest) -> ModelResponse:
        calls = []
        for i, template in enumerate(templates):
            code = _code(template)(request)
            args = json.dumps({"code": code})
            calls.append(
                ToolCall(id=f"c{i}", name="execute_python", arguments=args, parsed={"code": code})
            )
        return ModelResponse(tool_calls=tuple(calls), finish_reason="tool_calls")

    return answer


def decision(operation: str, **payload: object) -> ModelResponse:
    return ModelResponse(text=json.dumps({"reason": "test", "operation": operation, **payload}))


KEEP = decision("keep")
DONE = ModelResponse(text="The file is split.")


def run(
    tmp_path: Path,
    planner: list[object],
    reviewer: list[object] | None = None,
    *,
    name: str = "run",
    **config: object,
) -> RunResult:
    env = get_environment("filesystem")
    task = env.task(TASK_ID)
    defaults: dict[str, object] = {
        "planner_format": "fenced",
        "review_mode": "json",
        "schedule": "never" if reviewer is None else "continuous",
    }
    defaults.update(config)
    return run_trajectory(
        env,
        task,
        seed=0,
        planner=ScriptedModel(planner),  # type: ignore[arg-type]
        reviewer=ModelReviewer(ScriptedModel(reviewer)) if reviewer is not None else None,  # type: ignore[arg-type]
        condition=Condition(**defaults),  # type: ignore[arg-type]
        out_dir=tmp_path / name,
        workspace_root=tmp_path / "ws",
    )


def realized(result: RunResult) -> list[RealizedOperationEvent]:
    return [e for e in read_events(result.run_dir) if isinstance(e, RealizedOperationEvent)]


def test_keep_baseline_solves_and_records_everything(tmp_path: Path) -> None:
    result = run(tmp_path, [fenced(SOLVE), DONE], scope=Scope.KEEP)
    assert result.verdict.success, result.verdict.checks
    assert result.end_reason == "final_answer"
    summary = read_summary(result.run_dir)
    assert summary == result.summary
    assert summary.primitive_calls == 7  # read, mkdir, five writes
    assert summary.planning_turns == 2 and summary.reviews == 0
    assert summary.success is True and summary.complete
    calls = [e.call for e in read_events(result.run_dir) if isinstance(e, PrimitiveCallEvent)]
    assert [c.tool for c in calls[:2]] == ["read_text_file", "create_directory"]
    assert not list((tmp_path / "ws").iterdir()), "the workspace is removed afterwards"


def patched_run(tmp_path: Path) -> RunResult:
    """A block reading a mistyped path, repaired by an argument patch at its first call.

    The wrong path is the task's first call, which the paper's continuous rule does not
    review: ``every_boundary`` does.
    """
    broken = SOLVE.replace("/large_file.txt", "/large-file.txt")

    def patch(request: ModelRequest) -> ModelResponse:
        return decision("patch_arguments", arguments={"path": _root(request) + "/large_file.txt"})

    return run(
        tmp_path,
        [fenced(broken), DONE],
        [patch] + [KEEP] * 6,
        scope=Scope.ARG,
        schedule="every_boundary",
    )


def test_arg_patch_repairs_a_wrong_path(tmp_path: Path) -> None:
    result = patched_run(tmp_path)
    assert result.verdict.success, result.verdict.checks
    ops = [e.operation.kind for e in realized(result)]
    assert ops[0] == "patch_arguments" and set(ops[1:]) == {"keep"}
    assert result.summary.argument_patches == 1 and result.summary.reviews == 7


def test_without_the_patch_the_same_program_fails(tmp_path: Path) -> None:
    broken = SOLVE.replace("/large_file.txt", "/large-file.txt")
    result = run(tmp_path, [fenced(broken), DONE], scope=Scope.KEEP)
    assert not result.verdict.success
    ends = [e.result for e in read_events(result.run_dir) if isinstance(e, BlockEndEvent)]
    assert ends[0].status == "error" and "ToolError" in (ends[0].error or "")


def test_full_replacement_with_reply_boundary_cancels_queued_block(tmp_path: Path) -> None:
    first = 'root = ROOT\nread_text_file(path=root + "/large_file.txt")\nlist_directory(path=root)'
    queued = 'write_file(path=ROOT + "/split_marker.txt", content="x")'

    def replace(request: ModelRequest) -> ModelResponse:
        return decision("replace_workflow", code=_code(SOLVE)(request))

    reviews: list[object] = [replace] + [KEEP] * 7  # the first call is not reviewed
    result = run(
        tmp_path,
        [native(first, queued), DONE],
        reviews,
        scope=Scope.FULL,
        planner_format="tools",
        replace_boundary="reply",
    )
    assert result.verdict.success, result.verdict.checks
    ends = [e.result for e in read_events(result.run_dir) if isinstance(e, BlockEndEvent)]
    status = {r.block_id: r.status for r in ends}
    assert status["t0.b0"] == "cancelled" and status["t0.b1"] == "cancelled"
    assert status["t0.b0.r1"] == "completed"
    assert result.summary.replacements == 1
    calls = [e.call.tool for e in read_events(result.run_dir) if isinstance(e, PrimitiveCallEvent)]
    assert "list_directory" not in calls, "the replaced call was not made"
    models = [e for e in read_events(result.run_dir) if isinstance(e, ModelCallEvent)]
    last_planner = [e for e in models if e.role == "planner"][-1]
    receipts = [m.content or "" for m in last_planner.request.messages if m.role == "tool"]
    assert len(receipts) == 2, "one tool message per execute_python call"
    assert "replaced the rest with block t0.b0.r1" in receipts[0] and "parts written" in receipts[0]
    assert "cancelled" in receipts[1]


def test_block_boundary_runs_queued_block_after_replacement(tmp_path: Path) -> None:
    first = 'root = ROOT\nread_text_file(path=root + "/large_file.txt")\nlist_directory(path=root)'
    queued = 'print("queued ran", len(lines))'

    def replace(request: ModelRequest) -> ModelResponse:
        return decision("replace_workflow", code=_code(SOLVE)(request))

    result = run(
        tmp_path,
        [native(first, queued), DONE],
        [replace] + [KEEP] * 7,
        scope=Scope.FULL,
        planner_format="tools",
        replace_boundary="block",
    )
    ends = {
        e.result.block_id: e.result
        for e in read_events(result.run_dir)
        if isinstance(e, BlockEndEvent)
    }
    assert ends["t0.b1"].status == "completed"
    assert "queued ran" in ends["t0.b1"].output, "the queued block sees the replacement's variables"


def test_the_log_says_how_each_planner_block_was_read_from_its_reply(tmp_path: Path) -> None:
    """A tools-format planner that first answers in text (as a served model without native
    tool calls does), then with a native call; a replacement is the reviewer's code."""
    first = 'root = ROOT\nread_text_file(path=root + "/large_file.txt")\nlist_directory(path=root)'

    def replace(request: ModelRequest) -> ModelResponse:
        return decision("replace_workflow", code=_code(SOLVE)(request))

    result = run(
        tmp_path,
        [fenced(first), native('print("again")'), DONE],
        [replace] + [KEEP] * 7,
        scope=Scope.FULL,
        planner_format="tools",
    )
    starts = [e for e in read_events(result.run_dir) if isinstance(e, BlockStartEvent)]
    extracted = {e.block_id: e.extracted for e in starts}
    assert extracted == {"t0.b0": "text", "t0.b0.r1": None, "t1.b0": "tool_call"}, extracted


@pytest.mark.parametrize(
    ("scope", "answer", "kind"),
    [
        (Scope.FULL, ModelResponse(text="I think it is fine."), "malformed"),
        (Scope.ARG, decision("replace_workflow", code="print(1)"), "out_of_scope"),
        # outside the pending tool's narrowed schema: not a proposal at all
        (Scope.ARG, decision("patch_arguments", arguments={"nope": 1}), "malformed"),
        # inside it, but validation refuses it (a patch that changes nothing)
        (Scope.ARG, decision("patch_arguments", arguments={}), "invalid_arguments"),
    ],
)
def test_review_fallbacks_are_recorded_and_executed_as_keep(
    tmp_path: Path, scope: Scope, answer: ModelResponse, kind: str
) -> None:
    result = run(tmp_path, [fenced(SOLVE), DONE], [answer] * 6, scope=scope)
    assert result.verdict.success, "every fallback continues the program unchanged"
    assert result.summary.fallbacks[kind] == 6  # 7 calls, the first not reviewed
    assert all(e.fallback == kind and e.operation.kind == "keep" for e in realized(result))


def test_review_stage_provider_error_is_a_keep_fallback(tmp_path: Path) -> None:
    def fail(request: ModelRequest) -> ModelResponse:
        raise ProviderError("HTTP 503", status=503, kind="server")

    result = run(tmp_path, [fenced(SOLVE), DONE], [fail] * 6, scope=Scope.FULL)
    assert result.verdict.success
    assert result.summary.fallbacks["provider_error"] == 6


def test_planner_provider_error_ends_the_run_and_grades_the_workspace(tmp_path: Path) -> None:
    def fail(request: ModelRequest) -> ModelResponse:
        raise ProviderError("HTTP 400", status=400, kind="bad_request")

    partial = SOLVE.replace("range(5)", "range(2)")
    result = run(tmp_path, [fenced(partial), fail], scope=Scope.KEEP)
    assert result.end_reason == "planner_provider_error"
    assert not result.verdict.success
    assert result.summary.primitive_calls == 4
    assert any(c.name == "part_files" and not c.passed for c in result.verdict.checks)


def test_call_budget_ends_the_run_with_its_reason(tmp_path: Path) -> None:
    result = run(
        tmp_path,
        [fenced(SOLVE), DONE],
        scope=Scope.KEEP,
        budgets=TaskBudgets(primitive_calls=3),
    )
    assert result.end_reason == "budget:primitive_calls"
    assert result.summary.primitive_calls == 3
    assert "primitive_calls" in result.summary.budgets_hit


def test_planning_turn_budget(tmp_path: Path) -> None:
    looping = fenced('print("thinking")')
    result = run(tmp_path, [looping] * 3, scope=Scope.KEEP, budgets=TaskBudgets(planning_turns=3))
    assert result.end_reason == "budget:planning_turns"
    assert result.summary.planning_turns == 3


def test_execution_seconds_budget(tmp_path: Path) -> None:
    slow = fenced("import time\ntime.sleep(30)")
    result = run(
        tmp_path, [slow, DONE], scope=Scope.KEEP, budgets=TaskBudgets(execution_seconds=1.5)
    )
    assert result.end_reason == "budget:execution_seconds"
    assert result.summary.wall_seconds < 20


@pytest.mark.parametrize(
    ("schedule", "expected_reviews"),
    [
        ("never", 0),
        ("continuous", 6),  # paper B.2: one review per completed call a boundary follows
        ("every_boundary", 7),
        ("per_block", 1),
        ("once:2", 1),
        ("midpoint:6", 1),
    ],
)
def test_schedules_choose_how_many_boundaries_are_reviewed(
    tmp_path: Path, schedule: str, expected_reviews: int
) -> None:
    result = run(tmp_path, [fenced(SOLVE), DONE], [KEEP] * 7, scope=Scope.FULL, schedule=schedule)
    assert result.verdict.success
    assert result.summary.reviews == expected_reviews
    if schedule.startswith("once"):
        assert [e.call_index for e in realized(result)] == [2]


def test_replaying_a_recorded_run_gives_the_same_run(tmp_path: Path) -> None:
    first = patched_run(tmp_path)
    assert first.summary.argument_patches == 1
    env = get_environment("filesystem")
    # The workspace path is part of the requests: replay in the same workspace root.
    again = run_trajectory(
        env,
        env.task(TASK_ID),
        seed=0,
        planner=ReplayModel.from_run_dir(first.run_dir, "planner"),
        reviewer=ModelReviewer(ReplayModel.from_run_dir(first.run_dir, "reviewer")),
        condition=Condition(
            scope=Scope.ARG,
            schedule="every_boundary",
            planner_format="fenced",
            review_mode="json",
        ),
        out_dir=tmp_path / "replayed",
        workspace_root=tmp_path / "ws",
    )
    assert again.verdict.success == first.verdict.success
    assert again.summary.primitive_calls == first.summary.primitive_calls
    assert [e.operation for e in realized(again)] == [e.operation for e in realized(first)]
    # Paper B.2 and A.5: replayed responses count in the logical totals only, and the reused
    # trajectory is identified as such.
    assert not first.summary.reused and again.summary.reused
    for role in ("planner", "reviewer"):
        recorded, replayed = first.summary.tokens[role], again.summary.tokens[role]
        assert replayed.logical == recorded.logical and replayed.logical.requests > 0
        assert replayed.uncached.requests == 0 and replayed.replayed == recorded.logical.requests
    assert (again.summary.state_hash, again.summary.file_hashes) == (
        first.summary.state_hash,
        first.summary.file_hashes,
    )


def test_replay_masks_clock_readings_but_not_other_differences(tmp_path: Path) -> None:
    """A run that printed ``get_file_info`` replays in a fresh workspace a second later: the
    file times differ, the environment's normaliser masks them, anything else still counts."""
    # the reading is printed and kept in a variable (the review view shows it as JSON text)
    info = 'info = get_file_info(path=ROOT + "/large_file.txt")\nprint(info)\n' + SOLVE
    first = run(tmp_path, [fenced(info), DONE], [KEEP] * 8, scope=Scope.FULL)
    assert first.verdict.success
    ends = [e for e in read_events(first.run_dir) if isinstance(e, BlockEndEvent)]
    printed = ends[0].result.output
    assert "created: " in printed and "<clock>" not in printed  # the log keeps real readings
    time.sleep(1.1)  # the clock readings (whole seconds) now differ

    again = replay(first, tmp_path, "masked", scope=Scope.FULL)  # its actions checked too
    assert again.verdict.success and again.summary.primitive_calls == first.summary.primitive_calls
    # the masked readings are reported apart, raw (paper A.4)
    (report,) = [e for e in read_events(again.run_dir) if isinstance(e, ClockDifferencesEvent)]
    assert report.differences and again.summary.clock_differences == len(report.differences)
    difference = report.differences[0]
    assert "GMT" in difference.recorded and difference.recorded != difference.received
    with pytest.raises(ReplayMismatch, match=r"the reviewer's request 0 differs .* GMT\+0000"):
        replay(first, tmp_path, "unmasked", actions=False, normalise=False, scope=Scope.FULL)
    # the diverged replay's log ends saying so, and its summary is written
    summary = read_summary(tmp_path / "unmasked")
    assert summary.end_reason == "replay_diverged" and summary.complete
    assert summary.success is None
    last = read_events(tmp_path / "unmasked")[-1]
    assert isinstance(last, RunEndEvent) and "GMT" in last.detail


class _CrashingServer:
    """The real server, which 'crashes' (transport failure) at the ``crash_at``-th call."""

    def __init__(self, inner: ToolServer, crash_at: int) -> None:
        self.inner = inner
        self.agent_roots = getattr(inner, "agent_roots", ())
        self.server_info = getattr(inner, "server_info", {})
        self.calls = 0
        self.crash_at = crash_at

    def list_tools(self) -> list[ToolSchema]:
        return self.inner.list_tools()

    def call(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> ToolResult:
        self.calls += 1
        if self.calls >= self.crash_at:
            self.inner.close()
        return self.inner.call(name, arguments)

    def close(self) -> None:
        self.inner.close()


def test_a_crashed_server_ends_the_run_with_a_readable_log(tmp_path: Path) -> None:
    class CrashingEnvironment(FilesystemEnvironment):
        def start_server(self, workspace: Path) -> ToolServer:  # type: ignore[override]
            return _CrashingServer(super().start_server(workspace), crash_at=3)

    env = CrashingEnvironment()
    result = run_trajectory(
        env,
        env.task(TASK_ID),
        seed=0,
        planner=ScriptedModel([fenced(SOLVE), DONE]),
        reviewer=None,
        condition=Condition(scope=Scope.KEEP, schedule="never", planner_format="fenced"),
        out_dir=tmp_path / "run",
        workspace_root=tmp_path / "ws",
    )
    assert result.end_reason == "environment_error"
    assert not result.verdict.success
    summary = read_summary(result.run_dir)
    assert summary.complete and summary.primitive_calls == 2
    ends = [e for e in read_events(result.run_dir) if isinstance(e, RunEndEvent)]
    assert ends and "closed" in ends[0].detail


def test_a_block_that_looks_for_files_locally_gets_a_hint(tmp_path: Path) -> None:
    local = 'print(open(ROOT + "/large_file.txt").read())'
    result = run(tmp_path, [fenced(local), DONE], scope=Scope.KEEP)
    planner_calls = [e for e in read_events(result.run_dir) if isinstance(e, ModelCallEvent)]
    last = planner_calls[-1].request.messages[-1].content or ""
    assert "FileNotFoundError" in last and LOCAL_FILE_HINT in last


@pytest.mark.parametrize(
    ("schedule", "reviewed_calls"),
    [
        # the replacement's first call (index 1) is not reviewed again
        ("continuous", [1, 2, 3, 4, 5, 6, 7]),
        ("protect:3", [1, 4, 5, 6, 7]),
        ("retain_first", [1]),
    ],
)
def test_schedules_after_a_replacement(
    tmp_path: Path, schedule: str, reviewed_calls: list[int]
) -> None:
    """The first review replaces a hopeless block with a solution; the schedule decides which of
    the replacement's boundaries are reviewed again (paper B.2 protection, C.2 retain-first)."""
    hopeless = "root = ROOT\nlist_directory(path=root)\nlist_directory(path=root)"

    def replace(request: ModelRequest) -> ModelResponse:
        return decision("replace_workflow", code=_code(SOLVE)(request))

    result = run(
        tmp_path,
        [fenced(hopeless), DONE],
        [replace] + [KEEP] * 8,
        scope=Scope.FULL,
        schedule=schedule,
    )
    assert result.verdict.success
    assert [e.call_index for e in realized(result)] == reviewed_calls
    assert result.summary.replacements == 1


def test_a_model_that_fails_unexpectedly_ends_the_run_recorded_and_graded(tmp_path: Path) -> None:
    """Not a provider error: a planner whose client raises an error of its own."""

    def broken(request: ModelRequest) -> ModelResponse:
        raise RuntimeError("a bug in the model client")

    result = run(tmp_path, [fenced(SOLVE), broken])
    assert result.end_reason == "error" and "a bug in the model client" in result.detail
    assert result.verdict.success  # the workspace was graded as it stands
    events = read_events(result.run_dir)
    assert events[-1].type == "run_end" and events[-2].type == "final_verdict"
    assert read_summary(result.run_dir).end_reason == "error"


# --------------------------------------------------------------------------- replays check actions

STAMP = """
import time
root = ROOT
write_file(path=f"{root}/stamp_{time.time_ns()}.txt", content="x")
"""

PICK = """
import random
root = ROOT
name = f"pick_{random.randint(0, 10**9)}.txt"
write_file(path=f"{root}/{name}", content=str(random.random()))
"""


def replay(
    first: RunResult,
    tmp_path: Path,
    name: str,
    *,
    actions: bool = True,
    normalise: bool = True,
    **config: object,
) -> RunResult:
    """Replay ``first`` from its log (both roles) in the same workspace root, comparing what
    the environment's normaliser leaves and checking the actions, unless told not to."""
    env = get_environment("filesystem")
    mask = env.normalise_observation if normalise else None
    return run_trajectory(
        env,
        env.task(TASK_ID),
        seed=0,
        planner=ReplayModel.from_run_dir(first.run_dir, "planner", normalise=mask),
        reviewer=ModelReviewer(ReplayModel.from_run_dir(first.run_dir, "reviewer", normalise=mask)),
        condition=Condition(planner_format="fenced", review_mode="json", **config),  # type: ignore[arg-type]
        out_dir=tmp_path / name,
        workspace_root=tmp_path / "ws",
        actions=RecordedActions.from_run_dir(first.run_dir, normalise=mask) if actions else None,
    )


def calls_of(result: RunResult) -> list[PrimitiveCall]:
    return [e.call for e in read_events(result.run_dir) if isinstance(e, PrimitiveCallEvent)]


def test_a_replay_whose_action_differs_only_in_its_arguments_diverges(tmp_path: Path) -> None:
    """Under ``code_only`` the reviewer never sees the pending call's arguments, so a recorded
    ``keep`` applied to another call leaves every model request as recorded: only the check of
    the actions (tool, final arguments, observation) notices, and names the field."""
    config = {"scope": Scope.ARG, "view": "code_only", "schedule": "continuous"}
    first = run(tmp_path, [fenced(STAMP), DONE], [KEEP], **config)
    assert first.end_reason == "final_answer"
    time.sleep(0.01)
    blind = replay(first, tmp_path, "unchecked", actions=False, **config)
    assert blind.end_reason == "final_answer"  # the requests alone cannot tell
    assert calls_of(blind)[0].arguments != calls_of(first)[0].arguments
    with pytest.raises(ActionMismatch, match=r"primitive call 0 differs .* at arguments\.path"):
        replay(first, tmp_path, "checked", **config)
    summary = read_summary(tmp_path / "checked")
    assert summary.end_reason == "replay_diverged" and summary.success is None
    last = read_events(tmp_path / "checked")[-1]
    assert isinstance(last, RunEndEvent) and "arguments.path" in last.detail


def test_run_task_replays_check_the_actions_too(tmp_path: Path) -> None:
    """``--model replay:DIR`` (``prepare``) turns the check on."""
    first = run(tmp_path, [fenced(STAMP), DONE], [KEEP], scope=Scope.ARG, view="code_only")
    spec = RunSpec(
        task=TASK_ID,
        scope="arg",
        view="code_only",
        model=f"replay:{first.run_dir}",
        out=tmp_path / "again",
    )
    with pytest.raises(ReplayMismatch, match=r"primitive call 0 differs"):
        run_task(spec)
    assert read_summary(tmp_path / "again").end_reason == "replay_diverged"


def test_a_block_using_random_replays_identically(tmp_path: Path) -> None:
    """The worker seeds ``random`` from the run's seed and the block: the replay draws the same
    numbers, so it writes the same file with the same content, and its actions check passes."""
    first = run(tmp_path, [fenced(PICK), DONE], [KEEP], scope=Scope.ARG, view="code_only")
    start = read_events(first.run_dir)[0]
    assert isinstance(start, RunStartEvent) and start.worker_seed == 0
    again = replay(first, tmp_path, "again", scope=Scope.ARG, view="code_only")
    assert again.end_reason == "final_answer"
    assert [c.arguments for c in calls_of(again)] == [c.arguments for c in calls_of(first)]


def test_the_log_holds_the_request_and_the_final_arguments_and_a_no_op_patch(
    tmp_path: Path,
) -> None:
    """A Params rewrite that changes only a later constant: accepted, and the call's record
    says that its arguments were left unchanged (with what the block asked for)."""
    block = 'root = ROOT\ntext = read_text_file(path=root + "/large_file.txt")\nprint("first")\n'

    def rewrite(request: ModelRequest) -> ModelResponse:
        slots = {v: k for k, v in editable_constants(_code(block)(request)).items()}
        return decision("patch_block_data", constants={str(slots["first"]): "second"})

    result = run(
        tmp_path,
        [fenced(block), DONE],
        [rewrite],
        scope=Scope.PARAMS,
        lattice="v2",
        schedule="every_boundary",
    )
    [call] = calls_of(result)
    assert call.operation == "patch_block_data"
    assert call.requested == call.arguments
    assert call.notice is not None and "unchanged" in call.notice
    ends = [e for e in read_events(result.run_dir) if isinstance(e, BlockEndEvent)]
    assert ends[0].result.output == "second\n"
