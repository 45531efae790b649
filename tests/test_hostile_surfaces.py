"""The newest surfaces, attacked as a careless or malicious user, a hostile agent program, a
dying process or a bad endpoint would: frozen source programs, panels that take runs from
another panel, the destructive schedule and tool annotations, the agent-framework adapters, a
panel's endpoint record and the pages that show them. Each test failed before its fix; on
real parts (the npm filesystem server, the worker, pool processes, subprocesses) with
scripted models."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import controlscope as cs
from controlscope import panel as cp
from controlscope._proc import descendants
from controlscope.core import InputFileError, read_source_program
from fixtures.adapter_agents import run_openai_agent, run_pydantic_agent, tool_call
from fixtures.stream_server import Answer, StreamServer
from test_hostile_edges import controlscope, refused
from test_linked_panels import UNIT, linked
from test_panel import write_config

TASK = "file_context/file_splitting"
FIXTURES = Path(__file__).parent / "fixtures"


# --- frozen source programs ------------------------------------------------------------------


@pytest.mark.parametrize(
    "code", ["x = " + "-" * 200_000 + "1", "x = 1" + "+1" * 300_000], ids=["unary", "sum"]
)
def test_a_source_program_too_deep_to_compile_is_refused_in_one_line(
    tmp_path: Path, code: str
) -> None:
    """Valid Python nested past the compiler's depth raised MemoryError or RecursionError out of
    ``read_source_program``: ``run --source`` ended in a traceback, exit 1."""
    source = tmp_path / "deep.py"
    source.write_text(code + "\n")
    with pytest.raises(InputFileError, match="nested too deeply"):
        read_source_program(source)
    (tmp_path / "script.json").write_text('["Done."]')
    done = controlscope(
        tmp_path,
        *("run", "--task", TASK, "--model", "scripted:script.json", "--scope", "keep"),
        *("--source", "deep.py", "--out", "out", "--quiet"),
    )
    refused(done, "deep.py", "nested too deeply")


# --- panels that take runs from another panel --------------------------------------------------


@pytest.fixture(scope="module")
def lender(tmp_path_factory: pytest.TempPathFactory) -> tuple[cp.PanelConfig, Path]:
    """A finished panel of whole runs (Keep and Full on one unit) that lends its Keep runs."""
    tmp = tmp_path_factory.mktemp("lender")
    config = cp.load_config(write_config(tmp, start="whole", scopes=["keep", "full"]))
    assert cp.run_panel(config, tmp / "a").complete
    return config, tmp / "a"


@pytest.mark.parametrize("key", ["keep_from", "diverge_from"])
def test_a_panel_that_takes_runs_from_itself_is_refused_before_it_runs(
    lender: tuple[cp.PanelConfig, Path], tmp_path: Path, key: str
) -> None:
    """``keep_from = "."`` ran the panel into runs that could never finish (each an error:
    'has not finished in' its own folder), again on every resumption."""
    config, _ = lender
    with pytest.raises(cp.ConfigError, match=f"execution.{key}: '.' is this panel's own folder"):
        cp.run_panel(linked(config, **{key: "."}), tmp_path / "p")
    assert not (tmp_path / "p").exists()


def test_a_lent_keep_run_holding_a_link_is_not_followed(
    lender: tuple[cp.PanelConfig, Path], tmp_path: Path
) -> None:
    """The Keep run was copied with ``shutil.copytree``'s default, which follows links: a link
    in the lending run's folder copied the folder it names (a link to ``/`` copies the
    machine; one to ``/dev/zero`` wrote until the disk was full)."""
    config, lent = lender
    other = tmp_path / "a"
    shutil.copytree(lent, other, ignore=shutil.ignore_patterns("panel.lock"))
    keep = cp.run_dir(other, f"{UNIT}/keep")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("not the run's\n")
    (keep / "evil").symlink_to(tmp_path / "outside")
    result = cp.run_panel(linked(config, keep_from="../a"), tmp_path / "b")
    ours = cp.run_dir(tmp_path / "b", f"{UNIT}/keep")
    record = cp.read_record(ours)
    assert record.status == "error" and "holds a link (evil)" in record.detail
    assert not result.complete and not (ours / "evil").exists()


# --- tool annotations ------------------------------------------------------------------------


def annotated(tmp_path: Path, *hints: object) -> dict[str, object]:
    """An Executor's servers: the annotated fixture server, its tools ``t0``, ``t1``... carrying
    ``hints`` as sent."""
    listed = tmp_path / "hints.json"
    listed.write_text(json.dumps(list(hints)))
    server = str(FIXTURES / "annotated_mcp_server.py")
    return {"liar": {"command": sys.executable, "args": [server, str(listed)]}}


@pytest.mark.parametrize(
    "bad", [{"readOnlyHint": "maybe"}, {"destructiveHint": {"a": [1]}}, ["readOnlyHint"]]
)
def test_a_server_with_malformed_annotations_is_named_and_the_session_goes_on(
    tmp_path: Path, bad: object
) -> None:
    """The SDK's ValidationError for one tool's hint escaped ``Executor(...)`` as many lines of
    pydantic, the other servers' and Python tools' session lost with it."""
    settings = cs.RunSettings(scope="keep", schedule="destructive")
    servers = annotated(tmp_path, {"readOnlyHint": True}, bad)
    with cs.Executor(
        servers=servers, tools=[echo], settings=settings, out=tmp_path / "s", timeout_s=30
    ) as ex:
        (problem,) = ex.problems
        assert "liar" in problem and "tools/list answered tools MCP does not allow" in problem
        assert "annotations" in problem and "\n" not in problem
        assert ex.execute("print(echo(text='still here'))").output == "still here\n"


def echo(text: str) -> str:
    """Answer ``text``."""
    return text


# --- a dying process -------------------------------------------------------------------------

SLEEPER = """
import sys
import controlscope as cs
with cs.Executor(settings=cs.RunSettings(scope="keep"), out=sys.argv[1]) as ex:
    ex.execute("import time\\ntime.sleep(3600)")
