"""Tests of controlscope.models._openai.

Two real servers on loopback: a tiny stdlib HTTP server that injects faults (429, 500, a silent
endpoint, malformed tool calls) and records the JSON bodies it receives, and ``llama_cpp.server``
serving the real 0.5B model (marked slow).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from controlscope.core import (
    MAX_RESPONSE_BYTES,
    Deadline,
    Message,
    ModelRequest,
    ProviderError,
    ToolCall,
    ToolSpec,
    running_until,
)
from controlscope.models import OpenAIModel, base_url_problem
from controlscope.models._openai import request_to_openai
from fixtures.big_server import BigServer
from fixtures.slow_server import SlowServer

Action = tuple[int, dict[str, Any] | bytes, dict[str, str]] | str


def completion(
    content: str | None = "hello",
    tool_calls: list[dict[str, Any]] | None = None,
    usage: dict[str, Any] | None = None,
    finish: str = "stop",
) -> dict[str, Any]:
    """An OpenAI chat.completion body."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if tool_calls is not None:
        message["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage or {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
    }


class FakeEndpoint:
    """A scripted OpenAI-compatible endpoint: each POST takes the next action of the script.

    An action is ``(status, body, headers)`` or ``"hang"`` (answer nothing until released).
    Requests beyond the script get a 200 text answer.
    """

    def __init__(self) -> None:
        self.script: list[Action] = []
        self.bodies: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.release = threading.Event()
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            disable_nagle_algorithm = True  # as real servers do; else delayed ACKs cost 40 ms

            def do_POST(self) -> None:
                length = int(self.headers.get("content-length", 0))
                endpoint.bodies.append(json.loads(self.rfile.read(length)))
                endpoint.headers.append({k.lower(): v for k, v in self.headers.items()})
                action: Action = (
                    endpoint.script.pop(0)
                    if endpoint.script
                    else (
                        200,
                        completion(),
                        {},
                    )
                )
                if action == "hang":
                    endpoint.release.wait(30)
                    return
                assert not isinstance(action, str)
                status, body, headers = action
                data = body if isinstance(body, bytes) else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    @property
    def base_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint() -> Iterator[FakeEndpoint]:
    fake = FakeEndpoint()
    yield fake
    fake.close()


def make(endpoint: FakeEndpoint, **kwargs: Any) -> OpenAIModel:
    options: dict[str, Any] = {"timeout_s": 5.0, "max_retries": 3, "backoff_s": 0.01}
    options.update(kwargs)
    return OpenAIModel("fake-model", base_url=endpoint.base_url, api_key="k", **options)


def user(text: str) -> ModelRequest:
    return ModelRequest(messages=(Message(role="user", content=text),), max_tokens=16)


ERROR_BODY = {"error": {"message": "boom", "type": "server_error"}}


def test_text_answer_and_usage_with_cached_tokens(endpoint: FakeEndpoint) -> None:
    usage = {
        "prompt_tokens": 120,
        "completion_tokens": 7,
        "total_tokens": 127,
        "prompt_tokens_details": {"cached_tokens": 96},
    }
    endpoint.script.append((200, completion("fine", usage=usage), {}))
    response = make(endpoint).complete(user("hi"))
    assert response.text == "fine"
    assert response.finish_reason == "stop"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (120, 7)
    assert response.usage.cached_tokens == 96
    assert response.model == "fake-model"
    assert response.cached is False
    assert response.latency_s > 0


def test_429_then_200_is_retried_and_attempts_counted(endpoint: FakeEndpoint) -> None:
    endpoint.script.append((429, ERROR_BODY, {"retry-after": "0"}))
    endpoint.script.append((200, completion("after retry"), {}))
    model = make(endpoint)
    assert model.complete(user("hi")).text == "after retry"
    assert model.last_attempts == 2
    assert model.total_retries == 1
    assert len(endpoint.bodies) == 2


def test_500_every_time_raises_provider_error_after_retries(endpoint: FakeEndpoint) -> None:
    endpoint.script.extend([(500, ERROR_BODY, {})] * 5)
    model = make(endpoint, max_retries=2)
    with pytest.raises(ProviderError) as caught:
        model.complete(user("hi"))
    assert caught.value.kind == "server"
    assert caught.value.status == 500
    assert "after 3 attempt(s)" in str(caught.value)
    assert model.last_attempts == 3
    assert len(endpoint.bodies) == 3


