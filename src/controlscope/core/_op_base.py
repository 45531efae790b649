"""What one operation kind is to every layer: :class:`OperationSpec`, and the checks the kinds
share (the code size bound, compiling a block, the final arguments against the tool's schema).

Each kind is one module, ``core/_op_<kind>.py`` (its model and its spec), and one entry of
:data:`controlscope.core.OPERATIONS`; the reviewer's tools and prompt, the scope validation,
the worker's application, the summary's counters, the report's columns, the CLI's counts and
the viewer read the kind from there (paper section 3.1 and A.2 define the kinds).
"""

from __future__ import annotations

import ast
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Literal, TypeVar

import jsonschema.protocols
import referencing.exceptions
from pydantic import BaseModel

from controlscope.core._execution import Boundary
from controlscope.core._operations import (
    MAX_CODE_CHARS,
    OperationKind,
    RejectionReason,
    SummaryGroup,
)
from controlscope.core._schema import schema_validator
from controlscope.core._signature import ToolParam
from controlscope.core._text import decode_json, unfence
from controlscope.core._tools import ToolSchema

PayloadShape = Literal["none", "arguments", "code"]
"""What an operation carries besides its kind: nothing, new argument values (an object), or
Python source (a string). It shapes the reviewer's tool and decision schema and the views."""

Op = TypeVar("Op", bound=BaseModel)

GENERIC_PAYLOADS: dict[PayloadShape, dict[str, Any]] = {
    "none": {},
    "arguments": {
        "arguments": {
            "type": "object",
            "description": "Argument names of the pending call mapped to their new values.",
        }
    },
    "code": {"code": {"type": "string", "description": "Python code."}},
}
"""A payload's properties in an operation's tool and decision schema when nothing narrows it
(no boundary, or a tool whose schema names no parameter)."""


class MalformedOperationError(ValueError):
    """A reviewer's proposal could not be read as an :data:`Operation`.

    The reviewer records it as a ``malformed`` fallback and executes ``Keep`` (paper section A.4:
    "a malformed review response ... produces a recorded Keep fallback").

    Attributes:
        kind: the operation kind the proposal named (as given, possibly not a valid kind).
        detail: what is wrong with it.
    """

    def __init__(self, kind: object, detail: str) -> None:
        super().__init__(f"malformed {kind!r} operation: {detail}")
        self.kind = kind
        self.detail = detail


@dataclass(frozen=True)
class Rejection:
    """Why a proposal of a granted kind is refused (it is then executed as ``Keep``).

    Attributes:
        reason: the typed reason recorded in the ``validation`` event.
        detail: a human-readable explanation.
    """

    reason: RejectionReason
    detail: str


@dataclass(frozen=True)
class FinalArguments:
    """The arguments a call is made with under an operation.

    Attributes:
        arguments: the final arguments, by parameter name.
        notice: set when a ``patch_block_data`` leaves them as the block asked for them.
    """

    arguments: dict[str, Any]
    notice: str | None = None


