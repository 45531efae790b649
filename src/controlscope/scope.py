"""Judging a reviewer's proposal against the granted scope (paper section 3.1).

:func:`validate_operation` is the one check every proposal passes before it can run: a rejected
proposal is recorded and executed as ``keep``. Block-data validation uses the worker runtime's own
constant walk (:func:`block_data_constants`), so what it accepts the worker can make effective.
The records it judges (:class:`~controlscope.core.Scope`, the operations,
:class:`~controlscope.core.Validation`) live in :mod:`controlscope.core`.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from collections.abc import Mapping
from typing import Any

import jsonschema.protocols
import referencing.exceptions

from controlscope.core import (
    MAX_CODE_CHARS,
    Boundary,
    Keep,
    Operation,
    OperationSet,
    PatchArguments,
    PatchBlockData,
    RejectionReason,
    ReplaceWorkflow,
    Scope,
    ToolParam,
    ToolSchema,
    Validation,
    recorded_operation,
    schema_validator,
    tool_params,
)
from controlscope.worker import _apply, _constants

__all__ = [
    "CODE_NAME_TOKENS",
    "DATA_CODE_QUALIFIERS",
    "SCALAR_TYPES",
    "block_data_constants",
    "code_parameters",
    "is_code_parameter",
    "validate_operation",
]


# ---------------------------------------------------------------------------------------------
# Code-valued parameters
# ---------------------------------------------------------------------------------------------

# fmt: off
#: Name tokens that mark a parameter as a program (after splitting snake/camel/kebab case).
CODE_NAME_TOKENS: frozenset[str] = frozenset({
    "script", "program", "python", "py", "javascript", "js", "typescript", "sql", "shell",
    "bash", "cmd", "command", "commands", "exec", "eval", "lambda", "snippet", "sourcecode",
})
# fmt: on

# fmt: off
#: Qualifiers that make ``..._code`` / "... code" a data value (a zip code is not a program).
DATA_CODE_QUALIFIERS: frozenset[str] = frozenset({
    "access", "activation", "airport", "area", "auth", "authorization", "color", "colour",
    "confirmation", "country", "coupon", "currency", "discount", "error", "exit", "gift",
    "http", "invite", "iso", "language", "lang", "locale", "otp", "postal", "product",
    "promo", "qr", "referral", "region", "reset", "response", "return", "security", "state",
    "status", "tracking", "verification", "voucher", "zip", "bar", "barcode", "pin",
})
# fmt: on

_CODE_MEDIA = re.compile(
    r"^(text|application)/(x-)?(python|javascript|ecmascript|typescript|sql|sh|shellscript|"
    r"x-sh|lua|ruby|perl)$"
)
_CODE_FORMATS: frozenset[str] = frozenset(
    {"code", "python", "javascript", "typescript", "sql", "script", "shell", "command"}
)
_CODE_DESCRIPTION = re.compile(
    r"\b(python|javascript|typescript|sql|bash|powershell)\b"
    r"|\bshell (command|script)s?\b"
    r"|\bsource code\b"
    r"|\b(code|script|program|command|expression|statement)s? (to|that will|which will) "
    r"(run|execute|evaluate|be (run|executed|evaluated))\b"
    r"|\bexecutable\b",
    re.IGNORECASE,
)
_DATA_CODE_DESCRIPTION = re.compile(
    r"\b(" + "|".join(sorted(DATA_CODE_QUALIFIERS)) + r")[ _-]?codes?\b", re.IGNORECASE
)
_NAME_SPLIT = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def _name_tokens(name: str) -> list[str]:
    """Split ``sourceCode``, ``source_code``, ``source-code`` into ``["source", "code"]``."""
    return [part.lower() for part in _NAME_SPLIT.findall(name)]


def is_code_parameter(name: str, prop: Mapping[str, Any] | None = None) -> bool:
    """Decide from schema hints whether a tool parameter holds an executable program.

    Paper section 3.1: "parameters that directly encode executable programs fall outside the
    data-argument comparison". Tools declare such parameters in ``ToolSchema.code_params``; this
    function catches the undeclared ones. A parameter is code-valued when any of these holds:

    - the property says so: ``"x-code": true``, a ``contentMediaType`` of a program
      (``text/x-python``, ``application/javascript``, ``application/sql``...), or a ``format`` of
      ``code``/``python``/``javascript``/``sql``/``script``/``shell``/``command``;
    - its name has a program token (:data:`CODE_NAME_TOKENS`: ``script``, ``program``,
      ``python``, ``sql``, ``command``, ``cmd``, ``shell``, ``exec``, ``eval``...), or it is
      ``code`` / ``source_code`` / ``..._code`` with no data qualifier
      (:data:`DATA_CODE_QUALIFIERS`: ``zip_code``, ``verification_code``, ``country_code`` are
      data);
    - its description names a programming language or says the value is run/executed/evaluated
      (``"Python code to run"``, ``"shell command"``, ``"source code"``).

    A description about a data code (``"the verification code sent by SMS"``) overrides the
    ``code`` name and description hints (not the explicit markers and program-name tokens).

    Patterns are data: a regular expression or glob (``pattern``, ``excludePatterns``) is matched,
    not run, and queries (``query``) are data unless marked as SQL. JSON-schema property
    schemas nested inside the parameter are not inspected (a patch replaces the top-level value).

    Args:
        name: the parameter's name.
        prop: the parameter's JSON-schema property (may be None or empty).

    Returns:
        True when a patch to this parameter must be rejected as ``code_parameter``.
    """
    prop = prop or {}
    if prop.get("x-code") is True:
        return True
    media = prop.get("contentMediaType")
    if isinstance(media, str) and _CODE_MEDIA.match(media.strip().lower()):
        return True
    fmt = prop.get("format")
    if isinstance(fmt, str) and fmt.strip().lower() in _CODE_FORMATS:
        return True
    tokens = _name_tokens(name)
    if any(token in CODE_NAME_TOKENS for token in tokens):
        return True
    texts = [text for key in ("description", "title") if isinstance(text := prop.get(key), str)]
    if any(_DATA_CODE_DESCRIPTION.search(text) for text in texts):
        return False
    if "code" in tokens and not any(token in DATA_CODE_QUALIFIERS for token in tokens):
        return True
    return any(_CODE_DESCRIPTION.search(text) for text in texts)


def code_parameters(tool: ToolSchema) -> frozenset[str]:
    """All code-valued parameters of ``tool``: declared ones plus those found by schema hints.

    Args:
        tool: the tool; its ``input_schema["properties"]`` is inspected with
            :func:`is_code_parameter`.

    Returns:
        The parameter names (declared names are included even when the schema lacks them).
    """
    found = set(tool.code_params)
    properties = tool.input_schema.get("properties")
    if isinstance(properties, Mapping):
        for name, prop in properties.items():
            if is_code_parameter(str(name), prop if isinstance(prop, Mapping) else None):
                found.add(str(name))
    return frozenset(found)


# ---------------------------------------------------------------------------------------------
# Block data (Params, paper section A.2: "coordinated data edits")

#: Constant types that may change into one another in a block-data patch (JSON scalars).
SCALAR_TYPES: tuple[type, ...] = (str, int, float, bool, type(None))


def block_data_constants(code: str) -> list[Any]:
    """The values of a block's *data constants*: what a block-data patch may change.

    The worker makes a ``patch_block_data`` effective by compiling each block with its constants
    turned into lookups in a per-block table and refilling the table from the rewrite; the
    constants it tabulates are the data constants. This function and :func:`validate_operation`
    use the worker's own walk (``controlscope.worker._constants``: ``constants_in_order``,
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
    constants = _constants.constants_in_order(tree := ast.parse(code))
    return [constants[i].value for i in _constants.slot_positions(tree)]


