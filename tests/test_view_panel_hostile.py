"""The panel's page, its export and its report against broken and hostile panel folders: a
manifest that is not UTF-8 or plans no run, a run's record that is a FIFO, a report folder that
is a file, and the links of a report's cells. Exercised through Starlette's test client (no
browser, no model): every answer is a page that says what is wrong, never a traceback."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from controlscope.analysis import Report, report
from controlscope.cli import main as cli
from controlscope.panel import MANIFEST_FILE, RUN_MARKER, PanelError, read_manifest, read_record
from controlscope.panel.testing import SyntheticRun, write_synthetic_panel
from controlscope.view import build_app, export, find_target
from controlscope.view._panel import read_panel_page


def two_units(folder: Path) -> Path:
    """A panel of two units, Keep and Full each: Keep solves t/a only, Full solves both."""
    runs = [
        SyntheticRun(unit="t/a", category="c", scope="keep", success=True),
        SyntheticRun(unit="t/a", category="c", scope="full", success=True),
        SyntheticRun(unit="t/b", category="c", scope="keep", success=False),
        SyntheticRun(unit="t/b", category="c", scope="full", success=True),
    ]
    write_synthetic_panel(folder, runs)
    return folder


def client(folder: Path) -> TestClient:
    return TestClient(build_app(folder), raise_server_exceptions=False, base_url="http://127.0.0.1")


def test_each_cell_of_the_panel_page_links_to_its_own_rows_runs(tmp_path: Path) -> None:
    """Two rows of a table (Keep, Full) have cells of the same column: each links to the runs
    of its own row, so Keep's successes show Keep's one run and Full's show Full's two."""
    folder = two_units(tmp_path / "panel")
    page = read_panel_page(find_target(folder))
    successes = next(t for t in page.tables if t.name == "successes")
    column = successes.columns.index("successes")
    keep, full = (row[column] for row in successes.rows)
    assert keep.cell != full.cell
    assert (keep.runs, full.runs) == (1, 2)
    assert page.cells[keep.cell].runs == ("t/a/keep",)
    html = client(folder).get("/cell/" + keep.cell).text
    assert "t/a/keep" in html and "t/b/full-d0" not in html


def returns_within(call: Callable[[], object], seconds: float = 60.0) -> object:
    """``call()``'s result (or the exception it raised); fails when it has not returned after
    ``seconds`` (a read waiting on a FIFO's writer never does)."""
    found: list[object] = []

    def target() -> None:
        try:
            found.append(call())
        except Exception as err:  # the caller checks what was raised
            found.append(err)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the call waited on a FIFO"
    return found[0]


def test_a_manifest_that_is_not_utf8_is_a_clear_error(tmp_path: Path) -> None:
    """``panel.json`` holding bytes that are not UTF-8 is a panel error naming the file: the
    panel's page says so (no server error), the report exits 2."""
    folder = two_units(tmp_path / "panel")
    (folder / MANIFEST_FILE).write_bytes(b"\xff\xfe{")
    with pytest.raises(PanelError, match=r"panel\.json"):
        read_manifest(folder)
    answer = client(folder).get("/")
    assert answer.status_code == 200 and "this panel cannot be read" in answer.text
    assert cli(["report", str(folder), "--resamples", "10"]) == 2


def test_a_fifo_in_place_of_a_record_or_manifest_is_refused_not_waited_on(
    tmp_path: Path,
) -> None:
    """A run's ``panel_run.json`` or the panel's ``panel.json`` that is a FIFO is refused as
    not a regular file: the report names the run as corrupt, the page shows the panel."""
    folder = two_units(tmp_path / "panel")
    record = folder / "runs" / "t" / "a" / "keep" / RUN_MARKER
    record.unlink()
    os.mkfifo(record)
    assert isinstance(returns_within(lambda: read_record(record.parent)), ValueError)
    built = returns_within(lambda: report(folder, write=False, resamples=10))
    assert isinstance(built, Report)
    assert any(p.startswith("t/a/keep: corrupt") for p in built.problems)
    answer = returns_within(lambda: client(folder).get("/"))
    assert getattr(answer, "status_code", None) == 200
    manifest = folder / MANIFEST_FILE
    manifest.unlink()
    os.mkfifo(manifest)
    assert isinstance(returns_within(lambda: read_manifest(folder)), PanelError)
    assert cli(["report", str(folder), "--resamples", "10"]) == 2  # read_manifest returned


def test_a_manifest_planning_no_run_is_a_clear_error(tmp_path: Path) -> None:
    """A manifest whose plan holds no run: the report says so (exit 2, no traceback) and the
    panel's page names the problem."""
    folder = two_units(tmp_path / "panel")
    manifest = json.loads((folder / MANIFEST_FILE).read_text("utf-8"))
    manifest["plan"]["runs"] = []
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest), "utf-8")
    with pytest.raises(PanelError, match="no run"):
        report(folder, write=False, resamples=10)
    assert cli(["report", str(folder), "--resamples", "10"]) == 2
    answer = client(folder).get("/")
    assert answer.status_code == 200 and "plans no run" in answer.text


