"""The panel folder: its manifest, and each run as an independent unit under it.

::

    PANEL/
      panel.json          the manifest: the configuration, what identifies it, the plan
      panel.lock          held by the one panel command running on the folder
      cache.sqlite        the exact-request cache planning goes through (paper A.5)
      runs/TASK/sSEED/pSOURCE/keep/        events.jsonl, summary.json, panel_run.json
      runs/TASK/sSEED/pSOURCE/full-d0/     ...

A run is finished when its ``panel_run.json`` exists, written atomically after its log and
summary, and names the run: its id, and the SHA-256 of its log (``events.jsonl``) as written. A
run killed at any point has none and is run again from nothing; a record that names another
run, or another log (copied from elsewhere, or a log changed since), does not count: the run
is run again on resumption (:func:`record_problem` says why). The record also holds the
log file's fingerprint (:class:`LogIdentity`), so a log whose file is unchanged since is
checked without reading it. A record written before logs were hashed names its run by its id
alone. A finished run is never touched again. A folder
whose manifest holds another configuration is refused with the first difference named.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from controlscope.core import EVENTS_FILE
from controlscope.panel._config import PanelConfig
from controlscope.panel._plan import PanelPlan
from controlscope.record import LogError, read_regular

if TYPE_CHECKING:
    from controlscope.replay import BranchResult

MANIFEST_FILE = "panel.json"
"""The panel folder's manifest."""

RUNS_DIR = "runs"
"""The folder of the panel's run directories."""

RUN_MARKER = "panel_run.json"
"""A finished run's record in its run directory (written last)."""

CACHE_FILE = "cache.sqlite"
"""The panel's exact-request cache."""

LOCK_FILE = "panel.lock"
"""The panel folder's lock file (:func:`controlscope.panel.lock_panel`; it stays, the lock on
it comes and goes)."""

MAX_MANIFEST_BYTES = 256 * 1024 * 1024
"""The largest ``panel.json`` :func:`read_manifest` reads (a plan of a million runs fits)."""

MAX_RECORD_BYTES = 1024 * 1024
"""The largest ``panel_run.json`` :func:`read_record` reads."""

MANIFEST_VERSION = 1
"""The manifest's format version."""

RunStatus = Literal["done", "ineligible", "error"]
"""How a run of a panel ended: recorded (``done``, whatever its verdict); ``ineligible`` (no
boundary to branch at, e.g. a unit the local rule finds none in: left out of the comparison,
with the reason); ``error`` (it could not run; run again on resumption)."""


class PanelError(ValueError):
    """A panel folder that cannot be used: made by another configuration (the difference is
    named), or with an unreadable manifest."""


class RunRecord(BaseModel):
    """A finished run as the panel records it (``panel_run.json``).

    Attributes:
        id: the run's id (its path under ``runs/``).
        status: how it ended (:data:`RunStatus`).
        success: the verdict (None without one).
        end_reason: the run's end reason.
        primitive_calls: its primitive calls.
        detail: why it is ineligible or failed; empty otherwise.
        request_hash: a branch's first review request hash (operation set left out).
        state_hash: a branch's workspace hash at its boundary.
        seconds: wall seconds the run took.
        log_sha256: the SHA-256 of the run's log (``events.jsonl``) as the run left it; None
            when it wrote none (a run found ineligible before it started), and in records
            written before logs were hashed (such a record names its run by ``id`` alone).
        log_fingerprint: the log file's identity when it was hashed (:class:`LogIdentity`):
            a log whose file still has it is that log, unread; None in records written
            before (their logs are hashed again when checked).
        mechanism: how a branch started from its Keep run's prefix: ``fork`` (the prefix
            replayed once for all the unit's branches, then forked) or ``replay`` (the
            branch replayed the prefix itself); None for a whole run.
        diverged_at: for a run branched from a first schedule's run (``diverge_from``), the
            call index of the boundary where the two schedules part; None when they share
            the whole run, and for every other run.
        problem: a check a finished run failed, in words (its shared prefix with the first
            schedule's run differs from that run's, paper B.1, B.2); empty when it passed
            every check. The run keeps its verdict; the report lists the problem.
    """

    model_config = ConfigDict(frozen=True)
    id: str
    status: RunStatus
    success: bool | None = None
    end_reason: str | None = None
    primitive_calls: int = 0
    detail: str = ""
    request_hash: str | None = None
    state_hash: str | None = None
    seconds: float = 0.0
    log_sha256: str | None = None
    log_fingerprint: str | None = None
    mechanism: str | None = None
    diverged_at: int | None = None
    problem: str = ""


