"""Where a primitive call is made, as the controller knows it from the block sources it sent.

The worker's ``call`` message claims a position (the block whose code makes the call, the span
of that frame's current instruction, whether the proxy was called directly) and, with it, a
line, a function, a class and the literal slots of the call's arguments. The worker is
untrusted, so the controller acts on none of these claims: :func:`resolve_site` maps the
claimed span onto its own parse of that block (:class:`BlockSource`), derives the line, the
call site and the literal slots from it, checks the literals against the call's own
arguments, and raises :class:`SiteMismatch` (a protocol violation: the worker is killed) when a
claim disagrees. Paper section 3.1: what the reviewer sees and decides is what then runs.

A ``patch_block_data`` can edit a call's data only when the literal behind each argument is
known with certainty: the call is made directly (through a name bound to the tool's proxy, not
by a builtin or wrapper it was passed to) by the running block's own code. Otherwise the
resolved site carries a refusal, shown to the reviewer, and a Params proposal is rejected.
"""

from __future__ import annotations

import ast
import functools
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controlscope.core import (
    CallSite,
    Span,
    ToolParam,
    call_index,
    constants_in_order,
    literal_arguments,
    provided_parameters,
    slot_ids,
    slot_positions,
    slot_values,
)

_Scope = tuple[tuple[str, str], ...]
"""A scope chain from the module down: ``("function" | "class", name)`` pairs."""

#: Comprehensions that run in a frame of their own (inlined since Python 3.12, PEP 709).
_COMPREHENSION_FRAMES: dict[type[ast.AST], str] = {ast.GeneratorExp: "<genexpr>"}
if sys.version_info < (3, 12):
    _COMPREHENSION_FRAMES.update(
        {ast.ListComp: "<listcomp>", ast.SetComp: "<setcomp>", ast.DictComp: "<dictcomp>"}
    )


class SiteMismatch(Exception):
    """A call message's claims disagree with the block's source or with the call's arguments."""


@dataclass
class BlockSource:
    """What the controller knows of one block's code in the running worker.

    Attributes:
        block_id: the block's id.
        tree: its source as it started, parsed (the worker compiled that text, so every
            instruction position refers to it).
        values: its constants table as it stands (a ``patch_block_data`` refills it).
        calls: every call expression by span (:func:`controlscope.core.call_index`).
        nodes: the nodes at each span, with the 3.11+ span of a method call whose attribute
            spans lines (the compiler starts such a call at the attribute's name).
        scopes: node id -> the scope chains its code can run in (a comprehension's own node
            and first iterable belong to the enclosing scope and to the comprehension's).
        code: its source text as it stands (a ``patch_block_data`` rewrite replaces it).
    """

    block_id: str
    tree: ast.Module
    values: list[Any]
    code: str = ""
    calls: dict[Span, dict[str, Any]] = field(default_factory=dict)
    nodes: dict[Span, list[ast.AST]] = field(default_factory=dict)
    scopes: dict[int, list[_Scope]] = field(default_factory=dict)

    @classmethod
    def parse(cls, block_id: str, tree: ast.Module, code: str = "") -> BlockSource:
        """Index a block's source, ``code`` parsed as ``tree`` (which is not modified)."""
        constants = constants_in_order(tree)
        positions = slot_positions(tree)
        source = cls(
            block_id=block_id,
            tree=tree,
            values=[constants[i].value for i in positions],
            code=code,
            calls=call_index(tree, slot_ids(tree)),
        )
        for node in ast.walk(tree):
            span = _span(node)
            if span is not None:
                source.nodes.setdefault(span, []).append(node)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                adjusted = _method_call_span(node)
                if adjusted is not None:
                    source.nodes.setdefault(adjusted, []).append(node)
        _assign_scopes(tree, (), source.scopes)
        return source

    def patch(self, code: str) -> None:
        """Take a ``patch_block_data`` rewrite's constants (same structure, validated before)."""
        self.values = slot_values(ast.parse(code), slot_positions(self.tree))
        self.code = code

    def line(self, number: int) -> str:
        """Line ``number`` (1-based) of the source as it stands, stripped; empty if none."""
        lines = self.code.splitlines()
        return lines[number - 1].strip() if 0 < number <= len(lines) else ""


@dataclass(frozen=True)
class Site:
    """Where a call is made, derived by the controller (see :func:`resolve_site`).

    Attributes:
        line: the call's 1-based line in its block's source (0 when unknown).
        call_site: the block's pseudo-module, function and class.
        literal_slots: parameter name -> slot in the running block's constants table, for the
            arguments that are plain literals of a direct call in the running block.
        refusal: why a ``patch_block_data`` cannot edit the call's data; None when it can.
        source_line: the text of ``line`` in the source of the block whose code makes the call.
    """

    line: int
    call_site: CallSite
    literal_slots: dict[str, int]
    refusal: str | None
    source_line: str = ""


def _span(node: ast.AST) -> Span | None:
    line, end = getattr(node, "lineno", None), getattr(node, "end_lineno", None)
    col, end_col = getattr(node, "col_offset", None), getattr(node, "end_col_offset", None)
    if line is None or end is None or col is None or end_col is None:
        return None
    return (line, end, col, end_col)


