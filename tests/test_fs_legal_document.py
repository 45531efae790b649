"""Legal-document filesystem tasks: references through the real npm server, wrong outputs,
determinism."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import controlscope.envs.filesystem.tasks.legal_document  # noqa: F401  (registers the tasks)
from controlscope.envs.base import AnswerKey, Check, TaskError
from controlscope.envs.filesystem.registry import REGISTRY
from controlscope.envs.filesystem.testing import run_reference, solve_reference

TASKS = [
    "legal_document/solution_tracing",
    "legal_document/dispute_review",
    "legal_document/individual_comments",
]


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
    "legal_document/solution_tracing": lambda key: ["Agreements/resolution_trace.csv"],
    "legal_document/dispute_review": lambda key: ["Review/dispute_summary.csv"],
    "legal_document/individual_comments": lambda key: sorted(key["files"]),
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
        ("legal_document/solution_tracing", {"issues": 10, "versions": 12}),
        ("legal_document/individual_comments", {"drafts": 1, "reviewers": 2}),
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
    assert failing(spec.verify(tmp_path, key))


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
    assert 3 <= len(trees[0]) <= 60 and sum(map(len, trees[0].values())) < 20_000


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
        spec.check_params({first: 0})
    with pytest.raises(TaskError, match="integer"):
        spec.check_params({first: True})


def test_missing_output_fails_every_check_with_reason(task_id: str, tmp_path: Path) -> None:
    spec = REGISTRY[task_id]
    key = spec.generate(random.Random(0), tmp_path, dict(spec.default_params))
    checks = spec.verify(tmp_path, key)
    assert checks and all(not c.passed for c in checks)
    assert all("does not exist" in c.reason for c in checks)


# ---- legal_document/solution_tracing -------------------------------------------------------


def _rows(path: Path) -> list[list[str]]:
    return [ln.split(",") for ln in path.read_text().splitlines() if ln.strip()]


def _write(path: Path, rows: list[list[str]]) -> None:
    path.write_text("".join(",".join(r) + "\n" for r in rows))


def test_trace_wrong_version_and_reopened_issue_fail(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    key, _ = solve("legal_document/solution_tracing", 1, ws)
    spec = REGISTRY["legal_document/solution_tracing"]
    out = ws / "Agreements/resolution_trace.csv"
    rows = _rows(out)
    # A resolved issue traced to an earlier agreement version.
    resolved = next(i for i, r in enumerate(rows) if i and r[1].startswith("v"))
    bad = [list(r) for r in rows]
    bad[resolved][1] = "v1"
    _write(out, bad)
    checks = spec.verify(ws, key)
    assert failing(checks) == {"resolved_issues"}
    assert rows[resolved][0] in by_name(checks)["resolved_issues"].reason
    # An issue that was reopened (or only resolved in a draft) reported as resolved.
    opened = next(i for i, r in enumerate(rows) if r[1] == "open")
    bad = [list(r) for r in rows]
    bad[opened][1:] = ["v2", "3"]
    _write(out, bad)
    checks = spec.verify(ws, key)
    assert failing(checks) == {"open_issues"}
    assert f"{rows[opened][0]}: v2,3 (expected open,)" in by_name(checks)["open_issues"].reason
    # A missing issue row.
    _write(out, rows[:-1])
    assert "issues" in failing(spec.verify(ws, key))


def test_trace_history_has_reopenings_and_a_draft_trap(tmp_path: Path) -> None:
    key = REGISTRY["legal_document/solution_tracing"].generate(
        random.Random(7), tmp_path, {"issues": 6, "versions": 5}
    )
    logs = "\n".join(p.read_text() for p in (tmp_path / "Agreements").glob("agreement_v*.md"))
    assert "Reopens ISS-" in logs
    draft = next((tmp_path / "Agreements/drafts").iterdir()).read_text()
    drafted = re.search(r"Resolves (ISS-\d+)", draft)
    assert drafted is not None
    assert dict((r[0], r[1]) for r in key["trace"])[drafted.group(1)] == "open"


def test_trace_orders_versions_numerically(tmp_path: Path) -> None:
    """With versions v10 and v11 a lexicographic order would apply v10 before v2."""
    ws = tmp_path / "ws"
    key, _ = solve("legal_document/solution_tracing", 3, ws, versions=11)
    assert (ws / "Agreements/agreement_v11.md").is_file()
    assert not failing(REGISTRY["legal_document/solution_tracing"].verify(ws, key))


# ---- legal_document/dispute_review ---------------------------------------------------------


def test_dispute_wrong_count_title_and_order_fail(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    key, _ = solve("legal_document/dispute_review", 2, ws)
    spec = REGISTRY["legal_document/dispute_review"]
    out = ws / "Review/dispute_summary.csv"
    rows = _rows(out)
    assert len(rows) >= 3
    # A wrong count.
    bad = [list(r) for r in rows]
    bad[1][2] = str(int(bad[1][2]) + 1)
    _write(out, bad)
    checks = spec.verify(ws, key)
    assert failing(checks) == {"counts"}
    assert rows[1][0] in by_name(checks)["counts"].reason
    # A wrong title.
    bad = [list(r) for r in rows]
    bad[1][1] = "Whatever"
    _write(out, bad)
    assert failing(spec.verify(ws, key)) == {"titles"}
    # Rows in the wrong order.
    _write(out, [rows[0], *reversed(rows[1:])])
    checks = spec.verify(ws, key)
    assert failing(checks) == {"order"}
    # A withdrawn or merely commented clause listed as disputed.
    _write(out, [*rows, ["9.9", "Nowhere", "1", "Nobody"]])
    checks = spec.verify(ws, key)
    assert "disputed_clauses" in failing(checks)
    assert "unexpected ['9.9']" in by_name(checks)["disputed_clauses"].reason


def test_dispute_withdrawals_cancel_disputes(tmp_path: Path) -> None:
    """Every WITHDRAWN remark follows the same reviewer's DISPUTED remark, and the answer key
    does not count that reviewer for that clause."""
    key = REGISTRY["legal_document/dispute_review"].generate(
        random.Random(11), tmp_path, {"reviewers": 6, "sections": 5}
    )
    counted = {(r[0], who) for r in key["summary"] for who in r[3].split("; ")}
    withdrawn = 0
    for path in (tmp_path / "Review").iterdir():
        lines = path.read_text().splitlines()
        who = lines[0].removeprefix("# Review by ")
        for i, line in enumerate(lines):
            m = re.match(r"\[([\d.]+)\] WITHDRAWN", line)
            if m:
                withdrawn += 1
                assert any(ln.startswith(f"[{m.group(1)}] DISPUTED") for ln in lines[:i])
                assert (m.group(1), who) not in counted
    assert withdrawn >= 1
    assert any(r[0] == "2.10" for r in key["summary"])  # the numeric-order trap is present


# ---- legal_document/individual_comments ----------------------------------------------------


def test_comments_resolved_order_and_extra_file_fail(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    key, _ = solve("legal_document/individual_comments", 3, ws)
    spec = REGISTRY["legal_document/individual_comments"]
    rel, want = max(key["files"].items(), key=lambda kv: len(kv[1]))
    assert len(want) >= 2
    path = ws / rel
    good = path.read_text()
    check_name = f"comments:{Path(rel).stem}"
    # Wrong order.
    path.write_text("\n".join([want[1], want[0], *want[2:]]) + "\n")
    checks = spec.verify(ws, key)
    assert failing(checks) == {check_name}
    assert "wrong order" in by_name(checks)[check_name].reason
    # A resolved comment included.
    drafts = "\n".join(p.read_text() for p in (ws / "Drafts").glob("*.md"))
    resolved = re.search(r"> \[(.+?)\] \(resolved\): (.+)", drafts)
    assert resolved is not None
    path.write_text(good + f"nda.md | 1 | {resolved.group(2)}\n")
    checks = spec.verify(ws, key)
    assert failing(checks) == {check_name}
    assert "1 unexpected" in by_name(checks)[check_name].reason
    path.write_text(good)
    # A file for the reviewer whose comments are all resolved.
    silent = {p.stem for p in (ws / "Comments").iterdir()}
    names = {m.lower().replace(" ", "_") for m in re.findall(r"> \[(.+?)\]", drafts)}
    (extra,) = names - silent
    (ws / "Comments" / f"{extra}.txt").write_text("nda.md | 1 | something\n")
    checks = spec.verify(ws, key)
    assert failing(checks) == {"no_extra_files"}
    # A reviewer's file missing.
    path.unlink()
    checks = spec.verify(ws, key)
    assert by_name(checks)[check_name].reason == f"{rel} does not exist"
