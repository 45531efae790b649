"""The exact-request cache: identical requests share one response (paper section 4, A.5).

A response is stored under the SHA-256 of the canonical JSON of the request's model-facing fields
(model id, messages, tools, tool choice, temperature, top_p, token cap, seed, JSON schema, provider
options) plus its ``draw`` index. Identical ordinary-planning requests of a paired panel therefore
share one response, while separately sampled reviews (different ``draw``) never merge. The
request's ``purpose`` is not part of the key. A request that sets no seed is keyed with the seed
the model samples it with when the model chooses one itself (the local model's base seed:
:func:`~controlscope.core.seeded_request`), so models that differ only in their seed never
share an answer.

The store is one SQLite file in WAL mode, safe for several threads and processes: the first
response stored under a key wins, and later writers read the winner back.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from tenacity import Retrying, retry_if_exception, stop_after_delay, wait_random_exponential

from controlscope.core import ChatModel, ModelRequest, ModelResponse, SeededModel, seeded_request

__all__ = ["CacheError", "CachedModel", "RequestCache", "request_key"]


def _is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's transient "locked"/"busy" answer, worth another try."""
    text = str(exc).lower()
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text)


_log = logging.getLogger(__name__)

KEY_VERSION = "controlscope-request-cache-v1"
"""Mixed into every key; bump it when the key's meaning changes."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS responses (
    key TEXT PRIMARY KEY,
    model_id TEXT NOT NULL,
    purpose TEXT NOT NULL,
    draw INTEGER NOT NULL,
    request TEXT NOT NULL,
    response TEXT NOT NULL,
    created_s REAL NOT NULL
)
"""


class CacheError(RuntimeError):
    """The cache file cannot be opened or used (not an SQLite database, unwritable, ...)."""


def _canonical(value: Any) -> str:
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def request_key(model_id: str, request: ModelRequest) -> str:
    """Return the cache key of one request to one model.

    Args:
        model_id: the answering model's ``model_id``.
        request: the request; every field except ``purpose`` enters the key.

    Returns:
        64 lowercase hex digits: SHA-256 of the canonical JSON (sorted keys, no spaces) of the key
        fields.

    Raises:
        ValueError: when the request holds a non-finite float (NaN or infinity).
    """
    fields = request.model_dump(mode="json", exclude={"purpose"})
    return hashlib.sha256(
        _canonical({"v": KEY_VERSION, "model_id": model_id, "request": fields}).encode("utf-8")
    ).hexdigest()


