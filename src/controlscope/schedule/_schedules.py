"""Schedules: at which boundaries a reviewer is asked (paper sections 3.2, 6.2, A.2, B, C.2).

A schedule answers one question per boundary, ``should_review(boundary, ctx)``, and is told what
was executed there, ``observe(boundary, realized)``, after every boundary whether it was reviewed
or not. ``should_review`` is a query: asking twice gives the same answer; all state changes happen
in ``observe``. Schedules compose with scopes freely (the scope says what a review may do, the
schedule when one happens); a schedule object serves one trajectory.

Specs accepted by :func:`parse_schedule`:

==================  =====================================================================
``never``           no reviews (the Keep baseline).
``continuous``      the paper's sustained revision policy (3.2, B.1, B.2): a review at every
                    boundary that follows a completed public call; none before the task's
                    first call, none at a replacement's first call before a further call
                    completes (:class:`Continuous`).
``every_boundary``  every boundary, the first call and a replacement's first call included
                    (not the paper's rule; kept for comparison).
``per_block``       the first boundary of each natural block (AppWorld's one review per natural
                    block, A.2); replacement blocks are not natural blocks.
``once:K``          the boundary of the primitive call with 0-based index ``K``, once.
``once``            the paper's local rule (appendix B), placed from a recorded source run
                    (:func:`local_rule_boundary`; ``RunSpec.source_run``), run as ``once:K``.
``once_online``     an online approximation of the local rule that needs no source run
                    (:class:`OnceOnline`); not the paper's rule.
``midpoint:N``      once, after ``floor(N/2)`` completed calls; ``N`` is the source
                    trajectory's call count (paper B.1; bare ``midpoint`` takes it from a
                    recorded source run).
``protect:n``       continuous, but after a replacement no review until ``n`` more primitive
                    calls have completed (paper B.2).
``retain_first``    continuous until the first replacement, then no more reviews (paper C.2).
==================  =====================================================================

The feedback-visibility boundary of appendix A.3 (:func:`feedback_rule_boundary`) is placed
from a recorded source run too; it starts branches (``controlscope branch --at feedback-rule``,
a panel's ``start = "feedback_rule"``) and is not a schedule spec of its own.

``protect:n`` and ``retain_first`` are also modifiers of any base schedule, joined with ``+``:
``per_block+protect:5``, ``midpoint:40+continuous`` (the paper's continuous rule from the
midpoint on; B.1's continuous condition shares the first review with the one-time condition).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from controlscope.core import Boundary, Operation


@dataclass(frozen=True)
class ScheduleContext:
    """What a schedule may consult at a boundary besides the boundary itself.

    Attributes:
        code: the running block's source.
        block_index: the block's 0-based index among the trajectory's blocks (replacements
            included).
        is_replacement: True when the running block is a replacement.
        queued_blocks: sources of the blocks queued behind it in the same reply.
        calls_completed: primitive calls completed in the task so far (the pending call not
            included); usually ``boundary.call_index``.
    """

    code: str
    block_index: int = 0
    is_replacement: bool = False
    queued_blocks: tuple[str, ...] = ()
    calls_completed: int = 0


@runtime_checkable
class Schedule(Protocol):
    """When to review: consulted at every boundary, told what was executed there.

    Attributes:
        name: the canonical spec (``parse_schedule(s.name)`` rebuilds it).
    """

    name: str

    def should_review(self, boundary: Boundary, ctx: ScheduleContext) -> bool:
        """Decide whether the reviewer is asked at ``boundary`` (no side effects).

        Args:
            boundary: the pending call.
            ctx: the running block and the task's progress.

        Returns:
            True when the reviewer should be asked.
        """
        ...

    def observe(self, boundary: Boundary, realized: Operation) -> None:
        """Record the operation executed at ``boundary``.

        Args:
            boundary: the boundary just decided.
            realized: the operation executed there (``keep`` when it was not reviewed).
        """
        ...


class _Tracked:
    """Base for schedules that need the context of the boundary being observed.

    ``should_review`` remembers the ``calls_completed`` it saw for a boundary, so that ``observe``
    (which only gets the boundary) counts calls the same way; without it ``observe`` falls back to
    ``boundary.call_index``.
    """

    def __init__(self) -> None:
        self._last_key: tuple[str, int] | None = None
        self._last_completed = 0

    def _remember(self, boundary: Boundary, ctx: ScheduleContext) -> None:
        self._last_key = (boundary.block_id, boundary.call_index)
        self._last_completed = ctx.calls_completed

    def _completed_at(self, boundary: Boundary) -> int:
        if self._last_key == (boundary.block_id, boundary.call_index):
            return self._last_completed
        return boundary.call_index


class Never:
    """No reviews: the Keep baseline (every decision is the program's own)."""

    name = "never"

    def should_review(self, boundary: Boundary, ctx: ScheduleContext) -> bool:
        """Always False."""
        return False

    def observe(self, boundary: Boundary, realized: Operation) -> None:
        """Nothing to track."""


class Continuous(_Tracked):
    """The paper's sustained revision policy: a review at each boundary that follows a
    completed public call (sections 3.2, B.1: "continuous review can recur after a further
    public call").

    A boundary is reviewed when more primitive calls have completed than at the previous
    boundary, counting from zero: none before the task's first call, and none at a replacement's
    first call (its replaced call was cancelled) before a further call completes. One review per
    completed call that some boundary follows: B.2's 517 reviews for 537 calls over 20 tasks.
    """

    name = "continuous"

    def __init__(self) -> None:
        super().__init__()
        self._last = 0

    def should_review(self, boundary: Boundary, ctx: ScheduleContext) -> bool:
        """True when a primitive call completed since the previous boundary."""
        self._remember(boundary, ctx)
        return ctx.calls_completed > self._last

    def observe(self, boundary: Boundary, realized: Operation) -> None:
        """Remember how many calls had completed at this boundary."""
        self._last = max(self._last, self._completed_at(boundary))


class EveryBoundary:
    """Review at every boundary, the task's first call and a replacement's first call included.

    Not the paper's rule (see :class:`Continuous`); kept to compare against it.
    """

    name = "every_boundary"

    def should_review(self, boundary: Boundary, ctx: ScheduleContext) -> bool:
        """Always True."""
        return True

    def observe(self, boundary: Boundary, realized: Operation) -> None:
        """Nothing to track."""


class PerBlock:
    """Review at the first boundary of each natural block (paper A.2: "its review occurs once
    per natural block"): a replacement block is not a natural block and is not reviewed."""

    name = "per_block"

    def __init__(self) -> None:
        self._seen: set[str] = set()

    def should_review(self, boundary: Boundary, ctx: ScheduleContext) -> bool:
        """True for the first boundary of a natural block not seen before."""
        return not ctx.is_replacement and boundary.block_id not in self._seen

    def observe(self, boundary: Boundary, realized: Operation) -> None:
        """Mark the boundary's block as seen."""
        self._seen.add(boundary.block_id)


class AtCall(_Tracked):
    """Review once, at the first boundary after ``k`` completed primitive calls.

    ``once:K`` uses the pending call's index (``boundary.call_index >= K``); ``midpoint:N`` uses
    the completed-call count (``ctx.calls_completed >= floor(N/2)``, paper B.1). "At or after"
    rather than "exactly at" keeps the review when a cancelled call shifts the count; the review
    still happens once only.

    Args:
        k: the call index / completed-call count.
        name: the spec this schedule was built from.
        by_completed: count ``ctx.calls_completed`` (True) or ``boundary.call_index`` (False).
    """

    def __init__(self, k: int, *, name: str, by_completed: bool) -> None:
        super().__init__()
        if k < 0:
            raise ValueError(f"schedule {name!r}: the call index must be >= 0")
        self.k = k
        self.name = name
        self._by_completed = by_completed
        self._done = False

    def _reached(self, boundary: Boundary, completed: int) -> bool:
        return (completed if self._by_completed else boundary.call_index) >= self.k

    def should_review(self, boundary: Boundary, ctx: ScheduleContext) -> bool:
        """True at the first boundary that reaches the call, until it has been observed."""
        self._remember(boundary, ctx)
        return not self._done and self._reached(boundary, ctx.calls_completed)

    def observe(self, boundary: Boundary, realized: Operation) -> None:
        """After the chosen boundary has passed, never review again."""
        if self._reached(boundary, self._completed_at(boundary)):
            self._done = True


class OnceOnline(_Tracked):
    """``once_online``: one review near the paper's local boundary, chosen online (an
    approximation, not the paper's rule).

    The paper picks "the first supported module-level internal boundary of the earliest
    multi-call writer block, with a read-block fallback" from a complete source trajectory
    (``once`` with a recorded source run does that: :func:`local_rule_boundary`). Online, the
    future is unknown, so this schedule decides with what is known at a boundary: the running
    block and the blocks queued behind it.

    - A *multi-call writer* is a block whose code calls writing tools more than once, counted
      statically (:func:`static_write_count`: each call site counts once, a call site inside a
      loop or comprehension counts as two, since it can write repeatedly).
    - A *read block* is a block whose code calls an information-returning tool.
    - Review at the first module-level boundary (``call_site.at_module_level``) of a multi-call
      writer; or, when neither the running block nor any queued block is a multi-call writer, at
      the first module-level boundary of a read block. Then never again.

    Args:
        write_tools: names of the environment's writing tools.
        read_tools: names of its information-returning tools.
    """

    name = "once_online"

    def __init__(
        self,
        *,
        write_tools: frozenset[str],
        read_tools: frozenset[str],
    ) -> None:
        super().__init__()
        self.write_tools = write_tools
        self.read_tools = read_tools
        self._done = False
        self._chosen: tuple[str, int] | None = None

    def _eligible(self, boundary: Boundary, ctx: ScheduleContext) -> bool:
        if not boundary.call_site.at_module_level:
            return False
        if static_write_count(ctx.code, self.write_tools) > 1:
            return True
        if any(static_write_count(q, self.write_tools) > 1 for q in ctx.queued_blocks):
            return False
        return static_call_count(ctx.code, self.read_tools) > 0

    def should_review(self, boundary: Boundary, ctx: ScheduleContext) -> bool:
        """True at the chosen boundary (see the class docstring), once."""
        if self._done:
            return False
        eligible = self._eligible(boundary, ctx)
        self._chosen = (boundary.block_id, boundary.call_index) if eligible else None
        return eligible

    def observe(self, boundary: Boundary, realized: Operation) -> None:
        """After the chosen boundary has passed, never review again."""
        if self._chosen == (boundary.block_id, boundary.call_index):
            self._done = True


class Protect(_Tracked):
    """A base schedule with a protection window after each replacement (paper B.2).

    After a realized ``replace_workflow``, no review happens until ``n`` more primitive calls
    have completed (counted with ``ctx.calls_completed``: the replaced call is cancelled, so the
    window ends at the boundary where ``calls_completed >= completed_at_replacement + n``).

    Args:
        base: the schedule that decides outside the window (``continuous`` for ``protect:n``).
        n: calls protected after each replacement (>= 0).
    """

    def __init__(self, base: Schedule, n: int) -> None:
        super().__init__()
        if n < 0:
            raise ValueError("protect:n needs n >= 0")
        self.base = base
        self.n = n
        self.name = f"protect:{n}" if base.name == "continuous" else f"{base.name}+protect:{n}"
        self._until = 0

    def should_review(self, boundary: Boundary, ctx: ScheduleContext) -> bool:
        """The base schedule's answer, False inside a protection window."""
        self._remember(boundary, ctx)
        base = self.base.should_review(boundary, ctx)  # asked always: it may count calls
        return base and ctx.calls_completed >= self._until

    def observe(self, boundary: Boundary, realized: Operation) -> None:
        """Open a window at a replacement; pass every boundary on to the base schedule."""
        if realized.kind == "replace_workflow":
            self._until = self._completed_at(boundary) + self.n
        self.base.observe(boundary, realized)


class RetainFirst:
    """A base schedule that stops for good after the first replacement (paper C.2, 6.2).

    Args:
        base: the schedule before the first replacement (``continuous`` for ``retain_first``).
    """

    def __init__(self, base: Schedule) -> None:
        self.base = base
        self.name = "retain_first" if base.name == "continuous" else f"{base.name}+retain_first"
        self._replaced = False

    def should_review(self, boundary: Boundary, ctx: ScheduleContext) -> bool:
        """The base schedule's answer until a replacement was realized, then False."""
        base = self.base.should_review(boundary, ctx)  # asked always: it may count calls
        return base and not self._replaced

    def observe(self, boundary: Boundary, realized: Operation) -> None:
        """Stop after a realized replacement."""
        if realized.kind == "replace_workflow":
            self._replaced = True
        self.base.observe(boundary, realized)


class FromFirst:
    """Review where ``first`` chooses, then by the continuous rule (:class:`Continuous`).

    ``midpoint:N+continuous`` is the paper's continuous condition of B.1: its first review is the
    one-time condition's review, and "continuous review can recur after a further public call".

    Args:
        first: the schedule that places the first review.
    """

    def __init__(self, first: Schedule) -> None:
        self.first = first
        self.name = f"{first.name}+continuous"
        self._then = Continuous()
        self._started = False
        self._fired: tuple[str, int] | None = None

    def should_review(self, boundary: Boundary, ctx: ScheduleContext) -> bool:
        """The first schedule's answer until its boundary has passed, then the continuous
        rule's."""
        if self._started:
            return self._then.should_review(boundary, ctx)
        self._then.should_review(boundary, ctx)  # keeps its count of the boundary's calls
        fired = self.first.should_review(boundary, ctx)
        self._fired = (boundary.block_id, boundary.call_index) if fired else None
        return fired

    def observe(self, boundary: Boundary, realized: Operation) -> None:
        """Start the continuous rule once the first schedule's boundary has passed."""
        if self._fired == (boundary.block_id, boundary.call_index):
            self._started = True
        self.first.observe(boundary, realized)
        self._then.observe(boundary, realized)


def _int_arg(spec: str, text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"schedule {spec!r}: {text!r} is not an integer") from None
    if value < 0:
        raise ValueError(f"schedule {spec!r}: {value} must be >= 0")
    return value


SCHEDULE_FORMS = (
    "never, continuous, every_boundary, per_block, once:K, once (with a source run), "
    "once_online, midpoint:N, midpoint (with a source run), protect:n, retain_first"
)
"""The schedule specs :func:`parse_schedule` accepts, as help texts and error messages list them
(the module docstring describes each)."""

BRANCH_SCHEDULE_FORMS = "once (then Keep), continuous, protect:n, retain_first"
"""The schedules a branch may take after its boundary, as help texts list them: ``once`` (the
boundary's one review, then Keep) or the continuous rule, alone or with ``protect:n`` or
``retain_first`` joined by ``+`` (``controlscope branch --schedule``)."""

SOURCE_PLACED = ("once", "midpoint")
"""Schedule parts that take their number from a recorded source run when given bare: ``once``
(the local rule's call index, appendix B) and ``midpoint`` (the source's call count, B.1)."""

_STAND_IN = 999_999_937  # a number no user writes, to check a bare part's grammar


def parse_schedule(
    spec: str,
    *,
    write_tools: frozenset[str],
    read_tools: frozenset[str],
) -> Schedule:
    """Build a fresh schedule from its spec (see the module docstring for the grammar).

    Args:
        spec: e.g. ``"continuous"``, ``"once:6"``, ``"midpoint:40"``, ``"protect:5"``,
            ``"per_block+retain_first"``.
        write_tools: the environment's writing tools (for ``once``'s local rule).
        read_tools: the environment's information-returning tools (for ``once``).

    Returns:
        A schedule that has observed nothing yet.

    Raises:
        ValueError: unknown or malformed spec (the message lists the accepted forms).
    """
    parts = [p.strip() for p in spec.strip().split("+")]
    if not parts or any(not p for p in parts):
        raise ValueError(f"empty schedule spec {spec!r}; expected one of {SCHEDULE_FORMS}")
    base = _parse_one(parts[0], spec, write_tools, read_tools, base=None)
    for part in parts[1:]:
        base = _parse_one(part, spec, write_tools, read_tools, base=base)
    return base


def schedule_name(spec: str) -> str:
    """The canonical form of a schedule spec, e.g. ``" once:3 "`` -> ``"once:3"``. A bare
    ``once`` or ``midpoint`` (placed from a source run, see :func:`place_from_source`) stays
    bare.

    Raises:
        ValueError: unknown or malformed spec.
    """
    if not needs_source(spec):
        return parse_schedule(spec, write_tools=frozenset(), read_tools=frozenset()).name
    placed = place_from_source(spec, call_index=_STAND_IN, calls=_STAND_IN)
    name = schedule_name(placed)
    return name.replace(f"once:{_STAND_IN}", "once").replace(f"midpoint:{_STAND_IN}", "midpoint")


def needs_source(spec: str) -> bool:
    """Whether ``spec`` has a bare ``once`` or ``midpoint``, whose number a recorded source run
    supplies."""
    return any(part.strip() in SOURCE_PLACED for part in spec.split("+"))


def place_from_source(spec: str, *, call_index: int | None, calls: int) -> str:
    """``spec`` with a bare ``once`` made ``once:K`` and a bare ``midpoint`` made
    ``midpoint:N``, from a source trajectory (paper appendix B and B.1).

    Args:
        spec: a schedule spec.
        call_index: the local rule's boundary in the source (``K``); None when the source has
            no eligible boundary.
        calls: the source trajectory's primitive calls (``N``).

    Returns:
        The spec with numbers (not canonicalised).

    Raises:
        ValueError: a bare ``once`` and no eligible boundary.
    """
    parts = []
    for part in (p.strip() for p in spec.split("+")):
        if part == "once":
            if call_index is None:
                raise ValueError("the source trajectory has no boundary the local rule selects")
            part = f"once:{call_index}"
        elif part == "midpoint":
            part = f"midpoint:{calls}"
        parts.append(part)
    return "+".join(parts)


def _parse_one(
    part: str,
    spec: str,
    write_tools: frozenset[str],
    read_tools: frozenset[str],
    *,
    base: Schedule | None,
) -> Schedule:
    """Parse one ``+``-separated part; modifiers wrap ``base`` (continuous when it is None).

    Raises:
        ValueError: an unknown or malformed part.
    """
    head, _, arg = part.partition(":")
    if base is not None and head not in {"protect", "retain_first", "continuous"}:
        raise ValueError(
            f"schedule {spec!r}: only protect:n, retain_first or continuous may follow '+'"
        )
    if head == "protect":
        if not arg:
            raise ValueError(f"schedule {spec!r}: protect needs a call count, e.g. protect:5")
        return Protect(base or Continuous(), _int_arg(spec, arg))
    simple: dict[str, type[Never | EveryBoundary | PerBlock]] = {
        "never": Never,
        "every_boundary": EveryBoundary,
        "per_block": PerBlock,
    }
    if arg and head in {*simple, "continuous", "retain_first", "once_online"}:
        raise ValueError(f"schedule {spec!r}: {head} takes no argument")
    if head == "retain_first":
        return RetainFirst(base or Continuous())
    if head == "continuous":
        return Continuous() if base is None else FromFirst(base)
    if head in simple:
        return simple[head]()
    if head == "once_online":
        return OnceOnline(write_tools=write_tools, read_tools=read_tools)
    if head == "once":
        if not arg:
            raise ValueError(
                f"schedule {spec!r}: once needs its boundary from a recorded source run "
                "(RunSpec.source_run, --source-run) or a call index, e.g. once:6"
            )
        k = _int_arg(spec, arg)
        return AtCall(k, name=f"once:{k}", by_completed=False)
    if head == "midpoint":
        if not arg:
            raise ValueError(
                f"schedule {spec!r}: midpoint needs the source trajectory's call count, "
                "e.g. midpoint:40, or a recorded source run (RunSpec.source_run, --source-run)"
            )
        n = _int_arg(spec, arg)
        return AtCall(n // 2, name=f"midpoint:{n}", by_completed=True)
    raise ValueError(f"unknown schedule {spec!r}; expected one of {SCHEDULE_FORMS}")


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
