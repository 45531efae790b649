"""A person as the reviewer (``controlscope run --reviewer human``, ``cs.HumanReviewer``): the
review page in real Chromium (Debian's ``chromium`` under playwright, as the viewer's tests),
the terminal through a pseudo-terminal, and the time limit; all on the real worker and MCP
server with a scripted planner.

Screenshots of the review page are saved in each test's own temporary folder.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

import _browser_support
import controlscope as cs
from _process_support import sigint_as
from controlscope import view
from controlscope.cli import main as cli
from controlscope.core import (
    Boundary,
    CallSite,
    OperationSet,
    PrimitiveCallEvent,
    ProposalEvent,
    RealizedOperationEvent,
)
from test_api import TASK, script

browser = _browser_support.browser  # the fixtures, used by name
page = _browser_support.page

#: Call 0 is not reviewed (continuous review starts after a completed call); call 1 (a read
#: with an integer-valued ``head``) and call 2 (a write) are.
BLOCK = """
create_directory(path="/workspace/split")
text = read_text_file(path="/workspace/large_file.txt", head=2)
write_file(path="/workspace/split/out.txt", content=text)
"""

#: Agent text that would run if it were not escaped.
HOSTILE = '<img src="x" onerror="window.pwned = 1">'

expect.set_options(timeout=30_000)  # a loaded machine: waits only prove nothing hangs

REPLACEMENT = 'write_file(path="/workspace/split/replaced.txt", content="typed by a person")\n'


def fenced(code: str) -> str:
    return f"```python\n{code}\n```"


def calls(run_dir: Path) -> list[Any]:
    return [e.call for e in cs.read_events(run_dir) if isinstance(e, PrimitiveCallEvent)]


def proposals(run_dir: Path) -> list[ProposalEvent]:
    return [e for e in cs.read_events(run_dir) if isinstance(e, ProposalEvent)]


def post(url: str, body: dict[str, Any], key: str | None) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["X-Review-Key"] = key
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def shown(page: Page, tool: str) -> None:
    """Wait until the review page shows a call of ``tool`` and its buttons answer."""
    expect(page.locator("#pending-tool")).to_have_text(tool, timeout=60_000)
    expect(page.locator("#review")).to_have_attribute("data-ready", "true")


def shot(page: Page, tmp_path: Path, name: str) -> None:
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 0


def test_the_printed_review_page_edits_an_argument_and_the_call_runs_with_it(
    page: Page, tmp_path: Path
) -> None:
    """``controlscope run --reviewer human`` prints the review page's address; the run waits
    at call 1; the person changes ``head`` in the form generated from the schema; the
    executed call has the new value; the decision is recorded as a person's."""
    out = tmp_path / "run"
    model = script(tmp_path, fenced(f"print({HOSTILE!r})\n" + BLOCK), "Done.")
    command = [sys.executable, "-m", "controlscope.cli", "run", "--task", TASK, "--model"]
    command += [model, "--reviewer", "human", "--scope", "full", "--out", str(out), "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(Path(cs.__file__).parents[1])}
    run = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert run.stderr is not None
        line = run.stderr.readline()
        found = re.search(r"review page: (http://127\.0\.0\.1:\d+/review#key=\S+)", line)
        assert found, line
        page.goto(found.group(1))
        shown(page, "read_text_file")
        assert page.evaluate("window.pwned") is None  # the agent's text is shown, not run
        expect(page.locator("#review-block .pending-line")).to_contain_text("head=2")
        page.locator('.arg[data-name="head"]').fill("3")
        shot(page, tmp_path, "review-page")
        page.locator("#decide-patch_arguments").click()
        expect(page.locator("#review-message")).to_contain_text("accepted")
        shown(page, "write_file")
        page.locator("#decide-keep").click()
        assert run.wait(timeout=120) == 0  # the run ends (and its page with it)
    finally:
        run.kill()
        run.wait()
    read = calls(out)[1]
    assert read.tool == "read_text_file" and read.arguments["head"] == 3
    assert read.operation == "patch_arguments" and read.requested == {
        "path": "/workspace/large_file.txt",
        "head": 2,
    }
    first = proposals(out)[0]
    assert first.reviewer == "human" and first.human is not None
    assert first.human.channel == "browser" and not first.human.timed_out
    assert first.human.where.startswith("http://127.0.0.1:") and "key" not in first.human.where
    with view.ViewServer(out) as server:  # the run's page shows who decided
        page.goto(server.url)
        page.locator(".boundary-head").first.click()
        expect(page.locator(".human-decision").first).to_contain_text("by a person at the browser")


@pytest.fixture
def waiting(tmp_path: Path) -> Iterator[tuple[cs.HumanReviewer, view.ViewServer, Path]]:
    """A run (in a thread of this process) waiting at call 1 for the review page."""
    out = tmp_path / "run"
    reviewer = cs.HumanReviewer(label="the run")
    spec = cs.RunSpec(
        task=TASK, model=script(tmp_path, fenced(BLOCK), "Done."), scope="full", out=out
    )
    thread = threading.Thread(target=cs.run_task, args=(spec,), kwargs={"reviewer": reviewer})
    with view.ViewServer(out, desk=reviewer.desk) as server:
        thread.start()
        deadline = time.monotonic() + 60
        while not reviewer.desk.pending() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reviewer.desk.pending(), "the run did not reach its first reviewed boundary"
        yield reviewer, server, out
        for pending in reviewer.desk.pending():  # let the run end
            reviewer.desk.decide(pending.ticket, reviewer.desk.secret, "keep")
        thread.join(60)
        while reviewer.desk.pending() or thread.is_alive():
            for pending in reviewer.desk.pending():
                reviewer.desk.decide(pending.ticket, reviewer.desk.secret, "keep")
            thread.join(0.2)


def test_a_wrong_type_is_refused_with_the_schemas_reason_and_a_typed_replacement_runs(
    page: Page, tmp_path: Path, waiting: tuple[cs.HumanReviewer, view.ViewServer, Path]
) -> None:
    """A value of the wrong type is refused on the page with the schema's reason and nothing
    is sent; sent anyway, the run's validation refuses it too; a decision without the secret,
    or for a boundary no longer pending, is refused; a replacement typed in runs."""
    reviewer, server, out = waiting
    assert server.review_url is not None
    page.goto(server.url)  # the run's live page links to the review page while a call waits
    expect(page.locator("#review-banner a")).to_have_attribute("href", "/review")
    page.goto(server.review_url)
    shown(page, "read_text_file")
    page.locator('.arg[data-name="head"]').fill("two")
    page.locator("#decide-patch_arguments").click()
    expect(page.locator("#review-message")).to_contain_text("head: \"two\" is not of type 'number'")
    shot(page, tmp_path, "refused-on-the-page")
    ticket = reviewer.desk.pending()[0].ticket
    assert reviewer.desk.pending()[0].refused == []  # nothing was sent
    decide = f"{server.url}_review/decide"
    wrong = {"ticket": ticket, "operation": "patch_arguments", "arguments": {"head": "two"}}
    status, answer = post(decide, wrong, reviewer.desk.secret)
    assert status == 422 and "schema_violation" in answer["detail"]
    assert "'two' is not of type 'number'" in answer["detail"]
    keep = {"ticket": ticket, "operation": "keep"}
    assert post(decide, keep, None)[0] == 403
    assert post(decide, keep, "another run's secret")[0] == 403
    assert post(decide, {**keep, "ticket": "another"}, reviewer.desk.secret)[0] == 409
    assert len(calls(out)) == 1  # the run still waits at call 1: nothing ran
    page.locator("#code-replace_workflow").fill(REPLACEMENT)
    page.locator("#decide-replace_workflow").click()
    expect(page.locator("#review-message")).to_contain_text("accepted")
    assert post(decide, keep, reviewer.desk.secret)[0] == 409  # decided: no longer pending
    deadline = time.monotonic() + 60
    while len(calls(out)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    made = calls(out)[1]
    assert made.tool == "write_file"
    assert made.arguments == {
        "path": "/workspace/split/replaced.txt",
        "content": "typed by a person",
    }
    first = proposals(out)[0]
    assert first.human is not None and len(first.human.refused) == 1
    assert first.operation is not None and first.operation.kind == "replace_workflow"


def test_a_decision_not_made_in_time_is_a_recorded_timeout_fallback(tmp_path: Path) -> None:
    """Nobody decides: each reviewed boundary is a ``timeout`` fallback (Keep), recorded."""
    out = tmp_path / "run"
    reviewer = cs.HumanReviewer(timeout_s=0.3)
    spec = cs.RunSpec(
        task=TASK, model=script(tmp_path, fenced(BLOCK), "Done."), scope="full", out=out
    )
    result = cs.run_task(spec, reviewer=reviewer)
    assert result.summary.reviews == 2 and result.summary.fallbacks["timeout"] == 2
    assert calls(out)[1].arguments["head"] == 2  # kept as the block asked
    realized = [e for e in cs.read_events(out) if isinstance(e, RealizedOperationEvent)]
    assert [(e.operation.kind, e.fallback, e.model_called) for e in realized] == [
        ("keep", "timeout", False)
    ] * 2
    first = proposals(out)[0]
    assert first.reviewer == "human" and first.human is not None and first.human.timed_out


def _read_until(fd: int, pattern: str, seen: list[str], timeout: float = 60) -> str:
    """What the terminal printed until ``pattern`` (a regular expression) appears."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        text = "".join(seen)
        if re.search(pattern, text):
            return text
        ready, _, _ = select.select([fd], [], [], 0.5)
        if ready:
            try:
                seen.append(os.read(fd, 65536).decode("utf-8", "replace"))
            except OSError:  # the child closed the terminal
                break
    raise AssertionError(f"the terminal never showed {pattern!r}:\n{''.join(seen)[-3000:]}")


def test_the_terminal_reviewer_edits_arguments_as_json_and_a_refused_try_is_retried(
    tmp_path: Path,
) -> None:
    """``--reviewer human:terminal`` through a pseudo-terminal: the state is shown, a wrong
    type is refused with the schema's reason, the person tries again, the call is made with
    the new value; a replacement is written in ``$EDITOR``."""
    out = tmp_path / "run"
    editor = tmp_path / "editor.py"
    editor.write_text(
        f"import sys\nopen(sys.argv[1], 'w').write({REPLACEMENT!r})\n"  # the person's edit
    )
    model = script(tmp_path, fenced(BLOCK), "Done.")
    command = [sys.executable, "-m", "controlscope.cli", "run", "--task", TASK, "--model"]
    command += [model, "--reviewer", "human:terminal", "--scope", "full", "--out", str(out)]
    env = {**os.environ, "PYTHONPATH": str(Path(cs.__file__).parents[1]), "COLUMNS": "120"}
    env["EDITOR"] = f"{sys.executable} {editor}"
    env.pop("VISUAL", None)
    master, slave = pty.openpty()
    run = subprocess.Popen(command, stdin=slave, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    seen: list[str] = []
    try:
        shown = _read_until(master, r"decision \(", seen)
        assert "read_text_file" in shown and '"head": 2' in shown
        os.write(master, b"2\n")
        _read_until(master, r"JSON object", seen)
        os.write(master, b'{"head": "two"}\n')
        _read_until(master, r"refused", seen)
        assert "is not of type 'number'" in "".join(seen)
        os.write(master, b"2\n")
        seen.clear()
        _read_until(master, r"JSON object", seen)
        os.write(master, b'{"head": 3}\n')
        _read_until(master, r"(?s)pending call.*write_file.*decision \(", seen)
        os.write(master, b"3\n")
        assert run.wait(timeout=120) == 0
    finally:
        run.kill()
        run.wait()
        os.close(master)
    made = calls(out)
    assert made[1].arguments["head"] == 3
    assert made[2].arguments["path"] == "/workspace/split/replaced.txt"
    first = proposals(out)[0]
    assert first.human is not None and first.human.channel == "terminal"
    assert first.human.where.startswith("/dev/pts/") and len(first.human.refused) == 1


def test_ctrl_c_while_a_person_is_awaited_ends_the_run_recorded_as_interrupted(
    tmp_path: Path,
) -> None:
    """SIGINT (Ctrl-C) while the run waits at the review page: exit 130, ``run_end``
    ``interrupted``, no proposal recorded for the boundary."""
    out = tmp_path / "run"
    model = script(tmp_path, fenced(BLOCK), "Done.")
    command = [sys.executable, "-m", "controlscope.cli", "run", "--task", TASK, "--model"]
    command += [model, "--reviewer", "human", "--scope", "full", "--out", str(out), "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(Path(cs.__file__).parents[1])}
    with sigint_as("terminal"):  # as Ctrl-C reaches it from a terminal
        run = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            log = out / "events.jsonl"
            if log.exists() and '"type":"review_request"' in log.read_text().replace(" ", ""):
                break
            time.sleep(0.1)
        run.send_signal(signal.SIGINT)
        assert run.wait(timeout=60) == 130
    finally:
        run.kill()
        run.wait()
    events = cs.read_events(out)
    assert events[-1].type == "run_end" and events[-1].end_reason == "interrupted"
    assert not any(isinstance(e, ProposalEvent) for e in events)


def test_a_time_limit_without_a_person_and_a_browser_person_without_a_page_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--review-timeout-s`` is a person's time limit: with the model reviewer it is refused
    (exit 2, one line); ``run_task`` cannot serve the review page, so a browser person without
    a reviewer object is refused before anything runs."""
    out = tmp_path / "run"
    args = ["run", "--task", TASK, "--review-timeout-s", "5", "--out", str(out)]
    assert cli(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "review_timeout_s" in err
    spec = cs.RunSpec(task=TASK, model=script(tmp_path, "Done."), reviewer="human", out=out)
    with pytest.raises(cs.SpecError, match="review page"):
        cs.run_task(spec)
    assert not (out / "events.jsonl").exists()


def _state(tool: str, call_index: int) -> cs.PublicState:
    code = f'{tool}(path="/workspace/a.txt")\n'
    boundary = Boundary(
        block_id="t0.b0",
        call_index=call_index,
        block_call_index=0,
        tool=tool,
        arguments={"path": "/workspace/a.txt"},
        line=1,
        call_site=CallSite(module="__main__"),
        code=code,
    )
    return cs.PublicState(goal="a goal", boundary=boundary)


def test_the_queue_lists_the_boundaries_waiting_oldest_first_escaped(tmp_path: Path) -> None:
    """Several runs sharing one desk: the review page lists what waits, oldest first, each a
    link to its own decision, their text escaped; a decided one leaves the list."""
    desk = cs.review.ReviewDesk()
    granted = OperationSet.of("full")
    first = desk.post(_state("read_text_file", 3), granted, label=f"run {HOSTILE}")
    second = desk.post(_state("write_file", 7), granted, label="the other run")
    with view.ViewServer(tmp_path, desk=desk) as server:
        with urllib.request.urlopen(f"{server.url}review", timeout=30) as response:
            html = response.read().decode()
        queue = html[html.index('<ol id="queue">') : html.index("</ol>")]
        assert queue.index(first.ticket) < queue.index(second.ticket)
        assert HOSTILE not in html and "run &lt;img" in html
        assert f'data-ticket="{first.ticket}"' in html  # the oldest is shown
        assert desk.decide(first.ticket, desk.secret, "keep").answer == "accepted"
        with urllib.request.urlopen(f"{server.url}review", timeout=30) as response:
            html = response.read().decode()
        assert first.ticket not in html and f'data-ticket="{second.ticket}"' in html
        assert '<ol id="queue">' not in html  # one waits: no list