def branched_record(run_id: str, found: BranchResult, detail: str, **fields: Any) -> RunRecord:
    """The ``done`` record of a run that started as a branch (by fork, by prefix replay or at
    a divergence point): its summary's outcome (``replay_diverged`` with no summary, when it
    left the recording in its prefix), ``detail`` and the branch's hashes; ``fields`` are the
    record's other fields (``mechanism``, ``diverged_at``, ``problem``)."""
    summary = found.summary
    return RunRecord(
        id=run_id,
        status="done",
        success=summary.success if summary else None,
        end_reason=summary.end_reason if summary else "replay_diverged",
        primitive_calls=summary.primitive_calls if summary else 0,
        detail=detail,
        request_hash=found.request_hash,
        state_hash=found.state_hash,
        **fields,
    )


class PanelManifest(BaseModel):
    """``panel.json``.

    Attributes:
        version: the format version.
        config: the configuration, every default filled in.
        plan: the panel's runs.
    """

    version: int = MANIFEST_VERSION
    config: PanelConfig
    plan: PanelPlan


def run_dir(panel: Path, run_id: str) -> Path:
    """The run directory of ``run_id`` in the panel folder ``panel``."""
    return panel / RUNS_DIR / run_id


def read_manifest(panel: Path) -> PanelManifest:
    """The manifest of the panel folder ``panel``.

    Raises:
        PanelError: no manifest, one that is not a regular file of at most
            :data:`MAX_MANIFEST_BYTES` (a FIFO is refused, not waited on), or one that does not
            read as a manifest of this version.
    """
    path = panel / MANIFEST_FILE
    try:
        data = read_regular(path, MAX_MANIFEST_BYTES).decode("utf-8")
    except (OSError, LogError, UnicodeDecodeError) as err:
        raise PanelError(f"{panel} is not a panel folder ({MANIFEST_FILE}: {err})") from None
    try:
        manifest = PanelManifest.model_validate_json(data)
    except ValidationError as err:
        raise PanelError(f"{path} is not a panel manifest: {err.errors()[0]['msg']}") from None
    if manifest.version != MANIFEST_VERSION:
        raise PanelError(f"{path} has format version {manifest.version}, not {MANIFEST_VERSION}")
    return manifest


def open_panel(panel: Path, config: PanelConfig, plan: PanelPlan) -> PanelManifest:
    """Create the panel folder, or check that an existing one holds this configuration.

    Raises:
        PanelError: ``panel`` is a file, holds files but no manifest, or its manifest holds
            another configuration or plan (the first difference is named).
    """
    check_folder(panel)
    manifest = PanelManifest(config=config, plan=plan)
    if (panel / MANIFEST_FILE).exists():
        found = read_manifest(panel)
        where = difference(found.config.identity(), config.identity())
        if where is None and found.plan != plan:
            where = "the plan (the environment's tasks changed)"
        if where is not None:
            raise PanelError(
                f"{panel} holds a panel of another configuration: {where}; "
                "resume with the same configuration or choose a new --out"
            )
        return found
    (panel / RUNS_DIR).mkdir(parents=True, exist_ok=True)
    _write_atomic(panel / MANIFEST_FILE, manifest.model_dump_json(indent=2))
    return manifest


def check_folder(panel: Path) -> None:
    """Refuse a folder that cannot hold a panel: a file, a path under a file, or a folder
    holding files but no manifest (its lock file aside); a missing folder is fine (it is
    made). Cheap: checked before any model is built.

    Raises:
        PanelError: what is wrong, in one line.
    """
    if panel.exists() and not panel.is_dir():
        raise PanelError(f"{panel} exists and is not a directory")
    above = next((p for p in panel.parents if os.path.lexists(p)), None)
    if not panel.exists() and above is not None and not above.is_dir():
        raise PanelError(f"{panel} cannot be made: {above} is not a directory")
    if (panel / MANIFEST_FILE).exists() or not panel.exists():
        return
    if any(p.name != LOCK_FILE for p in panel.iterdir()):
        raise PanelError(f"{panel} is not empty and holds no panel; choose a new --out")


def difference(there: Any, here: Any, where: str = "") -> str | None:
    """The first difference between two JSON-shaped values, as ``KEY is X there, Y here``;
    None when they are equal."""
    if isinstance(there, dict) and isinstance(here, dict):
        for key in sorted(set(there) | set(here), key=str):
            found = difference(there.get(key), here.get(key), f"{where}.{key}" if where else key)
            if found is not None:
                return found
        return None
    if there != here:
        return f"{where or 'the configuration'} is {there!r} there, {here!r} here"
    return None


