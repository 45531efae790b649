"""The trajectory store: a run directory holding ``events.jsonl`` and ``summary.json``.

Events are appended as JSON lines and flushed one by one, so a killed run leaves a readable log up
to its last event (``docs/architecture.md``, "Execution contract"). Reading tolerates a truncated
last line (the event being written when the process died) and reports it.

A ``model_call`` whose request's messages begin with the same role's previous request's (a
planner's conversation, which grows by a turn each time) is written as a continuation: its
request holds only the messages added, ``messages_from`` names the previous one's ``seq``
(:class:`_LastRequests`); the reader joins them back, so every reader sees each
request whole while the log grows with what each request adds, not with the whole history.

The writer and the reader accept exactly the same data: the writer checks every line it is about
to append with the reader's own parser (size at most :data:`MAX_EVENT_BYTES`, standard JSON, no
nesting the parser refuses, a valid event) and refuses an event that would not read back. The
reader opens regular files only (never a FIFO or a device), reads line by line with the same
size bound, and keeps one event at a time in memory (:func:`iter_events`).
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, BinaryIO

from pydantic import BaseModel, ConfigDict, ValidationError

from controlscope.core import (
    EVENT_ADAPTER,
    EVENTS_FILE,
    SCHEMA_VERSION,
    Event,
    InputFileError,
    Message,
    ModelCallEvent,
    open_regular,
    upgrade_event,
)
from controlscope.core import read_regular as _read_regular
from controlscope.record._summary import RunSummary
from controlscope.record._tracing import run_spans

SUMMARY_FILE = "summary.json"

MAX_EVENT_BYTES = 32 * 1024 * 1024
"""The longest line (one event, in UTF-8 bytes) the writer writes and the reader reads."""

MAX_SUMMARY_BYTES = 4 * 1024 * 1024
"""The largest ``summary.json`` :func:`read_summary` reads."""

_DURABLE_TYPES = frozenset({"run_start", "final_verdict", "run_end"})


class LogError(ValueError):
    """A trajectory log cannot be read (a corrupt or oversized line before the end, an unknown
    schema, not a regular file), or an event cannot be written so that it reads back."""


class TruncatedLogWarning(UserWarning):
    """The log's last line is incomplete (the run was killed while writing it); it was skipped."""


