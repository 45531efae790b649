"""Student-database tasks: generator shape, references through the real server, wrong outputs."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

import pytest

from controlscope.core import Check
from controlscope.envs.filesystem.generators.students import (
    BASIC_INFO,
    LETTER,
    POOL_SIZE,
    ROSTER,
    ROSTER_HEADER,
    STUDENTS_DIR,
    english_selected,
    make_students,
    pool_subset,
    student_pool,
    write_students,
)
from controlscope.envs.filesystem.server import start_filesystem_server
from controlscope.envs.filesystem.tasks.student_database import (
    DUPLICATE_NAME,
    ENGLISH_TALENT,
    GRADE_BASED_SCORE,
    letter_grade,
)
from controlscope.envs.filesystem.testing import run_reference, solve_reference
from controlscope.envs.filesystem.workspace import content_hash


def _failed(checks: list[Check]) -> dict[str, str]:
    return {c.name: c.reason for c in checks if not c.passed}


def _solved(spec: Any, tmp_path: Path, students: int, seed: int = 5) -> tuple[Path, Any]:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws, solve_reference(spec, seed, {"students": students}, ws)


# ------------------------------------------------------------------------------ generator


def test_generator_deterministic_per_seed(tmp_path: Path) -> None:
    digests = []
    for i, seed in enumerate((11, 11, 12)):
        ws = tmp_path / str(i)
        ws.mkdir()
        write_students(ws, make_students(random.Random(seed), 40, duplicate_groups=2))
        digests.append(content_hash(ws))
    assert digests[0] == digests[1] != digests[2]


def _generated(tmp_path: Path, name: str, seed: int, **params: int) -> tuple[Path, Any]:
    ws = tmp_path / name
    ws.mkdir()
    full = {"students": 75, "pool": 0, "pool_size": POOL_SIZE, **params}
    return ws, ENGLISH_TALENT.generate(random.Random(seed), ws, full)


def _files(ws: Path) -> dict[str, bytes]:
    return {p.relative_to(ws).as_posix(): p.read_bytes() for p in ws.rglob("*") if p.is_file()}


def test_subsets_share_one_pool(tmp_path: Path) -> None:
    """Paper B.2: subsets of 25, 75 and 150 students drawn by a subset seed "share the original
    150-record pool" (A.4: the confirmation uses subset seeds 101-103)."""
    files: dict[tuple[int, int], dict[str, bytes]] = {}
    for seed in (101, 102, 103):
        for count in (25, 75, 150):
            ws, _ = _generated(tmp_path, f"{seed}-{count}", seed, students=count)
            files[seed, count] = _files(ws)
    for seed in (101, 102, 103):
        small, mid, whole = files[seed, 25], files[seed, 75], files[seed, 150]
        assert (len(small), len(mid), len(whole)) == (50, 150, 300)  # two files per student
        # the same students, with the same bytes, across subset sizes ...
        assert small.items() <= mid.items() <= whole.items()
    # ... and across subset seeds: every subset is part of the one pool
    assert files[101, 150] == files[102, 150] == files[103, 150]
    assert files[101, 75] != files[102, 75]
    for seed in (101, 102, 103):
        assert files[seed, 75].items() <= files[101, 150].items()
    # another pool seed is another pool
    other, _ = _generated(tmp_path, "pool-1", 101, students=150, pool=1)
    assert _files(other) != files[101, 150]


def test_selection_follows_from_the_data(tmp_path: Path) -> None:
    """Paper 6.1: the 19 of 150 selected were observed; nothing forces the count."""
    counts = [sum(english_selected(s) for s in student_pool(seed)) for seed in range(10)]
    assert len(set(counts)) > 1  # drawn, not fixed
    assert 12 <= sum(counts) / len(counts) <= 26  # about the paper's 19 of 150 on average
    ws, key = _generated(tmp_path, "ws", 3, students=75)
    selected = []
    for folder in sorted((ws / STUDENTS_DIR).iterdir()):
        info = (folder / BASIC_INFO).read_text()
        letter = (folder / LETTER).read_text()
        english = int(info.split("English score: ")[1].split("\n")[0])
        if english >= 90 and "talent in English as exceptional." in letter:
            selected.append(folder.name.split("_")[0])
    assert key["selected"] == sorted(selected)


def test_pool_parameters_are_checked() -> None:
    from controlscope.core import TaskError

    assert ENGLISH_TALENT.check_params is not None
    with pytest.raises(TaskError, match="does not fit a pool"):
        ENGLISH_TALENT.check_params({"students": 151, "pool": 0, "pool_size": 150})
    with pytest.raises(TaskError, match="pool"):
        ENGLISH_TALENT.check_params({"students": 10, "pool": -1, "pool_size": 150})