def test_a_report_folder_that_cannot_be_written_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--out`` naming a file: exit 2 and one line naming it, not a traceback."""
    folder = two_units(tmp_path / "panel")
    assert (
        cli(["report", str(folder), "--resamples", "10", "--out", str(folder / MANIFEST_FILE)]) == 2
    )
    err = capsys.readouterr().err
    assert "panel.json" in err and "Traceback" not in err


def test_the_report_reads_no_run_whose_folder_leads_out_of_the_panel(tmp_path: Path) -> None:
    """Run ids are paths below ``runs/``: a unit named ``../../escape`` (its runs written
    outside the panel) and a run folder that is a link leading out are counted as corrupt and
    named, their verdicts never read (Keep's success out there is not counted)."""
    runs = []
    for unit in ("t/in", "../../escape"):
        runs.append(SyntheticRun(unit=unit, category="c", scope="keep", success=True))
        runs.append(SyntheticRun(unit=unit, category="c", scope="full", success=True))
    write_synthetic_panel(tmp_path / "root" / "panel", runs)
    folder = tmp_path / "root" / "panel"
    assert (tmp_path / "root" / "escape" / "keep" / "summary.json").is_file()
    linked = folder / "runs" / "t" / "in" / "full-d0"
    linked.rename(tmp_path / "elsewhere")
    linked.symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    built = report(folder, write=False, resamples=10)
    statuses = dict(zip(built.runs["id"], built.runs["status"], strict=True))
    assert statuses == {
        "t/in/keep": "done",
        "t/in/full-d0": "corrupt",
        "../../escape/keep": "corrupt",
        "../../escape/full-d0": "corrupt",
    }
    assert int(built.runs["success"].sum()) == 1
    assert sum("leads out of the panel" in p for p in built.problems) == 3


#: A name that would end a LaTeX comment, close a Markdown code span, recolour and retitle a
#: terminal, and reorder the text after it.
HOSTILE_NAME = "p`\n\\input{secret}\x1b[31m\x1b]0;owned\x07\u202eevil"


def test_the_reports_documents_hold_hostile_names_inert(tmp_path: Path) -> None:
    """A panel folder and a run named with a newline, backticks, LaTeX commands, terminal
    escapes and a bidi override: ``report.md`` and ``report.tex`` hold them escaped on their
    own line (no command after a LaTeX comment's end, no raw control character)."""
    folder = tmp_path / HOSTILE_NAME
    runs = [
        SyntheticRun(unit=f"t/{HOSTILE_NAME}", category="c", scope="keep", success=True),
        SyntheticRun(unit=f"t/{HOSTILE_NAME}", category="c", scope="full", success=True),
    ]
    write_synthetic_panel(folder, runs)
    (folder / "runs" / "t" / HOSTILE_NAME / "full-d0" / RUN_MARKER).unlink()  # a problem line
    for fmt, name in (("markdown", "report.md"), ("latex", "report.tex")):
        out = tmp_path / fmt
        assert (
            cli(["report", str(folder), "--resamples", "10", "--format", fmt, "--out", str(out)])
            == 0
        )
        text = (out / name).read_text("utf-8")
        assert "\\input{secret}" in text  # shown, as text
        assert not any(line.startswith("\\input") for line in text.splitlines())
        assert not any(ch in text for ch in "\x1b\x07\u202e"), fmt


def test_a_manifest_with_an_unknown_cluster_is_not_a_panel_manifest(tmp_path: Path) -> None:
    """``plan.cluster`` other than category, template or task: the manifest is refused when
    read (the report exits 2 with one line; it was a KeyError traceback)."""
    folder = two_units(tmp_path / "panel")
    manifest = json.loads((folder / MANIFEST_FILE).read_text("utf-8"))
    manifest["plan"]["cluster"] = "<x>"
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest), "utf-8")
    with pytest.raises(PanelError, match="not a panel manifest"):
        read_manifest(folder)
    assert cli(["report", str(folder), "--resamples", "10"]) == 2
    answer = client(folder).get("/")
    assert answer.status_code == 200 and "this panel cannot be read" in answer.text