def finished(panel: Path, run_id: str) -> RunRecord | None:
    """The record of a finished run (``done`` or ``ineligible``); None when the run has not
    finished (no record, an unreadable one, one that names another run or another log, see
    :func:`record_problem`, or ``error``: it runs again)."""
    directory = run_dir(panel, run_id)
    try:
        record = read_record(directory)
    except (OSError, ValueError):
        return None
    if record_problem(directory, run_id, record) is not None:
        return None
    return record if record.status in ("done", "ineligible") else None


def record_problem(directory: Path, run_id: str, record: RunRecord) -> str | None:
    """Why ``record``, read from ``directory``, is not the record of run ``run_id`` there
    (copied from another run, or its log replaced since); None when it is.

    A record must name the run (``id``) and, when it holds a log hash, the log the directory
    holds (``events.jsonl``, its SHA-256). A record without a log hash (the run wrote no log,
    or the record was written before logs were hashed) is checked by its id alone.

    Args:
        directory: the run directory the record was read from.
        run_id: the run the directory belongs to.
        record: the record read.

    Returns:
        The problem in words (``its record names run 'X'``...), or None.
    """
    if record.id != run_id:
        return f"its record names run {record.id!r}"
    if record.log_sha256 is None:
        return None
    if record.log_fingerprint is not None and _fingerprint_of(directory) == record.log_fingerprint:
        return None  # the very file that was hashed, unchanged since: not read again
    try:
        found = log_sha256(directory)
    except (OSError, LogError) as err:
        return f"its log cannot be read to check it against its record: {err}"
    if found is None:
        return f"its record names a log, and it has no {EVENTS_FILE}"
    if found != record.log_sha256:
        return (
            f"its {EVENTS_FILE} is not the log its record names (SHA-256 {found[:12]}..., "
            f"recorded {record.log_sha256[:12]}...)"
        )
    return None


@dataclass(frozen=True)
class LogIdentity:
    """A run log as its record names it.

    Attributes:
        sha256: the SHA-256 of its bytes (64 hex digits).
        fingerprint: the file's device, inode, size, modification and change times (ns)
            when it was hashed, ``dev:ino:size:mtime_ns:ctime_ns``. Writing, truncating,
            replacing, moving, copying or touching the file changes at least one of them (the
            change time cannot be set back by a user), so a log whose file still has the
            fingerprint is the one hashed, and checking it needs no read of its bytes.
    """

    sha256: str
    fingerprint: str


def _fingerprint(st: os.stat_result) -> str:
    return f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _fingerprint_of(directory: Path) -> str | None:
    """The fingerprint of the log in ``directory`` (its links followed); None without one."""
    try:
        return _fingerprint(os.stat(directory / EVENTS_FILE))
    except OSError:
        return None


def log_identity(directory: Path) -> LogIdentity | None:
    """The SHA-256 and fingerprint of the run log in ``directory``; None when it has none.

    Raises:
        LogError: the log is not a regular file (a FIFO is refused, not waited on).
        OSError: it cannot be read.
    """
    try:
        fd = os.open(directory / EVENTS_FILE, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise LogError(f"{directory / EVENTS_FILE} is not a regular file")
        digest = hashlib.file_digest(f, "sha256").hexdigest()
        after = os.fstat(fd)
    # a log written to while it was hashed gets a fingerprint no later check matches
    fingerprint = _fingerprint(after) if _fingerprint(before) == _fingerprint(after) else ""
    return LogIdentity(digest, fingerprint)


def log_sha256(directory: Path) -> str | None:
    """The SHA-256 of the run log in ``directory`` (64 hex digits); None when it has none.

    Raises:
        LogError: the log is not a regular file (a FIFO is refused, not waited on).
        OSError: it cannot be read.
    """
    identity = log_identity(directory)
    return identity.sha256 if identity is not None else None


def read_record(directory: Path) -> RunRecord:
    """The ``panel_run.json`` of a run directory.

    Raises:
        OSError: no record (FileNotFoundError), or it cannot be opened.
        ValueError: the record is not a regular file of at most :data:`MAX_RECORD_BYTES` (a
            FIFO is refused, not waited on; ``LogError``) or does not read as one (pydantic's
            ``ValidationError``).
    """
    return RunRecord.model_validate_json(read_regular(directory / RUN_MARKER, MAX_RECORD_BYTES))


def write_record(directory: Path, record: RunRecord) -> None:
    """Write a run's record atomically (temporary file, then rename): the run is finished."""
    directory.mkdir(parents=True, exist_ok=True)
    _write_atomic(directory / RUN_MARKER, record.model_dump_json(indent=2))


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
