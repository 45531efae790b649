"""The constants table of a block (patch_block_data, the paper's "coordinated data edit", A.2).

Every block is compiled with its literal constants turned into lookups in a per-block table,
so a Params rewrite (same syntax tree, other constant values) can take effect in the running
block by refilling the table. The controller, the worker and the scope validation use the same
walk.

STANDARD LIBRARY ONLY, and nothing of this package: this module is the first of the worker's
runtime bundle (``controlscope.worker._sandbox.RUNTIME_MODULES``), run by a bare interpreter
inside the sandbox; the controller imports it from :mod:`controlscope.core`.
"""

from __future__ import annotations

import ast
from typing import Any


def constants_in_order(tree: ast.AST) -> list[ast.Constant]:
    """Every constant node of a tree, in a fixed depth-first source order."""
    out: list[ast.Constant] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Constant):
            out.append(node)
            return
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


def _literal_only_ids(tree: ast.AST) -> set[int]:
    """Ids of constants that must stay literal: format specs, match patterns and docstrings."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FormattedValue) and node.format_spec is not None:
            skip.update(id(n) for n in ast.walk(node.format_spec) if isinstance(n, ast.Constant))
        elif isinstance(node, ast.MatchValue | ast.MatchSingleton):
            skip.update(id(n) for n in ast.walk(node) if isinstance(n, ast.Constant))
        elif isinstance(node, ast.Module | ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            body = node.body
            if (
                body
                and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)
            ):
                skip.add(id(body[0].value))
    return skip


def slot_positions(tree: ast.AST) -> list[int]:
    """Which constants of :func:`constants_in_order` are slots of the block's constants table.

    Every literal constant is a slot, f-string text parts included, except the text of
    f-string format specs (``f"{x:.2f}"``: formatting, not data), constants inside ``match``
    patterns and docstrings (they must stay literal for the compiler or keep their meaning).

    Args:
        tree: the block as it started (parsed).

    Returns:
        Indices into ``constants_in_order(tree)``; slot ``i`` is the ``result[i]``-th constant.
    """
    skip = _literal_only_ids(tree)
    return [i for i, n in enumerate(constants_in_order(tree)) if id(n) not in skip]


def slot_values(tree: ast.AST, positions: list[int]) -> list[Any]:
    """The table values a rewrite of the block gives (same structure as the original).

    Raises:
        ValueError: the rewrite has fewer constants than ``positions`` needs.
    """
    constants = constants_in_order(tree)
    if positions and positions[-1] >= len(constants):
        raise ValueError("the rewrite has fewer constants than the block")
    return [constants[i].value for i in positions]


def structure_key(tree: ast.AST) -> str:
    """The tree's dump with every constant blanked: equal keys mean "same syntax tree except for
    constant values" (paper section A.2, coordinated data edit)."""

    def blank(node: Any) -> Any:
        if isinstance(node, ast.Constant):
            return "<const>"
        if isinstance(node, ast.AST):
            return [type(node).__name__] + [
                (f, blank(getattr(node, f, None))) for f in node._fields
            ]
        if isinstance(node, list):
            return [blank(v) for v in node]
        return node

    return repr(blank(tree))


Span = tuple[int, int, int, int]
"""A node's ``(line, end_line, col, end_col)``: what ``co_positions`` gives an instruction."""


def call_index(tree: ast.AST, slot_of: dict[int, int]) -> dict[Span, dict[str, Any]]:
    """Every call expression of a tree, keyed by its span, with what a call made there holds.

    Each entry: ``fn``, the callee's name when the callee is a plain name (else None);
    ``pos``, ``{index: slot}`` of its plain-literal positional arguments (up to the first
    ``*args``); ``kw``, ``{name: slot}`` of its plain-literal keyword arguments; ``npos``, the
    positional arguments before any ``*args``; ``names``, every keyword's name; ``star``,
    whether it has ``*args`` or ``**kwargs`` (then the arguments it provides are unknown).

    Args:
        tree: the block as it started (parsed).
        slot_of: constant node id -> slot of the constants table.
    """
    calls: dict[Span, dict[str, Any]] = {}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or node.end_lineno is None:
            continue
        pos: dict[int, int] = {}
        npos = 0
        star = False
        for i, arg in enumerate(node.args):
            if isinstance(arg, ast.Starred):
                star = True
                break
            npos += 1
            if isinstance(arg, ast.Constant) and id(arg) in slot_of:
                pos[i] = slot_of[id(arg)]
        kw = {
            k.arg: slot_of[id(k.value)]
            for k in node.keywords
            if k.arg is not None and isinstance(k.value, ast.Constant) and id(k.value) in slot_of
        }
        key = (node.lineno, node.end_lineno, node.col_offset, node.end_col_offset or 0)
        calls[key] = {
            "fn": node.func.id if isinstance(node.func, ast.Name) else None,
            "pos": pos,
            "kw": kw,
            "npos": npos,
            "names": [k.arg for k in node.keywords if k.arg is not None],
            "star": star or any(k.arg is None for k in node.keywords),
        }
    return calls