def test_a_run_id_too_long_for_the_file_system_is_a_run_not_found(tmp_path: Path) -> None:
    """A manifest whose unit's name is longer than a file name may be: its runs are not
    found (the file system refuses the name), and every page, the export and the report say so
    instead of failing."""
    folder = two_units(tmp_path / "panel")
    manifest = json.loads((folder / MANIFEST_FILE).read_text("utf-8"))
    long = "t/" + "x" * 300
    for run in manifest["plan"]["runs"]:
        if run["unit"] == "t/a":
            run["unit"], run["id"] = long, run["id"].replace("t/a", long)
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest), "utf-8")
    target = find_target(folder)
    assert sorted(target.runs) == ["t/b/full-d0", "t/b/keep"] and long in target.units
    answers = client(folder)
    for path in ("/", "/unit/" + long, "/_stamp", "/_stamp/unit/" + long):
        assert answers.get(path).status_code == 200, path
    export(folder, tmp_path / "site")
    built = report(folder, write=False, resamples=10)
    assert sorted(built.runs.loc[built.runs["unit"] == long, "status"]) == ["corrupt", "corrupt"]


def test_a_manifest_naming_one_run_folder_twice_is_not_a_panel_manifest(tmp_path: Path) -> None:
    """Two planned runs of different units with the same id (one folder): refused when the
    manifest is read, so one run's verdict is never counted for two units (the cells' pages
    failed on it)."""
    folder = two_units(tmp_path / "panel")
    manifest = json.loads((folder / MANIFEST_FILE).read_text("utf-8"))
    for run in manifest["plan"]["runs"]:
        run["id"] = run["id"].replace("t/b", "t/a")
    (folder / MANIFEST_FILE).write_text(json.dumps(manifest), "utf-8")
    with pytest.raises(PanelError, match="more than once"):
        read_manifest(folder)
    assert cli(["report", str(folder), "--resamples", "10"]) == 2
    answer = client(folder).get("/")
    assert answer.status_code == 200 and "this panel cannot be read" in answer.text


def test_a_record_naming_another_run_is_counted_corrupt(tmp_path: Path) -> None:
    """A run folder whose ``panel_run.json`` names another run (a folder copied into another's
    place): its verdict is not counted; it is corrupt, with both ids named."""
    folder = two_units(tmp_path / "panel")
    keep_b = folder / "runs" / "t" / "b" / "keep"
    for name in (RUN_MARKER, "summary.json"):  # t/a's winning Keep copied over t/b's
        (keep_b / name).write_bytes((folder / "runs" / "t" / "a" / "keep" / name).read_bytes())
    built = report(folder, write=False, resamples=10)
    row = built.runs.set_index("id").loc["t/b/keep"]
    assert row["status"] == "corrupt" and not row["success"]
    assert any("t/b/keep" in p and "t/a/keep" in p for p in built.problems)
