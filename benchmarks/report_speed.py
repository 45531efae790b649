"""How long ``controlscope report`` takes on a panel of the paper's AppWorld size (paper 4, 5.1).

A synthetic panel folder of 1,755 units (195 templates of 9 instances in 7 categories) under
Keep, Arg and Full (5,265 finished runs) is written in the format a panel writes: per run its
``summary.json`` (with the terminal files' hashes a real summary holds), its ``events.jsonl``
(the events of a recorded run, ``tests/fixtures/main_job``, repeated per primitive call: a
reviewed call's boundary, review request, reviewer call, proposal, validation and realized
operation; about 20 KB a reviewed call, 4.2 GB in all by default) and its ``panel_run.json``
naming the log as a panel's run does (SHA-256 and the file's identity). Then
``controlscope report PANEL --out OUT`` (10,000 resamples) runs in a fresh process, timed end
to end (``report_s``; target: at most 3 s; ``report_cpu_s``: its CPU seconds, what it
costs whatever else keeps the machine busy), and again in a fresh process split into its parts
(``import_s``: the command's modules; ``read_panel_s``; ``tables_s``: tables and bootstrap
intervals; ``figures_s``: matplotlib's import and both figures; ``write_s``: the files).

Measured on 2 cores with other work keeping them busy (load 6 to 9), 3 December 2026: 2.6 to
3.0 CPU seconds (wall 5.4 to 10 s on that machine); before the logs were checked by their
fingerprint (each was hashed) and small files read without a 4 MB buffer, the same folder took
6.4 to 9.5 CPU seconds (12 to 23 s wall). On 4 December the report listed every paired
outcome with the decisions behind it, read from each reviewing run's log: 30.8 s on an idle
machine (27.5 s of it reading 3.2 GB of logs). Each summary now lists its run's first eight
decisions and counts the rest: 2.38 s wall (2.56 CPU s) on an idle machine (load below 1),
the command's imports about 0.6 s of it.

Usage: ``python benchmarks/report_speed.py [--log-scale 1.0] [--repeats 3]``; the medians of
``--repeats`` runs are reported (the panel is written once; its files are in the page cache,
as after a panel has run). ``--log-scale 0`` writes no logs. The last line printed is one JSON
object.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from controlscope.panel import RunRecord, log_identity, read_record, run_dir
from controlscope.panel._folder import write_record
from controlscope.panel.testing import SyntheticRun, write_synthetic_panel
from controlscope.record import ReviewDecision, iter_events, read_summary, summarize, write_summary

CATEGORIES = 7
TEMPLATES = 195
INSTANCES = 9
SCOPES = ("keep", "arg", "full")
RECORDED = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "main_job"
REVIEW = ("boundary", "review_request", "model_call", "proposal", "validation")
REVIEW_END = ("realized_operation",)


def synthetic_runs() -> list[SyntheticRun]:
    """1,755 units under Keep, Arg and Full with varied outcomes, calls and tokens."""
    runs = []
    for t in range(TEMPLATES):
        for i in range(INSTANCES):
            for j, scope in enumerate(SCOPES):
                calls = 5 + (t + i * 13 + j * 29) % 95
                runs.append(
                    SyntheticRun(
                        unit=f"t{t:03d}/i{i}",
                        category=f"c{t % CATEGORIES}",
                        template=f"t{t:03d}",
                        scope=scope,
                        success=(t * 7 + i * 3 + j * 5) % 11 < 7,
                        calls=calls,
                        output_tokens=50 * calls,
                    )
                )
    return runs


class LogTemplate:
    """A recorded run's event lines by type, written again for any number of calls."""

    def __init__(self, scale: float) -> None:
        lines = (RECORDED / "events.jsonl").read_text(encoding="utf-8").splitlines()
        self.by_type: dict[str, list[str]] = {}
        for line in lines:
            kind = json.loads(line)["type"]
            self.by_type.setdefault(kind, []).append(line)
        self.scale = scale

    def _pick(self, kind: str, n: int = 0) -> str:
        found = self.by_type[kind]
        return found[min(n, len(found) - 1)]

    def text(self, calls: int, reviewed: bool) -> str:
        """A log of ``calls`` primitive calls, each reviewed or not (seq renumbered)."""
        head = [self._pick(k) for k in ("run_start", "planner_turn", "model_call", "block_start")]
        per_call = [self._pick("boundary")]
        if reviewed:
            per_call = [self._pick(k, 1 if k == "model_call" else 0) for k in REVIEW]
            per_call += [self._pick(k) for k in REVIEW_END]
        per_call.append(self._pick("primitive_call"))
        tail = [self._pick("block_end"), self._pick("planner_turn", 1)]
        tail += [self._pick("model_call", 2), self._pick("final_verdict"), self._pick("run_end")]
        body = head + per_call * max(1, round(calls * self.scale)) + tail
        return "".join(
            re.sub(r'"seq":\d+', f'"seq":{n}', line, count=1) + "\n" for n, line in enumerate(body)
        )