class OperationSpec(ABC, Generic[Op]):
    """One operation kind: what every layer needs to offer, judge, apply, count and show it.

    Attributes:
        kind: the kind's name: its tool's name, its ``operation`` in a JSON decision.
        model: its operation model (a frozen pydantic model whose ``kind`` is :attr:`kind`).
        payload: what it carries besides its kind (:data:`PayloadShape`).
        group: the run tables' column it is counted in (None: not counted, ``keep``).
        counter: its ``RunSummary`` field, the realized operations of the kind (None for keep).
        label: the counter's words in a sentence of counts (``"argument patches"``).
        noun: one operation of the kind, as the viewer names its code diff.
        description: its tool's description in a review request.
        rule: its line of the reviewer's system prompt; ``{what}`` stands for what a
            replacement replaces.
        answer_field: its payload's field as the system prompt lists it for a JSON decision
            (``""``: none).
        cancels: whether the pending call is cancelled (the block unwinds; no call is made).
    """

    kind: ClassVar[OperationKind]
    model: ClassVar[type[BaseModel]]
    payload: ClassVar[PayloadShape]
    group: ClassVar[SummaryGroup | None] = None
    counter: ClassVar[str | None] = None
    label: ClassVar[str] = ""
    noun: ClassVar[str] = ""
    description: ClassVar[str]
    rule: ClassVar[str]
    answer_field: ClassVar[str] = ""
    cancels: ClassVar[bool] = False

    @abstractmethod
    def parse(self, payload: Mapping[str, Any]) -> Op:
        """The operation a reviewer's answer holds (shapes only; content is :meth:`check`'s).

        Args:
            payload: the tool call's arguments or the JSON decision; fields the kind does not
                use are ignored.

        Raises:
            MalformedOperationError: a field is missing or of the wrong type.
        """

    @abstractmethod
    def check(self, op: Op, boundary: Boundary, tool: ToolSchema) -> Rejection | None:
        """Why ``op``, granted, cannot run at ``boundary`` (None: it can); the kind's rules of
        :func:`controlscope.scope.validate_operation`."""

    @abstractmethod
    def final_arguments(
        self,
        op: Op,
        boundary: Boundary,
        *,
        params: Sequence[ToolParam] = (),
        original_tree: ast.Module | None = None,
    ) -> FinalArguments | None:
        """The arguments the pending call is made with under ``op``; None: it is cancelled.

        Args:
            op: the operation.
            boundary: the pending call (its arguments, the running block's source and the
                literal slots the controller derived).
            params: the tool's parameters.
            original_tree: the block as it started, parsed; None parses ``boundary.code``.

        Raises:
            ValueError: ``op`` cannot be applied (operations are validated first).
        """

    def new_code(self, op: Op) -> str | None:
        """The source that runs from now on: the rewritten block, or the replacement (None:
        the block's own)."""
        return None

    def note(self, boundary: Boundary) -> str | None:
        """What a reviewer granted this kind must know about the pending call (None: nothing)."""
        return None

    def shown(self, op: Op) -> dict[str, Any]:
        """The operation's payload as a later review's list of decisions shows it."""
        return {}

    def payload_schema(
        self, boundary: Boundary | None = None, tool: ToolSchema | None = None
    ) -> dict[str, Any]:
        """The JSON-schema properties of the kind's payload in a review's tool or decision,
        for constrained decoding: the generic ones of :attr:`payload`
        (:data:`GENERIC_PAYLOADS`); a kind whose payload can be narrowed to the pending call
        (its tool's data parameters, its block's constants) overrides this.

        Args:
            boundary: the pending call; None: no boundary (the generic schema).
            tool: the pending call's tool schema; None: unknown (the generic schema).

        Returns:
            Property name -> JSON schema; every name is required in the decision.
        """
        return GENERIC_PAYLOADS[self.payload]

    def parse_at(self, payload: Mapping[str, Any], boundary: Boundary | None) -> Op:
        """The operation an answer to a review of ``boundary`` holds: :meth:`parse`, unless the
        kind reads a payload narrowed by :meth:`payload_schema` (which needs the boundary).

        Raises:
            MalformedOperationError: as :meth:`parse`.
        """
        return self.parse(payload)


def code_field(kind: str, payload: Mapping[str, Any]) -> str:
    """The ``code`` of a reviewer's answer; one fenced block that is the whole code is
    unfenced (:func:`controlscope.core.unfence`).

    Raises:
        MalformedOperationError: no ``code``, or not a string.
    """
    if "code" not in payload:
        raise MalformedOperationError(kind, "missing field 'code'")
    code = payload["code"]
    if not isinstance(code, str):
        raise MalformedOperationError(kind, f"'code' must be a string, got {type(code).__name__}")
    return unfence(code)


