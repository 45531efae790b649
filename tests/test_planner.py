"""Tests of the planner's prompt rendering and reply parsing (controlscope.planner)."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from controlscope.core import ModelResponse, ToolCall, ToolSchema
from controlscope.envs.filesystem.environment import FilesystemEnvironment
from controlscope.planner import (
    EXECUTE_PYTHON,
    assistant_message,
    parse_reply,
    render_signature,
    render_system_prompt,
)
from controlscope.worker import generate_proxies

READ = ToolSchema(
    name="read_text_file",
    description="Read a file as text.",
    input_schema={
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "head": {"type": "number", "description": "first N lines"},
        },
        "required": ["path"],
    },
)
WRITE = ToolSchema(
    name="write_file",
    description="Write a file.",
    input_schema={
        "type": "object",
        "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
        "required": ["path", "content"],
    },
)
LIST = ToolSchema(
    name="list_directory",
    description="List a directory.",
    input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
)


def test_signature_puts_required_first_with_defaults_for_optional() -> None:
    sig = render_signature(READ)
    assert sig.startswith("def read_text_file(path: str, head: float = None) -> str:")
    assert "Read a file as text." in sig
    compile(sig + "\n", "<sig>", "exec")


def test_system_prompt_shows_tools_and_the_environments_worked_example() -> None:
    env = FilesystemEnvironment()
    example = env.planner_example("tools")
    prompt = render_system_prompt([READ, WRITE, LIST], fmt="tools", example=example)
    assert "def write_file(path: str, content: str) -> str:" in prompt
    assert "Example (" in prompt and "[calls execute_python with code:]" in prompt
    assert "Example (" not in render_system_prompt([READ, WRITE, LIST], fmt="tools")
    fenced = env.planner_example("fenced")
    assert "```python" in fenced and "execute_python" not in fenced
    assert fenced in render_system_prompt([READ], fmt="fenced", example=fenced)


def test_restricted_task_prompt_says_so() -> None:
    assert "restricts Python" in render_system_prompt([READ], fmt="tools", python_allowed=False)
    assert "restricts Python" not in render_system_prompt([READ], fmt="tools")


def _call(call_id: str, name: str, arguments: str, parsed: dict[str, object] | None) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=arguments, parsed=parsed)


def test_native_calls_become_queued_blocks_in_order() -> None:
    response = ModelResponse(
        tool_calls=(
            _call("a", EXECUTE_PYTHON, '{"code": "x = 1"}', {"code": "x = 1"}),
            _call("b", EXECUTE_PYTHON, '{"code": "print(x)"}', {"code": "print(x)"}),
        )
    )
    parsed = parse_reply(response, fmt="tools")
    assert [b.code for b in parsed.blocks] == ["x = 1", "print(x)"]
    assert [b.tool_call_id for b in parsed.blocks] == ["a", "b"]
    assert not parsed.final and not parsed.malformed


def test_malformed_and_unknown_calls_are_reported_not_run() -> None:
    response = ModelResponse(
        tool_calls=(
            _call("a", EXECUTE_PYTHON, "{not json", None),
            _call("b", "read_text_file", '{"path": "/x"}', {"path": "/x"}),
            _call("c", EXECUTE_PYTHON, '{"source": "x"}', {"source": "x"}),
        )
    )
    parsed = parse_reply(response, fmt="tools")
    assert parsed.blocks == ()
    assert [m[0] for m in parsed.malformed] == ["a", "b", "c"]
    assert "unknown tool" in parsed.malformed[1][1]
    assert not parsed.final


def test_an_imagined_next_turn_is_dropped_with_its_block() -> None:
    text = "Plan:\n```\n```\n```python\nprint(1)\n```\nOutput: 1\n```py\nprint(2)\n```"
    parsed = parse_reply(ModelResponse(text=text), fmt="fenced")
    assert [b.code for b in parsed.blocks] == ["print(1)"]
    assert parsed.blocks[0].tool_call_id is None
    assert parsed.text == "Plan:\n```\n```\n```python\nprint(1)\n```"
    assert assistant_message(ModelResponse(text=text), parsed).content == parsed.text


def test_a_reply_without_code_is_the_final_answer() -> None:
    assert parse_reply(ModelResponse(text="All done."), fmt="fenced").final
    assert parse_reply(ModelResponse(text="```json\n{}\n```"), fmt="tools").blocks == ()


def _fenced(text: str) -> list[str]:
    return [b.code for b in parse_reply(ModelResponse(text=text), fmt="fenced").blocks]


def test_the_program_after_a_snippet_in_the_reasoning_is_the_one_that_runs() -> None:
    text = (
        "To list a folder I call:\n```python\nlist_directory(path='/workspace')\n```\n"
        "Here is the whole program:\n```python\nfor d in dirs:\n    print(d)\n```\nDone."
    )
    parsed = parse_reply(ModelResponse(text=text), fmt="fenced")
    assert [b.code for b in parsed.blocks] == ["for d in dirs:\n    print(d)"]
    assert parsed.text is not None and parsed.text.endswith("print(d)\n```")


def test_backticks_in_a_string_literal_do_not_end_the_program() -> None:
    code = 'report = "```\\nsummary\\n```"\nwrite_file(path="r.md", content=report)'
    assert _fenced(f"```python\n{code}\n```") == [code]
    block = 's = """\n```\n"""'  # a fence line inside the code needs a longer fence
    assert _fenced(f"````python\n{block}\n````") == [block]


@pytest.mark.parametrize("label", ["python", "Python", "PY", "py", "python3", "Python3", ""])
def test_python_labels_are_recognised_in_any_case(label: str) -> None:
    assert _fenced(f"```{label}\nprint(1)\n```") == ["print(1)"]


def test_a_cut_off_program_still_runs_what_was_written() -> None:
    assert _fenced("Let me:\n```python\nx = 1\nprint(x)") == ["x = 1\nprint(x)"]


