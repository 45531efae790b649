"""The OpenAI-compatible client against a loopback server that streams slowly: an attempt may
use what is left of its call's deadline, a timed-out attempt is not retried unless the endpoint
cancels abandoned work, streamed answers are assembled (text, tool calls, usage), and a server
that does not stream is read whole."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from controlscope.core import Message, ModelRequest, ProviderError, ToolSpec, model_call_event
from controlscope.models import OpenAIModel, make_model
from fixtures.big_server import BigServer
from fixtures.stream_server import Answer, StreamServer


def user(text: str = "hi", **fields: Any) -> ModelRequest:
    return ModelRequest(messages=(Message(role="user", content=text),), max_tokens=64, **fields)


@pytest.fixture
def serve() -> Iterator[Callable[..., StreamServer]]:
    servers: list[StreamServer] = []

    def start(*script: Answer) -> StreamServer:
        servers.append(StreamServer(*script))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def _wait_until(check: Callable[[], bool], timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def test_a_slow_answer_within_the_deadline_is_streamed_and_arrives_whole(
    serve: Callable[..., StreamServer],
) -> None:
    """Evaluated for 1 s, then nine events (six pieces, the role, the finish, the end) 0.375 s
    apart: 4 s in all, within a 6 s deadline. The call is one attempt, asks for a stream, and
    shows its progress while the answer arrives; no fixed per-attempt limit cuts it (the model
    is built as a run builds it, with the run's deadline only)."""
    pieces = ["def ", "main", "():", " return ", "42", "\n"]
    server = serve(Answer(pieces=pieces, delay_s=1.0, interval_s=0.375))
    model = make_model("openai:stream-model", base_url=server.base_url, request_timeout_s=6.0)
    assert isinstance(model, OpenAIModel)
    seen: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.wait(0.1):
            seen.append(model.tokens_received)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        response = model.complete(user())
    finally:
        done.set()
        watcher.join()
        model.close()
    assert response.text == "".join(pieces)
    assert response.finish_reason == "stop"
    assert model.last_attempts == 1 and server.requests == 1
    assert server.bodies[0]["stream"] is True
    assert server.bodies[0]["stream_options"] == {"include_usage": True}
    assert any(0 < n < len(pieces) for n in seen), seen  # progress seen mid-answer
    assert response.usage.output_tokens == len(pieces)  # no usage sent: counted from the stream


@pytest.mark.parametrize("cancels", [False, True])
def test_a_timed_out_attempt_is_retried_only_when_the_endpoint_cancels_abandoned_work(
    serve: Callable[..., StreamServer], cancels: bool
) -> None:
    """Every attempt takes longer than its 0.5 s limit. By default the first is the last (the
    server may still be computing it); an endpoint known to cancel is tried again."""
    server = serve(Answer(pieces=["x"] * 4, delay_s=0.2, interval_s=1.0))
    model = make_model(
        "openai:m",
        base_url=server.base_url,
        api_key="k",
        timeout_s=0.5,
        request_timeout_s=8.0,
        max_retries=2,
        backoff_s=0.01,
        cancels_abandoned=cancels,
    )
    assert isinstance(model, OpenAIModel)
    try:
        with pytest.raises(ProviderError) as caught:
            model.complete(user())
    finally:
        model.close()
    assert caught.value.kind == "timeout"
    assert "limit of 0.5 s" in str(caught.value)
    if cancels:
        assert model.last_attempts == 3 and server.requests == 3
        assert "retried as the endpoint cancels abandoned work" in str(caught.value)
    else:
        assert model.last_attempts == 1 and server.requests == 1
        assert "not retried" in str(caught.value)
    # every attempt was streamed, so the server saw each client go and stopped computing
    assert _wait_until(lambda: server.abandoned == server.requests)
    assert server.finished == 0


def test_a_call_cut_by_its_deadline_says_how_many_tokens_had_come_and_stops_the_server(
    serve: Callable[..., StreamServer],
) -> None:
    server = serve(Answer(pieces=["a"] * 20, interval_s=0.3))
    model = OpenAIModel("m", base_url=server.base_url, api_key="k", request_timeout_s=2.0)
    request = user()
    try:
        with pytest.raises(ProviderError) as caught:
            model.complete(request)
    finally:
        model.close()
    text = str(caught.value)
    assert caught.value.kind == "timeout" and "deadline of 2 s" in text
    received = int(text.split("; ")[1].split(" token(s)")[0])
    assert 3 <= received < 20, text
    event = model_call_event("planner", request, caught.value, turn=0)  # what the log records
    assert event.error is not None and "token(s) of a streamed answer received" in event.error
    assert event.usage is not None and event.usage.output_tokens == received  # as counts too
    assert _wait_until(lambda: server.abandoned == 1) and server.finished == 0


def test_a_deadline_cut_of_an_answer_that_is_not_streamed_says_so(
    serve: Callable[..., StreamServer],
) -> None:
    server = serve(Answer(delay_s=5.0))
    model = OpenAIModel(
        "m", base_url=server.base_url, api_key="k", request_timeout_s=1.0, stream=False
    )
    try:
        with pytest.raises(ProviderError, match="no tokens received: the answer was not streamed"):
            model.complete(user())
    finally:
        model.close()
    assert "stream" not in server.bodies[0]


def test_streamed_tool_calls_are_assembled_by_index(serve: Callable[..., StreamServer]) -> None:
    """Two calls whose pieces interleave; the second in ``llama_cpp.server``'s way, its id and
    name repeated in every chunk; the usage in a last chunk of its own."""
    calls = [
        (0, "call_a", "execute_python", '{"code": '),
        (1, "call_b", "read_text_file", '{"pa'),
        (0, "", "", '"print(1)"}'),
        (1, "call_b", "read_text_file", 'th": "notes.txt"}'),
    ]
    usage = {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49}
    server = serve(Answer(pieces=[], tool_calls=calls, finish="tool_calls", usage=usage))
    model = OpenAIModel("m", base_url=server.base_url, api_key="k")
    tools = (ToolSpec(name="execute_python"), ToolSpec(name="read_text_file"))
    try:
        response = model.complete(user(tools=tools))
    finally:
        model.close()
    first, second = response.tool_calls
    assert (first.id, first.name) == ("call_a", "execute_python")
    assert first.parsed == {"code": "print(1)"}
    assert (second.id, second.name, second.parsed) == (
        "call_b",
        "read_text_file",
        {"path": "notes.txt"},
    )
    assert response.text is None and response.finish_reason == "tool_calls"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (40, 9)
    assert server.bodies[0]["stream"] is True and model.tokens_received == len(calls)


def test_a_server_that_answers_a_stream_request_whole_is_read_whole(
    serve: Callable[..., StreamServer],
) -> None:
    """``stream`` asked for, a JSON body answered (a server that ignores the field)."""
    server = serve(Answer(pieces=["who", "le"], streams=False, usage={"completion_tokens": 2}))
    model = OpenAIModel("m", base_url=server.base_url, api_key="k")
    try:
        response = model.complete(user())
    finally:
        model.close()
    assert response.text == "whole" and response.usage.output_tokens == 2
    assert server.bodies[0]["stream"] is True and model.last_attempts == 1


def test_a_requests_own_stream_option_wins(serve: Callable[..., StreamServer]) -> None:
    server = serve(Answer(pieces=["whole"]))
    model = OpenAIModel("m", base_url=server.base_url, api_key="k")
    try:
        assert model.complete(user(provider_options={"stream": False})).text == "whole"
    finally:
        model.close()
    assert server.bodies[0]["stream"] is False and "stream_options" not in server.bodies[0]
    assert model.tokens_received == 0  # read whole


def test_a_server_that_refuses_the_stream_field_is_asked_again_without_it(
    serve: Callable[..., StreamServer],
) -> None:
    server = serve(Answer(pieces=["fine"], refuse_stream=True))
    model = OpenAIModel("m", base_url=server.base_url, api_key="k", max_retries=0)
    try:
        assert model.complete(user()).text == "fine"
        assert model.complete(user()).text == "fine"
    finally:
        model.close()
    streamed = [body.get("stream") for body in server.bodies]
    assert streamed == [True, None, None]  # refused once, then never asked to stream again
    assert model.stream is False


def test_a_stream_cut_short_is_a_server_error_and_retried(
    serve: Callable[..., StreamServer],
) -> None:
    server = serve(Answer(pieces=["par", "tial"], finish=None), Answer(pieces=["all of it"]))
    model = OpenAIModel("m", base_url=server.base_url, api_key="k", backoff_s=0.01)
    try:
        assert model.complete(user()).text == "all of it"
    finally:
        model.close()
    assert model.last_attempts == 2 and server.requests == 2


def test_a_stream_cut_short_every_time_says_why(serve: Callable[..., StreamServer]) -> None:
    server = serve(Answer(pieces=["par"], finish=None))
    model = OpenAIModel("m", base_url=server.base_url, api_key="k", max_retries=1, backoff_s=0.01)
    try:
        with pytest.raises(ProviderError, match="without a finish reason") as caught:
            model.complete(user())
    finally:
        model.close()
    assert caught.value.kind == "server" and model.last_attempts == 2


def test_a_streamed_answer_over_the_bound_is_response_too_large_and_read_no_further() -> None:
    server = BigServer("sse")
    model = OpenAIModel("big-model", base_url=server.base_url, max_retries=3, backoff_s=0.01)
    try:
        with pytest.raises(ProviderError) as caught:
            model.complete(user())
    finally:
        model.close()
        server.close()
    assert caught.value.kind == "response_too_large", caught.value
    assert model.last_attempts == 1 and server.requests == 1
    assert server.sent < 100_000_000
    assert 0 < model.tokens_received <= 8  # read as a stream, piece by piece, up to the bound


@pytest.mark.parametrize(
    ("usage", "timings", "expected"),
    [
        ({"prompt_tokens": 40, "completion_tokens": 3, "total_tokens": 43}, None, (40, 3)),
        (None, {"prompt_n": 31, "predicted_n": 3}, (31, 3)),  # llama.cpp's server
        (  # a usage the server sends wins over its timings
            {"prompt_tokens": 40, "completion_tokens": 3, "total_tokens": 43},
            {"prompt_n": 31, "predicted_n": 3},
            (40, 3),
        ),
        (None, None, (0, 3)),  # llama_cpp.server: the pieces counted, the prompt unknown
    ],
)
def test_a_streamed_answers_token_counts_come_from_its_usage_else_its_timings_else_counting(
    serve: Callable[..., StreamServer],
    usage: dict[str, int] | None,
    timings: dict[str, int] | None,
    expected: tuple[int, int],
) -> None:
    server = serve(Answer(pieces=["a", "b", "c"], usage=usage, timings=timings))
    model = OpenAIModel("m", base_url=server.base_url, api_key="k", request_timeout_s=30.0)
    try:
        response = model.complete(user())
    finally:
        model.close()
    assert server.bodies[0]["stream_options"] == {"include_usage": True}
    assert response.text == "abc"
    assert (response.usage.input_tokens, response.usage.output_tokens) == expected
