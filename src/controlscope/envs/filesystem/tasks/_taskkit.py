"""Small helpers shared by the filesystem task modules.

Three parts, kept apart on purpose:

* tool side (reference solutions): everything goes through a
  :data:`~controlscope.envs.filesystem.registry.ToolCaller`, the same primitive calls an agent
  makes; the workspace root is learnt from ``list_allowed_directories``.
* verifier side: reads the terminal workspace from disk and turns every problem into a failed
  :class:`~controlscope.envs._base.Check` with a reason; nothing here raises on bad agent output.
* generator side: writes the initial workspace and reads generator parameters.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from controlscope.core import Check, TaskError
from controlscope.envs.filesystem.registry import ToolCaller

T = TypeVar("T")

# ---------------------------------------------------------------------------------------------
# Tool side (reference solutions)
# ---------------------------------------------------------------------------------------------


def workspace_root(call: ToolCaller) -> str:
    """The workspace root as the server reports it (its first allowed directory).

    Args:
        call: the tool caller.

    Returns:
        An absolute path string without a trailing slash.

    Raises:
        RuntimeError: when the server lists no allowed directory.
    """
    text = call("list_allowed_directories").text
    dirs = [ln.strip() for ln in text.splitlines()[1:] if ln.strip()]
    if not dirs:
        raise RuntimeError(f"the server reports no allowed directory: {text!r}")
    return dirs[0].rstrip("/")


def join(root: str, *parts: str) -> str:
    """Join a server-side absolute ``root`` with relative ``parts`` using ``/``."""
    return "/".join([root.rstrip("/"), *(p.strip("/") for p in parts if p)])


def read_text(call: ToolCaller, path: str) -> str:
    """The text of the file at ``path`` (one ``read_text_file`` call)."""
    return call("read_text_file", path=path).text


def read_many(call: ToolCaller, paths: list[str], batch: int = 50) -> dict[str, str]:
    """The texts of several files, ``batch`` paths per ``read_multiple_files`` call.

    Args:
        call: the tool caller.
        paths: absolute server-side paths.
        batch: paths per call.

    Returns:
        ``path -> text``.

    Raises:
        RuntimeError: when the server reports an error for one of the files or its answer cannot
            be split per file (a file whose text contains a line ``---``).
    """
    texts: dict[str, str] = {}
    for start in range(0, len(paths), batch):
        chunk = paths[start : start + batch]
        parts = call("read_multiple_files", paths=chunk).text.split("\n---\n")
        if len(parts) != len(chunk):
            raise RuntimeError(f"read_multiple_files returned {len(parts)} parts for {len(chunk)}")
        for path, part in zip(chunk, parts, strict=True):
            if not part.startswith(path + ":\n"):
                raise RuntimeError(f"cannot read {path}: {part[:200]}")
            texts[path] = part[len(path) + 2 :].removesuffix("\n")
    return texts


def list_entries(call: ToolCaller, path: str) -> list[tuple[bool, str]]:
    """The entries of directory ``path`` as ``(is_dir, name)`` (one ``list_directory`` call)."""
    entries: list[tuple[bool, str]] = []
    for line in call("list_directory", path=path).text.splitlines():
        if line.startswith("[DIR] "):
            entries.append((True, line[len("[DIR] ") :]))
        elif line.startswith("[FILE] "):
            entries.append((False, line[len("[FILE] ") :]))
    return sorted(entries, key=lambda e: e[1])


def tree_files(call: ToolCaller, path: str) -> list[str]:
    """All files below directory ``path``, as sorted paths relative to it (one ``directory_tree``
    call)."""
    tree: list[dict[str, Any]] = json.loads(call("directory_tree", path=path).text)
    out: list[str] = []

    def walk(nodes: list[dict[str, Any]], prefix: str) -> None:
        for node in nodes:
            rel = f"{prefix}{node['name']}"
            if node.get("type") == "directory":
                walk(node.get("children", []), rel + "/")
            else:
                out.append(rel)

    walk(tree, "")
    return sorted(out)


def write_text(call: ToolCaller, path: str, content: str) -> None:
    """Write ``content`` to ``path`` (one ``write_file`` call; the parent must exist)."""
    call("write_file", path=path, content=content)


def write_lines(call: ToolCaller, path: str, lines: list[str]) -> None:
    """Write ``lines`` to ``path``, each ended by a newline (one ``write_file`` call; the parent
    must exist). Used for the CSV outputs of the references."""
    write_text(call, path, "\n".join(lines) + "\n")


def make_dir(call: ToolCaller, path: str) -> None:
    """Create directory ``path`` with its parents (one ``create_directory`` call)."""
    call("create_directory", path=path)


def move(call: ToolCaller, source: str, destination: str) -> None:
    """Move ``source`` to ``destination`` (one ``move_file`` call; the destination must not
    exist)."""
    call("move_file", source=source, destination=destination)


# ---------------------------------------------------------------------------------------------
# Verifier side
# ---------------------------------------------------------------------------------------------


def ok(name: str, reason: str = "ok") -> Check:
    """A passed check."""
    return Check(name=name, passed=True, reason=reason)


def fail(name: str, reason: str) -> Check:
    """A failed check with its reason."""
    return Check(name=name, passed=False, reason=reason)


def missing_output(rel: str, why: str, file_check: str, dependents: Iterable[str]) -> list[Check]:
    """The checks of a verifier whose output file ``rel`` is unusable (``read_output`` gave
    ``why``): ``file_check`` fails with that reason, each dependent check because ``rel`` is
    missing."""
    return [fail(file_check, why), *(fail(name, f"{rel} is missing") for name in dependents)]


def check_directory(workspace: Path, rel: str, name: str) -> Check:
    """Check ``name``: ``workspace/rel`` is a directory (the reason names ``rel/``)."""
    if (workspace / rel).is_dir():
        return ok(name, f"{rel}/ exists")
    return fail(name, f"{rel}/ does not exist or is not a directory")


def read_output(workspace: Path, rel: str) -> tuple[str | None, str]:
    """Read an output file the agent had to write.

    Args:
        workspace: the workspace root on disk.
        rel: the file's path relative to the workspace.

    Returns:
        ``(text, "")`` with newlines normalised to ``\\n``, or ``(None, reason)`` when the file is
        missing, is not a regular file, or is not UTF-8 text.
    """
    path = workspace / rel
    try:
        if not path.exists():
            return None, f"{rel} does not exist"
        if not path.is_file():
            return None, f"{rel} is not a regular file"
        data = path.read_bytes()
    except OSError as exc:
        return None, f"{rel} cannot be read: {exc}"
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None, f"{rel} is not UTF-8 text"
    return text.replace("\r\n", "\n").replace("\r", "\n"), ""


def content_lines(text: str) -> list[str]:
    """The lines of ``text`` with trailing whitespace removed and blank lines dropped."""
    return [ln.rstrip() for ln in text.split("\n") if ln.strip()]


def parse_csv(text: str) -> list[list[str]]:
    """Rows of a CSV text, cells stripped, blank rows dropped (never raises on odd quoting)."""
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error:
        rows = [ln.split(",") for ln in text.split("\n")]
    return [[c.strip() for c in row] for row in rows if any(c.strip() for c in row)]


def files_under(workspace: Path, rel_dir: str) -> set[str]:
    """Files below ``workspace/rel_dir`` as paths relative to the workspace (empty when absent)."""
    base = workspace / rel_dir
    if not base.is_dir():
        return set()
    return {p.relative_to(workspace).as_posix() for p in base.rglob("*") if p.is_file()}


def check_placement(
    workspace: Path,
    expected: Mapping[str, str],
    *,
    name: str,
    limit: int = 5,
) -> Check:
    """Check that every file of ``expected`` (relative path -> content) is where it should be,
    with its original content.

    Returns:
        One check; its reason names up to ``limit`` misplaced or altered files.
    """
    problems: list[str] = []
    for rel, content in sorted(expected.items()):
        path = workspace / rel
        try:
            if not path.is_file():
                problems.append(f"{rel} is missing")
            elif path.read_bytes() != content.encode("utf-8"):
                problems.append(f"{rel} has changed content")
        except OSError as exc:
            problems.append(f"{rel} cannot be read: {exc}")
    if problems:
        more = f" (and {len(problems) - limit} more)" if len(problems) > limit else ""
        return fail(name, "; ".join(problems[:limit]) + more)
    return ok(name, f"all {len(expected)} files in place with their content")


def describe(items: Iterable[str], limit: int = 5) -> str:
    """A short comma-separated listing of ``items`` (at most ``limit``, then a count)."""
    seq = sorted(items)
    head = ", ".join(seq[:limit])
    return head + (f" (and {len(seq) - limit} more)" if len(seq) > limit else "")


# ---------------------------------------------------------------------------------------------
# Generator side
# ---------------------------------------------------------------------------------------------


def put(workspace: Path, rel: str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``workspace/rel``, creating parent directories.

    Raises:
        TaskError: when the file cannot be written.
    """
    path = workspace / rel
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise TaskError(f"cannot write {rel} in the workspace: {exc}") from exc


