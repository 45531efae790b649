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
)
from controlscope.worker._apply import Cancel, MakeCall, apply_operation, block_data_arguments
from controlscope.worker._runtime import slot_positions

CODE = "data = read_text_file('a.txt', 3, encoding=enc)\nprint('done', data)\n"
# The block's constants table: 'a.txt' is slot 0, 3 slot 1, 'done' slot 2; the keyword
# argument ``encoding`` is a variable, so it has no slot.
SLOTS = {"path": 0, "head": 1}


def boundary(arguments: dict[str, Any], code: str = CODE) -> Boundary:
    return Boundary(
        block_id="b1",
        call_index=0,
        block_call_index=0,
        tool="read_text_file",
        arguments=arguments,
        line=1,
        call_site=CallSite(module="block_b1"),
        code=code,
    )


ARGS = {"path": "a.txt", "head": 3, "encoding": "latin-1"}


def apply(operation: Any, slots: dict[str, Any] = SLOTS) -> MakeCall | Cancel:
    return apply_operation(
        boundary(ARGS), operation, original_tree=ast.parse(CODE), literal_slots=slots
    )


def test_the_slots_used_here_are_the_runtime_numbering() -> None:
    tree = ast.parse(CODE)
    constants = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)]
    assert slot_positions(tree) == [0, 1, 2] and constants == ["a.txt", 3, "done"]


def test_keep_makes_the_call_as_the_block_made_it() -> None:
    applied = apply(Keep())
    assert applied == MakeCall(arguments=ARGS, code=CODE)
    assert applied.reply(ToolResult(text="x")) == {"t": "res", "text": "x"}


def test_patch_arguments_merges_into_the_pending_call() -> None:
    b = boundary(ARGS)
    applied = apply_operation(
        b, PatchArguments(arguments={"head": 5}), original_tree=ast.parse(CODE), literal_slots={}
    )
    assert isinstance(applied, MakeCall)
    assert applied.arguments == {"path": "a.txt", "head": 5, "encoding": "latin-1"}
    assert b.arguments == ARGS  # the boundary (logged as the proposal's context) is untouched
    assert applied.code == CODE and not applied.patched


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
