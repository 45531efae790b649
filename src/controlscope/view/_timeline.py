"""A run's log read into the viewer's page model, in one streaming pass.

The run page shows planning turns, their blocks and, in each block, its boundaries; at a boundary
everything the log holds about it: the reviewer's request exactly as sent (the rendered view of
the public state ``h``, paper A.3), the proposal, the validation, the realized operation, the
primitive call and what the operation changed (``docs/architecture.md``, "The flow of one run").
The log is read with :func:`controlscope.record.iter_events` (bounded lines, flat memory, newer
schemas refused, older ones upgraded); what cannot be read is reported on the page, never raised.

A long log is shown in pages: a page is full at :data:`PAGE_BOUNDARIES` boundaries,
:data:`PAGE_EVENTS` events or :data:`PAGE_BYTES` bytes of events, and the next one starts at the
next planning turn, block or boundary (or, past twice those bounds, at the next event), so every
event is on exactly one page, a page's size is bounded whatever the log, and where the pages
start depends only on the events before (a live run's earlier pages do not move). Each page
shows the run's start, totals, verdict and end; the budgets and tokens at a boundary count every
event before it, on whichever page.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
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
    PlannerTurnEvent,
    PrimitiveCall,
    ProposalEvent,
    RealizedOperationEvent,
    ReviewRequestEvent,
    RunEndEvent,
    RunStartEvent,
    ToolRisk,
    ValidationEvent,
    operation_spec,
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

PAGE_BOUNDARIES = 100
"""A page of a run is full at this many boundaries."""

PAGE_EVENTS = 2_000
"""A page of a run is full at this many events."""

PAGE_BYTES = 8 * 1024 * 1024
"""A page of a run is full at this many bytes of events (as logged)."""

_ALWAYS_SHOWN = (RunStartEvent, FinalVerdictEvent, RunEndEvent)
_PAGE_STARTS = (PlannerTurnEvent, BlockStartEvent, BoundaryEvent)


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
        risk: how a schedule that reads tool annotations judged the call (``destructive``),
            with the hints it read; None under another schedule.
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
        cancels: whether the realized operation cancelled the pending call (a replacement).
        edit_noun: what ``diff`` shows, named by its operation kind (``replacement``).
    """

    seq: int
    boundary: Boundary
    reviewed: bool
    used: BudgetUse
    tokens: LedgerSummary
    risk: ToolRisk | None = None
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

    @property
    def cancels(self) -> bool:
        """Whether the realized operation cancelled the pending call (a replacement)."""
        return operation_spec(self.operation).cancels

    @property
    def edit_noun(self) -> str:
        """What the code diff shows: the noun of the operation whose code it is (the proposed
        one when :attr:`diff_proposed`), e.g. ``replacement``."""
        proposed = self.proposal.operation if self.proposal is not None else None
        kind = proposed.kind if self.diff_proposed and proposed is not None else self.operation
        return operation_spec(kind).noun


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
        continued: the block started on an earlier page.
        kind: ``block`` (tells the templates a block from a note).
    """

    seq: int
    block_id: str
    code: str = ""
    replaces: str | None = None
    boundaries: list[BoundaryView] = field(default_factory=list)
    end: BlockResult | None = None
    continued: bool = False
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
        continued: the turn started on an earlier page.
    """

    number: int | None
    planner_calls: list[PlannerCall] = field(default_factory=list)
    entries: list[BlockView | NoteView] = field(default_factory=list)
    continued: bool = False


@dataclass(frozen=True)
class PageSpan:
    """Where one page of a run starts.

    Attributes:
        number: the page's number (1 is the first).
        event: the position in the log of its first event (0 for the first page).
        call_index: the call index of its first boundary (None: it has none).
    """

    number: int
    event: int
    call_index: int | None = None


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
        hidden: how many of them are on other pages (the summary counts them all).
        number: this page's number (1 is the first).
        spans: where each page of the run starts (as many as the run has pages).
        live: True when the log has no ``run_end`` (being written, or killed).
        boundaries: every boundary of this page, in order.
        pages: how many pages the run has.
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
    number: int = 1
    spans: list[PageSpan] = field(default_factory=list)

    @property
    def pages(self) -> int:
        """How many pages the run has."""
        return max(1, len(self.spans))

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