def arguments_field(kind: str, payload: Mapping[str, Any]) -> dict[str, Any]:
    """The ``arguments`` object of a reviewer's answer; a JSON string holding an object is
    accepted too (models often encode nested objects as strings).

    Raises:
        MalformedOperationError: no ``arguments``, not an object, or names not strings.
    """
    if "arguments" not in payload:
        raise MalformedOperationError(kind, "missing field 'arguments'")
    arguments = payload["arguments"]
    if isinstance(arguments, str):
        try:
            arguments = decode_json(arguments)
        except json.JSONDecodeError as exc:
            raise MalformedOperationError(
                kind, f"'arguments' is a string that is not JSON: {exc}"
            ) from exc
    if not isinstance(arguments, Mapping):
        raise MalformedOperationError(
            kind, f"'arguments' must be an object, got {type(arguments).__name__}"
        )
    if not all(isinstance(key, str) for key in arguments):
        raise MalformedOperationError(kind, "argument names must be strings")
    return dict(arguments)


def code_size(kind: str, code: str) -> Rejection | None:
    """``too_large`` for code longer than :data:`MAX_CODE_CHARS` (checked before it is parsed)."""
    if len(code) <= MAX_CODE_CHARS:
        return None
    return Rejection(
        "too_large",
        f"the {kind} code holds {len(code):,} characters; at most "
        f"{MAX_CODE_CHARS:,} (as many as a tool result keeps)",
    )


def compile_block(code: str, filename: str) -> ast.Module:
    """Parse and compile ``code``; raise SyntaxError for anything the worker could not run."""
    try:
        tree = ast.parse(code, filename=filename, mode="exec")
        compile(tree, filename, "exec", dont_inherit=True)
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        raise SyntaxError(f"{type(exc).__name__}: {exc}") from exc
    return tree


def syntax_detail(exc: SyntaxError) -> str:
    """A syntax error as a rejection's detail: its message and line."""
    where = f" (line {exc.lineno})" if exc.lineno else ""
    return f"{exc.msg or exc}{where}"


#: Characters of one schema error message kept in a rejection's detail.
_DETAIL_CHARS = 300


def _schema_errors(
    validator: jsonschema.protocols.Validator, instance: dict[str, Any]
) -> dict[tuple[tuple[str | int, ...], str, str], str]:
    errors: dict[tuple[tuple[str | int, ...], str, str], str] = {}
    for error in validator.iter_errors(instance):
        path = tuple(error.absolute_path)
        key = (path, str(error.validator), error.message)
        where = "/".join(str(p) for p in path) or "(arguments)"
        message = error.message
        if len(message) > _DETAIL_CHARS:  # the message quotes the value, which may be huge
            message = message[:_DETAIL_CHARS] + "…"
        errors[key] = f"{where}: {message}"
    return errors


def schema_regression(
    boundary: Boundary, tool: ToolSchema, final: dict[str, Any]
) -> Rejection | None:
    """``schema_violation`` when the final arguments an operation gives the pending call show
    a schema error that the arguments the block asked for did not have (None: no new error).

    The validator follows the schema's ``$schema`` (default Draft 2020-12); references are
    never fetched.
    """
    checked = schema_validator(tool.input_schema)
    if isinstance(checked, str):
        return Rejection(
            "schema_violation",
            f"the input schema of {tool.name} is itself invalid, so no patch can be checked: "
            f"{checked}",
        )
    try:
        before = _schema_errors(checked, dict(boundary.arguments))
        after = _schema_errors(checked, final)
    except referencing.exceptions.Unresolvable as exc:  # never fetched: no network
        return Rejection(
            "schema_violation",
            f"the input schema of {tool.name} has a reference that cannot be resolved, so no "
            f"patch can be checked: {exc}",
        )
    new = [text for key, text in after.items() if key not in before]
    if new:
        return Rejection(
            "schema_violation",
            f"the patched call's arguments break the schema of {tool.name}: " + "; ".join(new),
        )
    return None
