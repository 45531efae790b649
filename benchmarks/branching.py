"""What starting a branch from a recorded prefix costs (paper 3.3: prefix replay).

Records one run with scripted models (a program that makes more than 100 primitive calls on the
real MCP filesystem server, reviewed continuously by a scripted Keep reviewer), then replays its
first 100 calls ``--repeats`` times with no live model (every request and call checked) and
reports medians:

* ``prefix_replay_100_calls_s``: one whole prefix replay to the boundary after 100 calls: fresh
  workspace, server and worker start, 100 replayed reviews and calls, the state hashed, the run
  ended and summarised. Target: at most 2 s.
* ``replay_branch_ms``: from the start of a branch until it is ready to review at that boundary
  (the ``branch_point`` event: workspace set up, server and worker started, prefix replayed and
  checked, ``(h, s)`` hashed).
* ``fork_branch_ms``: None: forking a paused worker is not implemented (``fork_note`` says why).
* ``server_start_ms``: the MCP server's start alone (part of both numbers above).

Usage: ``python benchmarks/branching.py [--repeats 3] [--calls 100]``. The last line printed is
one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import controlscope as cs
from controlscope import replay
from controlscope.core import Event
from controlscope.envs.filesystem.environment import FilesystemEnvironment
from controlscope.envs.filesystem.workspace import Workspace

TASK = "file_context/file_splitting"

PROGRAM = """
root = "/workspace"
for i in range({n}):
    head = read_text_file(path=root + "/large_file.txt", head=2)
    if i % 10 == 0:
        write_file(path=f"{{root}}/copy_{{i}}.txt", content=head)
"""


def record(tmp: Path, calls: int) -> Path:
    """A recorded run with more than ``calls`` primitive calls, reviewed at every one."""
    planner = tmp / "planner.json"
    program = PROGRAM.format(n=calls + 5)
    planner.write_text(json.dumps([f"```python\n{program}\n```", "Done."]))
    reviewer = tmp / "reviewer.json"
    keep = json.dumps({"reason": "fine", "operation": "keep"})
    reviewer.write_text(json.dumps([keep] * (calls + 20)))
    spec = cs.RunSpec(
        task=TASK,
        model=f"scripted:{planner}",
        reviewer_model=f"scripted:{reviewer}",
        scope="full",
        schedule="continuous",
        max_calls=calls + 50,
        out=tmp / "recorded",
    )
    result = cs.run_task(spec)
    assert result.summary.primitive_calls > calls, result.summary
    return result.run_dir


def replay_once(recording: replay.Recording, out: Path, calls: int) -> tuple[float, float]:
    """One prefix replay to the boundary after ``calls`` calls: (whole s, ready-to-review ms)."""
    ready: list[float] = []
    t0 = time.perf_counter()

    def observe(event: Event) -> None:
        if event.type == "branch_point":
            ready.append(time.perf_counter() - t0)

    found = replay.replay_prefix(recording, out=out, until=calls, observer=observe)
    whole = time.perf_counter() - t0
    assert found.ok and found.verified_calls == calls, found.divergence
    return whole, ready[0] * 1000


def server_start_ms(repeats: int) -> float:
    """The median start of the MCP filesystem server on a fresh workspace."""
    env = FilesystemEnvironment()
    task = env.task(TASK)
    times = []
    for seed in range(repeats):
        with Workspace(prefix="bench-") as ws:
            env.setup(task, seed, ws.path)
            t0 = time.perf_counter()
            server = env.start_server(ws.path)
            try:
                server.list_tools()
                times.append((time.perf_counter() - t0) * 1000)
            finally:
                server.close()
    return statistics.median(times)


def main() -> None:
    """Run the benchmark and print the JSON summary as the last line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-branching-") as tmp_name:
        tmp = Path(tmp_name)
        recording = replay.Recording.load(record(tmp, args.calls))
        whole, ready = [], []
        for i in range(args.repeats):
            w, r = replay_once(recording, tmp / f"replay-{i}", args.calls)
            whole.append(w)
            ready.append(r)
            print(f"replay {i}: {w:.3f} s, ready to review after {r:.0f} ms")
    result = {
        f"prefix_replay_{args.calls}_calls_s": round(statistics.median(whole), 3),
        "replay_branch_ms": round(statistics.median(ready), 1),
        "fork_branch_ms": None,
        "fork_note": replay.MECHANISM_NOTE,
        "server_start_ms": round(server_start_ms(args.repeats), 1),
        "reviews_in_prefix": args.calls - 1,
        "target_prefix_replay_s": 2.0,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