def read_run(run_dir: Path, page: int = 1) -> RunPage:
    """Read one page of ``run_dir/events.jsonl`` into a :class:`RunPage`, in one pass over the
    whole log (the totals count every event).

    Args:
        run_dir: a run directory.
        page: the page to read (1 is the first; see the module's docstring).

    Returns:
        The page; anything unreadable is in ``problems`` (the events before it are kept).
        A folder without a log, or a log whose first event is not ``run_start``, gives a page
        with no ``start`` and the reason in ``problems``. A ``page`` past the run's last one
        gives a page with no turns whose ``number`` exceeds ``pages``.
    """
    shown = RunPage(run_dir=run_dir, number=page)
    builder = _Builder(shown, page - 1)
    _read(run_dir, shown, builder)
    shown.hidden = _hidden(shown)
    return shown


def iter_run_pages(run_dir: Path) -> Iterator[RunPage]:
    """Every page of a run, in order, in two passes over its log (one for the totals, one for
    the pages), holding one page at a time: what an export writes.

    Args:
        run_dir: a run directory.

    Yields:
        Each page, as :func:`read_run` reads it (pages the log gained between the two passes,
        if it is being written, are left out).
    """
    first = read_run(run_dir)
    yield first
    if first.pages < 2:
        return
    done: list[RunPage] = []
    builder = _Builder(RunPage(run_dir=run_dir, number=2), 1, done.append)
    scratch = RunPage(run_dir=run_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TruncatedLogWarning)
        for event in _events(run_dir, scratch):
            builder.feed(event)
            while done:
                page = done.pop(0)
                if page.number <= first.pages:
                    yield _with_totals(page, first)
    if builder.page.number <= first.pages:
        yield _with_totals(builder.page, first)


def _with_totals(page: RunPage, first: RunPage) -> RunPage:
    """A page of the second pass with what the first pass read of the whole run."""
    page.start, page.final, page.end = first.start, first.final, first.end
    page.summary, page.problems, page.events = first.summary, first.problems, first.events
    page.spans = first.spans
    page.hidden = _hidden(page)
    return page


def _hidden(page: RunPage) -> int:
    """How many of the log's events are on other pages than ``page``."""
    spans = page.spans
    start = spans[page.number - 1].event if page.number <= len(spans) else page.events
    end = spans[page.number].event if page.number < len(spans) else page.events
    return page.events - max(0, end - start)


def _read(run_dir: Path, page: RunPage, builder: _Builder) -> None:
    """Fold the whole log into ``page`` through ``builder``; what cannot be read is said."""
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


class _Pager:
    """Where the pages of a log start (see the module's docstring): told every event in
    order, it says on which page (from 0) each one is."""

    def __init__(self) -> None:
        self.current = 0
        self.spans = [PageSpan(1, 0)]
        self.events = 0
        self.bytes = 0
        self.boundaries = 0

    def place(self, event: Event, position: int) -> int:
        """The page of ``event``, the log's ``position``-th event (from 0)."""
        size = len(type(event).__pydantic_serializer__.to_json(event))
        full = (
            self.boundaries >= PAGE_BOUNDARIES
            or self.events >= PAGE_EVENTS
            or self.bytes >= PAGE_BYTES
        )
        forced = self.events >= 2 * PAGE_EVENTS or self.bytes >= 2 * PAGE_BYTES
        if self.events and ((full and isinstance(event, _PAGE_STARTS)) or forced):
            self.current += 1
            self.spans.append(PageSpan(self.current + 1, position))
            self.events = self.bytes = self.boundaries = 0
        if isinstance(event, BoundaryEvent):
            if self.boundaries == 0:
                span = self.spans[-1]
                self.spans[-1] = PageSpan(span.number, span.event, event.boundary.call_index)
            self.boundaries += 1
        self.events += 1
        self.bytes += size
        return self.current


