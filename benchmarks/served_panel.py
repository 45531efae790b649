"""A panel against a served model: how many requests it keeps in flight, and what a waiting run
costs.

Starts a loopback OpenAI-compatible endpoint (``tests/fixtures/served_endpoint.py``) that answers
every request after ``--latency`` seconds with scripted answers (a ten-call program on any
filesystem task, then ``Done.``; every review keeps), and runs a panel of ``--units`` filesystem
units x Keep, Arg and Full with default settings (whole runs, continuous review) on the real MCP
filesystem server and the isolated worker. Reports:

* ``inflight_peak``: the most requests the endpoint held at once;
* ``max_connections``: the panel's bound on them;
* ``wall_s``: the panel's wall time;
* ``ideal_wall_s``: the dependency-bound critical path at that concurrency, every request (a
  run's uncached model calls, read from its log) taking exactly the latency and nothing else:
  the longer of one unit's chain (its Keep run, then its longest reviewing run) and all the
  requests spread over ``max_connections`` connections;
* ``controller_cpu_s_per_run``: the CPU seconds of the panel's pool processes (the runs'
  controllers; not their workers, tool servers or verifiers) per run;
* ``rss_mb_per_inflight_run``: the resident memory of every process below the panel (pool
  processes, workers, tool servers), at its peak, per run in flight then;
* ``requests``, ``runs``, ``rate_limit_wait_s`` and the CPU of the whole tree per run
  (``tree_cpu_s_per_run``).

Targets at 1 s latency on 2 cores: ``wall_s / ideal_wall_s`` at most 1.5, ``inflight_peak`` at
least 0.9 x ``max_connections``, at most 1 CPU-second and 150 MB per ten-call run.

Measured on 3 December 2026, 2 cores shared with other work (load average 12 to 26), 60 units
(180 runs) at 1 s latency: before served panels had their own backend, a process per run and
one run per core: ``inflight_peak`` 2, ``wall_s`` 776 (1,144 requests; the ideal at 16
connections would be 72 s), 234 MB per run in flight; after, at the default 16 connections and
32 runs in flight: ``inflight_peak`` 16, ``wall_s`` 123 to 137 against ``ideal_wall_s`` 75
(1.64 to 1.83: the runs' start-up, their MCP servers and workers, competes for the shared
cores), 0.18 CPU-seconds of controller and 0.5 of everything per run, 98 to 102 MB per run in
flight.

Usage: ``python benchmarks/served_panel.py [--units 60] [--latency 1.0] [--workers N]
[--max-connections N]``. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from controlscope import panel as cp
from controlscope._proc import descendants
from controlscope.core import ModelCallEvent
from controlscope.record import read_events

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from fixtures.served_endpoint import ServedEndpoint  # noqa: E402 - the tests' endpoint

_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


class TreeSampler:
    """Samples every process below this one: each process's CPU (its last reading) and the
    tree's resident memory with the runs in flight at that moment."""

    def __init__(self, running: list[int]) -> None:
        self.cpu: dict[int, float] = {}
        self.pool: set[int] = set()
        self.rss_peak = (0.0, 0)
        self._running = running
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        me = os.getpid()
        while not self._stop.wait(0.25):
            total = 0.0
            for pid in descendants(me):
                try:
                    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                    rss = int(Path(f"/proc/{pid}/statm").read_text().split()[1])
                except (OSError, IndexError, ValueError):
                    continue
                self.cpu[pid] = (int(stat[11]) + int(stat[12])) / _TICK
                if int(stat[1]) == me:
                    self.pool.add(pid)
                total += rss * _PAGE / 2**20
            running = self._running[0]
            if running and total > self.rss_peak[0]:
                self.rss_peak = (total, running)


