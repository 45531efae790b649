"""Every run ends recorded and within its budgets: faults of parts, hostile blocks, bad input.

Runs use the real parts: the isolated worker, the npm filesystem server, a tiny stdio MCP server
that misbehaves on purpose (``fixtures/misbehaving_mcp_server.py``), loopback endpoints, and the
``controlscope`` command in a subprocess. Each run must end with ``run_end``, a verdict where one
is due and ``summary.json``, within its budget plus a wide margin (a bound that proves nothing
hangs, not a speed measurement).
"""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import controlscope as cs
from controlscope._proc import alive, gone
from controlscope._tree import MAX_WALK_DEPTH, remove_tree
from controlscope.core import (
    Condition,
    ModelResponse,
    PrimitiveCallEvent,
    RunStartEvent,
    TaskBudgets,
    ToolCall,
    ToolServer,
)
from controlscope.envs._mcp import McpToolServer
from controlscope.envs.filesystem.environment import FilesystemEnvironment
from controlscope.envs.filesystem.workspace import Workspace, content_hash
from controlscope.models import ScriptedModel
from controlscope.record import read_events, read_summary
from controlscope.worker import WorkerSession
from fixtures.misbehaving import Misbehaving, Mute, misbehaving_server
from fixtures.slow_server import SlowServer
from test_hardening import Keeper, NoopServer
from test_run_cli import _Refusing, controlscope

TASK = "file_context/file_splitting"


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def run(
    tmp_path: Path,
    *answers: str,
    env: FilesystemEnvironment | None = None,
    budgets: TaskBudgets | None = None,
    reviewer: Any = None,
    schedule: str = "never",
) -> cs.RunResult:
    """One recorded run of :data:`TASK` whose planner answers ``answers``."""
    environment = env or FilesystemEnvironment()
    condition = Condition(
        schedule=schedule, planner_format="fenced", budgets=budgets or TaskBudgets()
    )
    result = cs.run_trajectory(
        environment,
        environment.task(TASK),
        seed=0,
        planner=ScriptedModel(list(answers)),
        reviewer=reviewer,
        condition=condition,
        out_dir=tmp_path / "run",
        workspace_root=tmp_path / "ws",
    )
    assert_recorded(tmp_path / "run")
    assert list((tmp_path / "ws").iterdir()) == []  # the workspace is gone
    return result


