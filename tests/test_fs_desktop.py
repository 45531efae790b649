"""Desktop filesystem tasks: references through the real npm server, wrong outputs, determinism."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import ClassVar

import controlscope.envs.filesystem.tasks.desktop  # noqa: F401  (registers the tasks)
from _fs_task_support import (
    Outputs,
    ReferenceTaskTests,
    by_name,
    failing,
    solve_by_id,
    verify_unsolved,
)
from controlscope.envs.filesystem.registry import REGISTRY


class TestCommon(ReferenceTaskTests):
    """The shared tests of :class:`ReferenceTaskTests`, on the desktop tasks."""

    TASKS = (
        "desktop/music_report",
        "desktop/project_management",
        "desktop/timeline_extraction",
    )
    OUTPUTS: ClassVar[Outputs] = {
        "desktop/music_report": lambda key: ["music_report.txt"],
        "desktop/project_management": lambda key: sorted(key["placed"])[:2],
        "desktop/timeline_extraction": lambda key: ["timeline.txt"],
    }
    EDGE_SIZES = (
        ("desktop/music_report", {"tracks": 120}),
        ("desktop/project_management", {"projects": 5, "files_per_project": 12}),
    )
    MIN_FILES = 1
    OUT_OF_RANGE = 10_000
    NOT_INTEGER = "many"


# ---- desktop/music_report ----------------------------------------------------------------


def test_music_missing_report_fails_every_check(tmp_path: Path) -> None:
    _, checks = verify_unsolved("desktop/music_report", 1, tmp_path, {"tracks": 10})
    assert failing(checks) == set(by_name(checks)) - {"library_unchanged"}
    assert "music_report.txt does not exist" in by_name(checks)["report_exists"].reason


def test_music_wrong_values_fail_with_reason(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    key, _ = solve_by_id("desktop/music_report", 2, ws)
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
    key, _ = solve_by_id("desktop/project_management", 3, ws)
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
    key, _ = solve_by_id("desktop/project_management", 4, ws)
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
    _, checks = verify_unsolved(
        "desktop/timeline_extraction", 0, tmp_path, {"events": 6, "notes": 2}
    )
    assert all(not c.passed for c in checks)
    assert "timeline.txt does not exist" in by_name(checks)["timeline_exists"].reason


def test_timeline_wrong_outputs_fail_with_reason(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    key, _ = solve_by_id("desktop/timeline_extraction", 6, ws)
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
