"""Shared test support for the filesystem task tests (``tests/test_fs_<category>.py``).

Solves a task in a real workspace: the generator writes the initial state, the real npm MCP
filesystem server is started on it, and the reference solution runs through that server. The
solved workspace is then altered on disk (or a copy of it is, see :class:`Solved`) and verified
again. The ``assert_*`` helpers hold the checks every task category repeats: the reference
passes through the real server within the paper's 100-call budget (section 4), an untouched or
wrecked workspace fails without the verifier raising, the generator is deterministic per seed
and across processes, and bad parameters are rejected.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import pytest

from controlscope.core import AnswerKey, Check, TaskError
from controlscope.envs.filesystem.registry import REGISTRY, FsTaskSpec
from controlscope.envs.filesystem.testing import run_reference, solve_reference

Calls = list[tuple[str, dict[str, Any]]]


def solve(spec: FsTaskSpec, seed: int, workspace: Path) -> tuple[AnswerKey, int]:
    """Solve ``spec`` (default params) with ``seed`` in ``workspace`` through the real server,
    with :func:`~controlscope.envs.filesystem.testing.run_reference`; assert its verdict passes.

    Returns:
        The answer key (regenerated from the same seed in a scratch directory) and the number
        of primitive calls the reference made.
    """
    calls: Calls = []
    verdict = run_reference(spec, seed, workspace=workspace, calls=calls)
    assert verdict.success, [c for c in verdict.checks if not c.passed]
    scratch = workspace.parent / (workspace.name + ".key")
    scratch.mkdir()
    key = spec.generate(random.Random(seed), scratch, dict(spec.default_params))
    shutil.rmtree(scratch)
    return key, len(calls)


def solve_by_id(task_id: str, seed: int, ws: Path, **params: Any) -> tuple[AnswerKey, int]:
    """Generate the task in a new directory ``ws`` and solve it with its reference through the
    real server (:func:`~controlscope.envs.filesystem.testing.solve_reference`), leaving the
    terminal state there; return the answer key and the number of primitive calls made."""
    ws.mkdir(parents=True)
    calls: Calls = []
    key = solve_reference(REGISTRY[task_id], seed, params, ws, calls=calls)
    return key, len(calls)


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every entry below ``root``: files with their bytes, directories as ``None``."""
    return {
        p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None)
        for p in sorted(root.rglob("*"))
    }


def tree(ws: Path) -> dict[str, bytes]:
    """The files below ``ws`` (relative POSIX path -> bytes); directories are left out."""
    return {p.relative_to(ws).as_posix(): p.read_bytes() for p in ws.rglob("*") if p.is_file()}


def failed(checks: list[Check]) -> dict[str, str]:
    """The failed checks as ``name -> reason``."""
    return {c.name: c.reason for c in checks if not c.passed}


def failing(checks: list[Check]) -> set[str]:
    """The names of the failed checks."""
    return {c.name for c in checks if not c.passed}


def by_name(checks: list[Check]) -> dict[str, Check]:
    """The checks by name."""
    return {c.name: c for c in checks}


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


def wrong_outputs_test(
    task_id: str, cases: Sequence[tuple[Mutation, str, str]]
) -> Callable[..., None]:
    """A test, parametrized by ``cases`` of ``(mutate, check, words)``, that runs
    :func:`assert_fails` for each on a solved copy of ``task_id``; assign it to a module-level
    ``test_*`` name (the test module must define a ``solved`` fixture)."""

    @pytest.mark.parametrize(("mutate", "check", "words"), cases)
    def test(solved: Solved, tmp_path: Path, mutate: Mutation, check: str, words: str) -> None:
        assert_fails(task_id, solved, tmp_path, mutate, check, words)

    return test


def assert_passes_on_seed(task_id: str, seed: int, tmp_path: Path) -> None:
    """The reference solves ``task_id`` with ``seed`` in ``tmp_path`` and the result passes."""
    key, _ = solve(REGISTRY[task_id], seed, tmp_path)
    assert not failed(REGISTRY[task_id].verify(tmp_path, key))


def verify_unsolved(
    task_id: str, seed: int, root: Path, params: Mapping[str, Any] | None = None
) -> tuple[AnswerKey, list[Check]]:
    """Generate ``task_id`` with ``seed`` and ``params`` (default: its default params) in
    ``root`` and verify the untouched workspace; returns the answer key and the checks."""
    spec = REGISTRY[task_id]
    chosen = dict(spec.default_params) if params is None else params
    key = spec.generate(random.Random(seed), root, chosen)
    return key, spec.verify(root, key)


