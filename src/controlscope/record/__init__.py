"""The trajectory log on disk: the run-directory store and run summaries.

The event schema itself is :mod:`controlscope.core` (``Event`` and one model per event type).
Each run's events also become OpenTelemetry spans when tracing is on (:func:`trace_to`,
``OTEL_EXPORTER_OTLP_ENDPOINT``; :func:`trace_log` for a recorded log). A replay's checks
against its recording live here too: :func:`first_difference`,
:class:`ReplayMismatch`, and :class:`RecordedActions` for the primitive calls.

Public API::

    from controlscope.record import TrajectoryWriter, iter_events, summarize, write_summary
"""

from controlscope.record._accounting import LedgerSummary, RoleTotals, TokenLedger, TokenTotals
from controlscope.record._actions import ActionMismatch, RecordedActions
from controlscope.record._decisions import DECISIONS_LISTED, DecisionNotes, ReviewDecision
from controlscope.record._divergence import (
    ABSENT,
    ReplayMismatch,
    first_char_difference,
    first_difference,
    map_strings,
)
from controlscope.record._store import (
    MAX_EVENT_BYTES,
    MAX_SUMMARY_BYTES,
    SUMMARY_FILE,
    LogError,
    TrajectoryLog,
    TrajectoryWriter,
    TruncatedLogWarning,
    check_line,
    iter_events,
    read_events,
    read_log,
    read_regular,
    read_summary,
    write_summary,
)
from controlscope.record._summary import RunSummary, SummaryError, summarize
from controlscope.record._tracing import trace_log, trace_to, tracing_on

__all__ = [
    "ABSENT",
    "DECISIONS_LISTED",
    "MAX_EVENT_BYTES",
    "MAX_SUMMARY_BYTES",
    "SUMMARY_FILE",
    "ActionMismatch",
    "DecisionNotes",
    "LedgerSummary",
    "LogError",
    "RecordedActions",
    "ReplayMismatch",
    "ReviewDecision",
    "RoleTotals",
    "RunSummary",
    "SummaryError",
    "TokenLedger",
    "TokenTotals",
    "TrajectoryLog",
    "TrajectoryWriter",
    "TruncatedLogWarning",
    "check_line",
    "first_char_difference",
    "first_difference",
    "iter_events",
    "map_strings",
    "read_events",
    "read_log",
    "read_regular",
    "read_summary",
    "summarize",
    "trace_log",
    "trace_to",
    "tracing_on",
    "write_summary",
]
