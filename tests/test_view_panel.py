"""The viewer on panels and long runs, in a real browser (Debian's Chromium under playwright):
a panel's page shows its report's tables with every cell linked to the runs it counts, a unit's
runs side by side from their first divergence, agent text as text, a corrupt panel as a clear
page, and an export that opens from disk; a long run's log in pages.

The panel is run here by the command line, with scripted models on the real worker and MCP
server (as ``test_panel`` does): two units of the split task, Keep, Arg and Full branched at the
first boundary. Screenshots of the main pages are saved in each test's own temporary folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import Page

import test_view
from controlscope import view
from controlscope.analysis import report, report_cells
from controlscope.cli import main as cli
from controlscope.panel import RUN_MARKER
from controlscope.panel.testing import SyntheticRun, write_synthetic_panel
from controlscope.view import _timeline as timeline
from test_api import BROKEN, TASK
from test_panel import write_config
from test_replay import KEEP, PATCH, REPLACE
from test_view import HOSTILE, get, shot
from test_view_hostile import long_run

browser = test_view.browser  # the fixtures, used by name
page = test_view.page

#: The reviewer's first answer in every branch (its decision at the branch point).
KEEP_HOSTILE = json.dumps({"reason": f"fine {HOSTILE}", "operation": "keep"})


@pytest.fixture(scope="module")
def panel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two units (seeds 0 and 1) of the split task, Keep, Arg and Full branched at the first
    boundary; the agent prints hostile text and the reviewer's first reason holds it; the
    reviewer then patches the next call's path and replaces the rest (Full succeeds, Arg falls
    back, Keep fails). Run by the command line."""
    tmp = tmp_path_factory.mktemp("panel")
    config = write_config(tmp, program=f"print({HOSTILE!r})\n" + BROKEN, seeds=[0, 1])
    reviewer = tmp / "reviewer.json"
    reviewer.write_text(json.dumps([KEEP_HOSTILE, PATCH, REPLACE, *[KEEP] * 10]))
    assert cli(["panel", str(config), "--out", str(tmp / "panel"), "--quiet"]) == 0
    return tmp / "panel"


def unit_of(seed: int) -> str:
    return f"{TASK}/s{seed}/p0"


# --- the panel's page ------------------------------------------------------------------------


def test_the_panel_page_shows_the_report_with_every_cell_linked_to_its_runs(
    panel: Path, page: Page, tmp_path: Path
) -> None:
    built = report(panel, write=False)
    successes = built.tables["successes"].set_index("condition")
    assert list(successes["successes"]) == [0, 0, 2]  # keep, arg, full
    with view.ViewServer(panel) as server:
        page.goto(server.url)
        assert page.locator("#panel-title").is_visible()
        assert "6 of 6 runs finished" in page.locator("#panel-progress").inner_text()
        assert page.locator("#live").count() == 0  # complete: no refresh
        table = page.locator("#table-successes")
        conditions = table.locator("td:first-child").all_inner_texts()
        assert [c.strip() for c in conditions] == ["keep", "arg", "full"]
        for name in built.tables:  # every cell of every table links somewhere
            cells = page.locator(f"#table-{name} td")
            assert cells.count() == built.tables[name].size
            assert page.locator(f"#table-{name} td a").count() == cells.count()
        assert page.evaluate("window.pwned") is None
        shot(page, tmp_path, "panel")
        # The full row's successes: the two Full runs, which succeeded.
        full = table.locator("tr", has_text="full")
        column = list(built.tables["successes"].columns).index("successes")
        full.locator("td").nth(column).locator("a").click()
        page.wait_for_selector("#cell-title")
        assert page.locator("#cell-title").inner_text() == "full: successes"
        listed = page.locator("#cell-runs a").all_inner_texts()
        assert listed == [f"{unit_of(s)}/full-d0" for s in (0, 1)]
        shot(page, tmp_path, "cell")
        page.locator("#cell-runs a").first.click()
        page.wait_for_selector("#run-title")
        assert "full-d0" in page.locator("#run-title").inner_text()
        assert page.locator("#verdict .badge.ok, .badge.ok").count() >= 1
        # A paired comparison's wins are units: each opens the unit side by side.
        page.goto(server.url)
        paired = page.locator("#table-paired tr", has_text="full-keep")
        column = list(built.tables["paired"].columns).index("wins")
        paired.locator("td").nth(column).locator("a").click()
        page.wait_for_selector("#cell-title")
        assert page.locator("#cell-units a").all_inner_texts() == [unit_of(0), unit_of(1)]
        assert get(server.url + "cell/successes/99/units")[0] == 404
        assert get(server.url + "unit/no/such/unit")[0] == 404


