"""The reviewer's operation interface: native tools per granted scope, a JSON decision format for
constrained decoding, and the parser that turns an answer into a proposal.

Both formats carry the same decision (paper A.3: "both review requests use the same operation
schema"): ``keep``; ``patch_arguments(arguments: object)``; ``patch_block_data(code: string)``;
``replace_workflow(code: string)``, each with a short ``reason`` first (a reason before the
decision improves a small model's choices). Exactly the kinds of the granted operation set are
offered (:class:`~controlscope.core.OperationSet`: Keep ⊂ Arg ⊂ Full by default, paper section
3.1; Keep ⊂ Arg ⊂ Params ⊂ Full in the V2 lattice, A.2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from controlscope.core import (
    OPERATION_KINDS,
    Boundary,
    DecisionMode,
    MalformedOperationError,
    ModelResponse,
    Operation,
    OperationKind,
    OperationSet,
    ToolSpec,
    find_json_object,
    operation_spec,
    schema_problem,
)
from controlscope.review._state import PublicState

__all__ = [
    "MalformedOperationError",
    "ParsedDecision",
    "decision_schema",
    "granted_kinds",
    "operation_tools",
    "parse_decision",
    "parse_operation",
    "raw_answer",
]

_REASON = {"type": "string", "description": "One short sentence: why this operation."}


def granted_kinds(granted: OperationSet) -> list[OperationKind]:
    """The operation kinds of the granted set, smallest scope first."""
    return list(granted.operations)


def _payload_properties(kind: OperationKind, state: PublicState | None) -> dict[str, Any]:
    """The kind's payload properties, narrowed to the pending call when ``state`` is given
    (:meth:`~controlscope.core.OperationSpec.payload_schema`)."""
    if state is None:
        return operation_spec(kind).payload_schema()
    return operation_spec(kind).payload_schema(state.boundary, state.tool_schema)


def operation_tools(granted: OperationSet, state: PublicState | None = None) -> list[ToolSpec]:
    """Native tools for a review: one per operation kind of the granted set, no other.

    Each tool takes ``reason`` (a string) and the kind's payload: ``arguments`` (an object) for
    ``patch_arguments``, ``code`` (a string) for ``patch_block_data`` and ``replace_workflow``.
    With ``state``, a payload is narrowed to the pending call where its kind can be
    (:meth:`~controlscope.core.OperationSpec.payload_schema`: ``arguments`` holds only the
    pending tool's data parameters, typed; ``patch_block_data`` names the block's constants),
    so a model that decodes tool calls under their schema cannot name another parameter.
    """
    tools = []
    for kind in granted_kinds(granted):
        payload = _payload_properties(kind, state)
        tools.append(
            ToolSpec(
                name=kind,
                description=operation_spec(kind).description,
                parameters={
                    "type": "object",
                    "properties": {"reason": _REASON, **payload},
                    "required": ["reason", *payload],
                },
            )
        )
    return tools


def decision_schema(granted: OperationSet, state: PublicState | None = None) -> dict[str, Any]:
    """The JSON schema of one decision offering the granted set, for constrained decoding.

    Every decision is an object ``{"reason": str, "operation": kind, "arguments"?: object,
    "code"?: str, "constants"?: object}``. With more than one granted kind the schema is an
    ``anyOf`` of one branch per kind, so a constrained decoder cannot emit a patch without its
    payload. With ``state`` each payload is narrowed to the pending call as in
    :func:`operation_tools`.
    """
    branches = []
    for kind in granted_kinds(granted):
        payload = _payload_properties(kind, state)
        branches.append(
            {
                "type": "object",
                "properties": {
                    "reason": {"type": "string"},
                    "operation": {"const": kind},
                    **payload,
                },
                "required": ["reason", "operation", *payload],
                "additionalProperties": False,
            }
        )
    if len(branches) == 1:
        return branches[0]
    return {"anyOf": branches}


def parse_operation(
    kind: str, payload: Mapping[str, Any] | None = None, *, boundary: Boundary | None = None
) -> Operation:
    """Build an operation from a reviewer's answer.

    ``payload`` is the tool-call arguments (tools mode) or the decision object (JSON mode); keys
    that the kind does not use (``reason``, ``operation``, a ``code`` next to a patch...) are
    ignored, so one decision format serves every kind.

    - ``keep``: the payload is ignored.
    - ``patch_arguments``: ``payload["arguments"]`` must be an object mapping argument names to
      new values. A JSON *string* holding an object is accepted too (models often encode nested
      objects as strings). Its content is checked later by :func:`validate_operation`.
    - ``patch_block_data`` / ``replace_workflow``: ``payload["code"]`` must be a string. When
      the whole code is one fenced block (```` ```python ... ``` ````), its body is the code
      (:func:`controlscope.core.unfence`). With ``boundary``, a ``patch_block_data`` may give
      ``constants`` instead (slot number -> new value, the payload its narrowed schema asks
      for): the code is the running block with those constants.

    This function only checks shapes; scope, schema and syntax are judged by
    :func:`validate_operation`.

    Args:
        kind: one of ``keep``, ``patch_arguments``, ``patch_block_data``, ``replace_workflow``
            (surrounding whitespace and case are tolerated).
        payload: the answer's fields.
        boundary: the reviewed boundary (needed to read a narrowed payload).

    Returns:
        The operation (a frozen pydantic model).

    Raises:
        MalformedOperationError: unknown kind, payload not an object, a missing field, or a field
            of the wrong type.
    """
    if not isinstance(kind, str):
        raise MalformedOperationError(kind, "the operation kind must be a string")
    name = kind.strip().lower()
    if name not in OPERATION_KINDS:
        raise MalformedOperationError(
            kind, f"unknown operation kind; expected one of {sorted(OPERATION_KINDS)}"
        )
    if payload is None:
        payload = {}
    if not isinstance(payload, Mapping):
        raise MalformedOperationError(
            kind, f"the payload must be an object, got {type(payload).__name__}"
        )
    try:
        operation: Operation = operation_spec(name).parse_at(payload, boundary)
    except MalformedOperationError as err:  # named as the answer gave it
        raise MalformedOperationError(kind, err.detail) from None
    return operation


@dataclass(frozen=True)
class ParsedDecision:
    """What a reviewer's answer held.

    Attributes:
        operation: the proposal, None when nothing parseable came back.
        named_kind: the operation kind the answer named, if any (even when malformed).
        reason: the answer's ``reason`` text, if any.
        problem: why no operation could be read (None when ``operation`` is set).
        raw: the answer as text (assistant text, then each tool call as ``name(arguments)``).
    """

    operation: Operation | None
    named_kind: str | None
    reason: str
    problem: str | None
    raw: str


def raw_answer(response: ModelResponse) -> str:
    """The response as one text: assistant text, then each tool call as ``name(arguments)``."""
    parts = [response.text] if response.text else []
    parts.extend(f"{call.name}({call.arguments})" for call in response.tool_calls)
    return "\n".join(parts)


def parse_decision(
    response: ModelResponse,
    mode: DecisionMode,
    *,
    schema: dict[str, Any] | None = None,
    boundary: Boundary | None = None,
) -> ParsedDecision:
    """Read the reviewer's proposal from a response.

    - ``tools`` mode: the first tool call whose name is an operation kind is the proposal (later
      ones are ignored); its arguments must decode to an object. With no tool call, a JSON
      decision object in the text is accepted too (models without native tool calling answer
      that way).
    - ``json`` mode: the text must hold a decision object (``{"reason", "operation", ...}``); a
      Markdown fence around it and text before or after it are tolerated. With ``schema`` (the
      request's :func:`decision_schema`) a decision of an offered kind must satisfy it: a
      violation is no proposal, with the violation as the problem (a ``malformed`` fallback);
      a kind the schema does not offer is left to validation (an ``out_of_scope`` fallback);
      with no object, the response's own ``schema_error`` is part of the problem.

    Shapes are checked with :func:`controlscope.scope.parse_operation` (given ``boundary``, the
    reviewed boundary, to read a narrowed payload); scope and content are judged later by
    ``validate_operation``. Nothing in an answer is repaired: what does not read as an
    operation is no proposal, with the reason as the problem (a ``malformed`` fallback).
    """
    raw = raw_answer(response)
    if mode == "tools" and response.tool_calls:
        for call in response.tool_calls:
            if call.name.strip().lower() not in OPERATION_KINDS:
                continue
            if call.parsed is None:
                problem = call.error or "the tool-call arguments are not a JSON object"
                return ParsedDecision(None, call.name, "", problem, raw)
            return _from_payload(call.name, call.parsed, raw, boundary)
        names = ", ".join(call.name for call in response.tool_calls)
        return ParsedDecision(None, None, "", f"no operation tool was called (got {names})", raw)
    decision = find_json_object(response.text or "", key="operation")
    if decision is None:
        problem = "the answer holds no decision object"
        if response.schema_error:
            problem += f" ({response.schema_error})"
        return ParsedDecision(None, None, "", problem, raw)
    kind = decision.get("operation")
    if not isinstance(kind, str):
        return ParsedDecision(None, None, "", "the decision's 'operation' is not a string", raw)
    offered = schema is not None and kind.strip().lower() in _offered_kinds(schema)
    violation = schema_problem(decision, schema) if schema is not None and offered else None
    if violation is not None:
        reason = decision.get("reason")
        problem = f"the decision breaks its schema: {violation}"
        return ParsedDecision(None, kind, reason if isinstance(reason, str) else "", problem, raw)
    return _from_payload(kind, decision, raw, boundary)


def _offered_kinds(schema: dict[str, Any]) -> set[str]:
    """The operation kinds a :func:`decision_schema` offers (one ``const`` per branch)."""
    branches = schema.get("anyOf", [schema])
    kinds = (b.get("properties", {}).get("operation", {}).get("const") for b in branches)
    return {k for k in kinds if isinstance(k, str)}


def _from_payload(
    kind: str, payload: dict[str, Any], raw: str, boundary: Boundary | None
) -> ParsedDecision:
    reason = payload.get("reason")
    reason_text = reason if isinstance(reason, str) else ""
    try:
        operation = parse_operation(kind, payload, boundary=boundary)
    except MalformedOperationError as err:
        return ParsedDecision(None, kind, reason_text, str(err), raw)
    return ParsedDecision(operation, kind, reason_text, None, raw)
