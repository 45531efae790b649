"""The filesystem environment: interface, errors, workspaces and their hash, determinism, CLI."""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from controlscope.cli._tasks import add_arguments, main
from controlscope.core import Check, TaskError
from controlscope.envs import environment_names, get_environment
from controlscope.envs._base import Environment
from controlscope.envs.filesystem.environment import FilesystemEnvironment, fill_instruction
from controlscope.envs.filesystem.registry import FsTaskSpec
from controlscope.envs.filesystem.server import (
    NODE_MODULES_ENV,
    find_server_script,
    normalise_observation,
)
from controlscope.envs.filesystem.testing import (
    ReferenceToolError,
    run_reference,
    solve_reference,
)
from controlscope.envs.filesystem.workspace import HISTORICAL_MARGIN_S, Workspace, content_hash
from controlscope.review._views import clip

CATEGORIES = {
    "desktop",
    "desktop_template",
    "file_context",
    "file_property",
    "folder_structure",
    "legal_document",
    "papers",
    "student_database",
}


@pytest.fixture(scope="module")
def env() -> FilesystemEnvironment:
    return FilesystemEnvironment()


# ------------------------------------------------------------------------------ interface


def test_implements_environment(env: FilesystemEnvironment) -> None:
    assert isinstance(env, Environment)
    assert env.name == "filesystem"
    assert get_environment("filesystem").name == "filesystem"
    assert environment_names() == ["alfworld", "apps", "appworld", "filesystem"]


def test_task_list_shape(env: FilesystemEnvironment) -> None:
    tasks = env.tasks()
    ids = [t.id for t in tasks]
    assert ids == sorted(ids)
    assert len(ids) == len(set(ids))
    assert {t.category for t in tasks} <= CATEGORIES
    assert {"student_database", "file_property"} <= {t.category for t in tasks}
    for t in tasks:
        assert t.env == "filesystem"
        assert t.id.startswith(t.category + "/")
        assert t.instruction and "{" + next(iter(t.params), "none") + "}" not in t.instruction
    restricted = {t.id for t in tasks if not t.python_allowed}
    assert "student_database/duplicate_name" in restricted


def test_suite_covers_the_issue(env: FilesystemEnvironment) -> None:
    """At least 24 tasks in the 8 categories, four of them restricting Python (paper B)."""
    tasks = env.tasks()
    assert len(tasks) >= 24
    assert {t.category for t in tasks} == CATEGORIES
    assert sum(not t.python_allowed for t in tasks) == 4


def test_task_params_fill_instruction(env: FilesystemEnvironment) -> None:
    task = env.task("student_database/english_talent", students=25)
    assert task.params == {"students": 25, "pool": 0, "pool_size": 150}
    assert "25 students" in task.instruction
    assert "{students}" not in task.instruction
    default = env.task("student_database/english_talent")
    assert default.params == {"students": 150, "pool": 0, "pool_size": 150}
    assert fill_instruction('{"A": 1} for {n}', {"n": 3}) == '{"A": 1} for 3'


def test_unknown_task_lists_close_matches(env: FilesystemEnvironment) -> None:
    with pytest.raises(TaskError) as info:
        env.task("student_database/english_talents")
    assert "student_database/english_talent" in str(info.value)
    with pytest.raises(TaskError) as info:
        env.task("english_talent")
    assert "student_database/english_talent" in str(info.value)


@pytest.mark.parametrize(
    ("params", "fragment"),
    [
        ({"pupils": 3}, "pupils"),
        ({"students": 0}, "between"),
        ({"students": 10**6}, "between"),
        ({"students": "75"}, "integer"),
        ({"students": True}, "integer"),
    ],
)
def test_bad_params_rejected(
    env: FilesystemEnvironment, params: dict[str, Any], fragment: str
) -> None:
    with pytest.raises(TaskError, match=fragment):
        env.task("student_database/english_talent", **params)


