"""How long ``controlscope export --format inspect`` takes on a 1,000-run panel, and (when the
tracing benchmark is present) what tracing a run with OpenTelemetry costs.

The panel: 500 units under Keep and Full (1,000 finished runs), written by
``report_speed.write_panel`` in the format a panel writes (per run its summary, its record and
its log: the events of ``tests/fixtures/main_job`` repeated per primitive call, every call of
a Full run reviewed; ``--calls`` primitive calls a run, 10 by default: about 220 KB a Full
run). Then ``controlscope export PANEL --format inspect --out panel.eval`` runs in a fresh
process, timed end to end (``inspect_export_s``; target: at most 10 s; ``inspect_export_cpu_s``:
its CPU seconds, what it costs whatever else keeps the machine busy); ``import_s`` is the part
of it spent importing ``inspect_ai`` (measured apart, in a fresh process).

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
from report_speed import write_panel

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
        from _otel_overhead import otel_overhead_pct  # type: ignore[import-not-found]
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
        walls, cpus = [], []
        for repeat in range(args.repeats):
            out = tmp / f"panel-{repeat}.eval"
            wall, cpu = time_export(tmp / "panel", out)
            walls.append(wall)
            cpus.append(cpu)
            size = out.stat().st_size
            print(f"export: {wall:.2f} s ({cpu:.2f} CPU s), {size / 1e6:.1f} MB", file=sys.stderr)
        result: dict[str, Any] = {
            "inspect_export_s": round(statistics.median(walls), 3),
            "inspect_export_cpu_s": round(statistics.median(cpus), 3),
            "import_s": round(time_import(), 3),
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
