"""Tests of the papers tasks: references through the real server, wrong outputs, seeds."""

from __future__ import annotations

import random
import re
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
from controlscope.envs.filesystem.tasks import papers as papers_module

AUTHORS = "papers/author_folders"
MATH = "papers/find_math_paper"
LEGACY = "papers/organize_legacy_papers"
TASKS = [AUTHORS, MATH, LEGACY]


@pytest.fixture(scope="module")
def solved(tmp_path_factory: pytest.TempPathFactory) -> Solved:
    return Solved(tmp_path_factory.mktemp("solved"))


class TestCommon(SolvedTaskTests):
    """The shared tests of :class:`SolvedTaskTests`, on the papers tasks."""

    TASKS = TASKS
    MAX_CALLS = 80


@pytest.mark.parametrize("task_id", TASKS)
@pytest.mark.parametrize("seed", [4, 9])
def test_reference_passes_on_other_seeds(task_id: str, seed: int, tmp_path: Path) -> None:
    assert_passes_on_seed(task_id, seed, tmp_path)


def test_registration_and_params(tmp_path: Path) -> None:
    assert papers_module.CATEGORY == "papers"
    for task_id in TASKS:
        spec = REGISTRY[task_id]
        assert spec.python_allowed and spec.template == task_id
        spec.instruction.format(**spec.default_params)
    for task_id in (AUTHORS, LEGACY):
        spec = REGISTRY[task_id]
        assert spec.check_params is not None
        spec.check_params({"papers": 20})
        with pytest.raises(TaskError, match="papers"):
            spec.check_params({"papers": 2})
        with pytest.raises(TaskError, match="papers"):
            spec.generate(random.Random(0), tmp_path, {"papers": "many"})


@pytest.mark.parametrize("count", [8, 30])
def test_legacy_scales_with_papers(count: int, tmp_path: Path) -> None:
    spec = REGISTRY[LEGACY]
    key = spec.generate(random.Random(1), tmp_path, {"papers": count})
    assert len(list((tmp_path / "legacy").iterdir())) == count == len(key["rows"])


# --- author_folders -------------------------------------------------------------------------


def test_author_key_matches_meta_tags(tmp_path: Path) -> None:
    """Recount authors straight from the generated HTML, independently of the generator."""
    spec = REGISTRY[AUTHORS]
    key = spec.generate(random.Random(3), tmp_path, {"papers": 12})
    counts: dict[str, list[str]] = {}
    for path in sorted((tmp_path / "papers").iterdir()):
        for name in re.findall(r'name="citation_author" content="([^"]+)"', path.read_text()):
            counts.setdefault(name.replace(" ", "_"), []).append(path.name)
    assert key["folders"] == {a: sorted(p) for a, p in counts.items() if len(p) >= 2}
    assert sum(1 for p in counts.values() if len(p) == 1) >= 2, "single-paper authors exist"


def _authors_missing(ws: Path, key: AnswerKey) -> None:
    shutil.rmtree(ws / "by_author")


def _authors_single_folder(ws: Path, key: AnswerKey) -> None:
    single = key["single_authors"][0].replace(" ", "_")
    (ws / "by_author" / single).mkdir()


def _authors_drop_paper(ws: Path, key: AnswerKey) -> None:
    folder, names = sorted(key["folders"].items())[0]
    (ws / "by_author" / folder / names[0]).unlink()


def _authors_edit_copy(ws: Path, key: AnswerKey) -> None:
    folder, names = sorted(key["folders"].items())[-1]
    (ws / "by_author" / folder / names[-1]).write_text("<html></html>\n")


def _authors_move_not_copy(ws: Path, key: AnswerKey) -> None:
    _, names = sorted(key["folders"].items())[0]
    (ws / "papers" / names[0]).unlink()


def _authors_space_name(ws: Path, key: AnswerKey) -> None:
    folder = sorted(key["folders"])[0]
    (ws / "by_author" / folder).rename(ws / "by_author" / folder.replace("_", " "))


test_authors_wrong_outputs = wrong_outputs_test(
    AUTHORS,
    [
        (_authors_missing, "author_directories", "missing"),
        (_authors_missing, "copies_identical", "no copied paper"),
        (_authors_single_folder, "no_extra_directories", "should not exist"),
        (_authors_drop_paper, "directory_contents", "missing"),
        (_authors_edit_copy, "copies_identical", "changed content"),
        (_authors_move_not_copy, "papers_unchanged", "is missing"),
        (_authors_space_name, "no_extra_directories", " "),
    ],
)


# --- find_math_paper ------------------------------------------------------------------------


