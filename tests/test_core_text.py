"""Tests of the model-text helpers (controlscope.core._text): CommonMark fences, the program of a
reply, JSON objects in prose."""

from __future__ import annotations

import pytest

from controlscope.core import (
    fence,
    fences,
    find_json_object,
    foreign_fence,
    json_objects,
    program_fence,
    unfence,
)


def test_a_fence_closes_only_on_a_line_of_at_least_as_many_backticks() -> None:
    text = 'Here:\n````python\ns = "```"\nprint("""\n```\n""")\n`````\nafter'
    (block,) = fences(text)
    assert block.body == 's = "```"\nprint("""\n```\n""")'
    assert block.closed and text[block.end :] == "\nafter"
    assert text[block.start : block.end].startswith("````python")


def test_backticks_inside_a_code_line_never_close_the_block() -> None:
    text = '```python\nmd = "```python\\nx\\n```"\nprint(md)\n```'
    (block,) = fences(text)
    assert block.body == 'md = "```python\\nx\\n```"\nprint(md)'


@pytest.mark.parametrize(
    ("opening", "language"),
    [
        ("```python", "python"),
        ("```Python", "python"),
        ("``` PY {.numberLines}", "py"),
        ("```python3", "python3"),
        ("~~~python", "python"),
        ("```", ""),
    ],
)
def test_info_strings_are_read_case_insensitively(opening: str, language: str) -> None:
    (block,) = fences(f"{opening}\nx = 1\n{opening[:3]}")
    assert (block.language, block.body) == (language, "x = 1")


def test_tildes_and_backticks_do_not_close_each_other() -> None:
    (block,) = fences("~~~\na\n```\nb\n~~~")
    assert block.body == "a\n```\nb"


def test_an_unterminated_fence_runs_to_the_end() -> None:
    text = "Sure:\n```python\nfor i in range(3):\n    print(i)"
    (block,) = fences(text)
    assert not block.closed and block.end == len(text)
    assert block.body == "for i in range(3):\n    print(i)"


def test_an_indented_fence_loses_its_indentation_and_crlf_is_read() -> None:
    (block,) = fences("1. Run:\r\n   ```python\r\n   if x:\r\n       y()\r\n   ```\r\n")
    assert block.body == "if x:\n    y()"


def test_a_backtick_info_string_with_backticks_is_not_a_fence() -> None:
    assert fences("```python``` is inline") == []


def test_unfence_takes_the_body_only_when_the_whole_text_is_one_block() -> None:
    assert unfence("\n```python\nx = 1\n```\n") == "x = 1"
    assert unfence("```\nx = 1") == "x = 1"  # cut off
    for kept in ("print('```')", "a = 1\n```python\nb = 2\n```", "```\na\n```\n```\nb\n```"):
        assert unfence(kept) == kept


def test_the_program_is_the_last_python_block_not_a_snippet_in_the_reasoning() -> None:
    text = (
        "I can read a file with:\n```python\nread_text_file(path='x')\n```\n"
        "So the program is:\n```python\nfor p in paths:\n    print(read_text_file(path=p))\n```\n"
    )
    block = program_fence(text)
    assert block is not None and block.body.startswith("for p in paths")


def test_an_imagined_transcript_after_a_block_is_not_part_of_the_reply() -> None:
    text = "```python\nprint(1)\n```\nOutput: 1\nAssistant:\n```python\nprint(2)\n```"
    block = program_fence(text)
    assert block is not None and block.body == "print(1)"


def test_labelled_python_beats_unlabelled_blocks_which_count_only_alone() -> None:
    text = "```python\nprint(x)\n```\nIt prints:\n```\n42\n```"
    assert getattr(program_fence(text), "body", None) == "print(x)"
    assert getattr(program_fence("```\nprint(2)\n```"), "body", None) == "print(2)"
    assert program_fence("```python\n\n```\n```bash\nls\n```") is None


def test_foreign_fences_are_code_in_another_language_not_data() -> None:
    assert getattr(foreign_fence("```bash\nls -la\n```"), "language", None) == "bash"
    assert foreign_fence("```csv\nid,name\n```\n```JSON\n{}\n```") is None
    assert foreign_fence("```python\nx\n```") is None


def test_fence_is_never_closed_by_the_code_it_holds() -> None:
    code = 'doc = """\n```\nexample\n````\n"""'
    (block,) = fences(fence(code))
    assert block.body == code and block.language == "python"
    assert fence("x = 1") == "```python\nx = 1\n```"


def test_find_json_object_looks_in_the_whole_text_fences_and_prose() -> None:
    assert find_json_object('{"operation": "keep"}', key="operation") == {"operation": "keep"}
    fenced = 'Sure:\n```json\n{"reason": "r", "operation": "keep"}\n```'
    assert find_json_object(fenced, key="operation") == {"reason": "r", "operation": "keep"}
    nested = '{"answer": {"operation": "keep"}}'
    assert find_json_object(nested, key="operation") == {"operation": "keep"}
    raw_newline = '{"operation": "replace_workflow", "code": "a = 1\nprint(a)"}'
    assert find_json_object(raw_newline, key="operation") == {
        "operation": "replace_workflow",
        "code": "a = 1\nprint(a)",
    }
    assert find_json_object("keep it {not json}", key="operation") is None


def test_json_objects_in_order_nested_included() -> None:
    assert list(json_objects('a {"x": {"y": 1}} b [2] {"z": 3')) == [{"x": {"y": 1}}, {"y": 1}]
