"""The framework adapters end to end with the real packages (smolagents, the OpenAI Agents SDK,
Pydantic AI), each agent's model a loopback OpenAI-compatible endpoint answering from a script:
the agent's code calls two tools of the real npm filesystem server, a scripted reviewer patches
the second call, the framework's own result shows the patched call, the session's run directory
replays. Then bad input: a closed executor, code that is not a string, a block that overruns
the executor's limit, an adapter without its extra."""

from __future__ import annotations

import importlib
import itertools
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import controlscope as cs
from controlscope._proc import cmdline, descendants
from controlscope.core import Condition, Keep, PatchArguments
from controlscope.envs.filesystem.server import find_server_script
from controlscope.record import read_events
from controlscope.review import Proposal, PublicState
from fixtures.stream_server import Answer, StreamServer

ROOT = Path(__file__).resolve().parents[1]
REVIEWED = cs.RunSettings(scope="arg", schedule="every_boundary")


class PatchSecond:
    """A scripted reviewer: a patch of ``path`` at the session's second call, else Keep."""

    def __init__(self, path: str) -> None:
        self.path = path

    def propose(self, state: PublicState, condition: Condition) -> Proposal:
        if state.boundary.call_index == 1:
            return Proposal(operation=PatchArguments(arguments={"path": self.path}))
        return Proposal(operation=Keep())


@pytest.fixture
def files(tmp_path: Path) -> Path:
    root = tmp_path / "files"
    root.mkdir()
    (root / "a.txt").write_text("alpha\n")
    (root / "b.txt").write_text("beta\n")
    return root


def _running() -> set[int]:
    return {pid for pid in descendants(os.getpid()) if _state(pid) not in ("Z", "X", "gone")}


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


@pytest.fixture
def no_leftovers() -> Iterator[None]:
    """Fail when a process this test started outlives it."""
    before = _running()
    yield
    deadline = time.monotonic() + 10
    left = _running() - before
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = _running() - before
    assert not left, f"processes left behind: { {pid: cmdline(pid) for pid in left} }"


@pytest.fixture
def endpoint() -> Iterator[list[StreamServer]]:
    """The scripted endpoints a test starts (each closed after it)."""
    started: list[StreamServer] = []
    yield started
    for server in started:
        server.close()


def _serve(started: list[StreamServer], *script: Answer) -> StreamServer:
    server = StreamServer(*script)
    started.append(server)
    return server


def _executor(files: Path, out: Path, **kwargs: Any) -> cs.Executor:
    command = ["node", str(find_server_script()), str(files)]
    kwargs.setdefault("settings", REVIEWED)
    kwargs.setdefault("reviewer", PatchSecond(str(files / "b.txt")))
    return cs.Executor(servers={"fs": command}, out=out, **kwargs)


def _code(files: Path) -> str:
    """Agent code calling two tools; the second call is the one the reviewer patches."""
    return (
        f"names = list_directory(path={str(files)!r})\n"
        f"text = read_text_file(path={str(files / 'a.txt')!r})\n"
        "print(text.strip())\n"
    )


_CALL_IDS = itertools.count(1)


def _tool_call(arguments: dict[str, Any]) -> Answer:
    """An ``execute_python`` call (each with an id of its own)."""
    call_id = f"call_{next(_CALL_IDS)}"
    return Answer(pieces=[], tool_calls=[(0, call_id, "execute_python", json.dumps(arguments))])


def _patched(files: Path) -> str:
    a, b = files / "a.txt", files / "b.txt"
    return f'read_text_file ran with {{"path": "{b}"}} in place of {{"path": "{a}"}}'


def _replays(out: Path, tmp_path: Path, calls: int) -> None:
    """``controlscope replay`` of the session verifies its calls."""
    replayed = subprocess.run(
        [sys.executable, "-m", "controlscope.cli", "replay", str(out), "--out", str(out) + "-r"],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        timeout=300,
    )
    assert replayed.returncode == 0, replayed.stderr
    assert f"{calls} calls verified" in replayed.stdout
    kinds = [e.operation.kind for e in read_events(out) if e.type == "realized_operation"]
    assert kinds == ["keep", "patch_arguments"]


# -- end to end ---------------------------------------------------------------------------------


