"""Tests of the trajectory log: event schema, writer, reader, summaries."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import warnings
from pathlib import Path

import pytest

from controlscope.core import (
    EVENTS_FILE,
    SCHEMA_VERSION,
    BlockEndEvent,
    BlockResult,
    BlockStartEvent,
    Boundary,
    BoundaryEvent,
    BudgetEvent,
    CallSite,
    Check,
    Event,
    FinalVerdictEvent,
    Keep,
    Message,
    ModelCallEvent,
    ModelRequest,
    ModelResponse,
    PatchArguments,
    PlannerTurnEvent,
    PrimitiveCall,
    PrimitiveCallEvent,
    ProposalEvent,
    ProviderError,
    RealizedOperationEvent,
    ReplaceWorkflow,
    ReviewRequestEvent,
    RunEndEvent,
    RunStartEvent,
    Scope,
    Task,
    ToolResult,
    Usage,
    Validation,
    ValidationEvent,
    Verdict,
    model_call_event,
    upgrade_event,
)
from controlscope.models._replay import ReplayModel
from controlscope.record import (
    LogError,
    SummaryError,
    TrajectoryWriter,
    TruncatedLogWarning,
    read_events,
    read_log,
    read_summary,
    summarize,
    write_summary,
)

REPO = Path(__file__).resolve().parents[1]

TASK = Task(
    id="student_database/english_students",
    env="filesystem",
    category="student_database",
    instruction="List the students who take English.",
    template="student_database",
    params={"students": 25},
)


def _request(purpose: str, text: str) -> ModelRequest:
    return ModelRequest(messages=(Message(role="user", content=text),), purpose=purpose)  # type: ignore[arg-type]


def _response(inp: int, out: int, *, cached: bool = False, latency: float = 0.5) -> ModelResponse:
    return ModelResponse(
        text="ok",
        usage=Usage(input_tokens=inp, output_tokens=out, cached_tokens=inp // 2),
        model="m",
        cached=cached,
        latency_s=0.0 if cached else latency,
    )


def _boundary(index: int, block: str = "b0") -> Boundary:
    return Boundary(
        block_id=block,
        call_index=index,
        block_call_index=index,
        tool="read_text_file",
        arguments={"path": f"/w/{index}.txt"},
        line=index + 1,
        call_site=CallSite(module=block),
        code="read_text_file('/w/0.txt')",
    )


def _call(index: int, block: str = "b0") -> PrimitiveCall:
    return PrimitiveCall(
        block_id=block,
        call_index=index,
        tool="read_text_file",
        arguments={"path": f"/w/{index}.txt"},
        result=ToolResult(text=f"content {index}"),
        started_at=1.0,
        elapsed_ms=1.5,
    )


def _run_events() -> list[Event]:
    """A small but complete run: 2 planner turns, 3 boundaries, every review outcome kind."""
    patch = PatchArguments(arguments={"path": "/w/x.txt"})
    replace = ReplaceWorkflow(code="print('new')")
    return [
        RunStartEvent(
            task=TASK,
            seed=3,
            scope=Scope.FULL,
            schedule="continuous",
            view="with_feedback",
            models={"planner": "local", "reviewer": "local"},
            isolation="bwrap",
        ),
        PlannerTurnEvent(turn=0),
        ModelCallEvent(
            role="planner", request=_request("planner", "go"), response=_response(100, 20)
        ),
        BlockStartEvent(block_id="b0", code="read_text_file('/w/0.txt')"),
        # boundary 0: accepted patch
        BoundaryEvent(boundary=_boundary(0), review=True),
        ReviewRequestEvent(call_index=0, block_id="b0", view="with_feedback", granted=Scope.FULL),
        ModelCallEvent(
            role="reviewer", request=_request("reviewer", "r0"), response=_response(50, 10)
        ),
        ProposalEvent(call_index=0, raw="patch", operation=patch),
        ValidationEvent(
            call_index=0,
            validation=Validation(
                granted=Scope.FULL, proposal=patch, accepted=True, realized=patch
            ),
        ),
        RealizedOperationEvent(
            call_index=0, block_id="b0", granted=Scope.FULL, operation=patch, latency_s=0.25
        ),
        PrimitiveCallEvent(call=_call(0)),
        # boundary 1: provider error -> keep fallback
        BoundaryEvent(boundary=_boundary(1), review=True),
        ReviewRequestEvent(call_index=1, block_id="b0", view="with_feedback", granted=Scope.FULL),
        model_call_event(
            "reviewer",
            _request("reviewer", "r1"),
            ProviderError("HTTP 500", status=500, kind="server"),
            call_index=1,
        ),
        RealizedOperationEvent(
            call_index=1, operation=Keep(), fallback="provider_error", latency_s=0.5
        ),
        PrimitiveCallEvent(call=_call(1)),
        # boundary 2: rejected out-of-scope proposal, then a cached replacement-free keep
        BoundaryEvent(boundary=_boundary(2), review=True),
        ReviewRequestEvent(call_index=2, block_id="b0", view="with_feedback", granted=Scope.ARG),
        ModelCallEvent(
            role="reviewer",
            request=_request("reviewer", "r2"),
            response=_response(60, 5, cached=True),
        ),
        ProposalEvent(call_index=2, raw="x", operation=replace),
        ValidationEvent(
            call_index=2,
            validation=Validation(
                granted=Scope.ARG,
                proposal=replace,
                accepted=False,
                reason="out_of_scope",
                realized=Keep(),
            ),
        ),
        RealizedOperationEvent(
            call_index=2, operation=Keep(), fallback="out_of_scope", latency_s=0.25
        ),
        PrimitiveCallEvent(call=_call(2)),
        BlockEndEvent(result=BlockResult(block_id="b0", status="completed", calls=3)),
        PlannerTurnEvent(turn=1),
        ModelCallEvent(
            role="planner", request=_request("planner", "done?"), response=_response(200, 30)
        ),
        BudgetEvent(budget="planning_turns", limit=2, value=2),
        FinalVerdictEvent(
            verdict=Verdict(task_id=TASK.id, checks=[Check(name="output", passed=True)]),
            success=True,
            end_reason="budget:planning_turns",
        ),
        RunEndEvent(end_reason="budget:planning_turns"),
    ]


def _write_all(run_dir: Path, events: list[Event]) -> list[Event]:
    with TrajectoryWriter(run_dir) as writer:
        return [writer.write(e) for e in events]


def test_round_trip_assigns_seq_and_time(tmp_path: Path) -> None:
    written = _write_all(tmp_path, _run_events())
    back = read_events(tmp_path)
    assert back == written
    assert [e.seq for e in back] == list(range(len(back)))
    times = [e.t for e in back]
    assert times == sorted(times) and times[0] > 1.7e9
    assert {e.type for e in back} >= {
        "run_start",
        "model_call",
        "planner_turn",
        "block_start",
        "block_end",
        "boundary",
        "review_request",
        "proposal",
        "validation",
        "realized_operation",
        "primitive_call",
        "budget",
        "final_verdict",
        "run_end",
    }


def test_lines_are_json_with_scope_names_and_model_call_shape(tmp_path: Path) -> None:
    _write_all(tmp_path, _run_events())
    lines = [json.loads(x) for x in (tmp_path / EVENTS_FILE).read_text().splitlines()]
    assert lines[0]["scope"] == "full" and lines[0]["schema_version"] == SCHEMA_VERSION
    calls = [x for x in lines if x["type"] == "model_call"]
    assert {c["role"] for c in calls} == {"planner", "reviewer"}
    for c in calls:
        assert {"role", "request", "response", "error", "error_kind"} <= set(c)
        # The request field alone rebuilds the ModelRequest (what ReplayModel reads).
        ModelRequest.model_validate(c["request"])
    failed = [c for c in calls if c["response"] is None]
    assert failed and failed[0]["error_kind"] == "server" and failed[0]["error_status"] == 500
    assert failed[0]["error"] == "HTTP 500" and failed[0]["call_index"] == 1


def replayed(response: ModelResponse) -> ModelResponse:
    """``response`` as a replay model returns it."""
    return response.model_copy(update={"replayed": True})


def test_replay_model_reads_the_log(tmp_path: Path) -> None:
    """The models package's ReplayModel answers from what the writer wrote, marked replayed."""
    events = _run_events()
    _write_all(tmp_path, events)
    calls = [e for e in events if isinstance(e, ModelCallEvent)]
    planner = ReplayModel.from_run_dir(tmp_path, "planner")
    for call in (c for c in calls if c.role == "planner"):
        assert call.response is not None
        assert planner.complete(call.request) == replayed(call.response)
    reviewer = ReplayModel.from_run_dir(tmp_path, "reviewer")
    reviewer_calls = [c for c in calls if c.role == "reviewer"]
    assert reviewer_calls[0].response is not None
    assert reviewer.complete(reviewer_calls[0].request) == replayed(reviewer_calls[0].response)
    with pytest.raises(ProviderError, match="HTTP 500"):
        reviewer.complete(reviewer_calls[1].request)


