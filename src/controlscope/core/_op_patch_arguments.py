"""``patch_arguments`` (Arg, paper section 3.1): new values for some data arguments of the
pending primitive call; the program continues unchanged."""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict

from controlscope.core._code_params import code_parameters
from controlscope.core._execution import Boundary
from controlscope.core._op_base import (
    FinalArguments,
    OperationSpec,
    PayloadShape,
    Rejection,
    arguments_field,
    schema_regression,
)
from controlscope.core._operations import OperationKind, SummaryGroup
from controlscope.core._signature import ToolParam
from controlscope.core._tools import ToolSchema


class PatchArguments(BaseModel):
    """Arg: new values for some data arguments of the pending primitive call.

    Attributes:
        arguments: argument names to their new values; names not given keep their values.
    """

    model_config = ConfigDict(frozen=True)
    kind: Literal["patch_arguments"] = "patch_arguments"
    arguments: dict[str, Any]


class PatchArgumentsSpec(OperationSpec[PatchArguments]):
    """``patch_arguments``: the new values merged into the pending call's arguments."""

    kind: ClassVar[OperationKind] = "patch_arguments"
    model = PatchArguments
    payload: ClassVar[PayloadShape] = "arguments"
    group: ClassVar[SummaryGroup | None] = "patches"
    counter = "argument_patches"
    label = "argument patches"
    noun = "argument patch"
    description = (
        "Make the pending call with some data arguments changed; the program continues "
        "unchanged. `arguments` maps argument names to new values."
    )
    rule = (
        "patch_arguments: the pending call is made with some data arguments "
        'changed, e.g. "arguments": {"path": "/correct/path.txt"}. The rest of the program is '
        "unchanged."
    )
    answer_field = '"arguments": {name: new value}'

    def parse(self, payload: Mapping[str, Any]) -> PatchArguments:
        """``payload["arguments"]``, an object (or a JSON string holding one)."""
        return PatchArguments(arguments=arguments_field(self.kind, payload))

    def check(self, op: PatchArguments, boundary: Boundary, tool: ToolSchema) -> Rejection | None:
        """Rule 4 of :func:`controlscope.scope.validate_operation`."""
        if not op.arguments:
            return Rejection("empty_patch", "the patch names no argument")
        properties = tool.input_schema.get("properties")
        known = set(properties) if isinstance(properties, Mapping) else set()
        open_schema = not known and tool.input_schema.get("additionalProperties", True) is not False
        unknown = sorted(name for name in op.arguments if name not in known)
        if unknown and not open_schema:
            return Rejection(
                "unknown_argument",
                f"{tool.name} has no parameter {', '.join(map(repr, unknown))}; "
                f"its parameters are {sorted(known) or 'none'}",
            )
        code = sorted(code_parameters(tool) & set(op.arguments))
        if code:
            return Rejection(
                "code_parameter",
                f"{', '.join(map(repr, code))} of {tool.name} holds an executable program; "
                "argument patches change data arguments only (paper section 3.1)",
            )
        try:
            json.dumps(op.arguments, allow_nan=False)
        except (TypeError, ValueError) as exc:
            return Rejection("schema_violation", f"patch values are not JSON: {exc}")
        if all(
            name in boundary.arguments and _same_json(boundary.arguments[name], value)
            for name, value in op.arguments.items()
        ):
            return Rejection("empty_patch", "every patched argument already has that value")
        return schema_regression(boundary, tool, self.final_arguments(op, boundary).arguments)

    def final_arguments(
        self,
        op: PatchArguments,
        boundary: Boundary,
        *,
        params: Sequence[ToolParam] = (),
        original_tree: ast.Module | None = None,
    ) -> FinalArguments:
        """The pending call's arguments with the new values merged in."""
        return FinalArguments({**boundary.arguments, **op.arguments})

    def shown(self, op: PatchArguments) -> dict[str, Any]:
        """``{"arguments": ...}``: the new values."""
        return {"arguments": op.arguments}

    def payload_schema(
        self, boundary: Boundary | None = None, tool: ToolSchema | None = None
    ) -> dict[str, Any]:
        """``{"arguments": ...}`` narrowed to the tool's data parameters
        (:func:`arguments_schema`); the generic object when the tool names none."""
        narrowed = arguments_schema(tool) if tool is not None else None
        if narrowed is None:
            return super().payload_schema(boundary, tool)
        return {"arguments": narrowed}


#: JSON types a narrowed argument keeps (what llama.cpp's grammar enforces).
_TYPES = frozenset({"string", "number", "integer", "boolean", "null", "object", "array"})


def typed_schema(prop: object) -> dict[str, Any]:
    """An argument's JSON schema cut to what says its type: ``type`` (a name or a list of
    names), an array's ``items``, an ``enum`` of JSON scalars, and the branches of an ``anyOf``
    or ``oneOf`` (as ``anyOf``); every other keyword (patterns, bounds, formats, annotations) is
    dropped, so the result is one llama.cpp's grammar enforces in full
    (:func:`controlscope.models.grammar_problem` finds nothing in it). ``{}`` (any value) when
    the schema gives no type.

    Args:
        prop: the argument's property schema in the tool's input schema.
    """
    if not isinstance(prop, Mapping):
        return {}
    enum = prop.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, _SCALARS) for v in enum):
        return {"enum": list(enum)}
    branches = prop.get("anyOf", prop.get("oneOf"))
    if isinstance(branches, list) and branches:
        typed = [typed_schema(b) for b in branches]
        return {} if {} in typed else {"anyOf": typed}
    kind = prop.get("type")
    if isinstance(kind, list):
        kinds = [k for k in kind if k in _TYPES]
        return {"type": kinds} if kinds and len(kinds) == len(kind) else {}
    if kind not in _TYPES:
        return {}
    out: dict[str, Any] = {"type": kind}
    if kind == "array" and isinstance(prop.get("items"), Mapping):
        out["items"] = typed_schema(prop["items"])
    return out


_SCALARS = (str, int, float, bool, type(None))


def arguments_schema(tool: ToolSchema) -> dict[str, Any] | None:
    """The JSON schema of a ``patch_arguments``'s ``arguments`` for a call of ``tool``: an
    object of the tool's data parameters (its code-valued ones left out, paper section 3.1),
    each typed by :func:`typed_schema`, none required (a patch names only what it changes:
    a required ``content`` would make the model copy a whole file), no other name.

    A decision decoded under it can only name the tool's own parameters with values of their
    types (values are still judged against the full schema by validation).

    Args:
        tool: the pending call's tool schema.

    Returns:
        The schema; None when the schema names no parameter (an open one) or only
        code-valued ones (the generic object is offered then).
    """
    properties = tool.input_schema.get("properties")
    if not isinstance(properties, Mapping):
        return None
    code = code_parameters(tool)
    data = {str(name): typed_schema(prop) for name, prop in properties.items() if name not in code}
    if not data:
        return None
    return {"type": "object", "properties": data, "additionalProperties": False}


def _same_json(old: Any, new: Any) -> bool:
    try:
        return json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True)
    except (TypeError, ValueError):
        return False


PATCH_ARGUMENTS = PatchArgumentsSpec()
"""The ``patch_arguments`` entry of :data:`controlscope.core.OPERATIONS`."""