def test_smolagents_code_agent_runs_its_code_under_review(
    files: Path, tmp_path: Path, endpoint: list[StreamServer], no_leftovers: None
) -> None:
    from smolagents import ActionStep, OpenAIModel

    from controlscope.integrations import ReviewedPythonExecutor, reviewed_code_agent

    step = f"Thought: read the note.\n<code>\n{_code(files)}</code>"
    done = "Thought: done.\n<code>\nfinal_answer(text.strip())\n</code>"
    server = _serve(endpoint, Answer(pieces=[step]), Answer(pieces=[done]))
    out = tmp_path / "session"
    with _executor(files, out) as ex:
        model = OpenAIModel(model_id="scripted", api_base=server.base_url, api_key="none")
        agent = reviewed_code_agent(ex, model, verbosity_level=-1)
        assert isinstance(agent.python_executor, ReviewedPythonExecutor)
        answer = agent.run("What does the note say?", max_steps=3)
    assert answer == "beta"  # the patched call's observation reached the answer
    steps = [s for s in agent.memory.steps if isinstance(s, ActionStep)]
    assert _patched(files) in steps[0].observations and "beta" in steps[0].observations
    system = server.bodies[0]["messages"][0]["content"]
    system = system if isinstance(system, str) else json.dumps(system)
    assert "def read_text_file(" in system and "def list_directory(" in system
    _replays(out, tmp_path, calls=2)


def test_openai_agents_tool_runs_its_code_under_review(
    files: Path, tmp_path: Path, endpoint: list[StreamServer], no_leftovers: None
) -> None:
    script = (_tool_call({"code": _code(files)}), Answer(pieces=["It says beta."]))
    server = _serve(endpoint, *script)
    out = tmp_path / "session"
    with _executor(files, out) as ex:
        result, outputs = _run_openai_agent(ex, server)
    (output,) = outputs
    assert _patched(files) in output and "beta" in output
    assert result.final_output == "It says beta."
    (tool,) = server.bodies[0]["tools"]
    assert "def read_text_file(" in tool["function"]["description"]
    _replays(out, tmp_path, calls=2)


def _run_openai_agent(
    ex: cs.Executor, server: StreamServer, tool: Any = None
) -> tuple[Any, list[str]]:
    """An Agents SDK agent with the executor's tool, its model the endpoint: its result and
    the tool's outputs, in order."""
    from agents import Agent, OpenAIChatCompletionsModel, RunConfig, Runner, ToolCallOutputItem
    from openai import AsyncOpenAI

    from controlscope.integrations import openai_agents_tool

    client = AsyncOpenAI(base_url=server.base_url, api_key="none", max_retries=0)
    agent = Agent(
        name="reader",
        instructions="Answer with code.",
        tools=[tool or openai_agents_tool(ex)],
        model=OpenAIChatCompletionsModel(model="scripted", openai_client=client),
    )
    result = Runner.run_sync(agent, "Go.", run_config=RunConfig(tracing_disabled=True))
    outputs = [str(i.output) for i in result.new_items if isinstance(i, ToolCallOutputItem)]
    return result, outputs


def test_pydantic_ai_tool_runs_its_code_under_review(
    files: Path, tmp_path: Path, endpoint: list[StreamServer], no_leftovers: None
) -> None:
    script = (_tool_call({"code": _code(files)}), Answer(pieces=["It says beta."]))
    server = _serve(endpoint, *script)
    out = tmp_path / "session"
    with _executor(files, out) as ex:
        result, parts = _run_pydantic_agent(ex, server)
    (part,) = parts
    assert _patched(files) in part.content and "beta" in part.content
    assert result.output == "It says beta."
    (tool,) = server.bodies[0]["tools"]
    assert "def read_text_file(" in tool["function"]["description"]
    _replays(out, tmp_path, calls=2)