def distinct(count: int, draw: Callable[[], T]) -> list[T]:
    """``count`` distinct values of ``draw()``, in the order first drawn (duplicates are drawn
    again, so the random draws made depend only on the values drawn).

    Args:
        count: how many values; ``draw`` must be able to produce that many distinct ones.
        draw: makes one value (typically from the generator's seeded ``random.Random``).
    """
    out: list[T] = []
    while len(out) < count:
        value = draw()
        if value not in out:
            out.append(value)
    return out


def int_param(params: Mapping[str, Any], key: str, default: int, low: int, high: int) -> int:
    """Read an integer generator parameter and check its range.

    Raises:
        TaskError: when the value is not an integer in ``[low, high]``.
    """
    value = params.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int):
        raise TaskError(f"parameter {key!r} must be an integer, got {value!r}")
    if not low <= value <= high:
        raise TaskError(f"parameter {key!r} must be between {low} and {high}, got {value}")
    return value


def range_checker(
    bounds: Mapping[str, tuple[int, int]], defaults: Mapping[str, int]
) -> Callable[[Mapping[str, Any]], None]:
    """A ``check_params`` function for integer parameters with inclusive ``bounds``.

    Unknown parameter names are rejected with :class:`TaskError`.
    """

    def check(params: Mapping[str, Any]) -> None:
        unknown = sorted(set(params) - set(bounds))
        if unknown:
            raise TaskError(f"unknown parameter(s) {unknown}; known: {sorted(bounds)}")
        for key, (low, high) in bounds.items():
            int_param(params, key, defaults[key], low, high)

    return check
