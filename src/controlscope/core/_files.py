"""Files a user names, read bounded: one reader for every layer.

A configuration, a task spec, a scripted model's answers, a task's instruction, a recorded run's
log: whatever a user names is opened without blocking and checked on the open descriptor, so a
FIFO is refused instead of waited on, and a device (``/dev/zero``), a directory or a socket is
refused instead of read until memory runs out. A regular file is read up to its kind's ceiling
(one byte more tells that it grew past it), decoded as UTF-8, and parsed by :func:`read_toml` or
:func:`read_json`, which refuse nesting deeper than :data:`MAX_FILE_DEPTH` (the parsers' own
recursion included) with the same one-line error as anything else wrong with the file:
:class:`InputFileError`, a :class:`ValueError` the command line reports as bad input.

Each kind of file has its ceiling: :data:`MAX_CONFIG_BYTES` for a panel's, an experiment's
or a task spec's TOML file and an experiment folder's records, :data:`MAX_SCRIPT_BYTES` for a
scripted model's answers; the others are defined where their files are read (a task's
instruction and ``meta.json``: 1 MiB; a run's ``summary.json``; a panel's manifest and run
records). A trajectory log is read line by line, so its lines are bounded
(``record.MAX_EVENT_BYTES``), not its length.
"""

from __future__ import annotations

import io
import json
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from controlscope.core._bounds import MAX_DATA_DEPTH

MAX_CONFIG_BYTES = 1 << 20
"""The largest configuration read (1 MiB): a panel's, an experiment's or a task spec's TOML
file (a person writes it; it lists tasks and conditions, never data), and an experiment
folder's ``experiment.json``."""

MAX_SCRIPT_BYTES = 64 << 20
"""The largest scripted model file read (64 MiB): its answers, each at most a log line."""

MAX_FILE_DEPTH = MAX_DATA_DEPTH
"""Containers nested in each other that a TOML or JSON file a user names may hold (what a run
accepts from outside: no configuration or script needs more)."""

_KINDS = (
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISSOCK, "a socket"),
)


class InputFileError(ValueError):
    """A file a user named cannot be read as the input it should be: it is not a regular file
    (a FIFO, a device, a directory, a socket), it exceeds its kind's ceiling, it cannot be
    opened, is not UTF-8 text, not TOML or JSON, or nested too deeply. The message is one line
    and names the file."""


def absolute_path(path: str | os.PathLike[str]) -> Path:
    """``path`` made absolute with its links followed (``Path.resolve``); where its links loop,
    made absolute as named (``os.path.abspath``), so that whatever opens it next refuses it in
    one line (``Too many levels of symbolic links``) instead of ``resolve`` raising
    ``RuntimeError`` (Python 3.11 and 3.12) on a path a user named.

    Args:
        path: the path, relative to the current folder or absolute.

    Returns:
        The absolute path.
    """
    try:
        return Path(path).resolve()
    except (RuntimeError, OSError):  # a loop of links
        return Path(os.path.abspath(path))


def open_regular(path: str | os.PathLike[str], max_bytes: int | None = None) -> io.BufferedReader:
    """Open ``path`` for reading if it is a regular file (a link to one is followed).

    Opened with ``O_NONBLOCK`` and checked with ``fstat`` on the open descriptor, so a FIFO in
    its place is refused, never waited on, and nothing can be swapped in between the check and
    the read.

    Args:
        path: the file.
        max_bytes: the most bytes it may hold (None: any size); a reader still reads at most
            ``max_bytes + 1`` to tell that it grew past it.

    Returns:
        The file, open in blocking binary mode.

    Raises:
        OSError: it cannot be opened (``FileNotFoundError``: nothing at ``path``).
        InputFileError: a FIFO, device, directory or socket, or a file over ``max_bytes``.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _KINDS if test(info.st_mode)), "a special file")
            raise InputFileError(f"{path} is not a regular file ({kind}); refusing to read it")
        if max_bytes is not None and info.st_size > max_bytes:
            raise InputFileError(_too_long(path, max_bytes))
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The bytes of ``path`` if it is a regular file of at most ``max_bytes`` (see
    :func:`open_regular`; at most ``max_bytes + 1`` bytes are read, whatever the file does).

    Raises:
        OSError: it cannot be opened (``FileNotFoundError``: nothing at ``path``).
        InputFileError: not a regular file, or longer than ``max_bytes``.
    """
    with open_regular(path, max_bytes) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:  # it grew after it was opened
        raise InputFileError(_too_long(path, max_bytes))
    return data


def read_text(path: str | os.PathLike[str], max_bytes: int) -> str:
    """The UTF-8 text of the regular file ``path``, at most ``max_bytes`` bytes long.

    Raises:
        InputFileError: one line naming the file: it cannot be opened (missing included), is
            not a regular file, is longer than ``max_bytes`` or is not UTF-8 text.
    """
    try:
        data = read_regular(path, max_bytes)
    except OSError as err:
        raise InputFileError(f"{path} cannot be read: {err.strerror or err}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputFileError(
            f"{path} cannot be read as UTF-8 text ({err.reason} at byte {err.start})"
        ) from None


def read_toml(path: str | os.PathLike[str], max_bytes: int = MAX_CONFIG_BYTES) -> dict[str, Any]:
    """A TOML file's table (a panel's, an experiment's or a task spec's configuration).

    Args:
        path: the file.
        max_bytes: its ceiling (default :data:`MAX_CONFIG_BYTES`).

    Returns:
        The table.

    Raises:
        InputFileError: see :func:`read_text`; or ``PATH: not TOML: why``, or nested deeper
            than :data:`MAX_FILE_DEPTH`.
    """
    text = read_text(path, max_bytes)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise InputFileError(f"{path}: not TOML: {err}") from None
    except RecursionError:
        raise InputFileError(_too_deep(path)) from None
    _check_depth(path, data)
    return data


def read_json(path: str | os.PathLike[str], max_bytes: int) -> Any:
    """A JSON file's value (``json.loads``: standard JSON, plus the ``NaN`` and ``Infinity``
    Python writes).

    Args:
        path: the file.
        max_bytes: its ceiling (see the module for each kind's).

    Returns:
        The value.

    Raises:
        InputFileError: see :func:`read_text`; or ``PATH: not JSON: why``, or nested deeper
            than :data:`MAX_FILE_DEPTH`.
    """
    text = read_text(path, max_bytes)
    try:
        data = json.loads(text)
    except RecursionError:
        raise InputFileError(_too_deep(path)) from None
    except ValueError as err:
        raise InputFileError(f"{path}: not JSON: {err}") from None
    _check_depth(path, data)
    return data


def _check_depth(path: str | os.PathLike[str], value: Any) -> None:
    """Refuse ``value`` when it nests more than :data:`MAX_FILE_DEPTH` containers (walked
    without recursion)."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= MAX_FILE_DEPTH:
                raise InputFileError(_too_deep(path))
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


def _too_deep(path: str | os.PathLike[str]) -> str:
    return f"{path}: nested deeper than {MAX_FILE_DEPTH} levels"


def _too_long(path: str | os.PathLike[str], max_bytes: int) -> str:
    return f"{path} is longer than {max_bytes} bytes"
