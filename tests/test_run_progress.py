"""A single run shows where it is: ``cs.run_task`` hands a callback its progress (turn, block,
calls, reviews, elapsed time) after every event, and ``controlscope run`` draws it as a live
line on standard error when that is a terminal (a real pseudo-terminal here), and not
otherwise."""

from __future__ import annotations

import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path

import controlscope as cs
from test_api import SOLVE, TASK, script
from test_replay import KEEP, PATCH


def test_run_task_gives_a_callback_its_progress(tmp_path: Path) -> None:
    model = script(tmp_path, f"```python\n{SOLVE}\n```", "Done.")
    reviewer = script(tmp_path, KEEP, PATCH, *[KEEP] * 8)
    seen: list[cs.RunProgress] = []
    spec = cs.RunSpec(
        task=TASK, model=model, reviewer_model=reviewer, scope="arg", out=tmp_path / "run"
    )
    result = cs.run_task(spec, progress=seen.append)
    assert result.summary.primitive_calls == 7
    assert len(seen) == len(cs.read_events(tmp_path / "run"))  # one per event
    last = seen[-1]
    assert (last.task_id, last.turn, last.calls) == (TASK, 2, 7)
    assert last.block == "t0.b0" and last.reviews == result.summary.reviews > 0
    s = result.summary
    assert last.changes == s.argument_patches and last.fallbacks == sum(s.fallbacks.values())
    assert last.changes + last.fallbacks == 1  # the patch, realized or refused
    assert [p.elapsed_s for p in seen] == sorted(p.elapsed_s for p in seen)
    assert sum(1 for p in seen if p.news and "review at call" in p.news) == 1
    assert "turn 2  block t0.b0  calls 7/" in last.line()
    assert cs.read_summary(tmp_path / "run") == result.summary


def run_cli(tmp_path: Path, name: str, terminal: bool) -> str:
    """``controlscope run`` with standard error on a pseudo-terminal (or a pipe); what it
    wrote there."""
    model = script(tmp_path, "```python\nimport time\ntime.sleep(1.2)\n" + SOLVE + "\n```", "Done.")
    argv = [sys.executable, "-m", "controlscope.cli", "run", "--task", TASK, "--model", model]
    argv += ["--schedule", "never", "--out", str(tmp_path / name)]
    env = {**os.environ, "COLUMNS": "200", "TERM": "xterm"}
    if not terminal:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env)
        assert done.returncode == 0, done.stderr
        return done.stderr
    parent, child = pty.openpty()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=child, env=env)
    os.close(child)
    shown = b""
    deadline = time.monotonic() + 180  # only a bound against a hang
    while time.monotonic() < deadline:
        ready, _, _ = select.select([parent], [], [], 1.0)
        if ready:
            try:
                chunk = os.read(parent, 65536)
            except OSError:  # the child closed its end
                break
            if not chunk:
                break
            shown += chunk
        elif proc.poll() is not None:
            break
    os.close(parent)
    assert proc.wait(timeout=30) == 0
    return shown.decode("utf-8", "replace")


def test_the_cli_shows_a_live_line_on_a_terminal_only(tmp_path: Path) -> None:
    shown = run_cli(tmp_path, "tty", terminal=True)
    assert f"{TASK}  turn 1  block t0.b0  calls " in shown, shown[-2000:]
    assert "reviews 0" in shown and "0:0" in shown  # the elapsed time, m:ss
    piped = run_cli(tmp_path, "pipe", terminal=False)
    assert "turn 1" not in piped and "calls " not in piped
