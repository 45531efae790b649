"""How long ``controlscope export --format inspect`` takes on a 1,000-run panel, and (when the
tracing benchmark is present) what tracing a run with OpenTelemetry costs.

The panel: 500 units under Keep and Full (1,000 finished runs), written by
``report_speed.write_panel`` in the format a panel writes (per run its summary, its record and
its log: the events of ``tests/fixtures/main_job`` repeated per primitive call, every call of
a Full run reviewed; ``--calls`` primitive calls a run, 10 by default: about 220 KB a Full
run). Then ``controlscope export PANEL --format inspect --out panel.eval`` runs in a fresh
process, timed end to end (``inspect_export_s``; target: at most 10 s; ``inspect_export_cpu_s``:
its CPU seconds, what it costs whatever else keeps the machine busy); then, in a fresh process
split into its parts, their CPU seconds: ``import_cpu_s`` (``controlscope`` and ``inspect_ai``;
``inspect_import_s``: the wall seconds of importing ``inspect_ai`` alone), ``build_cpu_s`` (the
logs read into the log's samples: ours) and ``write_cpu_s`` (Inspect's ``write_eval_log``: each
sample condensed, compressed, written).

Measured on 2 cores with other work keeping them busy (load 7 to 11), 4 December 2026, 10 calls
a run (119 MB of logs, an 8.6 MB log written): 10.3 to 11.6 CPU seconds end to end (wall 23 to
37 s on that machine), over the 10 s target; of it about 3.9 CPU s building the samples, 4.6
in Inspect's ``write_eval_log``, the rest imports (``controlscope`` and ``inspect_ai``, about
2.4 s wall each). Then (load about 4): 9.9 to 10.0 CPU s before (the old and the new export
alternated on the same panel), 7.0 to 7.3 CPU s and wall after three changes: the fixture's
events (schema version 7) are parsed once each when read, not validated as they stand and then
again upgraded (0.5 CPU s); the cycle collector is paused while the log is built and written
(1.5 CPU s: its passes walk every kept sample); the package no longer loads the MCP SDK
(0.3 CPU s). What is left is mostly Inspect's: ``write_eval_log`` (each sample condensed, its
depth checked, serialised, compressed; it has no cheaper public writer) and importing
``inspect_ai`` (about 0.8 CPU s).

``otel_overhead_pct`` comes from ``_otel_overhead.otel_overhead_pct()`` (a 100-call scripted
run with tracing on against off; target at most 5) when that module is present; the key is left
out otherwise.

Usage: ``python benchmarks/export.py [--calls 10] [--repeats 3] [--no-otel]``; the medians of
``--repeats`` exports are reported. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from controlscope.panel.testing import SyntheticRun
from report_speed import time_parts, write_panel

UNITS = 500
SCOPES = ("keep", "full")


def panel_runs(calls: int) -> list[SyntheticRun]:
    """500 units under Keep and Full, varied outcomes, ``calls`` primitive calls each."""
    return [
        SyntheticRun(
            unit=f"t{u // 5:03d}/i{u % 5}",
            category=f"c{u % 7}",
            template=f"t{u // 5:03d}",
            scope=scope,
            success=(u * 7 + j * 5) % 11 < 7,
            calls=calls,
            output_tokens=50 * calls,
        )
        for u in range(UNITS)
        for j, scope in enumerate(SCOPES)
    ]


def time_export(panel: Path, out: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of ``controlscope export`` in a fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    command = [sys.executable, "-m", "controlscope.cli", "export", str(panel)]
    command += ["--format", "inspect", "--out", str(out)]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, timeout=600)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


PARTS = """
import json, sys, time
from pathlib import Path
t0 = time.process_time()
import inspect_ai.log
from controlscope.export._inspect import _no_cycle_collection, build_log
from controlscope.export._runs import find_runs
t1 = time.process_time()
with _no_cycle_collection():  # as export_inspect builds and writes
    log = build_log(find_runs(Path(sys.argv[1])))
    t2 = time.process_time()
    inspect_ai.log.write_eval_log(log, sys.argv[2])
    t3 = time.process_time()
print(json.dumps({"import_cpu_s": t1 - t0, "build_cpu_s": t2 - t1, "write_cpu_s": t3 - t2}))
"""
"""The export's parts, their CPU seconds in a fresh process: the imports (``controlscope`` and
``inspect_ai``), reading the logs into the log's samples (ours), and ``write_eval_log``
(Inspect's: condensing each sample, compressing, writing)."""


def time_import() -> float:
    """Seconds a fresh process takes to import what the export uses of ``inspect_ai``."""
    code = (
        "import time; t = time.perf_counter(); "
        "import inspect_ai.log, inspect_ai.event, inspect_ai.model; "
        "print(time.perf_counter() - t)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, timeout=300
    )
    return float(done.stdout.strip().splitlines()[-1])


def otel() -> dict[str, Any]:
    """``otel_overhead_pct`` when the tracing benchmark is present, else nothing."""
    try:
        from _otel_overhead import otel_overhead_pct
    except ImportError:
        print("no _otel_overhead module: otel_overhead_pct left out", file=sys.stderr)
        return {}
    return {"otel_overhead_pct": round(float(otel_overhead_pct()), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=10, help="primitive calls a run")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-otel", action="store_true", help="leave the tracing number out")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cs-bench-export-") as name:
        tmp = Path(name)
        runs, log_bytes = write_panel(tmp / "panel", 1.0, panel_runs(args.calls))
        print(f"wrote {runs} runs, {log_bytes / 1e6:.0f} MB of logs", file=sys.stderr)
        walls, cpus, parts = [], [], []
        for repeat in range(args.repeats):
            out = tmp / f"panel-{repeat}.eval"
            wall, cpu = time_export(tmp / "panel", out)
            walls.append(wall)
            cpus.append(cpu)
            size = out.stat().st_size
            parts.append(time_parts(tmp / "panel", tmp / f"parts-{repeat}.eval", PARTS))
            print(f"export: {wall:.2f} s ({cpu:.2f} CPU s), {size / 1e6:.1f} MB", file=sys.stderr)
            print(f"  parts: {parts[-1]}", file=sys.stderr)
        result: dict[str, Any] = {
            "inspect_export_s": round(statistics.median(walls), 3),
            "inspect_export_cpu_s": round(statistics.median(cpus), 3),
            **{k: round(statistics.median(p[k] for p in parts), 3) for k in parts[0]},
            "inspect_import_s": round(time_import(), 3),
            "runs": runs,
            "calls_per_run": args.calls,
            "log_mb": round(log_bytes / 1e6),
            "eval_mb": round(size / 1e6, 1),
        }
    if not args.no_otel:
        result.update(otel())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