def _method_call_span(node: ast.Call) -> Span | None:
    """The span CPython gives a method call whose ``obj.name`` spans several lines: from the
    attribute's name to the call's end."""
    func = node.func
    assert isinstance(func, ast.Attribute)
    if func.end_lineno is None or func.lineno == func.end_lineno:
        return None
    if node.end_lineno is None or func.end_col_offset is None or node.end_col_offset is None:
        return None
    start = func.end_col_offset - len(func.attr)
    return (func.end_lineno, node.end_lineno, start, node.end_col_offset)


def _assign_scopes(node: ast.AST, scope: _Scope, out: dict[int, list[_Scope]]) -> None:
    """Record the scope chain(s) of ``node`` (which runs in ``scope``) and of every node below.

    Decorators, default values, annotations, class bases and keywords, and a comprehension's
    first iterable are evaluated in the enclosing scope, as the compiler does; a
    comprehension's own node and its first iterable also run in the comprehension's frame
    (its loop).
    """
    out.setdefault(id(node), []).append(scope)
    inner, outer_parts = _inner_scope(node, scope)
    if inner is None:
        for child in ast.iter_child_nodes(node):
            _assign_scopes(child, scope, out)
        return
    outer_ids = {id(part) for part in outer_parts}

    def visit(parent: ast.AST) -> None:
        for child in ast.iter_child_nodes(parent):
            if id(child) in outer_ids:
                _assign_scopes(child, scope, out)
            elif isinstance(child, ast.arguments | ast.arg | ast.comprehension):
                out.setdefault(id(child), []).append(inner)
                visit(child)  # holders of defaults, annotations and the first iterable
            else:
                _assign_scopes(child, inner, out)

    visit(node)
    if type(node) in _COMPREHENSION_FRAMES:
        out[id(node)].append(inner)
        for sub in ast.walk(outer_parts[0]):
            out.setdefault(id(sub), []).append(inner)


def _inner_scope(node: ast.AST, scope: _Scope) -> tuple[_Scope | None, list[ast.AST]]:
    """The scope ``node`` opens (None if it opens none) and its parts evaluated outside it."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
        args = node.args
        outer: list[ast.AST] = [*args.defaults, *(d for d in args.kw_defaults if d is not None)]
        if isinstance(node, ast.Lambda):
            return (*scope, ("function", "<lambda>")), outer
        outer += [*node.decorator_list, *_annotations(node)]
        return (*scope, ("function", node.name)), outer
    if isinstance(node, ast.ClassDef):
        outer = [*node.decorator_list, *node.bases, *node.keywords]
        return (*scope, ("class", node.name)), outer
    if isinstance(node, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
        name = _COMPREHENSION_FRAMES.get(type(node))
        if name is not None:
            return (*scope, ("function", name)), [node.generators[0].iter]
    return None, []


def _annotations(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    args = node.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    every += [a for a in (args.vararg, args.kwarg) if a is not None]
    found: list[ast.AST] = [a.annotation for a in every if a.annotation is not None]
    return found + ([node.returns] if node.returns is not None else [])


def _function_and_class(scope: _Scope) -> tuple[str | None, str | None]:
    """The (function, class) a frame of ``scope`` reports, as the runtime reads them from the
    code object's qualified name."""
    if not scope:
        return None, None
    kind, name = scope[-1]
    if kind == "class":
        return None, name
    parent = scope[-2] if len(scope) >= 2 else None
    return name, parent[1] if parent is not None and parent[0] == "class" else None


def _same_json(old: Any, new: Any) -> bool:
    try:
        return json.dumps(old, sort_keys=True) == json.dumps(new, sort_keys=True)
    except (TypeError, ValueError):
        return False


def _claims(msg: Mapping[str, Any]) -> tuple[Any, Span | None, bool, dict[str, Any]]:
    """The message's site, position, direct flag and literal slots, type-checked."""
    site, pos = msg.get("site"), msg.get("pos")
    direct, lits = msg.get("direct", False), msg.get("lits", {})  # absent: claims nothing
    if site is not None and not isinstance(site, str):
        raise SiteMismatch("the call's block is not a string")
    if not isinstance(direct, bool) or not isinstance(lits, dict):
        raise SiteMismatch("malformed direct or lits claim")
    if pos is None:
        return site, None, direct, lits
    if not (isinstance(pos, list) and len(pos) == 4 and all(type(v) is int for v in pos)):
        raise SiteMismatch(f"malformed position {pos!r}")
    return site, (pos[0], pos[1], pos[2], pos[3]), direct, lits