def test_a_unit_shows_its_runs_side_by_side_from_their_first_divergence(
    panel: Path, page: Page, tmp_path: Path
) -> None:
    """The unit's Keep run and its branches: the shared prefix, each decision at the branch
    point (the reviewer's hostile reason shown as text), the first call where their traces
    differ (the patched path of call 2), and the terminal verdicts."""
    with view.ViewServer(panel) as server:
        page.goto(server.url)
        page.locator("#units a", has_text=unit_of(1)).click()
        page.wait_for_selector("#unit-title")
        headers = page.locator("#side-by-side tr").first.locator("th a").all_inner_texts()
        assert headers == ["keep", "arg-d0", "full-d0"]
        first = page.locator("#first-divergence")
        assert first.locator("th").inner_text().startswith("call #2")
        keep_cell, arg_cell, full_cell = first.locator("td").all_inner_texts()
        assert "chunk_01" in keep_cell and "part_01" in arg_cell and "part_01" in full_cell
        assert "replayed and checked" in page.locator("#side-by-side").inner_text()
        decisions = page.locator("tr.decision td").all_inner_texts()
        assert all(d.startswith("keep") for d in decisions)
        assert page.get_by_text("<script>window.pwned = 1</script>").count() >= 2
        assert page.locator("img[src='x']").count() == 0
        assert page.evaluate("window.pwned") is None
        verdicts = page.locator("#side-by-side tr.verdicts > td").all_inner_texts()
        assert "failure" in verdicts[0] and "failure" in verdicts[1] and "success" in verdicts[2]
        shot(page, tmp_path, "unit")
        page.locator("#side-by-side th a", has_text="full-d0").click()
        page.wait_for_selector("#run-title")
        assert page.get_by_text(HOSTILE).count() >= 1  # the printed output, as text
        assert page.evaluate("window.pwned") is None


def test_a_corrupt_panel_folder_is_a_clear_page(panel: Path, page: Page, tmp_path: Path) -> None:
    """A manifest that is not JSON: the page says the panel cannot be read and still lists its
    runs; a run whose record is corrupt: the report counts it as missing and names it; a run
    whose log is corrupt: the report counts it as missing too (its record names another log) and
    its unit's page says where the log cannot be read."""
    broken = tmp_path / "broken"
    shutil.copytree(panel, broken)
    (broken / "panel.json").write_text("{not json", "utf-8")
    with view.ViewServer(broken) as server:
        status, html = get(server.url)
        assert status == 200 and "Traceback" not in html
        page.goto(server.url)
        assert "this panel cannot be read" in page.locator(".problem").first.inner_text()
        # its 6 runs and each unit's trunk (the prefix its branches were forked from)
        assert page.locator("#runs a").count() == 6 + 2
        shot(page, tmp_path, "corrupt-panel")
        page.locator("#runs a").first.click()
        page.wait_for_selector("#run-title")
    damaged = tmp_path / "damaged"
    shutil.copytree(panel, damaged)
    record = damaged / "runs" / unit_of(0) / "arg-d0" / RUN_MARKER
    record.write_text("{", "utf-8")
    log = damaged / "runs" / unit_of(1) / "full-d0" / "events.jsonl"
    lines = log.read_text("utf-8").splitlines(keepends=True)
    log.write_text("".join([*lines[:5], "{not json\n", *lines[6:]]), "utf-8")
    with view.ViewServer(damaged) as server:
        page.goto(server.url)
        notes = page.locator("#panel-notes").inner_text()
        assert f"{unit_of(0)}/arg-d0: corrupt run folder" in notes
        assert (  # a log changed after its run recorded it is no longer that run's
            f"{unit_of(1)}/full-d0: corrupt run folder, counted as missing: its events.jsonl "
            "is not the log its record names" in notes
        )
        assert page.locator("#units .badge", has_text="corrupt").count() == 2
        page.goto(server.url + "unit/" + unit_of(1))
        problem = page.locator(".problem").first.inner_text()
        assert problem.startswith("full-d0") or "full-d0" in problem
        assert "cannot be read past this point" in problem