def test_backoff_grows_exponentially(endpoint: FakeEndpoint) -> None:
    endpoint.script.extend([(503, ERROR_BODY, {})] * 3)
    model = make(endpoint, max_retries=2, backoff_s=0.2)
    start = time.monotonic()
    with pytest.raises(ProviderError):
        model.complete(user("hi"))
    # waits of 0.2 and 0.4 s (each up to 25 % longer with jitter)
    assert 0.6 <= time.monotonic() - start < 3.0


def test_400_is_not_retried(endpoint: FakeEndpoint) -> None:
    endpoint.script.append((400, {"error": {"message": "bad field"}}, {}))
    model = make(endpoint)
    with pytest.raises(ProviderError) as caught:
        model.complete(user("hi"))
    assert (caught.value.kind, caught.value.status) == ("bad_request", 400)
    assert model.last_attempts == 1


def test_silent_endpoint_times_out_quickly_and_is_not_asked_again(endpoint: FakeEndpoint) -> None:
    """A timed-out attempt may still be computing on the server: no retry queues behind it."""
    endpoint.script.extend(["hang", "hang"])
    model = make(endpoint, timeout_s=0.5, max_retries=1)
    start = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        model.complete(user("hi"))
    assert caught.value.kind == "timeout"
    assert model.last_attempts == 1 and len(endpoint.bodies) == 1
    assert time.monotonic() - start < 5.0


def test_closed_port_is_a_connection_error() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = OpenAIModel(
        "m", base_url=f"http://127.0.0.1:{port}/v1", api_key="k", max_retries=1, backoff_s=0.01
    )
    with pytest.raises(ProviderError) as caught:
        model.complete(user("hi"))
    assert caught.value.kind == "connection"
    assert caught.value.status is None
    assert model.last_attempts == 2


def test_malformed_tool_call_arguments_are_kept_raw(endpoint: FakeEndpoint) -> None:
    calls = [
        {
            "id": "call_a",
            "type": "function",
            "function": {"name": "execute_python", "arguments": '{"code": "print(1)'},
        },
        {
            "id": "call_b",
            "type": "function",
            "function": {"name": "execute_python", "arguments": "[1, 2]"},
        },
        {
            "id": "call_c",
            "type": "function",
            "function": {"name": "execute_python", "arguments": '{"code": "x = 1"}'},
        },
    ]
    endpoint.script.append((200, completion(None, tool_calls=calls, finish="tool_calls"), {}))
    response = make(endpoint).complete(user("hi"))
    bad, not_object, good = response.tool_calls
    assert bad.parsed is None and bad.error is not None and "not valid JSON" in bad.error
    assert bad.arguments == '{"code": "print(1)'
    assert not_object.parsed is None and not_object.error is not None
    assert good.parsed == {"code": "x = 1"} and good.error is None
    assert response.finish_reason == "tool_calls"
    assert response.text is None


def test_empty_tool_call_arguments_are_an_empty_object(endpoint: FakeEndpoint) -> None:
    calls = [{"id": "c", "type": "function", "function": {"name": "list_allowed", "arguments": ""}}]
    endpoint.script.append((200, completion(None, tool_calls=calls, finish="tool_calls"), {}))
    (call,) = make(endpoint).complete(user("hi")).tool_calls
    assert call.parsed == {} and call.error is None and call.id == "c"


def test_retry_after_is_honoured_up_to_the_cap(endpoint: FakeEndpoint) -> None:
    endpoint.script.append((429, ERROR_BODY, {"retry-after": "30"}))
    endpoint.script.append((503, ERROR_BODY, {"retry-after-ms": "10"}))
    endpoint.script.append((200, completion("ok"), {}))
    model = make(endpoint, max_backoff_s=0.3)
    start = time.monotonic()
    assert model.complete(user("hi")).text == "ok"
    assert 0.3 <= time.monotonic() - start < 3.0  # 30 s capped at 0.3 s, then 10 ms
    assert (model.last_attempts, model.total_retries, model.total_attempts) == (3, 2, 3)


