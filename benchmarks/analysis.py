"""What a panel's report and its execution cost (paper sections 3.2, 4, 5.1, A.5).

* ``report_1755x3_s``: ``controlscope.analysis.report`` on a synthetic panel folder of 1,755
  units (195 templates of 9 instances in 7 categories) under Keep, Arg and Full (5,265 finished
  runs), 10,000 cluster-bootstrap resamples, everything written (Markdown, CSVs, JSON, both
  figures). Target: at most 3 s.
* ``panel_speedup_2_workers``: a model-free panel (scripted planner and reviewer, the real MCP
  filesystem server and isolated worker; ``--units`` units under Keep, Arg and Full, whole
  runs) run with one worker and with two on the local backend: the ratio of wall times.
  Target: at least 1.7 (on 2 cores).
* ``ray_overhead_per_run_ms``: what a Ray task adds to one run: the same jobs (branches with
  no boundary to start from, which read their Keep recording and record themselves
  ineligible) executed one at a time through the Ray backend on a local instance and called
  directly, the difference per job (after the instance's workers have started, whose one-off
  cost is ``ray_worker_start_s``). Target: at most 50 ms.

Usage: ``python benchmarks/analysis.py [--units 8] [--jobs 20]``. The last line printed is one
JSON object.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from controlscope import panel as cp
from controlscope.analysis import report
from controlscope.panel.testing import SyntheticRun, write_synthetic_panel

TASK = "file_context/file_splitting"
CATEGORIES = 7
TEMPLATES = 195
INSTANCES = 9

PROGRAM = """
root = "/workspace"
text = read_text_file(path=root + "/large_file.txt")
lines = text.splitlines()
per = len(lines) // 5
create_directory(path=root + "/split")
for i in range(5):
    chunk = lines[i * per:(i + 1) * per]
    write_file(path=f"{root}/split/chunk_{i + 1:02d}.txt", content="\\n".join(chunk) + "\\n")
"""


def synthetic(folder: Path) -> None:
    """1,755 units under Keep, Arg and Full with varied outcomes, calls and tokens."""
    runs = []
    for t in range(TEMPLATES):
        for i in range(INSTANCES):
            unit = f"t{t:03d}/i{i}"
            for j, scope in enumerate(("keep", "arg", "full")):
                success = (t * 7 + i * 3 + j * 5) % 11 < 7
                calls = 5 + (t + i * 13 + j * 29) % 95
                run = SyntheticRun(
                    unit=unit,
                    category=f"c{t % CATEGORIES}",
                    template=f"t{t:03d}",
                    scope=scope,
                    success=success,
                    calls=calls,
                    output_tokens=50 * calls,
                )
                runs.append(run)
    write_synthetic_panel(folder, runs)


def time_report(tmp: Path) -> float:
    folder = tmp / "synthetic"
    synthetic(folder)
    started = time.perf_counter()
    built = report(folder, out=tmp / "synthetic-report", resamples=10_000)
    seconds = time.perf_counter() - started
    assert built.units == TEMPLATES * INSTANCES and len(built.figures) == 2
    return seconds


def config_text(tmp: Path, units: int, backend: str = "local") -> Path:
    keep = json.dumps({"reason": "fine", "operation": "keep"})
    planner, reviewer = tmp / "planner.json", tmp / "reviewer.json"
    answers = [f"```python\n{PROGRAM}\n```", "Done."]
    planner.write_text(json.dumps({"by": "turn", "answers": answers}))
    reviewer.write_text(json.dumps([keep] * 20))
    path = tmp / f"panel-{backend}.toml"
    path.write_text(
        f'tasks = ["{TASK}"]\nseeds = {list(range(units))}\nstart = "whole"\n'
        f'[planner]\nmodel = "scripted:{planner}"\n[reviewer]\nmodel = "scripted:{reviewer}"\n'
        f'[execution]\nbackend = "{backend}"\n'
    )
    return path


def time_panel(tmp: Path, units: int, workers: int) -> float:
    config = cp.load_config(config_text(tmp, units))
    started = time.perf_counter()
    result = cp.run_panel(config, tmp / f"panel-{workers}", workers=workers)
    seconds = time.perf_counter() - started
    assert result.complete and len(result.records) == 3 * units
    return seconds


def ray_overhead(tmp: Path, jobs: int) -> tuple[float, float]:
    """(per-job overhead in ms, the instance's start and first task in s)."""
    planner = tmp / "one-call.json"
    program = "print(list_directory(path='/workspace'))"
    planner.write_text(
        json.dumps({"by": "turn", "answers": [f"```python\n{program}\n```", "Done."]})
    )
    config = cp.parse_config(
        {"tasks": [TASK], "scopes": ["keep", "arg"], "start": "first_boundary",
         "planner": {"model": f"scripted:{planner}"}}
    )  # fmt: skip
    folder = tmp / "one-call"
    result = cp.run_panel(config, folder, workers=1)  # the arg branch: no boundary 1
    assert result.complete and result.status.ineligible == 1
    run = next(r for r in result.plan.runs if r.scope == "arg")
    job = cp.RunJob(folder.resolve(), config, run)
    direct = _per_job(lambda: _check(cp.execute(job)), jobs)
    started = time.perf_counter()
    backend = cp.RayBackend(1.0)
    try:
        backend.wait([backend.submit(job)], timeout_s=600)
        start_s = time.perf_counter() - started

        def through_ray() -> None:
            [(_, record)] = backend.wait([backend.submit(job)], timeout_s=600)
            _check(record)

        on_ray = _per_job(through_ray, jobs)
    finally:
        backend.close(cancel=False)
    return (on_ray - direct) * 1000.0, start_s


def _check(record: object) -> None:
    assert isinstance(record, cp.RunRecord) and record.status == "ineligible", record


def _per_job(call: Callable[[], None], jobs: int) -> float:
    started = time.perf_counter()
    for _ in range(jobs):
        call()
    return (time.perf_counter() - started) / jobs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=8)
    parser.add_argument("--jobs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cs-bench-analysis-") as name:
        tmp = Path(name)
        report_s = time_report(tmp)
        print(f"report of 1,755 units x 3 conditions: {report_s:.2f} s", file=sys.stderr)
        one = time_panel(tmp, args.units, 1)
        two = time_panel(tmp, args.units, 2)
        print(f"panel of {3 * args.units} runs: 1 worker {one:.1f} s, 2 workers {two:.1f} s")
        overhead_ms, start_s = ray_overhead(tmp, args.jobs)
        print(f"Ray: {overhead_ms:.1f} ms per run, {start_s:.1f} s to start")
    print(
        json.dumps(
            {
                "report_1755x3_s": round(report_s, 3),
                "panel_speedup_2_workers": round(one / two, 2),
                "panel_1_worker_s": round(one, 2),
                "panel_2_workers_s": round(two, 2),
                "ray_overhead_per_run_ms": round(overhead_ms, 1),
                "ray_worker_start_s": round(start_s, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
