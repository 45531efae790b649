"""Paired panels and their report (paper sections 3.2, 4, 5.1, A.2, A.5, B), on real parts (the
npm filesystem server, the isolated worker, real pool processes) with scripted models.

The scripted planner answers by conversation turn (the same conversation gets the same
answer, whether from the model or the panel's exact-request cache): a program that names the
split files wrongly, then "Done.". The scripted reviewer keeps at the first reviewed call,
patches the second call's path, and replaces the rest of the block at the third: under Arg
the replacement is an out-of-scope fallback and the task fails; under Full it succeeds; Keep
fails. ``file_context/uppercase`` makes one call only: no boundary to branch at.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

import pytest

import controlscope as cs
from _process_support import leave_for_teardown
from controlscope import panel as cp
from controlscope import view
from controlscope._proc import alive, descendants
from controlscope.analysis import report
from controlscope.cli import main as cli
from controlscope.core import ModelCallEvent, RunStartEvent
from controlscope.panel.testing import SyntheticRun, write_synthetic_panel
from test_analysis import CATEGORIES
from test_api import BROKEN, TASK
from test_replay import KEEP, PATCH, REPLACE, fenced

SLOW_BROKEN = "import time\ntime.sleep(1.5)\n" + BROKEN


def scripts(tmp: Path, program: str = BROKEN) -> dict[str, str]:
    planner = tmp / "planner.json"
    planner.write_text(json.dumps({"by": "turn", "answers": [fenced(program), "Done."]}))
    reviewer = tmp / "reviewer.json"
    reviewer.write_text(json.dumps([KEEP, PATCH, REPLACE, *[KEEP] * 10]))
    return {"planner": f"scripted:{planner}", "reviewer": f"scripted:{reviewer}"}


def write_config(tmp: Path, name: str = "panel.toml", program: str = BROKEN, **extra: Any) -> Path:
    models = scripts(tmp, program)
    fields = {
        "tasks": [TASK],
        "seeds": [0],
        "scopes": ["keep", "arg", "full"],
        "start": "first_boundary",
        **extra,
    }
    lines = [f"{k} = {json.dumps(v)}" for k, v in fields.items()]
    lines += ["[planner]", f"model = {json.dumps(models['planner'])}"]
    lines += ["[reviewer]", f"model = {json.dumps(models['reviewer'])}"]
    lines += ["[execution]", "workers = 2"]
    path = tmp / name
    path.write_text("\n".join(lines) + "\n")
    return path


def markers(folder: Path) -> dict[str, tuple[int, str]]:
    """Each finished run's record: its modification time and text."""
    out = {}
    for path in (folder / cp.RUNS_DIR).rglob(cp.RUN_MARKER):
        run_id = str(path.parent.relative_to(folder / cp.RUNS_DIR))
        out[run_id] = (path.stat().st_mtime_ns, path.read_text())
    return out


