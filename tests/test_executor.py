"""controlscope.Executor against the real npm filesystem server, Python tools and a scripted
reviewer: reviewed blocks, the session's run directory (replayed by the CLI), bad input, and
every process ended on close and on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

import _session_support
import controlscope as cs
import controlscope.core as cs_core
from controlscope._proc import cmdline, descendants
from controlscope.core import Condition, Keep, PatchArguments
from controlscope.envs.filesystem.server import find_server_script
from controlscope.envs.session import SESSION_FILE
from controlscope.record import iter_events, read_events, summarize
from controlscope.replay import Recording, replay_prefix
from controlscope.review import Proposal, PublicState
from controlscope.view import export
from fixtures.adapter_agents import PatchSecond

files = _session_support.files  # the fixtures, used by name
no_leftovers = _session_support.no_leftovers

ROOT = Path(__file__).resolve().parents[1]
KEEP = cs.RunSettings(scope="keep", schedule="never")


def _fs(root: Path) -> list[str]:
    return ["node", str(find_server_script()), str(root)]


class Raising:
    def propose(self, state: PublicState, condition: Condition) -> Proposal:
        raise RuntimeError("reviewer broke")


def add(a: int, b: int = 2) -> int:
    """Add two integers."""
    return a + b


def fails(x: str) -> str:
    """Always raises."""
    raise ValueError(f"no {x}")


def not_json() -> object:
    """Returns something that is not JSON data."""
    return {1, 2}


def test_reviewer_patches_the_second_call_and_the_session_replays(
    files: Path, tmp_path: Path, no_leftovers: None
) -> None:
    out = tmp_path / "session"
    reviewer = PatchSecond(str(files / "b.txt"))
    settings = cs.RunSettings(scope="arg", schedule="every_boundary")
    with cs.Executor(
        servers={"fs": _fs(files)}, settings=settings, reviewer=reviewer, out=out
    ) as ex:
        first = ex.execute(f"x = read_text_file(path={str(files / 'a.txt')!r})\nprint(x.strip())")
        second = ex.execute(
            f"y = read_text_file(path={str(files / 'a.txt')!r})\nprint(x.strip(), y.strip())"
        )
    assert first.ok and first.output == "alpha\n"
    assert second.ok and second.output == "alpha beta\n"  # the namespace was kept; y patched
    (call,) = second.calls
    assert call.arguments == {"path": str(files / "b.txt")}
    assert call.requested == {"path": str(files / "a.txt")}
    assert call.result.text == "beta\n"
    assert [d.operation.kind for d in first.decisions + second.decisions] == [
        "keep",
        "patch_arguments",
    ]
    assert all(d.reviewed and d.fallback is None for d in second.decisions)
    assert second.decisions[0].proposal == PatchArguments(arguments={"path": str(files / "b.txt")})
    events = read_events(out)
    assert events[0].type == "run_start" and events[-1].type == "run_end"
    assert (out / "summary.json").is_file() and (out / SESSION_FILE).is_file()
    summary = summarize(iter_events(out))
    assert (summary.primitive_calls, summary.argument_patches, summary.complete) == (2, 1, True)
    page = export(out, tmp_path / "site").read_text()
    assert "patch_arguments" in page and "beta" in page
    _session_support.replays_verified(out, 2)


def test_replay_of_an_edited_session_diverges(files: Path, tmp_path: Path) -> None:
    out = tmp_path / "session"
    with cs.Executor(servers={"fs": _fs(files)}, settings=KEEP, out=out) as ex:
        ex.execute(f"print(read_text_file(path={str(files / 'a.txt')!r}))")
    log = out / "events.jsonl"
    lines = [
        line.replace("a.txt", "b.txt") if '"type":"primitive_call"' in line else line
        for line in log.read_text().splitlines()
    ]
    log.write_text("\n".join(lines) + "\n")
    found = replay_prefix(Recording.load(out), out=tmp_path / "r")
    assert found.divergence is not None and "b.txt" in found.divergence.message


def where() -> int:
    """The process the tool runs in."""
    return os.getpid()


def test_python_tools_run_here_and_fail_as_tool_errors(tmp_path: Path) -> None:
    tools = [add, fails, not_json, where]
    with cs.Executor(tools=tools, settings=KEEP, out=tmp_path / "s") as ex:
        assert "def add(a: int, b: int = 2) -> str:" in ex.signatures()
        ok = ex.execute("print(add(a=2, b=3))\nimport os\nprint(os.getpid())\nprint(where())")
        raised = ex.execute("fails(x='milk')")
        odd = ex.execute("not_json()")
        bad = ex.execute("add(a='seven')")
        plain = ex.execute("z = 6 * 7\nprint(z)")
    assert ok.output.splitlines()[0] == "5"
    assert int(ok.output.splitlines()[1]) != os.getpid()  # the block ran in the worker,
    assert int(ok.output.splitlines()[2]) == os.getpid()  # the tool in this process
    assert raised.status == "error" and "fails raised ValueError: no milk" in (raised.error or "")
    assert raised.calls[0].result.is_error
    assert odd.status == "error" and "not JSON data" in (odd.error or "")
    assert bad.status == "error" and "invalid arguments for add" in (bad.error or "")
    assert plain.ok and plain.output == "42\n" and plain.calls == () and plain.decisions == ()


def test_a_tool_named_like_a_builtin_replaces_it_and_the_session_warns(tmp_path: Path) -> None:
    def shout(text: str) -> str:
        """Answer the text in capitals."""
        return text.upper()

    shout.__name__ = "print"
    with cs.Executor(tools=[shout, add], settings=KEEP, out=tmp_path / "s") as ex:
        warning = "tools named like Python builtins replace them in the agent's program: print"
        assert ex.warnings == (warning,)
        done = ex.execute("x = print(text='hi')\nassert x == 'HI', x")
    assert done.ok and done.output == "" and [c.tool for c in done.calls] == ["print"]
    start = read_events(tmp_path / "s")[0]
    assert isinstance(start, cs_core.RunStartEvent) and start.warnings == (warning,)
    with cs.Executor(tools=[add], settings=KEEP, out=tmp_path / "t") as plain:
        assert plain.warnings == ()


def test_clashing_names_are_namespaced(files: Path, tmp_path: Path, no_leftovers: None) -> None:
    def read_text_file(path: str) -> str:
        """A Python tool whose name an MCP server also gives."""
        return f"python:{path}"

    servers = {"mcpServers": {"one": {"command": "node", "args": _fs(files)[1:]}}}
    with cs.Executor(
        servers=servers, tools=[read_text_file], settings=KEEP, out=tmp_path / "s"
    ) as ex:
        names = [t.name for t in ex.tools]
        result = ex.execute(
            f"print(one__read_text_file(path={str(files / 'a.txt')!r}).strip())\n"
            "print(python__read_text_file(path='p'))"
        )
    assert "one__read_text_file" in names and "python__read_text_file" in names
    assert "read_text_file" not in names and "list_directory" in names
    assert result.output == "alpha\npython:p\n"


def test_server_that_fails_or_dies_leaves_the_executor_usable(
    files: Path, tmp_path: Path, no_leftovers: None
) -> None:
    servers = {"fs": _fs(files), "broken": [sys.executable, "-c", "import sys; sys.exit(3)"]}
    out = tmp_path / "s"
    with cs.Executor(servers=servers, tools=[add], settings=KEEP, out=out, timeout_s=20) as ex:
        assert len(ex.problems) == 1 and "'broken'" in ex.problems[0]
        before = set(descendants(os.getpid()))
        assert ex.execute(f"print(read_text_file(path={str(files / 'a.txt')!r}))").ok
        node = [p for p in before if "node" in Path(f"/proc/{p}/cmdline").read_text()]
        for pid in node:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
        dead = ex.execute(f"print(read_text_file(path={str(files / 'a.txt')!r}))")
        after = ex.execute("print(add(a=1))\nprint(x if 'x' in dir() else 'ok')")
    assert dead.status == "error" and "the MCP server 'fs' failed" in (dead.error or "")
    assert dead.calls[0].result.is_error  # recorded as the call's observation
    assert after.ok and after.output == "3\nok\n"
    start = read_events(out)[0]
    assert start.type == "run_start" and "failed:broken" in start.server


def test_reviewer_that_raises_is_a_recorded_fallback(files: Path, tmp_path: Path) -> None:
    settings = cs.RunSettings(scope="arg", schedule="every_boundary")
    with cs.Executor(tools=[add], settings=settings, reviewer=Raising(), out=tmp_path / "s") as ex:
        run = ex.execute("print(add(a=4))")
        again = ex.execute("print(add(a=5))")
    assert run.ok and run.output == "6\n" and again.output == "7\n"
    (decision,) = run.decisions
    assert decision.fallback == "malformed" and decision.operation == Keep()
    assert "the reviewer raised RuntimeError: reviewer broke" in decision.detail


def test_execute_after_close_is_a_clear_error(tmp_path: Path) -> None:
    ex = cs.Executor(settings=KEEP, out=tmp_path / "s")
    ex.close()
    ex.close()
    with pytest.raises(cs.ExecutorClosed, match="the executor is closed"):
        ex.execute("print(1)")
    assert [e.type for e in read_events(tmp_path / "s")][-1] == "run_end"


def test_async_form(tmp_path: Path) -> None:
    async def main() -> str:
        async with cs.Executor(tools=[add], settings=KEEP, out=tmp_path / "s") as ex:
            run = await ex.aexecute("print(add(a=40))")
            return run.output

    assert anyio.run(main) == "42\n"


@pytest.mark.parametrize(
    ("servers", "words"),
    [
        ({"mcpServers": {"x": {"command": "node", "url": "http://h"}}}, "unknown field 'url'"),
        ({"mcpServers": {"x": {"args": ["a"]}}}, "server 'x': no 'command'"),
        ({"mcpServers": {"x": {"command": " "}}}, "server 'x'"),
        ({"mcpServers": {"x": {"command": "a"}}, "extra": 1}, "unknown key(s) ['extra']"),
        ({"a__b": "node"}, "no server name"),
    ],
)
def test_bad_server_configurations_are_one_line(
    servers: dict[str, Any], words: str, tmp_path: Path
) -> None:
    with pytest.raises(cs.ExecutorError) as info:
        cs.Executor(servers=servers, settings=KEEP, out=tmp_path / "s")
    assert words in str(info.value) and "\n" not in str(info.value)


def test_bad_server_file_and_settings(tmp_path: Path) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"x": {"command": "a", "headers": {}}}}))
    with pytest.raises(cs.ExecutorError, match=r"mcp.json: server 'x': unknown field 'headers'"):
        cs.Executor(servers=path, settings=KEEP, out=tmp_path / "s")
    with pytest.raises(cs.ExecutorError, match="recorded source run"):
        cs.Executor(settings=cs.RunSettings(schedule="once", scope="keep"), out=tmp_path / "t")
    with pytest.raises(cs.ExecutorError, match="planner_format is tools"):
        cs.Executor(settings=cs.RunSettings(planner_format="fenced"), out=tmp_path / "u")


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"seed": -1}, "seed: Input should be greater than or equal to 0 (got -1)"),
        ({"seed": "x"}, "seed: Input should be a valid integer (got 'x')"),
        ({"seed": 2**70}, "seed: Input should be less than or equal to"),
        ({"timeout_s": 0}, "timeout_s is a number of seconds above 0, not 0"),
        ({"goal": 5}, "goal is text (what the session is for), not int"),
        ({"settings": {"max_calls": 3}}, "settings is a RunSettings, not dict"),
        (
            {"settings": KEEP.model_copy(update={"max_calls": -3})},
            "settings.max_calls: Input should be greater than or equal to 1 (got -3)",
        ),
        (
            {"settings": KEEP.model_copy(update={"review_timeout_s": float("inf")})},
            "settings.review_timeout_s: Input should be a finite number (got inf)",
        ),
    ],
)
def test_arguments_out_of_range_are_one_line_before_anything_starts(
    arguments: dict[str, Any], words: str, tmp_path: Path
) -> None:
    with pytest.raises(cs.ExecutorError) as info:
        cs.Executor(out=tmp_path / "s", **{"settings": KEEP, **arguments})
    assert str(info.value).startswith(words), str(info.value)
    assert "\n" not in str(info.value) and "validation error" not in str(info.value)
    assert not (tmp_path / "s").exists()  # refused before the session's directory is made


@pytest.mark.parametrize("how", ["exit", "sigterm"])
def test_interpreter_exit_and_sigterm_end_every_process(
    how: str, files: Path, tmp_path: Path
) -> None:
    out = tmp_path / "s"
    wait = "time.sleep(120)" if how == "sigterm" else "sys.stdin.readline()"
    script = textwrap.dedent(
        f"""
        import sys, time
        import controlscope as cs
        ex = cs.Executor(servers={{"fs": {_fs(files)!r}}}, settings=cs.RunSettings(
            scope="keep", schedule="never"), out={str(out)!r})
        ex.execute("print(1)")
        print("ready", flush=True)
        {wait}
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        below = descendants(proc.pid)
        assert below  # the worker and the server
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=60) == -signal.SIGTERM
        else:  # the script ends without closing its executor
            assert proc.stdin is not None
            proc.stdin.write("\n")
            proc.stdin.flush()
            assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        proc.wait()
    alive = _session_support.outliving(below, 10)
    assert not alive, {pid: cmdline(pid) for pid in alive}
    assert read_events(out)[-1].type == "run_end"


