"""A run's log read into the viewer's page model, in one streaming pass.

The run page shows planning turns, their blocks and, in each block, its boundaries; at a boundary
everything the log holds about it: the reviewer's request exactly as sent (the rendered view of
the public state ``h``, paper A.3), the proposal, the validation, the realized operation, the
primitive call and what the operation changed (``docs/architecture.md``, "The flow of one run").
The log is read with :func:`controlscope.record.iter_events` (bounded lines, flat memory, newer
schemas refused, older ones upgraded); what cannot be read is reported on the page, never raised.
A page holds at most :data:`MAX_PAGE_EVENTS` events and :data:`MAX_PAGE_BYTES` of them (the
first ones, and the run's end): the rest of a huge log is counted and said, not kept.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from controlscope.core import (
    EVENTS_FILE,
    BlockEndEvent,
    BlockResult,
    BlockStartEvent,
    Boundary,
    BoundaryEvent,
    Event,
    FinalVerdictEvent,
    ModelCallEvent,
    PrimitiveCall,
    ProposalEvent,
    RealizedOperationEvent,
    ReviewRequestEvent,
    RunEndEvent,
    RunStartEvent,
    ValidationEvent,
)
from controlscope.record import (
    LedgerSummary,
    LogError,
    RunSummary,
    SummaryError,
    TokenLedger,
    TruncatedLogWarning,
    iter_events,
    summarize,
)
from controlscope.view._changes import (
    ArgumentChange,
    DiffLine,
    argument_changes,
    code_diff,
    patched,
)

MAX_PAGE_EVENTS = 20_000
"""The most events a run's page shows (the first ones; the rest are counted)."""

MAX_PAGE_BYTES = 64 * 1024 * 1024
"""The most bytes of events (as logged) a run's page shows; the first event is always shown."""

_ALWAYS_SHOWN = (RunStartEvent, FinalVerdictEvent, RunEndEvent)


@dataclass
class BudgetUse:
    """What a run had used of its budgets when a boundary was reached (paper section 4).

    Attributes:
        calls: primitive calls completed before the boundary (its call index).
        turns: planning turns started (counted, as the budget counts them).
        exec_s: execution seconds of the blocks that had ended (review time excluded).
        review_s: review seconds so far (recorded apart, never counted).
        wall_s: wall seconds since ``run_start``.
    """

    calls: int
    turns: int
    exec_s: float
    review_s: float
    wall_s: float


@dataclass
class BoundaryView:
    """One boundary and everything recorded at it.

    Attributes:
        seq: the ``boundary`` event's position in the log (the page's anchor).
        boundary: the pending call and the public runtime state.
        reviewed: whether the schedule chose to review here.
        request: the ``review_request`` event, if a reviewer was asked.
        reviewer_calls: the reviewer's model calls: each request is exactly what was sent.
        proposal: the reviewer's answer, raw and parsed.
        validation: the validation of the proposal against the granted scope.
        realized: the operation executed here.
        call: the primitive call as made, with its observation (None: not made, e.g. a
            replacement cancelled it, or the run ended first).
        used: the budgets used when the boundary was reached.
        tokens: tokens by role (logical and uncached) when the boundary was reached.
        arguments: the call's arguments as the block asked for them and as executed.
        diff: the block's code against the edited or replacement code, for a block-data edit
            or a replacement (unified diff lines), realized or else proposed; None otherwise.
        diff_proposed: True when ``diff`` shows a proposal that was not realized (refused, or a
            Keep fallback).
        operation: the realized operation's kind (``keep`` when not reviewed).
    """

    seq: int
    boundary: Boundary
    reviewed: bool
    used: BudgetUse
    tokens: LedgerSummary
    request: ReviewRequestEvent | None = None
    reviewer_calls: list[ModelCallEvent] = field(default_factory=list)
    proposal: ProposalEvent | None = None
    validation: ValidationEvent | None = None
    realized: RealizedOperationEvent | None = None
    call: PrimitiveCall | None = None
    arguments: list[ArgumentChange] = field(default_factory=list)
    diff: list[DiffLine] | None = None
    diff_proposed: bool = False

    @property
    def operation(self) -> str:
        """The realized operation's kind (``keep`` when not reviewed)."""
        return self.realized.operation.kind if self.realized is not None else "keep"


