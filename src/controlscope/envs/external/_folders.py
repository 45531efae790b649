"""MCPMark's filesystem task folders: one read, all found under a checkout, their states.

MCPMark's public layout (``tasks/filesystem/<suite>/<category>/<task>/``): ``description.md``
(the instruction), ``meta.json`` (``task_id``, ``category_id``, ``difficulty`` and
``meta_data.stateUrl``, the initial state's archive) and ``verify.py`` (run with
``FILESYSTEM_TEST_DIR`` set to the final workspace; exit status 0 is success). An initial state
is a directory named after its archive (``desktop`` for ``desktop.zip``; without a URL, the
category), MCPMark's ``test_environments/<name>`` or the archive unpacked anywhere.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from controlscope.core import TaskError, decode_json, name_problem
from controlscope.envs.external._files import (
    MAX_FOLDER_BYTES,
    MAX_FOLDER_ENTRIES,
    broad_folder,
    check_tree,
    file_hashes_of,
    small_text,
)

__all__ = [
    "MARKERS",
    "STATES_DIR",
    "McpmarkFolder",
    "OtherService",
    "default_state",
    "find_folders",
    "is_task_folder",
    "read_folder",
]

MARKERS = ("description.md", "meta.json", "verify.py")
"""The files of a task folder; a folder holding any of them is taken for one."""

STATES_DIR = "test_environments"
"""Where an MCPMark checkout keeps its unpacked initial states, by name."""

#: Folders never searched for tasks.
_SKIPPED = {STATES_DIR, "node_modules", "__pycache__", "site-packages"}
#: How deep below the root task folders are looked for, and how many folders at most.
_MAX_DEPTH = 8
_MAX_FOLDERS = 20_000


@dataclass(frozen=True)
class McpmarkFolder:
    """One MCPMark task folder, read.

    Attributes:
        path: the folder (resolved).
        task_id: ``meta.json``'s ``task_id`` (else the folder's name).
        category: ``meta.json``'s ``category_id`` (else the parent folder's name).
        instruction: ``description.md``, stripped.
        difficulty: ``meta.json``'s ``difficulty`` (empty when absent).
        state: the name of the initial state it needs.
        data_hashes: SHA-256 of each of its files, by relative path.
        meta: ``meta.json`` as read (empty when absent).
    """

    path: Path
    task_id: str
    category: str
    instruction: str
    difficulty: str
    state: str
    data_hashes: dict[str, str]
    meta: dict[str, Any] = field(default_factory=dict)


class OtherService(TaskError):
    """A task folder of another MCPMark service (``meta.json``'s ``mcp`` names no
    ``filesystem``)."""


def is_task_folder(path: Path) -> bool:
    """Whether ``path`` holds one of :data:`MARKERS` (a task folder, complete or not)."""
    return any((path / name).is_file() for name in MARKERS)


def read_folder(path: Path) -> McpmarkFolder:
    """Read a task folder.

    Raises:
        TaskError: no such folder, ``description.md`` or ``verify.py`` missing or a symlink out
            of the folder, an empty or unreadable instruction, a ``meta.json`` that is not a
            JSON object, a name that cannot be part of a task id.
    """
    folder = Path(path).expanduser()
    if not folder.is_dir():
        raise TaskError(f"no MCPMark task folder at {folder}")
    folder = folder.resolve()
    broad = broad_folder(folder)
    if broad is not None:  # its verifier sees it whole
        raise TaskError(f"{folder} is {broad}, not an MCPMark task folder")
    for name in ("description.md", "verify.py"):
        if not (folder / name).is_file():
            raise TaskError(f"{folder} is not an MCPMark task folder: it has no {name}")
    for name in MARKERS:  # read here, or run: a link out would show any file of this machine
        target = (folder / name).resolve()
        if (folder / name).is_symlink() and not target.is_relative_to(folder):
            raise TaskError(f"{folder / name} links out of the task folder (to {target})")
    meta = _meta(folder)
    path = folder / "meta.json"
    services = meta.get("mcp")
    if isinstance(services, list) and services and "filesystem" not in services:
        raise OtherService(f"{folder} is an MCPMark task of {services}, not of the filesystem")
    category = _name(meta, "category_id", folder.parent.name, path)
    task_id = _name(meta, "task_id", folder.name, path)
    state = _state_name(meta, category)
    if name_problem(state) is not None or "/" in state:
        raise TaskError(f"{path}: the state {state!r} is no name of a folder")
    return McpmarkFolder(
        path=folder,
        task_id=task_id,
        category=category,
        instruction=_instruction(folder),
        difficulty=_text_field(meta, "difficulty"),
        state=state,
        data_hashes=_hashes(folder),
        meta=meta,
    )


def _hashes(folder: Path) -> dict[str, str]:
    check_tree(
        folder, "the task folder", max_entries=MAX_FOLDER_ENTRIES, max_bytes=MAX_FOLDER_BYTES
    )
    return file_hashes_of(folder)


def _meta(folder: Path) -> dict[str, Any]:
    path = folder / "meta.json"
    if not os.path.lexists(path):  # anything else there is read, or refused by the reader
        return {}
    try:
        meta = decode_json(small_text(path))
    except json.JSONDecodeError as err:  # nesting too deep, NaN included
        raise TaskError(f"{path} cannot be read as JSON: {err}") from None
    if not isinstance(meta, dict):
        raise TaskError(f"{path} is not a JSON object")
    return meta


def _text_field(meta: dict[str, Any], key: str) -> str:
    value = meta.get(key)
    return value.strip() if isinstance(value, str) else ""


def _name(meta: dict[str, Any], key: str, default: str, path: Path) -> str:
    """``meta[key]`` (else ``default``) when it is one name: it becomes a segment of the
    task's id, which panels use as a folder.

    Raises:
        TaskError: it is ``..``, holds a ``/`` or a character that is not printable...
    """
    value = _text_field(meta, key) or default
    problem = name_problem(value) or ("it holds a /" if "/" in value else None)
    if problem is not None:
        raise TaskError(f"{path}: {key} {value!r} cannot name a task: {problem}")
    return value


def _instruction(folder: Path) -> str:
    path = folder / "description.md"
    text = small_text(path)
    if not text.strip():
        raise TaskError(f"{path} is empty")
    return text.strip()


def _state_name(meta: dict[str, Any], category: str) -> str:
    """The initial state's name: the stem of ``meta_data.stateUrl`` (``.../desktop.zip``), else
    the category (MCPMark's ``test_environments/<category_id>``)."""
    data = meta.get("meta_data")
    url = data.get("stateUrl") if isinstance(data, dict) else None
    if isinstance(url, str) and url.strip():
        name = PurePosixPath(url.strip().split("?")[0]).name
        for suffix in (".zip", ".tar.gz", ".tgz", ".tar"):
            name = name.removesuffix(suffix)
        if name:
            return name
    return category


def default_state(folder: Path, name: str) -> Path | None:
    """The state ``name`` where MCPMark keeps it: ``test_environments/<name>`` in the nearest
    folder above ``folder`` that has one; None when there is none."""
    for parent in folder.parents:
        candidate = parent / STATES_DIR / name
        if candidate.is_dir():
            return candidate.resolve()
        if (parent / STATES_DIR).is_dir():
            return None
    return None


def find_folders(root: Path) -> tuple[dict[str, McpmarkFolder], list[str]]:
    """Every task folder under ``root`` (not following symlinks, at most eight levels down,
    states, hidden and package folders skipped).

    Args:
        root: an MCPMark checkout, its ``tasks`` folder, or any folder of task folders.

    Returns:
        The task folders by id (their path below ``root``, a leading ``tasks/filesystem/``
        left out: ``standard/desktop/music_report``), and one line for each folder that looks
        like a task but cannot be read (a missing ``verify.py``...).
    """
    found: dict[str, McpmarkFolder] = {}
    problems: list[str] = []
    seen = 0
    for current, dirs, _files in os.walk(root):
        here = Path(current)
        depth = len(here.relative_to(root).parts)
        seen += 1
        if seen > _MAX_FOLDERS:
            problems.append(f"{root}: more than {_MAX_FOLDERS} folders; the rest not searched")
            break
        if here != root and is_task_folder(here):
            dirs[:] = []
            task_id = _folder_id(here.relative_to(root))
            try:
                problem = name_problem(task_id)
                if problem is not None:
                    raise TaskError(f"{here} cannot name a task: {problem}")
                found[task_id] = read_folder(here)
            except OtherService:
                pass
            except TaskError as err:
                problems.append(str(err))
            continue
        dirs[:] = sorted(
            d for d in dirs if d not in _SKIPPED and not d.startswith(".") and depth < _MAX_DEPTH
        )
    return dict(sorted(found.items())), problems


def _folder_id(relative: Path) -> str:
    parts = list(relative.parts)
    for prefix in ("tasks", "filesystem"):
        if len(parts) > 1 and parts[0] == prefix:
            parts = parts[1:]
    return "/".join(parts)