def test_one_file_at_a_time_needs_over_100_calls_at_75() -> None:
    """Whichever file an agent reads first, reading one file per call exceeds the budget, on
    the default pool's subsets of 75 (the paper's exploration and confirmation seeds)."""
    pool = student_pool(0)
    for seed in (0, 1, 101, 102, 103):
        students = pool_subset(pool, 75, random.Random(seed))
        high = sum(s.english >= 90 for s in students)
        letters = sum(s.english_talent == "exceptional" for s in students)
        naive = 1 + 2 * len(students) + 1  # list, two reads per student, write
        smart = 1 + len(students) + min(high, letters) + 1
        assert naive > 100
        assert smart > 100


def test_batched_reads_fit_at_75(tmp_path: Path) -> None:
    students = pool_subset(student_pool(0), 75, random.Random(3))
    write_students(tmp_path, students, roster=False)
    paths = [f"{STUDENTS_DIR}/{s.folder}/{name}" for s in students for name in (BASIC_INFO, LETTER)]
    with start_filesystem_server(tmp_path) as server:
        result = server.call("read_multiple_files", {"paths": paths})
    assert not result.is_error
    assert len(result.text.split("\n---\n")) == 150
    assert len(result.text) < 150_000  # one observation, well within a context
    assert "Error -" not in result.text


def test_roster_has_unquoted_commas(tmp_path: Path) -> None:
    students = student_pool(4)
    write_students(tmp_path, students)
    lines = (tmp_path / ROSTER).read_text().splitlines()
    assert lines[0] == ",".join(ROSTER_HEADER)
    widths = [len(line.split(",")) for line in lines[1:]]
    assert min(widths) == len(ROSTER_HEADER)
    assert sum(w > len(ROSTER_HEADER) for w in widths) >= 30  # many addresses with commas
    assert '"' not in (tmp_path / ROSTER).read_text()
    # the fields around the address are reliable
    first = students[0]
    fields = lines[1].split(",")
    assert fields[:3] == [first.student_id, first.name, first.klass]
    assert fields[-4:] == [str(first.math), str(first.english), str(first.science), first.email]


def test_letters_rate_english_once_and_mislead_greps(tmp_path: Path) -> None:
    students = make_students(random.Random(6), 60)
    write_students(tmp_path, students, roster=False)
    misleading = 0
    for s in students:
        letter = (tmp_path / STUDENTS_DIR / s.folder / LETTER).read_text()
        assert letter.count("talent in English as") == 1
        assert f"talent in English as {s.english_talent}." in letter
        if s.english_talent != "exceptional" and "exceptional" in letter:
            misleading += 1
        info = (tmp_path / STUDENTS_DIR / s.folder / BASIC_INFO).read_text()
        assert f"English score: {s.english}\n" in info
    assert misleading > 0


def test_duplicate_groups(tmp_path: Path) -> None:
    students = make_students(random.Random(8), 100, duplicate_groups=5)
    counts: dict[str, int] = {}
    for s in students:
        counts[s.name] = counts.get(s.name, 0) + 1
    assert sorted(c for c in counts.values() if c > 1) == [2, 2, 2, 2, 3]
    with pytest.raises(ValueError, match="do not fit"):
        make_students(random.Random(8), 3, duplicate_groups=2)


def test_letter_grade_boundaries() -> None:
    assert letter_grade(270 / 3) == "A"
    assert letter_grade(269 / 3) == "B"
    assert letter_grade(80.0) == "B"
    assert letter_grade(79.99) == "C"
    assert letter_grade(60.0) == "D"
    assert letter_grade(59.9) == "F"


# ------------------------------------------------------------------------------ english_talent


def test_english_talent_reference_passes_paper_size() -> None:
    calls: list[tuple[str, dict[str, Any]]] = []
    verdict = run_reference(ENGLISH_TALENT, seed=0, params={"students": 150}, calls=calls)
    assert verdict.success, verdict.checks
    assert len(calls) < 10  # batched reads: 300 files in a few calls


def test_english_talent_wrong_outputs(tmp_path: Path) -> None:
    ws, key = _solved(ENGLISH_TALENT, tmp_path, 25)
    assert 0 < len(key["selected"]) < 25
    out = ws / "english_talent.csv"
    good = out.read_text()
    lines = good.splitlines()

    out.write_text("\n".join(lines[:-1]) + "\n")  # one selected student missing
    failed = _failed(ENGLISH_TALENT.verify(ws, key))
    assert set(failed) == {"selection"} and "missing" in failed["selection"]

    wrong_id = next(i for i in key["names"] if i not in key["selected"])
    out.write_text(good + f"{wrong_id},{key['names'][wrong_id]}\n")
    failed = _failed(ENGLISH_TALENT.verify(ws, key))
    assert set(failed) == {"selection"} and wrong_id in failed["selection"]

    sid = lines[1].split(",")[0]
    out.write_text(good.replace(lines[1], f"{sid},Somebody Else"))
    failed = _failed(ENGLISH_TALENT.verify(ws, key))
    assert set(failed) == {"names"} and sid in failed["names"]

    out.unlink()
    failed = _failed(ENGLISH_TALENT.verify(ws, key))
    assert set(failed) == {"output_exists"} and "does not exist" in failed["output_exists"]

    out.write_bytes(b"\xff\xfe\x00garbage")
    assert "not UTF-8" in _failed(ENGLISH_TALENT.verify(ws, key))["output_exists"]


