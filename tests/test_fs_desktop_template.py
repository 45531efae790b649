"""Desktop-template filesystem tasks: references through the real npm server, wrong outputs,
determinism."""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import ClassVar

import pytest

from _fs_task_support import (
    Outputs,
    ReferenceTaskTests,
    by_name,
    failing,
    solve_by_id,
    verify_unsolved,
)
from controlscope.envs.filesystem.registry import REGISTRY
from controlscope.envs.filesystem.tasks.desktop_template import arrangement_folder


class TestCommon(ReferenceTaskTests):
    """The shared tests of :class:`ReferenceTaskTests`, on the desktop-template tasks."""

    TASKS = (
        "desktop_template/budget_computation",
        "desktop_template/contact_information",
        "desktop_template/file_arrangement",
    )
    OUTPUTS: ClassVar[Outputs] = {
        "desktop_template/budget_computation": lambda key: ["budget.csv"],
        "desktop_template/contact_information": lambda key: ["contacts.csv"],
        "desktop_template/file_arrangement": lambda key: sorted(key["placed"])[:2],
    }
    EDGE_SIZES = (
        ("desktop_template/budget_computation", {"months": 12, "categories": 6}),
        ("desktop_template/file_arrangement", {"files": 60}),
        ("desktop_template/contact_information", {"people": 9}),
    )
    MIN_FILES = 5
    OUT_OF_RANGE = 0
    NOT_INTEGER = 2.5


# ---- desktop_template/budget_computation ---------------------------------------------------


def test_budget_missing_file_fails_every_check(tmp_path: Path) -> None:
    _, checks = verify_unsolved(
        "desktop_template/budget_computation", 0, tmp_path, {"months": 2, "categories": 3}
    )
    assert all(not c.passed for c in checks)
    assert "budget.csv does not exist" in by_name(checks)["budget_exists"].reason


def test_budget_wrong_values_fail_with_reason(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    key, _ = solve_by_id("desktop_template/budget_computation", 2, ws)
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
    _, checks = verify_unsolved("desktop_template/contact_information", 0, tmp_path, {"people": 3})
    assert all(not c.passed for c in checks)
    assert "contacts.csv does not exist" in by_name(checks)["contacts_exists"].reason


def test_contacts_wrong_values_fail_with_reason(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    key, _ = solve_by_id("desktop_template/contact_information", 1, ws)
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
    key, _ = solve_by_id("desktop_template/file_arrangement", 3, ws)
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
    key, checks = verify_unsolved("desktop_template/file_arrangement", 0, tmp_path, {"files": 8})
    assert failing(checks) == {"files_arranged", "downloads_empty"}
    assert "is missing" in by_name(checks)["files_arranged"].reason
    names = [Path(r).name.lower() for r in key["placed"]]
    assert len(names) == len(set(names)) == 8
