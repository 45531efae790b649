"""Test support for the file-context, folder-structure and papers task tests.

Solves a task in a real workspace: the generator writes the initial state, the real npm MCP
filesystem server is started on it, and the reference solution runs through that server. The
solved workspace is then copied for each wrong-output test, which edits the copy on disk.
"""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from controlscope.envs.base import AnswerKey, Check
from controlscope.envs.filesystem.registry import REGISTRY, FsTaskSpec
from controlscope.envs.filesystem.testing import run_reference


def solve(spec: FsTaskSpec, seed: int, workspace: Path) -> tuple[AnswerKey, int]:
    """Solve ``spec`` (default params) with ``seed`` in ``workspace`` through the real server,
    with :func:`~controlscope.envs.filesystem.testing.run_reference`; assert its verdict passes.

    Returns:
        The answer key (regenerated from the same seed in a scratch directory) and the number
        of primitive calls the reference made.
    """
    calls: list[tuple[str, dict[str, Any]]] = []
    verdict = run_reference(spec, seed, workspace=workspace, calls=calls)
    assert verdict.success, [c for c in verdict.checks if not c.passed]
    scratch = workspace.parent / (workspace.name + ".key")
    scratch.mkdir()
    key = spec.generate(random.Random(seed), scratch, dict(spec.default_params))
    shutil.rmtree(scratch)
    return key, len(calls)


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every entry below ``root``: files with their bytes, directories as ``None``."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def failed(checks: list[Check]) -> dict[str, str]:
    """The failed checks as ``name -> reason``."""
    return {c.name: c.reason for c in checks if not c.passed}


class Solved:
    """Solved workspaces per task id, computed once per test module and copied per test."""

    def __init__(self, base: Path) -> None:
        self._base = base
        self._done: dict[str, tuple[Path, AnswerKey, int]] = {}

    def get(self, task_id: str) -> tuple[Path, AnswerKey, int]:
        """``(workspace, answer_key, calls)`` of the solved template for ``task_id`` (seed 0)."""
        if task_id not in self._done:
            ws = self._base / task_id.replace("/", "__")
            ws.mkdir()
            key, calls = solve(REGISTRY[task_id], 0, ws)
            self._done[task_id] = (ws, key, calls)
        return self._done[task_id]

    def copy(self, task_id: str, dest: Path) -> tuple[Path, AnswerKey]:
        """A fresh copy of the solved workspace of ``task_id`` under ``dest``."""
        src, key, _ = self.get(task_id)
        ws = dest / "ws"
        shutil.copytree(src, ws)
        return ws, key


Mutation = Callable[[Path, AnswerKey], None]


def assert_fails(
    task_id: str, solved: Solved, tmp_path: Path, mutate: Mutation, check: str, words: str
) -> None:
    """Apply ``mutate`` to a solved copy and assert that check ``check`` fails with a reason
    containing ``words``, while the untouched solved copy passes."""
    ws, key = solved.copy(task_id, tmp_path)
    spec = REGISTRY[task_id]
    assert not failed(spec.verify(ws, key)), "the solved copy must pass before the mutation"
    mutate(ws, key)
    bad = failed(spec.verify(ws, key))
    assert check in bad, f"expected {check!r} to fail; failed: {bad}"
    assert words in bad[check], f"reason {bad[check]!r} lacks {words!r}"


def assert_deterministic(task_id: str, tmp_path: Path) -> None:
    """Same seed -> same files and answer key; another seed -> other files."""
    spec = REGISTRY[task_id]
    trees = []
    keys = []
    for i, seed in enumerate((7, 7, 8)):
        ws = tmp_path / f"gen{i}"
        ws.mkdir()
        keys.append(spec.generate(random.Random(seed), ws, dict(spec.default_params)))
        trees.append(snapshot(ws))
    assert trees[0] == trees[1]
    assert keys[0] == keys[1]
    assert trees[0] != trees[2]
    assert trees[0], "the generator wrote nothing"


def _havoc_empty(ws: Path) -> None:
    for child in ws.iterdir():
        if child.is_dir():
            shutil.rmtree(child)
        else:
            child.unlink()


def _havoc_files_to_dirs(ws: Path) -> None:
    for path in sorted(ws.rglob("*"), reverse=True):
        if path.is_file():
            path.unlink()
            path.mkdir()


def _havoc_binary(ws: Path) -> None:
    for path in ws.rglob("*"):
        if path.is_file():
            path.write_bytes(b"\xff\xfe\x00\x81 not text")


def _havoc_dirs_to_files(ws: Path) -> None:
    for path in sorted(ws.iterdir()):
        if path.is_dir():
            shutil.rmtree(path)
            path.write_text("a file where a directory was\n")


HAVOC = (_havoc_empty, _havoc_files_to_dirs, _havoc_binary, _havoc_dirs_to_files)


def assert_verifier_never_raises(task_id: str, solved: Solved, tmp_path: Path) -> None:
    """Wreck a solved copy in several ways; the verifier must return failing checks, not raise."""
    spec = REGISTRY[task_id]
    for havoc in HAVOC:
        ws, key = solved.copy(task_id, tmp_path / havoc.__name__)
        before = snapshot(ws)
        havoc(ws)
        checks = spec.verify(ws, key)
        assert all(c.reason for c in checks)
        if snapshot(ws) != before:
            assert failed(checks), f"{havoc.__name__}: a wrecked workspace must fail"
