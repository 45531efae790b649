"""Tests of controlscope.models._toolcalls (Qwen2.5 tool-call text)."""

from __future__ import annotations

import json

from controlscope.core import ToolSpec
from controlscope.models import parse_tool_call
from controlscope.models._toolcalls import code_tool, parse_tool_calls, tool_call_id

EXEC = ToolSpec(
    name="execute_python",
    description="Run Python code",
    parameters={"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
)
READ = ToolSpec(
    name="read_text_file",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
)


def test_tagged_calls_are_parsed_in_order_with_prose() -> None:
    text = (
        "I will read two files.\n"
        '<tool_call>\n{"name": "read_text_file", "arguments": {"path": "a.txt"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "read_text_file", "arguments": {"path": "b.txt"}}\n</tool_call>'
    )
    prose, calls = parse_tool_calls(text, [READ])
    assert prose == "I will read two files."
    assert [c.parsed for c in calls] == [{"path": "a.txt"}, {"path": "b.txt"}]
    assert all(c.error is None and c.name == "read_text_file" for c in calls)
    assert json.loads(calls[0].arguments) == {"path": "a.txt"}
    assert calls[0].id != calls[1].id
    # ids are deterministic (replayable)
    assert parse_tool_calls(text, [READ])[1][0].id == calls[0].id


def test_raw_newlines_inside_code_strings_are_accepted() -> None:
    text = (
        '<tool_call>\n{"name": "execute_python", '
        '"arguments": {"code": "x = 1\nprint(x)"}}\n</tool_call>'
    )
    _, calls = parse_tool_calls(text, [EXEC])
    assert calls[0].parsed == {"code": "x = 1\nprint(x)"}


def test_double_encoded_arguments_are_decoded() -> None:
    text = '<tool_call>{"name": "read_text_file", "arguments": "{\\"path\\": \\"c\\"}"}</tool_call>'
    _, calls = parse_tool_calls(text, [READ])
    assert calls[0].parsed == {"path": "c"}


def test_malformed_call_keeps_raw_text_and_says_why() -> None:
    text = '<tool_call>\n{"name": "read_text_file", "arguments": {"path": "a.txt"\n</tool_call>'
    prose, calls = parse_tool_calls(text, [READ])
    assert prose is None
    (call,) = calls
    assert call.parsed is None
    assert call.name == "read_text_file"  # recovered from the raw text
    assert call.arguments == '{"name": "read_text_file", "arguments": {"path": "a.txt"'
    assert call.error is not None and "not valid JSON" in call.error


def test_unterminated_call_is_returned() -> None:
    _, calls = parse_tool_calls('<tool_call>\n{"name": "read_text_file", "argu', [READ])
    assert len(calls) == 1 and calls[0].parsed is None and calls[0].error


def test_non_object_arguments_are_an_error() -> None:
    _, calls = parse_tool_calls('<tool_call>{"name": "x", "arguments": [1]}</tool_call>', [READ])
    assert calls[0].parsed is None and "not a JSON object" in (calls[0].error or "")
    _, calls = parse_tool_calls("<tool_call>[1, 2]</tool_call>", [READ])
    assert calls[0].parsed is None and calls[0].name == ""


def test_fenced_json_call_object_is_a_call() -> None:
    text = '```json\n{"name": "execute_python", "arguments": {"code": "print(1)"}}\n```'
    prose, calls = parse_tool_calls(text, [EXEC])
    assert prose is None
    assert calls[0].name == "execute_python" and calls[0].parsed == {"code": "print(1)"}


def test_json_naming_unknown_tool_or_with_prose_is_prose() -> None:
    text = '```json\n{"name": "rm_rf", "arguments": {}}\n```'
    assert parse_tool_calls(text, [EXEC]) == (text, ())
    text = 'Here:\n```json\n{"name": "execute_python", "arguments": {"code": "1"}}\n```\nDone.'
    assert parse_tool_calls(text, [EXEC])[1] == ()


def test_fenced_python_instead_of_call_is_flagged() -> None:
    text = "Let me list it.\n```python\nprint(list_directory('.'))\n```"
    prose, calls = parse_tool_calls(text, [READ, EXEC])
    assert prose == text
    (call,) = calls
    assert call.name == "execute_python"
    assert call.parsed is None
    assert call.arguments == "```python\nprint(list_directory('.'))\n```"
    assert call.error is not None and "fenced code block" in call.error
    # without a code tool the fence is just prose
    assert parse_tool_calls(text, [READ]) == (text, ())


def test_code_tool_recognition() -> None:
    assert code_tool([READ, EXEC]) == EXEC
    assert code_tool([READ]) is None
    other = ToolSpec(name="exec_code", parameters={"properties": {"source": {"type": "string"}}})
    assert code_tool([other]) == other


def test_plain_text_has_no_calls() -> None:
    assert parse_tool_calls("The answer is 4.", [READ]) == ("The answer is 4.", ())
    assert parse_tool_calls("   ", []) == (None, ())


def test_only_python_fences_count_as_code() -> None:
    text = "Run this:\n```bash\nls -la\n```\nor this:\n```py\nprint(1)\n```"
    _, calls = parse_tool_calls(text, [EXEC])
    assert calls[0].arguments == "```py\nprint(1)\n```"
    assert parse_tool_calls("```bash\nls\n```", [EXEC])[1] == ()


def test_a_closing_tag_inside_a_json_string_does_not_end_the_call() -> None:
    code = 'print("<tool_call>")\nprint("</tool_call>")'
    text = "<tool_call>\n" + json.dumps({"name": "execute_python", "arguments": {"code": code}})
    prose, calls = parse_tool_calls(text + "\n</tool_call>\nThat runs it.", [EXEC])
    assert prose == "That runs it."
    (call,) = calls
    assert call.parsed == {"code": code} and call.error is None


def test_several_calls_in_one_block_are_several_calls() -> None:
    text = (
        '<tool_call>\n{"name": "read_text_file", "arguments": {"path": "a"}}\n'
        '{"name": "read_text_file", "arguments": {"path": "b"}}\n</tool_call>'
    )
    _, calls = parse_tool_calls(text, [READ])
    assert [c.parsed for c in calls] == [{"path": "a"}, {"path": "b"}]
    assert calls[0].id != calls[1].id


def test_text_after_a_call_object_in_its_block_is_reported() -> None:
    text = '<tool_call>{"name": "read_text_file", "arguments": {"path": "a"}}}</tool_call>'
    _, (good, junk) = parse_tool_calls(text, [READ])
    assert good.parsed == {"path": "a"}
    assert junk.parsed is None and junk.arguments == "}" and "not valid JSON" in (junk.error or "")


def test_empty_or_missing_arguments_are_an_empty_object_on_both_model_paths() -> None:
    for body in ('{"name": "list_allowed", "arguments": ""}', '{"name": "list_allowed"}'):
        _, (call,) = parse_tool_calls(f"<tool_call>{body}</tool_call>", [READ])
        assert call.parsed == {} and call.error is None
    assert parse_tool_call("c1", "list_allowed", "").parsed == {}
    assert parse_tool_call("c1", "list_allowed", None).parsed == {}


def test_one_id_scheme_for_local_and_openai_shaped_calls() -> None:
    arguments = {"path": "a.txt"}
    text = "<tool_call>" + json.dumps({"name": "read_text_file", "arguments": arguments})
    _, (local,) = parse_tool_calls(text + "</tool_call>", [READ])
    remote = parse_tool_call(None, "read_text_file", json.dumps(arguments), 0)
    assert local.id == remote.id == tool_call_id(json.dumps(arguments), 0, "read_text_file")
    assert parse_tool_call("given", "read_text_file", "{}").id == "given"


def test_the_program_of_a_fenced_answer_is_the_flagged_call() -> None:
    text = "Like `f()`:\n```python\nf()\n```\nThe program:\n```Python\nx = f()\nprint(x)\n```"
    _, (call,) = parse_tool_calls(text, [EXEC])
    assert call.arguments == "```Python\nx = f()\nprint(x)\n```" and call.parsed is None