@pytest.mark.parametrize(
    "body",
    [
        b"not json at all",
        b"[1, 2]",
        b'{"choices": "x"}',
        b'{"choices": [{"message": null}]}',
        b"{}",
    ],
)
def test_malformed_response_is_a_provider_error(endpoint: FakeEndpoint, body: bytes) -> None:
    endpoint.script.append((200, body, {}))
    model = make(endpoint)
    with pytest.raises(ProviderError) as caught:
        model.complete(user("hi"))
    assert caught.value.kind == "other"
    assert model.last_attempts == 1


def test_request_mapping_reaches_the_wire(endpoint: FakeEndpoint) -> None:
    schema = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    request = ModelRequest(
        messages=(
            Message(role="system", content="sys"),
            Message(role="user", content="go"),
            Message(
                role="assistant",
                tool_calls=(ToolCall(id="c1", name="execute_python", arguments='{"code": "1"}'),),
            ),
            Message(role="tool", content="1", tool_call_id="c1", name="execute_python"),
        ),
        tools=(ToolSpec(name="execute_python", parameters=schema),),
        tool_choice="execute_python",
        temperature=0.2,
        top_p=0.9,
        max_tokens=33,
        seed=7,
        json_schema=schema,
        provider_options={"reasoning_effort": "high", "custom_flag": True},
    )
    make(endpoint).complete(request)
    body = endpoint.bodies[-1]
    assert body["model"] == "fake-model"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "execute_python"}}
    assert body["tools"][0]["function"]["parameters"] == schema
    assert "max_completion_tokens" not in body
    assert (body["temperature"], body["top_p"], body["max_tokens"], body["seed"]) == (
        0.2,
        0.9,
        33,
        7,
    )
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"]["schema"] == schema
    assert body["reasoning_effort"] == "high" and body["custom_flag"] is True
    assistant, tool = body["messages"][2], body["messages"][3]
    assert assistant["tool_calls"][0]["function"]["arguments"] == '{"code": "1"}'
    assert tool["tool_call_id"] == "c1"


def test_max_completion_tokens_field(endpoint: FakeEndpoint) -> None:
    make(endpoint, max_tokens_field="max_completion_tokens").complete(user("hi"))
    body = endpoint.bodies[-1]
    assert body["max_completion_tokens"] == 16 and "max_tokens" not in body


def test_unknown_named_tool_choice_is_refused_before_sending() -> None:
    request = ModelRequest(
        messages=(Message(role="user", content="x"),),
        tools=(ToolSpec(name="a"),),
        tool_choice="b",
    )
    with pytest.raises(ValueError, match="names no offered tool"):
        request_to_openai(request)
    with pytest.raises(ValueError, match="needs tools"):
        request_to_openai(ModelRequest(messages=request.messages, tool_choice="required"))


