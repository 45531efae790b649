"""Student-database tasks on the generated student-record workload (paper sections 6.1, B, B.2).

* ``student_database/english_talent``: select students by combining basic information with
  recommendation letters (the paper's English-student selection: 19 of 150 selected). Reading one
  file per call usually needs more than 100 primitive calls at 75 students;
  ``read_multiple_files`` fits.
* ``student_database/grade_based_score``: parse a roster CSV whose address field holds unquoted
  commas, compute averages and letter grades, write a grades file and a summary.

Both draw their students from one pool (parameters ``pool``, the pool seed, and ``pool_size``,
150 by default) and take a subset of ``students`` records by the run's seed, the *subset seed*
(paper B.2: subsets of 25, 75 and 150 of "the original 150-record pool"; A.4: subset seeds
101-103 for the fresh confirmation).
* ``student_database/duplicate_name``: find names shared by several students; the instruction
  forbids Python (``python_allowed=False``, one of the paper's four instruction-restricted tasks).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controlscope.core import AnswerKey, Check, TaskError
from controlscope.envs.filesystem.generators.students import (
    BASIC_INFO,
    LETTER,
    POOL_SIZE,
    ROSTER,
    STUDENTS_DIR,
    english_selected,
    make_students,
    pool_subset,
    student_pool,
    write_students,
)
from controlscope.envs.filesystem.registry import FsTaskSpec, ToolCaller, register
from controlscope.envs.filesystem.tasks._taskkit import (
    describe,
    fail,
    int_param,
    join,
    list_entries,
    ok,
    parse_csv,
    range_checker,
    read_output,
    read_text,
    workspace_root,
    write_lines,
    write_text,
)

__all__ = [
    "DUPLICATE_NAME",
    "ENGLISH_TALENT",
    "GRADE_BASED_SCORE",
    "MAX_STUDENTS",
    "letter_grade",
]

_DEFAULT_STUDENTS = 150
MAX_STUDENTS = 1000
"""The most students a student task draws (its ``students`` parameter, ``--students``)."""
_BATCH = 100  # paths per read_multiple_files call in the reference solutions

ENGLISH_OUTPUT = "english_talent.csv"
GRADES_OUTPUT = "grades.csv"
SUMMARY_OUTPUT = "grade_summary.json"
DUPLICATES_OUTPUT = "duplicate_names.txt"
GRADES = ("A", "B", "C", "D", "F")


def letter_grade(average: float) -> str:
    """A (>= 90), B (>= 80), C (>= 70), D (>= 60) or F, from an unrounded average."""
    for letter, floor in (("A", 90), ("B", 80), ("C", 70), ("D", 60)):
        if average >= floor:
            return letter
    return "F"


_MAX_POOL_SEED = 2**31 - 1
_POOL_DEFAULTS = {"students": _DEFAULT_STUDENTS, "pool": 0, "pool_size": _DEFAULT_STUDENTS}


def _students_param(params: Mapping[str, Any]) -> int:
    return int_param(params, "students", _DEFAULT_STUDENTS, 1, MAX_STUDENTS)


def _check_pool_params(params: Mapping[str, Any]) -> None:
    """``students`` (1-1000), ``pool`` (a seed) and ``pool_size`` (1-1000), the subset no larger
    than its pool.

    Raises:
        TaskError: an unknown parameter or a value out of range.
    """
    range_checker(
        {"students": (1, MAX_STUDENTS), "pool": (0, _MAX_POOL_SEED), "pool_size": (1, 1000)},
        _POOL_DEFAULTS,
    )(params)
    students, size = _students_param(params), params.get("pool_size", _DEFAULT_STUDENTS)
    if students > size:
        raise TaskError(f"a subset of {students} students does not fit a pool of {size}")


def _subset(rng: random.Random, params: Mapping[str, Any]) -> list[Any]:
    """The run's students: a subset (by the run's seed, ``rng``) of the pool the parameters
    name (paper B.2)."""
    pool = student_pool(int(params.get("pool", 0)), int(params.get("pool_size", POOL_SIZE)))
    return pool_subset(pool, _students_param(params), rng)


def _id_key(row: list[str]) -> str:
    return row[0].strip().upper() if row else ""


def _header_check(rows: list[list[str]], expected: list[str], output: str) -> Check | None:
    """A failed check when the first row is not ``expected`` (case-insensitive), else None."""
    if not rows:
        return fail("header", f"{output} is empty")
    got = [c.lower() for c in rows[0]]
    if got != expected:
        return fail(
            "header", f"{output} header is {','.join(rows[0])!r}, expected {','.join(expected)!r}"
        )
    return None


# ------------------------------------------------------------------------------ english_talent


def _gen_english(rng: random.Random, workspace: Path, params: Mapping[str, Any]) -> AnswerKey:
    students = _subset(rng, params)
    write_students(workspace, students, roster=False)
    return {
        "students": len(students),
        "names": {s.student_id: s.name for s in students},
        "selected": sorted(s.student_id for s in students if english_selected(s)),
    }


def _verify_english(workspace: Path, key: AnswerKey) -> list[Check]:
    text, why = read_output(workspace, ENGLISH_OUTPUT)
    if text is None:
        return [fail("output_exists", why)]
    checks = [ok("output_exists", f"{ENGLISH_OUTPUT} found")]
    rows = parse_csv(text)
    bad_header = _header_check(rows, ["student_id", "name"], ENGLISH_OUTPUT)
    checks.append(bad_header or ok("header"))
    body = rows[1:] if bad_header is None else [r for r in rows if _id_key(r) in key["names"]]
    listed = [_id_key(r) for r in body]
    expected = set(key["selected"])
    missing = expected - set(listed)
    extra = set(listed) - expected
    repeated = {i for i in listed if listed.count(i) > 1}
    if missing or extra or repeated:
        parts = []
        if missing:
            parts.append(f"missing {describe(missing)}")
        if extra:
            parts.append(f"wrongly selected {describe(extra)}")
        if repeated:
            parts.append(f"listed more than once {describe(repeated)}")
        checks.append(fail("selection", "; ".join(parts) + f" (expected {len(expected)} students)"))
    else:
        checks.append(ok("selection", f"exactly the {len(expected)} qualifying students"))
    wrong_names = [
        f"{_id_key(r)} named {(r[1] if len(r) > 1 else '')!r}"
        for r in body
        if _id_key(r) in key["names"] and (len(r) < 2 or r[1] != key["names"][_id_key(r)])
    ]
    if wrong_names:
        checks.append(fail("names", "wrong name for " + describe(wrong_names)))
    else:
        checks.append(ok("names", "every listed ID has its student's name"))
    return checks


def _read_many(call: ToolCaller, paths: list[str]) -> list[str]:
    """Contents of ``paths`` via ``read_multiple_files``, in batches of :data:`_BATCH`."""
    texts: list[str] = []
    for start in range(0, len(paths), _BATCH):
        batch = paths[start : start + _BATCH]
        chunks = call("read_multiple_files", paths=batch).text.split("\n---\n")
        if len(chunks) != len(batch):
            raise RuntimeError(f"read_multiple_files returned {len(chunks)} parts for {len(batch)}")
        for path, chunk in zip(batch, chunks, strict=True):
            prefix = f"{path}:\n"
            if not chunk.startswith(prefix):
                raise RuntimeError(f"cannot read {path}: {chunk[:200]}")
            texts.append(chunk[len(prefix) :])
    return texts


def _student_folders(call: ToolCaller, root: str) -> list[str]:
    return [name for is_dir, name in list_entries(call, join(root, STUDENTS_DIR)) if is_dir]


def _ref_english(call: ToolCaller) -> None:
    root = workspace_root(call)
    folders = _student_folders(call, root)
    paths = [join(root, STUDENTS_DIR, f, name) for f in folders for name in (BASIC_INFO, LETTER)]
    texts = _read_many(call, paths)
    rows = ["student_id,name"]
    for i in range(0, len(texts), 2):
        info = dict(line.split(": ", 1) for line in texts[i].splitlines() if ": " in line)
        rating = re.search(r"talent in English as (\w+)", texts[i + 1])
        if int(info["English score"]) >= 90 and rating and rating.group(1) == "exceptional":
            rows.append(f"{info['Student ID']},{info['Name']}")
    write_lines(call, join(root, ENGLISH_OUTPUT), rows)


ENGLISH_TALENT = register(
    FsTaskSpec(
        category="student_database",
        name="english_talent",
        instruction=(
            "The folder `students/` holds one sub-folder per student ({students} students in "
            "all). Each sub-folder contains `basic_info.txt` (the student's ID, name, scores and "
            "other details) and `recommendation_letter.txt` (a letter from a teacher). Select "
            "every student who qualifies for the advanced English programme: the English score "
            "in their basic_info.txt is 90 or higher, AND their recommendation letter rates their "
            "talent in English as exceptional (praise for other subjects does not count). Write "
            "the result to `english_talent.csv` in the workspace root: the header line "
            "`student_id,name`, then one line per selected student with the student ID (such as "
            "S0042) and the full name exactly as written in basic_info.txt, in any order. Do not "
            "change any other file."
        ),
        generate=_gen_english,
        verify=_verify_english,
        reference=_ref_english,
        default_params=dict(_POOL_DEFAULTS),
        check_params=_check_pool_params,
    )
)


# ------------------------------------------------------------------------------ grade_based_score


def _gen_grades(rng: random.Random, workspace: Path, params: Mapping[str, Any]) -> AnswerKey:
    students = _subset(rng, params)
    write_students(workspace, students, roster=True)
    table = {
        s.student_id: {"name": s.name, "average": s.average, "grade": letter_grade(s.average)}
        for s in students
    }
    counts = {g: sum(1 for row in table.values() if row["grade"] == g) for g in GRADES}
    return {"students": table, "counts": counts}


def _verify_grades(workspace: Path, key: AnswerKey) -> list[Check]:
    table: dict[str, dict[str, Any]] = key["students"]
    checks: list[Check] = []
    text, why = read_output(workspace, GRADES_OUTPUT)
    if text is None:
        checks.append(fail("grades_file", why))
    else:
        checks.append(ok("grades_file", f"{GRADES_OUTPUT} found"))
        checks.extend(_grade_rows(parse_csv(text), table))
    checks.append(_summary_check(workspace, key["counts"]))
    return checks


def _grade_rows(rows: list[list[str]], table: dict[str, dict[str, Any]]) -> list[Check]:
    header = ["student_id", "name", "average", "grade"]
    bad_header = _header_check(rows, header, GRADES_OUTPUT)
    body = rows[1:] if bad_header is None else [r for r in rows if _id_key(r) in table]
    seen: dict[str, list[str]] = {}
    for row in body:
        seen.setdefault(_id_key(row), row)
    missing = set(table) - set(seen)
    unknown = set(seen) - set(table)
    coverage = (
        fail("coverage", f"missing {describe(missing)}; unknown IDs {describe(unknown)}")
        if missing or unknown
        else ok("coverage", f"all {len(table)} students, no others")
    )
    wrong_avg: list[str] = []
    wrong_grade: list[str] = []
    for sid, row in sorted(seen.items()):
        if sid not in table:
            continue
        truth = table[sid]
        try:
            given = float(row[2])
        except (IndexError, ValueError):
            wrong_avg.append(f"{sid} has no number ({row[2:3]})")
        else:
            if abs(given - truth["average"]) > 0.006:
                wrong_avg.append(f"{sid}: {given} instead of {truth['average']:.2f}")
        grade = row[3].upper() if len(row) > 3 else ""
        if grade != truth["grade"]:
            wrong_grade.append(f"{sid}: {grade or 'nothing'} instead of {truth['grade']}")
    return [
        bad_header or ok("header"),
        coverage,
        fail("averages", f"{len(wrong_avg)} wrong: {describe(wrong_avg, 3)}")
        if wrong_avg
        else ok("averages", "every listed average is right to two decimals"),
        fail("grades", f"{len(wrong_grade)} wrong: {describe(wrong_grade, 3)}")
        if wrong_grade
        else ok("grades", "every listed grade is right"),
    ]


def _summary_check(workspace: Path, counts: Mapping[str, int]) -> Check:
    text, why = read_output(workspace, SUMMARY_OUTPUT)
    if text is None:
        return fail("summary", why)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return fail("summary", f"{SUMMARY_OUTPUT} is not valid JSON: {exc}")
    if not isinstance(data, dict):
        return fail("summary", f"{SUMMARY_OUTPUT} is not a JSON object")
    wrong = [
        f"{g}: {data.get(g)!r} instead of {counts[g]}"
        for g in GRADES
        if not (isinstance(data.get(g), int) and data.get(g) == counts[g])
    ]
    extra = sorted(set(data) - set(GRADES))
    if extra:
        wrong.append(f"unexpected keys {extra}")
    if wrong:
        return fail("summary", "; ".join(wrong))
    return ok("summary", "grade counts are right")


def _ref_grades(call: ToolCaller) -> None:
    root = workspace_root(call)
    lines = read_text(call, join(root, ROSTER)).splitlines()
    out = ["student_id,name,average,grade"]
    counts = dict.fromkeys(GRADES, 0)
    for line in lines[1:]:
        if not line.strip():
            continue
        fields = line.split(",")
        sid, name = fields[0], fields[1]
        math, english, science = (int(v) for v in fields[-4:-1])  # the address sits in between
        average = (math + english + science) / 3
        grade = letter_grade(average)
        counts[grade] += 1
        out.append(f"{sid},{name},{average:.2f},{grade}")
    write_text(call, join(root, GRADES_OUTPUT), "\n".join(out) + "\n")
    write_text(call, join(root, SUMMARY_OUTPUT), json.dumps(counts, indent=2) + "\n")


GRADE_BASED_SCORE = register(
    FsTaskSpec(
        category="student_database",
        name="grade_based_score",
        instruction=(
            "The file `roster.csv` in the workspace root lists {students} students, one per "
            "line after a header, with the columns "
            "student_id,name,class,address,math,english,science,email. Values are not quoted. "
            "For each student compute the average of the math, english and science scores and "
            "the letter grade of that unrounded average: A for 90 or more, B for 80 up to 90, C "
            "for 70 up to 80, D for 60 up to 70, F below 60. Write `grades.csv` in the workspace "
            "root with the header `student_id,name,average,grade` and one line per student (any "
            "order), the average rounded to two decimals. Also write `grade_summary.json` in the "
            'workspace root: a JSON object mapping each of "A", "B", "C", "D", "F" to the number '
            "of students with that grade (0 when none)."
        ),
        generate=_gen_grades,
        verify=_verify_grades,
        reference=_ref_grades,
        default_params=dict(_POOL_DEFAULTS),
        check_params=_check_pool_params,
    )
)


# ------------------------------------------------------------------------------ duplicate_name


def _gen_duplicates(rng: random.Random, workspace: Path, params: Mapping[str, Any]) -> AnswerKey:
    count = int_param(params, "students", _DEFAULT_STUDENTS, 2, MAX_STUDENTS)
    # Its own cohort per seed: shared names are drawn into it (a pool subset might split them).
    students = make_students(rng, count, duplicate_groups=max(1, count // 20))
    write_students(workspace, students, roster=True)
    by_name: dict[str, list[str]] = {}
    for s in students:
        by_name.setdefault(s.name, []).append(s.student_id)
    return {"duplicates": {n: sorted(ids) for n, ids in sorted(by_name.items()) if len(ids) > 1}}


_DUP_LINE = re.compile(r"^\s*(?P<name>[^:]+?)\s*:\s*(?P<ids>.*?)\s*$")


def _verify_duplicates(workspace: Path, key: AnswerKey) -> list[Check]:
    expected: dict[str, list[str]] = key["duplicates"]
    text, why = read_output(workspace, DUPLICATES_OUTPUT)
    if text is None:
        return [fail("output_exists", why)]
    checks = [ok("output_exists", f"{DUPLICATES_OUTPUT} found")]
    found: dict[str, list[str]] = {}
    malformed: list[str] = []
    for line in (ln for ln in text.split("\n") if ln.strip()):
        match = _DUP_LINE.match(line)
        if match is None:
            malformed.append(line.strip()[:60])
            continue
        ids = [i.strip().upper() for i in match["ids"].split(",") if i.strip()]
        found[" ".join(match["name"].split())] = ids
    checks.append(
        fail("format", f"lines not of the form 'First Last: ID, ID': {describe(malformed, 3)}")
        if malformed
        else ok("format", "every line is 'Name: IDs'")
    )
    missing = set(expected) - set(found)
    extra = set(found) - set(expected)
    checks.append(
        fail("names", f"missing {describe(missing)}; not duplicated {describe(extra)}")
        if missing or extra
        else ok("names", f"exactly the {len(expected)} shared names")
    )
    wrong_ids = [
        f"{n}: {', '.join(found[n])} instead of {', '.join(ids)}"
        for n, ids in expected.items()
        if n in found and sorted(found[n]) != ids
    ]
    checks.append(
        fail("ids", describe(wrong_ids, 3))
        if wrong_ids
        else ok("ids", "each listed name has exactly its students' IDs")
    )
    return checks


def _ref_duplicates(call: ToolCaller) -> None:
    root = workspace_root(call)
    by_name: dict[str, list[str]] = {}
    for folder in _student_folders(call, root):
        sid, first, last = folder.split("_", 2)
        by_name.setdefault(f"{first} {last}", []).append(sid)
    lines = [f"{n}: {', '.join(sorted(ids))}" for n, ids in sorted(by_name.items()) if len(ids) > 1]
    write_text(call, join(root, DUPLICATES_OUTPUT), "\n".join(lines) + "\n")


DUPLICATE_NAME = register(
    FsTaskSpec(
        category="student_database",
        name="duplicate_name",
        instruction=(
            "Do not write or run any Python code for this task: use the filesystem tools "
            "directly. The folder `students/` holds one sub-folder per student ({students} "
            "students), named `<student ID>_<first name>_<last name>`, for example "
            "`S0007_Maya_Rossi`. Some students share the same full name. Find every full name "
            "that belongs to more than one student and write `duplicate_names.txt` in the "
            "workspace root with one line per such name, in the form `First Last: ID1, ID2` "
            "(the IDs of all students with that name, in ascending order; lines in any order). "
            "List no other names."
        ),
        generate=_gen_duplicates,
        verify=_verify_duplicates,
        reference=_ref_duplicates,
        python_allowed=False,
        default_params={"students": _DEFAULT_STUDENTS},
        check_params=range_checker({"students": (2, MAX_STUDENTS)}, {"students": 150}),
    )
)
