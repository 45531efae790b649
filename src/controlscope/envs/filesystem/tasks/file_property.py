"""File-property tasks on the generated file-organisation workload (paper sections 6.2 and B.2).

* ``file_property/time_classification``: move files into date directories by modification time
  and write a metadata file per directory. The directories must be created first: ``write_file``
  and ``move_file`` do not create parents (the "missing-parent-directory error" of section 6.2).
* ``file_property/size_classification``: move files into size-band directories and write a
  summary.

Both take ``files`` (default 16) and ``levels`` (default 3), the paper's confirmation setting.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controlscope.core import AnswerKey, Check
from controlscope.envs.filesystem.generators.file_organisation import (
    INBOX,
    SIZE_BANDS,
    make_file_tree,
    size_band,
)
from controlscope.envs.filesystem.registry import FsTaskSpec, ToolCaller, register
from controlscope.envs.filesystem.tasks._taskkit import (
    describe,
    fail,
    int_param,
    join,
    make_dir,
    move,
    ok,
    parse_csv,
    range_checker,
    read_output,
    tree_files,
    workspace_root,
    write_lines,
    write_text,
)

__all__ = ["SIZE_CLASSIFICATION", "TIME_CLASSIFICATION"]

_DEFAULTS = {"files": 16, "levels": 3}
_BOUNDS = {"files": (1, 300), "levels": (1, 6)}
BY_DATE = "by_date"
BY_SIZE = "by_size"
METADATA = "metadata.csv"
SUMMARY = "summary.csv"
_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _generate(rng: random.Random, workspace: Path, params: Mapping[str, Any]) -> AnswerKey:
    files = int_param(params, "files", _DEFAULTS["files"], *_BOUNDS["files"])
    levels = int_param(params, "levels", _DEFAULTS["levels"], *_BOUNDS["levels"])
    generated = make_file_tree(rng, workspace, files, levels)
    return {
        "files": [
            {
                "path": f.path,
                "name": f.name,
                "size": f.size,
                "mtime": f.mtime,
                "sha256": f.sha256,
                "date": f.date,
                "band": size_band(f.size),
            }
            for f in generated
        ]
    }


def _sha256(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def _placement_checks(
    workspace: Path, files: list[dict[str, Any]], target_of: dict[str, str], *, mtimes: bool
) -> list[Check]:
    """Files at their targets with their bytes (and mtimes), and gone from their origins."""
    misplaced: list[str] = []
    changed_time: list[str] = []
    for f in files:
        target = workspace / target_of[f["path"]]
        if not target.is_file():
            misplaced.append(f"{target_of[f['path']]} is missing")
        elif _sha256(target) != f["sha256"]:
            misplaced.append(f"{target_of[f['path']]} has changed content")
        elif mtimes and int(target.stat().st_mtime) != f["mtime"]:
            changed_time.append(target_of[f["path"]])
    left = [f["path"] for f in files if (workspace / f["path"]).exists()]
    checks = [
        fail("placement", f"{len(misplaced)} problems: {describe(misplaced, 3)}")
        if misplaced
        else ok("placement", f"all {len(files)} files in place with their content"),
        fail("moved", f"still at their original place: {describe(left, 3)}")
        if left
        else ok("moved", "no file left at its original place"),
    ]
    if mtimes:
        checks.append(
            fail(
                "mtimes",
                f"modification time changed (copy instead of move?): {describe(changed_time, 3)}",
            )
            if changed_time
            else ok("mtimes", "modification times preserved")
        )
    return checks


def _subdirs_check(
    workspace: Path, base: str, expected: set[str], allowed_files: set[str]
) -> Check:
    root = workspace / base
    if not root.is_dir():
        return fail("directories", f"{base}/ does not exist")
    dirs = {p.name for p in root.iterdir() if p.is_dir()}
    stray = {p.name for p in root.iterdir() if not p.is_dir() and p.name not in allowed_files}
    problems = []
    if expected - dirs:
        problems.append(f"missing {describe(expected - dirs)}")
    if dirs - expected:
        problems.append(f"unexpected directories {describe(dirs - expected)}")
    if stray:
        problems.append(f"unexpected files {describe(stray)}")
    if problems:
        return fail("directories", f"{base}/: " + "; ".join(problems))
    return ok("directories", f"{base}/ holds exactly {describe(expected)}")


# ------------------------------------------------------------------------------ time


def _verify_time(workspace: Path, key: AnswerKey) -> list[Check]:
    files: list[dict[str, Any]] = key["files"]
    target_of = {f["path"]: f"{BY_DATE}/{f['date']}/{f['name']}" for f in files}
    checks = _placement_checks(workspace, files, target_of, mtimes=True)
    dates = {f["date"] for f in files}
    checks.append(_subdirs_check(workspace, BY_DATE, dates, set()))
    problems: list[str] = []
    for date in sorted(dates):
        rel = f"{BY_DATE}/{date}/{METADATA}"
        text, why = read_output(workspace, rel)
        if text is None:
            problems.append(why)
            continue
        rows = parse_csv(text)
        if not rows or [c.lower() for c in rows[0]] != ["file", "original_path", "size_bytes"]:
            problems.append(f"{rel}: header must be file,original_path,size_bytes")
            continue
        want = {(f["name"], f["path"], str(f["size"])) for f in files if f["date"] == date}
        got = {tuple(r[:3]) for r in rows[1:] if len(r) >= 3}
        if got != want or len(rows) - 1 != len(want):
            wrong = sorted(" ".join(r) for r in want ^ got)
            problems.append(f"{rel}: rows differ ({describe(wrong, 2)})")
    checks.append(
        fail("metadata", "; ".join(problems))
        if problems
        else ok("metadata", f"{len(dates)} metadata files right")
    )
    return checks


def _ref_time(call: ToolCaller) -> None:
    root = workspace_root(call)
    rows_by_date: dict[str, list[str]] = {}
    for rel in tree_files(call, join(root, INBOX)):
        path = join(root, INBOX, rel)
        info = dict(
            line.split(": ", 1) for line in call("get_file_info", path=path).text.splitlines()
        )
        # "modified: Tue Mar 14 2023 10:22:11 GMT+0000 (...)"; the server runs with TZ=UTC.
        _, month, day, year, *_ = info["modified"].split()
        date = f"{year}-{_MONTHS.index(month) + 1:02d}-{int(day):02d}"
        name = rel.rsplit("/", 1)[-1]
        if date not in rows_by_date:
            make_dir(call, join(root, BY_DATE, date))
            rows_by_date[date] = ["file,original_path,size_bytes"]
        move(call, path, join(root, BY_DATE, date, name))
        rows_by_date[date].append(f"{name},{INBOX}/{rel},{info['size']}")
    for date, rows in rows_by_date.items():
        write_lines(call, join(root, BY_DATE, date, METADATA), rows)


TIME_CLASSIFICATION = register(
    FsTaskSpec(
        category="file_property",
        name="time_classification",
        instruction=(
            "The folder `inbox/` holds {files} files, some in sub-folders up to {levels} levels "
            "deep; file names are unique. Organise them by last-modification date (UTC): for "
            "each date D (written YYYY-MM-DD) on which some file was last modified, create the "
            "folder `by_date/D/` and move every file modified on that date into it, keeping its "
            "file name and its content. In each of these date folders also write `metadata.csv` "
            "with the header `file,original_path,size_bytes` and one line per file moved there: "
            "its name, its original path relative to the workspace root (such as "
            "`inbox/a/b/report_1.txt`) and its size in bytes. `by_date/` must contain nothing "
            "but the date folders. Move the files (do not copy and delete them): their "
            "modification times must stay as they are. Leave the emptied folders in `inbox/`."
        ),
        generate=_generate,
        verify=_verify_time,
        reference=_ref_time,
        default_params=dict(_DEFAULTS),
        check_params=range_checker(_BOUNDS, _DEFAULTS),
        time_sensitive=True,
    )
)


# ------------------------------------------------------------------------------ size


def _verify_size(workspace: Path, key: AnswerKey) -> list[Check]:
    files: list[dict[str, Any]] = key["files"]
    target_of = {f["path"]: f"{BY_SIZE}/{f['band']}/{f['name']}" for f in files}
    checks = _placement_checks(workspace, files, target_of, mtimes=False)
    bands = {f["band"] for f in files}
    checks.append(_subdirs_check(workspace, BY_SIZE, bands, {SUMMARY}))
    text, why = read_output(workspace, f"{BY_SIZE}/{SUMMARY}")
    if text is None:
        checks.append(fail("summary", why))
        return checks
    rows = parse_csv(text)
    want = [["category", "count", "total_bytes"]] + [
        [
            band,
            str(sum(1 for f in files if f["band"] == band)),
            str(sum(f["size"] for f in files if f["band"] == band)),
        ]
        for band in SIZE_BANDS
    ]
    got = [[c.lower() for c in rows[0]], *rows[1:]] if rows else []
    if got != want:
        checks.append(
            fail(
                "summary",
                f"{BY_SIZE}/{SUMMARY} is {' | '.join(','.join(r) for r in got) or 'empty'}; "
                f"expected {' | '.join(','.join(r) for r in want)}",
            )
        )
    else:
        checks.append(ok("summary", "counts and totals per category are right"))
    return checks


def _ref_size(call: ToolCaller) -> None:
    root = workspace_root(call)
    rel_paths = tree_files(call, join(root, INBOX))
    totals = {band: [0, 0] for band in SIZE_BANDS}
    made: set[str] = set()
    for rel in rel_paths:
        path = join(root, INBOX, rel)
        info = dict(
            line.split(": ", 1) for line in call("get_file_info", path=path).text.splitlines()
        )
        size = int(info["size"])
        band = size_band(size)
        if band not in made:
            make_dir(call, join(root, BY_SIZE, band))
            made.add(band)
        move(call, path, join(root, BY_SIZE, band, rel.rsplit("/", 1)[-1]))
        totals[band][0] += 1
        totals[band][1] += size
    lines = ["category,count,total_bytes"] + [f"{b},{c},{t}" for b, (c, t) in totals.items()]
    write_text(call, join(root, BY_SIZE, SUMMARY), "\n".join(lines) + "\n")


SIZE_CLASSIFICATION = register(
    FsTaskSpec(
        category="file_property",
        name="size_classification",
        instruction=(
            "The folder `inbox/` holds {files} files, some in sub-folders up to {levels} levels "
            "deep; file names are unique. Sort them by size: move every file smaller than 1024 "
            "bytes into `by_size/small/`, every file of 1024 to 8191 bytes into "
            "`by_size/medium/`, and every file of 8192 bytes or more into `by_size/large/`, "
            "keeping file names and contents (create only the categories that receive files). "
            "Then write `by_size/summary.csv` with the header `category,count,total_bytes` and "
            "exactly three lines, for small, medium and large in that order: the number of files "
            "in the category and the sum of their sizes in bytes (0 and 0 when empty). Leave the "
            "emptied folders in `inbox/`."
        ),
        generate=_generate,
        verify=_verify_size,
        reference=_ref_size,
        default_params=dict(_DEFAULTS),
        check_params=range_checker(_BOUNDS, _DEFAULTS),
    )
)