def test_scope_accepts_names_and_integers() -> None:
    base = {"call_index": 0, "block_id": "b", "view": "code_only"}
    assert ReviewRequestEvent.model_validate({**base, "granted": "Params"}).granted is Scope.PARAMS
    assert ReviewRequestEvent.model_validate({**base, "granted": 1}).granted is Scope.ARG
    with pytest.raises(ValueError, match="unknown scope"):
        ReviewRequestEvent.model_validate({**base, "granted": "everything"})


def test_every_scope_in_the_log_is_a_name() -> None:
    """A verdict's validation writes its granted scope by name, like the other events; logs
    written with the integer still read."""
    validation = Validation(granted=Scope.PARAMS, proposal=Keep(), accepted=True, realized=Keep())
    line = json.loads(ValidationEvent(call_index=0, validation=validation).model_dump_json())
    assert line["validation"]["granted"] == "params"
    line["validation"]["granted"] = 2
    assert ValidationEvent.model_validate(line).validation.granted is Scope.PARAMS


def test_refuses_to_overwrite_a_log(tmp_path: Path) -> None:
    _write_all(tmp_path, _run_events()[:2])
    before = (tmp_path / EVENTS_FILE).read_bytes()
    with pytest.raises(FileExistsError, match="already holds"):
        TrajectoryWriter(tmp_path)
    assert (tmp_path / EVENTS_FILE).read_bytes() == before