def assert_untouched_fails(task_id: str, seed: int, tmp_path: Path) -> None:
    """The freshly generated (unsolved) workspace fails some check."""
    _, checks = verify_unsolved(task_id, seed, tmp_path)
    assert failed(checks)


GARBAGE: list[bytes | None] = [
    None,  # a directory where the file should be
    b"\xff\xfe\x00\x81 not utf-8",
    b'a,b\n"unterminated,\n,,,\n|||\n1. - plays\nTOTAL\n',
    b"",
]
"""Malformed contents written where an output file belongs (``None``: a directory there)."""


def assert_malformed_outputs_fail(
    task_id: str,
    outputs: Callable[[AnswerKey], Sequence[str]],
    garbage: bytes | None,
    root: Path,
) -> None:
    """Generate ``task_id`` (seed 1) in ``root`` and write ``garbage`` at every output path
    ``outputs(key)`` names; the verifier must fail some check, with a reason for each failure,
    and not raise."""
    spec = REGISTRY[task_id]
    key = spec.generate(random.Random(1), root, dict(spec.default_params))
    for rel in outputs(key):
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if garbage is None:
            target.mkdir()
        else:
            target.write_bytes(garbage)
    checks = spec.verify(root, key)
    assert failing(checks) and all(c.reason for c in checks if not c.passed)


def assert_deterministic(
    task_id: str,
    tmp_path: Path,
    seeds: tuple[int, int, int] = (7, 7, 8),
    view: Callable[[Path], Mapping[str, bytes | None]] = snapshot,
) -> Mapping[str, bytes | None]:
    """Same seed -> same files and answer key; another seed -> other files.

    Args:
        seeds: two equal seeds, then another one.
        view: what of a workspace is compared (default :func:`snapshot`; :func:`tree` for the
            files only).

    Returns:
        The view of the first workspace.
    """
    spec = REGISTRY[task_id]
    trees = []
    keys = []
    for i, seed in enumerate(seeds):
        ws = tmp_path / f"gen{i}"
        ws.mkdir()
        keys.append(spec.generate(random.Random(seed), ws, dict(spec.default_params)))
        trees.append(view(ws))
    assert trees[0] == trees[1]
    assert keys[0] == keys[1]
    assert trees[0] != trees[2]
    assert trees[0], "the generator wrote nothing"
    return trees[0]


_HASH_SCRIPT = """
import hashlib, importlib, json, random, sys, tempfile
from pathlib import Path
from controlscope.envs.filesystem.registry import REGISTRY
for task_id in sys.argv[1:]:
    importlib.import_module("controlscope.envs.filesystem.tasks." + task_id.split("/")[0])
    spec = REGISTRY[task_id]
    with tempfile.TemporaryDirectory() as d:
        key = spec.generate(random.Random(21), Path(d), dict(spec.default_params))
        h = hashlib.sha256(json.dumps(key, sort_keys=True).encode())
        for p in sorted(Path(d).rglob("*")):
            h.update(p.relative_to(d).as_posix().encode())
            h.update(p.read_bytes() if p.is_file() else b"/")
    print(task_id, h.hexdigest())
"""


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


Outputs = Mapping[str, Callable[[AnswerKey], list[str]]]
"""Task id -> the output paths (relative to the workspace) named by an answer key."""


