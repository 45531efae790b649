"""``patch_block_data`` (Params, paper section A.2: "coordinated data edits"): the running block
rewritten with other constant values, its syntax tree otherwise the same.

The worker makes a rewrite effective by compiling each block with its constants turned into
lookups in a per-block table and refilling the table (:mod:`controlscope.core._block_data`);
the checks here use the same walk, so what validation accepts the worker can make effective.
"""

from __future__ import annotations

import ast
import functools
import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from controlscope.core._block_data import (
    constants_in_order,
    slot_positions,
    slot_values,
    structure_key,
)
from controlscope.core._execution import Boundary
from controlscope.core._op_base import (
    FinalArguments,
    MalformedOperationError,
    OperationSpec,
    PayloadShape,
    Rejection,
    code_field,
    code_size,
    compile_block,
    schema_regression,
    syntax_detail,
)
from controlscope.core._operations import OperationKind, SummaryGroup
from controlscope.core._signature import ToolParam, tool_params
from controlscope.core._tools import ToolSchema

#: Constant types that may change into one another in a block-data patch (JSON scalars).
SCALAR_TYPES: tuple[type, ...] = (str, int, float, bool, type(None))


class PatchBlockData(BaseModel):
    """Params: a rewrite of the whole current block whose syntax tree equals the original except for
    constant values.

    Attributes:
        code: the rewritten block's full source.
    """

    model_config = ConfigDict(frozen=True)
    kind: Literal["patch_block_data"] = "patch_block_data"
    code: str


