"""Time the filesystem environment's set-up and verification for the 150-student task.

Measures, over ``--repeats`` fresh workspaces (median reported):

* ``setup_and_server_ready_s``: generate the initial state of
  ``student_database/english_talent`` (150 students), start the npm MCP filesystem server on it and
  list its tools (the server is ready for the first primitive call). Target: <= 1 s.
* ``verify_s``: run the verifier on the reference solution's terminal state.
* ``direct_read_ms_median`` / ``direct_read_ms_p95``: one small ``read_text_file`` through
  :class:`~controlscope.envs._mcp.McpToolServer` (the baseline of the worker's overhead ratio).

Usage: ``python benchmarks/env_setup.py [--repeats 5]``. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

from controlscope.envs.filesystem.environment import FilesystemEnvironment
from controlscope.envs.filesystem.testing import strict_caller
from controlscope.envs.filesystem.workspace import Workspace

TASK_ID = "student_database/english_talent"


def main() -> None:
    """Run the benchmark and print the JSON summary as the last line."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--students", type=int, default=150)
    parser.add_argument("--reads", type=int, default=300, help="direct reads per repeat")
    args = parser.parse_args()

    env = FilesystemEnvironment()
    task = env.task(TASK_ID, students=args.students)
    spec = env.spec(TASK_ID)
    setup_s: list[float] = []
    generate_s: list[float] = []
    verify_s: list[float] = []
    reads_ms: list[float] = []
    for seed in range(args.repeats):
        with Workspace(prefix="bench-") as ws:
            t0 = time.perf_counter()
            key = env.setup(task, seed, ws.path)
            t1 = time.perf_counter()
            server = env.start_server(ws.path)
            try:
                server.list_tools()
                t2 = time.perf_counter()
                spec.reference(strict_caller(server))
                first = f"students/{sorted(p.name for p in (ws.path / 'students').iterdir())[0]}"
                for _ in range(args.reads):
                    start = time.perf_counter()
                    server.call("read_text_file", {"path": f"{first}/basic_info.txt"})
                    reads_ms.append((time.perf_counter() - start) * 1000)
            finally:
                server.close()
            t3 = time.perf_counter()
            verdict = env.verify(task, ws.path, key)
            t4 = time.perf_counter()
            if not verdict.success:
                raise SystemExit(f"reference failed: {verdict.checks}")
        generate_s.append(t1 - t0)
        setup_s.append(t2 - t0)
        verify_s.append(t4 - t3)
        print(
            f"seed {seed}: setup+ready {t2 - t0:.3f} s (generate {t1 - t0:.3f} s), "
            f"verify {t4 - t3:.4f} s"
        )
    reads_ms.sort()
    summary = {
        "task": TASK_ID,
        "students": args.students,
        "repeats": args.repeats,
        "setup_and_server_ready_s": round(statistics.median(setup_s), 4),
        "setup_and_server_ready_s_max": round(max(setup_s), 4),
        "generate_s": round(statistics.median(generate_s), 4),
        "verify_s": round(statistics.median(verify_s), 5),
        "direct_read_ms_median": round(statistics.median(reads_ms), 3),
        "direct_read_ms_p95": round(reads_ms[int(0.95 * (len(reads_ms) - 1))], 3),
        "target_setup_s": 1.0,
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