def test_closed_writer_refuses(tmp_path: Path) -> None:
    writer = TrajectoryWriter(tmp_path)
    writer.close()
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.write(PlannerTurnEvent(turn=0))


def test_truncated_last_line_is_skipped_and_reported(tmp_path: Path) -> None:
    written = _write_all(tmp_path, _run_events()[:5])
    path = tmp_path / EVENTS_FILE
    full = path.read_text()
    # Simulate a process killed in the middle of writing the 6th event.
    partial = PlannerTurnEvent(turn=9).model_dump_json()[:17]
    path.write_text(full + partial)
    with pytest.warns(TruncatedLogWarning, match="incomplete last line"):
        back = read_events(tmp_path)
    assert back == written
    log = read_log(tmp_path)
    assert log.truncated_line == partial


def test_complete_log_does_not_warn(tmp_path: Path) -> None:
    _write_all(tmp_path, _run_events()[:3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(read_events(tmp_path)) == 3


def test_corrupt_middle_line_is_an_error_naming_the_line(tmp_path: Path) -> None:
    _write_all(tmp_path, _run_events()[:4])
    path = tmp_path / EVENTS_FILE
    lines = path.read_text().splitlines()
    lines[1] = lines[1][:10]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(LogError, match=r"events.jsonl:2"):
        read_events(tmp_path)


def test_unknown_event_type_is_an_error(tmp_path: Path) -> None:
    _write_all(tmp_path, _run_events()[:2])
    path = tmp_path / EVENTS_FILE
    path.write_text(path.read_text() + json.dumps({"type": "teleport", "seq": 2}) + "\n")
    with pytest.raises(LogError, match=r":3: unreadable event"):
        read_events(tmp_path)


def test_newer_schema_version_is_refused(tmp_path: Path) -> None:
    _write_all(tmp_path, _run_events()[:2])
    path = tmp_path / EVENTS_FILE
    newer = json.loads(path.read_text().splitlines()[1])
    newer["schema_version"] = SCHEMA_VERSION + 1
    path.write_text(path.read_text() + json.dumps(newer) + "\n")
    with pytest.raises(LogError, match=f"schema version {SCHEMA_VERSION + 1}"):
        read_events(tmp_path)


def test_a_version_1_log_is_read_upgraded(tmp_path: Path) -> None:
    """Schema 1 called the validation of a proposal a ``verdict`` event."""
    validation = Validation(granted=Scope.ARG, proposal=Keep(), accepted=True, realized=Keep())
    old = json.loads(ValidationEvent(call_index=4, validation=validation).model_dump_json())
    old.update({"schema_version": 1, "type": "verdict"})
    (tmp_path / EVENTS_FILE).write_text(json.dumps(old) + "\n")
    (event,) = read_events(tmp_path)
    assert isinstance(event, ValidationEvent) and event.call_index == 4
    assert event.schema_version == SCHEMA_VERSION and event.validation == validation
    old["type"] = "teleport"
    (tmp_path / EVENTS_FILE).write_text(json.dumps(old) + "\n" + json.dumps(old) + "\n")
    with pytest.raises(LogError, match="unreadable event"):
        read_events(tmp_path)


def test_an_older_run_start_is_read_as_the_v2_lattice(tmp_path: Path) -> None:
    """Logs before schema 3 had one scope order, Full granting patch_block_data too: the V2
    lattice (paper A.2). The fixture is the run_start line of a real schema-1 recording."""
    line = (Path(__file__).parent / "fixtures" / "run_start_schema1.jsonl").read_text()
    (tmp_path / "events.jsonl").write_text(line)
    start = read_events(tmp_path)[0]
    assert isinstance(start, RunStartEvent) and start.scope is Scope.FULL
    assert start.lattice == "v2" and start.config["lattice"] == "v2"
    assert start.operations == (
        "keep",
        "patch_arguments",
        "patch_block_data",
        "replace_workflow",
    )
    current = RunStartEvent(task=TASK, seed=0, scope=Scope.ARG, schedule="never", view="code_only")
    assert upgrade_event(current.model_dump(mode="json"))["lattice"] == "default"


def test_replayed_responses_count_in_logical_totals_only() -> None:
    """Paper B.2: "logical token totals include replayed responses"; A.5: reused trajectories
    and cached responses are identified in resource accounting."""
    events = _run_events()
    summary = summarize(events)
    assert not summary.reused
    replayed = [
        e.model_copy(update={"response": e.response.model_copy(update={"replayed": True})})
        if isinstance(e, ModelCallEvent) and e.response is not None
        else e
        for e in events
    ]
    again = summarize(replayed)
    for role in ("planner", "reviewer"):
        before, after = summary.tokens[role], again.tokens[role]
        assert after.logical == before.logical  # the same model work represented ...
        assert after.uncached.requests == 0  # ... none of it done again
        assert after.replayed == before.logical.requests and after.cache_hits == 0
    assert again.reused and again.tokens["planner"].latency_s == 0.0


def test_killed_writer_process_leaves_a_readable_log(tmp_path: Path) -> None:
    """A real subprocess writes events and is SIGKILLed; everything it wrote is readable."""
    script = textwrap.dedent(
        """
        import sys, time
        from controlscope.core import PlannerTurnEvent
        from controlscope.record import TrajectoryWriter
        w = TrajectoryWriter(sys.argv[1])
        for i in range(1_000_000):
            w.write(PlannerTurnEvent(turn=i))
            if i == 50:
                print("ready", flush=True)
            if i >= 50:
                time.sleep(0.001)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, env=env
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncatedLogWarning)
        events = read_events(tmp_path)
    assert len(events) >= 51
    assert [e.seq for e in events] == list(range(len(events)))
    assert all(isinstance(e, PlannerTurnEvent) and e.turn == e.seq for e in events)


def test_summarize_counts_everything() -> None:
    events = _run_events()
    for i, e in enumerate(events):  # stamp like the writer does, 1 s apart
        events[i] = e.model_copy(update={"seq": i, "t": 1000.0 + i})
    s = summarize(events)
    assert (s.task, s.seed, s.scope, s.schedule, s.view) == (
        TASK.id,
        3,
        "full",
        "continuous",
        "with_feedback",
    )
    assert s.models == {"planner": "local", "reviewer": "local"}
    assert s.isolation == "bwrap"
    assert s.success is True and s.complete and s.end_reason == "budget:planning_turns"
    assert (s.primitive_calls, s.planning_turns, s.blocks, s.boundaries) == (3, 2, 1, 3)
    assert (s.reviews, s.argument_patches, s.block_data_patches, s.replacements) == (3, 1, 0, 0)
    assert s.rejected_proposals == 1
    assert s.fallbacks == {
        "malformed": 0,
        "out_of_scope": 1,
        "invalid_arguments": 0,
        "provider_error": 1,
        "syntax_error": 0,
        "timeout": 0,
    }
    planner, reviewer = s.tokens["planner"], s.tokens["reviewer"]
    assert (planner.logical.input_tokens, planner.logical.output_tokens) == (300, 50)
    assert planner.uncached == planner.logical
    assert (reviewer.logical.requests, reviewer.logical.input_tokens) == (2, 110)
    assert (reviewer.uncached.requests, reviewer.uncached.input_tokens) == (1, 50)
    assert (reviewer.uncached.output_tokens, reviewer.logical.output_tokens) == (10, 15)
    assert reviewer.cache_hits == 1 and reviewer.failed_requests == 1
    assert s.review_seconds == pytest.approx(1.0)
    assert s.model_seconds == pytest.approx(1.5)
    assert s.wall_seconds == pytest.approx(len(events) - 1)
    assert s.budgets_hit == ["planning_turns"]


def test_summary_of_a_killed_prefix_is_incomplete(tmp_path: Path) -> None:
    _write_all(tmp_path, _run_events()[:12])
    s = summarize(read_events(tmp_path))
    assert not s.complete and s.success is None and s.end_reason is None
    assert s.primitive_calls == 1 and s.argument_patches == 1


def test_summary_file_round_trip(tmp_path: Path) -> None:
    _write_all(tmp_path, _run_events())
    s = summarize(read_events(tmp_path))
    path = write_summary(tmp_path, s)
    assert path.name == "summary.json" and not list(tmp_path.glob("*.tmp"))
    assert json.loads(path.read_text())["fallbacks"]["provider_error"] == 1
    assert read_summary(tmp_path) == s


def test_summarize_needs_run_start() -> None:
    with pytest.raises(SummaryError, match="run_start"):
        summarize([PlannerTurnEvent(turn=0)])
    with pytest.raises(SummaryError):
        summarize([])


def test_rebuild_summary_from_the_command_line(tmp_path: Path) -> None:
    _write_all(tmp_path, _run_events()[:12])
    with (tmp_path / EVENTS_FILE).open("a") as f:
        f.write('{"type": "bound')  # killed mid-write
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    cmd = [sys.executable, "-m", "controlscope.record", str(tmp_path), "--write"]
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "incomplete last line" in done.stderr
    assert json.loads(done.stdout)["argument_patches"] == 1
    assert read_summary(tmp_path).primitive_calls == 1
    missing = subprocess.run(
        [sys.executable, "-m", "controlscope.record", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert missing.returncode == 2 and missing.stderr.startswith("error:")


def test_concurrent_writers_keep_lines_whole_and_seq_consecutive(tmp_path: Path) -> None:
    with TrajectoryWriter(tmp_path) as writer:

        def work(offset: int) -> None:
            for i in range(150):
                writer.write(PlannerTurnEvent(turn=offset + i))

        threads = [threading.Thread(target=work, args=(k * 1000,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        in_memory = writer.events
    events = read_events(tmp_path)
    assert events == in_memory
    assert [e.seq for e in events] == list(range(600))
    turns = sorted(e.turn for e in events if isinstance(e, PlannerTurnEvent))
    assert turns == sorted(k * 1000 + i for k in range(4) for i in range(150))


def _conversation(*texts: str) -> ModelRequest:
    messages = [Message(role="system", content="You plan.")]
    messages += [Message(role="user" if i % 2 == 0 else "assistant", content=t) for i, t in
                 enumerate(texts)]  # fmt: skip
    return ModelRequest(messages=tuple(messages), purpose="planner")


def test_a_growing_conversation_is_written_as_continuations_and_read_back_whole(
    tmp_path: Path,
) -> None:
    """Each planner request is written as the messages it adds to the planner's previous one
    (a reviewer's request between them does not break the chain); one that does not begin
    with the previous one's messages is written whole. Every reader gets each request whole."""
    answer = ModelResponse(text="ok")
    sent = [
        ModelCallEvent(role="planner", request=_conversation("task"), response=answer),
        ModelCallEvent(role="reviewer", request=_request("reviewer", "review 1"), response=answer),
        ModelCallEvent(
            role="planner", request=_conversation("task", "b0", "out0"), response=answer
        ),
        ModelCallEvent(role="planner", request=_conversation("task", "b0", "out0", "b1", "out1")),
        ModelCallEvent(role="reviewer", request=_request("reviewer", "review 2"), response=answer),
        ModelCallEvent(role="planner", request=_conversation("another task")),
    ]
    with TrajectoryWriter(tmp_path) as writer:
        written = [writer.write(event) for event in sent]
    assert [w.request for w in written] == [e.request for e in sent]  # observers get it whole
    raw = [json.loads(line) for line in (tmp_path / EVENTS_FILE).read_text().splitlines()]
    assert [line.get("messages_from") for line in raw] == [None, None, 0, 2, None, None]
    assert [len(line["request"]["messages"]) for line in raw] == [2, 1, 2, 2, 1, 2]
    assert raw[3]["request"]["messages"][0]["content"] == "b1"
    read = read_events(tmp_path)
    assert [e.request for e in read if isinstance(e, ModelCallEvent)] == [e.request for e in sent]
    assert all(e.messages_from is None for e in read if isinstance(e, ModelCallEvent))
    assert raw[0]["schema_version"] == SCHEMA_VERSION


def test_a_continuation_of_an_event_that_is_not_its_roles_previous_is_refused(
    tmp_path: Path,
) -> None:
    answer = ModelResponse(text="ok")
    with TrajectoryWriter(tmp_path) as writer:
        writer.write(ModelCallEvent(role="planner", request=_conversation("a"), response=answer))
        writer.write(ModelCallEvent(role="planner", request=_conversation("a", "b", "c")))
    log = tmp_path / EVENTS_FILE
    lines = log.read_text().splitlines()
    edited = json.loads(lines[1])
    edited["messages_from"] = 7
    log.write_text(lines[0] + "\n" + json.dumps(edited) + "\n")
    with pytest.raises(LogError, match=r"events.jsonl:2: a planner model_call continues event 7"):
        read_events(tmp_path)


def test_a_summary_lists_the_first_decisions_and_counts_the_rest() -> None:
    """A run reviewed at every one of its 20 calls, each a fallback, one a patch: its summary
    lists the first eight decisions in order and counts the other twelve; the report's line for
    it names them (the run's page shows each)."""
    from controlscope.analysis._decisions import _lines
    from controlscope.core import Keep, PatchArguments, RealizedOperationEvent
    from controlscope.record import DECISIONS_LISTED, DecisionNotes

    notes = DecisionNotes()
    for i in range(20):
        patch = i == 3
        notes.add(
            RealizedOperationEvent(
                call_index=i,
                operation=PatchArguments(arguments={"path": "b"}) if patch else Keep(),
                fallback=None if patch else "malformed",
            )
        )
    notes.add(RealizedOperationEvent(call_index=20, operation=Keep()))  # kept by choice
    assert DECISIONS_LISTED == 8 and notes.omitted == 12 and notes.revised
    assert [d.call_index for d in notes.decisions] == list(range(8))
    assert notes.decisions[3].operation == "patch_arguments" and notes.decisions[3].fallback is None
    lines = _lines(21, notes.decisions, notes.omitted, revised=notes.revised)
    assert len(lines) == 9 and lines[-1].startswith("… and 12 more decisions")
