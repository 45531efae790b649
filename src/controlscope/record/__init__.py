"""The trajectory log: event schema, run-directory store and run summaries.

Public API::

    from controlscope.record import TrajectoryWriter, read_events, summarize, write_summary
"""

from controlscope.core import (
    EVENT_ADAPTER,
    SCHEMA_VERSION,
    BlockEndEvent,
    BlockStartEvent,
    BoundaryEvent,
    BudgetEvent,
    Event,
    FallbackKind,
    FinalVerdictEvent,
    ModelCallEvent,
    PlannerTurnEvent,
    PrimitiveCallEvent,
    ProposalEvent,
    RealizedOperationEvent,
    ReviewRequestEvent,
    RunEndEvent,
    RunStartEvent,
    VerdictEvent,
    model_call_event,
)
from controlscope.record.store import (
    EVENTS_FILE,
    SUMMARY_FILE,
    LogError,
    TrajectoryLog,
    TrajectoryWriter,
    TruncatedLogWarning,
    read_events,
    read_log,
    read_summary,
    write_summary,
)
from controlscope.record.summary import RunSummary, SummaryError, summarize

__all__ = [
    "EVENTS_FILE",
    "EVENT_ADAPTER",
    "SCHEMA_VERSION",
    "SUMMARY_FILE",
    "BlockEndEvent",
    "BlockStartEvent",
    "BoundaryEvent",
    "BudgetEvent",
    "Event",
    "FallbackKind",
    "FinalVerdictEvent",
    "LogError",
    "ModelCallEvent",
    "PlannerTurnEvent",
    "PrimitiveCallEvent",
    "ProposalEvent",
    "RealizedOperationEvent",
    "ReviewRequestEvent",
    "RunEndEvent",
    "RunStartEvent",
    "RunSummary",
    "SummaryError",
    "TrajectoryLog",
    "TrajectoryWriter",
    "TruncatedLogWarning",
    "VerdictEvent",
    "model_call_event",
    "read_events",
    "read_log",
    "read_summary",
    "summarize",
    "write_summary",
]
