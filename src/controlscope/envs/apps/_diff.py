"""The whole-database diff a native evaluator judges (paper A.2, "protected criteria").

Every table of the apps' state (all but the runtime's private tables) is compared row by row,
rows identified by their primary key: a row is added, removed or changed (with the changed
columns). An evaluator then asks whether each change is one its task allows; any other change
is a protected-criterion failure.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from typing import Any, Literal

from controlscope.envs.apps._schema import PRIVATE_TABLES

__all__ = ["RowChange", "diff", "open_bytes", "state_tables", "table_digests"]

ChangeKind = Literal["added", "removed", "changed"]


@dataclass(frozen=True)
class RowChange:
    """One row that differs between two states.

    Attributes:
        table: the table.
        kind: ``added``, ``removed`` or ``changed``.
        key: the row's primary key values.
        before: the row before (None when added).
        after: the row after (None when removed).
    """

    table: str
    kind: ChangeKind
    key: tuple[Any, ...]
    before: dict[str, Any] | None
    after: dict[str, Any] | None

    @property
    def row(self) -> dict[str, Any]:
        """The row as it is now (as it was, for a removed row)."""
        found = self.after if self.after is not None else self.before
        return dict(found or {})

    @property
    def columns(self) -> frozenset[str]:
        """The columns whose values changed (every column of an added or removed row)."""
        if self.before is None or self.after is None:
            return frozenset(self.row)
        return frozenset(k for k in self.after if self.after[k] != self.before.get(k))

    def describe(self) -> str:
        """One line: ``music_likes added (owner, 12)``, with changed columns for a change."""
        what = f"{self.table} {self.kind} {self.key}"
        if self.kind == "changed":
            what += f": {', '.join(sorted(self.columns))}"
        return what


def state_tables(db: sqlite3.Connection) -> dict[str, list[str]]:
    """The apps' tables (private ones left out) with their primary-key columns."""
    names = [
        r[0]
        for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
        if r[0] not in PRIVATE_TABLES and not str(r[0]).startswith("sqlite_")
    ]
    tables: dict[str, list[str]] = {}
    for name in names:
        info = db.execute(f"PRAGMA table_info({name})").fetchall()
        keys = sorted((int(c[5]), str(c[1])) for c in info if int(c[5]) > 0)
        tables[name] = [k for _, k in keys] or [str(c[1]) for c in info]
    return tables


def _rows(db: sqlite3.Connection, table: str, keys: list[str]) -> dict[tuple[Any, ...], Any]:
    cursor = db.execute(f"SELECT * FROM {table}")
    columns = [d[0] for d in cursor.description]
    out: dict[tuple[Any, ...], Any] = {}
    for values in cursor.fetchall():
        row = dict(zip(columns, values, strict=True))
        out[tuple(row[k] for k in keys)] = row
    return out


def diff(before: sqlite3.Connection, after: sqlite3.Connection) -> list[RowChange]:
    """Every row change from ``before`` to ``after``, by table and key.

    Raises:
        sqlite3.Error: a database cannot be read.
    """
    changes: list[RowChange] = []
    for table, keys in state_tables(before).items():
        old, new = _rows(before, table, keys), _rows(after, table, keys)
        for key in sorted(old.keys() | new.keys(), key=repr):
            a, b = old.get(key), new.get(key)
            if a == b:
                continue
            kind: ChangeKind = "added" if a is None else "removed" if b is None else "changed"
            changes.append(RowChange(table, kind, key, a, b))
    return changes


def table_digests(db: sqlite3.Connection) -> dict[str, str]:
    """SHA-256 of each table's rows (sorted by key, as JSON): equal for equal states whatever
    the file's page layout."""
    digests: dict[str, str] = {}
    for table, keys in state_tables(db).items():
        rows = _rows(db, table, keys)
        text = json.dumps([rows[k] for k in sorted(rows, key=repr)], sort_keys=True)
        digests[table] = hashlib.sha256(text.encode()).hexdigest()
    return digests


def open_bytes(data: bytes) -> sqlite3.Connection:
    """A database in memory holding ``data`` (a database file's bytes), rows as dicts."""
    db = sqlite3.connect(":memory:")
    db.deserialize(data)
    return db