def _run_pydantic_agent(
    ex: cs.Executor, server: StreamServer, tool: Any = None
) -> tuple[Any, list[Any]]:
    """A Pydantic AI agent with the executor's tool, its model the endpoint: its result and
    the tool's returns and retry prompts, in order."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import RetryPromptPart, ToolReturnPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from controlscope.integrations import pydantic_ai_tool

    provider = OpenAIProvider(base_url=server.base_url, api_key="none")
    agent = Agent(
        OpenAIChatModel("scripted", provider=provider), tools=[tool or pydantic_ai_tool(ex)]
    )
    result = agent.run_sync("Go.")
    parts = [
        part
        for message in result.all_messages()
        for part in message.parts
        if isinstance(part, ToolReturnPart | RetryPromptPart)
    ]
    return result, parts


# -- bad input ----------------------------------------------------------------------------------

KEEP = cs.RunSettings(scope="keep", schedule="never")


def test_adapters_refuse_a_closed_executor(tmp_path: Path) -> None:
    from smolagents import OpenAIModel

    from controlscope.integrations import (
        ReviewedPythonExecutor,
        openai_agents_tool,
        pydantic_ai_tool,
        reviewed_code_agent,
    )

    ex = cs.Executor(settings=KEEP, out=tmp_path / "s")
    ex.close()
    model = OpenAIModel(model_id="scripted", api_base="http://127.0.0.1:9/v1", api_key="none")
    for make in (
        lambda: reviewed_code_agent(ex, model),
        lambda: ReviewedPythonExecutor(ex),
        lambda: openai_agents_tool(ex),
        lambda: pydantic_ai_tool(ex),
    ):
        with pytest.raises(cs.ExecutorClosed, match="the executor is closed"):
            make()


def test_a_tool_whose_executor_closed_meanwhile_says_so(
    tmp_path: Path, endpoint: list[StreamServer]
) -> None:
    from controlscope.integrations import openai_agents_tool, pydantic_ai_tool

    script = (_tool_call({"code": "print(1)"}), Answer(pieces=["Stopped."]))
    ex = cs.Executor(settings=KEEP, out=tmp_path / "s")
    tools = (openai_agents_tool(ex), pydantic_ai_tool(ex))  # made while it was open
    ex.close()
    _, outputs = _run_openai_agent(ex, _serve(endpoint, *script), tool=tools[0])
    _, parts = _run_pydantic_agent(ex, _serve(endpoint, *script), tool=tools[1])
    assert "the executor is closed" in outputs[0] and "the executor is closed" in parts[0].content


def test_code_that_is_not_a_string_runs_no_block(
    tmp_path: Path, endpoint: list[StreamServer]
) -> None:
    from controlscope.integrations import ReviewedPythonExecutor

    script = (
        _tool_call({"code": 5}),
        _tool_call({"code": "print(6 * 7)"}),
        Answer(pieces=["42."]),
    )
    out = tmp_path / "s"
    with cs.Executor(settings=KEEP, out=out) as ex:
        _, outputs = _run_openai_agent(ex, _serve(endpoint, *script))
        _, parts = _run_pydantic_agent(ex, _serve(endpoint, *script))
        with pytest.raises(TypeError, match="code must be a str, not int"):
            ReviewedPythonExecutor(ex)(5)  # type: ignore[arg-type]
    assert outputs[0] == "[error: execute_python needs its code as a string: not int]"
    assert "42" in outputs[1]
    assert parts[0].outcome == "retried" and "valid string" in str(parts[0].content)
    assert "42" in parts[1].content
    blocks = [e for e in read_events(out) if e.type == "block_end"]
    assert len(blocks) == 2  # one per framework: the refused code never ran


def test_a_block_past_the_executors_limit_is_a_timeout_in_the_tools_output(
    tmp_path: Path, endpoint: list[StreamServer]
) -> None:
    script = (
        _tool_call({"code": "import time\nprint('start', flush=True)\ntime.sleep(120)"}),
        _tool_call({"code": "print('after')"}),
        Answer(pieces=["Done."]),
    )
    settings = cs.RunSettings(scope="keep", schedule="never", block_exec_s=2)
    started = time.monotonic()
    with cs.Executor(settings=settings, out=tmp_path / "s") as ex:
        _, outputs = _run_openai_agent(ex, _serve(endpoint, *script))
    assert time.monotonic() - started < 90  # bounded by the executor's limit, not the sleep
    assert "timeout" in outputs[0] and "after" in outputs[1]


@pytest.mark.parametrize(
    ("name", "framework", "extra"),
    [
        ("reviewed_code_agent", "smolagents", "smolagents"),
        ("openai_agents_tool", "agents", "openai-agents"),
        ("pydantic_ai_tool", "pydantic_ai", "pydantic-ai"),
    ],
)
def test_an_adapter_without_its_extra_names_it_in_one_line(
    name: str, framework: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import controlscope.integrations as integrations

    module = integrations._ADAPTERS[name]
    monkeypatch.setitem(sys.modules, framework, None)  # as if it were not installed
    monkeypatch.delitem(sys.modules, module, raising=False)
    monkeypatch.delattr(integrations, name, raising=False)
    with pytest.raises(cs.MissingExtra) as info:
        getattr(integrations, name)
    message = str(info.value)
    assert f"pip install 'controlscope[{extra}]'" in message and "\n" not in message
    with pytest.raises(cs.MissingExtra):
        importlib.import_module(module)
