"""Desktop-template filesystem tasks: references through the real npm server, wrong outputs,
determinism."""

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

from controlscope.envs.base import AnswerKey, Check, TaskError
from controlscope.envs.filesystem.registry import REGISTRY
from controlscope.envs.filesystem.tasks.desktop_template import arrangement_folder
from controlscope.envs.filesystem.testing import run_reference, solve_reference

TASKS = [
    "desktop_template/budget_computation",
    "desktop_template/contact_information",
    "desktop_template/file_arrangement",
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
    "desktop_template/budget_computation": lambda key: ["budget.csv"],
    "desktop_template/contact_information": lambda key: ["contacts.csv"],
    "desktop_template/file_arrangement": lambda key: sorted(key["placed"])[:2],
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
        ("desktop_template/budget_computation", {"months": 12, "categories": 6}),
        ("desktop_template/file_arrangement", {"files": 60}),
        ("desktop_template/contact_information", {"people": 9}),
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
    assert 5 <= len(trees[0]) <= 60 and sum(map(len, trees[0].values())) < 20_000


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
        spec.check_params({first: 2.5})


# ---- desktop_template/budget_computation ---------------------------------------------------


def test_budget_missing_file_fails_every_check(tmp_path: Path) -> None:
    spec = REGISTRY["desktop_template/budget_computation"]
    key = spec.generate(random.Random(0), tmp_path, {"months": 2, "categories": 3})
    checks = spec.verify(tmp_path, key)
    assert all(not c.passed for c in checks)
    assert "budget.csv does not exist" in by_name(checks)["budget_exists"].reason


def test_budget_wrong_values_fail_with_reason(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    key, _ = solve("desktop_template/budget_computation", 2, ws)
    spec = REGISTRY["desktop_template/budget_computation"]
    out = ws / "budget.csv"
    rows = out.read_text().splitlines()
    category, total = rows[1].split(",")
    # A category total off by one cent.
    cents = round(float(total) * 100) + 1
    out.write_text("\n".join([rows[0], f"{category},{cents / 100:.2f}", *rows[2:]]) + "\n")
    checks = spec.verify(ws, key)
    assert failing(checks) == {"category_totals"}
    assert f"expected {total}" in by_name(checks)["category_totals"].reason
    # notes.txt counted as a category.
    out.write_text("\n".join([*rows[:-1], "notes,999.50", rows[-1]]) + "\n")
    checks = spec.verify(ws, key)
    assert "categories" in failing(checks)
    assert "notes" in by_name(checks)["categories"].reason
    # The TOTAL row missing.
    out.write_text("\n".join(rows[:-1]) + "\n")
    checks = spec.verify(ws, key)
    assert failing(checks) == {"grand_total"}


def test_budget_has_refunds_and_dollar_signs(tmp_path: Path) -> None:
    """Across a few seeds the data carries the traps the instruction describes."""
    spec = REGISTRY["desktop_template/budget_computation"]
    texts = []
    for seed in range(4):
        ws = tmp_path / str(seed)
        spec.generate(random.Random(seed), ws, {"months": 3, "categories": 4})
        texts += [p.read_text() for p in ws.rglob("*.txt")]
    joined = "\n".join(texts)
    assert "; $" in joined and "; -" in joined and "Budget cap" in joined


# ---- desktop_template/contact_information --------------------------------------------------


def test_contacts_missing_file_fails_every_check(tmp_path: Path) -> None:
    spec = REGISTRY["desktop_template/contact_information"]
    key = spec.generate(random.Random(0), tmp_path, {"people": 3})
    checks = spec.verify(tmp_path, key)
    assert all(not c.passed for c in checks)
    assert "contacts.csv does not exist" in by_name(checks)["contacts_exists"].reason


def test_contacts_wrong_values_fail_with_reason(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    key, _ = solve("desktop_template/contact_information", 1, ws)
    spec = REGISTRY["desktop_template/contact_information"]
    out = ws / "contacts.csv"
    rows = out.read_text().splitlines()
    name, email, phone, company = rows[1].split(",")
    # A wrong phone number for one person.
    out.write_text("\n".join([rows[0], f"{name},{email},+1-555-0000,{company}", *rows[2:]]))
    checks = spec.verify(ws, key)
    assert failing(checks) == {"phones"}
    assert name in by_name(checks)["phones"].reason
    # The plumber from the call log, who never wrote, added as a contact.
    log = (ws / "Notes/call_log.txt").read_text()
    plumber = next(ln.split(" called ")[1].split(" on ")[0] for ln in log.splitlines() if "(" in ln)
    out.write_text("\n".join([*rows, f"{plumber},x@y.example,+1-555-0001,"]) + "\n")
    checks = spec.verify(ws, key)
    assert failing(checks) == {"people"}
    assert plumber in by_name(checks)["people"].reason
    # The company taken literally from the domain.
    out.write_text("\n".join([rows[0], f"{name},{email},{phone},{email.split('@')[1]}", *rows[2:]]))
    assert failing(spec.verify(ws, key)) == {"companies"}


def test_contacts_need_both_signatures_and_call_log(tmp_path: Path) -> None:
    key = REGISTRY["desktop_template/contact_information"].generate(
        random.Random(2), tmp_path, {"people": 6}
    )
    inbox = "\n".join(p.read_text() for p in (tmp_path / "Inbox").iterdir())
    log = (tmp_path / "Notes/call_log.txt").read_text()
    phones = [row[2] for row in key["contacts"]]
    assert any(p in inbox for p in phones) and any(p in log and p not in inbox for p in phones)


# ---- desktop_template/file_arrangement -----------------------------------------------------


@pytest.mark.parametrize(
    ("name", "folder"),
    [
        ("Invoice_2041.pdf", "finance"),
        ("receipt_taxi.PNG", "finance"),
        ("photo_1.JPG", "images"),
        ("report_2.docx", "documents"),
        ("dataset_1.xlsx", "spreadsheets"),
        ("backup_3.tar.gz", "archives"),
        ("backup_3.gz", "other"),
        ("setup_1.exe", "other"),
    ],
)
def test_arrangement_rules(name: str, folder: str) -> None:
    assert arrangement_folder(name) == folder


def test_arrangement_wrong_outputs_fail_with_reason(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    key, _ = solve("desktop_template/file_arrangement", 3, ws)
    spec = REGISTRY["desktop_template/file_arrangement"]
    # The invoice filed by type instead of under finance (rule order ignored).
    invoice = next(r for r in key["placed"] if r.lower().startswith("arranged/finance/invoice"))
    (ws / "Arranged/documents").mkdir(exist_ok=True)
    shutil.move(ws / invoice, ws / "Arranged/documents" / Path(invoice).name)
    checks = spec.verify(ws, key)
    assert failing(checks) == {"files_arranged", "no_extra_files"}
    assert f"{invoice} is missing" in by_name(checks)["files_arranged"].reason
    shutil.move(ws / "Arranged/documents" / Path(invoice).name, ws / invoice)
    assert not failing(spec.verify(ws, key))
    # A file copied back to Downloads/ (copied, not moved).
    other = sorted(key["placed"])[-1]
    shutil.copy(ws / other, ws / "Downloads" / Path(other).name)
    checks = spec.verify(ws, key)
    assert failing(checks) == {"downloads_empty"}
    assert Path(other).name in by_name(checks)["downloads_empty"].reason


def test_arrangement_missing_outputs_fail(tmp_path: Path) -> None:
    spec = REGISTRY["desktop_template/file_arrangement"]
    key = spec.generate(random.Random(0), tmp_path, {"files": 8})
    checks = spec.verify(tmp_path, key)
    assert failing(checks) == {"files_arranged", "downloads_empty"}
    assert "is missing" in by_name(checks)["files_arranged"].reason
    names = [Path(r).name.lower() for r in key["placed"]]
    assert len(names) == len(set(names)) == 8
