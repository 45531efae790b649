"""The file-organisation workload (paper sections 6.2 and B.2: 16 files, three directory levels).

Writes ``files`` text files into a tree ``levels`` directories deep below ``inbox/``, with unique
file names, sizes spread over the bands the size task uses (boundary values included), and
modification times on a handful of dates set with ``os.utime`` (Linux cannot set creation times).
Times of day lie between 08:00 and 20:00 UTC, so a file's date is the same in every time zone
from UTC-8 to UTC+4. Everything is drawn from the given ``random.Random``.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import random
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "INBOX",
    "LARGE_MIN",
    "MEDIUM_MIN",
    "SIZE_BANDS",
    "GeneratedFile",
    "make_file_tree",
    "size_band",
]

INBOX = "inbox"
"""The folder the files are generated under."""
MEDIUM_MIN = 1024
"""Smallest size (bytes) of a ``medium`` file."""
LARGE_MIN = 8192
"""Smallest size (bytes) of a ``large`` file."""
SIZE_BANDS = ("small", "medium", "large")
"""Size categories, smallest first."""

_DIR_NAMES = (
    "archive", "drafts", "reports", "misc", "notes", "projects", "old", "shared", "scans",
    "exports", "personal", "work", "review", "backup",
)  # fmt: skip
_STEMS = (
    "budget", "minutes", "summary", "invoice", "plan", "report", "letter", "checklist", "agenda",
    "log", "inventory", "proposal", "memo", "schedule", "survey", "contract", "receipt", "notes",
)  # fmt: skip
_EXTENSIONS = (".txt", ".md", ".csv", ".log")
_WORDS = (
    "alpha", "delta", "review", "status", "pending", "archive", "quarter", "figure", "update",
    "draft", "final", "north", "south", "river", "ledger", "entry", "total", "memo", "item",
)  # fmt: skip
_FIRST_DAY = dt.date(2023, 1, 1)
_DAYS = 900


@dataclass(frozen=True)
class GeneratedFile:
    """One generated file.

    Attributes:
        path: relative to the workspace, ``/``-separated (``inbox/a/b/report_3.txt``).
        size: bytes.
        mtime: modification time, whole seconds since the epoch (UTC).
        sha256: hex digest of the content.
    """

    path: str
    size: int
    mtime: int
    sha256: str

    @property
    def name(self) -> str:
        """The file name (unique across the tree)."""
        return self.path.rsplit("/", 1)[-1]

    @property
    def date(self) -> str:
        """The modification date, ``YYYY-MM-DD`` in UTC."""
        return dt.datetime.fromtimestamp(self.mtime, tz=dt.UTC).date().isoformat()


def size_band(size: int) -> str:
    """The size band of ``size`` bytes.

    Returns:
        ``small`` below :data:`MEDIUM_MIN`, ``large`` from :data:`LARGE_MIN`, else ``medium``.
    """
    if size < MEDIUM_MIN:
        return "small"
    if size < LARGE_MIN:
        return "medium"
    return "large"


def make_file_tree(
    rng: random.Random, workspace: Path, files: int, levels: int
) -> list[GeneratedFile]:
    """Write the workload into ``workspace`` and return what was written.

    Args:
        rng: the only source of randomness.
        workspace: an existing directory.
        files: number of files (at least 1); every size band is used when ``files`` >= 3.
        levels: directory depth below ``inbox/`` (at least 1); some file sits at the deepest level.

    Returns:
        The files, sorted by path.

    Raises:
        ValueError: ``files`` or ``levels`` below 1.
        OSError: the files cannot be written.
    """
    if files < 1 or levels < 1:
        raise ValueError(f"need files >= 1 and levels >= 1, got files={files}, levels={levels}")
    dirs = _make_dirs(rng, levels)
    deepest = [d for d in dirs if d.count("/") == levels]
    dates = _pick_dates(rng, max(2, min(6, files // 3)))
    names = _unique_names(rng, files)
    bands = [SIZE_BANDS[i % 3] for i in range(files)]
    rng.shuffle(bands)

    out: list[GeneratedFile] = []
    for i, (name, band) in enumerate(zip(names, bands, strict=True)):
        folder = rng.choice(deepest) if i == 0 else rng.choice(dirs)
        size = _pick_size(rng, band)
        content = _content(rng, size)
        date = dates[i % len(dates)] if i < len(dates) else rng.choice(dates)
        moment = dt.datetime.combine(date, dt.time(rng.randint(8, 19), rng.randint(0, 59)))
        mtime = int(moment.replace(tzinfo=dt.UTC).timestamp()) + rng.randint(0, 59)
        rel = f"{folder}/{name}"
        target = workspace / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        os.utime(target, (mtime, mtime))
        out.append(GeneratedFile(rel, size, mtime, hashlib.sha256(content).hexdigest()))
    for d in dirs:  # empty directories exist too
        (workspace / d).mkdir(parents=True, exist_ok=True)
    return sorted(out, key=lambda f: f.path)


def _make_dirs(rng: random.Random, levels: int) -> list[str]:
    """``inbox`` and a tree below it: every level has one or two directories per parent."""
    dirs = [INBOX]
    frontier = [INBOX]
    for _ in range(levels):
        nxt: list[str] = []
        for parent in frontier:
            used = set(parent.split("/"))
            choices = [n for n in _DIR_NAMES if n not in used]
            for name in rng.sample(choices, rng.randint(1, 2)):
                nxt.append(f"{parent}/{name}")
        frontier = nxt[:4]  # keep the tree small
        dirs.extend(nxt)
    return dirs


def _pick_dates(rng: random.Random, n: int) -> list[dt.date]:
    offsets = rng.sample(range(_DAYS), n)
    return [_FIRST_DAY + dt.timedelta(days=o) for o in offsets]


def _unique_names(rng: random.Random, n: int) -> list[str]:
    names: list[str] = []
    seen: set[str] = set()
    while len(names) < n:
        name = f"{rng.choice(_STEMS)}_{rng.randint(1, 999)}{rng.choice(_EXTENSIONS)}"
        if name not in seen:
            seen.add(name)
            names.append(name)
    return names


def _pick_size(rng: random.Random, band: str) -> int:
    if band == "small":
        return rng.choice((MEDIUM_MIN - 1, rng.randint(40, MEDIUM_MIN - 1)))
    if band == "medium":
        return rng.choice((MEDIUM_MIN, LARGE_MIN - 1, rng.randint(MEDIUM_MIN, LARGE_MIN - 1)))
    return rng.choice((LARGE_MIN, rng.randint(LARGE_MIN, 3 * LARGE_MIN)))


def _content(rng: random.Random, size: int) -> bytes:
    """ASCII lines of words, exactly ``size`` bytes, ending with a newline."""
    parts: list[str] = []
    length = 0
    while length < size:
        line = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 10))) + "\n"
        parts.append(line)
        length += len(line)
    text = "".join(parts)[: size - 1] + "\n"
    return text.encode("ascii")
