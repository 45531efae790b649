"""Tests of controlscope.models._scripted and controlscope.models._replay (the test doubles), and
of the replay's check of recorded actions (controlscope.record.RecordedActions)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from controlscope.core import (
    EVENT_ADAPTER,
    EVENTS_FILE,
    ChatModel,
    Message,
    ModelCallEvent,
    ModelRequest,
    ModelResponse,
    PlannerTurnEvent,
    PrimitiveCall,
    PrimitiveCallEvent,
    ProviderError,
    ToolResult,
    ToolSpec,
    Usage,
    model_call_event,
)
from controlscope.models import (
    ReplayExhausted,
    ReplayMismatch,
    ReplayModel,
    ScriptedModel,
    ScriptExhausted,
)
from controlscope.models._replay import first_difference
from controlscope.record import (
    ActionMismatch,
    LogError,
    RecordedActions,
    TrajectoryWriter,
    TruncatedLogWarning,
)


def conversation(*contents: str, **fields: object) -> ModelRequest:
    roles = ["system", "user", "assistant", "user", "assistant", "user"]
    messages = tuple(
        Message(role=roles[i], content=text)  # type: ignore[arg-type]
        for i, text in enumerate(contents)
    )
    return ModelRequest(messages=messages, **fields)  # type: ignore[arg-type]


# --- scripted -----------------------------------------------------------------------------------


def test_scripted_answers_in_order_and_records_requests() -> None:
    echo = lambda req: ModelResponse(text=f"echo {req.messages[-1].content}")  # noqa: E731
    model = ScriptedModel(["plain", ScriptedModel.tool_call("execute_python", {"code": "1"}), echo])
    assert isinstance(model, ChatModel)
    first = model.complete(conversation("s", "a"))
    assert (first.text, first.model) == ("plain", "scripted")
    second = model.complete(conversation("s", "b"))
    assert second.tool_calls[0].name == "execute_python"
    assert second.tool_calls[0].parsed == {"code": "1"}
    assert second.finish_reason == "tool_calls"
    assert model.complete(conversation("s", "c")).text == "echo c"
    assert [r.messages[-1].content for r in model.requests] == ["a", "b", "c"]
    assert model.remaining == 0


def test_scripted_exhaustion_names_how_many_were_given() -> None:
    model = ScriptedModel(["one", "two"])
    model.complete(conversation("s", "a"))
    model.complete(conversation("s", "b"))
    with pytest.raises(ScriptExhausted, match=r"given 2 answer\(s\).*answer 3.*'third'") as caught:
        model.complete(conversation("s", "third"))
    assert caught.value.given == 2
    assert len(model.requests) == 3


def test_scripted_tool_call_ids_are_stable_and_raw_text_kept() -> None:
    one = ScriptedModel.tool_call("t", {"a": 1})
    two = ScriptedModel.tool_call("t", {"a": 1})
    assert one.tool_calls[0].id == two.tool_calls[0].id
    assert ScriptedModel.tool_call("t", {"a": 2}).tool_calls[0].id != one.tool_calls[0].id
    malformed = ScriptedModel.tool_call("t", '{"a": ').tool_calls[0]
    assert malformed.parsed is None and malformed.error and malformed.arguments == '{"a": '


def test_scripted_rejects_bad_items() -> None:
    with pytest.raises(TypeError, match="script answer 1 is a int"):
        ScriptedModel(["ok", 3])  # type: ignore[list-item]
    model = ScriptedModel([lambda req: "not a response"])  # type: ignore[list-item,return-value]
    with pytest.raises(TypeError, match="returned str"):
        model.complete(conversation("s"))


def test_scripted_from_file(tmp_path: Path) -> None:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(["hi", {"text": "there", "usage": {"input_tokens": 4}}]))
    model = ScriptedModel.from_file(path)
    assert model.model_id == "scripted:script.json"
    assert model.complete(conversation("s")).text == "hi"
    assert model.complete(conversation("s")).usage.input_tokens == 4
    path.write_text(json.dumps([{"text": 5, "tool_calls": "x"}]))
    with pytest.raises(ValueError, match="answer 0 is not a model response"):
        ScriptedModel.from_file(path)
    path.write_text("{")
    with pytest.raises(ValueError, match="not JSON"):
        ScriptedModel.from_file(path)


def test_scripted_by_turn_answers_a_conversation_the_same_whatever_came_before(
    tmp_path: Path,
) -> None:
    """Answers by the number of assistant messages in the request: a run whose earlier
    answers came from a cache gets the same answers as one that asked for them all."""
    path = tmp_path / "turns.json"
    path.write_text(json.dumps({"by": "turn", "answers": ["first", "second"]}))
    model = ScriptedModel.from_file(path)
    later = ModelRequest(
        messages=(
            Message(role="user", content="task"),
            Message(role="assistant", content="first"),
            Message(role="user", content="result"),
        )
    )
    assert model.complete(later).text == "second"  # asked first, answered as turn 1
    assert model.complete(conversation("task")).text == "first"
    assert model.complete(later).text == "second"
    twice = later.model_copy(
        update={"messages": (*later.messages, Message(role="assistant", content="x"))}
    )
    with pytest.raises(ScriptExhausted):
        model.complete(twice)


# --- replay -------------------------------------------------------------------------------------


def test_first_difference_paths() -> None:
    assert first_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 2}]}) is None
    assert first_difference({"a": [1, {"b": 2}]}, {"a": [1, {"b": 3}]}) == ("a[1].b", 2, 3)
    assert first_difference({"a": [1]}, {"a": [1, 2]}) == ("a[1]", "<absent>", 2)
    assert first_difference({"a": 1}, {"a": 1, "z": 0}) == ("z", "<absent>", 0)
    assert first_difference({"a": 1}, {"a": 1.0}) is None
    assert first_difference({"a": "1"}, {"a": 1}) == ("a", "1", 1)


def test_replay_answers_in_order_and_names_the_first_differing_field() -> None:
    recorded_1 = conversation("sys", "task")
    recorded_2 = conversation("sys", "task", "plan", "result was 3")
    pairs = [(recorded_1, ModelResponse(text="plan")), (recorded_2, ModelResponse(text="done"))]
    model = ReplayModel(pairs)
    assert model.complete(conversation("sys", "task")).text == "plan"
    with pytest.raises(ReplayMismatch) as caught:
        model.complete(conversation("sys", "task", "plan", "result was 4"))
    error = caught.value
    assert (error.index, error.path) == (1, "messages[3].content")
    assert (error.recorded, error.received) == ("result was 3", "result was 4")
    assert "messages[3].content" in str(error)
    assert model.position == 1  # a mismatch does not advance the replay
    assert model.complete(recorded_2).text == "done"
    with pytest.raises(ReplayExhausted, match="holds 2 request"):
        model.complete(recorded_2)


def test_replay_normalise_applies_to_both_sides_of_every_string() -> None:
    def mask(text: str) -> str:
        return text.replace("t=1", "t=?").replace("t=2", "t=?")

    recorded = conversation("sys", "task at t=1")
    model = ReplayModel([(recorded, ModelResponse(text="a"))] * 2, normalise=mask)
    assert model.complete(conversation("sys", "task at t=2")).text == "a"
    with pytest.raises(ReplayMismatch) as caught:  # what the mask leaves is still compared
        model.complete(conversation("sys", "job at t=2"))
    assert caught.value.path == "messages[1].content"
    assert (caught.value.recorded, caught.value.received) == ("task at t=?", "job at t=?")
    strict = ReplayModel([(recorded, ModelResponse(text="a"))])
    with pytest.raises(ReplayMismatch):
        strict.complete(conversation("sys", "task at t=2"))


def test_replay_mismatch_in_settings_and_tools() -> None:
    recorded = conversation("s", tools=(ToolSpec(name="read"),), temperature=0.7)
    model = ReplayModel([(recorded, ModelResponse(text="x"))])
    with pytest.raises(ReplayMismatch) as caught:
        model.complete(recorded.model_copy(update={"tools": (ToolSpec(name="write"),)}))
    assert caught.value.path == "tools[0].name"
    with pytest.raises(ReplayMismatch) as caught:
        model.complete(recorded.model_copy(update={"temperature": 0.0}))
    assert caught.value.path == "temperature"
    with pytest.raises(ReplayMismatch) as caught:
        model.complete(recorded.model_copy(update={"draw": 2}))
    assert caught.value.path == "draw"
    ignoring = ReplayModel([(recorded, ModelResponse(text="x"))], ignore={"draw"})
    assert ignoring.complete(recorded.model_copy(update={"draw": 2})).text == "x"
    with pytest.raises(ValueError, match="unknown request fields"):
        ReplayModel([], ignore={"nonsense"})


def test_replay_from_run_dir_reads_one_role(tmp_path: Path) -> None:
    plan_1, plan_2 = conversation("sys", "task"), conversation("sys", "task", "a", "obs")
    review = conversation("review sys", "h")
    with TrajectoryWriter(tmp_path) as writer:
        answer = ModelResponse(text="a", usage=Usage(input_tokens=9))
        writer.write(model_call_event("planner", plan_1, answer, turn=0))
        writer.write(PlannerTurnEvent(turn=1))
        keep = ModelResponse(text='{"decision": "keep"}')
        writer.write(model_call_event("reviewer", review, keep, call_index=0))
        failure = ProviderError("503", status=503, kind="server")
        writer.write(model_call_event("planner", plan_2, failure, turn=1))
    with (tmp_path / EVENTS_FILE).open("a") as log:
        log.write('{"type": "model_call", "role": "planner", "requ')  # a run killed mid-write

    with pytest.warns(TruncatedLogWarning):
        planner = ReplayModel.from_run_dir(tmp_path, "planner")
    assert len(planner) == 2 and planner.model_id == "replay:planner"
    assert planner.complete(plan_1).usage.input_tokens == 9
    with pytest.raises(ProviderError) as caught:
        planner.complete(plan_2)
    assert (caught.value.kind, caught.value.status) == ("server", 503)
    with pytest.warns(TruncatedLogWarning):
        reviewer = ReplayModel.from_run_dir(tmp_path, "reviewer")
    assert reviewer.complete(review).text == '{"decision": "keep"}'
    with pytest.warns(TruncatedLogWarning):
        assert len(ReplayModel.from_run_dir(tmp_path, "other")) == 0


def test_replay_reads_the_log_the_trajectory_writer_writes(tmp_path: Path) -> None:
    plan, review = conversation("sys", "task"), conversation("review sys", "h")
    reply = ScriptedModel.tool_call("execute_python", {"code": "print(1)"})
    with TrajectoryWriter(tmp_path) as writer:
        writer.write(model_call_event("planner", plan, reply, turn=0))
        failure = ProviderError("timed out", status=None, kind="timeout")
        writer.write(model_call_event("reviewer", review, failure, call_index=0))
    planner = ReplayModel.from_run_dir(tmp_path, "planner")
    answer = planner.complete(plan)
    assert answer.replayed and not reply.replayed
    assert answer == reply.model_copy(update={"replayed": True})
    reviewer = ReplayModel.from_run_dir(tmp_path, "reviewer")
    with pytest.raises(ProviderError, match="timed out") as caught:
        reviewer.complete(review)
    assert caught.value.kind == "timeout"


def test_replay_from_run_dir_bad_input(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"events\.jsonl"):
        ReplayModel.from_run_dir(tmp_path, "planner")
    log = tmp_path / EVENTS_FILE
    good = model_call_event("planner", conversation("s"), ModelResponse())
    log.write_text("{broken\n" + EVENT_ADAPTER.dump_json(good).decode() + "\n")
    with pytest.raises(LogError, match=r"events.jsonl:1"):
        ReplayModel.from_run_dir(tmp_path, "planner")
    log.write_text(json.dumps({"type": "model_call", "role": "planner", "request": {}}) + "\n")
    with pytest.raises(LogError, match=r"events.jsonl:1: unreadable event"):
        ReplayModel.from_run_dir(tmp_path, "planner")
    empty = ModelCallEvent(role="planner", request=conversation("s"))
    log.write_text(EVENT_ADAPTER.dump_json(empty).decode() + "\n")
    with pytest.raises(ValueError, match="neither a response nor an error"):
        ReplayModel.from_run_dir(tmp_path, "planner")


def test_mismatch_in_a_long_text_shows_where_it_changes() -> None:
    from controlscope.models._replay import ReplayMismatch

    head = "You review a Python program. " * 20
    err = ReplayMismatch(0, "messages[0].content", head + "Scope: full.", head + "Scope: arg.")
    text = str(err)
    assert f"(from character {len(head) + 7})" in text
    assert "full" in text and "arg" in text


# --------------------------------------------------------------------------- recorded actions


def _call(index: int, path: str, text: str = "ok", *, is_error: bool = False) -> PrimitiveCall:
    return PrimitiveCall(
        block_id="t0.b0",
        call_index=index,
        tool="read_text_file",
        arguments={"path": path},
        result=ToolResult(text=text, is_error=is_error),
        started_at=0.0,
        elapsed_ms=1.0,
    )


def test_recorded_actions_compare_tool_arguments_and_observation_in_order() -> None:
    recorded = [_call(0, "a.txt"), _call(1, "b.txt", "modified: 12:00:01")]
    mask = lambda text: text.replace("12:00:01", "<clock>").replace("12:00:02", "<clock>")  # noqa: E731
    actions = RecordedActions(recorded, normalise=mask)
    actions.check(_call(0, "a.txt").model_copy(update={"started_at": 9.0, "elapsed_ms": 7.0}))
    actions.check(_call(1, "b.txt", "modified: 12:00:02"))  # a clock reading is masked
    actions.finish()
    with pytest.raises(ActionMismatch, match="primitive call 2 was not recorded"):
        actions.check(_call(2, "c.txt"))
    for replayed, where in [
        (_call(0, "z.txt"), "arguments.path"),
        (_call(0, "a.txt", "other"), "observation.text"),
        (_call(0, "a.txt", is_error=True), "observation.is_error"),
        (_call(0, "a.txt").model_copy(update={"tool": "write_file"}), "tool"),
    ]:
        fresh = RecordedActions(recorded)
        with pytest.raises(ActionMismatch) as caught:
            fresh.check(replayed)
        assert caught.value.path == where and isinstance(caught.value, ReplayMismatch)
        assert f"primitive call 0 differs from the recording at {where}" in str(caught.value)
    short = RecordedActions(recorded)
    short.check(_call(0, "a.txt"))
    with pytest.raises(ActionMismatch, match=r"primitive call 1 was recorded \(read_text_file"):
        short.finish()


def test_recorded_actions_are_read_from_a_run_directory(tmp_path: Path) -> None:
    with TrajectoryWriter(tmp_path) as writer:
        writer.write(PlannerTurnEvent(turn=1))
        writer.write(PrimitiveCallEvent(call=_call(0, "a.txt")))
    actions = RecordedActions.from_run_dir(tmp_path)
    assert len(actions) == 1
    actions.check(_call(0, "a.txt"))
