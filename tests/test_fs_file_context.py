"""Tests of the file-context tasks: references through the real server, wrong outputs, seeds."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from _fs_task_support import (
    Solved,
    SolvedTaskTests,
    assert_passes_on_seed,
    failed,
    wrong_outputs_test,
)
from controlscope.core import AnswerKey, TaskError
from controlscope.envs.filesystem.registry import REGISTRY
from controlscope.envs.filesystem.tasks import file_context

TASKS = [
    "file_context/duplicates_searching",
    "file_context/file_merging",
    "file_context/file_splitting",
    "file_context/pattern_matching",
    "file_context/uppercase",
]


@pytest.fixture(scope="module")
def solved(tmp_path_factory: pytest.TempPathFactory) -> Solved:
    return Solved(tmp_path_factory.mktemp("solved"))


class TestCommon(SolvedTaskTests):
    """The shared tests of :class:`SolvedTaskTests`, on the file-context tasks."""

    TASKS = TASKS
    MAX_CALLS = 60
    MIN_CHECKS = 4


@pytest.mark.parametrize("task_id", TASKS)
def test_reference_passes_on_another_seed(task_id: str, tmp_path: Path) -> None:
    assert_passes_on_seed(task_id, 11, tmp_path)


def test_registration() -> None:
    for task_id in TASKS:
        spec = REGISTRY[task_id]
        assert spec.category == "file_context"
        assert spec.template == task_id
        assert spec.python_allowed == (task_id != "file_context/pattern_matching")
        spec.instruction.format(**spec.default_params)  # placeholders are all filled


def test_bad_params_are_rejected(tmp_path: Path) -> None:
    spec = REGISTRY["file_context/duplicates_searching"]
    assert spec.check_params is not None
    spec.check_params({"files": 20})
    for bad in ({"files": 3}, {"files": "16"}, {"files": True}, {"filez": 16}):
        with pytest.raises(TaskError, match=r"files|filez"):
            spec.check_params(bad)
    with pytest.raises(TaskError):
        spec.generate(random.Random(0), tmp_path, {"files": 1000})
    assert not any(tmp_path.iterdir())


# --- duplicates_searching -------------------------------------------------------------------

DUP = "file_context/duplicates_searching"


def test_duplicates_key_is_consistent(solved: Solved) -> None:
    _, key, _ = solved.get(DUP)
    files = key["files"]
    for group in key["groups"]:
        assert len({files[n] for n in group}) == 1
    contents = [files[n] for n in files if n not in key["duplicates"]]
    assert len(contents) == len(set(contents)), "after moving, every content is unique"


def _remove_dir(rel: str):  # type: ignore[no-untyped-def]
    def mutate(ws: Path, key: AnswerKey) -> None:
        shutil.rmtree(ws / rel)

    return mutate


def _dup_move_keeper(ws: Path, key: AnswerKey) -> None:
    keeper = key["keepers"][0]
    (ws / keeper).rename(ws / "duplicates" / keeper)


def _dup_edit_moved(ws: Path, key: AnswerKey) -> None:
    path = ws / "duplicates" / key["duplicates"][0]
    path.write_text(path.read_text().strip() + "\n\n")


def _dup_near_duplicate_moved(ws: Path, key: AnswerKey) -> None:
    files = key["files"]
    near = next(
        n
        for n in sorted(files)
        if n not in key["duplicates"]
        and n not in key["keepers"]
        and any(files[n].strip() == files[k].strip() for k in key["keepers"])
    )
    (ws / near).rename(ws / "duplicates" / near)


test_duplicates_wrong_outputs = wrong_outputs_test(
    DUP,
    [
        (_remove_dir("duplicates"), "duplicates_directory", "does not exist"),
        (_remove_dir("duplicates"), "duplicates_moved", "is missing"),
        (_dup_move_keeper, "first_copies_kept", "is missing"),
        (_dup_move_keeper, "no_wrong_moves", "not duplicates"),
        (_dup_edit_moved, "duplicates_moved", "changed content"),
        (_dup_near_duplicate_moved, "unique_files_kept", "is missing"),
    ],
)


# --- file_merging ---------------------------------------------------------------------------

MERGE = "file_context/file_merging"


def _merge_missing(ws: Path, key: AnswerKey) -> None:
    (ws / "merged_content.txt").unlink()


def _merge_wrong_file(ws: Path, key: AnswerKey) -> None:
    md = next(n for n in key["files"] if n.endswith(".md"))
    text = (ws / "merged_content.txt").read_text()
    first = key["order"][0]
    text = text.replace(
        f"=== {first} ===\n{key['files'][first]}", f"=== {md} ===\n{key['files'][md]}"
    )
    (ws / "merged_content.txt").write_text(text)


def _merge_swap(ws: Path, key: AnswerKey) -> None:
    a, b = key["order"][:2]
    parts = [f"=== {n} ===\n{key['files'][n]}" for n in [b, a, *key["order"][2:]]]
    (ws / "merged_content.txt").write_text("".join(parts))


def _merge_edit_section(ws: Path, key: AnswerKey) -> None:
    path = ws / "merged_content.txt"
    lines = path.read_text().split("\n")
    lines[1] = lines[1].upper()
    path.write_text("\n".join(lines))


test_merging_wrong_outputs = wrong_outputs_test(
    MERGE,
    [
        (_merge_missing, "merged_file", "does not exist"),
        (_merge_wrong_file, "selected_files", "should not be merged"),
        (_merge_swap, "file_order", "expected"),
        (_merge_edit_section, "section_contents", "content differs"),
    ],
)


def test_merging_picks_txt_files_by_size(solved: Solved) -> None:
    _, key, _ = solved.get(MERGE)
    sizes = {n: len(t.encode()) for n, t in key["files"].items() if n.endswith(".txt")}
    assert len(set(sizes.values())) == len(sizes), "sizes are distinct"
    assert key["order"] == sorted(sizes, key=sizes.__getitem__)[:5]
    smallest_other = min(len(t) for n, t in key["files"].items() if not n.endswith(".txt"))
    assert smallest_other < min(sizes.values()), "the decoys are smaller than every .txt file"


# --- file_splitting -------------------------------------------------------------------------

SPLIT = "file_context/file_splitting"


def _split_missing_part(ws: Path, key: AnswerKey) -> None:
    (ws / "split" / "part_03.txt").unlink()


def _split_shift_line(ws: Path, key: AnswerKey) -> None:
    one = (ws / "split/part_01.txt").read_text().splitlines()
    two = (ws / "split/part_02.txt").read_text().splitlines()
    (ws / "split/part_01.txt").write_text("\n".join(one[:-1]) + "\n")
    (ws / "split/part_02.txt").write_text("\n".join([one[-1], *two]) + "\n")


def _split_original_moved(ws: Path, key: AnswerKey) -> None:
    (ws / "large_file.txt").rename(ws / "split" / "large_file.txt")


test_splitting_wrong_outputs = wrong_outputs_test(
    SPLIT,
    [
        (_remove_dir("split"), "split_directory", "does not exist"),
        (_split_missing_part, "part_files", "missing: split/part_03.txt"),
        (_split_missing_part, "part_contents", "part_03.txt does not exist"),
        (_split_shift_line, "part_contents", "split/part_01.txt has"),
        (_split_original_moved, "original_unchanged", "large_file.txt is missing"),
        (_split_original_moved, "part_files", "unexpected: split/large_file.txt"),
    ],
)


# --- pattern_matching -----------------------------------------------------------------------

PATTERN = "file_context/pattern_matching"


def test_pattern_has_decoys(solved: Solved) -> None:
    _, key, _ = solved.get(PATTERN)
    texts = key["files"]
    assert 3 <= len(key["matches"]) <= 6
    assert all(file_context.MARKER in texts[m] for m in key["matches"])
    others = [t for r, t in texts.items() if r not in key["matches"]]
    assert not any(file_context.MARKER in t for t in others)
    assert sum(1 for t in others if "fixme" in t.lower()) >= 3, "near misses exist"


def _pattern_missing(ws: Path, key: AnswerKey) -> None:
    (ws / "pattern_matches.txt").unlink()


def _pattern_drop_one(ws: Path, key: AnswerKey) -> None:
    (ws / "pattern_matches.txt").write_text("".join(f"{m}\n" for m in key["matches"][1:]))


def _pattern_add_decoy(ws: Path, key: AnswerKey) -> None:
    decoy = next(r for r, t in key["files"].items() if "FIXME [urgent]" in t)
    listed = sorted([*key["matches"], decoy])
    (ws / "pattern_matches.txt").write_text("".join(f"{m}\n" for m in listed))


def _pattern_unsorted(ws: Path, key: AnswerKey) -> None:
    listed = sorted(key["matches"], reverse=True)
    (ws / "pattern_matches.txt").write_text("".join(f"{m}\n" for m in listed))


test_pattern_wrong_outputs = wrong_outputs_test(
    PATTERN,
    [
        (_pattern_missing, "matches_file", "does not exist"),
        (_pattern_drop_one, "all_matches_listed", "not listed"),
        (_pattern_add_decoy, "no_false_matches", "listed but not matching"),
        (_pattern_unsorted, "sorted_order", "sorted order"),
    ],
)


def test_pattern_accepts_leading_dot_slash(solved: Solved, tmp_path: Path) -> None:
    ws, key = solved.copy(PATTERN, tmp_path)
    (ws / "pattern_matches.txt").write_text("".join(f"./{m}\r\n" for m in key["matches"]))
    assert not failed(REGISTRY[PATTERN].verify(ws, key))


# --- uppercase ------------------------------------------------------------------------------

UPPER = "file_context/uppercase"


def _upper_missing_counts(ws: Path, key: AnswerKey) -> None:
    (ws / "uppercase" / "word_counts.csv").unlink()


def _upper_wrong_count(ws: Path, key: AnswerKey) -> None:
    path = ws / "uppercase" / "word_counts.csv"
    first = key["listed"][0]
    right = f"{first},{key['words'][first]}"
    path.write_text(path.read_text().replace(right, f"{first},{key['words'][first] + 1}"))


def _upper_lower_copy(ws: Path, key: AnswerKey) -> None:
    name = key["listed"][-1]
    (ws / "uppercase" / name).write_text(key["files"][name])


def _upper_extra_copy(ws: Path, key: AnswerKey) -> None:
    extra = next(n for n in key["files"] if n not in key["listed"] and n != "convert_list.txt")
    (ws / "uppercase" / extra).write_text(key["files"][extra].upper())


def _upper_original_changed(ws: Path, key: AnswerKey) -> None:
    name = key["listed"][0]
    (ws / name).write_text(key["files"][name].upper())


test_uppercase_wrong_outputs = wrong_outputs_test(
    UPPER,
    [
        (_upper_missing_counts, "word_counts_file", "does not exist"),
        (_upper_wrong_count, "word_counts_values", "expected"),
        (_upper_lower_copy, "uppercase_copies", "not the upper-case text"),
        (_upper_extra_copy, "only_listed_converted", "unexpected files"),
        (_upper_original_changed, "originals_unchanged", "changed content"),
        (_remove_dir("uppercase"), "uppercase_directory", "does not exist"),
    ],
)


def test_verifiers_survive_junk_outputs(solved: Solved, tmp_path: Path) -> None:
    """Outputs that are directories or binary never crash a verifier; they fail its checks."""
    cases = {
        MERGE: "merged_content.txt",
        PATTERN: "pattern_matches.txt",
        UPPER: "uppercase/word_counts.csv",
    }
    for i, (task_id, rel) in enumerate(cases.items()):
        for j, junk in enumerate(("dir", b"\xff\xfe\x00garbage", b'=== \n,,,\n"')):
            ws, key = solved.copy(task_id, tmp_path / f"{i}-{j}")
            (ws / rel).unlink()
            if junk == "dir":
                (ws / rel).mkdir()
            else:
                assert isinstance(junk, bytes)
                (ws / rel).write_bytes(junk)
            assert failed(REGISTRY[task_id].verify(ws, key))