def _fits(text: str) -> bool:
    authors = re.findall(r'name="citation_author"', text)
    year = int(re.findall(r'citation_publication_date" content="(\d+)"', text)[0])
    abstract = re.findall(r'<p class="abstract">(.*?)</p>', text)[0].lower()
    words = set(re.findall(r"[a-z]+", abstract))
    return len(authors) == 1 and year >= 2019 and {"theorem", "prime"} <= words


def test_math_exactly_one_paper_fits(tmp_path: Path) -> None:
    spec = REGISTRY[MATH]
    for seed in range(8):
        ws = tmp_path / str(seed)
        ws.mkdir()
        key = spec.generate(random.Random(seed), ws, {})
        fitting = [f"papers/{p.name}" for p in (ws / "papers").iterdir() if _fits(p.read_text())]
        assert fitting == [key["target"]]
        near = [t for r, t in key["files"].items() if r != key["target"] and "theorem" in t]
        assert len(near) >= 3, "near misses: multi-author, old, theorem without prime"


def _math_missing(ws: Path, key: AnswerKey) -> None:
    (ws / "papers" / "answer.html").unlink()


def _math_wrong_paper(ws: Path, key: AnswerKey) -> None:
    (ws / "papers" / "answer.html").rename(ws / key["target"])
    decoy = next(r for r, t in key["files"].items() if r != key["target"] and "main theorem" in t)
    (ws / decoy).rename(ws / "papers" / "answer.html")


def _math_copied(ws: Path, key: AnswerKey) -> None:
    shutil.copy(ws / "papers" / "answer.html", ws / key["target"])


def _math_extra_file(ws: Path, key: AnswerKey) -> None:
    (ws / "papers" / "notes.txt").write_text("found it\n")


test_math_wrong_outputs = wrong_outputs_test(
    MATH,
    [
        (_math_missing, "answer_file", "does not exist"),
        (_math_wrong_paper, "right_paper", "it is papers/"),
        (_math_wrong_paper, "other_papers_unchanged", "is missing"),
        (_math_copied, "renamed_not_copied", "still exists"),
        (_math_extra_file, "no_extra_files", "notes.txt"),
    ],
)


# --- organize_legacy_papers -----------------------------------------------------------------


def test_legacy_uses_both_header_styles(solved: Solved) -> None:
    _, key, _ = solved.get(LEGACY)
    texts = list(key["files"].values())
    assert any(t.startswith("Title: ") for t in texts)
    assert any(t.startswith("% ") for t in texts)
    venues_in_files = set(re.findall(r"% venue = (\w+)", "".join(texts)))
    assert venues_in_files and all(v == v.lower() for v in venues_in_files)


def _index(ws: Path) -> Path:
    return ws / "organized" / "index.csv"


def _legacy_missing_index(ws: Path, key: AnswerKey) -> None:
    _index(ws).unlink()


def _legacy_lowercase_venue(ws: Path, key: AnswerKey) -> None:
    dst = sorted(key["moves"].values())[0]
    year, venue, name = dst.split("/")[1:]
    target = ws / "organized" / year / venue.lower()
    target.mkdir(parents=True, exist_ok=True)
    (ws / dst).rename(target / name)


def _legacy_wrong_year(ws: Path, key: AnswerKey) -> None:
    year, venue, title, name = key["rows"][0]
    text = _index(ws).read_text()
    _index(ws).write_text(
        text.replace(f"{year},{venue},{title},{name}", f"{int(year) + 1},{venue},{title},{name}")
    )


def _legacy_reversed(ws: Path, key: AnswerKey) -> None:
    lines = _index(ws).read_text().splitlines()
    _index(ws).write_text("\n".join([lines[0], *reversed(lines[1:])]) + "\n")


def _legacy_left_behind(ws: Path, key: AnswerKey) -> None:
    src, dst = sorted(key["moves"].items())[0]
    shutil.copy(ws / dst, ws / src)


test_legacy_wrong_outputs = wrong_outputs_test(
    LEGACY,
    [
        (_legacy_missing_index, "index_rows", "does not exist"),
        (_legacy_missing_index, "index_header", "does not exist"),
        (_legacy_lowercase_venue, "papers_placed", "is missing"),
        (_legacy_lowercase_venue, "no_stray_files", "unexpected files"),
        (_legacy_wrong_year, "index_rows", "missing or wrong rows"),
        (_legacy_reversed, "index_order", "sorted"),
        (_legacy_left_behind, "legacy_emptied", "still in legacy/"),
    ],
)


def test_legacy_index_accepts_quoted_cells(solved: Solved, tmp_path: Path) -> None:
    ws, key = solved.copy(LEGACY, tmp_path)
    rows = ['"year","venue","title","file"'] + [
        ",".join(f'"{c}"' for c in row) for row in key["rows"]
    ]
    _index(ws).write_text("\r\n".join(rows) + "\r\n")
    assert not failed(REGISTRY[LEGACY].verify(ws, key))
