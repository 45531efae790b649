"""The viewer against hostile and careless input: names and texts a browser would mangle, paths
that lead out of the served folder, huge logs, an unusable export folder, requests from other
sites. Pages are checked in Debian's Chromium under playwright (fixtures of ``test_view``).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import tracemalloc
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page

from controlscope import view
from controlscope.cli import main as cli
from controlscope.view import _app as app
from controlscope.view import _timeline as timeline
from test_view import FIXTURE, browser, get, page  # noqa: F401 (fixtures used by name)


def copy_run(dest: Path) -> Path:
    """The committed fixture's run copied to ``dest`` (which may be a non-UTF-8 name)."""
    dest.mkdir(parents=True)
    for name in ("events.jsonl", "summary.json"):
        shutil.copyfile(FIXTURE / name, dest / name)
    return dest


# --- names ------------------------------------------------------------------------------------


def test_a_run_folder_whose_name_is_not_utf8_is_listed_served_and_exported(
    page: Page,  # noqa: F811
    tmp_path: Path,
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


# --- texts ------------------------------------------------------------------------------------


def run_with_output(dest: Path, output: str) -> Path:
    """The fixture's run with its block's printed output replaced by ``output``."""
    dest.mkdir(parents=True)
    lines = []
    for line in (FIXTURE / "events.jsonl").read_text("utf-8").splitlines():
        event = json.loads(line)
        if event["type"] == "block_end":
            event["result"]["output"] = output
        lines.append(json.dumps(event) + "\n")
    (dest / "events.jsonl").write_text("".join(lines), "utf-8")
    return dest


#: Where each character of the text node holding ``DCBA`` is drawn, from the left.
_PLACES = """pre => {
  const walk = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
  for (let node = walk.nextNode(); node; node = walk.nextNode()) {
    const at = node.data.indexOf("DCBA");
    if (at < 0) continue;
    const range = document.createRange();
    return [0, 1, 2, 3].map(k => {
      range.setStart(node, at + k); range.setEnd(node, at + k + 1);
      return range.getBoundingClientRect().left;
    });
  }
  return null;
}"""


def test_characters_a_browser_hides_or_reorders_are_shown_visibly(
    page: Page,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A NUL (which the HTML parser drops), a terminal escape and a right-to-left override
    (which would draw the rest of the line backwards: "Trojan Source") in agent output are
    shown as visible marks; the text after them reads as written, served and exported."""
    output = "A\x00B|\x1b[31m|ok \u202eDCBA|tail \u2066x\u2069"
    run = run_with_output(tmp_path / "run", output)
    shown = "A\u2400B|\u241b[31m|ok \u27e8RLO\u27e9DCBA|tail \u27e8LRI\u27e9x\u27e8PDI\u27e9"
    index = view.export(run, tmp_path / "site")
    assert "\u202e" not in index.read_text("utf-8")
    with view.ViewServer(run) as server:
        for url in (server.url, index.as_uri()):
            page.goto(url)
            pre = page.locator("pre", has_text="DCBA").first
            assert pre.inner_text() == shown
            left = pre.evaluate(_PLACES)
            assert left == sorted(left), f"drawn out of order: {left}"


# --- paths ------------------------------------------------------------------------------------


def status_of(url: str, path: str) -> int:
    """The status of ``path`` sent as is (no client folds ``..`` away)."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request("GET", path)
        return connection.getresponse().status
    finally:
        connection.close()


def test_no_run_outside_the_served_folder_is_read(page: Page, tmp_path: Path) -> None:  # noqa: F811
    """A branch set whose ``branches.json`` names ``x/..``, a folder of runs holding a link to a
    run elsewhere and a run whose log links elsewhere: those runs are not read, not listed and
    not served, and the page says they were left out; a link that stays inside is followed."""
    private = copy_run(tmp_path / "private")  # what must not be shown
    (private / "events.jsonl").write_text(
        (FIXTURE / "events.jsonl")
        .read_text("utf-8")
        .replace("student_database/english_talent", "PRIVATE-TASK"),
        "utf-8",
    )
    branches = tmp_path / "private" / "set"
    copy_run(branches / "keep-d0")
    entries = [{"run_dir": str(branches / "keep-d0")}, {"run_dir": "x/.."}]
    (branches / "branches.json").write_text(json.dumps({"branches": entries}), "utf-8")
    runs = tmp_path / "runs"
    copy_run(runs / "mine")
    (runs / "latest").symlink_to(runs / "mine")  # inside: followed
    (runs / "linked").symlink_to(private)
    (runs / "log-linked").mkdir()
    (runs / "log-linked" / "events.jsonl").symlink_to(private / "events.jsonl")
    assert set(view.find_target(runs).runs) == {"latest", "mine"}
    assert set(view.find_target(branches).runs) == {"keep-d0"}
    with view.ViewServer(branches) as server:
        page.goto(server.url)
        assert page.locator("#side-by-side tr").first.locator("th a").all_inner_texts() == [
            "keep-d0"
        ]
        assert "PRIVATE-TASK" not in page.content()
        assert page.locator(".problem").first.inner_text().endswith("not shown: ..")
        assert status_of(server.url, "/run/..") == 404
    with view.ViewServer(runs) as server:
        page.goto(server.url)
        assert page.locator("#runs a").all_inner_texts() == ["latest", "mine"]
        left_out = page.locator(".problem").first.inner_text()
        assert "linked" in left_out and "log-linked" in left_out
        for name in ("linked", "log-linked", "../private", "linked/../linked"):
            assert status_of(server.url, f"/run/{name}") == 404, name
    index = view.export(runs, tmp_path / "site")
    assert "PRIVATE-TASK" not in "".join(
        p.read_text("utf-8") for p in [index, *(tmp_path / "site" / "runs").iterdir()]
    )


# --- export -----------------------------------------------------------------------------------


def test_an_export_folder_that_cannot_be_written_is_one_line_and_status_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dangling link, a path below a file, a name too long for the file system: the command
    says it cannot write there, in one line, and exits 2 (no traceback); so for a folder to
    show whose name the file system refuses."""
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "site")
    (tmp_path / "a-file").write_text("x", "utf-8")
    for out in ("dangling", "a-file/site", "x" * 300):
        with pytest.raises(view.ViewError, match="cannot write"):
            view.export(FIXTURE, tmp_path / out)
        assert cli(["view", str(FIXTURE), "--export", str(tmp_path / out)]) == 2
        err = capsys.readouterr().err
        assert "cannot write" in err and len(err.strip().splitlines()) == 1, err
    too_long = tmp_path / ("x" * 300)  # as the folder to show
    with pytest.raises(view.ViewError, match="name too long"):
        view.export(too_long, tmp_path / "site")
    for args in ([], ["--export", str(tmp_path / "site")]):
        assert cli(["view", str(too_long), *args]) == 2
        err = capsys.readouterr().err
        assert "name too long" in err and len(err.strip().splitlines()) == 1, err


# --- huge logs --------------------------------------------------------------------------------


def long_run(dest: Path, blocks: int) -> Path:
    """A run of ``blocks`` one-call blocks made of the fixture's own events (4 events a block,
    6 more around them), written directly."""
    events = {}
    for line in (FIXTURE / "events.jsonl").read_text("utf-8").splitlines():
        events.setdefault(json.loads(line)["type"], json.loads(line))
    dest.mkdir(parents=True)
    with (dest / "events.jsonl").open("w", encoding="utf-8") as log:
        seq = 0

        def write(event: dict[str, Any]) -> None:
            nonlocal seq
            log.write(json.dumps(event | {"seq": seq}) + "\n")
            seq += 1

        write(events["run_start"])
        write(events["planner_turn"])
        for i in range(blocks):
            block = f"t0.b{i}"
            write(events["block_start"] | {"block_id": block})
            boundary = events["boundary"]["boundary"] | {"block_id": block, "call_index": i}
            write(events["boundary"] | {"boundary": boundary, "review": False})
            call = events["primitive_call"]["call"] | {"block_id": block, "call_index": i}
            write(events["primitive_call"] | {"call": call})
            write(
                events["block_end"]
                | {"result": events["block_end"]["result"] | {"block_id": block}}
            )
        write(events["final_verdict"])
        write(events["run_end"])
    return dest


def test_a_huge_log_is_cut_into_pages_bounded_in_events_and_bytes(
    page: Page,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Past a page's bound in events, or in bytes, the next page starts at the next block:
    every page stays within its bound (plus the rest of one block), every event is on one
    page, the totals and the verdict count the whole run on each."""
    run = long_run(tmp_path / "run", 500)  # 2,004 events, 4 a block
    monkeypatch.setattr(timeline, "PAGE_EVENTS", 202)
    pages = list(view.iter_run_pages(run))
    assert len(pages) == 10 and all(p.events == 2004 for p in pages)  # 202, then 204 each
    shown = [p.events - p.hidden for p in pages]
    assert sum(shown) == 2004 and max(shown) <= 202 + 3  # full, then the block's rest
    boundaries = [len(p.boundaries) for p in pages]
    assert sum(boundaries) == 500 and set(boundaries[:-1]) <= {50, 51}
    assert all(p.summary is not None and p.summary.primitive_calls == 500 for p in pages)
    with view.ViewServer(run) as server:
        page.goto(server.url + "?page=3")
        assert page.locator("details.boundary").count() == 51
        assert "Page 3 of 10" in page.locator("#pager-top").inner_text()
        assert "500 primitive calls" in page.locator("#totals").inner_text()
        assert page.locator("#verdict").is_visible()
        assert page.locator(".problem").count() == 0  # pages are no problem
    monkeypatch.setattr(timeline, "PAGE_EVENTS", 20_000)
    size = (run / "events.jsonl").stat().st_size // 40  # about 12 of the 500 blocks' bytes
    monkeypatch.setattr(timeline, "PAGE_BYTES", size)
    read = view.read_run(run)
    assert 0 < len(read.boundaries) < 20 and read.pages > 25


def test_reading_a_huge_log_keeps_memory_flat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page model of a log ten times longer takes no more memory (the page's bound, not
    the log, sets it)."""
    monkeypatch.setattr(timeline, "PAGE_EVENTS", 400)
    peaks = []
    for blocks in (200, 2000):
        run = long_run(tmp_path / f"run-{blocks}", blocks)
        tracemalloc.start()
        read = view.read_run(run)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert read.summary is not None and read.summary.primitive_calls == blocks
    assert peaks[1] < 1.5 * peaks[0], peaks


def test_concurrent_requests_build_at_most_a_few_pages_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Many requests at once: the pages are built a few at a time (each one's memory is bounded,
    so the server's is); a request that waits too long gets a page saying the viewer is busy."""
    lock = threading.Lock()
    building = [0, 0]  # now, most at once
    release = threading.Event()

    def slow_page(target: view.Target, links: Any, number: int = 1) -> str:
        with lock:
            building[0] += 1
            building[1] = max(building)
        release.wait(timeout=30)
        with lock:
            building[0] -= 1
        return "<p id='built'>built</p>"

    monkeypatch.setattr(app, "render_target", slow_page)
    with view.ViewServer(FIXTURE) as server, ThreadPoolExecutor(8) as pool:
        answers = [pool.submit(get, server.url) for _ in range(8)]
        deadline = time.monotonic() + 60
        while building[1] < app.MAX_RENDERS and time.monotonic() < deadline:
            threading.Event().wait(0.05)
        threading.Event().wait(0.5)  # room for more to start, were they allowed to
        monkeypatch.setattr(app, "RENDER_WAIT_S", 0.01)
        busy = get(server.url)
        release.set()
        results = [a.result() for a in answers]
    assert building[1] == app.MAX_RENDERS
    assert all(status == 200 and "built" in html for status, html in results)
    assert busy[0] == 503 and "The viewer is busy" in busy[1]


# --- the server -------------------------------------------------------------------------------


def for_host(url: str, host: str) -> tuple[int, str]:
    """The status and text of the page at ``url`` asked for with ``host`` in the Host header
    (what a browser sends for a site whose name was made to point at this machine: DNS
    rebinding)."""
    parts = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request("GET", "/", headers={"Host": host})
        response = connection.getresponse()
        return response.status, response.read().decode("utf-8")
    finally:
        connection.close()


def test_a_loopback_server_answers_no_other_site(page: Page) -> None:  # noqa: F811
    """Served on loopback, the pages are given only to a request naming this machine: a page
    of another site whose name resolves here (DNS rebinding) cannot read the runs."""
    with view.ViewServer(FIXTURE) as server:
        port = urllib.parse.urlsplit(server.url).port
        for host in (f"attacker.example:{port}", "attacker.example", "[not-a-host", ""):
            status, html = for_host(server.url, host)
            assert status == 403 and "--host" in html and "english_talent" not in html, host
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", "localhost", "127.0.0.2"):
            assert for_host(server.url, host)[0] == 200, host
        page.goto(f"http://localhost:{port}/")
        assert page.locator("#run-title").is_visible()


def test_serving_beyond_loopback_warns_and_answers_any_host(tmp_path: Path) -> None:
    """``--host 0.0.0.0`` serves every interface: the command says so (the pages show agent
    text and have no login) and answers whatever name the machine is reached by."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-m", "controlscope.cli", "view", str(FIXTURE)]
    process = subprocess.Popen(
        [*command, "--host", "0.0.0.0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://0.0.0.0:")
        port = urllib.parse.urlsplit(url).port
        local = f"http://127.0.0.1:{port}/"
        assert for_host(local, f"my-machine.example:{port}")[0] == 200
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    warning = [line for line in err.splitlines() if "warning" in line]
    assert len(warning) == 1 and "0.0.0.0" in warning[0] and "loopback" in warning[0], err


def test_an_exported_page_of_a_live_run_does_not_claim_to_refresh(
    page: Page,  # noqa: F811
    tmp_path: Path,
) -> None:
    """A static page has no script: exported while its run was still written, it says the run
    has no end yet, not that it will refresh (the served page does both)."""
    run = tmp_path / "live"
    run.mkdir()
    lines = (FIXTURE / "events.jsonl").read_text("utf-8").splitlines(keepends=True)
    (run / "events.jsonl").write_text("".join(lines[:8]), "utf-8")
    index = view.export(run, tmp_path / "site")
    page.goto(index.as_uri())
    banner = page.locator("#live").inner_text()
    assert "no run_end yet" in banner and "refresh" not in banner
    with view.ViewServer(run) as server:
        page.goto(server.url)
        assert "this page refreshes" in page.locator("#live").inner_text()
