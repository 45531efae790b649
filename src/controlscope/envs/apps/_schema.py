"""The apps' SQLite schema: one database per world, each app's tables prefixed by its name.

``meta`` and ``accounts`` are the runtime's private state (the world's clock, the secret the
access tokens derive from, the user, every person's passwords): only the server reads them,
and agent code reaches them only through the APIs (the supervisor shows the user's own
passwords). Everything else is the apps' state, which the evaluators diff whole (paper A.2,
"protected criteria").
"""

from __future__ import annotations

import sqlite3

__all__ = ["PRIVATE_TABLES", "SCHEMA", "connect", "create_schema"]

SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE accounts (
    email TEXT NOT NULL, app TEXT NOT NULL, password TEXT NOT NULL,
    PRIMARY KEY (email, app)
);
CREATE TABLE people (
    email TEXT PRIMARY KEY, first_name TEXT NOT NULL, last_name TEXT NOT NULL,
    phone_number TEXT NOT NULL, birthday TEXT NOT NULL, city TEXT NOT NULL
);
CREATE TABLE supervisor_answers (
    answer_id INTEGER PRIMARY KEY, answer TEXT, completed_at TEXT NOT NULL
);
CREATE TABLE contacts_contacts (
    contact_id INTEGER PRIMARY KEY, owner_email TEXT NOT NULL, first_name TEXT NOT NULL,
    last_name TEXT NOT NULL, email TEXT NOT NULL, phone_number TEXT NOT NULL,
    relationship TEXT NOT NULL, birthday TEXT NOT NULL, city TEXT NOT NULL
);
CREATE TABLE mail_messages (
    message_id INTEGER PRIMARY KEY, sender_email TEXT NOT NULL, recipient_email TEXT NOT NULL,
    subject TEXT NOT NULL, body TEXT NOT NULL, sent_at TEXT NOT NULL, read INTEGER NOT NULL
);
CREATE TABLE mail_attachments (
    attachment_id INTEGER PRIMARY KEY, message_id INTEGER NOT NULL, file_name TEXT NOT NULL,
    content TEXT NOT NULL
);
CREATE TABLE payments_accounts (email TEXT PRIMARY KEY, balance REAL NOT NULL);
CREATE TABLE payments_transactions (
    transaction_id INTEGER PRIMARY KEY, sender_email TEXT NOT NULL,
    receiver_email TEXT NOT NULL, amount REAL NOT NULL, description TEXT NOT NULL,
    created_at TEXT NOT NULL
);
CREATE TABLE payments_requests (
    request_id INTEGER PRIMARY KEY, requester_email TEXT NOT NULL, payer_email TEXT NOT NULL,
    amount REAL NOT NULL, description TEXT NOT NULL, status TEXT NOT NULL,
    created_at TEXT NOT NULL, resolved_at TEXT
);
CREATE TABLE music_songs (
    song_id INTEGER PRIMARY KEY, title TEXT NOT NULL, artist TEXT NOT NULL,
    album TEXT NOT NULL, genre TEXT NOT NULL, duration_s INTEGER NOT NULL,
    release_year INTEGER NOT NULL, play_count INTEGER NOT NULL
);
CREATE TABLE music_library (
    owner_email TEXT NOT NULL, song_id INTEGER NOT NULL, added_at TEXT NOT NULL,
    PRIMARY KEY (owner_email, song_id)
);
CREATE TABLE music_likes (
    owner_email TEXT NOT NULL, song_id INTEGER NOT NULL, liked_at TEXT NOT NULL,
    PRIMARY KEY (owner_email, song_id)
);
CREATE TABLE music_playlists (
    playlist_id INTEGER PRIMARY KEY, owner_email TEXT NOT NULL, title TEXT NOT NULL,
    is_public INTEGER NOT NULL, created_at TEXT NOT NULL
);
CREATE TABLE music_playlist_songs (
    playlist_id INTEGER NOT NULL, song_id INTEGER NOT NULL, position INTEGER NOT NULL,
    PRIMARY KEY (playlist_id, song_id)
);
CREATE TABLE notes_notes (
    note_id INTEGER PRIMARY KEY, owner_email TEXT NOT NULL, title TEXT NOT NULL,
    content TEXT NOT NULL, tags TEXT NOT NULL, pinned INTEGER NOT NULL,
    created_at TEXT NOT NULL, updated_at TEXT NOT NULL
);
CREATE TABLE todo_projects (
    project_id INTEGER PRIMARY KEY, owner_email TEXT NOT NULL, name TEXT NOT NULL
);
CREATE TABLE todo_tasks (
    task_id INTEGER PRIMARY KEY, project_id INTEGER NOT NULL, title TEXT NOT NULL,
    due_date TEXT NOT NULL, priority INTEGER NOT NULL, completed INTEGER NOT NULL,
    completed_at TEXT
);
CREATE TABLE files_files (
    file_id INTEGER PRIMARY KEY, owner_email TEXT NOT NULL, path TEXT NOT NULL,
    content TEXT NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL,
    UNIQUE (owner_email, path)
);
"""
"""Every table of a world."""

PRIVATE_TABLES = frozenset({"meta", "accounts"})
"""Tables of the runtime's private state (never diffed, never shown)."""


def connect(path: str) -> sqlite3.Connection:
    """Open a world's database (rows as :class:`sqlite3.Row`; the rollback journal, so the
    file alone is the state once a transaction is committed).

    Raises:
        sqlite3.Error: the file cannot be opened.
    """
    db = sqlite3.connect(path, isolation_level="DEFERRED", check_same_thread=False)
    db.row_factory = sqlite3.Row
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("PRAGMA synchronous=OFF")
    return db


def create_schema(db: sqlite3.Connection) -> None:
    """Create every table in an empty database."""
    db.executescript(SCHEMA)