class _Builder:
    """Folds events, in log order, into a :class:`RunPage`: every event is accounted (budgets,
    tokens, where the run is), the ones on the page wanted are shown.

    With ``on_page``, the builder goes on past the page wanted: each page, once the next one
    starts, is handed to ``on_page`` and the next one is built in a new :class:`RunPage`."""

    def __init__(
        self,
        page: RunPage,
        wanted: int,
        on_page: Callable[[RunPage], None] | None = None,
    ) -> None:
        self.page = page
        self.wanted = wanted  # from 0
        self.on_page = on_page
        self.pager = _Pager()
        self.ledger = TokenLedger()
        self.blocks: dict[str, BlockView] = {}
        self.open: dict[int, BoundaryView] = {}  # call index -> the latest boundary there
        self.exec_s = 0.0
        self.review_s = 0.0
        self.turn_number: int | None = None
        self.turns = 0
        self.running: set[str] = set()  # blocks started and not ended
        self.last_planner: ModelCallEvent | None = None
        self.events = 0

    @property
    def turn(self) -> TurnView:
        if not self.page.turns:
            continued = self.pager.current > 0
            self.page.turns.append(TurnView(number=self.turn_number, continued=continued))
        return self.page.turns[-1]

    def feed(self, event: Event) -> Event:
        """Account ``event`` and show it when it is on the page wanted; return it (for
        :func:`summarize`)."""
        before = self.pager.current
        here = self.pager.place(event, self.events)
        self.events += 1
        self.page.events = self.events
        self.page.spans = self.pager.spans
        if here != before and before == self.wanted and self.on_page is not None:
            self.on_page(self.page)
            self.page = RunPage(run_dir=self.page.run_dir, number=here + 1)
            self.wanted = here
            self.blocks, self.open, self.last_planner = {}, {}, None
        if here == self.wanted or isinstance(event, _ALWAYS_SHOWN):
            self._show(event)
        self._account(event)
        return event

    def _account(self, event: Event) -> None:
        """What every event changes, on whichever page: budgets, tokens, the turn, the blocks
        running."""
        if isinstance(event, ModelCallEvent):
            if event.response is not None:
                self.ledger.add(event.role, event.response)
            else:
                self.ledger.add_failure(event.role)
        elif isinstance(event, PlannerTurnEvent):
            self.turn_number = event.turn
            self.turns += 1
        elif isinstance(event, BlockStartEvent):
            self.running.add(event.block_id)
        elif isinstance(event, BlockEndEvent):
            self.exec_s += event.result.exec_s
            self.running.discard(event.result.block_id)
        elif isinstance(event, RealizedOperationEvent):
            self.review_s += event.latency_s

    def _show(self, event: Event) -> None:
        if isinstance(event, RunStartEvent):
            self.page.start = event
        elif isinstance(event, PlannerTurnEvent):
            self.page.turns.append(TurnView(number=event.turn))
        elif isinstance(event, ModelCallEvent):
            self._model_call(event)
        elif isinstance(event, BlockStartEvent):
            self._block_start(event)
        elif isinstance(event, BlockEndEvent):
            self._block_end(event)
        elif isinstance(event, BoundaryEvent):
            self._boundary(event)
        elif isinstance(
            event, ReviewRequestEvent | ProposalEvent | ValidationEvent | RealizedOperationEvent
        ):
            self._review(event)
        elif event.type == "primitive_call":
            self._call(event.call)
        elif isinstance(event, FinalVerdictEvent):
            self.page.final = event
        elif isinstance(event, RunEndEvent):
            self.page.end = event
        else:
            self._note(event)

    def _model_call(self, event: ModelCallEvent) -> None:
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
        if block is None:  # begun on an earlier page, or a receipt of a block never started
            continued = result.block_id in self.running
            block = BlockView(event.seq, result.block_id, continued=continued)
            self.blocks[result.block_id] = block
            self.turn.entries.append(block)
        block.end = result

    def _boundary(self, event: BoundaryEvent) -> None:
        b = event.boundary
        start = self.page.start
        used = BudgetUse(
            calls=b.call_index,
            turns=self.turns,
            exec_s=self.exec_s,
            review_s=self.review_s,
            wall_s=max(0.0, event.t - start.t) if start is not None else 0.0,
        )
        view = BoundaryView(event.seq, b, event.review, used, self.ledger.summary(), event.risk)
        view.arguments = argument_changes(b.arguments, b.arguments)
        block = self.blocks.get(b.block_id)
        if block is None:
            continued = b.block_id in self.running
            block = BlockView(event.seq, b.block_id, b.code, continued=continued)
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
                view.boundary.arguments, patched(view.boundary, event.operation)
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
