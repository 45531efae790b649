"""Tests of the folder-structure tasks: references through the real server, wrong outputs,
seeds."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from _fs_task_support import (
    Solved,
    SolvedTaskTests,
    assert_passes_on_seed,
    failed,
    wrong_outputs_test,
)
from controlscope.core import AnswerKey
from controlscope.envs.filesystem.registry import REGISTRY
from controlscope.envs.filesystem.tasks import folder_structure

ANALYSIS = "folder_structure/structure_analysis"
MIRROR = "folder_structure/structure_mirror"
TASKS = [ANALYSIS, MIRROR]


@pytest.fixture(scope="module")
def solved(tmp_path_factory: pytest.TempPathFactory) -> Solved:
    return Solved(tmp_path_factory.mktemp("solved"))


class TestCommon(SolvedTaskTests):
    """The shared tests of :class:`SolvedTaskTests`, on the folder-structure tasks."""

    TASKS = TASKS
    MAX_CALLS = 60


@pytest.mark.parametrize("task_id", TASKS)
@pytest.mark.parametrize("seed", [5, 12])
def test_reference_passes_on_other_seeds(task_id: str, seed: int, tmp_path: Path) -> None:
    assert_passes_on_seed(task_id, seed, tmp_path)


def test_python_is_restricted() -> None:
    for task_id in TASKS:
        spec = REGISTRY[task_id]
        assert spec.python_allowed is False
        assert "Python" in spec.instruction
        assert spec.template == task_id


# --- structure_analysis ---------------------------------------------------------------------


def test_analysis_key_matches_disk(tmp_path: Path) -> None:
    """The expected report is recomputed from the generated tree on disk, independently."""
    spec = REGISTRY[ANALYSIS]
    for seed in range(6):
        ws = tmp_path / str(seed)
        ws.mkdir()
        expected = spec.generate(random.Random(seed), ws, {})["expected"]
        base = ws / "project"
        files = [p for p in base.rglob("*") if p.is_file()]
        dirs = [p for p in base.rglob("*") if p.is_dir()]
        sizes = {p.relative_to(base).as_posix(): p.stat().st_size for p in files}
        assert expected["total_files"] == str(len(files))
        assert expected["total_directories"] == str(len(dirs))
        depth = max(len(p.relative_to(base).parts) for p in [*files, *dirs])
        assert expected["max_depth"] == str(depth)
        assert expected["total_size_bytes"] == str(sum(sizes.values()))
        assert expected["largest_file"] == max(sizes, key=sizes.__getitem__)
        assert len(set(sizes.values())) == len(sizes), "the largest file is unambiguous"
        assert expected["empty_directories"] == str(sum(1 for d in dirs if not any(d.iterdir())))
        assert int(expected["empty_directories"]) >= 1
        assert all(s < 1024 for s in sizes.values()), "list_directory_with_sizes shows bytes"


def _report(ws: Path) -> Path:
    return ws / "structure_report.txt"


def _analysis_missing(ws: Path, key: AnswerKey) -> None:
    _report(ws).unlink()


def _analysis_wrong_size(ws: Path, key: AnswerKey) -> None:
    total = key["expected"]["total_size_bytes"]
    text = _report(ws).read_text()
    _report(ws).write_text(
        text.replace(f"total_size_bytes: {total}", f"total_size_bytes: {total}1")
    )


def _analysis_drop_depth(ws: Path, key: AnswerKey) -> None:
    lines = _report(ws).read_text().splitlines()
    _report(ws).write_text("\n".join(ln for ln in lines if not ln.startswith("max_depth")))


def _analysis_touch_project(ws: Path, key: AnswerKey) -> None:
    target = sorted(key["files"])[0]
    (ws / target).write_text("overwritten\n")


test_analysis_wrong_outputs = wrong_outputs_test(
    ANALYSIS,
    [
        (_analysis_missing, "report_file", "does not exist"),
        (_analysis_missing, "total_files", "missing"),
        (_analysis_wrong_size, "total_size_bytes", "expected"),
        (_analysis_drop_depth, "max_depth", "no `max_depth:` line"),
        (_analysis_drop_depth, "report_file", "max_depth"),
        (_analysis_touch_project, "project_unchanged", "changed content"),
    ],
)


def test_analysis_accepts_light_formatting(solved: Solved, tmp_path: Path) -> None:
    ws, key = solved.copy(ANALYSIS, tmp_path)
    exp = key["expected"]
    total = int(exp["total_size_bytes"])
    text = "\n".join(
        [
            "# Structure report",
            f"- `total_files`: {exp['total_files']}",
            f"TOTAL_DIRECTORIES = {exp['total_directories']}",
            f"max_depth: {exp['max_depth']}",
            f"total_size_bytes: {total:,} bytes",
            f"largest_file: project/{exp['largest_file']}",
            f"empty_directories: {exp['empty_directories']}",
        ]
    )
    _report(ws).write_text(text)
    assert not failed(REGISTRY[ANALYSIS].verify(ws, key))


# --- structure_mirror -----------------------------------------------------------------------


def test_mirror_source_has_skipped_and_empty_directories(solved: Solved) -> None:
    ws, key, _ = solved.get(MIRROR)
    skipped = [d for d in key["source_dirs"] if d.endswith(f"/{folder_structure.SKIPPED}")]
    assert len(skipped) == 2
    assert all(any((ws / d).iterdir()) for d in skipped), "skipped directories hold files"
    empty = [d for d in key["source_dirs"] if not any((ws / d).iterdir())]
    assert empty, "some directories are empty and must still be mirrored"
    assert all(f"source/{d}" in key["source_dirs"] for d in key["dirs"])


def _mirror_drop_empty_dir(ws: Path, key: AnswerKey) -> None:
    empty = next(d for d in key["source_dirs"] if not any((ws / d).iterdir()))
    (ws / "mirror" / empty.removeprefix("source/")).rmdir()


def _mirror_fill_file(ws: Path, key: AnswerKey) -> None:
    rel = key["files"][0]
    (ws / "mirror" / rel).write_text("copied content\n")


def _mirror_copy_cache(ws: Path, key: AnswerKey) -> None:
    cache = next(d for d in key["source_dirs"] if d.endswith("/cache"))
    (ws / "mirror" / cache.removeprefix("source/")).mkdir(parents=True)


def _mirror_extra_file(ws: Path, key: AnswerKey) -> None:
    (ws / "mirror" / "NOTES.txt").write_text("")


def _mirror_delete_source_file(ws: Path, key: AnswerKey) -> None:
    (ws / sorted(key["source_files"])[0]).unlink()


def _mirror_missing_file(ws: Path, key: AnswerKey) -> None:
    (ws / "mirror" / key["files"][-1]).unlink()


test_mirror_wrong_outputs = wrong_outputs_test(
    MIRROR,
    [
        (_mirror_drop_empty_dir, "directories_mirrored", "missing directories"),
        (_mirror_missing_file, "files_mirrored", "missing files"),
        (_mirror_fill_file, "files_empty", "files with content"),
        (_mirror_copy_cache, "cache_skipped", "were mirrored"),
        (_mirror_extra_file, "no_extra_entries", "NOTES.txt"),
        (_mirror_delete_source_file, "source_unchanged", "is missing"),
    ],
)


def test_mirror_missing_entirely(solved: Solved, tmp_path: Path) -> None:
    ws, key = solved.copy(MIRROR, tmp_path)
    (ws / "mirror").rename(ws / "elsewhere")
    bad = failed(REGISTRY[MIRROR].verify(ws, key))
    assert "does not exist" in bad["mirror_directory"]
    assert {"directories_mirrored", "files_mirrored"} <= set(bad)


def test_mirror_as_file_does_not_crash(solved: Solved, tmp_path: Path) -> None:
    ws, key = solved.copy(MIRROR, tmp_path)
    (ws / "mirror").rename(ws / "elsewhere")
    (ws / "mirror").write_text("not a directory")
    assert "mirror_directory" in failed(REGISTRY[MIRROR].verify(ws, key))