# --- a panel end to end ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def branched(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two units of the split task (seeds 0 and 1) and one of the uppercase task, Keep, Arg and
    Full with two reviewer draws, branched at the first boundary; run by the CLI."""
    tmp = tmp_path_factory.mktemp("branched")
    config = write_config(
        tmp, tasks=[TASK, "file_context/uppercase"], seeds=[0, 1], draws=2, cluster="task"
    )
    assert cli(["panel", str(config), "--out", str(tmp / "panel"), "--quiet"]) == 0
    return tmp / "panel"


def test_a_panel_runs_keep_once_per_unit_and_branches_from_it(branched: Path) -> None:
    plan = cp.read_manifest(branched).plan
    assert len(plan.units) == 4 and len(plan.runs) == 4 * 5
    records = {r.id: cp.read_record(cp.run_dir(branched, r.id)) for r in plan.runs}
    split = [r for r in plan.runs if r.task == TASK]
    outcome = {(r.unit, r.scope, r.draw): records[r.id].success for r in split}
    for unit in {r.unit for r in split}:
        assert outcome[(unit, "keep", 0)] is False
        for draw in (0, 1):
            assert outcome[(unit, "arg", draw)] is False
            assert outcome[(unit, "full", draw)] is True
        keep_dir = cp.run_dir(branched, f"{unit}/keep")
        hashes = set()
        for run in (r for r in split if r.unit == unit and r.scope != "keep"):
            start = cs.read_events(cp.run_dir(branched, run.id))[0]
            assert isinstance(start, RunStartEvent) and start.branch is not None
            assert Path(start.branch.source_run) == keep_dir and start.branch.call_index == 1
            assert start.config is not None and start.config["draw"] == run.draw
            hashes.add(records[run.id].request_hash)
        assert len(hashes) == 1 and None not in hashes  # the same first review request
    assert not any((branched / cp.RUNS_DIR / TASK / "s0" / "p0").glob("keep-d*"))
    upper = [records[r.id] for r in plan.runs if r.task != TASK]
    assert {r.status for r in upper if not r.id.endswith("/keep")} == {"ineligible"}
    assert all("boundary 1 is not among" in r.detail for r in upper if r.status == "ineligible")


def test_the_report_counts_units_pairs_and_reused_keep_runs(
    branched: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert cli(["report", str(branched), "--out", str(tmp_path / "r"), "--resamples", "200"]) == 0
    printed = capsys.readouterr().out
    assert "| full-d1" in printed and "ineligible" in printed
    built = report(branched, out=tmp_path / "py", resamples=200)
    success = built.tables["successes"].set_index("condition")
    assert success.loc["keep", "units"] == 2  # the uppercase unit is left out
    assert list(success["successes"]) == [0, 0, 0, 2, 2]
    assert built.ineligible_units == [f"file_context/uppercase/s{s}/p0" for s in (0, 1)]
    t1 = built.tables["table1"]
    assert list(t1["full_wins"]) == [2, 2] and list(t1["full_losses"]) == [0, 0]
    pairs = built.tables["paired"].set_index(["draw", "comparison"])
    assert pairs.loc[(0, "full-keep"), "wins"] == 2 and pairs.loc[(0, "arg-keep"), "ties"] == 2
    assert pairs.loc[(1, "full-arg"), "difference_pp"] == 100.0
    res = built.tables["resources"].set_index(["draw", "scope"])
    assert not res.loc[(0, "keep"), "keep_reused"] and res.loc[(1, "keep"), "keep_reused"]
    assert res.loc[(0, "arg"), "fallback_out_of_scope"] == 2  # the replacement Arg cannot make
    assert res.loc[(0, "full"), "replacements"] == 2 and res.loc[(0, "arg"), "replacements"] == 0
    assert res.loc[(0, "full"), "argument_patches"] == 2
    goals = built.tables["goals"].set_index("condition")  # seeds are instances of a template
    assert goals.loc["full-d0", "sgc_pct"] == 100.0 and goals.loc["keep", "tgc_pct"] == 0.0
    for name in ("report.md", "successes.csv", "paired.csv", "runs.csv", "effort.png"):
        assert (tmp_path / "py" / name).stat().st_size > 0
    assert (tmp_path / "py" / "tokens.png").read_bytes()[:4] == b"\x89PNG"
    assert (
        cli(["report", str(branched), "--json", "--resamples", "50", "--out", str(tmp_path / "j")])
        == 0
    )
    data = json.loads(capsys.readouterr().out)
    assert data["units"] == 2 and data["tables"]["table1"][0]["full"] == 2
    assert cli(["report", str(branched), "--format", "latex", "--out", str(tmp_path / "t")]) == 0
    assert "\\begin{tabular}" in (tmp_path / "t" / "report.tex").read_text()


def test_whole_runs_share_the_source_program_through_the_cache(tmp_path: Path) -> None:
    config = cp.load_config(write_config(tmp_path, start="whole"))
    result = cp.run_panel(config, tmp_path / "panel")
    assert result.complete and result.status.successes == {"keep": 0, "arg": 0, "full": 1}
    unit = f"{TASK}/s0/p0"
    names = {"keep": "keep", "full": "full-d0"}
    logs = {
        s: cs.read_events(cp.run_dir(tmp_path / "panel", f"{unit}/{n}")) for s, n in names.items()
    }
    calls = {s: [e for e in log if isinstance(e, ModelCallEvent)] for s, log in logs.items()}
    keep_first = calls["keep"][0]
    full_first = calls["full"][0]
    assert keep_first.role == full_first.role == "planner"
    assert keep_first.response is not None and not keep_first.response.cached
    assert full_first.response is not None and full_first.response.cached  # the shared P1
    assert full_first.request == keep_first.request
    reviews = [c for c in calls["full"] if c.role == "reviewer"]
    assert reviews and not any(c.response and c.response.cached for c in reviews)
    summary = cs.read_summary(cp.run_dir(tmp_path / "panel", f"{unit}/full-d0"))
    assert summary.tokens["planner"].cache_hits >= 1


def test_panels_of_one_source_share_a_cache_file_named_relative_to_the_folder(
    tmp_path: Path,
) -> None:
    """Two panels running P2 alone (``sources = [1]``) through one cache file: the second
    panel's Keep run is the first's (its planning answered from the shared cache)."""
    shared = {"source_programs": 2, "sources": [1], "start": "whole"}
    cache = {"execution": {"workers": 2, "cache_file": "../shared.sqlite"}}
    base = cp.load_config(write_config(tmp_path, **shared))
    first = base.model_copy(update={"execution": cp.ExecutionSettings(**cache["execution"])})
    second = first.model_copy(update={"scopes": ["keep", "arg"]})
    a = cp.run_panel(first, tmp_path / "a")
    b = cp.run_panel(second, tmp_path / "b")
    assert a.complete and b.complete
    assert {r.source_program for r in a.plan.runs} == {1} and len(b.plan.runs) == 2
    assert (tmp_path / "shared.sqlite").exists()
    assert not (tmp_path / "a" / cp.CACHE_FILE).exists()
    keep = cs.read_events(cp.run_dir(tmp_path / "b", f"{TASK}/s0/p1/keep"))
    planned = [e for e in keep if isinstance(e, ModelCallEvent) and e.role == "planner"]
    assert planned and all(e.response is not None and e.response.cached for e in planned)
    old = json.loads((tmp_path / "a" / cp.MANIFEST_FILE).read_text())
    del old["config"]["sources"], old["config"]["execution"]["cache_file"]
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / cp.MANIFEST_FILE).write_text(json.dumps(old))
    plain = base.model_copy(update={"sources": None, "source_programs": 2})
    with pytest.raises(cp.PanelError, match="the plan"):  # a manifest without the keys reads
        cp.open_panel(tmp_path / "old", plain, cp.plan_panel(plain))


# --- resumption ---------------------------------------------------------------------------------


def test_a_panel_killed_by_sigkill_resumes_and_loses_no_finished_run(tmp_path: Path) -> None:
    config = write_config(tmp_path, program=SLOW_BROKEN, seeds=[0, 1])
    folder = tmp_path / "panel"
    env = {**os.environ, "COLUMNS": "200"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "controlscope.cli", "panel", str(config), "--out", str(folder),
         "--quiet", "--workers", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            done = markers(folder) if folder.exists() else {}
            started = list((folder / cp.RUNS_DIR).rglob("events.jsonl")) if done else []
            if done and len(started) > len(done):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the panel never had a finished run and a running one")
        pool = descendants(proc.pid)
        before = markers(folder)
        proc.kill()  # SIGKILL of the panel's own process only
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    deadline = time.monotonic() + 30
    while any(alive(pid) for pid in pool) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pool if alive(pid)], "pool processes outlived their panel"
    assert markers(folder) == before
    unfinished = [p.parent for p in (folder / cp.RUNS_DIR).rglob("events.jsonl")
                  if not (p.parent / cp.RUN_MARKER).exists()]  # fmt: skip
    assert unfinished, "no run was interrupted"
    result = cp.run_panel(cp.load_config(config), folder, workers=2)
    assert result.complete and result.status.skipped == len(before)
    after = markers(folder)
    assert {k: after[k] for k in before} == before  # finished runs were not touched
    assert len(after) == len(result.plan.runs) == 6
    assert result.status.successes == {"keep": 0, "arg": 0, "full": 2}
    for directory in unfinished:
        assert cs.read_summary(directory).end_reason == "final_answer"  # run again, whole


def panel_command(config: Path, folder: Path) -> list[str]:
    return [sys.executable, "-m", "controlscope.cli", "panel", str(config), "--out", str(folder),
            "--quiet"]  # fmt: skip


def view_page(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=30) as page:
        return page.status, page.read().decode()


def test_a_second_panel_command_on_a_folder_is_refused_naming_the_first(tmp_path: Path) -> None:
    """Two ``controlscope panel`` commands on one folder: the second exits 2 in one line naming
    the first (pid, host, since when), touching nothing; the first finishes with every run
    counted; the report and the viewer read the folder while it is held."""
    config = write_config(tmp_path, program=SLOW_BROKEN, seeds=[0, 1])
    folder = tmp_path / "panel"
    env = {**os.environ, "COLUMNS": "200"}
    first = subprocess.Popen(
        panel_command(config, folder), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not list((folder / cp.RUNS_DIR).rglob("events.jsonl")):
            assert time.monotonic() < deadline and first.poll() is None, "no run started"
            time.sleep(0.05)
        second = subprocess.run(
            panel_command(config, folder), capture_output=True, text=True, env=env, timeout=120
        )
        assert second.returncode == 2, second.stderr
        lines = second.stderr.strip().splitlines()
        assert len(lines) == 1, second.stderr
        assert f"in use by another panel command (pid {first.pid} on {socket.gethostname()} " \
            "since " in lines[0]  # fmt: skip
        built = report(folder, write=False)  # readers never wait for the lock
        assert len(built.runs) == 6
        with view.ViewServer(folder) as server:
            status, text = view_page(server.url)
        assert status == 200 and "runs finished" in text
        out, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == 0, err
    assert "6/6 runs finished (6 run now, 0 found finished), 0 could not run" in out
    assert report(folder, write=False).problems == []
    assert (folder / cp.LOCK_FILE).read_text() == ""  # released: the holder's details gone


def test_a_panel_lock_is_released_when_its_process_is_killed(tmp_path: Path) -> None:
    """A panel command killed by SIGKILL leaves no stale lock: the kernel releases it."""
    folder = tmp_path / "panel"
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom pathlib import Path\n"
         "from controlscope.panel import lock_panel\n"
         "with lock_panel(Path(sys.argv[1])):\n    print('held', flush=True)\n"
         "    time.sleep(600)", str(folder)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        with (
            pytest.raises(cp.PanelBusy, match=f"pid {holder.pid} on ") as caught,
            cp.lock_panel(folder),
        ):
            pass
        assert caught.value.pid == holder.pid and caught.value.since
        with pytest.raises(cp.PanelBusy):  # run_panel says so too, before any run starts
            cp.run_panel(write_config(tmp_path), folder)
        assert not (folder / cp.MANIFEST_FILE).exists()
    finally:
        holder.kill()
        holder.communicate(timeout=30)
    with cp.lock_panel(folder):  # free again
        assert json.loads((folder / cp.LOCK_FILE).read_text())["pid"] == os.getpid()


def test_a_lock_file_that_is_no_regular_file_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "panel"
    folder.mkdir()
    os.mkfifo(folder / cp.LOCK_FILE)
    with pytest.raises(cp.PanelError, match="not a regular file"), cp.lock_panel(folder):
        pass  # a FIFO: refused, not waited on
    (folder / cp.LOCK_FILE).unlink()
    (folder / cp.LOCK_FILE).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(cp.PanelError, match="cannot be opened"), cp.lock_panel(folder):
        pass
    assert not (tmp_path / "elsewhere").exists()


def test_a_record_naming_another_run_or_log_is_run_again_on_resume(tmp_path: Path) -> None:
    """A ``panel_run.json`` counts only for the run and the log it names: one copied from
    another run, or one whose log was replaced, is reported as corrupt until the panel is
    resumed, which runs that run again. A record written before logs were hashed counts by
    its id alone."""
    config = cp.load_config(write_config(tmp_path, seeds=[0, 1], scopes=["keep", "full"]))
    folder = tmp_path / "panel"
    assert cp.run_panel(config, folder, workers=2).complete
    s0, s1 = f"{TASK}/s0/p0", f"{TASK}/s1/p0"
    old = cp.run_dir(folder, f"{s0}/full-d0") / cp.RUN_MARKER  # as written before logs were hashed
    old.write_text(json.dumps({k: v for k, v in json.loads(old.read_text()).items()
                               if k != "log_sha256"}))  # fmt: skip
    copied = cp.run_dir(folder, f"{s1}/full-d0") / cp.RUN_MARKER
    copied.write_text(old.read_text())  # another run's record, over this run's
    replaced = cp.run_dir(folder, f"{s1}/keep") / "events.jsonl"
    replaced.write_bytes((cp.run_dir(folder, f"{s0}/keep") / "events.jsonl").read_bytes())
    problems = "\n".join(report(folder, write=False).problems)
    assert (f"{s1}/full-d0: corrupt run folder, counted as missing: its record names run "
            f"'{s0}/full-d0' (resuming the panel runs it again)") in problems  # fmt: skip
    assert f"{s1}/keep: corrupt run folder, counted as missing: its events.jsonl is not " \
        "the log its record names" in problems  # fmt: skip
    assert s0 not in problems.replace(f"names run '{s0}", "")
    before = markers(folder)
    result = cp.run_panel(config, folder, workers=2)
    assert result.complete and result.status.skipped == 2  # s0's Keep and (old) Full
    after = markers(folder)
    assert {k: after[k] for k in before if k.startswith(s0)} == {
        k: v for k, v in before.items() if k.startswith(s0)
    }
    assert after[f"{s1}/keep"] != before[f"{s1}/keep"]
    assert json.loads(after[f"{s1}/full-d0"][1])["id"] == f"{s1}/full-d0"
    assert report(folder, write=False).problems == []
    assert result.status.successes == {"keep": 0, "full": 2}


def test_a_pool_process_ends_without_the_interpreters_teardown(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """The panel waits for its pool to end; a pool process skips the teardown of every module
    its runs imported (about 0.5 s), but still flushes what it printed and ends with status 0."""
    marker = tmp_path / "torn-down"
    backend = cp.LocalBackend(1)
    pool = backend._pool
    pid = pool.submit(leave_for_teardown, str(marker)).result(timeout=120)
    processes = list(pool._processes.values())  # type: ignore[attr-defined]
    backend.close(cancel=False)
    assert [p.pid for p in processes] == [pid]
    assert [p.exitcode for p in processes] == [0]
    assert not marker.exists()
    assert "unflushed line from the pool" in capfd.readouterr().out


def test_a_cancelled_pool_kills_a_process_that_outlives_sigterm() -> None:
    """A pool process that ignores SIGTERM (busy in a run that will not stop) is killed once its
    grace has passed, so cancelling a panel ends instead of waiting on it forever."""
    backend = cp.LocalBackend(1, grace_s=1.0)
    pool = backend._pool
    pool.submit(signal.signal, signal.SIGTERM, signal.SIG_IGN).result(timeout=120)
    stuck = pool.submit(time.sleep, 600)
    processes = list(pool._processes.values())  # type: ignore[attr-defined]
    deadline = time.monotonic() + 60
    while not stuck.running() and time.monotonic() < deadline:
        time.sleep(0.05)
    started = time.monotonic()
    backend.close(cancel=True)
    assert time.monotonic() - started < 30
    assert [p.exitcode for p in processes] == [-signal.SIGKILL]
    assert isinstance(stuck.exception(timeout=0), BrokenProcessPool)


def test_a_cancelled_pool_lets_a_process_that_obeys_sigterm_end_itself() -> None:
    """An idle pool process handles SIGTERM (the panel's interrupt) and ends before its grace,
    without being killed."""
    backend = cp.LocalBackend(1, grace_s=60.0)
    pool = backend._pool
    pool.submit(os.getpid).result(timeout=120)
    processes = list(pool._processes.values())  # type: ignore[attr-defined]
    started = time.monotonic()
    backend.close(cancel=True)
    assert time.monotonic() - started < 30
    assert [p.exitcode for p in processes] != [-signal.SIGKILL]
    assert all(p.exitcode is not None for p in processes)


@pytest.mark.parametrize(
    ("workers", "cores", "shares"),
    [
        (2, [1, 0], ((0,), (1,))),
        (3, range(7), ((0, 1), (2, 3), (4, 5, 6))),
        (2, [0, 2, 4, 6], ((0, 2), (4, 6))),
        (1, [0, 1], ()),
        (3, [0, 1], ()),
    ],
)
def test_pool_processes_get_disjoint_core_shares_when_there_are_enough_cores(
    workers: int, cores: list[int], shares: tuple[tuple[int, ...], ...]
) -> None:
    assert cp.core_shares(workers, cores) == shares


def test_each_pool_process_keeps_to_its_own_cores(tmp_path: Path) -> None:
    """Two pool processes on a machine of two or more cores: each keeps to its own share (and
    so do the processes its runs start); on one core neither is kept to anything."""
    usable = os.sched_getaffinity(0)
    shares = cp.core_shares(2, sorted(usable))
    backend = cp.LocalBackend(2)
    pool = backend._pool
    try:
        for future in [pool.submit(os.getpid) for _ in range(2)]:
            future.result(timeout=120)
        pids = [p.pid for p in pool._processes.values()]  # type: ignore[attr-defined]
        assert len(pids) == 2
        deadline = time.monotonic() + 120  # both have run their initializer by then
        seen = [os.sched_getaffinity(pid) for pid in pids]
        while shares and any(s == usable for s in seen) and time.monotonic() < deadline:
            time.sleep(0.05)
            seen = [os.sched_getaffinity(pid) for pid in pids]
    finally:
        backend.close(cancel=False)
    if shares:
        assert sorted(tuple(sorted(s)) for s in seen) == sorted(shares)
    else:
        assert seen == [usable, usable]


def test_a_folder_of_another_config_is_refused_naming_the_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = cp.load_config(write_config(tmp_path))
    folder = tmp_path / "panel"
    cp.open_panel(folder, first, cp.plan_panel(first))
    other = write_config(tmp_path, "other.toml", draws=3)
    assert cli(["panel", str(other), "--out", str(folder), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "another configuration" in err and "draws is 1 there, 3 here" in err
    assert not list((folder / cp.RUNS_DIR).iterdir())
    moved = first.model_copy(
        update={"execution": first.execution.model_copy(update={"workers": 1})}
    )
    cp.open_panel(folder, moved, cp.plan_panel(moved))  # where it runs is not the experiment
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "x").write_text("x")
    with pytest.raises(cp.PanelError, match="not empty"):
        cp.run_panel(first, tmp_path / "junk")
    assert [p.name for p in (tmp_path / "junk").iterdir()] == ["x"]  # no lock file left in it


# --- bad configurations -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tasks = [", "not TOML"),
        ('tasks = ["desktop"]\ncolour = "red"', "colour: unknown key"),
        ("seeds = [0]", "tasks: missing"),
        ('tasks = ["desktop/nope"]', "unknown task or category 'desktop/nope'"),
        ('tasks = ["desktop"]\nscopes = ["keep", "most"]', "unknown scope 'most'"),
        ('tasks = ["desktop"]\nscopes = ["keep", "params"]', "params"),
        ('tasks = ["desktop"]\nscopes = ["arg", "full"]', "keep is required"),
        ('tasks = ["desktop"]\nstart = "first_boundary"\nschedule = "per_block"', "start"),
        ('tasks = ["desktop"]\nstart = "somewhere"', "start"),
        ('tasks = ["desktop"]\ndraws = 0', "draws"),
        ('tasks = ["desktop"]\n[params.papers]\npapers = 3', "params.papers: names no selected"),
        (
            'tasks = ["papers/author_folders"]\n[params."papers/author_folders"]\npapers = -4',
            "params of",
        ),
        ('tasks = ["desktop"]\n[planner]\nmodel = "mystery:x"', "unknown model spec"),
        ('tasks = ["desktop"]\n[planner]\nmodel = "scripted:/nonexistent.json"', "planner.model"),
        ('tasks = ["desktop"]\n[execution]\nbackend = "slurm"', "execution.backend"),
        ('tasks = ["desktop"]\nsource_programs = 2\nsources = [2]', "sources: index 2"),
        ('tasks = ["desktop"]\nsources = []', "sources: give distinct"),
        ('tasks = ["desktop"]\n[execution]\ncache_file = " "', "execution.cache_file"),
    ],
)
def test_a_bad_config_is_refused_in_one_line_before_any_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text + "\n")
    assert cli(["panel", str(path), "--out", str(tmp_path / "panel"), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "panel").exists()


# --- the report on recorded outcomes ------------------------------------------------------------


def paper_panel(folder: Path, full_minus_keep: dict[str, int]) -> None:
    """20 units in the paper's seven categories (sizes 3, 3, 4, 2, 3, 3, 2) with Full winning
    (+n) or losing (-n) n units of a category against Keep."""
    runs = []
    for category, size in CATEGORIES.items():
        change = full_minus_keep.get(category, 0)
        for i in range(size):
            keep = full = i % 2 == 0
            if change > 0 and i < change:
                keep, full = False, True
            elif change < 0 and i < -change:
                keep, full = True, False
            unit = f"{category}/t{i}"
            runs.append(SyntheticRun(unit=unit, category=category, scope="keep", success=keep))
            runs.append(SyntheticRun(unit=unit, category=category, scope="full", success=full))
    write_synthetic_panel(folder, runs)


def test_the_report_reproduces_the_papers_interval_from_a_panel_folder(tmp_path: Path) -> None:
    paper_panel(tmp_path / "p", {"student_database": 1, "legal_document": -1})
    built = report(tmp_path / "p", write=False)
    row = built.tables["paired"].iloc[0]
    assert (row["comparison"], row["units"], row["clusters"]) == ("full-keep", 20, 7)
    assert (row["ci_low_pp"], row["ci_high_pp"]) == (-14.3, 16.7)  # paper section 5.1
    assert (row["wins"], row["losses"]) == (1, 1)
    assert built.resamples == 10_000 and built.cluster == "category"


def test_a_corrupt_run_folder_is_reported_and_counted_missing(tmp_path: Path) -> None:
    folder = tmp_path / "p"
    paper_panel(folder, {"file_context": 1, "student_database": 2})
    full = report(folder, write=False).tables["successes"].set_index("condition")
    (cp.run_dir(folder, "student_database/t0/full-d0") / "summary.json").write_text("{oops")
    (cp.run_dir(folder, "papers/t0/full-d0") / cp.RUN_MARKER).unlink()
    built = report(folder, out=tmp_path / "r", resamples=100)
    after = built.tables["successes"].set_index("condition")
    assert after.loc["full", "units"] == full.loc["full", "units"] == 20  # still in the denominator
    assert after.loc["full", "missing"] == 2
    assert after.loc["full", "successes"] == full.loc["full", "successes"] - 2  # both were wins
    text = "\n".join(built.problems)
    assert "student_database/t0/full-d0: corrupt run folder, counted as missing" in text
    assert "papers/t0/full-d0: missing" in text
    assert "corrupt run folder" in (tmp_path / "r" / "report.md").read_text()


def test_goal_completion_by_template_in_the_report(tmp_path: Path) -> None:
    """Two templates of three instances: Keep solves A's three and two of B's; Full two of A's
    and B's three. TGC 5/6 each; SGC 1/2 each; one paired win and one loss."""
    keep = {"A": [True, True, True], "B": [True, True, False]}
    full = {"A": [True, False, True], "B": [True, True, True]}
    runs = []
    for template in ("A", "B"):
        for i in range(3):
            unit = f"{template}{i}"
            common = {"unit": unit, "category": "apps", "template": template}
            runs.append(SyntheticRun(scope="keep", success=keep[template][i], **common))
            runs.append(SyntheticRun(scope="full", success=full[template][i], **common))
    write_synthetic_panel(tmp_path / "p", runs, cluster="template")
    built = report(tmp_path / "p", write=False, resamples=500)
    goals = built.tables["goals"].set_index("condition")
    assert list(goals["tasks_solved"]) == [5, 5] and list(goals["scenarios_solved"]) == [1, 1]
    assert goals.loc["keep", "sgc_pct"] == 50.0 and goals.loc["full", "tgc_pct"] == 83.33
    gain = built.tables["goal_gains"].iloc[0]
    assert (gain["wins"], gain["losses"], gain["tgc_gain_pp"]) == (1, 1, 0.0)
    assert gain["templates"] == 2 and gain["ci_low_pp"] < 0 < gain["ci_high_pp"]


# --- Ray ------------------------------------------------------------------------------------------


def test_the_ray_backend_runs_a_panel_on_a_local_instance(tmp_path: Path) -> None:
    import ray

    config = cp.load_config(write_config(tmp_path, start="whole"))
    on_ray = config.model_copy(
        update={"execution": config.execution.model_copy(update={"backend": "ray"})}
    )
    assert not ray.is_initialized()
    result = cp.run_panel(on_ray, tmp_path / "panel")
    assert not ray.is_initialized()  # the instance it started is shut down
    assert result.complete and result.status.successes == {"keep": 0, "arg": 0, "full": 1}
    for run in result.plan.runs:
        assert cs.read_summary(cp.run_dir(tmp_path / "panel", run.id)).complete
    again = cp.run_panel(config, tmp_path / "panel")  # the same folder, resumed locally
    assert again.status.skipped == 3


DEMO = Path(__file__).resolve().parents[1] / "scripts" / "demo.toml"
DEMO_TASKS = ("student_database/english_talent", "papers/find_math_paper")


def test_the_demo_is_a_panel_of_keep_arg_and_full_over_frozen_programs() -> None:
    config = cp.load_config(DEMO)
    plan = cp.plan_panel(config, check_models=False)  # the weights are the slow tests' to load
    assert [r.scope for r in plan.runs] == ["keep", "keep", "arg", "full", "arg", "full"]
    assert {r.task for r in plan.runs} == set(DEMO_TASKS)
    assert all(r.source_file is not None for r in plan.runs)  # every unit's program frozen
    assert config.start == "whole" and config.schedule == "once:2"
    assert config.planner.model == "local" and config.budgets.max_turns == 1
    demo = (DEMO.parent / "demo.sh").read_text()
    assert "controlscope panel scripts/demo.toml" in demo and "controlscope report" in demo


def _demo_variant(tmp: Path, task: str, answer: dict[str, Any]) -> cp.PanelConfig:
    """The demo's panel on one of its tasks, its reviewer a script giving ``answer``."""
    data = tomllib.loads(DEMO.read_text())
    reviewer = tmp / f"{task.replace('/', '_')}.json"
    reviewer.write_text(json.dumps([json.dumps(answer)]))
    data["tasks"] = [task]
    data["params"] = {k: v for k, v in data.get("params", {}).items() if k == task}
    data["planner"] = {"model": "scripted:" + str(tmp / "unused.json")}
    data["reviewer"] = {"model": f"scripted:{reviewer}", "mode": "json"}
    data["execution"] = {"workers": 2}
    (tmp / "unused.json").write_text("[]")  # the frozen program is the whole plan
    return cp.parse_config(cp.anchor_paths(data, DEMO.parent))


BATCHED = """rows = ["student_id,name"]
for folder in folders:
    both = read_multiple_files(paths=[f"{root}/students/{folder}/basic_info.txt",
                                      f"{root}/students/{folder}/recommendation_letter.txt"])
    if qualifies(both, both):
        rows.append(f"{fields(both)['Student ID']},{fields(both)['Name']}")
write_file(path=f"{root}/english_talent.csv", content="\\n".join(rows) + "\\n")
"""


def test_a_demo_reviewer_that_chooses_well_makes_the_scopes_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's design: where its reviewer chooses well (a batch-reading replacement for the
    student records, the right destination for the paper), Keep fails, Arg repairs the paper
    alone and Full both; so every paired difference comes from a decision, and the report and
    the viewer's panel page show it."""
    replace = {"reason": "batch", "operation": "replace_workflow", "code": BATCHED}
    patch = {
        "reason": "papers/answer.html",
        "operation": "patch_arguments",
        "arguments": {"destination": "/workspace/papers/answer.html"},
    }
    found: dict[tuple[str, str], str] = {}
    for task, answer in zip(DEMO_TASKS, (replace, patch), strict=True):
        out = tmp_path / task.replace("/", "_")
        cp.run_panel(_demo_variant(tmp_path, task, answer), out)
        built = report(out)
        for pair in built.pairs:
            found[(task, pair.condition)] = pair.label
            assert pair.keep_success is False and pair.reviews == 1
            if answer is replace and pair.condition == "arg":  # not granted: refused, kept
                assert pair.decisions == (
                    "call 2: kept, a fallback (out_of_scope; proposed replace_workflow: "
                    "out_of_scope)",
                )
        assert set(built.frozen_sources) == {f"{task}/s0/p0"}
        with view.ViewServer(out) as server:
            status, html = view_page(server.url)
        decision = "replace_workflow" if answer is replace else "papers/answer.html"
        assert status == 200 and 'id="pairs"' in html and decision in html
        capsys.readouterr()
        assert cli(["report", str(out)]) == 0
        printed = capsys.readouterr().out
        assert "the decisions behind them" in printed
        assert f"call 2: {answer['operation']}" in printed
    assert found == {
        (DEMO_TASKS[0], "arg"): "tie",  # no argument of a read can save the budget
        (DEMO_TASKS[0], "full"): "win",
        (DEMO_TASKS[1], "arg"): "win",
        (DEMO_TASKS[1], "full"): "win",
    }