def test_a_panel_being_run_refreshes_when_a_run_finishes(
    panel: Path, page: Page, tmp_path: Path
) -> None:
    running = tmp_path / "running"
    shutil.copytree(panel, running)
    record = running / "runs" / unit_of(1) / "full-d0" / RUN_MARKER
    kept = record.read_text("utf-8")
    record.unlink()
    with view.ViewServer(running) as server:
        page.goto(server.url)
        assert "5 of 6 runs finished" in page.locator("#panel-progress").inner_text()
        assert page.locator("#live").is_visible()
        record.write_text(kept, "utf-8")
        page.wait_for_function(
            "() => document.querySelector('#panel-progress').innerText.includes('6 of 6')",
            timeout=20_000,
        )
        assert page.locator("#live").count() == 0


def test_a_panel_exports_to_pages_that_open_from_disk(
    panel: Path, page: Page, tmp_path: Path
) -> None:
    out = tmp_path / "site"
    assert cli(["view", str(panel), "--export", str(out)]) == 0
    pages = list(out.rglob("*.html"))
    assert len(list((out / "runs").glob("*.html"))) == 6
    assert len(list((out / "units").glob("*.html"))) == 2
    assert list((out / "cells").glob("*.html"))
    for path in pages:
        text = path.read_text("utf-8")
        assert "<script" not in text and 'href="/' not in text, path
    page.goto((out / "index.html").as_uri())
    cells = page.locator("#table-successes td a")
    assert cells.count() > 0
    full = page.locator("#table-successes tr", has_text="full")
    full.locator("td a").nth(2).click()  # successes
    page.wait_for_selector("#cell-title")
    assert page.url.startswith("file://")
    page.locator("#cell-runs a").first.click()
    page.wait_for_selector("#run-title")
    assert "full-d0" in page.locator("#run-title").inner_text()
    page.locator("header.top a").click()
    page.wait_for_selector("#panel-title")
    page.locator("#units a", has_text=unit_of(0)).click()
    page.wait_for_selector("#first-divergence")
    assert page.evaluate("window.pwned") is None
    page.locator("#side-by-side th a", has_text="keep").click()
    page.wait_for_selector("#run-title")
    assert page.url.startswith("file://")


# --- the runs behind a cell --------------------------------------------------------------------

#: The report's columns that count runs (the rest of a count column counts units).
RUN_COUNTS = {
    "successes": ("successes", "missing", "budget_exhausted", "provider_failures"),
    "goals": ("tasks_solved",),
}
UNIT_COUNTS = {
    "table1": ("keep", "arg", "full", "full_wins", "full_losses"),
    "paired": ("wins", "losses", "ties", "units"),
    "goal_gains": ("wins", "losses"),
}


def check_cells(panel_dir: Path) -> int:
    """Every count of the report's tables is the number of runs or units its cell holds;
    returns how many counts were checked."""
    built = report(panel_dir, write=False, resamples=100)
    cells = report_cells(built)
    checked = 0
    for name, table in built.tables.items():
        for row, row_cells in zip(table.to_dict(orient="records"), cells[name], strict=True):
            for column in RUN_COUNTS.get(name, ()):
                assert len(row_cells[column].runs) == row[column], (name, row, column)
                checked += 1
            for column in UNIT_COUNTS.get(name, ()):
                if column in row:
                    assert len(row_cells[column].units) == row[column], (name, row, column)
                    checked += 1
    return checked


def test_every_count_of_the_report_holds_the_runs_it_counts(panel: Path, tmp_path: Path) -> None:
    assert check_cells(panel) > 10
    runs = []
    for u in range(12):
        unit = f"t/{u}"
        common = {"unit": unit, "category": f"c{u % 3}", "template": f"tpl{u % 4}"}
        runs.append(SyntheticRun(scope="keep", success=u % 3 == 0, source_program=u % 2, **common))
        for draw in (0, 1):
            for scope, win in (("arg", u % 2 == 0), ("full", (u + draw) % 4 != 1)):
                runs.append(
                    SyntheticRun(
                        scope=scope, draw=draw, success=win, source_program=u % 2, **common
                    )
                )
    write_synthetic_panel(tmp_path / "synthetic", runs)
    built = report(tmp_path / "synthetic", write=False, resamples=100)
    assert {"table1", "paired", "goals", "goal_gains"} <= set(built.tables)
    assert check_cells(tmp_path / "synthetic") > 50


