"""The viewer against hostile and careless input: names and texts a browser would mangle, paths
that lead out of the served folder, huge logs, an unusable export folder, requests from other
sites. Pages are checked in Debian's Chromium under playwright (fixtures of ``test_view``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from playwright.sync_api import Page

from controlscope import view
from controlscope.cli import main as cli
from test_view import FIXTURE, browser, get, page  # noqa: F401 (fixtures used by name)


def copy_run(dest: Path) -> Path:
    """The committed fixture's run copied to ``dest`` (which may be a non-UTF-8 name)."""
    dest.mkdir(parents=True)
    for name in ("events.jsonl", "summary.json"):
        shutil.copyfile(FIXTURE / name, dest / name)
    return dest


# --- names ------------------------------------------------------------------------------------


def test_a_run_folder_whose_name_is_not_utf8_is_listed_served_and_exported(
    page: Page,
    tmp_path: Path,  # noqa: F811
) -> None:
    """A file name is bytes: a run folder named with invalid UTF-8 is shown with the bytes
    escaped; the folder's other runs are not lost with it."""
    root = tmp_path / "runs"
    copy_run(root / "good")
    bad = copy_run(Path(os.fsdecode(os.fsencode(root) + b"/bad\xff<i>name")))
    with view.ViewServer(root) as server:
        status, html = get(server.url)
        assert status == 200, html
        page.goto(server.url)
        links = page.locator("#runs a")
        assert links.all_inner_texts() == ["bad\\xff<i>name", "good"]
        links.first.click()
        page.wait_for_selector("#run-title")
        assert "bad\\xff<i>name" in page.locator("#run-title").inner_text()
    with view.ViewServer(bad) as server:  # the run served on its own shows its path
        page.goto(server.url)
        assert "bad\\xff<i>name" in page.locator("main").inner_text()
    index = view.export(root, tmp_path / "site")
    assert len(list((tmp_path / "site" / "runs").glob("*.html"))) == 2
    page.goto(index.as_uri())
    assert page.locator("#runs a").all_inner_texts() == ["bad\\xff<i>name", "good"]
    assert cli(["view", str(root), "--export", str(tmp_path / "site2")]) == 0