def test_configuration_from_environment(
    endpoint: FakeEndpoint, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CONTROLSCOPE_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_BASE_URL", endpoint.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "env-key")
    model = OpenAIModel()
    assert model.model_id == "openai:env-model"
    assert model.base_url == endpoint.base_url
    model.complete(user("hi"))
    assert endpoint.bodies[-1]["model"] == "env-model"
    monkeypatch.delenv("CONTROLSCOPE_MODEL")
    with pytest.raises(ValueError, match="CONTROLSCOPE_MODEL"):
        OpenAIModel()


@pytest.mark.parametrize(
    "url", ["notaurl", "localhost:8000", "ftp://host/v1", "http://", "http://h:99999/"]
)
def test_a_base_url_that_is_not_an_http_url_with_a_host_is_refused_before_any_request(
    endpoint: FakeEndpoint, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    assert base_url_problem(url) is not None
    with pytest.raises(ValueError, match="base URL"):
        OpenAIModel("m", base_url=url)
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    with pytest.raises(ValueError, match="base URL"):
        OpenAIModel("m")
    assert endpoint.bodies == []
    for good in (endpoint.base_url, "https://api.example.com/v1", "http://[::1]:8000/v1"):
        assert base_url_problem(good) is None


@pytest.mark.parametrize("mode", ["chunked", "announced"])
def test_an_answer_over_the_bound_is_response_too_large_read_no_further_and_not_retried(
    mode: str,
) -> None:
    """200 MB sent (its length announced or not): the client reads at most
    MAX_RESPONSE_BYTES of it and fails at once with ``response_too_large``."""
    server = BigServer(mode)  # type: ignore[arg-type]
    model = OpenAIModel("big-model", base_url=server.base_url, max_retries=3, backoff_s=0.01)
    try:
        with pytest.raises(ProviderError) as caught:
            model.complete(user("hi"))
    finally:
        model.close()
        server.close()
    assert caught.value.kind == "response_too_large", caught.value
    assert "response too large" in str(caught.value)
    assert model.last_attempts == 1 and server.requests == 1
    assert server.sent < 100_000_000  # the rest was never read (socket buffers aside)


def test_an_answer_just_under_the_bound_is_read_whole() -> None:
    server = BigServer("chunked", size=MAX_RESPONSE_BYTES - 1024)
    model = OpenAIModel("big-model", base_url=server.base_url, max_retries=0)
    try:
        response = model.complete(user("hi"))
    finally:
        model.close()
        server.close()
    assert response.text is not None and len(response.text) == MAX_RESPONSE_BYTES - 1024


def test_a_compressed_answer_is_refused_its_size_cannot_be_bounded() -> None:
    server = BigServer("gzip")
    model = OpenAIModel("big-model", base_url=server.base_url, max_retries=2, backoff_s=0.01)
    try:
        with pytest.raises(ProviderError, match="compressed") as caught:
            model.complete(user("hi"))
    finally:
        model.close()
        server.close()
    assert caught.value.kind == "response_too_large" and model.last_attempts == 1


def test_answers_are_asked_for_uncompressed(endpoint: FakeEndpoint) -> None:
    model = make(endpoint)
    model.complete(user("hi"))
    model.close()
    assert endpoint.headers[-1].get("accept-encoding") == "identity"


# --- errors by meaning (the body first), one deadline per call, schemas enforced or refused ---


LLAMA_SERVER_CONTEXT = {
    "error": {
        "code": 400,
        "message": "request (4476 tokens) exceeds the available context size (4096 tokens)",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 4476,
        "n_ctx": 4096,
    }
}
OPENAI_CONTEXT = {
    "error": {
        "message": "This model's maximum context length is 128000 tokens.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
SCHEMA_500 = {
    "error": {
        "message": 'Pattern must start with "^" and end with "$"',
        "type": "internal_server_error",
        "param": None,
        "code": None,
    }
}
QUOTA = {
    "error": {
        "message": "You exceeded your current quota.",
        "type": "insufficient_quota",
        "param": None,
        "code": "insufficient_quota",
    }
}
RESPONSE_FORMAT = {
    "error": {
        "message": "Invalid schema for response_format 'answer': 'pattern' is not permitted.",
        "type": "invalid_request_error",
        "param": "response_format",
        "code": None,
    }
}


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (400, LLAMA_SERVER_CONTEXT, "context_length"),
        (400, OPENAI_CONTEXT, "context_length"),
        (500, SCHEMA_500, "schema_unsupported"),
        (400, RESPONSE_FORMAT, "schema_unsupported"),
        (429, QUOTA, "rate_limit"),
        (501, {"error": {"message": "no", "type": "not_supported_error"}}, "bad_request"),
        (401, {"error": {"message": "key", "type": "authentication_error"}}, "bad_request"),
    ],
)
def test_errors_that_cannot_succeed_on_retry_are_classified_by_meaning_and_not_retried(
    endpoint: FakeEndpoint, status: int, body: dict[str, Any], kind: str
) -> None:
    endpoint.script.extend([(status, body, {})] * 3)
    model = make(endpoint, max_retries=2)
    with pytest.raises(ProviderError) as caught:
        model.complete(user("hi"))
    assert (caught.value.kind, caught.value.status) == (kind, status)
    assert model.last_attempts == 1 and len(endpoint.bodies) == 1


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (503, {"error": {"message": "Loading model", "type": "unavailable_error"}}, "server"),
        (500, {"error": {"message": "boom", "type": "server_error"}}, "server"),
        (429, {"error": {"message": "slow down", "code": "rate_limit_exceeded"}}, "rate_limit"),
        (408, {"error": {"message": "timeout"}}, "timeout"),
        (502, b"<html>bad gateway</html>", "server"),
    ],
)
def test_transient_errors_are_retried(
    endpoint: FakeEndpoint, status: int, body: dict[str, Any] | bytes, kind: str
) -> None:
    endpoint.script.extend([(status, body, {})] * 3)
    model = make(endpoint, max_retries=2)
    with pytest.raises(ProviderError) as caught:
        model.complete(user("hi"))
    assert caught.value.kind == kind
    assert model.last_attempts == 3


