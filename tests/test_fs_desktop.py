"""Desktop filesystem tasks: references through the real npm server, wrong outputs, determinism."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import controlscope.envs.filesystem.tasks.desktop  # noqa: F401  (registers the tasks)
from controlscope.envs.base import AnswerKey, Check, TaskError
from controlscope.envs.filesystem.registry import REGISTRY
from controlscope.envs.filesystem.testing import run_reference, solve_reference

TASKS = ["desktop/music_report", "desktop/project_management", "desktop/timeline_extraction"]


def solve(task_id: str, seed: int, ws: Path, **params: Any) -> tuple[AnswerKey, int]:
    """Generate the task in a new directory ``ws`` and solve it with its reference through the
    real server (H5's :func:`solve_reference`); return the answer key and the number of
    primitive calls made."""
    ws.mkdir(parents=True)
    calls: list[tuple[str, dict[str, Any]]] = []
    key = solve_reference(REGISTRY[task_id], seed, params, ws, calls=calls)
    return key, len(calls)


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def failing(checks: list[Check]) -> set[str]:
    return {c.name for c in checks if not c.passed}


def tree(ws: Path) -> dict[str, bytes]:
    return {p.relative_to(ws).as_posix(): p.read_bytes() for p in ws.rglob("*") if p.is_file()}


@pytest.fixture(params=TASKS)
def task_id(request: pytest.FixtureRequest) -> str:
    return str(request.param)


OUTPUTS: dict[str, Callable[[AnswerKey], list[str]]] = {
    "desktop/music_report": lambda key: ["music_report.txt"],
    "desktop/project_management": lambda key: sorted(key["placed"])[:2],
    "desktop/timeline_extraction": lambda key: ["timeline.txt"],
}
GARBAGE: list[bytes | None] = [
    None,  # a directory where the file should be
    b"\xff\xfe\x00\x81 not utf-8",
    b'a,b\n"unterminated,\n,,,\n|||\n1. - plays\nTOTAL\n',
    b"",
]


@pytest.mark.parametrize("garbage", GARBAGE)
def test_malformed_outputs_fail_without_raising(
    task_id: str, garbage: bytes | None, tmp_path: Path
) -> None:
    spec = REGISTRY[task_id]
    key = spec.generate(random.Random(1), tmp_path, dict(spec.default_params))
    for rel in OUTPUTS[task_id](key):
        target = tmp_path / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if garbage is None:
            target.mkdir()
        else:
            target.write_bytes(garbage)
    checks = spec.verify(tmp_path, key)
    assert failing(checks) and all(c.reason for c in checks if not c.passed)


@pytest.mark.parametrize("seed", [0, 5])
def test_reference_passes_through_real_server(task_id: str, seed: int) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    verdict = run_reference(REGISTRY[task_id], seed, calls=calls)
    assert verdict.success, [c for c in verdict.checks if not c.passed]
    assert calls[0][0] == "list_allowed_directories"  # the reference learns the root
    assert len(calls) < 100  # fits the paper's 100-call budget (section 4)


@pytest.mark.parametrize(
    ("large_id", "params"),
    [
        ("desktop/music_report", {"tracks": 120}),
        ("desktop/project_management", {"projects": 5, "files_per_project": 12}),
    ],
)
def test_reference_passes_at_edge_sizes(large_id: str, params: dict[str, int]) -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    verdict = run_reference(REGISTRY[large_id], 1, params, calls=calls)
    assert verdict.success, [c for c in verdict.checks if not c.passed]
    assert len(calls) < 100


def test_untouched_workspace_fails(task_id: str, tmp_path: Path) -> None:
    spec = REGISTRY[task_id]
    key = spec.generate(random.Random(3), tmp_path, dict(spec.default_params))
    checks = spec.verify(tmp_path, key)
    assert failing(checks)


def test_generator_is_deterministic_per_seed(task_id: str, tmp_path: Path) -> None:
    spec = REGISTRY[task_id]
    keys, trees = [], []
    for i, seed in enumerate([4, 4, 9]):
        ws = tmp_path / str(i)
        ws.mkdir()
        keys.append(spec.generate(random.Random(seed), ws, dict(spec.default_params)))
        trees.append(tree(ws))
    assert keys[0] == keys[1] and trees[0] == trees[1]
    assert trees[0] != trees[2]
    assert 1 <= len(trees[0]) <= 60 and sum(map(len, trees[0].values())) < 20_000


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


def test_generators_are_deterministic_across_processes() -> None:
    """String hashing is salted per process; the workspaces must not depend on it."""
    outputs = [
        subprocess.run(
            [sys.executable, "-c", _HASH_SCRIPT, *TASKS],
            env={**os.environ, "PYTHONHASHSEED": salt},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for salt in ("1", "2")
    ]
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == len(TASKS)


def test_bad_params_are_rejected(task_id: str) -> None:
    spec = REGISTRY[task_id]
    assert spec.check_params is not None
    spec.check_params(dict(spec.default_params))
    with pytest.raises(TaskError, match="unknown parameter"):
        spec.check_params({"nonsense": 1})
    first = next(iter(spec.default_params))
    with pytest.raises(TaskError, match=first):
        spec.check_params({first: 10_000})
    with pytest.raises(TaskError, match="integer"):
        spec.check_params({first: "many"})


# ---- desktop/music_report ----------------------------------------------------------------


def test_music_missing_report_fails_every_check(tmp_path: Path) -> None:
    spec = REGISTRY["desktop/music_report"]
    key = spec.generate(random.Random(1), tmp_path, {"tracks": 10})
    checks = spec.verify(tmp_path, key)
    assert failing(checks) == set(by_name(checks)) - {"library_unchanged"}
    assert "music_report.txt does not exist" in by_name(checks)["report_exists"].reason


def test_music_wrong_values_fail_with_reason(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    key, _ = solve("desktop/music_report", 2, ws)
    report = ws / "music_report.txt"
    good = report.read_text()
    # Counting the playlist or cover files as tracks changes the count only.
    report.write_text(good.replace(f"tracks: {key['tracks']}", f"tracks: {key['tracks'] + 5}"))
    checks = REGISTRY["desktop/music_report"].verify(ws, key)
    assert failing(checks) == {"track_count"}
    assert str(key["tracks"]) in by_name(checks)["track_count"].reason
    # Swapping the first two artists of the ranking.
    lines = good.splitlines()
    i = lines.index("top_artists:")
    lines[i + 1], lines[i + 2] = lines[i + 2], lines[i + 1]
    report.write_text("\n".join(lines) + "\n")
    checks = REGISTRY["desktop/music_report"].verify(ws, key)
    assert failing(checks) == {"top_artists"}
    assert "expected" in by_name(checks)["top_artists"].reason
    # Deleting the playlist from the library.
    report.write_text(good)
    (ws / "Music/favourites.m3u").unlink()
    checks = REGISTRY["desktop/music_report"].verify(ws, key)
    assert failing(checks) == {"library_unchanged"}
    assert "Music/favourites.m3u is missing" in by_name(checks)["library_unchanged"].reason


def test_music_library_has_distractors(tmp_path: Path) -> None:
    key = REGISTRY["desktop/music_report"].generate(random.Random(8), tmp_path, {"tracks": 12})
    metas = list(tmp_path.rglob("*.meta"))
    assert len(metas) == key["tracks"] == 12
    assert (tmp_path / "Music/favourites.m3u").is_file() and list(tmp_path.rglob("cover.txt"))
    totals = [p for _, p in key["top_artists"]]
    assert totals == sorted(totals, reverse=True) and len(set(totals)) == 3


# ---- desktop/project_management ----------------------------------------------------------


def test_project_left_copy_and_misfiled_personal_file_fail(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    key, _ = solve("desktop/project_management", 3, ws)
    spec = REGISTRY["desktop/project_management"]
    # A project file copied instead of moved: the desktop is not cleared.
    placed = sorted(key["placed"])[0]
    shutil.copy(ws / placed, ws / "Desktop" / Path(placed).name)
    checks = spec.verify(ws, key)
    assert failing(checks) == {"desktop_cleared"}
    assert Path(placed).name in by_name(checks)["desktop_cleared"].reason
    (ws / "Desktop" / Path(placed).name).unlink()
    # A personal file (unlisted code) moved into a project.
    personal = sorted(r for r in key["untouched"] if not r.endswith("projects.txt"))[0]
    target = ws / "Projects" / key["projects"][0] / "docs" / Path(personal).name
    shutil.move(ws / personal, target)
    checks = spec.verify(ws, key)
    assert failing(checks) == {"other_files_untouched", "no_extra_files"}
    assert f"{personal} is missing" in by_name(checks)["other_files_untouched"].reason


def test_project_missing_subfolder_and_wrong_kind_fail(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    key, _ = solve("desktop/project_management", 4, ws)
    spec = REGISTRY["desktop/project_management"]
    project = key["projects"][-1]
    for sub in ("code", "data", "docs", "assets"):
        folder = ws / "Projects" / project / sub
        if not any(folder.iterdir()):
            folder.rmdir()
            checks = spec.verify(ws, key)
            assert "project_folders" in failing(checks)
            folder.mkdir()
            break
    rel = sorted(key["placed"])[0]
    src = ws / rel
    wrong_kind = "docs" if src.parent.name != "docs" else "code"
    shutil.move(src, src.parent.parent / wrong_kind / src.name)
    checks = spec.verify(ws, key)
    assert failing(checks) == {"project_files_placed", "no_extra_files"}
    assert f"{rel} is missing" in by_name(checks)["project_files_placed"].reason


# ---- desktop/timeline_extraction ---------------------------------------------------------


def test_timeline_missing_file_fails(tmp_path: Path) -> None:
    spec = REGISTRY["desktop/timeline_extraction"]
    key = spec.generate(random.Random(0), tmp_path, {"events": 6, "notes": 2})
    checks = spec.verify(tmp_path, key)
    assert all(not c.passed for c in checks)
    assert "timeline.txt does not exist" in by_name(checks)["timeline_exists"].reason


def test_timeline_wrong_outputs_fail_with_reason(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    key, _ = solve("desktop/timeline_extraction", 6, ws)
    spec = REGISTRY["desktop/timeline_extraction"]
    out = ws / "timeline.txt"
    good = out.read_text().splitlines()
    # Order: swap two lines.
    out.write_text("\n".join([good[1], good[0], *good[2:]]) + "\n")
    assert failing(spec.verify(ws, key)) == {"order"}
    # A misdated event (month and day swapped, or one day off).
    date, event, source = (p.strip() for p in good[0].split("|"))
    y, m, d = date.split("-")
    wrong_date = f"{y}-{m}-{int(d) % 28 + 1:02d}"
    out.write_text("\n".join([f"{wrong_date} | {event} | {source}", *good[1:]]) + "\n")
    checks = spec.verify(ws, key)
    assert "events" in failing(checks)
    assert "1 event(s) missing or misdated" in by_name(checks)["events"].reason
    # An undated bullet taken as an event.
    out.write_text("\n".join([*good, "2099-01-01 | repaint the hallway | home.txt"]) + "\n")
    checks = spec.verify(ws, key)
    assert failing(checks) == {"events"}
    assert "1 unexpected" in by_name(checks)["events"].reason
    # The wrong source file.
    other = "zzz.txt"
    out.write_text("\n".join([f"{date} | {event} | {other}", *good[1:]]) + "\n")
    checks = spec.verify(ws, key)
    assert failing(checks) == {"sources"}
    assert event in by_name(checks)["sources"].reason


def test_timeline_notes_use_all_three_date_styles(tmp_path: Path) -> None:
    REGISTRY["desktop/timeline_extraction"].generate(random.Random(12), tmp_path, {"events": 20})
    text = "\n".join(p.read_text() for p in (tmp_path / "Notes").iterdir())
    assert "- 20" in text  # ISO
    assert any(f"- {m} " in text for m in ("January", "March", "May", "July", "October"))
    assert any(f" {m} 20" in text for m in ("Jan", "Mar", "May", "Jul", "Oct", "Dec"))