def _same_value(old: Any, new: Any) -> bool:
    """Equal type and representation (so ``1`` vs ``1.0`` vs ``True`` differ, and nan == nan)."""
    return type(old) is type(new) and repr(old) == repr(new)


def _type_change_allowed(old: Any, new: Any) -> bool:
    return type(old) is type(new) or (
        isinstance(old, SCALAR_TYPES) and isinstance(new, SCALAR_TYPES)
    )


def _compile(code: str, filename: str) -> ast.Module:
    """Parse and compile ``code``; raise SyntaxError for anything the worker could not run."""
    try:
        tree = ast.parse(code, filename=filename, mode="exec")
        compile(tree, filename, "exec", dont_inherit=True)
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        raise SyntaxError(f"{type(exc).__name__}: {exc}") from exc
    return tree


def _syntax_detail(exc: SyntaxError) -> str:
    where = f" (line {exc.lineno})" if exc.lineno else ""
    return f"{exc.msg or exc}{where}"


# ---------------------------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------------------------


#: Characters of one schema error message kept in a rejection's detail.
_DETAIL_CHARS = 300


def _reject(
    granted: Scope, proposal: Operation | None, reason: RejectionReason, detail: str
) -> Validation:
    return Validation(
        granted=granted,
        proposal=recorded_operation(proposal),
        accepted=False,
        reason=reason,
        detail=detail,
        realized=Keep(),
    )