@pytest.fixture(params=["silent", "trickle", "trickle_body"])
def slow_server(request: pytest.FixtureRequest) -> Iterator[SlowServer]:
    server = SlowServer(request.param)
    yield server
    server.close()


def test_one_deadline_covers_every_attempt_and_the_whole_body(slow_server: SlowServer) -> None:
    """A server that stays silent, or sends one byte a second (headers, or body), never holds
    a call past its deadline, whatever the per-attempt limit and the retries allow."""
    model = OpenAIModel(
        "slow-model",
        base_url=slow_server.base_url,
        api_key="k",
        timeout_s=1.5,  # the second attempt is cut by the deadline, not by its own limit
        request_timeout_s=2.5,
        max_retries=4,
        backoff_s=0.01,
        cancels_abandoned=True,
    )
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        model.complete(user("hi"))
    waited = time.monotonic() - started
    model.close()
    assert caught.value.kind == "timeout", caught.value
    assert "deadline of 2.5 s" in str(caught.value)
    assert 2.5 <= waited < 4.0, waited  # without the deadline: 20 s or more
    assert slow_server.requests >= 1


def test_the_deadline_is_the_runs_per_call_limit_capped_by_its_remaining_time() -> None:
    server = SlowServer("trickle_body")
    model = OpenAIModel(
        "slow-model", base_url=server.base_url, api_key="k", timeout_s=5, max_retries=0
    )
    try:
        with running_until(Deadline(60.0), call_s=1.0):
            started = time.monotonic()
            with pytest.raises(ProviderError, match="deadline of 1 s"):
                model.complete(user("hi"))
            assert time.monotonic() - started < 3.0
        with running_until(Deadline(1.2)):  # the ceiling is nearer than the model's 600 s
            started = time.monotonic()
            with pytest.raises(ProviderError, match=r"deadline of 1\.\d+ s") as caught:
                model.complete(user("hi"))
            assert caught.value.kind == "timeout" and time.monotonic() - started < 3.0
            sent = server.requests
            with pytest.raises(ProviderError, match="ceiling has passed") as caught:
                model.complete(user("hi"))  # nothing is left: refused at once
            assert caught.value.kind == "timeout" and server.requests == sent
    finally:
        model.close()
        server.close()


def test_retries_stop_before_a_wait_that_would_pass_the_deadline(endpoint: FakeEndpoint) -> None:
    endpoint.script.extend([(503, ERROR_BODY, {"retry-after": "5"})] * 3)
    model = make(endpoint, max_retries=2, max_backoff_s=5.0, request_timeout_s=1.0)
    started = time.monotonic()
    with pytest.raises(ProviderError) as caught:
        model.complete(user("hi"))
    assert caught.value.kind == "server" and model.last_attempts == 1
    assert time.monotonic() - started < 1.0


UNANCHORED = {
    "type": "object",
    "properties": {"id": {"type": "string", "pattern": "[a-z]+"}},
    "required": ["id"],
}
SCHEMA = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}


def test_a_schema_llama_cpp_would_drop_is_refused_before_sending(endpoint: FakeEndpoint) -> None:
    model = make(endpoint, json_format="json_object")
    request = ModelRequest(messages=(Message(role="user", content="x"),), json_schema=UNANCHORED)
    with pytest.raises(ProviderError) as caught:
        model.complete(request)
    assert caught.value.kind == "schema_unsupported"
    assert "properties/id/pattern" in str(caught.value)
    assert endpoint.bodies == [] and model.last_attempts == 0


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ('{"x": 3}', None),
        ('{"x": "three"}', "x: 'three' is not of type 'integer'"),
        ('{"y": 3}', "'x' is a required property"),
        ('{"x": 3', "not JSON"),
        (None, "no text"),
    ],
)
def test_every_answer_to_a_schema_request_is_validated(
    endpoint: FakeEndpoint, content: str | None, error: str | None
) -> None:
    endpoint.script.append((200, completion(content), {}))
    request = ModelRequest(messages=(Message(role="user", content="x"),), json_schema=SCHEMA)
    response = make(endpoint).complete(request)
    if error is None:
        assert response.schema_error is None
    else:
        assert response.schema_error is not None and error in response.schema_error
    assert make(endpoint).complete(user("no schema")).schema_error is None


