"""The trajectory store: a run directory holding ``events.jsonl`` and ``summary.json``.

Events are appended as JSON lines and flushed one by one, so a killed run leaves a readable log up
to its last event (``docs/architecture.md``, "Execution contract"). Reading tolerates a truncated
last line (the event being written when the process died) and reports it.
"""

from __future__ import annotations

import json
import os
import threading
import time
import warnings
from pathlib import Path
from types import TracebackType
from typing import IO

from pydantic import BaseModel, ConfigDict, ValidationError

from controlscope.core import EVENT_ADAPTER, EVENTS_FILE, SCHEMA_VERSION, Event, upgrade_event
from controlscope.record._summary import RunSummary

SUMMARY_FILE = "summary.json"

_DURABLE_TYPES = frozenset({"run_start", "final_verdict", "run_end"})


class LogError(ValueError):
    """A trajectory log cannot be read: a corrupt line before the end, or an unknown schema."""


class TruncatedLogWarning(UserWarning):
    """The log's last line is incomplete (the run was killed while writing it); it was skipped."""


class TrajectoryWriter:
    """Appends events to ``run_dir/events.jsonl``, one JSON line each, flushed per event.

    The writer assigns each event's ``seq`` (0-based, consecutive) and ``t`` (epoch seconds).
    Every event is flushed to the operating system as soon as it is written, so killing the
    process loses nothing already written; ``run_start``, ``final_verdict`` and ``run_end`` (and
    :meth:`close`) are also ``fsync``'d, which keeps the per-event cost at one ``write`` call.
    Safe to call from several threads.

    Args:
        run_dir: the run's directory; created if missing.

    Raises:
        FileExistsError: ``run_dir`` already holds a non-empty ``events.jsonl`` (a log is never
            overwritten or extended by a second run).
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / EVENTS_FILE
        if self.path.exists() and self.path.stat().st_size > 0:
            raise FileExistsError(
                f"{self.path} already holds a trajectory log; choose a new run directory"
            )
        self._file: IO[str] | None = self.path.open("w", encoding="utf-8")
        self._seq = 0
        self._events: list[Event] = []
        self._lock = threading.Lock()

    @property
    def next_seq(self) -> int:
        """The ``seq`` the next event will get (= number of events written)."""
        return self._seq

    @property
    def events(self) -> list[Event]:
        """The stamped events written so far (a copy), e.g. for :func:`summarize`."""
        with self._lock:
            return list(self._events)

    def write(self, event: Event) -> Event:
        """Stamp ``event`` with ``seq`` and ``t``, append it as one JSON line and flush.

        Args:
            event: any event; its ``seq`` and ``t`` are replaced.

        Returns:
            The stamped copy that was written.

        Raises:
            ValueError: the writer is closed.
        """
        with self._lock:
            if self._file is None:
                raise ValueError(f"trajectory writer for {self.path} is closed")
            stamped = event.model_copy(update={"seq": self._seq, "t": time.time()})
            line = EVENT_ADAPTER.dump_json(stamped).decode("utf-8")
            self._file.write(line + "\n")
            self._file.flush()
            if stamped.type in _DURABLE_TYPES:
                os.fsync(self._file.fileno())
            self._seq += 1
            self._events.append(stamped)
            return stamped

    def close(self) -> None:
        """Flush, ``fsync`` and close the log; safe to call twice."""
        with self._lock:
            if self._file is not None:
                self._file.flush()
                os.fsync(self._file.fileno())
                self._file.close()
                self._file = None

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class TrajectoryLog(BaseModel):
    """A log as read back.

    Attributes:
        events: the events, in ``seq`` order.
        truncated_line: the incomplete last line that was skipped (a killed run), if any.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)
    events: list[Event]
    truncated_line: str | None = None