class ReferenceTaskTests:
    """The tests shared by the categories tested on fresh workspaces (desktop, desktop_template,
    legal_document): the reference passes through the real server within the paper's 100-call
    budget (section 4), malformed outputs and an untouched workspace fail without the verifier
    raising, the generator is deterministic per seed and across processes, and bad parameters
    are rejected.

    Subclass it as ``TestCommon`` in a test module and set the class attributes; a test taking
    ``task_id`` runs once per task of :attr:`TASKS`.
    """

    TASKS: ClassVar[Sequence[str]] = ()
    OUTPUTS: ClassVar[Outputs] = {}
    """Task id -> the output paths (relative) of an answer key, to fill with garbage."""
    EDGE_SIZES: ClassVar[Sequence[tuple[str, dict[str, int]]]] = ()
    """``(task id, params)`` at the edges of the parameter ranges; the reference must pass."""
    MIN_FILES: ClassVar[int] = 1
    """The fewest files a default-size workspace holds."""
    OUT_OF_RANGE: ClassVar[object] = 0
    NOT_INTEGER: ClassVar[object] = 2.5

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize ``task_id`` by :attr:`TASKS` and ``large_id, params`` by
        :attr:`EDGE_SIZES`."""
        if "task_id" in metafunc.fixturenames:
            metafunc.parametrize("task_id", self.TASKS)
        if "large_id" in metafunc.fixturenames:
            metafunc.parametrize(("large_id", "params"), self.EDGE_SIZES)

    @pytest.mark.parametrize("garbage", GARBAGE)
    def test_malformed_outputs_fail_without_raising(
        self, task_id: str, garbage: bytes | None, tmp_path: Path
    ) -> None:
        assert_malformed_outputs_fail(task_id, self.OUTPUTS[task_id], garbage, tmp_path)

    @pytest.mark.parametrize("seed", [0, 5])
    def test_reference_passes_through_real_server(self, task_id: str, seed: int) -> None:
        calls: Calls = []
        verdict = run_reference(REGISTRY[task_id], seed, calls=calls)
        assert verdict.success, [c for c in verdict.checks if not c.passed]
        assert calls[0][0] == "list_allowed_directories"  # the reference learns the root
        assert len(calls) < 100  # fits the paper's 100-call budget (section 4)

    def test_reference_passes_at_edge_sizes(self, large_id: str, params: dict[str, int]) -> None:
        calls: Calls = []
        verdict = run_reference(REGISTRY[large_id], 1, params, calls=calls)
        assert verdict.success, [c for c in verdict.checks if not c.passed]
        assert len(calls) < 100

    def test_untouched_workspace_fails(self, task_id: str, tmp_path: Path) -> None:
        assert_untouched_fails(task_id, 3, tmp_path)

    def test_generator_is_deterministic_per_seed(self, task_id: str, tmp_path: Path) -> None:
        files = assert_deterministic(task_id, tmp_path, (4, 4, 9), tree)
        assert self.MIN_FILES <= len(files) <= 60
        assert sum(len(b or b"") for b in files.values()) < 20_000

    def test_generators_are_deterministic_across_processes(self) -> None:
        """String hashing is salted per process; the workspaces must not depend on it."""
        outputs = [
            subprocess.run(
                [sys.executable, "-c", _HASH_SCRIPT, *self.TASKS],
                env={**os.environ, "PYTHONHASHSEED": salt},
                capture_output=True,
                text=True,
                check=True,
            ).stdout
            for salt in ("1", "2")
        ]
        assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == len(self.TASKS)

    def test_bad_params_are_rejected(self, task_id: str) -> None:
        spec = REGISTRY[task_id]
        assert spec.check_params is not None
        spec.check_params(dict(spec.default_params))
        with pytest.raises(TaskError, match="unknown parameter"):
            spec.check_params({"nonsense": 1})
        first = next(iter(spec.default_params))
        with pytest.raises(TaskError, match=first):
            spec.check_params({first: self.OUT_OF_RANGE})
        with pytest.raises(TaskError, match="integer"):
            spec.check_params({first: self.NOT_INTEGER})


class SolvedTaskTests:
    """The tests shared by the categories tested on solved copies (file_context,
    folder_structure, papers): the solved template passes, an untouched or wrecked workspace
    fails without the verifier raising, and the generator is deterministic.

    Subclass it as ``TestCommon`` in a test module that defines a ``solved`` fixture
    (:class:`Solved`, module scope) and set the class attributes; a test taking ``task_id`` runs
    once per task of :attr:`TASKS`.
    """

    TASKS: ClassVar[Sequence[str]] = ()
    MAX_CALLS: ClassVar[int] = 60
    """The most primitive calls the reference may make (it makes at least 3)."""
    MIN_CHECKS: ClassVar[int] = 0
    """The fewest checks the verifier returns."""

    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Parametrize ``task_id`` by :attr:`TASKS`."""
        if "task_id" in metafunc.fixturenames:
            metafunc.parametrize("task_id", self.TASKS)

    def test_reference_passes_through_real_server(self, task_id: str, solved: Solved) -> None:
        ws, key, calls = solved.get(task_id)
        checks = REGISTRY[task_id].verify(ws, key)
        assert len(checks) >= self.MIN_CHECKS
        assert not failed(checks)
        assert 3 <= calls <= self.MAX_CALLS

    def test_untouched_workspace_fails(self, task_id: str, tmp_path: Path) -> None:
        assert_untouched_fails(task_id, 0, tmp_path)

    def test_verifier_never_raises_on_wrecked_workspaces(
        self, task_id: str, solved: Solved, tmp_path: Path
    ) -> None:
        assert_verifier_never_raises(task_id, solved, tmp_path)

    def test_generator_is_deterministic(self, task_id: str, tmp_path: Path) -> None:
        assert_deterministic(task_id, tmp_path)
