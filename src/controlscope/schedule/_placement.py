"""Offline placement from a recorded source trajectory: the paper's local rule (appendix B) and
the feedback-visibility rule (A.3), and the static call counts they and ``once_online`` read.

The paper fixes these boundaries "before intervention runs" from the completed source trajectory
of each task and source program; :mod:`controlscope.run` reads the trajectory from a run
directory and places a bare ``once`` or ``midpoint`` with them.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field

from controlscope.core import Boundary


def static_call_count(code: str, tools: frozenset[str], *, loop_weight: int = 1) -> int:
    """Count call sites of ``tools`` in ``code``.

    A call site is ``name(...)`` with ``name`` in ``tools`` (the proxies are plain functions).
    A call site inside a ``for``/``while`` loop or a comprehension counts ``loop_weight`` times.
    Code that does not parse counts 0.
    """
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return 0
    counter = _CallCounter(tools, loop_weight)
    counter.visit(tree)
    return counter.count


def static_write_count(code: str, write_tools: frozenset[str]) -> int:
    """Static count of writes in ``code`` for the local rule: call sites of writing tools, a
    call site inside a loop or comprehension counting as two (it can write more than once)."""
    return static_call_count(code, write_tools, loop_weight=2)


@dataclass
class _CallCounter(ast.NodeVisitor):
    tools: frozenset[str]
    loop_weight: int
    count: int = 0
    _depth: int = field(default=0)

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in self.tools:
            self.count += self.loop_weight if self._depth else 1
        self.generic_visit(node)

    def _loop(self, node: ast.AST) -> None:
        self._depth += 1
        self.generic_visit(node)
        self._depth -= 1

    visit_For = _loop
    visit_AsyncFor = _loop
    visit_While = _loop
    visit_ListComp = _loop
    visit_SetComp = _loop
    visit_DictComp = _loop
    visit_GeneratorExp = _loop


@dataclass(frozen=True)
class SourceBlock:
    """One natural block of a recorded source trajectory, as it was observed.

    Attributes:
        block_id: the block's id.
        boundaries: its boundaries in order (one per primitive call it reached).
        tools: the tools of the primitive calls it completed, in order.
        queued_after: blocks queued behind it in its reply (its queued calls).
    """

    block_id: str
    boundaries: tuple[Boundary, ...]
    tools: tuple[str, ...]
    queued_after: int = 0


@dataclass(frozen=True)
class LocalBoundary:
    """A source-placed rule's choice in one source trajectory: the local rule's (paper
    appendix B) or the feedback rule's (A.3).

    Attributes:
        call_index: the chosen boundary's call index; None when the task-source pair is
            ineligible.
        block_id: the block of the chosen boundary (empty when ineligible).
        read_fallback: True when no multi-call writer block had a supported boundary and a
            read block's was chosen.
        reason: why the pair is ineligible (empty when it is eligible).
    """

    call_index: int | None
    block_id: str = ""
    read_fallback: bool = False
    reason: str = ""

    @property
    def eligible(self) -> bool:
        """Whether a boundary was chosen."""
        return self.call_index is not None


def local_rule_boundary(
    blocks: Sequence[SourceBlock],
    *,
    write_tools: frozenset[str],
    read_tools: frozenset[str],
) -> LocalBoundary:
    """The paper's local boundary (appendix B) in a complete source trajectory.

    "The first supported module-level internal boundary of the earliest multi-call writer block,
    with a read-block fallback. Function- and class-internal boundaries are excluded by this
    rule. All selected contexts have empty queued-call lists." Read on the observed calls
    (where the paper is silent, these are our readings):

    - a *multi-call writer block* completed at least two primitive calls, at least one with a
      writing tool; a *read block* completed at least two, at least one information-returning;
    - an *internal* boundary comes after the block's first call (``block_call_index >= 1``),
      so the block is under way and has observed something;
    - a *supported* boundary is at module level (``call_site.at_module_level``) in a block with
      no blocks queued behind it in its reply (the paper's selected contexts all have empty
      queues; here that is part of the rule).

    Args:
        blocks: the source trajectory's natural blocks in order, as observed.
        write_tools: the environment's writing tools.
        read_tools: the environment's information-returning tools.

    Returns:
        The choice; ``call_index`` None (with ``reason``) when the pair is ineligible.
    """

    def supported(block: SourceBlock) -> Boundary | None:
        if block.queued_after:
            return None
        for b in block.boundaries:
            if b.block_call_index >= 1 and b.call_site.at_module_level:
                return b
        return None

    def first(tools: frozenset[str]) -> tuple[SourceBlock, Boundary] | None:
        for block in blocks:
            if len(block.tools) >= 2 and any(t in tools for t in block.tools):
                chosen = supported(block)
                if chosen is not None:
                    return block, chosen
        return None

    for tools, fallback in ((write_tools, False), (read_tools, True)):
        found = first(tools)
        if found is not None:
            return LocalBoundary(found[1].call_index, found[0].block_id, read_fallback=fallback)
    return LocalBoundary(
        None,
        reason="no multi-call writer or read block has a module-level boundary after its "
        "first call with no blocks queued behind it",
    )


_CONTROL_FLOW: tuple[type[ast.AST], ...] = (
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.Try,
    ast.With,
    ast.AsyncWith,
    ast.Match,
    ast.FunctionDef,
    ast.AsyncFunctionDef,
    ast.ClassDef,
    ast.Lambda,
    ast.IfExp,
    ast.BoolOp,
    ast.ListComp,
    ast.SetComp,
    ast.DictComp,
    ast.GeneratorExp,
    ast.TryStar,
)
"""Constructs a call inside of which may run conditionally or repeatedly (the feedback rule's
"control-flow constructs", paper A.3): compound statements, function and class bodies, lambdas,
conditional and short-circuit expressions, comprehensions."""


def _tool_sites(tree: ast.AST, tool: str) -> list[tuple[ast.Call, bool]]:
    """Every call site ``tool(...)`` in ``tree``, each with whether it is inside a
    control-flow construct (:data:`_CONTROL_FLOW`)."""
    sites: list[tuple[ast.Call, bool]] = []

    def walk(node: ast.AST, inside: bool) -> None:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == tool:
            sites.append((node, inside))
        nested = inside or isinstance(node, _CONTROL_FLOW)
        for child in ast.iter_child_nodes(node):
            walk(child, nested)

    walk(tree, False)
    return sites


def direct_site_problem(boundary: Boundary) -> str | None:
    """Why the pending call at ``boundary`` is not "a unique direct API site outside
    control-flow constructs" (paper A.3's feedback rule); None when it is.

    Read on the running block's source (``boundary.code``), as the controller recorded it:

    - *direct*: the call is made by the running block's own module-level code through the
      tool's name (``call_site.at_module_level`` and no ``params_refusal``: not indirectly,
      not by a function of this or another block), and the call at ``boundary.line`` is
      ``tool(...)``;
    - *unique*: the block's code has exactly one call site of the pending tool, so the pending
      method and source line (all the ``code_only`` view shows of the call) name one site;
    - *outside control-flow constructs*: no enclosing ``if``/``for``/``while``/``try``/
      ``with``/``match``, function, class, lambda, conditional or short-circuit expression or
      comprehension (:data:`_CONTROL_FLOW`), so the site runs exactly once.

    Args:
        boundary: a recorded boundary.

    Returns:
        The reason (one phrase), or None.
    """
    if not boundary.call_site.at_module_level or boundary.params_refusal is not None:
        return "the pending call is not made directly by the block's module-level code"
    try:
        tree = ast.parse(boundary.code)
    except SyntaxError:
        return "the block's recorded code does not parse"
    sites = _tool_sites(tree, boundary.tool)
    at_line = [inside for node, inside in sites if node.lineno == boundary.line]
    if not at_line:
        return f"line {boundary.line} has no direct call of {boundary.tool}"
    if len(sites) != 1:
        return f"the block has {len(sites)} call sites of {boundary.tool}, not one"
    if at_line[0]:
        return "the pending call is inside a control-flow construct"
    return None


def feedback_rule_boundary(
    blocks: Sequence[SourceBlock], *, read_tools: frozenset[str]
) -> LocalBoundary:
    """The feedback-visibility diagnostic's boundary (paper A.3, section 5.4) in a complete
    source trajectory.

    A.3: "the first same-block boundary following an information-returning API call; the
    pending call must be a unique direct API site outside control-flow constructs". Read on the
    observed calls (where the paper is silent, these are our readings):

    - the candidate is the boundary of the call that follows, in the same natural block, the
      trajectory's first information-returning call (a call of ``read_tools``) that has a
      further call in its block; a read call that ends its block has no same-block boundary
      after it, and the search goes on;
    - the pair is eligible when the candidate's pending call passes
      :func:`direct_site_problem`, and ineligible (with the reason) otherwise: the rule names
      one boundary, and does not search on for a later one;
    - the block need not be the task's first (A.3: only 1 of the 17 eligible pairs would
      qualify if it had to), and queued blocks are allowed.

    Args:
        blocks: the source trajectory's natural blocks in order, as observed.
        read_tools: the environment's information-returning tools.

    Returns:
        The choice (``read_fallback`` is always False); ``call_index`` None (with ``reason``)
        when the pair is ineligible.
    """
    for block in blocks:
        following = {b.block_call_index: b for b in block.boundaries}
        for i, tool in enumerate(block.tools):
            candidate = following.get(i + 1)
            if tool not in read_tools or candidate is None:
                continue
            problem = direct_site_problem(candidate)
            if problem is not None:
                return LocalBoundary(
                    None,
                    reason=f"the boundary after the first information-returning call "
                    f"(call {candidate.call_index}, {candidate.tool}) is not eligible: {problem}",
                )
            return LocalBoundary(candidate.call_index, block.block_id)
    return LocalBoundary(
        None, reason="no information-returning call is followed by a call in the same block"
    )