class TrajectoryWriter:
    """Appends events to ``run_dir/events.jsonl``, one JSON line each, flushed per event.

    The writer assigns each event's ``seq`` (0-based, consecutive) and ``t`` (epoch seconds).
    Every event is flushed to the operating system as soon as it is written, so killing the
    process loses nothing already written; ``run_start``, ``final_verdict`` and ``run_end`` (and
    :meth:`close`) are also ``fsync``'d, which keeps the per-event cost at one ``write`` call.
    An event that would not read back (see :func:`check_line`) is refused and nothing is
    written. Safe to call from several threads; no event is kept in memory.

    When tracing is on (``OTEL_EXPORTER_OTLP_ENDPOINT`` set, or :func:`trace_to`), each written
    event is also turned into OpenTelemetry spans (:mod:`controlscope.record._tracing`); a
    failure there stops the run's tracing with a warning and never its log.

    Args:
        run_dir: the run's directory; created if missing.

    Raises:
        FileExistsError: ``run_dir`` already holds a non-empty ``events.jsonl``, or anything at
            that name but a regular file (a log is never overwritten or extended by a second
            run, and a FIFO or device is never opened).
    """

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.run_dir / EVENTS_FILE
        self._file: IO[bytes] | None = _create_log(self.path)
        self._seq = 0
        self._lock = threading.Lock()
        self._spans = run_spans(self.run_dir)
        self._requests = _LastRequests()

    @property
    def next_seq(self) -> int:
        """The ``seq`` the next event will get (= number of events written)."""
        return self._seq

    @property
    def events(self) -> list[Event]:
        """The events written so far, read back from the log (e.g. for :func:`summarize`)."""
        with self._lock:
            if self._file is not None:
                self._file.flush()
        return list(iter_events(self.run_dir))

    def write(self, event: Event) -> Event:
        """Stamp ``event`` with ``seq`` and ``t``, append it as one JSON line and flush.

        Args:
            event: any event; its ``seq`` and ``t`` are replaced.

        Returns:
            The stamped copy that was written.

        Raises:
            ValueError: the writer is closed.
            LogError: the event would not read back (too large, not standard JSON, nested
                deeper than the reader parses, or invalid once read); nothing was written.
        """
        with self._lock:
            if self._file is None:
                raise ValueError(f"trajectory writer for {self.path} is closed")
            stamped = event.model_copy(update={"seq": self._seq, "t": time.time()})
            written = self._requests.continued(stamped)
            try:
                # The event's own serializer: it writes a non-finite number as NaN/Infinity
                # (the union adapter would write null), which check_line then refuses.
                line = type(written).__pydantic_serializer__.to_json(written)
            except ValueError as err:  # pydantic's serialisation errors are ValueErrors
                raise LogError(f"a {stamped.type} event cannot be recorded: {err}") from None
            check_line(line, what=f"a {stamped.type} event")
            self._file.write(line + b"\n")
            self._file.flush()
            if stamped.type in _DURABLE_TYPES:
                os.fsync(self._file.fileno())
            self._requests.remember(stamped)
            self._seq += 1
            if self._spans is not None:
                self._trace(stamped)
            return stamped

    def _trace(self, event: Event) -> None:
        """Hand a written event to the run's spans; a failure stops tracing, not the run."""
        assert self._spans is not None
        try:
            self._spans.add(event)
        except Exception as err:  # the exporter's or a span's failure: the log goes on
            self._spans = None
            warnings.warn(f"tracing of {self.run_dir} stopped: {err}", RuntimeWarning, 2)

    def close(self) -> None:
        """Flush, ``fsync`` and close the log; safe to call twice."""
        with self._lock:
            if self._file is not None:
                self._file.flush()
                os.fsync(self._file.fileno())
                self._file.close()
                self._file = None
            if self._spans is not None:
                self._spans.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _LastRequests:
    """The last request each role sent in one log (its ``seq`` and messages), by which a
    ``model_call`` is written as a continuation of the previous one and read back whole."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[int, tuple[Message, ...]]] = {}

    def continued(self, event: Event) -> Event:
        """``event`` as the writer writes it: a ``model_call`` whose request's messages begin
        with (and add to) the same role's previous request's holds only the added ones, with
        ``messages_from`` naming the previous event; any other event as it is."""
        if not isinstance(event, ModelCallEvent) or event.role not in self._last:
            return event
        seq, before = self._last[event.role]
        messages = event.request.messages
        if not before or len(messages) <= len(before) or messages[: len(before)] != before:
            return event
        added = event.request.model_copy(update={"messages": messages[len(before) :]})
        return event.model_copy(update={"request": added, "messages_from": seq})

    def remember(self, event: Event) -> None:
        """Keep ``event``'s request (whole) as its role's last one."""
        if isinstance(event, ModelCallEvent):
            self._last[event.role] = (event.seq, event.request.messages)

    def whole(self, event: Event) -> Event:
        """``event`` as a reader gives it: a continuation joined to the messages of the
        event it continues (then kept as its role's last request).

        Raises:
            ValueError: it continues an event that is not its role's previous ``model_call``.
        """
        if isinstance(event, ModelCallEvent) and event.messages_from is not None:
            seq, before = self._last.get(event.role, (None, ()))
            if seq != event.messages_from:
                raise ValueError(
                    f"a {event.role} model_call continues event {event.messages_from}, which "
                    f"is not the {event.role}'s previous model_call"
                )
            joined = event.request.model_copy(update={"messages": before + event.request.messages})
            event = event.model_copy(update={"request": joined, "messages_from": None})
        self.remember(event)
        return event


def _create_log(path: Path) -> IO[bytes]:
    """Open a new log for appending: a fresh file, or an empty regular one (never a FIFO, a
    device or a link, which a second open would block on or write through).

    Raises:
        FileExistsError: a non-empty log or anything but a regular file is in the way.
    """
    flags = os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW
    try:
        fd = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            raise FileExistsError(
                f"{path} exists and is not a regular file; choose a new run directory"
            ) from None
        if info.st_size > 0:
            raise FileExistsError(
                f"{path} already holds a trajectory log; choose a new run directory"
            ) from None
        fd = os.open(path, flags | os.O_TRUNC)
    return os.fdopen(fd, "wb")


def check_line(line: bytes, *, what: str = "an event") -> Event:
    """The event a log line holds, checked exactly as :func:`read_log` reads it.

    Args:
        line: one line as the writer would append it (no newline).
        what: the event's description, for the error message.

    Returns:
        The event parsed back.

    Raises:
        LogError: the line is longer than :data:`MAX_EVENT_BYTES`, holds ``NaN`` or
            ``Infinity`` (a non-finite number), or does not parse back into a valid event.
    """
    if len(line) > MAX_EVENT_BYTES:
        raise LogError(
            f"{what} cannot be recorded: {len(line)} bytes exceed the log's line bound of "
            f"{MAX_EVENT_BYTES}"
        )
    if (b"NaN" in line or b"Infinity" in line) and _has_constant(line):
        raise LogError(f"{what} cannot be recorded: it holds a non-finite number")
    try:
        return EVENT_ADAPTER.validate_json(line)
    except ValidationError as err:
        raise LogError(f"{what} cannot be recorded: {_first_error(err)}") from None


def _has_constant(line: bytes) -> bool:
    """Whether ``line`` holds the non-standard JSON constants ``NaN``/``Infinity``."""
    found = False

    def constant(name: str) -> None:
        nonlocal found
        found = True

    try:
        json.loads(line, parse_constant=constant)
    except (ValueError, RecursionError):
        return False  # not JSON at all: validation reports it
    return found


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

    A last line that does not parse (no trailing newline, or cut-off JSON or UTF-8) is the event
    being written when the run was killed: it is skipped and returned in ``truncated_line``.
    Any other unreadable line is an error. Holds every event in memory: prefer
    :func:`iter_events` for long logs.

    Raises:
        FileNotFoundError: no log in ``run_dir``.
        LogError: a corrupt or oversized line before the last one, an event written by a newer
            schema version (the message names the line number), or a log that is not a
            regular file.
    """
    events: list[Event] = []
    truncated: str | None = None
    for item in _scan(Path(run_dir) / EVENTS_FILE):
        if isinstance(item, _Truncated):
            truncated = item.text
        else:
            events.append(item)
    return TrajectoryLog(events=events, truncated_line=truncated)


def iter_events(run_dir: str | os.PathLike[str]) -> Iterator[Event]:
    """A run's events one at a time, in log order; memory stays flat in the log's length.

    A cut last line is left out with a :class:`TruncatedLogWarning` (see :func:`read_log`).

    Args:
        run_dir: the run directory holding ``events.jsonl``.

    Yields:
        Each event.

    Raises:
        FileNotFoundError: no log in ``run_dir``.
        LogError: see :func:`read_log`.
    """
    path = Path(run_dir) / EVENTS_FILE
    for item in _scan(path):
        if isinstance(item, _Truncated):
            warnings.warn(
                f"{path}: skipped an incomplete last line ({len(item.text)} characters; the "
                "run was killed while writing it)",
                TruncatedLogWarning,
                stacklevel=2,
            )
        else:
            yield item


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
    return list(iter_events(run_dir))


@dataclass(frozen=True)
class _Truncated:
    """The incomplete last line of a killed run's log (decoded leniently)."""

    text: str


def _scan(path: Path) -> Iterator[Event | _Truncated]:
    """Every event of the log at ``path`` (each request whole), then its cut last line if it
    has one."""
    requests = _LastRequests()
    with _open_regular(path) as f:
        number = 1
        line = _read_line(f, path, number)
        while line:
            upcoming = _read_line(f, path, number + 1)
            if line.strip():
                item = _parse_line(line, path, number, is_last=not upcoming)
                if not isinstance(item, _Truncated):
                    try:
                        item = requests.whole(item)
                    except ValueError as err:
                        raise LogError(f"{path}:{number}: {err}") from None
                yield item
                if isinstance(item, _Truncated):
                    return
            number += 1
            line = upcoming


def _read_line(f: BinaryIO, path: Path, number: int) -> bytes:
    """The next line (newline included), at most :data:`MAX_EVENT_BYTES` long."""
    line = f.readline(MAX_EVENT_BYTES + 2)
    if len(line) > MAX_EVENT_BYTES + 1 or (len(line) == MAX_EVENT_BYTES + 1 and line[-1:] != b"\n"):
        raise LogError(f"{path}:{number}: a line longer than {MAX_EVENT_BYTES} bytes")
    return line


def _parse_line(raw: bytes, path: Path, number: int, is_last: bool) -> Event | _Truncated:
    """One log line as an event, or as the cut last line of a killed run."""
    complete = raw.endswith(b"\n")
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        if is_last and not complete:
            return _Truncated(raw.decode("utf-8", "replace"))
        raise LogError(f"{path}:{number}: not UTF-8 text ({err})") from None
    line = line.rstrip("\n")
    try:
        event = _parse(line)
    except ValidationError as err:
        if is_last and (not complete or _is_cut_json(line)):
            return _Truncated(line)
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
    return event


def _open_regular(path: Path, max_bytes: int | None = None) -> BinaryIO:
    """Open ``path`` for reading if it is a regular file (:func:`controlscope.core.open_regular`:
    a FIFO in its place is refused, not waited on).

    Raises:
        FileNotFoundError: nothing at ``path``.
        LogError: a FIFO, device, directory or socket, or a file over ``max_bytes``.
    """
    try:
        return open_regular(path, max_bytes)
    except InputFileError as err:
        raise LogError(str(err)) from None


def read_regular(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``max_bytes`` (a link to one
    is followed; :func:`controlscope.core.read_regular`: a FIFO in its place is refused, not
    waited on).

    Raises:
        FileNotFoundError: nothing at ``path``.
        OSError: it cannot be opened (no permission...).
        LogError: a FIFO, device, directory or socket, or a file over ``max_bytes``.
    """
    try:
        return _read_regular(path, max_bytes)
    except InputFileError as err:
        raise LogError(str(err)) from None


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
        LogError: ``summary.json`` is not a regular file or exceeds :data:`MAX_SUMMARY_BYTES`.
        pydantic.ValidationError: the file is not a summary.
    """
    return RunSummary.model_validate_json(
        read_regular(Path(run_dir) / SUMMARY_FILE, MAX_SUMMARY_BYTES)
    )


def _parse(line: str) -> Event:
    """One event from one log line, upgraded when an older schema version wrote it.

    Raises:
        pydantic.ValidationError: the line is not an event of a known version.
    """
    written = _written_version(line)
    if written is not None and written < SCHEMA_VERSION:  # upgraded: parsed once, not twice
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):
            data = None  # not JSON: validation below says why
        if isinstance(data, dict):
            return EVENT_ADAPTER.validate_python(upgrade_event(data))
    try:
        event = EVENT_ADAPTER.validate_json(line)
    except ValidationError as err:
        try:
            data = json.loads(line)
        except (ValueError, RecursionError):  # nested deeper than json's recursion allows
            raise err from None
        if not isinstance(data, dict) or upgrade_event(data) is data:
            raise
        return EVENT_ADAPTER.validate_python(upgrade_event(data))
    if event.schema_version < SCHEMA_VERSION:  # valid as it stands, but an older version's
        return EVENT_ADAPTER.validate_python(upgrade_event(json.loads(line)))
    return event


_VERSION_PREFIX = '{"schema_version":'
"""How the writer starts every line (the event's first field)."""


def _written_version(line: str) -> int | None:
    """The schema version a line starts with as the writer writes it, else None (then the
    line's whole validation finds it)."""
    if not line.startswith(_VERSION_PREFIX):
        return None
    digits = line[len(_VERSION_PREFIX) : line.find(",", len(_VERSION_PREFIX))]
    return int(digits) if digits.isdigit() and len(digits) < 6 else None


def _is_cut_json(line: str) -> bool:
    """True when ``line`` is not valid JSON at all (as opposed to valid JSON with bad fields)."""
    try:
        json.loads(line)
    except ValueError:
        return True
    except RecursionError:
        return False  # JSON, nested deeper than json's recursion allows
    return False


def _newer_version(line: str) -> int | None:
    """The line's ``schema_version`` when it is newer than this reader's, else None."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    version = data.get("schema_version") if isinstance(data, dict) else None
    if isinstance(version, int) and version > SCHEMA_VERSION:
        return version
    return None


def _first_error(err: ValidationError) -> str:
    first = err.errors()[0]
    where = ".".join(str(p) for p in first.get("loc", ()))
    return f"{where}: {first.get('msg', '')}" if where else str(first.get("msg", ""))
