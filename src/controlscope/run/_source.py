"""A recorded source run places a one-time review: the local rule (paper appendix B), the
source-trajectory midpoint (B.1) and the feedback-visibility rule (A.3).

The paper fixes these boundaries "before intervention runs" from the completed source
trajectory of each task and source program. :func:`read_source` reads such a trajectory from a
run directory (its natural blocks, their boundaries and observed calls);
:func:`place_schedule` turns a bare ``once`` or ``midpoint`` into ``once:K`` or ``midpoint:N``
and says where the number came from (:class:`~controlscope.core.SourceBoundary`, recorded in
the condition). A task-source pair the local rule finds no boundary in is ineligible
(:func:`local_rule_of` reports it without running anything); so is one the feedback rule finds
no eligible boundary in (:func:`feedback_rule_of`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from controlscope.core import (
    EVENTS_FILE,
    BlockId,
    Boundary,
    Event,
    RunStartEvent,
    SourceBoundary,
    Task,
)
from controlscope.record import read_events
from controlscope.schedule import (
    LocalBoundary,
    ScheduleSpec,
    SourceBlock,
    feedback_rule_boundary,
    local_rule_boundary,
)


@dataclass(frozen=True)
class SourceTrajectory:
    """A completed source trajectory, as recorded.

    Attributes:
        run_dir: the run directory.
        task: the recorded task (with its parameters).
        seed: the recorded data seed.
        calls: its primitive calls (the paper's N).
        blocks: its natural blocks in order, as observed.
    """

    run_dir: Path
    task: Task
    seed: int
    calls: int
    blocks: tuple[SourceBlock, ...]


def read_source(run_dir: Path) -> SourceTrajectory:
    """Read the source trajectory recorded in ``run_dir``.

    A source trajectory is the program's own: the run must have ended (a ``run_end`` that is
    not an interruption or a diverged replay) and realized no revision (every realized
    operation ``keep``), as the paper's source programs are run before any scope comparison.

    Raises:
        FileNotFoundError: no log in ``run_dir``.
        ValueError: the log has no ``run_start``, did not end, ended interrupted or diverged, or
            realized a revision.
    """
    if not (run_dir / EVENTS_FILE).exists():
        raise FileNotFoundError(f"no recorded source run at {run_dir} ({EVENTS_FILE} is missing)")
    events = read_events(run_dir)
    start = events[0] if events else None
    if not isinstance(start, RunStartEvent):
        raise ValueError(f"the log in {run_dir} has no run_start event")
    ends = [e.end_reason for e in events if e.type == "run_end"]
    if not ends or ends[-1] in ("interrupted", "replay_diverged"):
        raise ValueError(f"the source run in {run_dir} is not a completed trajectory")
    revisions = [
        e.operation.kind
        for e in events
        if e.type == "realized_operation" and e.operation.kind != "keep"
    ]
    if revisions:
        raise ValueError(
            f"the source run in {run_dir} realized {len(revisions)} revision(s) "
            f"({', '.join(sorted(set(revisions)))}); a source trajectory is the program's own "
            "(a Keep run)"
        )
    calls = sum(1 for e in events if e.type == "primitive_call")
    return SourceTrajectory(run_dir, start.task, start.seed, calls, _blocks(events))


def _blocks(events: list[Event]) -> tuple[SourceBlock, ...]:
    """The natural blocks of a log, their boundaries, observed tools and queued blocks."""
    order: list[BlockId] = []
    boundaries: dict[str, list[Boundary]] = defaultdict(list)
    tools: dict[str, list[str]] = defaultdict(list)
    for event in events:
        if event.type in ("block_start", "block_end"):
            text = event.block_id if event.type == "block_start" else event.result.block_id
            block = BlockId.parse(text)
            if not block.is_replacement and block not in order:
                order.append(block)
        elif event.type == "boundary":
            boundaries[event.boundary.block_id].append(event.boundary)
        elif event.type == "primitive_call":
            tools[event.call.block_id].append(event.call.tool)
    reply = [block.reply for block in order]
    return tuple(
        SourceBlock(
            block_id=str(block),
            boundaries=tuple(boundaries[str(block)]),
            tools=tuple(tools[str(block)]),
            queued_after=reply[i + 1 :].count(reply[i]),
        )
        for i, block in enumerate(order)
    )


def local_rule_of(
    source: SourceTrajectory, *, write_tools: frozenset[str], read_tools: frozenset[str]
) -> LocalBoundary:
    """The local rule's boundary in ``source`` (paper appendix B), or why it has none.

    Args:
        source: the source trajectory.
        write_tools: the environment's writing tools.
        read_tools: the environment's information-returning tools.
    """
    return local_rule_boundary(source.blocks, write_tools=write_tools, read_tools=read_tools)


def feedback_rule_of(source: SourceTrajectory, *, read_tools: frozenset[str]) -> LocalBoundary:
    """The feedback-visibility rule's boundary in ``source`` (paper A.3), or why it has none.

    Args:
        source: the source trajectory.
        read_tools: the environment's information-returning tools.
    """
    return feedback_rule_boundary(source.blocks, read_tools=read_tools)


OnceRule = Literal["local", "feedback"]
"""Which rule places a bare ``once``: the local rule (appendix B) or the feedback rule (A.3)."""


def place_schedule(
    schedule: str,
    source: SourceTrajectory,
    *,
    write_tools: frozenset[str],
    read_tools: frozenset[str],
    once_rule: OnceRule = "local",
) -> tuple[str, SourceBoundary]:
    """Place a bare ``once`` (the local rule, or the feedback rule) or ``midpoint`` (N = the
    source's calls).

    Args:
        schedule: a canonical schedule with a bare ``once`` or ``midpoint``.
        source: the source trajectory.
        write_tools: the environment's writing tools.
        read_tools: the environment's information-returning tools.
        once_rule: the rule that places a bare ``once`` (paper appendix B, or A.3).

    Returns:
        The schedule with its number (canonical) and the record of where it came from.

    Raises:
        ValueError: a bare ``once`` and an ineligible task-source pair (the reason is named).
    """
    spec = ScheduleSpec.parse(schedule)
    if ("once", None) in spec.parts:
        if once_rule == "feedback":
            local = feedback_rule_of(source, read_tools=read_tools)
            rule = "the feedback rule (paper A.3)"
        else:
            local = local_rule_of(source, write_tools=write_tools, read_tools=read_tools)
            rule = "the local rule (paper appendix B)"
        if local.call_index is None:
            raise ValueError(
                f"the task-source pair of {source.run_dir} is ineligible for {rule}: {local.reason}"
            )
        placed = SourceBoundary(
            run=str(source.run_dir),
            rule=once_rule,
            calls=source.calls,
            call_index=local.call_index,
            block_id=local.block_id,
            read_fallback=local.read_fallback,
        )
    else:
        placed = SourceBoundary(
            run=str(source.run_dir),
            rule="midpoint",
            calls=source.calls,
            call_index=source.calls // 2,
        )
    return spec.placed(call_index=placed.call_index, calls=source.calls).name, placed
