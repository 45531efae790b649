"""Tests of the planner's prompt rendering and reply parsing (controlscope.planner)."""

from __future__ import annotations

from controlscope.core import ModelResponse, ToolCall, ToolSchema
from controlscope.envs.filesystem.environment import FilesystemEnvironment
from controlscope.planner import (
    EXECUTE_PYTHON,
    assistant_message,
    parse_reply,
    render_signature,
    render_system_prompt,
)

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


def test_only_the_first_fenced_block_runs_and_the_rest_is_dropped() -> None:
    text = "Plan:\n```\n```\n```python\nprint(1)\n```\nOutput: 1\n```py\nprint(2)\n```"
    parsed = parse_reply(ModelResponse(text=text), fmt="fenced")
    assert [b.code for b in parsed.blocks] == ["print(1)"]
    assert parsed.blocks[0].tool_call_id is None
    assert parsed.text == "Plan:\n```\n```\n```python\nprint(1)\n```"
    assert assistant_message(ModelResponse(text=text), parsed).content == parsed.text


def test_a_reply_without_code_is_the_final_answer() -> None:
    assert parse_reply(ModelResponse(text="All done."), fmt="fenced").final
    assert parse_reply(ModelResponse(text="```json\n{}\n```"), fmt="tools").blocks == ()
