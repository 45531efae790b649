"""What a careless user or an adversary does to the reviewed executor's neighbours, on real
parts: a person reviewing at a terminal whose input has ended, the review page handed a
decision nested too deeply to parse or a body far over its bound, ``controlscope serve`` over
HTTP on an address it cannot listen on, and a served endpoint's rate limit whose
``Retry-After`` is not a number of seconds. Each is refused or recorded at once, never a hang,
a traceback or a body read whole."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import controlscope as cs
from controlscope.core import RealizedOperationEvent

TASK = "file_context/file_splitting"
BLOCK = "```python\nprint(list_directory(path='/workspace'))\n```"
ENV = {**os.environ, "PYTHONPATH": str(Path(cs.__file__).parents[1]), "COLUMNS": "200"}


def controlscope(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """The command line with no input (standard input at its end), bounded."""
    return subprocess.run(
        [sys.executable, "-m", "controlscope.cli", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=ENV,
        check=False,
    )


def test_a_terminal_reviewer_whose_input_ended_keeps_the_call_as_a_recorded_timeout(
    tmp_path: Path,
) -> None:
    """``--reviewer human:terminal < /dev/null``: nobody can answer, so each reviewed boundary
    is a ``timeout`` fallback (Keep) at once and the run ends (it waited forever)."""
    (tmp_path / "script.json").write_text(json.dumps([BLOCK, "Done."]))
    out = tmp_path / "run"
    done = controlscope(
        tmp_path,
        *("run", "--task", TASK, "--model", "scripted:script.json", "--planner-format"),
        *("fenced", "--reviewer", "human:terminal", "--schedule", "every_boundary"),
        *("--out", str(out)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr + done.stdout
    realized = [e for e in cs.read_events(out) if isinstance(e, RealizedOperationEvent)]
    assert [(e.operation.kind, e.fallback) for e in realized] == [("keep", "timeout")]
    assert cs.read_events(out)[-1].type == "run_end"