"""


def test_a_session_terminated_mid_block_records_its_end_before_docker_stop_kills_it(
    tmp_path: Path,
) -> None:
    """SIGTERM waited 30 s for a block that sleeps to end before killing its worker: a process
    manager's SIGKILL (``docker stop``: 10 s after SIGTERM) came first and the log ended at
    ``block_start``, with no end and no summary."""
    out = tmp_path / "s"
    proc = subprocess.Popen([sys.executable, "-c", SLEEPER, str(out)])
    try:
        deadline = time.monotonic() + 120
        while b"block_start" not in _log(out) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert b"block_start" in _log(out)
        time.sleep(1.5)  # the block sleeps
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)  # docker stop's grace
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    events = cs.read_events(out)
    assert events[-1].type == "run_end" and (out / "summary.json").is_file()
    (end,) = [e for e in events if e.type == "block_end"]
    assert end.result.status == "killed"


def _log(out: Path) -> bytes:
    try:
        return (out / "events.jsonl").read_bytes()
    except FileNotFoundError:
        return b""


# --- the adapters -----------------------------------------------------------------------------


@pytest.mark.parametrize("framework", ["openai-agents", "pydantic-ai"])
def test_code_longer_than_a_block_is_the_tools_output_not_the_agents_crash(
    tmp_path: Path, framework: str
) -> None:
    """The executor's ValueError for code over the block bound escaped both tools: the Agents
    SDK's run raised ``UserError`` and Pydantic AI's run raised it as it was (the MCP code-mode
    server already made it a tool error)."""
    big = "x = 1\n" * 200_000
    script = (tool_call({"code": big}), tool_call({"code": "print(6 * 7)"}), Answer(["42."]))
    server = StreamServer(*script)
    try:
        with cs.Executor(settings=cs.RunSettings(scope="keep"), out=tmp_path / "s") as ex:
            if framework == "openai-agents":
                outputs = run_openai_agent(ex, server)[1]
            else:
                outputs = [str(part.content) for part in run_pydantic_agent(ex, server)[1]]
    finally:
        server.close()
    assert outputs[0] == "[error: a block is at most 1,000,000 characters, not 1,200,000]"
    assert "42" in outputs[1]


# --- a panel's endpoint record ----------------------------------------------------------------

COUNTS = {
    "started": 1.0,
    "seconds": 2.0,
    "max_connections": 4,
    "requests": 10,
    "peak": 3,
    "busy_s": 5.5,
    "queued_s": 1.0,
    "rate_limits": 1,
    "rate_limited_s": 0.5,
}


@pytest.mark.parametrize(
    ("field", "value", "problem"),
    [
        ("requests", "-10", "greater than or equal to 0"),
        ("busy_s", "NaN", "finite number"),
        ("rate_limited_s", "-Infinity", "finite number"),
    ],
)
def test_an_endpoint_record_with_impossible_counts_is_unreadable(
    tmp_path: Path, field: str, value: str, problem: str
) -> None:
    """Negative counts and NaN seconds were read as they were: the report said ``endpoint:
    -10 requests ... nan s waiting on answers``."""
    given = f'"{field}": {json.dumps(COUNTS[field])}'
    text = json.dumps({"sessions": [COUNTS]}).replace(given, f'"{field}": {value}')
    (tmp_path / cp.ENDPOINT_FILE).write_text(text)
    with pytest.raises(ValueError, match=f"not an endpoint log: .*{problem}"):
        cp.read_endpoint(tmp_path)
    newer = {"version": 9, "sessions": [{**COUNTS, "new_field": {"x": 1}}]}
    (tmp_path / cp.ENDPOINT_FILE).write_text(json.dumps(newer))
    (session,) = cp.read_endpoint(tmp_path)  # a newer version's extra fields are left aside
    assert session.requests == 10


# --- a panel's branches by fork -----------------------------------------------------------------


def _forked_branch(pool_owner: int) -> int | None:
    """A branch's process: a fork (same command line) of a pool process of ``pool_owner``."""
    pool = {pid for pid in descendants(pool_owner) if _parent(pid) == pool_owner}
    for pid in descendants(pool_owner):
        parent = _parent(pid)
        if parent in pool and _cmdline(pid) == _cmdline(parent) != b"":
            return pid
    return None