@dataclass
class BlockView:
    """One block: its code, its boundaries and how it ended.

    Attributes:
        seq: the ``block_start`` event's position (or the ``block_end``'s, for a cancellation
            receipt of a block that never started).
        block_id: the block's id.
        code: its source ("" when it never started).
        replaces: the block it replaces, for a replacement block.
        boundaries: its boundaries in order.
        end: how it ended (None while it runs, or when the run was killed in it).
        kind: ``block`` (tells the templates a block from a note).
    """

    seq: int
    block_id: str
    code: str = ""
    replaces: str | None = None
    boundaries: list[BoundaryView] = field(default_factory=list)
    end: BlockResult | None = None
    kind: Literal["block"] = "block"


@dataclass
class NoteView:
    """An event shown as one line in the timeline: a budget reached, a branch point, clock
    differences masked in a replay, a planner request that failed.

    Attributes:
        seq: the event's position.
        title: what happened, in a few words.
        text: the details.
        kind: ``note``.
    """

    seq: int
    title: str
    text: str
    kind: Literal["note"] = "note"


@dataclass
class PlannerCall:
    """One planner request and its response, with how much of its conversation the previous
    planner request already held (the history grows by appending: the page shows the shared
    messages once, in the earlier request, and the new ones here; nothing is left out).

    Attributes:
        event: the ``model_call`` event (the request exactly as sent).
        shared: how many leading messages equal the previous planner request's.
        previous: the previous planner request's ``seq`` (its anchor), None for the first.
    """

    event: ModelCallEvent
    shared: int = 0
    previous: int | None = None


@dataclass
class TurnView:
    """One ordinary planning turn, or what the log holds before the first.

    Attributes:
        number: the turn's number as recorded; None before the first turn.
        planner_calls: the planner's model calls of the turn.
        entries: its blocks and notes, in log order.
    """

    number: int | None
    planner_calls: list[PlannerCall] = field(default_factory=list)
    entries: list[BlockView | NoteView] = field(default_factory=list)


@dataclass
class RunPage:
    """A run as the viewer shows it.

    Attributes:
        run_dir: the run directory.
        start: the ``run_start`` event (None when the log has none readable).
        turns: the planning turns in order.
        final: the verifier's verdict, if the run reached it.
        end: the ``run_end`` event (None: the run is still being written, or was killed).
        summary: the run's summary computed from the events read.
        problems: what could not be read, each one sentence (a cut last line, a corrupt line,
            an event of a newer schema); the events before it are shown.
        events: how many events were read.
        hidden: how many of them the page does not show (past :data:`MAX_PAGE_EVENTS` or
            :data:`MAX_PAGE_BYTES`; the summary counts them).
        live: True when the log has no ``run_end`` (being written, or killed).
        boundaries: every boundary of the run, in order.
    """

    run_dir: Path
    start: RunStartEvent | None = None
    turns: list[TurnView] = field(default_factory=list)
    final: FinalVerdictEvent | None = None
    end: RunEndEvent | None = None
    summary: RunSummary | None = None
    problems: list[str] = field(default_factory=list)
    events: int = 0
    hidden: int = 0

    @property
    def live(self) -> bool:
        """True when the log has no ``run_end`` (being written, or killed)."""
        return self.end is None

    @property
    def boundaries(self) -> list[BoundaryView]:
        """Every boundary of the run, in order."""
        return [
            b
            for t in self.turns
            for e in t.entries
            if isinstance(e, BlockView)
            for b in e.boundaries
        ]


def read_run(run_dir: Path) -> RunPage:
    """Read ``run_dir/events.jsonl`` into a :class:`RunPage` in one pass.

    Args:
        run_dir: a run directory.

    Returns:
        The page; anything unreadable is in ``problems`` (the events before it are kept).
        A folder without a log, or a log whose first event is not ``run_start``, gives a page
        with no ``start`` and the reason in ``problems``.
    """
    page = RunPage(run_dir=run_dir)
    builder = _Builder(page)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TruncatedLogWarning)
        try:
            page.summary = summarize(builder.feed(e) for e in _events(run_dir, page))
        except SummaryError:
            page.problems.append(f"the log does not start with a run_start event ({EVENTS_FILE})")
    for warning in caught:
        if issubclass(warning.category, TruncatedLogWarning):
            page.problems.append(
                "the log's last line is incomplete (the run is being written, or was killed "
                "while writing it); it is not shown"
            )
    if page.hidden:
        page.problems.append(
            f"the log holds {page.events} events: this page shows the first {builder.prefix} "
            f"(at most {MAX_PAGE_EVENTS} events and {MAX_PAGE_BYTES // 2**20} MiB) and the "
            f"run's end; the totals count every event"
        )
    return page


