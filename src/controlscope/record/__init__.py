"""The trajectory log on disk: the run-directory store and run summaries.

The event schema itself is :mod:`controlscope.core` (``Event`` and one model per event type).

Public API::

    from controlscope.record import TrajectoryWriter, read_events, summarize, write_summary
"""

from controlscope.record._accounting import LedgerSummary, RoleTotals, TokenLedger, TokenTotals
from controlscope.record._store import (
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
from controlscope.record._summary import RunSummary, SummaryError, summarize

__all__ = [
    "SUMMARY_FILE",
    "LedgerSummary",
    "LogError",
    "RoleTotals",
    "RunSummary",
    "SummaryError",
    "TokenLedger",
    "TokenTotals",
    "TrajectoryLog",
    "TrajectoryWriter",
    "TruncatedLogWarning",
    "read_events",
    "read_log",
    "read_summary",
    "summarize",
    "write_summary",
]