class PatchBlockDataSpec(OperationSpec[PatchBlockData]):
    """``patch_block_data``: the rewrite's constants take effect for the rest of the block, and
    the pending call's plain-literal arguments take their new values."""

    kind: ClassVar[OperationKind] = "patch_block_data"
    model = PatchBlockData
    payload: ClassVar[PayloadShape] = "code"
    group: ClassVar[SummaryGroup | None] = "patches"
    counter = "block_data_patches"
    label = "block-data patches"
    noun = "block-data edit"
    description = (
        "Rewrite the running block changing only constant values (strings, numbers, booleans); "
        "its code structure stays identical. `constants` maps the numbers of the block's "
        "constants (listed under BLOCK DATA) to their new values."
    )
    rule = (
        "patch_block_data: the running block runs on with only constant values changed "
        "(strings, numbers, True/False/None); every statement, name and call stays the same. "
        '"constants" maps the numbers of the constants listed under BLOCK DATA to new values.'
    )
    answer_field = '"constants": {number: new value}'

    def parse(self, payload: Mapping[str, Any]) -> PatchBlockData:
        """``payload["code"]``, a string (unfenced)."""
        return PatchBlockData(code=code_field(self.kind, payload))

    def parse_at(self, payload: Mapping[str, Any], boundary: Boundary | None) -> PatchBlockData:
        """``payload["code"]``; or, when the answer gives ``constants`` and no ``code`` (the
        payload :meth:`payload_schema` asks for), the running block with those constants
        (:func:`block_with_constants`).

        Raises:
            MalformedOperationError: no ``code`` nor ``constants`` (with a boundary), or
                ``constants`` that cannot be written into the block.
        """
        if "code" in payload or boundary is None or "constants" not in payload:
            return self.parse(payload)
        try:
            return PatchBlockData(code=block_with_constants(boundary.code, payload["constants"]))
        except ValueError as exc:
            raise MalformedOperationError(self.kind, str(exc)) from None

    def payload_schema(
        self, boundary: Boundary | None = None, tool: ToolSchema | None = None
    ) -> dict[str, Any]:
        """``{"constants": ...}``: the running block's editable slots
        (:func:`constants_schema`); the generic ``code`` when the call's data cannot be edited
        or the block has no editable constant."""
        if boundary is None or boundary.params_refusal is not None:
            return super().payload_schema(boundary, tool)
        narrowed = constants_schema(boundary.code)
        if narrowed is None:
            return super().payload_schema(boundary, tool)
        return {"constants": narrowed}

    def check(self, op: PatchBlockData, boundary: Boundary, tool: ToolSchema) -> Rejection | None:
        """Rules 3 and 5 of :func:`controlscope.scope.validate_operation`."""
        if (too_large := code_size(self.kind, op.code)) is not None:
            return too_large
        if boundary.params_refusal is not None:
            return Rejection(
                "data_not_editable",
                f"patch_block_data cannot edit this call's data: {boundary.params_refusal}",
            )
        try:
            new_tree = compile_block(op.code, "<patch_block_data>")
        except SyntaxError as exc:
            return Rejection(
                "syntax_error", f"the new block does not compile: {syntax_detail(exc)}"
            )
        try:
            old_tree, old_key = _running_block(boundary.code)
        except SyntaxError as exc:
            return Rejection(
                "structure_changed",
                f"the running block's own code does not compile, so nothing can match it: "
                f"{syntax_detail(exc)}",
            )
        if old_key != structure_key(new_tree):
            return Rejection(
                "structure_changed",
                "the new block's syntax tree differs from the running block's beyond constant "
                f"values{_first_difference(old_tree, new_tree)}",
            )
        if (changes := _constant_changes(old_tree, new_tree)) is not None:
            return changes
        final = self.final_arguments(op, boundary, params=_params(tool))
        return schema_regression(boundary, tool, final.arguments)

    def final_arguments(
        self,
        op: PatchBlockData,
        boundary: Boundary,
        *,
        params: Sequence[ToolParam] = (),
        original_tree: ast.Module | None = None,
    ) -> FinalArguments:
        """The pending call's arguments with its plain-literal ones from the rewrite (an
        optional parameter whose new literal is ``None`` is left out, as the tool's function
        does), and a notice when none of them changes.

        Raises:
            ValueError: a call whose data it cannot edit, or a rewrite that does not parse or
                changes the block's structure.
        """
        if boundary.params_refusal is not None:
            raise ValueError(f"patch_block_data cannot edit this call: {boundary.params_refusal}")
        arguments = dict(boundary.arguments)
        tree = original_tree if original_tree is not None else ast.parse(boundary.code)
        optional = {p.name for p in params if not p.required}
        for name, value in block_data_arguments(tree, op.code, boundary.literal_slots).items():
            if value is None and name in optional:
                arguments.pop(name, None)  # the tool's function leaves out an optional None
            else:
                arguments[name] = value
        if arguments != boundary.arguments:
            return FinalArguments(arguments)
        why = (
            "none of its arguments is a literal at its call site"
            if not boundary.literal_slots
            else "the rewrite keeps the values of its literal arguments"
        )
        notice = (
            f"patch_block_data left this call's arguments unchanged ({why}); the rewrite's "
            "constants take effect for the rest of the block"
        )
        return FinalArguments(arguments, notice)

    def new_code(self, op: PatchBlockData) -> str:
        """The rewrite: the running block's source from now on."""
        return op.code

    def note(self, boundary: Boundary) -> str | None:
        """:attr:`Boundary.params_note` (the call's data cannot be edited, or no argument of it
        is a literal), and the block's editable constants by number (what ``constants`` of a
        ``patch_block_data`` names), one JSON line each, every line break escaped."""
        notes = [boundary.params_note] if boundary.params_note else []
        if boundary.params_refusal is None and constants_schema(boundary.code) is not None:
            table = editable_constants(boundary.code)
            notes.append(
                'the running block\'s constants by number ("constants" of patch_block_data): '
                + json.dumps({str(k): v for k, v in table.items()})
            )
            if boundary.literal_slots:
                notes.append(
                    "the pending call's literal arguments are the constants: "
                    + json.dumps(boundary.literal_slots)
                )
        return "\n".join(notes) or None

    def shown(self, op: PatchBlockData) -> dict[str, Any]:
        """``{"code_lines": n}``."""
        return {"code_lines": len(op.code.splitlines())}


def _editable(tree: ast.Module) -> dict[int, ast.Constant]:
    """Slot -> constant node, for every slot whose value is a JSON scalar written as a literal
    of its own (not f-string text: its position is not its own on every Python)."""
    in_fstrings = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for n in ast.walk(node)
        if isinstance(n, ast.Constant)
    }
    constants = constants_in_order(tree)
    out: dict[int, ast.Constant] = {}
    for slot, index in enumerate(slot_positions(tree)):
        node = constants[index]
        if id(node) not in in_fstrings and isinstance(node.value, SCALAR_TYPES):
            out[slot] = node
    return out