def _events(run_dir: Path, page: RunPage) -> Iterator[Event]:
    """The log's events; a read error ends the stream and is recorded on ``page``."""
    try:
        yield from iter_events(run_dir)
    except FileNotFoundError:
        page.problems.append(f"{run_dir} holds no {EVENTS_FILE}: it is not a run directory")
    except LogError as err:
        page.problems.append(f"the log cannot be read past this point: {err}")
    except (OSError, ValidationError, RecursionError) as err:
        page.problems.append(f"the log cannot be read: {type(err).__name__}: {err}")


class _Builder:
    """Folds events, in log order, into a :class:`RunPage`."""

    def __init__(self, page: RunPage) -> None:
        self.page = page
        self.ledger = TokenLedger()
        self.blocks: dict[str, BlockView] = {}
        self.open: dict[int, BoundaryView] = {}  # call index -> the latest boundary there
        self.exec_s = 0.0
        self.review_s = 0.0
        self.last_planner: ModelCallEvent | None = None
        self.kept_bytes = 0
        self.prefix = 0  # events shown before the page was full

    @property
    def turn(self) -> TurnView:
        if not self.page.turns:
            self.page.turns.append(TurnView(number=None))
        return self.page.turns[-1]

    def feed(self, event: Event) -> Event:
        """Fold ``event`` into the page, or count it when the page is full; return it (for
        :func:`summarize`)."""
        self.page.events += 1
        if not isinstance(event, _ALWAYS_SHOWN) and not self._room(event):
            self.page.hidden += 1
            return event
        if isinstance(event, RunStartEvent):
            self.page.start = event
        elif event.type == "planner_turn":
            self.page.turns.append(TurnView(number=event.turn))
        elif isinstance(event, ModelCallEvent):
            self._model_call(event)
        elif isinstance(event, BlockStartEvent):
            self._block_start(event)
        elif isinstance(event, BlockEndEvent):
            self._block_end(event)
        elif isinstance(event, BoundaryEvent):
            self._boundary(event)
        elif isinstance(event, ReviewRequestEvent | ProposalEvent | ValidationEvent):
            self._review(event)
        elif isinstance(event, RealizedOperationEvent):
            self.review_s += event.latency_s
            self._review(event)
        elif event.type == "primitive_call":
            self._call(event.call)
        elif isinstance(event, FinalVerdictEvent):
            self.page.final = event
        elif isinstance(event, RunEndEvent):
            self.page.end = event
        else:
            self._note(event)
        return event

    def _room(self, event: Event) -> bool:
        """Whether the page has room for ``event``; once full, it stays full (the page shows
        a prefix of the log)."""
        if self.page.hidden:
            return False
        size = len(type(event).__pydantic_serializer__.to_json(event))
        shown = self.page.events - 1
        if shown >= MAX_PAGE_EVENTS or (shown and self.kept_bytes + size > MAX_PAGE_BYTES):
            self.prefix = shown
            return False
        self.kept_bytes += size
        return True

    def _model_call(self, event: ModelCallEvent) -> None:
        if event.response is not None:
            self.ledger.add(event.role, event.response)
        else:
            self.ledger.add_failure(event.role)
        if event.role == "reviewer" and event.call_index in self.open:
            self.open[event.call_index].reviewer_calls.append(event)
        elif event.role == "planner":
            self._planner_call(event)
        else:
            self.turn.entries.append(
                NoteView(event.seq, "model call", f"{event.role}: {event.error or ''}")
            )

    def _planner_call(self, event: ModelCallEvent) -> None:
        call = PlannerCall(event)
        last = self.last_planner
        if last is not None:
            before, now = last.request.messages, event.request.messages
            while call.shared < min(len(before), len(now)) and (
                before[call.shared] == now[call.shared]
            ):
                call.shared += 1
            call.previous = last.seq
        self.last_planner = event
        self.turn.planner_calls.append(call)

    def _block_start(self, event: BlockStartEvent) -> None:
        block = BlockView(event.seq, event.block_id, event.code, event.replaces)
        self.blocks[event.block_id] = block
        self.turn.entries.append(block)

    def _block_end(self, event: BlockEndEvent) -> None:
        result = event.result
        block = self.blocks.get(result.block_id)
        if block is None:  # a cancellation receipt of a queued block that never started
            block = BlockView(event.seq, result.block_id)
            self.blocks[result.block_id] = block
            self.turn.entries.append(block)
        block.end = result
        self.exec_s += result.exec_s

    def _boundary(self, event: BoundaryEvent) -> None:
        b = event.boundary
        start = self.page.start
        used = BudgetUse(
            calls=b.call_index,
            turns=sum(t.number is not None for t in self.page.turns),
            exec_s=self.exec_s,
            review_s=self.review_s,
            wall_s=max(0.0, event.t - start.t) if start is not None else 0.0,
        )
        view = BoundaryView(event.seq, b, event.review, used, self.ledger.summary())
        view.arguments = argument_changes(b.arguments, b.arguments)
        block = self.blocks.get(b.block_id)
        if block is None:
            block = BlockView(event.seq, b.block_id, b.code)
            self.blocks[b.block_id] = block
            self.turn.entries.append(block)
        block.boundaries.append(view)
        self.open[b.call_index] = view

    def _review(
        self,
        event: ReviewRequestEvent | ProposalEvent | ValidationEvent | RealizedOperationEvent,
    ) -> None:
        view = self.open.get(event.call_index)
        if view is None:
            self._note(event)
            return
        if isinstance(event, ReviewRequestEvent):
            view.request = event
        elif isinstance(event, ProposalEvent):
            view.proposal = event
        elif isinstance(event, ValidationEvent):
            view.validation = event
        else:
            view.realized = event
            view.diff = code_diff(view.boundary.code, event.operation)
            proposed = view.proposal.operation if view.proposal is not None else None
            if view.diff is None and proposed is not None:  # a refused edit, shown as proposed
                view.diff = code_diff(view.boundary.code, proposed)
                view.diff_proposed = view.diff is not None
            view.arguments = argument_changes(
                view.boundary.arguments, patched(view.boundary.arguments, event.operation)
            )

    def _call(self, call: PrimitiveCall) -> None:
        view = self.open.get(call.call_index)
        if view is None or view.call is not None:
            self.turn.entries.append(
                NoteView(-1, "primitive call without a boundary", f"{call.tool} {call.arguments}")
            )
            return
        view.call = call
        before = call.requested if call.requested is not None else view.boundary.arguments
        view.arguments = argument_changes(before, call.arguments)

    def _note(self, event: Event) -> None:
        title, text = _describe(event)
        self.turn.entries.append(NoteView(event.seq, title, text))


def _describe(event: Event) -> tuple[str, str]:
    """A one-line title and the details of an event shown as a note."""
    if event.type == "budget":
        return "budget reached", f"{event.budget}: {event.value:g} of {event.limit:g}"
    if event.type == "branch_point":
        return (
            "branch point: the replayed prefix ends here",
            f"boundary {event.boundary} (call index {event.call_index}); prefix hash "
            f"{event.prefix_hash}; workspace hash {event.state_hash}; first review request "
            f"hash {event.request_hash}",
        )
    if event.type == "clock_differences":
        lines = [f"{d.role} request {d.request} at {d.path}" for d in event.differences]
        return "clock readings masked in the replay", "\n".join(lines)
    if event.type == "plan_end":
        goal = "the goal is reached" if event.goal_reached else "the goal is not reached"
        return f"plan {event.plan} ended ({event.cause})", f"{goal}; {event.calls} calls so far"
    if event.type == "recovery":
        return f"ordinary recovery: repair {event.repair}", event.detail
    if event.type == "plan_error":
        return (
            f"plan error at call {event.call_index}",
            f"the review fell back ({event.fallback}) in block {event.block_id}: {event.detail}",
        )
    return event.type, event.model_dump_json(indent=2)
