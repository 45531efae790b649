"""The browser the viewer's and the review page's tests drive: Debian's Chromium under
playwright, one per module, and a page per test that fails the test if its scripts raised.

A test module binds the fixtures by name: ``browser = _browser_support.browser``.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, sync_playwright


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Debian's Chromium under playwright (never a downloaded browser)."""
    executable = shutil.which("chromium")
    if executable is None:
        pytest.fail("chromium is not installed: run scripts/setup.sh (apt-get install chromium)")
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=executable)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page of 1300 x 900; the test fails if the page's scripts raised."""
    context = browser.new_context(viewport={"width": 1300, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda err: errors.append(str(err)))
    yield page
    context.close()
    assert errors == [], f"the page raised: {errors}"