@pytest.mark.parametrize("seed", [-1, 1.5, "3", True, None, 2**64])
def test_bad_seed_rejected_before_anything_is_written(
    env: FilesystemEnvironment, tmp_path: Path, seed: Any
) -> None:
    task = env.task("file_property/size_classification")
    with pytest.raises(TaskError, match="seed"):
        env.setup(task, seed, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_setup_rejects_bad_workspaces(env: FilesystemEnvironment, tmp_path: Path) -> None:
    task = env.task("file_property/size_classification", files=4)
    with pytest.raises(TaskError, match="does not exist"):
        env.setup(task, 0, tmp_path / "absent")
    (tmp_path / "f").write_text("x")
    with pytest.raises(TaskError, match="not a directory"):
        env.setup(task, 0, tmp_path / "f")
    with pytest.raises(TaskError, match="not empty"):
        env.setup(task, 0, tmp_path)
    forged = task.model_copy(update={"params": {"files": -3, "levels": 1}})
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TaskError, match="between"):
        env.setup(forged, 0, empty)


def test_setup_is_deterministic_per_seed(env: FilesystemEnvironment) -> None:
    for task_id, params in [
        ("student_database/grade_based_score", {"students": 30}),
        ("file_property/time_classification", {}),
    ]:
        task = env.task(task_id, **params)
        digests: list[str] = []
        keys: list[Any] = []
        for seed in (7, 7, 8):
            with Workspace() as ws:
                keys.append(env.setup(task, seed, ws.path))
                digests.append(env.state_hash(task, ws.path))
        assert digests[0] == digests[1] and keys[0] == keys[1]
        assert digests[0] != digests[2] and keys[0] != keys[2]
        json.dumps(keys[0])  # the answer key is JSON-serialisable


# ------------------------------------------------------------------------------ verify


def test_verify_never_raises(env: FilesystemEnvironment, tmp_path: Path) -> None:
    for task in env.tasks():
        verdict = env.verify(task, tmp_path, {})
        assert not verdict.success, task.id
        assert verdict.checks and all(isinstance(c, Check) for c in verdict.checks)
    unknown = env.task("student_database/english_talent").model_copy(update={"id": "x/y"})
    verdict = env.verify(unknown, tmp_path, {})
    assert not verdict.success and "unknown filesystem task" in verdict.checks[0].reason


def test_verify_on_untouched_workspace_fails(env: FilesystemEnvironment) -> None:
    task = env.task("student_database/english_talent", students=10)
    with Workspace() as ws:
        key = env.setup(task, 1, ws.path)
        verdict = env.verify(task, ws.path, key)
    assert not verdict.success
    assert verdict.checks[0].name == "output_exists"
    assert "does not exist" in verdict.checks[0].reason


# ------------------------------------------------------------------------------ workspaces


def test_workspace_created_and_removed(tmp_path: Path) -> None:
    with Workspace(tmp_path / "runs", prefix="a b/c") as ws:
        assert ws.path.is_dir()
        assert ws.path.parent == (tmp_path / "runs").resolve()
        assert "/" not in ws.path.name and " " not in ws.path.name
        (ws.path / "x").mkdir()
        (ws.path / "x" / "f").write_text("data")
    assert not ws.path.exists()
    ws.remove()  # safe twice
    with Workspace.create() as other:
        assert other.path.is_dir() and other.path != ws.path
    assert not other.path.exists()