def _parent(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _cmdline(pid: int | None) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_a_forked_branch_killed_before_its_end_runs_again_on_resumption(tmp_path: Path) -> None:
    """A branch whose process was SIGKILLed mid-run (the out-of-memory killer) was recorded
    ``done`` with no verdict and no end: the panel said complete and never ran it again."""
    config = cp.load_config(
        write_config(tmp_path, start="first_boundary", scopes=["keep", "full"], draws=2)
    )
    slow = "import time\ntime.sleep(20)\nprint('slept')"
    replace = json.dumps({"reason": "r", "operation": "replace_workflow", "code": slow})
    reviewer = config.reviewer.model.removeprefix("scripted:")
    Path(reviewer).write_text(json.dumps([replace] * 4))
    killed: list[int] = []

    def kill_the_branch() -> None:
        deadline = time.monotonic() + 240
        while not killed and time.monotonic() < deadline:
            pid = _forked_branch(os.getpid())
            if pid is not None:
                time.sleep(2.0)  # into the branch's sleep
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.2)

    killer = threading.Thread(target=kill_the_branch, daemon=True)
    killer.start()
    first = cp.run_panel(config, tmp_path / "p")
    killer.join(10)
    assert killed, "no branch process was found"
    branch = cp.run_dir(tmp_path / "p", f"{UNIT}/full-d0")
    record = cp.read_record(branch)
    assert record.status == "error" and "killed by signal 9 before its run ended" in record.detail
    assert not first.complete
    resumed = cp.run_panel(config, tmp_path / "p")
    record = cp.read_record(branch)
    assert resumed.complete and record.status == "done" and record.end_reason is not None


# --- a bad endpoint ----------------------------------------------------------------------------


def test_an_endpoint_whose_whole_answer_breaks_off_is_a_provider_error(tmp_path: Path) -> None:
    """An answer that came whole (not as a stream) and broke off before its ``Content-Length``
    raised the HTTP library's own ``RemoteProtocolError`` past the provider errors: the run
    ended ``error`` with a traceback in its detail, exit 4 (an unexpected failure), instead of
    the endpoint's failure, retried, exit 3."""
    listener = socket.create_server(("127.0.0.1", 0))
    body = b'{"choices": [{"message": 5}]}'
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body) + 1}"

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = listener.accept()
                with conn:
                    conn.recv(1 << 16)
                    conn.sendall(head.encode() + b"\r\n\r\n" + body)  # one byte short

    threading.Thread(target=serve, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    try:
        done = controlscope(
            tmp_path,
            *("run", "--task", TASK, "--model", "openai:x", "--base-url", url, "--scope"),
            *("keep", "--request-timeout-s", "60", "--out", "out", "--quiet"),
        )
    finally:
        listener.close()
    assert done.returncode == 3, done.stderr[-2000:]
    assert "the answer broke off" in done.stderr and "Traceback" not in done.stderr
    summary = cs.read_summary(tmp_path / "out")
    assert summary.end_reason == "planner_provider_error"