# --- a long log in pages -----------------------------------------------------------------------


def test_a_long_log_is_shown_in_pages_that_hold_every_boundary_once(
    page: Page, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of 500 boundaries in pages of 50: each page shows its own boundaries (all of them,
    across the pages, exactly once), the totals and the verdict count the whole run, the pages
    link to each other, served and exported."""
    run = long_run(tmp_path / "run", 500)
    monkeypatch.setattr(timeline, "PAGE_BOUNDARIES", 50)
    first = view.read_run(run)
    assert first.pages == 10 and first.events == 2004
    assert [s.call_index for s in first.spans] == list(range(0, 500, 50))
    pages = list(view.iter_run_pages(run))
    assert [p.number for p in pages] == list(range(1, 11))
    seen = [b.boundary.call_index for p in pages for b in p.boundaries]
    assert seen == list(range(500))
    assert all(p.summary is not None and p.summary.primitive_calls == 500 for p in pages)
    assert all(p.final is not None for p in pages)
    again = view.read_run(run, 4)
    assert [b.boundary.call_index for b in again.boundaries] == list(range(150, 200))
    assert again.boundaries[0].used.calls == 150  # budgets count the earlier pages
    with view.ViewServer(run) as server:
        page.goto(server.url)
        assert page.locator("details.boundary").count() == 50
        assert "Page 1 of 10" in page.locator("#pager-top").inner_text()
        page.locator("#pager-top a[rel=next]").click()
        page.wait_for_selector("#pager-top .current")
        assert page.locator("#pager-top .current").inner_text() == "2"
        heads = page.locator(".boundary-head").all_inner_texts()
        assert heads[0].startswith("Boundary #50") and heads[-1].startswith("Boundary #99")
        assert "500 primitive calls" in page.locator("#totals").inner_text()
        shot(page, tmp_path, "long-run-page-2")
        status, html = get(server.url + "?page=11")
        assert status == 404 and "has 10 pages" in html
        assert get(server.url + "?page=zero")[0] == 404
    index = view.export(run, tmp_path / "site")
    assert sorted(p.name for p in (tmp_path / "site").glob("index*.html")) == sorted(
        ["index.html", *(f"index-p{n}.html" for n in range(2, 11))]
    )
    page.goto(index.as_uri())
    page.locator("#pager-bottom a", has_text="10").click()
    page.wait_for_selector("#verdict")
    assert page.locator(".boundary-head").first.inner_text().startswith("Boundary #450")


# --- hostile manifests ---------------------------------------------------------------------------


def test_a_manifest_naming_runs_outside_its_folder_reads_none_of_them(
    page: Page, tmp_path: Path
) -> None:
    """Run ids are paths below ``runs/``: one that leads out of the panel (``..``) is not read,
    not linked and named; unit names with markup are shown as text."""
    root = tmp_path / "root"
    runs = []
    for unit in ("<b>bold</b>/s0", "../../escape"):
        runs.append(SyntheticRun(unit=unit, category="c", scope="keep", success=True))
        runs.append(SyntheticRun(unit=unit, category="c", scope="full", success=False))
    write_synthetic_panel(root / "panel", runs)
    outside = root / "escape"
    assert (outside / "keep" / "summary.json").is_file()  # written there by the synthetic panel
    (outside / "keep" / "events.jsonl").write_text('{"secret": 1}\n', "utf-8")
    target = view.find_target(root / "panel")
    assert target.kind == "panel" and set(target.units) == {"<b>bold</b>/s0", "../../escape"}
    assert all(not run_id.startswith("../") for run_id in target.runs)
    assert sorted(target.outside) == ["../../escape/full-d0", "../../escape/keep"]
    with view.ViewServer(root / "panel") as server:
        page.goto(server.url)
        assert page.locator("b", has_text="bold").count() == 0
        assert page.locator("#units a", has_text="<b>bold</b>/s0").count() == 1
        assert "leading out of this panel" in page.locator(".problem").first.inner_text()
        assert page.locator("#units a[href*='escape']").all_inner_texts() == ["../../escape"]
        assert get(server.url + "run/%2E%2E/%2E%2E/escape/keep")[0] == 404
        status, html = get(server.url + "unit/%2E%2E/%2E%2E/escape")  # the unit, not its runs
        assert status == 200 and "no run has a log yet" in html and "secret" not in html
