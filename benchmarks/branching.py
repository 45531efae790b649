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
* ``fork_branch_ms``: a branch started by fork instead: a real worker paused at the boundary
  after ``--calls`` calls of the same program (answered by the real server) is forked
  (``WorkerProcess.fork``), the workspace copied (reflinks where the file system has them) and
  the MCP server started on the copy and listed: ready to call tools. ``fork_ms`` is the fork
  alone (target: at most 50 ms), ``workspace_copy_ms`` the copy; the server's start is
  ``server_start_ms``. These are the steps :func:`controlscope.replay.branch` takes per branch
  besides forking the controller process itself and relogging the prefix.
* ``branches_N_fork_s`` and ``branches_N_replay_s``: :func:`controlscope.replay.branch` end to
  end with ``--branches`` Arg branches (a scripted Keep review at the boundary, the rest of the
  program, ``Done.``) from the boundary after ``--calls`` calls, started by fork (the prefix
  replayed once) and by prefix replay (once per branch); ``fork_per_branch_ms`` is what each
  forked branch adds to the one prefix replay (its forks, its log, its server, the rest of its
  run, the workspace put back).
* ``server_start_ms``: the MCP server's start alone (part of both numbers above).

Usage: ``python benchmarks/branching.py [--repeats 3] [--calls 100] [--branches 4]``. The last
line printed is one JSON object.
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
from controlscope._tree import copy_tree
from controlscope.core import Event
from controlscope.envs.filesystem.environment import FilesystemEnvironment
from controlscope.envs.filesystem.workspace import Workspace
from controlscope.models import ScriptedModel
from controlscope.review import ModelReviewer
from controlscope.worker import Limits, generate_proxies, resolve_isolation
from controlscope.worker._process import WorkerProcess

TASK = "file_context/file_splitting"

FORK_NOTE = (
    "fork_branch_ms covers the worker's fork at the boundary, the workspace copy and the "
    "server's start on the copy; branches_N_fork_s is replay.branch by fork end to end (the "
    "controller's own fork and relog included)"
)

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


def fork_costs(tmp: Path, calls: int, repeats: int) -> dict[str, float]:
    """Median milliseconds of a branch started by fork (see the module docstring)."""
    env = FilesystemEnvironment()
    task = env.task(TASK)
    times: dict[str, list[float]] = {"fork": [], "copy": [], "server": [], "branch": []}
    with Workspace(prefix="bench-") as ws:
        env.setup(task, 0, ws.path)
        server = env.start_server(ws.path)
        worker = WorkerProcess(resolve_isolation("auto"), Limits(), spin_s=0, worker_spin_s=0)
        try:
            worker.start(generate_proxies(server.list_tools()))
            assert worker.forks, "this machine cannot fork a worker"
            pause_after(worker, server, calls)
            for i in range(repeats):
                t0 = time.perf_counter()
                child = worker.fork()
                t1 = time.perf_counter()
                copy_tree(ws.path, tmp / f"fork-{i}")
                t2 = time.perf_counter()
                branch_server = env.start_server(tmp / f"fork-{i}")
                branch_server.list_tools()
                t3 = time.perf_counter()
                for key, span in (("fork", t1 - t0), ("copy", t2 - t1), ("server", t3 - t2)):
                    times[key].append(span * 1000)
                times["branch"].append((t3 - t0) * 1000)
                branch_server.close()
                child.kill()
        finally:
            worker.kill()
            server.close()
    return {key: statistics.median(values) for key, values in times.items()}


def branch_sets(recording: replay.Recording, tmp: Path, calls: int, n: int) -> dict[str, float]:
    """Seconds of ``replay.branch`` with ``n`` Arg branches, by fork and by prefix replay."""
    keep = json.dumps({"reason": "fine", "operation": "keep"})
    out: dict[str, float] = {}
    for mechanism in ("fork", "replay"):
        t0 = time.perf_counter()
        found = replay.branch(
            recording,
            at=calls,
            scopes=["arg"],
            draws=n,
            out=tmp / f"branches-{mechanism}",
            planner=ScriptedModel(["Done."] * (n + 2)),
            reviewer=ModelReviewer(ScriptedModel([keep] * (20 * n))),
            mechanism=mechanism,  # type: ignore[arg-type]
        )
        out[mechanism] = time.perf_counter() - t0
        assert found.ok and found.mechanism == mechanism, (found.mechanism, found.divergence)
    return out


def pause_after(worker: WorkerProcess, server: cs.core.ToolServer, calls: int) -> None:
    """Run the recorded program in ``worker``, answering its calls from ``server``, until its
    call after ``calls`` calls waits for its answer."""
    program = PROGRAM.format(n=calls + 5)
    worker.channel.send({"t": "run", "seq": 1, "id": "1", "code": program, "nonce": "n"})
    made = 0
    while True:
        msg = worker.channel.recv(30)
        if msg["t"] == "call":
            if made == calls:
                return
            made += 1
            worker.channel.send({"t": "res", "text": server.call(msg["tool"], msg["args"]).text})
        elif msg["t"] not in ("started", "out"):
            raise RuntimeError(f"the program ended before call {calls}: {msg}")


def main() -> None:
    """Run the benchmark and print the JSON summary as the last line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--branches", type=int, default=4)
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
        fork = fork_costs(tmp, args.calls, args.repeats)
        print(f"fork: {fork}")
        sets = branch_sets(recording, tmp, args.calls, args.branches)
        print(f"branch sets of {args.branches}: {sets}")
    result = {
        f"prefix_replay_{args.calls}_calls_s": round(statistics.median(whole), 3),
        "replay_branch_ms": round(statistics.median(ready), 1),
        "fork_branch_ms": round(fork["branch"], 1),
        "fork_ms": round(fork["fork"], 2),
        "workspace_copy_ms": round(fork["copy"], 2),
        "fork_server_start_ms": round(fork["server"], 1),
        "fork_note": FORK_NOTE,
        f"branches_{args.branches}_fork_s": round(sets["fork"], 2),
        f"branches_{args.branches}_replay_s": round(sets["replay"], 2),
        "fork_per_branch_ms": round(
            (sets["fork"] - statistics.median(whole)) * 1000 / args.branches, 1
        ),
        "server_start_ms": round(server_start_ms(args.repeats), 1),
        "reviews_in_prefix": args.calls - 1,
        "target_prefix_replay_s": 2.0,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