def write_panel(
    folder: Path, scale: float, runs: list[SyntheticRun] | None = None
) -> tuple[int, int]:
    """Write the synthetic panel (``runs``; None: :func:`synthetic_runs`, each unit's runs
    with draw 0); return (runs, log bytes). Each summary lists its run's decisions as a real
    one does (``summarize`` of one log per length, reused)."""
    runs = synthetic_runs() if runs is None else runs
    write_synthetic_panel(folder, runs)
    recorded = read_summary(RECORDED)
    template = LogTemplate(scale) if scale > 0 else None
    listed: dict[tuple[int, bool], list[ReviewDecision] | None] = {}
    total = 0
    for run in runs:
        name = "keep" if run.scope == "keep" else f"{run.scope}-d0"
        directory = run_dir(folder, f"{run.unit}/{name}")
        reviewed = run.scope != "keep"
        if template is not None:
            log = template.text(run.calls, reviewed)
            (directory / "events.jsonl").write_text(log, encoding="utf-8")
            total += len(log)
            if (run.calls, reviewed) not in listed:
                listed[run.calls, reviewed] = summarize(iter_events(directory)).decisions
        summary = read_summary(directory)
        write_summary(
            directory,
            summary.model_copy(
                update={
                    "file_hashes": recorded.file_hashes,
                    "state_hash": recorded.state_hash,
                    "reviews": run.calls if reviewed else 0,
                    "boundaries": run.calls,
                    "decisions": listed.get((run.calls, reviewed), []),
                }
            ),
        )
        if template is not None:
            write_record(directory, _named(read_record(directory), directory))
    return len(runs), total


def _named(record: RunRecord, directory: Path) -> RunRecord:
    """The record naming its log as a panel's run does."""
    identity = log_identity(directory)
    assert identity is not None
    return record.model_copy(
        update={"log_sha256": identity.sha256, "log_fingerprint": identity.fingerprint}
    )


def time_command(panel: Path, out: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of ``controlscope report`` in a fresh process (its CPU
    time, user and system, says what it costs on a machine other work keeps busy)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "controlscope.cli", "report", str(panel), "--out", str(out)],
        check=True,
        stdout=subprocess.DEVNULL,
        timeout=600,
    )
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, cpu


PARTS = """
import json, sys, time
from pathlib import Path
started = time.perf_counter()
import controlscope.cli, controlscope.cli._report
from controlscope.analysis import _report, read_panel
imported = time.perf_counter()
found = read_panel(sys.argv[1])
read = time.perf_counter()
built = _report._build(found, found.plan.cluster, resamples=10_000, seed=0, level=0.95)
tables = time.perf_counter()
images = built.figure_images()
figures = time.perf_counter()
_report.Report.figure_images = lambda self: images  # drawn once, above
built = _report.write_report(built, Path(sys.argv[2]))
written = time.perf_counter()
print(json.dumps({"import_s": imported - started, "read_panel_s": read - imported,
    "tables_s": tables - read, "figures_s": figures - tables, "write_s": written - figures}))
"""
"""The command's parts, timed in a fresh process (the figures drawn once)."""


def time_parts(panel: Path, out: Path, script: str = PARTS) -> dict[str, float]:
    """Seconds per part of the report (or what ``script`` times: it prints one JSON object
    last), in a fresh process given the panel and the output as its arguments."""
    done = subprocess.run(
        [sys.executable, "-c", script, str(panel), str(out)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    parts: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return parts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-scale", type=float, default=1.0, help="log size factor")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="cs-bench-report-") as name:
        tmp = Path(name)
        panel = tmp / "panel"
        started = time.perf_counter()
        runs, log_bytes = write_panel(panel, args.log_scale)
        print(f"wrote {runs} runs, {log_bytes / 1e9:.2f} GB of logs", file=sys.stderr)
        print(f"  in {time.perf_counter() - started:.1f} s", file=sys.stderr)
        walls, cpus, parts = [], [], []
        for repeat in range(args.repeats):
            wall, cpu = time_command(panel, tmp / f"report-{repeat}")
            walls.append(wall)
            cpus.append(cpu)
            parts.append(time_parts(panel, tmp / f"parts-{repeat}"))
            print(f"report: {wall:.2f} s ({cpu:.2f} CPU s); {parts[-1]}", file=sys.stderr)
    result: dict[str, float | int] = {
        "report_s": round(statistics.median(walls), 3),
        "report_cpu_s": round(statistics.median(cpus), 3),
    }
    for key in parts[0]:
        result[key] = round(statistics.median(p[key] for p in parts), 3)
    result.update(runs=runs, log_mb=round(log_bytes / 1e6), resamples=10_000)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
