"""Rebuild a run's summary from its log: ``python -m controlscope.record RUN_DIR [--write]``.

Prints the summary computed from ``RUN_DIR/events.jsonl`` alone (a killed run's log works too);
``--write`` also (re)writes ``RUN_DIR/summary.json``. The log is read one event at a time, so
memory stays flat however long it is. Exit status 2 when the log is missing or unreadable (not a
regular file, a corrupt or oversized line), with the reason on stderr.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from collections.abc import Sequence

from controlscope.record import (
    LogError,
    SummaryError,
    TruncatedLogWarning,
    iter_events,
    summarize,
    write_summary,
)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m controlscope.record",
        description="Print a run's summary computed from RUN_DIR/events.jsonl alone (a killed "
        "run's log works too); --write also rewrites RUN_DIR/summary.json.",
    )
    parser.add_argument("run_dir", help="a run directory holding events.jsonl")
    parser.add_argument("--write", action="store_true", help="also write summary.json")
    args = parser.parse_args(argv)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TruncatedLogWarning)
        try:
            summary = summarize(iter_events(args.run_dir))
        except (OSError, LogError, SummaryError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
    for warning in caught:
        print(f"warning: {warning.message}", file=sys.stderr)
    print(summary.model_dump_json(indent=2))
    if args.write:
        path = write_summary(args.run_dir, summary)
        print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
