"""A panel reviewed by a person (``[reviewer] reviewer = "human"``): the panel command serves
the review desk and prints its page's address; the runs, in the panel's pool processes, post
their boundaries to it over HTTP. On real parts: the CLI, the local backend's processes, the
npm filesystem server, the isolated worker, a scripted planner, and the review page in real
Chromium (Debian's ``chromium`` under playwright, as the viewer's tests).

The panel: two units (seeds 0 and 1) of the split task, Keep and Arg, each Arg run reviewed
once, at call 1 (``read_text_file(..., head=2)``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from multiprocessing import resource_tracker
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

import _browser_support
import _session_support
import controlscope as cs
from _process_support import sigint_as
from controlscope import panel as cp
from controlscope import view
from controlscope._proc import alive, cmdline, descendants
from controlscope.cli import main as cli
from controlscope.core import (
    PrimitiveCallEvent,
    ProposalEvent,
    RealizedOperationEvent,
    ValidationEvent,
)
from controlscope.review import DeskAddress, ReviewDesk
from test_api import TASK
from test_human_review import BLOCK, fenced, shot, shown

browser = _browser_support.browser  # the fixtures, used by name
page = _browser_support.page
no_leftovers = _session_support.no_leftovers

expect.set_options(timeout=30_000)  # a loaded machine: waits only prove nothing hangs

ARG_RUNS = [f"{TASK}/s{seed}/p0/arg-d0" for seed in (0, 1)]


def write_panel(tmp: Path, top: dict[str, Any] | None = None, **reviewer: Any) -> Path:
    planner = tmp / "planner.json"
    planner.write_text(json.dumps({"by": "turn", "answers": [fenced(BLOCK), "Done."]}))
    fields = {"tasks": [TASK], "seeds": [0, 1], "scopes": ["keep", "arg"], "schedule": "once:1"}
    lines = [
        *(f"{k} = {json.dumps(v)}" for k, v in {**fields, **(top or {})}.items()),
        "[planner]",
        f"model = {json.dumps(f'scripted:{planner}')}",
        "[reviewer]",
        *(f"{k} = {json.dumps(v)}" for k, v in {"reviewer": "human", **reviewer}.items()),
        "[execution]",
        "workers = 2",
    ]
    path = tmp / "panel.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_events(folder: Path, run_id: str) -> list[Any]:
    return cs.read_events(folder / cp.RUNS_DIR / run_id)


def read_call(folder: Path, run_id: str) -> Any:
    found = [e.call for e in run_events(folder, run_id) if isinstance(e, PrimitiveCallEvent)]
    return found[1]


def realized(folder: Path, run_id: str) -> RealizedOperationEvent:
    return next(e for e in run_events(folder, run_id) if isinstance(e, RealizedOperationEvent))


def proposal(folder: Path, run_id: str) -> ProposalEvent:
    return next(e for e in run_events(folder, run_id) if isinstance(e, ProposalEvent))


def posted_at(folder: Path, run_id: str) -> float:
    """When the run posted its boundary (the proposal's time less the person's seconds)."""
    event = proposal(folder, run_id)
    assert event.human is not None
    return event.t - event.human.decided_s


def waiting_runs(folder: Path) -> set[str]:
    """The Arg runs whose logs show a review under way."""
    found = set()
    for run_id in ARG_RUNS:
        log = folder / cp.RUNS_DIR / run_id / "events.jsonl"
        if log.exists() and '"type":"boundary"' in log.read_text().replace(" ", ""):
            found.add(run_id)
    return found


def queue_length(base: str) -> int:
    """How many boundaries the review page lists as waiting (read without the secret)."""
    with urllib.request.urlopen(f"{base}review", timeout=30) as response:
        html = response.read().decode()
    return html.count('<li><a href="/review?t=')


def until(check: Any, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "the condition did not come"
        time.sleep(0.05)


def post(url: str, body: dict[str, Any], key: str | None) -> int:
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["X-Review-Key"] = key
    request = urllib.request.Request(url, json.dumps(body).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return int(response.status)
    except urllib.error.HTTPError as err:
        return err.code


@contextlib.contextmanager
def panel_command(config: Path, folder: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``controlscope panel`` with Ctrl-C as from a terminal; its process and printed URL."""
    command = [sys.executable, "-m", "controlscope.cli", "panel", str(config)]
    command += ["--out", str(folder), "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(Path(cs.__file__).parents[1])}
    with sigint_as("terminal"):
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        found = re.fullmatch(r"review page: (http://127\.0\.0\.1:\d+/review#key=(\S+))\n", line)
        assert found, line
        yield proc, found.group(1)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=60)