def _accept(granted: Scope, proposal: Operation) -> Validation:
    return Validation(granted=granted, proposal=proposal, accepted=True, realized=proposal)


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


def _check_patch_arguments(
    patch: PatchArguments, granted: Scope, boundary: Boundary, tool: ToolSchema
) -> Validation:
    if not patch.arguments:
        return _reject(granted, patch, "empty_patch", "the patch names no argument")
    properties = tool.input_schema.get("properties")
    known = set(properties) if isinstance(properties, Mapping) else set()
    open_schema = not known and tool.input_schema.get("additionalProperties", True) is not False
    unknown = sorted(name for name in patch.arguments if name not in known)
    if unknown and not open_schema:
        return _reject(
            granted,
            patch,
            "unknown_argument",
            f"{tool.name} has no parameter {', '.join(map(repr, unknown))}; "
            f"its parameters are {sorted(known) or 'none'}",
        )
    code = sorted(code_parameters(tool) & set(patch.arguments))
    if code:
        return _reject(
            granted,
            patch,
            "code_parameter",
            f"{', '.join(map(repr, code))} of {tool.name} holds an executable program; "
            "argument patches change data arguments only (paper section 3.1)",
        )
    try:
        json.dumps(patch.arguments, allow_nan=False)
    except (TypeError, ValueError) as exc:
        return _reject(granted, patch, "schema_violation", f"patch values are not JSON: {exc}")
    if all(
        name in boundary.arguments and _same_json(boundary.arguments[name], value)
        for name, value in patch.arguments.items()
    ):
        return _reject(
            granted, patch, "empty_patch", "every patched argument already has that value"
        )
    final = _apply.final_arguments(boundary, patch).arguments
    return _check_final(granted, patch, boundary, tool, final) or _accept(granted, patch)


def _check_final(
    granted: Scope,
    proposal: Operation,
    boundary: Boundary,
    tool: ToolSchema,
    final: dict[str, Any],
) -> Validation | None:
    """Reject ``proposal`` when the final arguments it gives the pending call show a schema
    error that the arguments the block asked for did not have (None: no new error)."""
    checked = schema_validator(tool.input_schema)
    if isinstance(checked, str):
        return _reject(
            granted,
            proposal,
            "schema_violation",
            f"the input schema of {tool.name} is itself invalid, so no patch can be checked: "
            f"{checked}",
        )
    validator = checked
    try:
        before = _schema_errors(validator, dict(boundary.arguments))
        after = _schema_errors(validator, final)
    except referencing.exceptions.Unresolvable as exc:  # never fetched: no network
        return _reject(
            granted,
            proposal,
            "schema_violation",
            f"the input schema of {tool.name} has a reference that cannot be resolved, so no "
            f"patch can be checked: {exc}",
        )
    new = [text for key, text in after.items() if key not in before]
    if new:
        return _reject(
            granted,
            proposal,
            "schema_violation",
            f"the patched call's arguments break the schema of {tool.name}: " + "; ".join(new),
        )
    return None


def _same_json(old: Any, new: Any) -> bool:
    try:
        return json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True)
    except (TypeError, ValueError):
        return False


