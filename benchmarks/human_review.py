"""A person at the review page, played by Chromium: how soon a boundary shows, how soon a
decision runs.

One run of ``file_context/file_splitting`` on real parts (the npm MCP server, the isolated
worker) with a scripted planner whose block makes ``CALLS`` read-only calls, reviewed under
``continuous`` Full by :class:`controlscope.HumanReviewer` on the review page, served by
``view.ViewServer`` in this process. Debian's Chromium (playwright) opens the page's printed
address, waits for each boundary and clicks Keep, or at every other boundary changes ``head``
in the argument form and sends it.

- ``boundary_to_page_ms``: the boundary is posted on the desk until the page shows it (its
  ticket in the page), per boundary. Target: at most 500.
- ``decision_to_call_ms``: the click until the primitive call starts (its recorded
  ``started_at``), per boundary. Target: at most 200.

The last line is one JSON object with the median and the maximum of each.

Usage: python benchmarks/human_review.py
"""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

import controlscope as cs
from controlscope import view
from controlscope.core import PrimitiveCallEvent
from controlscope.review import ReviewDesk

CALLS = 9
"""Read-only calls the block makes (the first is not reviewed under ``continuous``)."""

TASK = "file_context/file_splitting"


def _block() -> str:
    reads = [
        f'read_text_file(path="/workspace/large_file.txt", head={i + 1})' for i in range(CALLS)
    ]
    return "```python\n" + "\n".join(reads) + "\n```"


def _decide(page: Page, desk: ReviewDesk, seen: str, edit: bool) -> tuple[str, float, float]:
    """Wait for a boundary other than ``seen`` (shown, its buttons answering); decide it.
    Returns its ticket, the ms until the page showed it and the wall clock of the click."""
    page.wait_for_function(
        "prev => { const r = document.getElementById('review');"
        " return r && r.dataset.ready && r.dataset.ticket && r.dataset.ticket !== prev; }",
        arg=seen,
        polling=5,
        timeout=60_000,
    )
    shown = time.monotonic()
    ticket = page.locator("#review").get_attribute("data-ticket") or ""
    pending = desk.get(ticket)
    assert pending is not None, "the page shows a boundary no longer waiting"
    to_page_ms = (shown - pending.posted) * 1000
    if edit:
        page.locator('.arg[data-name="head"]').fill("1")
        clicked = time.time()
        page.locator("#decide-patch_arguments").click()
    else:
        clicked = time.time()
        page.locator("#decide-keep").click()
    return ticket, to_page_ms, clicked


def main() -> int:
    executable = shutil.which("chromium")
    if executable is None:
        print("chromium is not installed (apt-get install chromium)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        (tmp / "planner.json").write_text(json.dumps([_block(), "Done."]))
        out = tmp / "run"
        spec = cs.RunSpec(
            task=TASK, model=f"scripted:{tmp / 'planner.json'}", scope="full", out=out
        )
        person = cs.HumanReviewer()
        run = threading.Thread(target=cs.run_task, args=(spec,), kwargs={"reviewer": person})
        to_page: list[float] = []
        clicks: list[tuple[int, float]] = []
        with view.ViewServer(out, desk=person.desk) as server, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable)
            page = browser.new_page()
            assert server.review_url is not None
            page.goto(server.review_url)
            run.start()
            seen = ""
            for index in range(CALLS - 1):
                seen, ms, clicked = _decide(page, person.desk, seen, edit=index % 2 == 1)
                to_page.append(ms)
                clicks.append((index + 1, clicked))
            run.join(120)
            browser.close()
        started = {
            e.call.call_index: e.call.started_at
            for e in cs.read_events(out)
            if isinstance(e, PrimitiveCallEvent)
        }
    to_call = [(started[i] - clicked) * 1000 for i, clicked in clicks]
    result = {
        "boundaries": len(to_page),
        "boundary_to_page_ms_median": round(statistics.median(to_page), 1),
        "boundary_to_page_ms_max": round(max(to_page), 1),
        "decision_to_call_ms_median": round(statistics.median(to_call), 1),
        "decision_to_call_ms_max": round(max(to_call), 1),
    }
    print(f"boundary_to_page_ms: {[round(x) for x in to_page]} (target: at most 500)")
    print(f"decision_to_call_ms: {[round(x) for x in to_call]} (target: at most 200)")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