def test_a_person_reviews_a_panel_from_its_queue_page(page: Page, tmp_path: Path) -> None:
    """The queue lists both Arg runs' boundaries oldest first, each linking to its form; a
    decision without the secret is refused; keep on one (opened from its link), an argument
    edit on the other; the panel finishes, its logs record the edited call run with the new
    value and ``reviewer: human``; the secret is in no file, argument list or other line."""
    folder = tmp_path / "panel"
    with panel_command(write_panel(tmp_path), folder) as (proc, url):
        secret = url.split("#key=")[1]
        base = url.split("review#")[0]
        until(lambda: queue_length(base) == 2)
        below = descendants(proc.pid)  # the runs' processes, their workers and servers
        for pid in below:
            assert secret not in " ".join(cmdline(pid) or [])
        page.goto(url)
        queue = page.locator("#queue li")
        expect(queue).to_have_count(2)
        first, second = (queue.nth(i).inner_text().split(":")[0] for i in (0, 1))
        assert {first, second} == set(ARG_RUNS)
        expect(queue.nth(0)).to_contain_text("call 1 read_text_file (shown)")
        shot(page, tmp_path, "panel-queue")
        ticket = page.locator("#review").get_attribute("data-ticket")
        for key in (None, "not-the-secret"):  # nothing is decided without the secret
            decision = {"ticket": ticket, "operation": "keep"}
            assert post(f"{base}_review/decide", decision, key) == 403
        assert post(f"{base}_review/post", {"state": {}}, None) == 403
        queue.nth(1).locator("a").click()  # the second one's own form
        expect(page.locator("#review-waiting")).to_contain_text(f"{second} waits at call 1")
        shown(page, "read_text_file")
        page.locator("#decide-keep").click()
        expect(page.locator("#review-waiting")).to_contain_text(f"{first} waits at call 1")
        shown(page, "read_text_file")
        page.locator('.arg[data-name="head"]').fill("3")
        page.locator("#decide-patch_arguments").click()
        expect(page.locator("#review-message")).to_contain_text("accepted")
        out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    until(lambda: not any(alive(pid) for pid in below), 30)  # no process of it is left
    assert posted_at(folder, first) < posted_at(folder, second)  # the queue's order
    edited, kept = read_call(folder, first), read_call(folder, second)
    assert edited.arguments["head"] == 3 and edited.operation == "patch_arguments"
    assert edited.requested == {"path": "/workspace/large_file.txt", "head": 2}
    assert kept.arguments["head"] == 2 and realized(folder, second).operation.kind == "keep"
    for run_id in ARG_RUNS:
        event = proposal(folder, run_id)
        assert event.reviewer == "human" and event.human is not None
        assert event.human.where == f"{base}review" and not event.human.timed_out
        assert run_events(folder, run_id)[0].models["reviewer"] == "human:browser"
    assert secret not in out + err
    for path in folder.rglob("*"):
        assert not path.is_file() or secret.encode() not in path.read_bytes(), path
    written = json.loads((folder / "panel.json").read_text())
    assert written["config"]["reviewer"]["reviewer"] == "human"


@pytest.fixture
def tracker() -> None:
    """This process's multiprocessing resource tracker, started before a test that runs a
    panel here counts what it leaves (the tracker lives as long as this process)."""
    resource_tracker.ensure_running()


