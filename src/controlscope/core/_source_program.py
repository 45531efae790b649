"""Frozen source programs: a source program read from a file instead of sampled.

The paper holds each task's source programs fixed while the reviewer varies (P1 and P2,
section 5): a source program is sampled once, before any scope comparison. A frozen source
program is such a program written down as a Python file, so one program can be held fixed
across reviewer models, panels and machines. :func:`read_source_program` reads one (bounded,
:func:`~controlscope.core.read_text`) and hashes it; :class:`SourceFile` is what ``run_start``
records of it (its path as given and its SHA-256), so a replay can refuse a program edited
since the recording.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

from controlscope.core._files import InputFileError, read_text

MAX_PROGRAM_BYTES = 1 << 20
"""The ceiling of a frozen source program's file (1 MiB)."""


class SourceFile(BaseModel):
    """The frozen source program a run took its first reply from (recorded in ``run_start``).

    Attributes:
        path: the program's file, as the run was given it (absolute).
        sha256: the SHA-256 of the file's bytes (64 hex digits).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    path: str
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class SourceProgram:
    """A frozen source program, read.

    Attributes:
        code: the program's source, without a leading UTF-8 byte order mark and without
            leading and trailing blank lines.
        file: its file and hash, as ``run_start`` records them.
    """

    code: str
    file: SourceFile


def program_sha256(text: str) -> str:
    """The SHA-256 of a program's text, UTF-8 encoded (the file's bytes), in hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def read_source_program(path: str | os.PathLike[str]) -> SourceProgram:
    """Read a frozen source program (a regular UTF-8 file of at most
    :data:`MAX_PROGRAM_BYTES`).

    Args:
        path: the program's file.

    Returns:
        The program and its recorded form (the path made absolute, the bytes' SHA-256).

    Raises:
        InputFileError: one line naming the file: it cannot be read (missing, not a regular
            file, too long, not UTF-8), it holds no code, or it is not valid Python (nesting
            too deep for the compiler included).
    """
    text = read_text(path, MAX_PROGRAM_BYTES)
    code = text.removeprefix("\ufeff").strip("\n")  # a UTF-8 BOM, as Python itself allows
    if not code.strip():
        raise InputFileError(f"{path}: the source program is empty")
    try:
        compile(code, str(path), "exec", dont_inherit=True)
    except (RecursionError, MemoryError):  # nesting the compiler cannot follow
        raise InputFileError(
            f"{path}: the source program is not valid Python: nested too deeply to compile"
        ) from None
    except (SyntaxError, ValueError) as err:
        where = f" (line {err.lineno})" if isinstance(err, SyntaxError) and err.lineno else ""
        raise InputFileError(
            f"{path}: the source program is not valid Python{where}: {err}"
        ) from None
    absolute = os.path.abspath(os.fspath(path))
    return SourceProgram(code=code, file=SourceFile(path=absolute, sha256=program_sha256(text)))