def test_workspace_that_cannot_be_created(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("in the way")
    with pytest.raises(TaskError, match="cannot create a task workspace"):
        Workspace(blocker)


def test_content_hash_names_bytes_and_dirs(tmp_path: Path) -> None:
    def tree(root: Path, content: str = "one", extra_dir: bool = False) -> Path:
        (root / "a").mkdir(parents=True)
        (root / "a" / "f.txt").write_text(content)
        (root / "g.txt").write_text("two")
        if extra_dir:
            (root / "empty").mkdir()
        return root

    base = content_hash(tree(tmp_path / "1"))
    assert len(base) == 64
    assert content_hash(tree(tmp_path / "2")) == base
    assert content_hash(tree(tmp_path / "3", content="ONE")) != base
    assert content_hash(tree(tmp_path / "4", extra_dir=True)) != base
    renamed = tree(tmp_path / "5")
    (renamed / "g.txt").rename(renamed / "h.txt")
    assert content_hash(renamed) != base
    with pytest.raises(TaskError):
        content_hash(tmp_path / "missing")


def test_content_hash_historical_mtimes(tmp_path: Path) -> None:
    old = 1_700_000_000
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        root.mkdir()
        (root / "dated.txt").write_text("x")
        (root / "fresh.txt").write_text("y")
    os.utime(a / "dated.txt", (old, old))
    os.utime(b / "dated.txt", (old + 3600, old + 3600))
    # a task-relevant (historical) time differs: only the time-aware hash sees it
    assert content_hash(a) == content_hash(b)
    assert content_hash(a, historical_mtimes=True) != content_hash(b, historical_mtimes=True)
    # files the run writes (recent times) never enter the hash
    os.utime(b / "dated.txt", (old, old))
    recent = os.stat(a / "fresh.txt").st_mtime
    os.utime(b / "fresh.txt", (recent - 600, recent - 600))
    assert content_hash(a, historical_mtimes=True) == content_hash(b, historical_mtimes=True)
    now = recent + HISTORICAL_MARGIN_S + 1
    assert content_hash(a, historical_mtimes=True, now=now) != content_hash(
        b, historical_mtimes=True, now=now
    )


# ------------------------------------------------------------------------------ server, testing


def test_start_server_confined_to_workspace(env: FilesystemEnvironment) -> None:
    with Workspace() as ws:
        (ws.path / "note.txt").write_text("hello")
        with env.start_server(ws.path) as server:
            assert server.call("read_text_file", {"path": "note.txt"}).text == "hello"
            assert server.call("read_text_file", {"path": "../../etc/hostname"}).is_error


def _file_infos(env: FilesystemEnvironment, seed: int) -> tuple[str, str, str]:
    """``get_file_info`` through the real server on a generated time-sensitive workspace: a
    file the generator dated, a file written now, and the dated file's content."""
    task = env.task("file_property/time_classification")
    with Workspace() as ws:
        key = env.setup(task, seed, ws.path)
        dated = key["files"][0]["path"]
        with env.start_server(ws.path) as server:
            server.call("write_file", {"path": "written_now.txt", "content": "x"})
            return (
                server.call("get_file_info", {"path": dated}).text,
                server.call("get_file_info", {"path": "written_now.txt"}).text,
                server.call("read_text_file", {"path": dated}).text,
            )


def test_normalise_observation_keeps_a_generators_historical_mtime(
    env: FilesystemEnvironment,
) -> None:
    """Paper A.4: "File-creation and access times receive explicit replay handling;
    task-relevant original modification times remain preserved." Two set-ups of the same
    seed a moment apart give other creation and access times, the same dated mtimes."""
    first = _file_infos(env, seed=4)
    time.sleep(1.1)  # whole seconds: the clock readings now differ
    second = _file_infos(env, seed=4)
    assert first[0] != second[0]  # the raw readings differ (creation and access)
    for dated, written, content in (first, second):
        masked = env.normalise_observation(dated)
        assert "created: <clock>" in masked and "accessed: <clock>" in masked
        modified = next(line for line in dated.splitlines() if line.startswith("modified: "))
        assert modified in masked and "GMT" in modified  # the generator's date is kept
        assert "size: " in masked  # the rest is kept
        assert env.normalise_observation(content) == content  # only clock readings
        # a file the run wrote carries the clock: all three readings are masked
        assert env.normalise_observation(written).count("<clock>") == 3
        as_json = env.normalise_observation(json.dumps({"info": dated}))  # a variable in a view
        assert json.loads(as_json)["info"] == masked
    assert env.normalise_observation(first[0]) == env.normalise_observation(second[0])
    # A changed historical mtime is still a difference (a run that broke the task's dates).
    other = _file_infos(env, seed=5)[0]
    assert env.normalise_observation(other) != env.normalise_observation(first[0])


def test_normalise_observation_dates_clock_readings_from_the_runs_start() -> None:
    """A replay normalises its recording's text with the recording's start: a file that run
    wrote days ago is still that run's clock, a date long before it is the task's."""
    zone = "GMT+0000 (Coordinated Universal Time)"
    text = f"modified: Wed Jan 14 2026 10:00:00 {zone}\naccessed: Wed Jan 14 2026 10:00:00 {zone}"
    start_of_run = 1_768_384_000.0  # 2026-01-14 10:00 UTC, minus a little
    assert normalise_observation(text, since=start_of_run) == (
        "modified: <clock>\naccessed: <clock>"
    )
    much_later = start_of_run + 30 * 86_400
    kept = normalise_observation(text, since=much_later)
    assert kept.startswith("modified: Wed Jan 14 2026 10:00:00") and "accessed: <clock>" in kept


def test_normalise_observation_masks_readings_cut_by_a_size_bound() -> None:
    """Two runs' readings cut at the same place by a view, a snapshot or the output bound
    (dates have a fixed width) normalise to the same text; other text is kept."""

    def info(stamp: str) -> str:
        zone = "GMT+0000 (Coordinated Universal Time)"
        return (
            f"size: 10\ncreated: Mon Nov 30 2026 {stamp} {zone}\n"
            f"modified: Tue Dec 01 2026 {stamp} {zone}\nisFile: true"
        )

    def cuts(text: str) -> list[str]:
        as_json = json.dumps(text, ensure_ascii=False)
        out = [clip(as_json, limit) for limit in range(40, len(as_json), 7)]
        out += [
            text[:n] + "\n…[output truncated: 99 more characters were not kept]"
            for n in range(20, len(text), 5)
        ]
        out += [json.dumps(text[:n] + "…[+9 chars]", ensure_ascii=False) for n in range(20, 90, 3)]
        return out

    # the run these readings come from started on 30 Nov 2026: its own clock's readings
    started = datetime(2026, 11, 30, 12, 0, tzinfo=UTC).timestamp()
    first, second = cuts(info("12:30:53")), cuts(info("12:31:07"))
    assert len(first) > 30
    for a, b in zip(first, second, strict=True):
        assert normalise_observation(a, since=started) == normalise_observation(b, since=started)
        assert "size: 10" in normalise_observation(a, since=started)
    assert normalise_observation("meeting at 12:30:53 on Mon Nov 30", since=started) == (
        "meeting at 12:30:53 on Mon Nov 30"
    )


def test_missing_server_install_says_controlscope_setup(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(NODE_MODULES_ENV, str(tmp_path))
    with pytest.raises(TaskError, match="controlscope setup"):
        find_server_script()
    monkeypatch.delenv(NODE_MODULES_ENV)
    assert find_server_script().is_file()


def _writes_answer(call: Any) -> None:
    call("write_file", path="answer.txt", content="42\n")


def _gen(rng: random.Random, workspace: Path, params: Any) -> dict[str, Any]:
    (workspace / "question.txt").write_text(f"{rng.randint(0, 10**6)}\n")
    return {"answer": "42"}


def _verify(workspace: Path, key: dict[str, Any]) -> list[Check]:
    path = workspace / "answer.txt"
    passed = path.is_file() and path.read_text().strip() == key["answer"]
    return [Check(name="answer", passed=passed, reason="" if passed else "wrong or missing")]


def _reads_missing_file(call: Any) -> None:
    call("read_text_file", path="missing.txt")


def test_run_reference_with_an_unregistered_spec(tmp_path: Path) -> None:
    spec = FsTaskSpec(
        category="demo",
        name="answer",
        instruction="Write 42 to answer.txt.",
        template="demo/answer",
        generate=_gen,
        verify=_verify,
        reference=_writes_answer,
    )
    calls: list[tuple[str, dict[str, Any]]] = []
    assert run_reference(spec, seed=3, calls=calls).success
    assert calls == [("write_file", {"path": "answer.txt", "content": "42\n"})]

    kept = tmp_path / "kept"
    kept.mkdir()
    key = solve_reference(spec, 3, None, kept)
    assert key == {"answer": "42"} and (kept / "answer.txt").is_file()

    broken = FsTaskSpec(
        category="demo",
        name="broken",
        instruction="x",
        template="demo/broken",
        generate=_gen,
        verify=_verify,
        reference=_reads_missing_file,
    )
    with pytest.raises(ReferenceToolError, match=r"missing\.txt"):
        run_reference(broken)


# ------------------------------------------------------------------------------ CLI


def _cli(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_tasks_cli_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_cli(["--json"])) == 0
    rows = json.loads(capsys.readouterr().out)
    ids = [r["id"] for r in rows]
    assert "student_database/english_talent" in ids
    row = rows[ids.index("student_database/duplicate_name")]
    assert row["python_allowed"] is False
    assert row["category"] == "student_database"
    assert row["template"] == "student_database/duplicate_name"
    assert Counter(r["python_allowed"] for r in rows)[False] >= 1


def test_tasks_cli_table_and_unknown_env(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(_cli(["--env", "filesystem"])) == 0
    out = capsys.readouterr().out
    assert "file_property/time_classification" in out
    header = next(line for line in out.splitlines() if "python_allowed" in line)
    assert "template" not in header  # every filesystem task is its own template
    assert main(_cli(["--env", "alfworldx"])) == 2
    assert "unknown environment" in capsys.readouterr().err
