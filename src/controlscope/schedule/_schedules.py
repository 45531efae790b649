"""The schedules: when a reviewer is asked (paper sections 3.2, 6.2, A.2, B, C.2).

A schedule answers one question per boundary, ``should_review(boundary, ctx)``, and is told what
was executed there, ``observe(boundary, realized)``, after every boundary whether it was reviewed
or not. ``should_review`` is a query: asking twice gives the same answer; all state changes happen
in ``observe``. Schedules compose with scopes freely (the scope says what a review may do, the
schedule when one happens); a schedule object serves one trajectory. The specs that build them
are read in :mod:`controlscope.schedule._grammar`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from controlscope.core import Boundary, Operation, ToolAnnotations, ToolRisk
from controlscope.schedule._placement import static_call_count, static_write_count


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


@runtime_checkable
class ReadsAnnotations(Protocol):
    """A schedule that decides with the pending tool's annotations (``destructive``, and the
    modifiers around it): it says how it judged a boundary, for the log."""

    def tool_risk(self, boundary: Boundary) -> ToolRisk | None:
        """How the pending call at ``boundary`` was judged; None when no part read the hints."""
        ...


def tool_risk(schedule: object, boundary: Boundary) -> ToolRisk | None:
    """How ``schedule`` judged the pending call at ``boundary`` by its tool's annotations (the
    boundary event records it); None for a schedule that reads none."""
    return schedule.tool_risk(boundary) if isinstance(schedule, ReadsAnnotations) else None


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


class Destructive:
    """Review only calls of tools a server marks destructive or not read-only (MCP tool
    annotations; :meth:`~controlscope.core.ToolAnnotations.risk`): a tool without annotations
    takes MCP's defaults (not read-only, destructive) and is reviewed.

    Alone (``destructive``) it reviews every such call, the task's first call included; after
    ``+`` it narrows the schedule before it (``continuous+destructive``: the continuous rule's
    reviews at such calls only); ``protect:n`` and ``retain_first`` wrap it
    (``destructive+protect:3``).

    Args:
        base: the schedule it narrows (None: every boundary).
        annotations: each tool's annotations by the name agent code calls it (a tool not named,
            or named with None, has none).
    """

    def __init__(
        self, base: Schedule | None, annotations: Mapping[str, ToolAnnotations | None]
    ) -> None:
        self.base: Schedule = base or EveryBoundary()
        self.name = "destructive" if base is None else f"{base.name}+destructive"
        self.annotations = dict(annotations)

    def tool_risk(self, boundary: Boundary) -> ToolRisk:
        """The pending tool's verdict and the hints it rests on."""
        return (self.annotations.get(boundary.tool) or ToolAnnotations()).risk()

    def should_review(self, boundary: Boundary, ctx: ScheduleContext) -> bool:
        """The base schedule's answer at a risky call, False at any other."""
        base = self.base.should_review(boundary, ctx)  # asked always: it may count calls
        return base and self.tool_risk(boundary).risky

    def observe(self, boundary: Boundary, realized: Operation) -> None:
        """Pass every boundary on to the base schedule."""
        self.base.observe(boundary, realized)


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

    def tool_risk(self, boundary: Boundary) -> ToolRisk | None:
        """The base schedule's verdict by annotations (see :func:`tool_risk`)."""
        return tool_risk(self.base, boundary)

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

    def tool_risk(self, boundary: Boundary) -> ToolRisk | None:
        """The base schedule's verdict by annotations (see :func:`tool_risk`)."""
        return tool_risk(self.base, boundary)

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

    def tool_risk(self, boundary: Boundary) -> ToolRisk | None:
        """The first schedule's verdict by annotations until its boundary has passed (see
        :func:`tool_risk`)."""
        return None if self._started else tool_risk(self.first, boundary)

    def observe(self, boundary: Boundary, realized: Operation) -> None:
        """Start the continuous rule once the first schedule's boundary has passed."""
        if self._fired == (boundary.block_id, boundary.call_index):
            self._started = True
        self.first.observe(boundary, realized)
        self._then.observe(boundary, realized)
