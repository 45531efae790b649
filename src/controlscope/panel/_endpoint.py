"""What a panel's served endpoint cost it, kept in the panel folder (``endpoint.json``): one
entry per panel command that ran runs against the endpoint (a resumed panel adds one), each
the endpoint gate's counts (:class:`~controlscope.models.GateStats`): requests, the most in
flight, seconds waited on answers, for a free connection and on rate limits. The panel
rewrites its entry whenever a run finishes and when it ends, so a panel killed on the way
keeps what it had counted until its last finished run; the report sums the entries.
"""

from __future__ import annotations

import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, NonNegativeFloat, NonNegativeInt, ValidationError

from controlscope.models import GateStats
from controlscope.record import LogError, read_regular

ENDPOINT_FILE = "endpoint.json"
"""The panel folder's record of its served endpoint's counts."""

MAX_ENDPOINT_BYTES = 16 * 1024 * 1024
"""The largest ``endpoint.json`` :func:`read_endpoint` reads."""


class EndpointSession(BaseModel):
    """One panel command's counts of its served endpoint.

    Attributes:
        started: when the command started its runs (Unix seconds).
        seconds: wall seconds from then to its last update.
        max_connections: the requests it allowed in flight at once.
        requests: requests answered or failed (attempts, retries included).
        peak: the most requests in flight at once.
        busy_s: seconds requests spent at the endpoint, summed over requests.
        queued_s: seconds attempts waited for a free connection, summed over attempts.
        rate_limits: rate-limit answers (429 with ``Retry-After``) that paused the pool.
        rate_limited_s: wall seconds the pool was paused by them (overlaps counted once).
    """

    model_config = ConfigDict(frozen=True, allow_inf_nan=False)  # a count, never NaN or -1
    started: NonNegativeFloat
    seconds: NonNegativeFloat
    max_connections: NonNegativeInt
    requests: NonNegativeInt
    peak: NonNegativeInt
    busy_s: NonNegativeFloat
    queued_s: NonNegativeFloat
    rate_limits: NonNegativeInt
    rate_limited_s: NonNegativeFloat


class EndpointLog(BaseModel):
    """``endpoint.json``: the panel commands' sessions, oldest first."""

    sessions: list[EndpointSession] = []


def read_endpoint(panel: Path) -> list[EndpointSession]:
    """The sessions recorded in the panel folder ``panel`` (none when it has no file).

    Raises:
        ValueError: the file is not a regular file of at most :data:`MAX_ENDPOINT_BYTES` or
            does not read as an endpoint log (the reason in one line): a count or a number
            of seconds below 0, NaN or infinite included.
        OSError: it cannot be read.
    """
    try:
        data = read_regular(panel / ENDPOINT_FILE, MAX_ENDPOINT_BYTES)
    except FileNotFoundError:
        return []
    except LogError as err:
        raise ValueError(f"{ENDPOINT_FILE}: {err}") from None
    try:
        return EndpointLog.model_validate_json(data).sessions
    except ValidationError as err:
        problem = err.errors()[0]["msg"]
        raise ValueError(f"{ENDPOINT_FILE} is not an endpoint log: {problem}") from None


def endpoint_line(sessions: list[EndpointSession]) -> str | None:
    """The sessions' counts in one sentence (None without a session): requests, the most in
    flight, seconds waited on answers, and on rate limits with the rate-limit answers."""
    if not sessions:
        return None
    limits = sum(s.rate_limits for s in sessions)
    waited = sum(s.rate_limited_s for s in sessions)
    commands = f" over {len(sessions)} panel commands" if len(sessions) > 1 else ""
    return (
        f"endpoint: {sum(s.requests for s in sessions)} requests{commands}, at most "
        f"{max(s.peak for s in sessions)} in flight, {sum(s.busy_s for s in sessions):.0f} s "
        f"waiting on answers; waited {waited:.1f} s on rate limits ({limits} rate-limit "
        f"answer{'' if limits == 1 else 's'})"
    )


class EndpointRecorder:
    """Keeps one panel command's session in ``endpoint.json`` up to date.

    Args:
        panel: the panel folder (held by this command's lock).
        connections: the requests it allows in flight at once.

    An unreadable ``endpoint.json`` is kept aside as ``endpoint.json.unreadable`` (nothing
    is lost) and a new one started.
    """

    def __init__(self, panel: Path, connections: int) -> None:
        self.path = panel / ENDPOINT_FILE
        try:
            self.before = read_endpoint(panel)
        except (ValueError, OSError):
            self.path.replace(self.path.with_name(ENDPOINT_FILE + ".unreadable"))
            self.before = []
        self.connections = connections
        self.started = time.time()
        self._clock = time.monotonic()

    def update(self, stats: GateStats) -> None:
        """Write the sessions before this command's and its own, as ``stats`` count it
        (atomically: a temporary file, then a rename)."""
        session = EndpointSession(
            started=self.started,
            seconds=round(time.monotonic() - self._clock, 3),
            max_connections=self.connections,
            requests=stats.requests,
            peak=stats.peak,
            busy_s=round(stats.busy_s, 3),
            queued_s=round(stats.queued_s, 3),
            rate_limits=stats.rate_limits,
            rate_limited_s=round(stats.rate_limited_s, 3),
        )
        text = EndpointLog(sessions=[*self.before, session]).model_dump_json(indent=2)
        tmp = self.path.with_name(ENDPOINT_FILE + ".tmp")
        tmp.write_text(text + "\n", encoding="utf-8")
        tmp.replace(self.path)
