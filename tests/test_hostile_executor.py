"""What a careless user or an adversary does to the reviewed executor's neighbours, on real
parts: a person reviewing at a terminal whose input has ended, the review page handed a
decision nested too deeply to parse or a body far over its bound, ``controlscope serve`` over
HTTP on an address it cannot listen on, and a served endpoint's rate limit whose
``Retry-After`` is not a number of seconds. Each is refused or recorded at once, never a hang,
a traceback or a body read whole."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import controlscope as cs
from controlscope._proc import alive, descendants
from controlscope.core import RealizedOperationEvent
from controlscope.models import EndpointGate, install_gate
from controlscope.review import ReviewDesk
from controlscope.view import ViewServer
from controlscope.view._review import MAX_DECISION_BYTES
from test_openai_client import ERROR_BODY, FakeEndpoint, completion, make, user

TASK = "file_context/file_splitting"
BLOCK = "```python\nprint(list_directory(path='/workspace'))\n```"
ENV = {**os.environ, "PYTHONPATH": str(Path(cs.__file__).parents[1]), "COLUMNS": "200"}


def controlscope(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The command line with no input (standard input at its end), bounded."""
    return subprocess.run(
        [sys.executable, "-m", "controlscope.cli", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
        check=False,
    )


def test_a_terminal_reviewer_whose_input_ended_keeps_the_call_as_a_recorded_timeout(
    tmp_path: Path,
) -> None:
    """``--reviewer human:terminal < /dev/null``: nobody can answer, so each reviewed boundary
    is a ``timeout`` fallback (Keep) at once and the run ends (it waited forever)."""
    (tmp_path / "script.json").write_text(json.dumps([BLOCK, "Done."]))
    out = tmp_path / "run"
    done = controlscope(
        tmp_path,
        *("run", "--task", TASK, "--model", "scripted:script.json", "--planner-format"),
        *("fenced", "--reviewer", "human:terminal", "--schedule", "every_boundary"),
        *("--out", str(out)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr + done.stdout
    realized = [e for e in cs.read_events(out) if isinstance(e, RealizedOperationEvent)]
    assert [(e.operation.kind, e.fallback) for e in realized] == [("keep", "timeout")]
    assert cs.read_events(out)[-1].type == "run_end"


def _post_raw(url: str, head: str, body: bytes) -> str:
    """POST ``body`` to the review page's decide route with the extra ``head`` lines, over a
    raw socket (the body may be only the start of what the head declares); the answer's
    first bytes (a socket timeout when none comes within 30 s)."""
    host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        request = f"POST /_review/decide HTTP/1.1\r\nHost: {host}\r\nX-Review-Key: k\r\n{head}\r\n"
        sock.sendall(request.encode() + body)
        answer = b""
        while b"\r\n\r\n" not in answer or not answer.endswith(b"}"):  # its JSON body
            got = sock.recv(65536)
            if not got:
                break
            answer += got
        return answer.decode("utf-8", "replace")


def test_the_review_page_refuses_a_deep_decision_and_reads_no_body_past_its_bound(
    tmp_path: Path,
) -> None:
    """A decision nested too deeply to parse is malformed (400), not a server error (500) with
    a traceback in the run's output; a body declared or streamed past the bound is refused at
    once, before the rest arrives (it was read whole into memory first)."""
    desk = ReviewDesk(secret="k")
    with ViewServer(tmp_path, desk=desk) as server:
        deep = "[" * 100_000
        answer = _post_raw(server.url, f"Content-Length: {len(deep)}\r\n", deep.encode())
        assert answer.startswith("HTTP/1.1 400") and "nested too deeply" in answer, answer
        declared = "Content-Length: 1000000000\r\n"
        answer = _post_raw(server.url, declared, b'{"ticket": "')
        assert answer.startswith("HTTP/1.1 400") and "at most 1,000,000 bytes" in answer, answer
        chunk = b"x" * (MAX_DECISION_BYTES + 1)
        streamed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"  # no last chunk: it goes on
        answer = _post_raw(server.url, "Transfer-Encoding: chunked\r\n", streamed)
        assert answer.startswith("HTTP/1.1 400") and "at most 1,000,000 bytes" in answer, answer


def test_serve_over_http_on_an_address_it_cannot_listen_on_is_one_line_and_exit_2(
    tmp_path: Path,
) -> None:
    """A port already taken, a host that is no address, a blank host (every interface): exit
    2 with one line, before a session starts (it ran a session, then failed with exit 3 and a
    dozen lines of the web server's log)."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        cases = [("127.0.0.1", port, "Address already in use"), ("256.1.1.1", "0", "256.1.1.1")]
        cases.append(("", "0", "every interface"))
        for host, at, words in cases:
            out = tmp_path / f"session-{len(host)}"
            args = ("serve", "--transport", "http", "--host", host, "--port", at)
            done = controlscope(tmp_path, *args, "--out", str(out), timeout=60)
            lines = done.stderr.strip().splitlines()
            assert done.returncode == 2 and len(lines) == 1, done.stderr[-3000:]
            assert lines[0].startswith("controlscope serve: ") and words in lines[0], lines[0]
            assert not out.exists()  # no session was started


@pytest.fixture
def endpoint() -> Iterator[FakeEndpoint]:
    fake = FakeEndpoint()
    yield fake
    fake.close()


@pytest.mark.parametrize("header", ["retry-after", "retry-after-ms"])
def test_a_rate_limit_whose_retry_after_is_nan_is_retried_not_waited_on_forever(
    endpoint: FakeEndpoint, header: str
) -> None:
    """A 429 with ``Retry-After: nan`` (a served endpoint's garbage) is retried after the
    usual backoff, with the panel's gate installed; it waited ``nan`` seconds, so the call
    hung until its deadline and failed."""
    endpoint.script.append((429, ERROR_BODY, {header: "nan"}))
    endpoint.script.append((200, completion("ok"), {}))
    install_gate(EndpointGate(2))
    try:
        model = make(endpoint, request_timeout_s=20.0)
        assert model.complete(user("hi")).text == "ok"
    finally:
        install_gate(None)
    assert model.total_attempts == 2


def test_a_block_over_the_code_bound_is_refused_and_the_session_goes_on(tmp_path: Path) -> None:
    """A 20-million-character block (an MCP client's garbage) is refused with one line before
    it reaches the session; it could not be recorded, so it ended the session (error) and
    every later block was refused."""
    keep = cs.RunSettings(scope="keep", schedule="never")
    with cs.Executor(settings=keep, out=tmp_path / "session") as executor:
        with pytest.raises(ValueError, match=r"at most 1,000,000 characters, not 20,000,000"):
            executor.execute("x = 1\n" * 3_333_333 + "\n\n")
        run = executor.execute("print(6 * 7)")
    assert run.ok and run.output == "42\n" and run.session_end is None


def test_serve_ends_when_its_client_disconnects_during_a_block_that_never_returns(
    tmp_path: Path,
) -> None:
    """``controlscope serve`` over stdio: the client sends a block that loops forever and
    closes its end; the server stops the block (within the close grace), records the
    session's end and exits 0, leaving no process (it waited on the block for the session's
    whole execution budget)."""
    out = tmp_path / "session"
    command = [sys.executable, "-m", "controlscope.cli", "serve", "--scope", "keep"]
    serve = subprocess.Popen(
        [*command, "--out", str(out)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=ENV,
    )
    assert serve.stdin is not None and serve.stdout is not None
    hello = {"protocolVersion": "2025-03-26", "capabilities": {}}
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
            "name": "execute_python", "arguments": {"code": "while True:\n    pass\n"}}},
    ]  # fmt: skip
    hello["clientInfo"] = {"name": "hostile", "version": "1"}
    try:
        for message in messages:
            serve.stdin.write(json.dumps(message).encode() + b"\n")
            serve.stdin.flush()
        assert b'"id":1' in serve.stdout.readline()  # initialized: the session runs
        deadline = time.monotonic() + 60
        while not _logged(out, "block_start") and time.monotonic() < deadline:
            time.sleep(0.1)
        below = descendants(serve.pid)
        serve.stdin.close()
        assert serve.wait(timeout=150) == 0
    finally:
        serve.kill()
        serve.wait()
    events = cs.read_events(out)
    assert events[-1].type == "run_end"
    assert [e.result.status for e in events if e.type == "block_end"] == ["killed"]
    assert below and not [pid for pid in below if alive(pid)]


def _logged(run_dir: Path, kind: str) -> bool:
    log = run_dir / "events.jsonl"
    return log.exists() and f'"type":"{kind}"' in log.read_text().replace(" ", "")


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ({"timeout_s": 0}, "timeout_s is a number of seconds above 0, not 0"),
        ({"timeout_s": -1.0}, "not -1.0"),
        ({"timeout_s": float("nan")}, "not nan"),
        ({"out": ""}, "out is empty"),
        ({"out": "/proc/self/no/such"}, "cannot write the run directory /proc/self/no/such"),
    ],
)
def test_an_executor_given_a_bad_time_limit_or_run_directory_is_one_executor_error(
    given: dict[str, object], words: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A time limit that is not above 0 (every tool call failed at once, or was never waited
    on), an empty ``out`` (the session was written into the working directory) or one that
    cannot be written (a bare ``FileNotFoundError``) is refused with one line."""
    monkeypatch.chdir(tmp_path)  # where an empty ``out`` wrote the session
    keep = cs.RunSettings(scope="keep", schedule="never")
    with pytest.raises(cs.ExecutorError) as refused:
        cs.Executor(settings=keep, **given)  # type: ignore[arg-type]
    assert words in str(refused.value) and "\n" not in str(refused.value)


def test_arguments_typed_at_the_terminal_nested_too_deeply_are_refused_and_asked_again(
    tmp_path: Path,
) -> None:
    """At ``--reviewer human:terminal`` the person types a patch nested too deeply to parse:
    it is "not JSON" and the choice is asked again (the person then keeps the call); it ended
    the run as an error (exit 4) with a traceback."""
    (tmp_path / "script.json").write_text(json.dumps([BLOCK, "Done."]))
    typed = tmp_path / "typed.txt"
    typed.write_text("2\n" + "[" * 100_000 + "\n1\n")  # patch_arguments, the JSON, then keep
    out = tmp_path / "run"
    args = ["run", "--task", TASK, "--model", "scripted:script.json", "--planner-format"]
    args += ["fenced", "--reviewer", "human:terminal", "--scope", "arg", "--out", str(out)]
    args += ["--schedule", "every_boundary"]
    with typed.open() as stdin:
        done = subprocess.run(
            [sys.executable, "-m", "controlscope.cli", *args],
            cwd=tmp_path,
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            env=ENV,
            check=False,
        )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "not JSON: nested too deeply to parse" in done.stdout
    realized = [e for e in cs.read_events(out) if isinstance(e, RealizedOperationEvent)]
    assert [(e.operation.kind, e.fallback) for e in realized] == [("keep", None)]


def test_a_replacement_saved_not_as_utf8_by_the_terminals_editor_is_no_code_and_asked_again(
    tmp_path: Path,
) -> None:
    """At ``--reviewer human:terminal`` the person's ``$EDITOR`` saves the replacement in
    Latin-1: "no code", the choice is asked again (the person keeps the call); it ended the
    run as an error (exit 4) with a traceback."""
    (tmp_path / "script.json").write_text(json.dumps([BLOCK, "Done."]))
    editor = tmp_path / "latin1_editor.py"
    editor.write_text("import sys\nopen(sys.argv[1], 'wb').write(b\"print('caf\\xe9')\\n\")\n")
    typed = tmp_path / "typed.txt"
    typed.write_text("3\n1\n")  # replace_workflow (in the editor), then keep
    out = tmp_path / "run"
    args = ["run", "--task", TASK, "--model", "scripted:script.json", "--planner-format"]
    args += ["fenced", "--reviewer", "human:terminal", "--schedule", "every_boundary"]
    env = {**ENV, "EDITOR": f"{sys.executable} {editor}"}
    env.pop("VISUAL", None)
    with typed.open() as stdin:
        done = subprocess.run(
            [sys.executable, "-m", "controlscope.cli", *args, "--out", str(out)],
            cwd=tmp_path,
            stdin=stdin,
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "no code: the editor failed, or left no UTF-8 text" in done.stdout
    realized = [e for e in cs.read_events(out) if isinstance(e, RealizedOperationEvent)]
    assert [(e.operation.kind, e.fallback) for e in realized] == [("keep", None)]


SERVER = """
import sys
from mcp.server.mcpserver import MCPServer

server = MCPServer(name="hyphens")


def tool(name):
    def call(x: str = "") -> str:
        return f"{name} ran with {x}"
    return call


for name in sys.argv[1:]:
    server.add_tool(tool(name), name=name, description=f"the tool {name}")
server.run("stdio")
"""


def delete_file(x: str = "") -> str:
    """A Python tool whose name is the Python function of the server's ``delete-file``."""
    return f"python ran with {x}"


def test_tool_names_that_are_one_python_function_are_namespaced_or_refused_in_one_line(
    tmp_path: Path,
) -> None:
    """An upstream ``delete-file`` and a Python ``delete_file`` are both ``delete_file()`` in
    agent code: namespaced as a clash of names is (the session failed to start, its error a
    traceback's first line); two such names of one server are refused in one line."""
    script = tmp_path / "hyphens.py"
    script.write_text(SERVER)
    keep = cs.RunSettings(scope="keep", schedule="never")
    server = [sys.executable, str(script), "delete-file"]
    with cs.Executor(servers={"c": server}, tools=[delete_file], settings=keep,
                     out=tmp_path / "namespaced") as executor:  # fmt: skip
        assert [t.name for t in executor.tools] == ["c__delete-file", "python__delete_file"]
        run = executor.execute("print(c__delete_file(x='1'))\nprint(python__delete_file(x='2'))")
    assert run.output == "delete-file ran with 1\npython ran with 2\n", run.error
    both = {"c": [*server, "delete_file"]}
    with pytest.raises(cs.ExecutorError) as refused:
        cs.Executor(servers=both, settings=keep, out=tmp_path / "refused")
    assert str(refused.value) == (
        "tools 'delete-file' and 'delete_file' of 'c' would be one Python function delete_file()"
    )