def test_a_hung_server_dies_with_its_controller_killed_by_sigkill(tmp_path: Path) -> None:
    """An upstream server that is not confined and hangs in a call (it reads nothing more, so
    its stdin's end never reaches it) dies with the controller's process, SIGKILL included:
    the server started from a thread that lives as long as its connection, and that thread
    ends with the process."""
    server = ROOT / "tests" / "fixtures" / "misbehaving_mcp_server.py"
    script = textwrap.dedent(
        f"""
        import sys
        import controlscope as cs
        ex = cs.Executor(servers={{"m": [sys.executable, {str(server)!r}]}},
                         settings=cs.RunSettings(scope="keep", schedule="never"),
                         out={str(tmp_path / "s")!r})
        print("ready", flush=True)
        ex.execute("echo(text='in')\\nspin(seconds=600)")
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        spinning = tmp_path / "s" / "events.jsonl"
        deadline = time.monotonic() + 60
        while b'"primitive_call"' not in spinning.read_bytes() and time.monotonic() < deadline:
            time.sleep(0.1)  # echo answered: spin is the next line
        time.sleep(2.0)  # the server has read spin's request and sleeps in it
        below = descendants(proc.pid)
        hung = [pid for pid in below if str(server) in cmdline(pid)]
        assert len(hung) == 1, {pid: cmdline(pid) for pid in below}
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        proc.kill()
        proc.wait()
    alive = _session_support.outliving(below, 20)
    left = {pid: cmdline(pid) for pid in alive}
    for pid in alive:  # never left behind, even by a failing test
        os.kill(pid, signal.SIGKILL)
    assert hung[0] not in left and not left, left


def test_a_budget_ends_the_session_and_says_so(tmp_path: Path) -> None:
    settings = cs.RunSettings(scope="keep", max_turns=2)
    with cs.Executor(settings=settings, out=tmp_path / "s") as ex:
        first = ex.execute("v = 1")
        last = ex.execute("print(v + 1)")
        with pytest.raises(cs.ExecutorClosed, match=r"the session ended \(budget:planning_turns"):
            ex.execute("print(3)")
    assert first.session_end is None and first.ok
    assert last.ok and last.output == "2\n" and last.session_end == "budget:planning_turns"
    assert read_events(tmp_path / "s")[-1].type == "run_end"


def test_a_server_is_confined_to_its_workspace_where_asked(files: Path, tmp_path: Path) -> None:
    script = find_server_script()
    node_modules = next(p for p in script.parents if p.name == "node_modules")
    entry = {"command": "node", "args": [str(script), "{workspace}"]}
    entry |= {"workspace": str(files), "read": [str(node_modules)]}
    with cs.Executor(servers={"fs": entry}, settings=KEEP, out=tmp_path / "s") as ex:
        run = ex.execute(
            "print(list_allowed_directories())\nprint(read_text_file(path='/workspace/a.txt'))"
        )
    assert run.ok, run.error
    assert "/workspace" in run.output and str(files) not in run.output
    assert "alpha" in run.output
    session = json.loads((tmp_path / "s" / SESSION_FILE).read_text())
    assert session["servers"]["fs"].endswith(f"(confined to {files})")


class AskedAbout:
    """A scripted reviewer that keeps every call and remembers the tools it was asked about."""

    def __init__(self) -> None:
        self.tools: list[str] = []

    def propose(self, state: PublicState, condition: Condition) -> Proposal:
        self.tools.append(state.boundary.tool)
        return Proposal(operation=Keep())


@cs.tool_annotations(read_only_hint=True)
def weather(city: str) -> str:
    """A read-only Python tool."""
    return f"sunny in {city}"


def test_destructive_schedule_reviews_what_the_real_server_marks_destructive(
    files: Path, tmp_path: Path, no_leftovers: None
) -> None:
    out = tmp_path / "session"
    reviewer = AskedAbout()
    settings = cs.RunSettings(scope="arg", schedule="destructive")
    with cs.Executor(
        servers={"fs": _fs(files)},
        tools=[weather, add],
        settings=settings,
        reviewer=reviewer,
        out=out,
    ) as ex:
        hints = {tool.name: tool.annotations for tool in ex.tools}
        run = ex.execute(
            textwrap.dedent(f"""\
                print(list_directory(path={str(files)!r}))
                write_file(path={str(files / "c.txt")!r}, content="gamma")
                create_directory(path={str(files / "d")!r})
                print(read_text_file(path={str(files / "c.txt")!r}))
                print(weather(city="Oslo"), add(a=1))
            """)
        )
    assert run.ok, run.error
    # the npm server's own annotations, and the Python tools' (declared, or none)
    assert hints["read_text_file"] is not None and hints["read_text_file"].read_only_hint
    assert hints["write_file"] is not None and hints["write_file"].destructive_hint
    assert hints["create_directory"] is not None and hints["create_directory"].idempotent_hint
    assert hints["weather"] == cs_core.ToolAnnotations(read_only_hint=True)
    assert hints["add"] is None
    assert reviewer.tools == ["write_file", "create_directory", "add"]
    assert [d.call_index for d in run.decisions] == [1, 2, 5]
    boundaries = [e for e in read_events(out) if isinstance(e, cs_core.BoundaryEvent)]
    recorded = {e.boundary.tool: (e.review, e.risk) for e in boundaries}
    assert recorded["list_directory"] == (
        False,
        cs_core.ToolRisk(risky=False, hints="readOnlyHint true"),
    )
    assert recorded["write_file"] == (
        True,
        cs_core.ToolRisk(
            risky=True, hints="readOnlyHint false, destructiveHint true, idempotentHint true"
        ),
    )
    assert recorded["create_directory"] == (
        True,
        cs_core.ToolRisk(
            risky=True, hints="readOnlyHint false, destructiveHint false, idempotentHint true"
        ),
    )
    assert recorded["weather"][0] is False
    assert recorded["add"] == (
        True,
        cs_core.ToolRisk(
            risky=True,
            hints="readOnlyHint false (default), destructiveHint true (default), "
            "idempotentHint false (default)",
        ),
    )


def test_tool_annotations_marks_only_what_can_carry_the_mark() -> None:
    with pytest.raises(TypeError, match="decorate a function"):
        cs.tool_annotations(read_only_hint=True)(Raising().propose)


def test_a_desk_needs_a_person_reviewing_in_the_browser(tmp_path: Path) -> None:
    desk = cs.review.ReviewDesk()
    person = cs.RunSettings(scope="arg", reviewer="human")
    for settings, reviewer in (
        (cs.RunSettings(scope="arg", reviewer="human:terminal"), None),
        (person, AskedAbout()),
        (cs.RunSettings(scope="keep", schedule="never", reviewer="human"), None),
    ):
        with pytest.raises(cs.ExecutorError, match="desk is where a person reviews") as err:
            cs.Executor(settings=settings, reviewer=reviewer, desk=desk, out=tmp_path / "s")
        assert "\n" not in str(err.value)
    assert not (tmp_path / "s").exists()
    with cs.Executor(tools=[add], settings=person, out=tmp_path / "own") as ex:
        assert ex.review_url is not None and ex.review_url.startswith("http://127.0.0.1:")
        assert f"#key={desk.secret}" not in ex.review_url
    start = read_events(tmp_path / "own")[0]
    assert start.type == "run_start" and start.models["reviewer"] == "human:browser"
