"""The panel's page, its export and its report against broken and hostile panel folders: a
manifest that is not UTF-8 or plans no run, a run's record that is a FIFO, a report folder that
is a file, and the links of a report's cells. Exercised through Starlette's test client (no
browser, no model): every answer is a page that says what is wrong, never a traceback."""

from __future__ import annotations

from pathlib import Path

from starlette.testclient import TestClient

from controlscope.panel.testing import SyntheticRun, write_synthetic_panel
from controlscope.view import build_app, find_target
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
