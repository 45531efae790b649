"""The framework adapters end to end with the real packages (smolagents, the OpenAI Agents SDK,
Pydantic AI), each agent's model a loopback OpenAI-compatible endpoint answering from a script:
the agent's code calls two tools of the real npm filesystem server, a scripted reviewer patches
the second call, the framework's own result shows the patched call, the session's run directory
replays. Then bad input: a closed executor, code that is not a string, a block that overruns
the executor's limit, an adapter without its extra."""

from __future__ import annotations

import importlib
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import _session_support
import controlscope as cs
from controlscope.record import read_events
from fixtures.adapter_agents import (
    fs_executor,
    patched_text,
    run_openai_agent,
    run_pydantic_agent,
    run_smolagents,
    smolagents_script,
    tool_call,
    tool_script,
)
from fixtures.stream_server import Answer, StreamServer

files = _session_support.files  # the fixtures, used by name
no_leftovers = _session_support.no_leftovers

ROOT = Path(__file__).resolve().parents[1]


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


def _replays(out: Path, calls: int) -> None:
    """``controlscope replay`` of the session verifies its calls; the reviewer kept the first
    and patched the second."""
    _session_support.replays_verified(out, calls)
    kinds = [e.operation.kind for e in read_events(out) if e.type == "realized_operation"]
    assert kinds == ["keep", "patch_arguments"]


# -- end to end ---------------------------------------------------------------------------------


def test_smolagents_code_agent_runs_its_code_under_review(
    files: Path, tmp_path: Path, endpoint: list[StreamServer], no_leftovers: None
) -> None:
    server = _serve(endpoint, *smolagents_script(files))
    out = tmp_path / "session"
    with fs_executor(files, out) as ex:
        answer, steps = run_smolagents(ex, server)
    assert answer == "beta"  # the patched call's observation reached the answer
    assert patched_text(files) in steps[0].observations and "beta" in steps[0].observations
    system = server.bodies[0]["messages"][0]["content"]
    system = system if isinstance(system, str) else json.dumps(system)
    assert "def read_text_file(" in system and "def list_directory(" in system
    _replays(out, calls=2)


def test_openai_agents_tool_runs_its_code_under_review(
    files: Path, tmp_path: Path, endpoint: list[StreamServer], no_leftovers: None
) -> None:
    server = _serve(endpoint, *tool_script(files))
    out = tmp_path / "session"
    with fs_executor(files, out) as ex:
        result, outputs = run_openai_agent(ex, server)
    (output,) = outputs
    assert patched_text(files) in output and "beta" in output
    assert result.final_output == "It says beta."
    (tool,) = server.bodies[0]["tools"]
    assert "def read_text_file(" in tool["function"]["description"]
    _replays(out, calls=2)


def test_pydantic_ai_tool_runs_its_code_under_review(
    files: Path, tmp_path: Path, endpoint: list[StreamServer], no_leftovers: None
) -> None:
    server = _serve(endpoint, *tool_script(files))
    out = tmp_path / "session"
    with fs_executor(files, out) as ex:
        result, parts = run_pydantic_agent(ex, server)
    (part,) = parts
    assert patched_text(files) in part.content and "beta" in part.content
    assert result.output == "It says beta."
    (tool,) = server.bodies[0]["tools"]
    assert "def read_text_file(" in tool["function"]["description"]
    _replays(out, calls=2)


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

    script = (tool_call({"code": "print(1)"}), Answer(pieces=["Stopped."]))
    ex = cs.Executor(settings=KEEP, out=tmp_path / "s")
    tools = (openai_agents_tool(ex), pydantic_ai_tool(ex))  # made while it was open
    ex.close()
    _, outputs = run_openai_agent(ex, _serve(endpoint, *script), tool=tools[0])
    _, parts = run_pydantic_agent(ex, _serve(endpoint, *script), tool=tools[1])
    assert "the executor is closed" in outputs[0] and "the executor is closed" in parts[0].content


def test_code_that_is_not_a_string_runs_no_block(
    tmp_path: Path, endpoint: list[StreamServer]
) -> None:
    from controlscope.integrations import ReviewedPythonExecutor

    script = (
        tool_call({"code": 5}),
        tool_call({"code": "print(6 * 7)"}),
        Answer(pieces=["42."]),
    )
    out = tmp_path / "s"
    with cs.Executor(settings=KEEP, out=out) as ex:
        _, outputs = run_openai_agent(ex, _serve(endpoint, *script))
        _, parts = run_pydantic_agent(ex, _serve(endpoint, *script))
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
        tool_call({"code": "import time\nprint('start', flush=True)\ntime.sleep(120)"}),
        tool_call({"code": "print('after')"}),
        Answer(pieces=["Done."]),
    )
    settings = cs.RunSettings(scope="keep", schedule="never", block_exec_s=2)
    started = time.monotonic()
    with cs.Executor(settings=settings, out=tmp_path / "s") as ex:
        _, outputs = run_openai_agent(ex, _serve(endpoint, *script))
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


def test_a_smolagents_tool_outside_the_executor_is_refused_before_any_step(
    tmp_path: Path, endpoint: list[StreamServer]
) -> None:
    from smolagents import OpenAIModel, tool

    from controlscope.integrations import reviewed_code_agent

    @tool
    def shout(text: str) -> str:
        """Shouts.

        Args:
            text: what to shout.
        """
        return text.upper()

    server = _serve(endpoint, Answer(pieces=["<code>\nfinal_answer(1)\n</code>"]))
    with cs.Executor(settings=KEEP, out=tmp_path / "s") as ex:
        model = OpenAIModel(model_id="scripted", api_base=server.base_url, api_key="none")
        agent = reviewed_code_agent(ex, model, verbosity_level=-1)
        agent.tools["shout"] = shout
        with pytest.raises(ValueError, match=r"tool\(s\) \['shout'\] are not the executor's"):
            agent.run("Shout.", max_steps=1)
    assert server.requests == 0  # refused before the model was asked


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_a_smolagents_action_that_fails_is_the_steps_error_and_the_run_goes_on(
    tmp_path: Path, endpoint: list[StreamServer]
) -> None:
    from smolagents import ActionStep, OpenAIModel

    from controlscope.integrations import reviewed_code_agent

    failing = "<code>\ntotal = add(a=word_count, b=1)\nprint(total)\n1 / 0\n</code>"
    done = "<code>\nfinal_answer({'total': total, 'odd': {1}})\n</code>"
    server = _serve(endpoint, Answer(pieces=[failing]), Answer(pieces=[done]))
    with cs.Executor(tools=[add], settings=KEEP, out=tmp_path / "s") as ex:
        model = OpenAIModel(model_id="scripted", api_base=server.base_url, api_key="none")
        agent = reviewed_code_agent(ex, model, verbosity_level=-1)
        answer = agent.run("Add.", max_steps=3, additional_args={"word_count": 41})
    first, last = [s for s in agent.memory.steps if isinstance(s, ActionStep)]
    assert "ZeroDivisionError" in str(first.error) and "42" in str(first.error)
    assert answer == {"total": "42", "odd": "{1}"}  # a tool returns text; a set, its repr
    assert last.is_final_answer
