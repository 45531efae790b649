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
    ROSTER,
    ROSTER_HEADER,
    STUDENTS_DIR,
    english_selected,
    make_students,
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
        rng = random.Random(seed)
        write_students(rng, ws, make_students(rng, 40, duplicate_groups=2))
        digests.append(content_hash(ws))
    assert digests[0] == digests[1] != digests[2]


@pytest.mark.parametrize(("count", "selected"), [(150, 19), (75, 10), (25, 3)])
def test_english_selection_counts(count: int, selected: int) -> None:
    for seed in (0, 1, 2):
        students = make_students(random.Random(seed), count)
        assert sum(english_selected(s) for s in students) == selected
        assert len({s.name for s in students}) == count  # no duplicates unless asked
        assert len({s.student_id for s in students}) == count


def test_one_file_at_a_time_needs_over_100_calls_at_75() -> None:
    """Whichever file an agent reads first, reading one file per call exceeds the budget."""
    for seed in range(5):
        students = make_students(random.Random(seed), 75)
        high = sum(s.english >= 90 for s in students)
        letters = sum(s.english_talent == "exceptional" for s in students)
        naive = 1 + 2 * len(students) + 1  # list, two reads per student, write
        smart = 1 + len(students) + min(high, letters) + 1
        assert naive > 100
        assert smart > 100


def test_batched_reads_fit_at_75(tmp_path: Path) -> None:
    rng = random.Random(3)
    students = make_students(rng, 75)
    write_students(rng, tmp_path, students, roster=False)
    paths = [f"{STUDENTS_DIR}/{s.folder}/{name}" for s in students for name in (BASIC_INFO, LETTER)]
    with start_filesystem_server(tmp_path) as server:
        result = server.call("read_multiple_files", {"paths": paths})
    assert not result.is_error
    assert len(result.text.split("\n---\n")) == 150
    assert len(result.text) < 150_000  # one observation, well within a context
    assert "Error -" not in result.text


def test_roster_has_unquoted_commas(tmp_path: Path) -> None:
    rng = random.Random(4)
    students = make_students(rng, 150)
    write_students(rng, tmp_path, students)
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
    rng = random.Random(6)
    students = make_students(rng, 60)
    write_students(rng, tmp_path, students, roster=False)
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
    assert len(key["selected"]) == 3
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
