"""File-property tasks: generator shape, references through the real server, wrong outputs."""

from __future__ import annotations

import datetime as dt
import os
import random
import shutil
from pathlib import Path
from typing import Any

import pytest

from controlscope.core import Check
from controlscope.envs.filesystem.generators.file_organisation import (
    INBOX,
    LARGE_MIN,
    MEDIUM_MIN,
    make_file_tree,
    size_band,
)
from controlscope.envs.filesystem.tasks.file_property import (
    SIZE_CLASSIFICATION,
    TIME_CLASSIFICATION,
)
from controlscope.envs.filesystem.testing import run_reference, solve_reference
from controlscope.envs.filesystem.workspace import content_hash


def _failed(checks: list[Check]) -> dict[str, str]:
    return {c.name: c.reason for c in checks if not c.passed}


def _solved(spec: Any, tmp_path: Path, seed: int = 4) -> tuple[Path, Any]:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws, solve_reference(spec, seed, None, ws)


# ------------------------------------------------------------------------------ generator


def test_generator_deterministic_with_mtimes(tmp_path: Path) -> None:
    digests = []
    for i, seed in enumerate((5, 5, 6)):
        ws = tmp_path / str(i)
        ws.mkdir()
        make_file_tree(random.Random(seed), ws, 16, 3)
        digests.append(content_hash(ws, historical_mtimes=True))
    assert digests[0] == digests[1] != digests[2]


@pytest.mark.parametrize(("files", "levels"), [(16, 3), (3, 1), (40, 5)])
def test_generator_shape(tmp_path: Path, files: int, levels: int) -> None:
    made = make_file_tree(random.Random(files), tmp_path, files, levels)
    assert len(made) == files
    assert len({f.name for f in made}) == files  # unique names
    on_disk = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file())
    assert on_disk == [f.path for f in made]
    assert max(f.path.count("/") - 1 for f in made) == levels  # the deepest level is used
    assert {size_band(f.size) for f in made} == {"small", "medium", "large"}
    assert len({f.date for f in made}) >= 2
    for f in made:
        stat = (tmp_path / f.path).stat()
        assert stat.st_size == f.size
        assert int(stat.st_mtime) == f.mtime
        assert 8 <= dt.datetime.fromtimestamp(f.mtime, tz=dt.UTC).hour < 20
    with pytest.raises(ValueError):
        make_file_tree(random.Random(0), tmp_path, 0, 2)


def test_size_boundaries_occur(tmp_path: Path) -> None:
    sizes: set[int] = set()
    for seed in range(12):
        ws = tmp_path / str(seed)
        ws.mkdir()
        sizes |= {f.size for f in make_file_tree(random.Random(seed), ws, 12, 2)}
    assert {MEDIUM_MIN - 1, MEDIUM_MIN, LARGE_MIN - 1, LARGE_MIN} <= sizes


# ------------------------------------------------------------------------------ time_classification


def test_time_classification_reference_passes() -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    verdict = run_reference(TIME_CLASSIFICATION, seed=1, calls=calls)
    assert verdict.success, verdict.checks
    assert [c[0] for c in calls].count("move_file") == 16


def test_time_classification_needs_parent_directories(tmp_path: Path) -> None:
    """write_file does not create parents: the 'missing-parent-directory' error of section 6.2."""
    from controlscope.envs.filesystem.server import start_filesystem_server

    with start_filesystem_server(tmp_path) as server:
        result = server.call(
            "write_file", {"path": "by_date/2024-01-01/metadata.csv", "content": "x"}
        )
    assert result.is_error and "ENOENT" in result.text