def editable_constants(code: str) -> dict[int, Any]:
    """The block's constants a ``constants`` answer may change: slot -> value (JSON scalars
    written as literals of their own; f-string text and bytes are left out).

    Raises:
        SyntaxError: the code does not parse.
    """
    return {slot: node.value for slot, node in _editable(ast.parse(code)).items()}


def _scalar_schema(value: Any) -> dict[str, Any]:
    if isinstance(value, bool):
        return {"type": "boolean"}
    if isinstance(value, int | float):
        return {"type": "number"}
    if isinstance(value, str):
        return {"type": "string"}
    return {"type": ["string", "number", "boolean", "null"]}


def constants_schema(code: str) -> dict[str, Any] | None:
    """The JSON schema of a ``patch_block_data``'s ``constants``: an object from a slot number
    (``"0"``, ``"1"``...) of the block's editable constants (:func:`editable_constants`) to a
    new value of the constant's type (a number for a number, any scalar for ``None``), none
    required, no other name; None when the code does not parse or has no editable constant.

    Args:
        code: the running block's source.
    """
    try:
        table = editable_constants(code)
    except (SyntaxError, ValueError):
        return None
    if not table:
        return None
    return {
        "type": "object",
        "properties": {str(slot): _scalar_schema(v) for slot, v in table.items()},
        "additionalProperties": False,
    }


def block_with_constants(code: str, constants: object) -> str:
    """The block ``code`` with some editable constants (:func:`editable_constants`) given new
    values: each named literal's source text is replaced by the new value's ``repr``; the
    rest of the text is untouched (a rewrite :meth:`PatchBlockDataSpec.check` then judges).

    Args:
        code: the running block's source.
        constants: slot number (a decimal string) -> new JSON scalar.

    Raises:
        ValueError: not an object, a name that is no editable slot, a value that is not a JSON
            scalar, or a block that does not parse.
    """
    if not isinstance(constants, Mapping):
        raise ValueError(f"'constants' must be an object, got {type(constants).__name__}")
    try:
        nodes = _editable(ast.parse(code))
    except SyntaxError as exc:
        raise ValueError(f"the running block does not parse: {exc}") from None
    lines = code.encode().splitlines(keepends=True)
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    edits: list[tuple[int, int, str]] = []
    for key, value in constants.items():
        slot = int(key) if isinstance(key, str) and key.isdigit() else -1
        node = nodes.get(slot)
        if node is None or node.end_lineno is None or node.end_col_offset is None:
            raise ValueError(f"{key!r} names no editable constant of the running block")
        if not isinstance(value, SCALAR_TYPES):
            raise ValueError(
                f"constant {key} must become a JSON scalar, got {type(value).__name__}"
            )
        begin = starts[node.lineno - 1] + node.col_offset
        end = starts[node.end_lineno - 1] + node.end_col_offset
        edits.append((begin, end, repr(value)))
    data = code.encode()
    for begin, end, text in sorted(edits, reverse=True):
        data = data[:begin] + text.encode() + data[end:]
    return data.decode()


def _constant_changes(old_tree: ast.Module, new_tree: ast.Module) -> Rejection | None:
    """Rule 5's constants: only data constants change, among scalar types; at least one."""
    slots = set(slot_positions(old_tree))
    changed = 0
    pairs = zip(constants_in_order(old_tree), constants_in_order(new_tree), strict=True)
    for index, (old_node, new_node) in enumerate(pairs):
        old, new = old_node.value, new_node.value
        if _same_value(old, new):
            continue
        where = f"the constant {old!r} on line {new_node.lineno}"
        if index not in slots:
            return Rejection(
                "structure_changed",
                f"{where} is an f-string format spec, a docstring or a case pattern: it is not "
                "block data and the running block would not see the change",
            )
        if not _type_change_allowed(old, new):
            return Rejection(
                "structure_changed",
                f"{where} changes type from {type(old).__name__} to {type(new).__name__} "
                f"({new!r}); only str/int/float/bool/None may change into one another",
            )
        changed += 1
    if not changed:
        return Rejection("empty_patch", "the new block has the same constants")
    return None