def test_a_review_desk_killed_mid_wait_gives_recorded_fallbacks_and_the_panel_ends(
    tracker: None, no_leftovers: None, tmp_path: Path
) -> None:
    """The desk stops while both Arg runs wait on it: each records a ``provider_error``
    fallback (Keep: the call runs as written), and the panel ends with every run finished."""
    desk = ReviewDesk()
    servers: list[view.ViewServer] = []

    @contextlib.contextmanager
    def desk_server(panel: Path) -> Iterator[DeskAddress]:
        with view.ViewServer(panel, desk=desk) as server:
            servers.append(server)
            yield DeskAddress(server.url, desk.secret)

    folder = tmp_path / "panel"
    config = cp.load_config(write_panel(tmp_path))
    done: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: done.update(result=cp.run_panel(config, folder, review_desk=desk_server))
    )
    thread.start()
    try:
        until(lambda: waiting_runs(folder) == set(ARG_RUNS))
        until(lambda: len(desk.pending()) == 2)
        servers[0].stop()  # the desk is gone mid-wait
    finally:
        thread.join(240)
    assert not thread.is_alive(), "the panel did not end"
    result = done["result"]
    assert result.complete and all(r.status == "done" for r in result.records.values())
    for run_id in ARG_RUNS:
        assert realized(folder, run_id).fallback == "provider_error"
        assert read_call(folder, run_id).arguments["head"] == 2
        event = proposal(folder, run_id)
        assert event.reviewer == "human" and event.human is not None
        assert event.operation is None and not event.human.timed_out
        check = next(e for e in run_events(folder, run_id) if isinstance(e, ValidationEvent))
        assert "did not answer" in check.validation.detail or "no longer" in check.validation.detail


def test_ctrl_c_while_the_panel_waits_for_a_person_ends_its_runs_recorded_as_interrupted(
    tmp_path: Path, no_leftovers: None
) -> None:
    folder = tmp_path / "panel"
    with panel_command(write_panel(tmp_path), folder) as (proc, url):
        base = url.split("review#")[0]
        until(lambda: queue_length(base) == 2)
        below = descendants(proc.pid)
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=90)
    assert proc.returncode == 130
    until(lambda: not any(alive(pid) for pid in below), 30)
    for run_id in ARG_RUNS:
        assert cs.read_summary(folder / cp.RUNS_DIR / run_id).end_reason == "interrupted"
        assert not (folder / cp.RUNS_DIR / run_id / cp.RUN_MARKER).exists()


@pytest.mark.parametrize(
    "top",
    [{}, {"schedule": "continuous", "start": "first_boundary"}],
    ids=["whole", "branched"],
)
def test_a_decision_not_made_in_time_is_a_recorded_timeout_in_each_run(
    tmp_path: Path, no_leftovers: None, top: dict[str, Any]
) -> None:
    """Whole runs and branches of the Keep runs alike post to the desk; no decision within
    ``review_timeout_s`` is a ``timeout`` fallback at each reviewed boundary."""
    config = write_panel(tmp_path, top, review_timeout_s=2)
    folder = tmp_path / "panel"
    with panel_command(config, folder) as (proc, _):
        proc.communicate(timeout=180)
    assert proc.returncode == 0
    for run_id in ARG_RUNS:
        reviews = [e for e in run_events(folder, run_id) if isinstance(e, RealizedOperationEvent)]
        assert reviews and all(e.fallback == "timeout" for e in reviews)
        event = proposal(folder, run_id)
        assert event.reviewer == "human" and event.human is not None and event.human.timed_out


@pytest.mark.parametrize(
    ("reviewer", "extra", "problem"),
    [
        ({"reviewer": "human:terminal"}, "", "away from this terminal"),
        ({}, "draws = 2\n", "draws: 2 with a person reviewing"),
        ({}, "", "execution.backend: ray"),
        ({"reviewer": "model", "review_timeout_s": 5}, "", "review_timeout_s is how long"),
    ],
)
def test_what_a_person_cannot_review_is_refused_in_one_line(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    reviewer: dict[str, Any],
    extra: str,
    problem: str,
) -> None:
    path = write_panel(tmp_path, **reviewer)
    text = extra + path.read_text()
    if "ray" in problem:
        text = text.replace("workers = 2", 'workers = 2\nbackend = "ray"')
    path.write_text(text)
    assert cli(["panel", str(path), "--out", str(tmp_path / "panel"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert problem in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "panel").exists()


def test_run_panel_without_a_desk_is_refused_and_a_model_panel_records_no_person(
    tmp_path: Path,
) -> None:
    config = cp.load_config(write_panel(tmp_path))
    with pytest.raises(cp.ConfigError, match="serve one"):
        cp.run_panel(config, tmp_path / "panel")
    assert not (tmp_path / "panel").exists()
    model = cp.parse_config({"tasks": [TASK], "reviewer": {"model": "scripted:x.json"}})
    assert "reviewer" not in model.identity()["reviewer"]  # panels written before resume
    assert "review_timeout_s" not in model.identity()["reviewer"]
