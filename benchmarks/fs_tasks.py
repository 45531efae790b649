"""Benchmark: the filesystem tasks, per task module.

For each task of the chosen task modules and each seed: generate the workspace, start the real
npm filesystem server, run the reference solution through it, and verify. Prints one line per
task, then, as its LAST line, one JSON object with the median seconds per phase, the primitive
calls of each reference, the workspace sizes and whether every reference run passed.

Usage: ``python benchmarks/fs_tasks.py [--seeds N] [--modules desktop,papers,...]``
(default: every module of :data:`controlscope.envs.filesystem.tasks.TASK_MODULES`).
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
import time
from typing import Any

from controlscope.envs.filesystem.environment import spec_rng
from controlscope.envs.filesystem.registry import REGISTRY
from controlscope.envs.filesystem.server import start_filesystem_server
from controlscope.envs.filesystem.tasks import TASK_MODULES
from controlscope.envs.filesystem.testing import strict_caller
from controlscope.envs.filesystem.workspace import Workspace


def _modules(text: str) -> tuple[str, ...]:
    """Parse ``--modules``: comma-separated names out of :data:`TASK_MODULES`."""
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    unknown = sorted(set(names) - set(TASK_MODULES))
    if not names or unknown:
        raise argparse.ArgumentTypeError(
            f"unknown task module(s) {unknown or [text]}; choose from {', '.join(TASK_MODULES)}"
        )
    return names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3, help="seeds per task (default 3)")
    parser.add_argument(
        "--modules",
        type=_modules,
        default=TASK_MODULES,
        help="comma-separated task modules (default: all of TASK_MODULES)",
    )
    args = parser.parse_args()
    modules: tuple[str, ...] = args.modules
    for name in modules:
        importlib.import_module(f"controlscope.envs.filesystem.tasks.{name}")
    ids = sorted(t for t in REGISTRY if t.split("/")[0] in modules)
    per_task: dict[str, dict[str, Any]] = {}
    all_passed = True
    for task_id in ids:
        spec = REGISTRY[task_id]
        gen_s, solve_s, verify_s, calls, files, size = [], [], [], [], [], []
        for seed in range(args.seeds):
            with Workspace(prefix="bench-") as ws:
                t0 = time.perf_counter()
                key = spec.generate(spec_rng(seed), ws.path, dict(spec.default_params))
                t1 = time.perf_counter()
                paths = [p for p in ws.path.rglob("*") if p.is_file()]
                files.append(len(paths))
                size.append(sum(p.stat().st_size for p in paths))
                log: list[tuple[str, dict[str, Any]]] = []
                with start_filesystem_server(ws.path) as server:
                    spec.reference(strict_caller(server, log))
                t2 = time.perf_counter()
                checks = spec.verify(ws.path, key)
                t3 = time.perf_counter()
            all_passed &= bool(checks) and all(c.passed for c in checks)
            gen_s.append(t1 - t0)
            solve_s.append(t2 - t1)
            verify_s.append(t3 - t2)
            calls.append(len(log))
        per_task[task_id] = {
            "generate_s": round(statistics.median(gen_s), 4),
            "server_and_reference_s": round(statistics.median(solve_s), 3),
            "verify_s": round(statistics.median(verify_s), 4),
            "reference_calls": max(calls),
            "files": max(files),
            "bytes": max(size),
        }
        print(task_id, per_task[task_id], flush=True)
    print(
        json.dumps(
            {
                "modules": list(modules),
                "tasks": len(ids),
                "seeds": args.seeds,
                "all_references_pass": all_passed,
                "max_server_and_reference_s": max(
                    v["server_and_reference_s"] for v in per_task.values()
                ),
                "max_reference_calls": max(v["reference_calls"] for v in per_task.values()),
                "per_task": per_task,
            }
        )
    )


if __name__ == "__main__":
    main()