@pytest.mark.slow
@pytest.mark.needs_weights
def test_the_demo_panel_runs_on_the_local_model_and_reports(tmp_path: Path) -> None:
    """The main job's panel, as `scripts/demo.sh` runs it, on the embedded model: every run ends
    recorded, each reviewing run reviews once on its frozen program, and the report lists every
    pair with the decision behind it. The demo's file with the 0.5B model in place of the 1.5B
    one (the same runtime and code path; the 1.5B model runs in the CLI's live-run test) and
    shorter answers."""
    text = DEMO.read_text()
    for line in ('model = "local"\n', "max_tokens = 512\n"):  # the demo's model and its cap
        assert text.count(line) == 1, line
    text = text.replace('model = "local"\n', 'model = "local:0.5b"\n')
    text = text.replace("max_tokens = 512\n", "max_tokens = 256\n")
    shutil.copytree(DEMO.parent / "demo_programs", tmp_path / "demo_programs")
    config = tmp_path / "demo.toml"  # beside its source folder, as in scripts/
    config.write_text(text)
    out = tmp_path / "demo"
    assert cli(["panel", str(config), "--out", str(out), "--quiet"]) == 0
    for task in DEMO_TASKS:
        for name in ("keep", "arg-d0", "full-d0"):
            summary = cs.read_summary(cp.run_dir(out, f"{task}/s0/p0/{name}"))
            assert summary.complete and summary.end_reason is not None
            assert summary.end_reason not in ("error", "environment_error", "interrupted")
            assert summary.reviews == (0 if name == "keep" else 1)
    assert cli(["report", str(out)]) == 0
    text = (out / "report" / "report.md").read_text()
    assert "Paired outcomes by unit and the decisions behind them" in text
    assert all(f"{task}/s0/p0 arg: keep" in text for task in DEMO_TASKS)


def test_the_live_line_shows_runs_and_successes_per_condition() -> None:
    status = cp.PanelStatus(total=9, finished=5, skipped=2, running=2, failed=1)
    status.successes, status.verdicts = {"keep": 1, "full": 2}, {"keep": 2, "full": 3}
    line = cp.PanelProgress.render(status).plain
    assert line.startswith("runs 5/9 (2 skipped)  running 2  failed 1")
    assert line.endswith("| successes: keep 1/2  full 2/3")


def test_branches_whose_first_requests_differ_are_named(tmp_path: Path) -> None:
    runs = [
        SyntheticRun(unit="u", category="c", scope=scope, success=False)
        for scope in ("keep", "arg", "full")
    ]
    write_synthetic_panel(tmp_path / "p", runs)
    for scope, digest in (("arg-d0", "a" * 64), ("full-d0", "b" * 64)):
        directory = cp.run_dir(tmp_path / "p", f"u/{scope}")
        record = cp.read_record(directory).model_copy(update={"request_hash": digest})
        (directory / cp.RUN_MARKER).write_text(record.model_dump_json())
    built = report(tmp_path / "p", write=False, resamples=10)
    assert built.problems == ["u: its branches' first review requests differ"]