def panel_config(units: int, base_url: str, max_connections: int | None) -> cp.PanelConfig:
    """``units`` filesystem units (the panel's tasks x seeds) x Keep, Arg and Full, default
    settings."""
    planner: dict[str, Any] = {"model": "openai:served", "base_url": base_url}
    if max_connections is not None:
        planner["max_connections"] = max_connections
    data: dict[str, Any] = {
        "env": "filesystem",
        "tasks": "all",
        "seeds": [0],
        "scopes": ["keep", "arg", "full"],
        "planner": planner,
    }
    tasks = list(dict.fromkeys(r.task for r in plan(data).runs))
    seeds = max(1, math.ceil(units / len(tasks)))
    data.update(tasks=tasks[: math.ceil(units / seeds)], seeds=list(range(seeds)))
    return cp.parse_config(data)


def plan(data: dict[str, Any]) -> cp.PanelPlan:
    return cp.plan_panel(cp.parse_config(data), check_models=False)


def uncached_requests(folder: Path, run_id: str) -> int:
    """The requests a run sent to the endpoint (its uncached model calls)."""
    events = read_events(cp.run_dir(folder, run_id))
    return sum(
        1
        for e in events
        if isinstance(e, ModelCallEvent) and (e.response is None or not e.response.cached)
    )


def ideal_wall_s(plan: cp.PanelPlan, requests: dict[str, int], slots: int, latency: float) -> float:
    """The dependency-bound critical path at ``slots`` requests at once, every request taking
    ``latency`` seconds and nothing else: the longer of a unit's chain (its Keep run's
    requests, then its longest reviewing run's) and all requests spread over ``slots``."""
    chain: dict[str, int] = {}
    for run in plan.runs:
        if run.after is not None:
            chain[run.after] = max(chain.get(run.after, 0), requests.get(run.id, 0))
    longest = max((requests.get(keep, 0) + n for keep, n in chain.items()), default=0)
    spread = math.ceil(sum(requests.values()) / slots)
    return max(longest, spread) * latency


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=60)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--workers", type=int, default=None)
    parser.add_argument("--max-connections", type=int, default=None)
    args = parser.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "not-needed")
    endpoint = ServedEndpoint(args.latency)
    running = [0]
    last: list[cp.PanelStatus] = []

    def observe(status: cp.PanelStatus) -> None:
        running[0] = status.running
        last[:] = [status]

    config = panel_config(args.units, endpoint.base_url, args.max_connections)
    limit = getattr(config.planner, "max_connections", None) or args.workers
    limit = limit or cp.default_workers(config)
    with tempfile.TemporaryDirectory(prefix="served-panel-") as tmp:
        folder = Path(tmp) / "panel"
        started = time.monotonic()
        with TreeSampler(running) as sampler:
            result = cp.run_panel(config, folder, workers=args.workers, observer=observe)
        wall = time.monotonic() - started
        requests = {r.id: uncached_requests(folder, r.id) for r in result.plan.runs}
    endpoint.close()
    runs = len(result.plan.runs)
    slots = limit or endpoint.peak
    rss, inflight_runs = sampler.rss_peak
    status = last[-1] if last else None
    out = {
        "units": len(result.plan.units),
        "runs": runs,
        "failed": sum(1 for r in result.records.values() if r.status == "error"),
        "latency_s": args.latency,
        "requests": endpoint.requests,
        "inflight_peak": endpoint.peak,
        "max_connections": limit,
        "wall_s": round(wall, 2),
        "ideal_wall_s": round(ideal_wall_s(result.plan, requests, slots, args.latency), 2),
        "controller_cpu_s_per_run": round(sum(sampler.cpu[p] for p in sampler.pool) / runs, 3),
        "tree_cpu_s_per_run": round(sum(sampler.cpu.values()) / runs, 3),
        "rss_mb_per_inflight_run": round(rss / max(1, inflight_runs), 1),
        "runs_inflight_at_rss_peak": inflight_runs,
        "rate_limit_wait_s": getattr(status, "rate_limit_wait_s", 0.0),
        "cores": len(os.sched_getaffinity(0)),
    }
    out["wall_over_ideal"] = round(out["wall_s"] / max(out["ideal_wall_s"], 1e-9), 2)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