def block_data_constants(code: str) -> list[Any]:
    """The values of a block's *data constants*: what a block-data patch may change.

    The worker makes a ``patch_block_data`` effective by compiling each block with its constants
    turned into lookups in a per-block table and refilling the table from the rewrite; the
    constants it tabulates are the data constants. This function and the scope validation use
    the worker's own walk (:mod:`controlscope.core._block_data`: ``constants_in_order``,
    ``slot_positions``, ``structure_key``), so validation accepts exactly what the worker can
    make effective. Data constants: every literal constant in depth-first ``ast`` field order
    (a dict's keys before its values), f-string literal text included, except f-string format
    specs (``:.2f``), ``match``/``case`` patterns and docstrings. A signed number ``-1`` is the
    constant ``1`` under a minus sign (the sign is structure). An f-string text part cannot
    become empty (the syntax tree has no empty parts).

    Args:
        code: Python source of one block.

    Returns:
        The data constants' values, in table order.

    Raises:
        SyntaxError: the code does not parse.
    """
    constants = constants_in_order(tree := ast.parse(code))
    return [constants[i].value for i in slot_positions(tree)]


def block_data_arguments(
    original_tree: ast.Module, code: str, literal_slots: Mapping[str, Any]
) -> dict[str, Any]:
    """Check a ``patch_block_data`` rewrite; return the pending call's re-evaluated literals.

    Semantics: the rewrite must have the block's syntax tree except constant values. From the
    pending call on, every evaluation of a literal of this block (later statements, loop
    iterations, functions the block defines, even when called later) yields the rewrite's value;
    values already computed and stored (variables, default arguments, earlier calls) keep
    theirs. The pending call's arguments that are plain literals at its call site take the new
    values; other arguments are unchanged.

    Args:
        original_tree: the block as it started (parsed).
        code: the rewrite.
        literal_slots: parameter name -> slot of the block's constants table (entries that are
            not a valid slot are ignored).

    Returns:
        Parameter name -> the rewrite's value, for each literal argument whose new value is a
        JSON scalar.

    Raises:
        ValueError: the rewrite does not parse or changes the block's structure.
    """
    try:
        new_tree = ast.parse(code)
    except SyntaxError as exc:
        raise ValueError(f"patch_block_data code does not parse: {exc}") from None
    if structure_key(new_tree) != structure_key(original_tree):
        raise ValueError("patch_block_data code changes the block's structure")
    values = slot_values(new_tree, slot_positions(original_tree))
    out: dict[str, Any] = {}
    for name, slot in literal_slots.items():
        if isinstance(slot, int) and 0 <= slot < len(values):
            value = values[slot]
            if isinstance(value, SCALAR_TYPES):
                out[name] = value
    return out


def _same_value(old: Any, new: Any) -> bool:
    """Equal type and representation (so ``1`` vs ``1.0`` vs ``True`` differ, and nan == nan)."""
    return type(old) is type(new) and repr(old) == repr(new)


def _type_change_allowed(old: Any, new: Any) -> bool:
    return type(old) is type(new) or (
        isinstance(old, SCALAR_TYPES) and isinstance(new, SCALAR_TYPES)
    )


def _params(tool: ToolSchema) -> list[ToolParam]:
    """The tool's parameters; none when its schema cannot describe a Python function."""
    try:
        return tool_params(tool)
    except ValueError:
        return []


@functools.lru_cache(maxsize=32)
def _running_block(code: str) -> tuple[ast.Module, str]:
    """The running block's compiled tree and structure key (cached: every block-data review of
    one boundary compares against the same block). The tree must not be modified.

    Raises:
        SyntaxError: the block does not compile.
    """
    tree = compile_block(code, "<block>")
    return tree, structure_key(tree)


def _first_difference(old: ast.Module, new: ast.Module) -> str:
    """Point at the first top-level statement whose structure differs."""
    for old_stmt, new_stmt in zip(old.body, new.body, strict=False):
        if structure_key(old_stmt) != structure_key(new_stmt):
            return f" (first at the statement on line {new_stmt.lineno} of the new block)"
    if len(old.body) != len(new.body):
        return (
            f" (the block has {len(old.body)} top-level statements, the new code {len(new.body)})"
        )
    return ""


PATCH_BLOCK_DATA = PatchBlockDataSpec()
"""The ``patch_block_data`` entry of :data:`controlscope.core.OPERATIONS`."""
