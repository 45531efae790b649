"""The viewer (``controlscope view``) in a real browser: headless Chromium from the system's
``chromium`` package driven by playwright, on the committed fixture and on runs and branches
recorded here with scripted models on the real worker and MCP server.

A missing Chromium fails these tests (``scripts/setup.sh`` installs it). Screenshots of the main
pages are saved in each test's own temporary folder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from playwright.sync_api import Page

import _browser_support
import controlscope as cs
from controlscope import replay, view
from controlscope.cli import main as cli
from controlscope.core import Boundary, CallSite, ModelCallEvent, PatchBlockData
from controlscope.models import ScriptedModel
from controlscope.review import ModelReviewer
from test_api import BROKEN, SOLVE
from test_replay import KEEP, PATCH, fenced, record

browser = _browser_support.browser  # the fixtures, used by name
page = _browser_support.page

FIXTURE = Path(__file__).parent / "fixtures" / "main_job"

#: Agent text that would run if it were not escaped: it sets ``window.pwned``.
HOSTILE = '<script>window.pwned = 1</script><img src="x" onerror="window.pwned = 2">'

#: A replacement whose first call differs from the source program's (other content).
OTHER = """
for i in range(1, 5):
    chunk = lines[i * per:(i + 1) * per]
    write_file(path=f"{root}/split/part_{i + 1:02d}.txt", content="REPLACED\\n")
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A Keep source (7 calls), a Full run whose agent prints hostile text and whose reviewer
    patches call 2's arguments and replaces the rest at call 3, and two branches of the Keep
    source at call 3 (Keep; Full replacing with other content)."""
    tmp = tmp_path_factory.mktemp("runs")
    keep = record(tmp, "keep", [fenced(SOLVE), "Done."], [], scope="keep", schedule="never")
    hostile_code = f"print({HOSTILE!r})\n" + BROKEN
    replace = json.dumps(
        {"reason": f"fix the names {HOSTILE}", "operation": "replace_workflow", "code": OTHER}
    )
    revised = record(
        tmp,
        "revised",
        [fenced(hostile_code), f"Done. {HOSTILE}"],
        [KEEP, PATCH, replace, *[KEEP] * 8],
        scope="full",
        schedule="continuous",
    )
    found = replay.branch(
        keep,
        at=3,
        scopes=["keep", "full"],
        out=tmp / "branches",
        planner=ScriptedModel(["Done."] * 4),
        reviewer=ModelReviewer(ScriptedModel([replace, *[KEEP] * 8])),
    )
    assert found.ok
    return {"keep": keep, "revised": revised, "branches": tmp / "branches"}


def shot(page: Page, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, response.read().decode("utf-8")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode("utf-8")


def open_boundary(page: Page, boundary_id: str) -> None:
    details = page.locator(f"#{boundary_id}")
    if details.get_attribute("open") is None:
        details.locator(".boundary-head").first.click()


# --- a run ---------------------------------------------------------------------------------


def test_the_committed_fixture_shows_what_the_reviewer_was_shown(
    page: Page, tmp_path: Path
) -> None:
    """The first reviewed boundary of the recorded main job: every message the reviewer was
    sent, whole; the proposal's verdict and the realized operation; what it changed (or, for a
    refused edit, what it proposed) as a diff or as arguments before and after."""
    events = cs.read_events(FIXTURE)
    start = events[0]
    assert start.type == "run_start"
    review = next(e for e in events if isinstance(e, ModelCallEvent) and e.role == "reviewer")
    boundary_seq = max(e.seq for e in events if e.type == "boundary" and e.seq < review.seq)
    after = [e for e in events if e.seq > review.seq]
    proposal = next(e for e in after if e.type == "proposal")
    validation = next(e for e in after if e.type == "validation").validation
    realized = next(e for e in after if e.type == "realized_operation")
    sent = [m.content for m in review.request.messages if m.content]
    with view.ViewServer(FIXTURE) as server:
        page.goto(server.url)
        assert start.task.id in page.title()
        open_boundary(page, f"boundary-{boundary_seq}")
        boundary = page.locator(f"#boundary-{boundary_seq}")
        shown = boundary.locator(".reviewer-view pre").all_text_contents()
        for text in sent:  # exactly what was sent, every message, whole
            assert text in shown
        verdict = boundary.locator(".validation").inner_text()
        if validation.accepted:
            assert verdict.startswith("accepted")
        else:
            assert verdict.startswith("rejected") and str(validation.reason) in verdict
        head = boundary.locator(".boundary-head").inner_text()
        assert realized.operation.kind in head
        if realized.fallback:
            assert f"fallback: {realized.fallback}" in head
        edit = realized.operation if realized.operation.kind != "keep" else proposal.operation
        if edit is not None and edit.kind in ("replace_workflow", "patch_block_data"):
            diff = boundary.locator(".code-diff")
            assert diff.is_visible()
            added = [line[1:] for line in diff.locator(".add").all_text_contents()]
            assert "\n".join(added) == edit.code.strip("\n")
        elif edit is not None and edit.kind == "patch_arguments":
            assert boundary.locator("table.arguments tr.changed").count() >= 1
        summary = cs.read_summary(FIXTURE)
        totals = page.locator("#totals").inner_text()
        assert f"{summary.primitive_calls} primitive calls" in totals
        shot(page, tmp_path, "fixture-run")


def test_a_scripted_run_shows_patches_diffs_tokens_and_checks_with_agent_text_escaped(
    runs: dict[str, Path], page: Page, tmp_path: Path
) -> None:
    events = cs.read_events(runs["revised"])
    boundaries: dict[int, int] = {}  # call index -> its first boundary (a replacement's repeats it)
    for e in events:
        if e.type == "boundary":
            boundaries.setdefault(e.boundary.call_index, e.seq)
    with view.ViewServer(runs["revised"]) as server:
        page.goto(server.url)
        # Hostile text is shown as text: in the printed output, the planner's answer and the
        # reviewer's reason; nothing of it ran.
        assert page.evaluate("window.pwned") is None
        assert page.get_by_text(HOSTILE).count() >= 3
        assert page.locator("img[src='x']").count() == 0
        # Call 2: the argument patch, before and after.
        patched = page.locator(f"#boundary-{boundaries[2]}")
        row = patched.locator("table.arguments tr.changed")
        assert row.count() == 1
        cells = row.locator("td").all_inner_texts()
        assert cells[0] == "path" and "chunk_01" in cells[1] and "part_01" in cells[2]
        assert patched.locator(".validation").inner_text().startswith("accepted")
        # Call 3: the replacement, as a diff of the block.
        replaced = page.locator(f"#boundary-{boundaries[3]}")
        added = replaced.locator(".code-diff .add").all_text_contents()
        assert any("REPLACED" in line for line in added)
        assert any(
            "chunk_" in line for line in replaced.locator(".code-diff .del").all_text_contents()
        )
        assert "call cancelled" in replaced.locator(".boundary-head").inner_text()
        # A boundary that was not changed, opened: its observation and the tokens so far.
        kept = page.locator(f"#boundary-{boundaries[0]}")
        open_boundary(page, f"boundary-{boundaries[0]}")
        assert "read_text_file" in kept.locator(".boundary-head").inner_text()
        assert kept.locator("table.tokens").is_visible()
        assert "of 100 calls" in kept.locator(".budgets").inner_text()
        # The verifier's checks, with their reasons.
        final = next(e for e in events if e.type == "final_verdict")
        checks = page.locator("table.checks tr").all_inner_texts()
        assert len(checks) == len(final.verdict.checks) + 1
        # The second planner request shows only what the first did not hold, and says so.
        second = page.locator(".planner-call").nth(1)
        second.locator("summary").first.click()
        assert "the same as in the previous planner request" in second.inner_text()
        shot(page, tmp_path, "scripted-run")
    assert page.evaluate("window.pwned") is None


def test_a_live_run_refreshes_as_its_log_grows(
    runs: dict[str, Path], page: Page, tmp_path: Path
) -> None:
    lines = (runs["keep"] / "events.jsonl").read_bytes().splitlines(keepends=True)
    live = tmp_path / "live"
    live.mkdir()
    log = live / "events.jsonl"
    log.write_bytes(b"".join(lines[:6]) + lines[6][: len(lines[6]) // 2])  # cut mid-line
    with view.ViewServer(live) as server:
        page.goto(server.url)
        assert page.locator("#live").is_visible()
        assert "incomplete" in page.locator(".problem").first.inner_text()
        with log.open("ab") as f:
            f.write(lines[6][len(lines[6]) // 2 :] + b"".join(lines[7:]))
        page.wait_for_selector("#verdict", timeout=20_000)  # it reloaded by itself
        assert page.locator("#live").count() == 0 and page.locator(".problem").count() == 0
        shot(page, tmp_path, "live-run-ended")


# --- branches side by side -----------------------------------------------------------------


def test_branches_side_by_side_show_the_first_divergence(
    runs: dict[str, Path], page: Page, tmp_path: Path
) -> None:
    with view.ViewServer(runs["branches"]) as server:
        page.goto(server.url)
        headers = page.locator("#side-by-side tr").first.locator("th a").all_inner_texts()
        assert headers == ["keep-d0", "full-d0"]
        first = page.locator("#first-divergence")
        assert first.locator("th").inner_text().startswith("call #3")
        keep_cell, full_cell = first.locator("td").all_inner_texts()
        assert "REPLACED" in full_cell and "REPLACED" not in keep_cell
        assert page.locator("#side-by-side tr.first-divergence").count() == 1
        decision = page.locator("tr.decision td").all_inner_texts()
        assert decision[0].startswith("keep") and decision[1].startswith("replace_workflow")
        assert page.get_by_text("<script>window.pwned = 1</script>").count() >= 1  # JSON-quoted
        assert page.evaluate("window.pwned") is None
        verdicts = page.locator("tr.verdicts td").all_inner_texts()
        assert "success" in verdicts[0]
        shot(page, tmp_path, "branches")
        page.locator("#side-by-side th a", has_text="full-d0").click()
        page.wait_for_selector("#run-title")
        assert "full-d0" in page.locator("#run-title").inner_text()
        assert page.locator("details.boundary.changed").count() >= 1
        shot(page, tmp_path, "branch-run")


# --- export ----------------------------------------------------------------------------------


def test_export_writes_pages_that_open_from_disk_without_script(
    runs: dict[str, Path], page: Page, tmp_path: Path
) -> None:
    out = tmp_path / "site"
    index = view.export(runs["branches"], out)
    assert index == out / "index.html"
    pages = [index, *sorted((out / "runs").glob("*.html"))]
    assert len(pages) == 3
    for path in pages:
        assert "<script" not in path.read_text("utf-8")  # agent text escaped, no script of ours
    page.goto(index.as_uri())
    assert page.locator("#first-divergence").count() == 1
    page.locator("#side-by-side th a", has_text="keep-d0").click()
    page.wait_for_selector("#run-title")
    assert page.url.startswith("file://") and "keep-d0" in page.locator("#run-title").inner_text()
    page.locator("header.top a").click()
    page.wait_for_selector("#side-by-side")
    with pytest.raises(view.ViewError, match="not an empty folder"):
        view.export(runs["branches"], out)


# --- bad input -------------------------------------------------------------------------------


def corrupt_copies(source: Path, root: Path) -> dict[str, Path]:
    """Copies of a run's log: a corrupt line in the middle, a newer schema's event in the
    middle and first, a cut last line; a folder with no run."""
    lines = (source / "events.jsonl").read_text("utf-8").splitlines(keepends=True)
    newer = json.loads(lines[3]) | {"schema_version": 99}
    variants = {
        "corrupt": [*lines[:3], "{not json\n", *lines[4:]],
        "newer": [*lines[:3], json.dumps(newer) + "\n", *lines[4:]],
        "newer_first": [json.dumps(json.loads(lines[0]) | {"schema_version": 99}) + "\n"],
        "truncated": [*lines[:-1], lines[-1][:20]],
        "not_a_log": ["hello\n"],
    }
    out: dict[str, Path] = {}
    for name, content in variants.items():
        (root / name).mkdir(parents=True)
        (root / name / "events.jsonl").write_text("".join(content), "utf-8")
        out[name] = root / name
    (root / "empty").mkdir()
    out["empty"] = root / "empty"
    return out


def test_bad_input_is_a_clear_page_never_a_traceback(
    runs: dict[str, Path], page: Page, tmp_path: Path
) -> None:
    bad = corrupt_copies(runs["keep"], tmp_path / "bad")
    expected = {
        "corrupt": "cannot be read past this point",
        "newer": "schema version 99",
        "newer_first": "schema version 99",
        "truncated": "incomplete",
        "not_a_log": "does not start with a run_start event",
        "empty": "is not a run directory",
    }
    for name, message in expected.items():
        with view.ViewServer(bad[name]) as server:
            status, html = get(server.url)
            assert status == 200 and message in html, name
            assert "Traceback" not in html
            page.goto(server.url)
            assert message in page.locator(".problem").first.inner_text(), name
            if name in ("corrupt", "newer"):  # the events before the bad line are shown
                assert page.locator("#run-title").is_visible()
            if name == "corrupt":
                shot(page, tmp_path, "corrupt-log")
    broken = tmp_path / "broken-branches"
    shutil.copytree(runs["branches"], broken)
    (broken / "branches.json").write_text("{not json", "utf-8")
    with view.ViewServer(broken) as server:  # the branches are still found by their logs
        page.goto(server.url)
        assert "branches.json is not JSON" in page.locator(".problem").first.inner_text()
        assert page.locator("#first-divergence").count() == 1
    with view.ViewServer(tmp_path / "bad") as server:  # a folder of runs
        status, html = get(server.url)
        assert status == 200 and html.count('href="/run/') == len(bad) - 1
        status, html = get(server.url + "run/../../etc/passwd")
        assert status == 404 and "root:" not in html
        status, html = get(server.url + "run/nothing")
        assert status == 404 and "has no run" in html
        status, html = get(server.url + "run/corrupt")
        assert status == 200 and "cannot be read past this point" in html
        assert get(server.url + "no/such/page")[0] == 404


def test_the_page_asks_the_browser_to_run_no_inline_script(runs: dict[str, Path]) -> None:
    with (
        view.ViewServer(runs["revised"]) as server,
        urllib.request.urlopen(server.url, timeout=30) as response,
    ):
        policy = response.headers["Content-Security-Policy"]
        html = response.read().decode("utf-8")
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy.split("script-src")[1]
    assert html.count("<script") == 0  # the run has ended: no live refresh, no script at all
    assert "&lt;script&gt;window.pwned" in html


# --- the command line ------------------------------------------------------------------------


def test_the_command_serves_until_terminated_and_prints_the_url(runs: dict[str, Path]) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    process = subprocess.Popen(
        [sys.executable, "-m", "controlscope.cli", "view", str(runs["revised"])],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        status, html = get(url)
        assert status == 200 and "replace_workflow" in html
    finally:
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "Traceback" not in err


def test_the_command_refuses_bad_input_with_one_line(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["view", str(tmp_path / "missing")]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert cli(["view", str(runs["keep"]), "--port", "70000"]) == 2
    assert "from 0 to 65,535" in capsys.readouterr().err
    assert cli(["view", str(tmp_path), "--export", str(tmp_path / "out")]) == 2
    assert "is not a run directory" in capsys.readouterr().err
    assert cli(["view", str(runs["keep"]), "--export", str(tmp_path / "site")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "site" / "index.html")
    with view.ViewServer(runs["keep"]) as server:  # its port is taken
        port = server.url.rsplit(":", 1)[1].strip("/")
        assert cli(["view", str(runs["keep"]), "--port", port]) == 2
        assert "cannot listen" in capsys.readouterr().err


# --- what an operation changed ---------------------------------------------------------------


def test_a_block_data_edit_is_a_diff_of_the_constants_it_changed() -> None:
    code = 'x = read_text_file(path="/workspace/a.txt")\nprint(x)\n'
    edit = PatchBlockData(code=code.replace("a.txt", "b.txt"))
    lines = view.code_diff(code, edit)
    assert lines is not None
    assert [(d.kind, d.text) for d in lines if d.kind in ("add", "del")] == [
        ("del", '-x = read_text_file(path="/workspace/a.txt")'),
        ("add", '+x = read_text_file(path="/workspace/b.txt")'),
    ]
    assert [d.text for d in lines if d.kind == "ctx"] == [" print(x)"]
    assert view.code_diff(code, cs.Keep()) is None
    changes = view.argument_changes({"path": "a", "n": 1}, {"path": "b", "n": 1, "new": True})
    assert [(c.name, c.changed) for c in changes] == [("path", True), ("n", False), ("new", True)]
    assert changes[2].before == "" and changes[2].after == "true"


def test_a_planner_request_shows_the_messages_the_previous_one_did_not_hold(
    runs: dict[str, Path],
) -> None:
    page = view.read_run(runs["revised"])
    calls = [c for t in page.turns for c in t.planner_calls]
    assert len(calls) == 2 and calls[0].shared == 0 and calls[0].previous is None
    first, second = (c.event.request.messages for c in calls)
    assert calls[1].previous == calls[0].event.seq
    assert 0 < calls[1].shared < len(second)
    assert second[: calls[1].shared] == first[: calls[1].shared]
    assert len(first) == calls[1].shared or first[calls[1].shared] != second[calls[1].shared]


def test_the_run_page_model_reads_a_boundary_whole() -> None:
    page = view.read_run(FIXTURE)
    events = cs.read_events(FIXTURE)
    assert page.start is not None and page.end is not None and not page.problems
    assert page.events == len(events)
    assert len(page.boundaries) == sum(e.type == "boundary" for e in events)
    boundary = page.boundaries[0]
    assert isinstance(boundary.boundary, Boundary)
    assert isinstance(boundary.boundary.call_site, CallSite)
    assert boundary.tokens.roles["planner"].logical.requests >= 1
    assert page.summary is not None
    assert page.summary.primitive_calls == sum(e.type == "primitive_call" for e in events)


def test_the_view_package_documents_its_public_names() -> None:
    from test_api_shape import shape

    problems = shape.documentation_problems("controlscope.view")
    assert [p for plist in problems.values() for p in plist] == []