def assert_recorded(run_dir: Path) -> None:
    """The log starts with run_start, ends with run_end and reads back; summary.json agrees."""
    events = read_events(run_dir)
    assert events[0].type == "run_start" and events[-1].type == "run_end", [e.type for e in events]
    summary = read_summary(run_dir)
    assert summary.complete and summary.end_reason == events[-1].end_reason  # type: ignore[union-attr]
    cli = subprocess.run(
        [sys.executable, "-m", "controlscope.record", str(run_dir)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert cli.returncode == 0, cli.stderr


# --------------------------------------------------------------------- MCP servers (faults 1, 10)


def test_answers_the_client_refuses_are_tool_errors_and_the_run_goes_on(tmp_path: Path) -> None:
    block = (
        "for tool in (bad_schema, deep):\n"
        "    try:\n"
        "        tool()\n"
        "    except ToolError as exc:\n"
        "        print('tool error:', str(exc)[:60])\n"
        "print(echo(text='still here'))\n"
    )
    result = run(tmp_path, fenced(block), "Done.", env=Misbehaving())
    assert result.end_reason == "final_answer", result.detail
    events = read_events(tmp_path / "run")
    calls = [e.call for e in events if isinstance(e, PrimitiveCallEvent)]
    assert [(c.tool, c.result.is_error) for c in calls] == [
        ("bad_schema", True),
        ("deep", True),
        ("echo", False),
    ]
    assert "is invalid" in calls[0].result.text and "cannot be read" in calls[1].result.text
    start = events[0]
    assert isinstance(start, RunStartEvent)
    assert start.server == {"name": "misbehaving", "version": "0.0.1"}


def test_bytes_that_are_not_utf8_end_the_session_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run(tmp_path, fenced("bad_utf8()"), "Done.", env=Misbehaving(60.0))
    assert time.monotonic() - started < 30  # not the call's 60 s timeout
    assert result.end_reason == "environment_error"
    assert "not UTF-8" in result.detail


def test_a_dead_session_fails_every_later_call_at_once() -> None:
    server = misbehaving_server(timeout_s=30)
    try:
        with pytest.raises(cs.core.ToolServerError, match="not a JSON-RPC message"):
            server.call("bad_json", {})
        started = time.monotonic()
        for _ in range(3):
            with pytest.raises(cs.core.ToolServerError, match="session ended"):
                server.call("echo", {"text": "x"})
        assert time.monotonic() - started < 5
    finally:
        server.close()


def test_closing_a_server_kills_its_whole_process_group() -> None:
    server = misbehaving_server()
    try:
        grandchild = int(server.call("spawn", {}).text)  # it ignores SIGTERM
        assert alive(grandchild)
    finally:
        server.close()
    assert gone(grandchild)


def test_a_server_that_exits_first_still_loses_its_grandchildren() -> None:
    server = misbehaving_server(timeout_s=10)
    try:
        grandchild = int(server.call("spawn", {}).text)  # it keeps the server's stdout open
        started = time.monotonic()
        with pytest.raises(cs.core.ToolServerError, match="exited"):
            server.call("die", {})
        assert time.monotonic() - started < 5  # not the call's 10 s timeout
    finally:
        server.close()
    assert gone(grandchild)


def test_a_server_that_does_not_start_is_a_recorded_environment_error(tmp_path: Path) -> None:
    class Broken(FilesystemEnvironment):
        def start_server(self, workspace: Path) -> ToolServer:  # type: ignore[override]
            return McpToolServer.stdio(sys.executable, ["-c", "pass"], timeout_s=10)

    result = run(tmp_path, "Done.", env=Broken())
    assert result.end_reason == "environment_error" and "did not start" in result.detail


# --------------------------------------------------------------------- deadlines (fault 5)


def test_a_spinning_tool_call_ends_with_the_execution_budget(tmp_path: Path) -> None:
    started = time.monotonic()
    result = run(
        tmp_path,
        fenced("spin(seconds=3600)"),
        "Done.",
        env=Misbehaving(timeout_s=600),
        budgets=TaskBudgets(execution_seconds=3),
    )
    assert time.monotonic() - started < 3 + 20
    assert result.end_reason == "budget:execution_seconds"
    events = read_events(tmp_path / "run")
    [call] = [e.call for e in events if isinstance(e, PrimitiveCallEvent)]
    assert call.result.is_error and "no answer" in call.result.text
    [end] = [e for e in events if e.type == "block_end"]
    assert end.result.status == "timeout"  # type: ignore[union-attr]


class SilentReviewer:
    """A reviewer that never answers (until the test releases it)."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def propose(self, state: cs.PublicState, condition: cs.Condition) -> cs.Proposal:
        self.release.wait(600)
        return cs.Proposal(operation=cs.core.Keep())


def test_a_silent_reviewer_cannot_outlive_the_wall_clock_ceiling(tmp_path: Path) -> None:
    reviewer = SilentReviewer()
    started = time.monotonic()
    try:
        result = run(
            tmp_path,
            fenced("list_directory(path='/workspace')"),
            "Done.",
            budgets=TaskBudgets(wall_seconds=4),
            reviewer=reviewer,
            schedule="every_boundary",  # the first call is reviewed
        )
    finally:
        reviewer.release.set()
    assert time.monotonic() - started < 4 + 10
    assert result.end_reason == "budget:wall_seconds"
    assert read_summary(tmp_path / "run").budgets_hit == ["wall_seconds"]


@pytest.fixture
def mute() -> Iterator[Mute]:
    endpoint = Mute()
    try:
        yield endpoint
    finally:
        endpoint.close()


def test_an_endpoint_that_never_answers_cannot_outlive_the_ceiling(
    tmp_path: Path, mute: Mute
) -> None:
    started = time.monotonic()
    cli = controlscope(
        "run", "--task", TASK, "--model", "openai:nothing", "--base-url", mute.url,
        "--max-wall-seconds", "5", "--quiet", "--out", str(tmp_path / "r"),
    )  # fmt: skip
    assert time.monotonic() - started < 5 + 25, cli.stderr
    assert cli.returncode == 0, cli.stderr
    summary = read_summary(tmp_path / "r")
    assert summary.end_reason == "budget:wall_seconds" and summary.complete
    events = read_events(tmp_path / "r")
    assert events[0].budgets.wall_seconds == 5  # type: ignore[union-attr]
    [call] = [e for e in events if e.type == "model_call"]
    assert call.error_kind == "timeout"  # type: ignore[union-attr]


# --------------------------------------------------------------------- agent-made size (fault 6)


def test_a_huge_exception_message_is_bounded_in_receipts_and_log(tmp_path: Path) -> None:
    planner_answers = [fenced("raise ValueError('x' * 30_000_000)"), "Done."]
    planner = ScriptedModel(planner_answers)
    env = FilesystemEnvironment()
    cs.run_trajectory(
        env,
        env.task(TASK),
        seed=0,
        planner=planner,
        reviewer=None,
        condition=Condition(schedule="never", planner_format="fenced"),
        out_dir=tmp_path / "run",
        workspace_root=tmp_path / "ws",
    )
    assert_recorded(tmp_path / "run")
    second = planner.requests[1]
    assert sum(len(m.content or "") for m in second.messages) < 200_000
    assert "chars cut" in (second.messages[-1].content or "")
    assert (tmp_path / "run" / "events.jsonl").stat().st_size < 2_000_000


OVERSIZED = "write_file(path='/workspace/big.txt', content='x' * 30_000_000)"
TOO_DEEP = (
    "deep = 'leaf'\nfor _ in range(300):\n    deep = [deep]\n"
    "write_file(path='/workspace/d', content=deep)"
)


@pytest.mark.parametrize(
    ("call", "why"),
    [(OVERSIZED, "accepts at most"), (TOO_DEEP, "nested deeper than")],
    ids=["30MB", "300-deep"],
)
def test_calls_the_environment_cannot_take_are_tool_errors(
    tmp_path: Path, call: str, why: str
) -> None:
    block = (
        f"try:\n{textwrap.indent(call, '    ')}\n"
        "except ToolError as exc:\n"
        "    print('refused:', exc)\n"
        "print(write_file(path='/workspace/small.txt', content='ok'))\n"
    )
    result = run(tmp_path, fenced(block), "Done.")
    assert result.end_reason == "final_answer", result.detail  # not environment_error
    events = read_events(tmp_path / "run")
    start = events[0]
    assert isinstance(start, RunStartEvent) and start.server["name"] == "secure-filesystem-server"
    assert start.server["version"]  # the release is recorded
    paths = [e.call.arguments["path"] for e in events if isinstance(e, PrimitiveCallEvent)]
    assert paths == ["/workspace/small.txt"]  # the refused call never reached the server
    [end] = [e for e in events if e.type == "block_end"]
    output = end.result.output  # type: ignore[union-attr]
    assert "refused:" in output and why in output, output


def test_an_event_the_log_cannot_hold_ends_the_run_recorded(tmp_path: Path) -> None:
    deep: Any = "x"
    for _ in range(300):
        deep = [deep]
    args = {"code": "print(1)", "extra": deep}
    call = ToolCall(id="c1", name="execute_python", arguments=json.dumps(args), parsed=args)
    answer = ModelResponse(tool_calls=(call,), finish_reason="tool_calls")
    result = run(tmp_path, answer)  # type: ignore[arg-type]
    assert result.end_reason == "error" and "cannot be recorded" in result.detail
    assert result.verdict.checks  # graded as it stands


# --------------------------------------------------------------------- agent-made trees (fault 7)


def test_a_directory_chain_1900_deep_is_graded_and_removed(tmp_path: Path) -> None:
    chain = "/".join(["d"] * 1900)
    block = f"print(create_directory(path='/workspace/{chain}')[:40])"
    result = run(tmp_path, fenced(block), "Done.")
    assert result.end_reason == "final_answer", result.detail
    assert result.verdict.checks  # graded as it stands


# --------------------------------------------------------------------- CLI input (faults 2, 9)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("--max-calls", "0"),
        ("--max-turns", "-1"),
        ("--max-tokens", "0"),
        ("--temperature", "-0.5"),
        ("--temperature", "nan"),
        ("--draw", "-1"),
        ("--seed", "-1"),
        ("--seed", str(2**64)),
        ("--worker-memory-mb", "64"),
        ("--max-seconds", "inf"),
        ("--max-wall-seconds", "0"),
        ("--max-wall-seconds", "nan"),
        ("--request-timeout-s", "0"),
        ("--request-timeout-s", "inf"),
        ("--out", ""),
        ("--task", "[/bold]x"),
        ("--schedule", "[/bold]"),
    ],
)
def test_bad_options_are_one_line_and_exit_2(
    option: str, value: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from controlscope.cli import main

    out = tmp_path / "r"
    args = {"--task": TASK, "--out": str(out), "--model": "scripted:none"}
    args[option] = value
    code = main(["run", *(part for pair in args.items() for part in pair)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    assert not (out / "events.jsonl").exists()
    if "[/bold]" in value:
        assert "[/bold]" in err  # printed as text, not read as markup


def test_the_runs_per_call_deadline_ends_a_trickling_planner_call(tmp_path: Path) -> None:
    """``--request-timeout-s`` (here through the spec) bounds one model call, all of it: an
    endpoint that sends its answer one byte a second ends the run, recorded, in about that."""
    server = SlowServer("trickle_body")
    spec = cs.RunSpec(
        task=TASK,
        model="openai:slow",
        base_url=server.base_url,
        schedule="never",
        request_timeout_s=2.0,
        out=tmp_path / "r",
    )
    try:
        started = time.monotonic()
        result = cs.run_task(spec)
        waited = time.monotonic() - started
    finally:
        server.close()
    assert result.end_reason == "planner_provider_error", result.detail
    assert "deadline of 2 s" in result.detail
    assert waited < 30  # the answer alone would take a few hundred seconds
    events = read_events(tmp_path / "r")
    start = events[0]
    assert isinstance(start, RunStartEvent) and start.config["request_timeout_s"] == 2.0
    assert_recorded(tmp_path / "r")


def test_an_endpoint_error_body_with_markup_is_printed_as_text(tmp_path: Path) -> None:
    class Marked(_Refusing):
        body = json.dumps({"error": {"message": "[/bold] [red]boom[/red]"}}).encode()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Marked)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        cli = controlscope(
            "run", "--task", TASK, "--model", "openai:m", "--base-url", url, "--out",
            str(tmp_path / "r"),
        )  # fmt: skip
    finally:
        server.shutdown()
        server.server_close()
    assert cli.returncode == 3, cli.stderr
    assert "[/bold] [red]boom[/red]" in cli.stderr and "Traceback" not in cli.stderr


# --------------------------------------------------------------------- worker frames (fault 1)


FORGE = (
    "rt = noop.__globals__['_cs_call'].__self__\n"
    "frame = FRAME\n"
    "rt.write(len(frame).to_bytes(4, 'big') + frame)\n"
    "rt.recv()\n"
)


@pytest.mark.parametrize(
    ("frame", "reason"),
    [
        (b'{"t":"call","tool":["noop"],"args":{},"line":1}', "unknown tool"),
        (b'{"t":"call","tool":"noop","args":{"p":"\\ud800"},"line":1}', "lone surrogate"),
        (b'{"t":"call","tool":"noop","args":{"x":1e999},"line":1}', "not a finite number"),
        (b'{"t":"end","status":"completed","out":"\\udfff","dropped":0}', "lone surrogate"),
    ],
    ids=["tool-list", "surrogate", "huge-number", "surrogate-output"],
)
def test_malformed_frames_kill_only_the_worker(frame: bytes, reason: str) -> None:
    with WorkerSession(NoopServer(), isolation="bwrap") as session:
        forged, after = session.run_reply(
            [("b1", FORGE.replace("FRAME", repr(frame))), ("b2", "print(noop())")], Keeper()
        )
    assert forged.status == "killed" and reason in (forged.error or ""), forged.error
    assert after.status == "completed" and after.output == "ok\n" and after.fresh_worker


# --------------------------------------------------------------------- trees (fault 7)


def _chain(root: Path, depth: int) -> None:
    """A chain of directories ``depth`` deep (deeper than PATH_MAX allows to name at once)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir("d" * 20, dir_fd=fd)
            child = os.open("d" * 20, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = child
        with open(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, dir_fd=fd), "w") as f:
            f.write("deep")
        os.fchmod(fd, 0)  # and one that does not let itself be listed
    finally:
        os.close(fd)


def test_trees_deeper_than_path_max_are_hashed_and_removed(tmp_path: Path) -> None:
    ws = Workspace(tmp_path)
    _chain(ws.path, 3000)  # 63,000 characters of path
    first = content_hash(ws.path)
    assert content_hash(ws.path) == first
    (ws.path / "other").mkdir()
    assert content_hash(ws.path) != first
    ws.remove()
    assert list(tmp_path.iterdir()) == []
    assert MAX_WALK_DEPTH < 3000
    remove_tree(tmp_path / "missing")  # nothing to remove is fine
