"""Applying a realized operation at a boundary (``controlscope.worker._apply``), without a worker.

Paper section 3.1 and A.2: a patch merges new argument values into the pending call; a
block-data rewrite takes the rewrite's constants, so the pending call's plain-literal arguments
take their new values; a replacement cancels the pending call.
"""

from __future__ import annotations

import ast
from typing import Any

import pytest

from controlscope.core import (
    Boundary,
    CallSite,
    Keep,
    PatchArguments,
    PatchBlockData,
    ReplaceWorkflow,
    ToolResult,
    ToolSchema,
    tool_params,
)
from controlscope.worker._apply import (
    Cancel,
    MakeCall,
    apply_operation,
    block_data_arguments,
    final_arguments,
)
from controlscope.worker._runtime import slot_positions

CODE = "data = read_text_file('a.txt', 3, encoding=enc)\nprint('done', data)\n"
# The block's constants table: 'a.txt' is slot 0, 3 slot 1, 'done' slot 2; the keyword
# argument ``encoding`` is a variable, so it has no slot.
SLOTS = {"path": 0, "head": 1}


def boundary(
    arguments: dict[str, Any], code: str = CODE, slots: dict[str, int] = SLOTS, **more: Any
) -> Boundary:
    return Boundary(
        block_id="b1",
        call_index=0,
        block_call_index=0,
        tool="read_text_file",
        arguments=arguments,
        line=1,
        call_site=CallSite(module="block_b1"),
        code=code,
        literal_slots=slots,
        **more,
    )


ARGS = {"path": "a.txt", "head": 3, "encoding": "latin-1"}


def apply(operation: Any, slots: dict[str, int] = SLOTS) -> MakeCall | Cancel:
    return apply_operation(boundary(ARGS, slots=slots), operation, original_tree=ast.parse(CODE))


def test_the_slots_used_here_are_the_runtime_numbering() -> None:
    tree = ast.parse(CODE)
    constants = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    assert slot_positions(tree) == [0, 1, 2] and constants == ["a.txt", 3, "done"]


def test_keep_makes_the_call_as_the_block_made_it() -> None:
    applied = apply(Keep())
    assert applied == MakeCall(arguments=ARGS, code=CODE)
    assert applied.reply(ToolResult(text="x")) == {"t": "res", "text": "x"}


def test_patch_arguments_merges_into_the_pending_call() -> None:
    b = boundary(ARGS, slots={})
    applied = apply_operation(
        b, PatchArguments(arguments={"head": 5}), original_tree=ast.parse(CODE)
    )
    assert isinstance(applied, MakeCall)
    assert applied.arguments == {"path": "a.txt", "head": 5, "encoding": "latin-1"}
    assert b.arguments == ARGS  # the boundary (logged as the proposal's context) is untouched
    assert applied.code == CODE and not applied.patched
    assert applied.operation == "patch_arguments" and applied.requested == ARGS


def test_block_data_rewrite_maps_slots_to_the_literal_arguments() -> None:
    new = CODE.replace("'a.txt', 3", "'b.txt', 7").replace("'done'", "'over'")
    applied = apply(PatchBlockData(code=new))
    assert isinstance(applied, MakeCall)
    # literal arguments take the rewrite's values; the variable argument keeps the call's
    assert applied.arguments == {"path": "b.txt", "head": 7, "encoding": "latin-1"}
    assert applied.code == new and applied.patched
    assert applied.reply(ToolResult(text="x")) == {"t": "res", "text": "x", "code": new}
    # a tool error still hands the worker the rewrite: its constants hold for the rest
    assert applied.reply(ToolResult(text="no", is_error=True)) == {
        "t": "err",
        "msg": "no",
        "code": new,
    }


def test_block_data_ignores_bad_slots_and_non_json_values() -> None:
    code = "read_text_file('a.txt', b'raw')\n"
    new = "read_text_file('z.txt', b'other')\n"
    slots = {"path": 0, "head": 1, "bogus": 99, "neg": -1, "text": "0"}
    # slot 1 holds bytes (no JSON value): the call keeps its argument
    assert block_data_arguments(ast.parse(code), new, slots) == {"path": "z.txt"}


@pytest.mark.parametrize(
    ("rewrite", "match"),
    [
        ("data = read_text_file('a.txt', 3, encoding=enc) + 1\nprint('done', data)\n", "structure"),
        ("data = read_text_file('a.txt',\n", "does not parse"),
    ],
)
def test_block_data_rewrite_must_keep_the_structure(rewrite: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        apply(PatchBlockData(code=rewrite))


def test_replacement_cancels_the_pending_call() -> None:
    applied = apply(ReplaceWorkflow(code="print('instead')"))
    assert applied == Cancel(replacement="print('instead')")
    assert applied.message == {"t": "cancel"}


def test_unknown_operation_is_refused() -> None:
    with pytest.raises(TypeError, match="unknown operation"):
        apply(object())


READ_PARAMS = tool_params(
    ToolSchema(
        name="read_text_file",
        input_schema={
            "type": "object",
            "properties": {"path": {}, "head": {}, "encoding": {}},
            "required": ["path"],
        },
    )
)


def test_a_block_data_rewrite_that_changes_none_of_the_calls_arguments_says_so() -> None:
    new = CODE.replace("'done'", "'over'")
    applied = apply(PatchBlockData(code=new))
    assert isinstance(applied, MakeCall)
    assert applied.arguments == ARGS == applied.requested
    assert applied.notice is not None and "unchanged" in applied.notice
    assert "keeps the values of its literal arguments" in applied.notice
    # no literal argument at all: the notice says that
    final = final_arguments(boundary(ARGS, slots={}), PatchBlockData(code=new))
    assert final.arguments == ARGS and final.notice is not None
    assert "none of its arguments is a literal" in final.notice
    # a rewrite that changes the call has no notice
    assert (
        final_arguments(boundary(ARGS), PatchBlockData(code=CODE.replace("3", "4"))).notice is None
    )


def test_an_optional_literal_set_to_none_is_left_out_as_the_proxy_does() -> None:
    new = CODE.replace("'a.txt', 3", "'a.txt', None")
    final = final_arguments(boundary(ARGS), PatchBlockData(code=new), params=READ_PARAMS)
    assert final.arguments == {"path": "a.txt", "encoding": "latin-1"}
    # a required parameter keeps its key: the tool's function sends None for it
    new = CODE.replace("'a.txt', 3", "None, 3")
    final = final_arguments(boundary(ARGS), PatchBlockData(code=new), params=READ_PARAMS)
    assert final.arguments == {"path": None, "head": 3, "encoding": "latin-1"}


def test_block_data_at_a_call_it_cannot_edit_is_never_applied() -> None:
    b = boundary(ARGS, slots={}, params_refusal="called indirectly")
    with pytest.raises(ValueError, match="cannot edit"):
        apply_operation(
            b, PatchBlockData(code=CODE.replace("3", "4")), original_tree=ast.parse(CODE)
        )