class RequestCache:
    """A persistent map from request keys to responses.

    Args:
        path: the SQLite file (created with its parent directories), or ``":memory:"``.
        timeout_s: how long a writer waits for another process's lock before failing.

    Attributes:
        hits: lookups that found a response, in this instance.
        misses: lookups that found none, in this instance.

    Raises:
        CacheError: when the file exists but is not a usable SQLite database.
    """

    def __init__(self, path: str | Path, *, timeout_s: float = 30.0) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            try:
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise CacheError(
                    f"cannot use {self.path} as a request cache: its folder cannot be made "
                    f"({err.strerror or err})"
                ) from None
        self.hits = 0
        self.misses = 0
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        """Connect, switch to WAL and create the table, retrying within ``timeout_s``.

        SQLite answers "database is locked" at once, without waiting for its busy timeout, when
        several processes open a new file together (the switch to WAL needs the only lock), as a
        panel's workers do; such an open is retried with jittered backoff.
        """
        retrying = Retrying(
            retry=retry_if_exception(_is_busy),
            stop=stop_after_delay(self._timeout_s),
            wait=wait_random_exponential(multiplier=0.01, max=0.5),
            reraise=True,
        )
        try:
            return retrying(self._connect)
        except sqlite3.Error as exc:
            raise CacheError(f"cannot use {self.path} as a request cache: {exc}") from exc

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self.path, timeout=self._timeout_s, isolation_level=None, check_same_thread=False
        )
        try:
            if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute(_SCHEMA)
        except sqlite3.Error:
            conn.close()
            raise
        return conn

    @property
    def _conn(self) -> sqlite3.Connection:
        """The connection of this process: a forked child opens its own (SQLite connections
        must not cross a fork). Call with ``self._lock`` held."""
        if os.getpid() != self._pid:
            self._pid = os.getpid()
            self._db = self._open()
        return self._db

    def get(self, key: str) -> ModelResponse | None:
        """Return the response stored under ``key``, or None.

        A row that no longer parses as a response is logged, counted as a miss and left for
        :meth:`put` to replace.

        Raises:
            CacheError: when the database cannot be read.
        """
        try:
            with self._lock:
                row = self._conn.execute(
                    "SELECT response FROM responses WHERE key = ?", (key,)
                ).fetchone()
        except sqlite3.Error as exc:
            raise CacheError(f"cannot read the request cache {self.path}: {exc}") from exc
        if row is None:
            self.misses += 1
            return None
        try:
            response = ModelResponse.model_validate_json(row[0])
        except ValidationError as exc:
            _log.warning(
                "request cache %s: unreadable entry %s (%s); treated as a miss",
                self.path,
                key,
                exc.errors()[0]["msg"],
            )
            self.misses += 1
            return None
        self.hits += 1
        return response

    def put(
        self, key: str, model_id: str, request: ModelRequest, response: ModelResponse
    ) -> ModelResponse:
        """Store ``response`` under ``key`` unless a readable response is already there.

        Args:
            key: from :func:`request_key`.
            model_id: the answering model (kept for inspection).
            request: the request (kept for inspection).
            response: the response to store (stored with ``cached=False``).

        Returns:
            The response now stored under ``key``: ``response`` itself, or the one another writer
            stored first.

        Raises:
            CacheError: when the database cannot be written.
        """
        stored = response.model_copy(update={"cached": False})
        try:
            with self._lock:
                self._conn.execute("BEGIN IMMEDIATE")
                try:
                    row = self._conn.execute(
                        "SELECT response FROM responses WHERE key = ?", (key,)
                    ).fetchone()
                    if row is not None:
                        try:
                            winner = ModelResponse.model_validate_json(row[0])
                        except ValidationError:
                            winner = None
                        if winner is not None:
                            self._conn.execute("COMMIT")
                            return winner
                    self._conn.execute(
                        "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?, ?, ?, ?)",
                        (
                            key,
                            model_id,
                            request.purpose,
                            request.draw,
                            request.model_dump_json(),
                            stored.model_dump_json(),
                            time.time(),
                        ),
                    )
                    self._conn.execute("COMMIT")
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            raise CacheError(f"cannot write the request cache {self.path}: {exc}") from exc
        return stored

    def __len__(self) -> int:
        """The number of stored responses."""
        with self._lock:
            row = self._conn.execute("SELECT COUNT(*) FROM responses").fetchone()
        return int(row[0])

    def close(self) -> None:
        """Close the database connection."""
        with self._lock:
            if os.getpid() == self._pid:
                self._db.close()

    def __enter__(self) -> RequestCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CachedModel:
    """Wrap any :class:`ChatModel` with a :class:`RequestCache`.

    A hit returns the stored response with ``cached=True`` and ``latency_s=0`` (its ``usage`` is
    the original one, so logical token totals still count it, paper A.5). A miss asks the inner
    model and stores its answer; provider errors are not stored. When another process stored an
    answer to the same request first, that answer's content is returned (so paired branches stay
    coupled) with this call's own usage and latency and ``cached=False`` (the model work was done).

    Args:
        inner: the model that answers misses.
        cache: the store.
    """

    def __init__(self, inner: ChatModel, cache: RequestCache) -> None:
        self.inner = inner
        self.cache = cache

    @property
    def model_id(self) -> str:
        """The inner model's id (the cache adds nothing to what answers)."""
        return self.inner.model_id

    def sampling_seed(self, request: ModelRequest) -> int | None:
        """The seed the inner model samples ``request`` with (see
        :class:`~controlscope.core.SeededModel`)."""
        inner = self.inner
        return inner.sampling_seed(request) if isinstance(inner, SeededModel) else request.seed

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Answer from the cache, or from the inner model on a miss.

        The request is keyed, stored and sent with the seed the inner model samples it with
        (:func:`~controlscope.core.seeded_request`).

        Raises:
            ProviderError: from the inner model on a miss.
            CacheError: when the cache cannot be read or written.
        """
        request = seeded_request(self.inner, request)
        key = request_key(self.inner.model_id, request)
        hit = self.cache.get(key)
        if hit is not None:
            return hit.model_copy(update={"cached": True, "latency_s": 0.0})
        response = self.inner.complete(request)
        stored = self.cache.put(key, self.inner.model_id, request, response)
        return stored.model_copy(
            update={"usage": response.usage, "latency_s": response.latency_s, "cached": False}
        )