def test_code_in_another_language_is_not_a_final_answer() -> None:
    parsed = parse_reply(
        ModelResponse(text="Run:\n```bash\ncat /workspace/a.txt\n```"), fmt="fenced"
    )
    assert not parsed.final and parsed.blocks == () and parsed.notice is not None
    assert "```bash" in parsed.notice and "```python" in parsed.notice
    data = parse_reply(ModelResponse(text="Done:\n```csv\nid,name\nS1,Ann\n```"), fmt="fenced")
    assert data.final and data.notice is None


def test_the_prompt_shows_the_proxy_the_worker_runs() -> None:
    odd = ToolSchema(
        name="list-dir",
        description="List.",
        input_schema={
            "properties": {
                "depth": {"type": "integer", "default": 1},
                "from": {"type": "string"},
                "filter": {"type": ["string", "null"]},
            },
            "required": ["from"],
        },
    )
    sig = render_signature(odd)
    assert sig.startswith("def list_dir(from_: str, depth: int = 1, filter: str = None) -> str:")
    scope: dict[str, Any] = {"_cs_call": lambda tool, args: (tool, args)}
    exec(generate_proxies([odd]).source, scope)
    proxy = scope["list_dir"]
    shown: dict[str, Any] = {}
    exec(sig + "\n", shown)

    def shape(function: Any) -> list[tuple[str, Any]]:
        return [(p.name, p.default) for p in inspect.signature(function).parameters.values()]

    assert (
        shape(proxy)
        == shape(shown["list_dir"])
        == [
            ("from_", inspect.Parameter.empty),
            ("depth", 1),
            ("filter", None),
        ]
    )
    # an optional parameter left at None is not sent; a required one always is
    assert proxy("/a") == ("list-dir", {"from": "/a", "depth": 1})
    assert proxy("/a", 2, "x") == ("list-dir", {"from": "/a", "depth": 2, "filter": "x"})
    assert proxy(None, None) == ("list-dir", {"from": None})