def resolve_site(
    msg: Mapping[str, Any],
    *,
    blocks: Mapping[str, BlockSource],
    running: str,
    params: list[ToolParam],
    arguments: Mapping[str, Any],
) -> Site:
    """Derive where a call is made from the controller's own parse; check the worker's claims.

    Args:
        msg: the ``call`` message (its tool already checked).
        blocks: the sources of the blocks run in this worker, by id.
        running: the running block's id.
        params: the tool's parameters, in positional order.
        arguments: the call's arguments as sent.

    Returns:
        The :class:`Site`.

    Raises:
        SiteMismatch: a claim is malformed or disagrees with the source or the arguments.
    """
    site, pos, direct, lits = _claims(msg)
    signature = _signature(
        tuple((p.name, p.python, p.required, p.default is not None) for p in params)
    )
    module = f"block_{site if site is not None else running}"
    if site is None or pos is None:
        if direct or lits or msg.get("line") != 0:
            raise SiteMismatch("a call claimed without a position in block code")
        where = "its position in block code is unknown"
        return Site(0, CallSite(module=module), {}, refusal=where)
    source = blocks.get(site)
    if source is None:
        raise SiteMismatch(f"a call claimed from block {site!r}, which this worker never ran")
    nodes = source.nodes.get(pos)
    if not nodes:
        raise SiteMismatch(f"position {list(pos)} is no expression of block {site}")
    if msg.get("line") != pos[0]:
        raise SiteMismatch(f"line {msg.get('line')!r} claimed for position {list(pos)}")
    call_site = _call_site(msg, source, nodes, module)
    text = source.line(pos[0])
    slots = _direct_literals(source, pos, signature, arguments) if direct else None
    if slots is None:
        if lits:
            raise SiteMismatch("literal slots claimed for a call that is not direct")
        refusal = (
            f"the tool's function is called indirectly at line {pos[0]} (passed to or "
            "wrapped by other code), so the literal behind each argument is unknown"
        )
        return Site(pos[0], call_site, {}, refusal, text)
    if site != running:
        if lits:
            raise SiteMismatch("literal slots claimed for a call of another block's code")
        refusal = f"the call is made by code of block {site}, not by the running block"
        return Site(pos[0], call_site, {}, refusal, text)
    if {str(k): v for k, v in slots.items()} != lits:
        raise SiteMismatch(f"literal slots {lits!r} claimed where the source has {slots!r}")
    return Site(pos[0], call_site, slots, None, text)


def _call_site(
    msg: Mapping[str, Any], source: BlockSource, nodes: list[ast.AST], module: str
) -> CallSite:
    """The function and class of the frame at ``nodes``, checked against the claim."""
    claim = (msg.get("fn"), msg.get("cls"))
    possible = {
        _function_and_class(scope) for node in nodes for scope in source.scopes.get(id(node), [])
    }
    if claim not in possible:
        raise SiteMismatch(
            f"function/class {claim!r} claimed where block {source.block_id} has "
            f"{sorted(possible, key=repr)!r}"
        )
    return CallSite(module=module, function=claim[0], class_name=claim[1])


@dataclass(frozen=True)
class _Signature:
    """A tool's parameters as the checks of a direct call need them."""

    pairs: list[list[str]]
    required: frozenset[str]
    optional: frozenset[str]
    defaulted: frozenset[str]


@functools.lru_cache(maxsize=256)
def _signature(params: tuple[tuple[str, str, bool, bool], ...]) -> _Signature:
    """From ``(name, python name, required, has a default)`` per parameter, in order."""
    return _Signature(
        pairs=[[name, python] for name, python, _, _ in params],
        required=frozenset(name for name, _, required, _ in params if required),
        optional=frozenset(name for name, _, required, _ in params if not required),
        defaulted=frozenset(
            name for name, _, required, has_default in params if not required and has_default
        ),
    )


def _direct_literals(
    source: BlockSource, pos: Span, signature: _Signature, arguments: Mapping[str, Any]
) -> dict[str, int]:
    """The literal slots of a call claimed direct, checked against its arguments.

    A direct call is a call expression whose callee is a plain name; the parameters it
    provides must be those the arguments have (required ones included), and each plain-literal
    argument's current value must be the argument's value (``None`` for an optional parameter
    leaves it out of the call).

    Raises:
        SiteMismatch: the claim does not fit the call expression at ``pos``.
    """
    call = source.calls.get(pos)
    if call is None or call["fn"] is None:
        raise SiteMismatch(f"a direct call claimed at {list(pos)}, where no call by name is")
    provided = provided_parameters(call, signature.pairs)
    if provided is not None:
        missing = signature.required - provided
        extra = {k for k in arguments if k not in provided} - signature.defaulted
        if missing or extra:
            raise SiteMismatch(
                f"the call at {list(pos)} provides {sorted(provided)}, not the arguments "
                f"{sorted(arguments)}"
            )
    slots = literal_arguments(call, signature.pairs)
    for name, slot in slots.items():
        value = source.values[slot] if 0 <= slot < len(source.values) else None
        if value is None and name in signature.optional:
            agrees = name not in arguments
        else:
            agrees = name in arguments and _same_json(arguments[name], value)
        if not agrees:
            raise SiteMismatch(
                f"argument {name!r} is {arguments.get(name)!r}, but the literal at "
                f"{list(pos)} is {value!r}"
            )
    return slots