def test_time_classification_wrong_outputs(tmp_path: Path) -> None:
    ws, key = _solved(TIME_CLASSIFICATION, tmp_path)
    files = key["files"]
    first = files[0]
    placed = ws / "by_date" / first["date"] / first["name"]

    # a copy (new modification time) instead of a move
    data = placed.read_bytes()
    placed.unlink()
    placed.write_bytes(data)
    failed = _failed(TIME_CLASSIFICATION.verify(ws, key))
    assert set(failed) == {"mtimes"} and first["name"] in failed["mtimes"]
    os.utime(placed, (first["mtime"], first["mtime"]))
    assert TIME_CLASSIFICATION.verify(ws, key) and not _failed(TIME_CLASSIFICATION.verify(ws, key))

    # a file in the wrong date folder
    other = next(d for d in sorted({f["date"] for f in files}) if d != first["date"])
    shutil.move(placed, ws / "by_date" / other / first["name"])
    failed = _failed(TIME_CLASSIFICATION.verify(ws, key))
    assert "placement" in failed and first["name"] in failed["placement"]
    shutil.move(ws / "by_date" / other / first["name"], placed)

    # a metadata file with a wrong size
    meta = ws / "by_date" / first["date"] / "metadata.csv"
    good = meta.read_text()
    meta.write_text(good.replace(f",{first['size']}\n", f",{first['size'] + 1}\n"))
    failed = _failed(TIME_CLASSIFICATION.verify(ws, key))
    assert set(failed) == {"metadata"} and "rows differ" in failed["metadata"]

    # a missing metadata file
    meta.unlink()
    failed = _failed(TIME_CLASSIFICATION.verify(ws, key))
    assert set(failed) == {"metadata"} and "does not exist" in failed["metadata"]


def test_time_classification_untouched_fails(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    key = TIME_CLASSIFICATION.generate(random.Random(2), ws, {"files": 8, "levels": 2})
    failed = _failed(TIME_CLASSIFICATION.verify(ws, key))
    assert {"placement", "moved", "directories", "metadata"} <= set(failed)
    assert "by_date/ does not exist" in failed["directories"]


# ------------------------------------------------------------------------------ size_classification


def test_size_classification_reference_passes() -> None:
    verdict = run_reference(SIZE_CLASSIFICATION, seed=2, params={"files": 24, "levels": 4})
    assert verdict.success, verdict.checks


def test_size_classification_wrong_outputs(tmp_path: Path) -> None:
    ws, key = _solved(SIZE_CLASSIFICATION, tmp_path)
    summary = ws / "by_size" / "summary.csv"
    good = summary.read_text()

    lines = good.splitlines()
    band, count, total = lines[1].split(",")
    summary.write_text(good.replace(lines[1], f"{band},{int(count) + 1},{total}"))
    failed = _failed(SIZE_CLASSIFICATION.verify(ws, key))
    assert set(failed) == {"summary"} and "expected" in failed["summary"]

    summary.unlink()
    failed = _failed(SIZE_CLASSIFICATION.verify(ws, key))
    assert set(failed) == {"summary"} and "does not exist" in failed["summary"]
    summary.write_text(good)

    # a boundary file (exactly 1024 bytes is medium) put among the small ones
    f = next((f for f in key["files"] if f["size"] == MEDIUM_MIN), key["files"][0])
    wrong = "small" if f["band"] != "small" else "medium"
    (ws / "by_size" / wrong).mkdir(exist_ok=True)
    shutil.move(ws / "by_size" / f["band"] / f["name"], ws / "by_size" / wrong / f["name"])
    failed = _failed(SIZE_CLASSIFICATION.verify(ws, key))
    assert "placement" in failed and f["name"] in failed["placement"]
    shutil.move(ws / "by_size" / wrong / f["name"], ws / "by_size" / f["band"] / f["name"])

    # a file copied back (left at its original place)
    src = ws / "by_size" / f["band"] / f["name"]
    shutil.copy(src, ws / f["path"])
    failed = _failed(SIZE_CLASSIFICATION.verify(ws, key))
    assert set(failed) == {"moved"} and f["path"] in failed["moved"]
    (ws / f["path"]).unlink()

    (ws / "by_size" / "huge").mkdir()
    failed = _failed(SIZE_CLASSIFICATION.verify(ws, key))
    assert set(failed) == {"directories"} and "huge" in failed["directories"]


def test_inbox_layout_is_what_the_instruction_says(tmp_path: Path) -> None:
    key = SIZE_CLASSIFICATION.generate(random.Random(0), tmp_path, {"files": 16, "levels": 3})
    assert all(f["path"].startswith(INBOX + "/") for f in key["files"])
    assert "16 files" in SIZE_CLASSIFICATION.instruction.replace("{files}", "16")