def _check_block_data(
    patch: PatchBlockData, granted: Scope, boundary: Boundary, tool: ToolSchema
) -> Validation:
    if boundary.params_refusal is not None:
        return _reject(
            granted,
            patch,
            "data_not_editable",
            f"patch_block_data cannot edit this call's data: {boundary.params_refusal}",
        )
    try:
        new_tree = _compile(patch.code, "<patch_block_data>")
    except SyntaxError as exc:
        return _reject(
            granted,
            patch,
            "syntax_error",
            f"the new block does not compile: {_syntax_detail(exc)}",
        )
    try:
        old_tree, old_key = _running_block(boundary.code)
    except SyntaxError as exc:
        return _reject(
            granted,
            patch,
            "structure_changed",
            f"the running block's own code does not compile, so nothing can match it: "
            f"{_syntax_detail(exc)}",
        )
    if old_key != _constants.structure_key(new_tree):
        return _reject(
            granted,
            patch,
            "structure_changed",
            "the new block's syntax tree differs from the running block's beyond constant "
            f"values{_first_difference(old_tree, new_tree)}",
        )
    old_constants = _constants.constants_in_order(old_tree)
    new_constants = _constants.constants_in_order(new_tree)
    slots = set(_constants.slot_positions(old_tree))
    changed = 0
    for index, (old_node, new_node) in enumerate(zip(old_constants, new_constants, strict=True)):
        old, new = old_node.value, new_node.value
        if _same_value(old, new):
            continue
        where = f"the constant {old!r} on line {new_node.lineno}"
        if index not in slots:
            return _reject(
                granted,
                patch,
                "structure_changed",
                f"{where} is an f-string format spec, a docstring or a case pattern: it is not "
                "block data and the running block would not see the change",
            )
        if not _type_change_allowed(old, new):
            return _reject(
                granted,
                patch,
                "structure_changed",
                f"{where} changes type from {type(old).__name__} to {type(new).__name__} "
                f"({new!r}); only str/int/float/bool/None may change into one another",
            )
        changed += 1
    if not changed:
        return _reject(granted, patch, "empty_patch", "the new block has the same constants")
    final = _apply.final_arguments(boundary, patch, params=_params(tool)).arguments
    return _check_final(granted, patch, boundary, tool, final) or _accept(granted, patch)


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
    tree = _compile(code, "<block>")
    return tree, _constants.structure_key(tree)


def _first_difference(old: ast.Module, new: ast.Module) -> str:
    """Point at the first top-level statement whose structure differs."""
    for old_stmt, new_stmt in zip(old.body, new.body, strict=False):
        if _constants.structure_key(old_stmt) != _constants.structure_key(new_stmt):
            return f" (first at the statement on line {new_stmt.lineno} of the new block)"
    if len(old.body) != len(new.body):
        return (
            f" (the block has {len(old.body)} top-level statements, the new code {len(new.body)})"
        )
    return ""


def _check_replacement(patch: ReplaceWorkflow, granted: Scope) -> Validation:
    try:
        tree = _compile(patch.code, "<replace_workflow>")
    except SyntaxError as exc:
        return _reject(
            granted,
            patch,
            "syntax_error",
            f"the replacement does not compile: {_syntax_detail(exc)}",
        )
    if not tree.body:
        return _reject(
            granted,
            patch,
            "empty_patch",
            "the replacement has no statements; to stop the workflow on purpose, replace it "
            "with code that says so (e.g. a print of the reason)",
        )
    return _accept(granted, patch)