# ------------------------------------------------------------------------------ grade_based_score


def test_grade_based_score_reference_passes() -> None:
    verdict = run_reference(GRADE_BASED_SCORE, seed=1, params={"students": 150})
    assert verdict.success, verdict.checks


def test_grade_based_score_wrong_outputs(tmp_path: Path) -> None:
    ws, key = _solved(GRADE_BASED_SCORE, tmp_path, 40)
    grades = ws / "grades.csv"
    summary = ws / "grade_summary.json"
    good = grades.read_text()

    # a parser that splits on every comma shifts the scores of students with commas in addresses
    naive = ["student_id,name,average,grade"]
    for line in (ws / ROSTER).read_text().splitlines()[1:]:
        f = line.split(",")
        avg = (int(f[4]) + int(f[5]) + int(f[6])) / 3 if f[4].isdigit() else 0.0
        naive.append(f"{f[0]},{f[1]},{avg:.2f},{letter_grade(avg)}")
    grades.write_text("\n".join(naive) + "\n")
    failed = _failed(GRADE_BASED_SCORE.verify(ws, key))
    assert "averages" in failed and "wrong" in failed["averages"]

    row = good.splitlines()[1].split(",")
    changed = f"{row[0]},{row[1]},{float(row[2]) + 1:.2f},{row[3]}"
    grades.write_text(good.replace(",".join(row), changed))
    failed = _failed(GRADE_BASED_SCORE.verify(ws, key))
    assert set(failed) == {"averages"} and row[0] in failed["averages"]

    counts = json.loads(summary.read_text())
    counts["A"] += 1
    summary.write_text(json.dumps(counts))
    grades.write_text(good)
    failed = _failed(GRADE_BASED_SCORE.verify(ws, key))
    assert set(failed) == {"summary"} and "A:" in failed["summary"]

    grades.unlink()
    summary.write_text("{not json")
    failed = _failed(GRADE_BASED_SCORE.verify(ws, key))
    assert "does not exist" in failed["grades_file"]
    assert "not valid JSON" in failed["summary"]


# ------------------------------------------------------------------------------ duplicate_name


def test_duplicate_name_is_python_restricted() -> None:
    assert DUPLICATE_NAME.python_allowed is False
    assert "Python" in DUPLICATE_NAME.instruction


def test_duplicate_name_reference_passes() -> None:
    verdict = run_reference(DUPLICATE_NAME, seed=2)
    assert verdict.success, verdict.checks


def test_duplicate_name_wrong_outputs(tmp_path: Path) -> None:
    ws, key = _solved(DUPLICATE_NAME, tmp_path, 60)
    assert len(key["duplicates"]) == 3
    out = ws / "duplicate_names.txt"
    good = out.read_text()
    lines = good.splitlines()

    out.write_text("\n".join(lines[1:]) + "\n")
    failed = _failed(DUPLICATE_NAME.verify(ws, key))
    assert set(failed) == {"names"} and "missing" in failed["names"]

    name, ids = lines[0].split(": ")
    out.write_text(good.replace(lines[0], f"{name}: {ids.split(', ')[0]}"))
    failed = _failed(DUPLICATE_NAME.verify(ws, key))
    assert set(failed) == {"ids"} and name in failed["ids"]

    out.write_text(good + "this is not a line of the list\n")
    assert "format" in _failed(DUPLICATE_NAME.verify(ws, key))

    out.unlink()
    assert "output_exists" in _failed(DUPLICATE_NAME.verify(ws, key))


def test_generated_bytes_depend_only_on_seed(tmp_path: Path) -> None:
    def digest(seed: int, sub: str) -> str:
        ws = tmp_path / sub
        ws.mkdir()
        GRADE_BASED_SCORE.generate(random.Random(seed), ws, {"students": 20})
        return hashlib.sha256((ws / ROSTER).read_bytes()).hexdigest()

    assert digest(9, "a") == digest(9, "b") != digest(10, "c")


def test_workload_is_deterministic_across_processes() -> None:
    """The pool and its subsets depend on their seeds only (no hash seed, no clock)."""
    import subprocess
    import sys

    code = (
        "import random; from controlscope.envs.filesystem.generators.students import *; "
        "p = student_pool(0); print([s.letter[:40] for s in pool_subset(p, 5, random.Random(1))])"
    )
    outs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": str(h), "PATH": "", **_pythonpath()},
        ).stdout
        for h in (1, 2)
    }
    assert len(outs) == 1


def _pythonpath() -> dict[str, str]:
    import os

    return {"PYTHONPATH": os.environ["PYTHONPATH"]} if "PYTHONPATH" in os.environ else {}