def read_log(run_dir: str | os.PathLike[str]) -> TrajectoryLog:
    """Read ``run_dir/events.jsonl``, tolerating an incomplete last line.

    A last line that does not parse (no trailing newline, or cut-off JSON) is the event being
    written when the run was killed: it is skipped and returned in ``truncated_line``. Any other
    unreadable line is an error.

    Raises:
        FileNotFoundError: no log in ``run_dir``.
        LogError: a corrupt line before the last one, or an event written by a newer schema
            version (the message names the line number).
    """
    path = Path(run_dir) / EVENTS_FILE
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise LogError(f"{path}: not a UTF-8 trajectory log ({err})") from None
    lines = text.split("\n")
    complete = text.endswith("\n") or text == ""
    if lines and lines[-1] == "":
        lines.pop()
    events: list[Event] = []
    truncated: str | None = None
    for number, line in enumerate(lines, start=1):
        is_last = number == len(lines)
        if not line.strip():
            continue
        try:
            event = _parse(line)
        except ValidationError as err:
            if is_last and (not complete or _is_cut_json(line)):
                truncated = line
                break
            newer = _newer_version(line)
            if newer is not None:
                raise LogError(
                    f"{path}:{number}: event written with schema version {newer}; this reader "
                    f"knows version {SCHEMA_VERSION}"
                ) from err
            raise LogError(f"{path}:{number}: unreadable event: {_first_error(err)}") from err
        if event.schema_version > SCHEMA_VERSION:
            raise LogError(
                f"{path}:{number}: event written with schema version {event.schema_version}; "
                f"this reader knows version {SCHEMA_VERSION}"
            )
        events.append(event)
    return TrajectoryLog(events=events, truncated_line=truncated)


def read_events(run_dir: str | os.PathLike[str]) -> list[Event]:
    """Read a run's events; warn with :class:`TruncatedLogWarning` when the last line was cut.

    Args:
        run_dir: the run directory holding ``events.jsonl``.

    Returns:
        The events in log order (a cut last line left out).

    Raises:
        FileNotFoundError: no log in ``run_dir``.
        LogError: see :func:`read_log`.
    """
    log = read_log(run_dir)
    if log.truncated_line is not None:
        warnings.warn(
            f"{Path(run_dir) / EVENTS_FILE}: skipped an incomplete last line "
            f"({len(log.truncated_line)} characters; the run was killed while writing it)",
            TruncatedLogWarning,
            stacklevel=2,
        )
    return log.events


def write_summary(run_dir: str | os.PathLike[str], summary: RunSummary) -> Path:
    """Write ``run_dir/summary.json`` atomically (temporary file, then rename); return its path."""
    path = Path(run_dir) / SUMMARY_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(summary.model_dump_json(indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_summary(run_dir: str | os.PathLike[str]) -> RunSummary:
    """Read ``run_dir/summary.json``.

    Args:
        run_dir: the run directory.

    Returns:
        The run's summary as written at its end (or by ``controlscope.record --write``).

    Raises:
        FileNotFoundError: no summary in ``run_dir``.
        pydantic.ValidationError: the file is not a summary.
    """
    path = Path(run_dir) / SUMMARY_FILE
    return RunSummary.model_validate_json(path.read_text(encoding="utf-8"))


def _parse(line: str) -> Event:
    """One event from one log line, upgraded when an older schema version wrote it.

    Raises:
        pydantic.ValidationError: the line is not an event of a known version.
    """
    try:
        event = EVENT_ADAPTER.validate_json(line)
    except ValidationError as err:
        try:
            data = json.loads(line)
        except ValueError:
            raise err from None
        if not isinstance(data, dict) or upgrade_event(data) is data:
            raise
        return EVENT_ADAPTER.validate_python(upgrade_event(data))
    if event.schema_version < SCHEMA_VERSION:  # valid as it stands, but an older version's
        return EVENT_ADAPTER.validate_python(upgrade_event(json.loads(line)))
    return event


def _is_cut_json(line: str) -> bool:
    """True when ``line`` is not valid JSON at all (as opposed to valid JSON with bad fields)."""
    try:
        json.loads(line)
    except ValueError:
        return True
    return False


def _newer_version(line: str) -> int | None:
    """The line's ``schema_version`` when it is newer than this reader's, else None."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(version, int) and version > SCHEMA_VERSION:
        return version
    return None


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"{where}: {first.get('msg', '')}" if where else str(first.get("msg", ""))