def test_a_model_nobody_closed_does_not_keep_the_interpreter_alive(
    endpoint: FakeEndpoint,
) -> None:
    script = (
        "from controlscope.core import Message, ModelRequest\n"
        "from controlscope.models import OpenAIModel\n"
        f"model = OpenAIModel('m', base_url={endpoint.base_url!r}, api_key='k')\n"
        "request = ModelRequest(messages=(Message(role='user', content='hi'),))\n"
        "print(model.complete(request).text)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert (done.returncode, done.stdout.strip()) == (0, "hello"), done.stderr


# --- the real OpenAI-compatible server: llama_cpp.server with the 0.5B model -------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _wait_until(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.25)
    return False


SERVER_LOGS: dict[str, Path] = {}
"""The log of each ``llama_cpp.server`` started here, by base URL."""


@pytest.fixture(scope="module")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start ``python -m llama_cpp.server`` on loopback; yield its base URL (its log is in
    :data:`SERVER_LOGS`)."""
    import llama_cpp.server  # noqa: F401  (the server below is this package)

    from controlscope.models._weights import ensure_weights

    weights = ensure_weights("0.5b")
    port = _free_port()
    log = tmp_path_factory.mktemp("llama_server") / "server.log"
    threads = str(min(2, os.cpu_count() or 1))
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                sys.executable, "-m", "llama_cpp.server",
                "--model", str(weights),
                "--host", "127.0.0.1", "--port", str(port),
                "--n_ctx", "2048", "--n_threads", threads,
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )  # fmt: skip

    def up() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited: {Path(log).read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1):
                return True
        except OSError:
            return False

    try:
        assert _wait_until(up, 120), "llama_cpp.server did not come up within 120 s"
        SERVER_LOGS[f"http://127.0.0.1:{port}/v1"] = log
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture(scope="module")
def served(llama_server: str) -> OpenAIModel:
    return OpenAIModel(
        "qwen-0.5b", base_url=llama_server, timeout_s=120, max_retries=1, json_format="json_object"
    )


@pytest.mark.slow
@pytest.mark.needs_weights
def test_real_server_text_answer(served: OpenAIModel) -> None:
    request = ModelRequest(
        messages=(Message(role="user", content="Reply with the single word: yes"),),
        temperature=0.0,
        max_tokens=8,
        seed=1,
    )
    response = served.complete(request)
    assert response.text and response.text.strip()
    # streamed: llama_cpp.server sends no usage in a stream; the pieces are counted
    assert response.usage.input_tokens == 0
    assert 0 < response.usage.output_tokens <= 8
    assert response.finish_reason in ("stop", "length")
    whole = served.complete(request.model_copy(update={"provider_options": {"stream": False}}))
    assert whole.text == response.text
    assert whole.usage.input_tokens > 5 and 0 < whole.usage.output_tokens <= 8


@pytest.mark.slow
@pytest.mark.needs_weights
def test_real_server_named_tool_call(served: OpenAIModel) -> None:
    schema = {
        "type": "object",
        "properties": {"path": {"type": "string"}},
        "required": ["path"],
    }
    request = ModelRequest(
        messages=(Message(role="user", content="Read the file notes.txt"),),
        tools=(ToolSpec(name="read_text_file", description="Read a file", parameters=schema),),
        tool_choice="read_text_file",
        temperature=0.0,
        max_tokens=24,
    )
    response = served.complete(request)
    assert len(response.tool_calls) == 1
    call = response.tool_calls[0]
    assert call.name == "read_text_file"
    assert call.parsed is not None, call.error
    jsonschema.validate(call.parsed, schema)


@pytest.mark.slow
@pytest.mark.needs_weights
def test_real_server_json_schema_answer(served: OpenAIModel) -> None:
    schema = {
        "type": "object",
        "properties": {
            "decision": {"type": "string", "enum": ["keep", "patch_arguments", "replace_workflow"]},
            "risky": {"type": "boolean"},
        },
        "required": ["decision", "risky"],
    }
    request = ModelRequest(
        messages=(
            Message(role="system", content="You review programs. Answer in JSON."),
            Message(role="user", content="The pending call reads notes.txt. Decide."),
        ),
        json_schema=schema,
        temperature=0.0,
        max_tokens=24,
    )
    response = served.complete(request)
    assert response.text is not None
    jsonschema.validate(json.loads(response.text), schema)


@pytest.mark.slow
@pytest.mark.needs_weights
def test_real_server_rejects_openai_json_schema_format(llama_server: str) -> None:
    """llama_cpp.server fails on OpenAI's ``json_schema`` format (why ``json_format`` exists):
    a 500 whose body says so, which no retry can cure."""
    model = OpenAIModel("qwen-0.5b", base_url=llama_server, max_retries=2, backoff_s=0.01)
    request = ModelRequest(
        messages=(Message(role="user", content="x"),), json_schema={"type": "object"}
    )
    with pytest.raises(ProviderError) as caught:
        model.complete(request)
    assert caught.value.kind == "schema_unsupported", caught.value
    assert caught.value.status == 500
    assert model.last_attempts == 1
    model.close()


@pytest.mark.slow
@pytest.mark.needs_weights
def test_real_server_errors_mean_what_the_local_models_do(llama_server: str) -> None:
    """A prompt over the context is ``context_length`` (the body says
    ``context_length_exceeded``), as on the local path, and is not retried; a schema the
    server's grammar would drop is refused before sending."""
    model = OpenAIModel(
        "qwen-0.5b",
        base_url=llama_server,
        max_retries=2,
        backoff_s=0.01,
        json_format="json_object",
    )
    too_long = ModelRequest(messages=(Message(role="user", content="word " * 3000),), max_tokens=8)
    with pytest.raises(ProviderError) as caught:
        model.complete(too_long)
    # The stream ends empty (a stream cannot say why); sent again whole, the error answer does.
    # The server closes the connection it failed on late: the whole request may find it
    # closed and go again on a fresh one (a third attempt).
    assert (caught.value.kind, caught.value.status) == ("context_length", 400)
    assert model.last_attempts in (2, 3)
    unanchored = ModelRequest(
        messages=(Message(role="user", content="x"),), json_schema=UNANCHORED, max_tokens=8
    )
    with pytest.raises(ProviderError) as caught:
        model.complete(unanchored)
    assert caught.value.kind == "schema_unsupported" and model.last_attempts == 0
    model.close()


@pytest.mark.slow
@pytest.mark.needs_weights
def test_real_server_schema_answers_are_validated(served: OpenAIModel) -> None:
    from controlscope.core import OperationSet
    from controlscope.review import decision_schema

    schema = decision_schema(OperationSet.of("full"))
    request = ModelRequest(
        messages=(Message(role="user", content="The pending call reads notes.txt. Decide."),),
        json_schema=schema,
        temperature=0.0,
        max_tokens=64,
    )
    answer = served.complete(request)
    assert answer.finish_reason == "stop" and answer.schema_error is None, answer
    cut = served.complete(request.model_copy(update={"max_tokens": 3}))
    assert cut.schema_error == "the answer breaks its schema: cut off by the token cap"


@pytest.mark.slow
@pytest.mark.needs_weights
def test_real_server_stops_computing_a_streamed_answer_cut_by_its_deadline(
    llama_server: str,
) -> None:
    """The deadline closes the connection of a streamed answer; the server sees its client go
    at its next token and stops (it says so in its log), instead of computing 1,500 tokens
    nobody reads."""
    model = OpenAIModel("qwen-0.5b", base_url=llama_server, request_timeout_s=2.0)
    count = "Count from 1 to 2000, one number per line, nothing else."
    request = ModelRequest(
        messages=(Message(role="user", content=count),),
        temperature=0.0,
        max_tokens=1500,
    )
    try:
        with pytest.raises(ProviderError) as caught:
            model.complete(request)
    finally:
        model.close()
    assert caught.value.kind == "timeout" and model.last_attempts == 1
    assert "token(s) of a streamed answer received" in str(caught.value)
    log = SERVER_LOGS[llama_server]
    assert _wait_until(lambda: "Disconnected from client" in log.read_text(), 60), log.read_text()[
        -2000:
    ]