def validate_operation(
    proposal: Operation | None,
    granted: OperationSet | Scope,
    *,
    boundary: Boundary,
    tool: ToolSchema,
) -> Validation:
    """Judge a reviewer's proposal at a boundary against the granted operation set (paper
    section 3.1, eq. 1-3; A.2).

    Rules, checked in this order; the first failing one gives the typed ``reason``, and a rejected
    proposal is realized as ``Keep()`` (a "fallback", ``docs/architecture.md``):

    1. ``None`` (nothing parseable) -> ``malformed``.
    2. The operation is not in the granted set -> ``out_of_scope`` (under the default lattice
       Full grants keep, patch_arguments and replace_workflow, not patch_block_data). Scopes
       nest within a lattice, so a larger grant accepts every operation a smaller one does.
    3. ``keep`` is always accepted; a ``patch_block_data`` or ``replace_workflow`` whose code
       is longer than :data:`~controlscope.core.MAX_CODE_CHARS` -> ``too_large`` (before it
       is parsed; the recorded proposal holds its code clipped).
    4. ``patch_arguments`` (Arg):

       - no argument named -> ``empty_patch``;
       - a name not among the schema's ``properties`` -> ``unknown_argument`` (a schema with no
         ``properties`` that allows additional properties leaves names to the schema check);
       - a code-valued parameter (``tool.code_params`` or schema hints, see
         :func:`is_code_parameter`) -> ``code_parameter``;
       - values that are not JSON (objects, NaN, infinities) -> ``schema_violation``;
       - every patched value equal to the current one -> ``empty_patch``. A patch sets values; it
         cannot delete an argument;
       - the final arguments (the worker's own ``final_arguments``) showing a JSON-schema
         error that the unpatched call did not have (validator from the schema's ``$schema``,
         default Draft 2020-12) -> ``schema_violation``. An error the pending call already had
         does not block a patch of another argument: Keep would fail the same way.

    5. ``patch_block_data`` (Params, paper section A.2 "coordinated data edits"): at a call
       whose data it cannot edit (``boundary.params_refusal``) -> ``data_not_editable``. The
       code must compile (``syntax_error``), and its syntax tree must equal ``boundary.code``'s
       with every constant blanked (``structure_changed``; comments and layout free). Only data
       constants (see :func:`block_data_constants`) may change: a change to an f-string format
       spec, a docstring or a ``case`` pattern is ``structure_changed``, because the running
       block would not see it. A constant may change type only among str/int/float/bool/None
       (other types, e.g. bytes, ``...``, keep theirs) -> else ``structure_changed``. A sign is
       structure: ``-1`` -> ``-5`` is data, ``-1`` -> ``5`` is not. No constant changed ->
       ``empty_patch``. Final arguments are checked as for ``patch_arguments``.
    6. ``replace_workflow`` (Full): the code must compile (``syntax_error``: module-level
       ``return``, top-level ``await`` and null bytes included). Code with no statement (empty,
       blank or comments only) -> ``empty_patch``: an empty code field is the commonest malformed
       answer of small models, and a reviewer that wants the workflow to stop can say so in code
       (``print("stopping: ...")``), which keeps the decision visible in the log.

    Args:
        proposal: the parsed proposal (see :func:`parse_operation`), or None.
        granted: the operation set the reviewer was offered; a bare :class:`Scope` is read in
            the ``v2`` lattice, where every scope exists (``OperationSet.of(scope, "v2")``).
        boundary: the pending call (its ``arguments`` and the running block's ``code``).
        tool: the schema of the pending call's tool.

    Returns:
        A :class:`Validation` with granted, proposal, verdict and realized operation.

    Raises:
        TypeError: ``granted`` is neither a :class:`Scope` nor an :class:`OperationSet`.
        ValueError: ``tool`` is not the pending call's tool (a controller bug, not a review).
    """
    if isinstance(granted, Scope):
        granted = OperationSet.of(granted, "v2")
    if not isinstance(granted, OperationSet):
        raise TypeError(f"granted must be a Scope or an OperationSet, got {type(granted).__name__}")
    if tool.name != boundary.tool:
        raise ValueError(
            f"the tool schema {tool.name!r} does not belong to the pending call {boundary.tool!r}"
        )
    return _judge(proposal, granted, boundary, tool)


def _judge(
    proposal: Operation | None, granted: OperationSet, boundary: Boundary, tool: ToolSchema
) -> Validation:
    """Rules 1-6 of :func:`validate_operation`."""
    scope = granted.scope
    if proposal is None:
        return _reject(scope, None, "malformed", "the review contained no parseable operation")
    if not granted.allows(proposal.kind):
        return _reject(
            scope,
            proposal,
            "out_of_scope",
            f"{proposal.kind} is not granted: {granted.describe()}",
        )
    if isinstance(proposal, Keep):
        return _accept(scope, proposal)
    if isinstance(proposal, PatchBlockData | ReplaceWorkflow) and (
        len(proposal.code) > MAX_CODE_CHARS
    ):
        return _reject(
            scope,
            proposal,
            "too_large",
            f"the {proposal.kind} code holds {len(proposal.code):,} characters; at most "
            f"{MAX_CODE_CHARS:,} (as many as a tool result keeps)",
        )
    if isinstance(proposal, PatchArguments):
        return _check_patch_arguments(proposal, scope, boundary, tool)
    if isinstance(proposal, PatchBlockData):
        return _check_block_data(proposal, scope, boundary, tool)
    return _check_replacement(proposal, scope)