def literal_arguments(call: dict[str, Any], params: list[list[str]]) -> dict[str, int]:
    """The slots of a call's plain-literal arguments, by the tool's parameter names.

    Args:
        call: the call's entry in :func:`call_index`.
        params: the tool's parameters in positional order, each ``[name, python_name]``
            (the server's name and the proxy's parameter name).

    Returns:
        Parameter name (the server's) -> slot; positional literals beyond the parameters and
        keywords that name no parameter are left out (such a call raises before it is made).
    """
    by_python = {python: name for name, python in params}
    out = {params[i][0]: s for i, s in call["pos"].items() if i < len(params)}
    out.update({by_python[k]: s for k, s in call["kw"].items() if k in by_python})
    return out


def provided_parameters(call: dict[str, Any], params: list[list[str]]) -> set[str] | None:
    """The parameters (the server's names) a call provides, or None when it has ``*args`` or
    ``**kwargs`` (unknown)."""
    if call["star"]:
        return None
    by_python = {python: name for name, python in params}
    out = {params[i][0] for i in range(min(call["npos"], len(params)))}
    out.update(by_python[k] for k in call["names"] if k in by_python)
    return out


def slot_ids(tree: ast.AST) -> dict[int, int]:
    """Constant node id -> its slot in the block's constants table."""
    constants = constants_in_order(tree)
    return {id(constants[i]): slot for slot, i in enumerate(slot_positions(tree))}


def transform_block(
    tree: ast.Module, table: str
) -> tuple[ast.Module, list[Any], dict[Span, dict[str, Any]]]:
    """Rewrite each tabulated constant into ``table[i]`` and index the block's calls.

    Args:
        tree: the parsed block (modified in place).
        table: the module-level name of the block's constants list.

    Returns:
        ``(tree, values, calls)``: the rewritten tree, the initial table values, and every
        call expression (keyed by its ``(line, end_line, col, end_col)`` span) as
        :func:`call_index` describes it.
    """
    constants = constants_in_order(tree)
    slots = [constants[i] for i in slot_positions(tree)]
    slot_of = slot_ids(tree)
    calls = call_index(tree, slot_of)

    def lookup(i: int, node: ast.AST) -> ast.expr:
        new = ast.Subscript(
            value=ast.Name(id=table, ctx=ast.Load()),
            slice=ast.Constant(value=i),
            ctx=ast.Load(),
        )
        return ast.copy_location(new, node)

    class _Rewrite(ast.NodeTransformer):
        def visit_Constant(self, node: ast.Constant) -> ast.AST:
            i = slot_of.get(id(node))
            return node if i is None else lookup(i, node)

        def visit_JoinedStr(self, node: ast.JoinedStr) -> ast.AST:
            # f-string text becomes a replacement field formatting the table's value
            values: list[ast.expr] = []
            for v in node.values:
                i = slot_of.get(id(v)) if isinstance(v, ast.Constant) else None
                if i is None:
                    values.append(self.visit(v))
                else:
                    field = ast.FormattedValue(value=lookup(i, v), conversion=-1, format_spec=None)
                    values.append(ast.copy_location(field, v))
            node.values = values
            return node

    values = [n.value for n in slots]
    new_tree = _Rewrite().visit(tree)
    ast.fix_missing_locations(new_tree)
    return new_tree, values, calls
