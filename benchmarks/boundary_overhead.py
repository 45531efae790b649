"""Boundary overhead of the worker: what pausing at every primitive call costs.

Prints a few human-readable lines, then as its LAST line one JSON object:

- ``keep_roundtrip_median_ms``: one boundary with a no-op in-process tool and a keep handler
  (median time between consecutive boundaries of a loop of calls);
- ``inprocess_call_median_ms``: the same no-op tool called directly in-process;
- ``mcp_via_worker_median_ms`` / ``mcp_direct_median_ms``: the same small ``read_text_file`` of
  the real npm filesystem server through the worker vs straight through the SDK client;
- ``mcp_ratio``: their quotient (target <= 1.3);
- ``mcp_direct_spaced_median_ms`` / ``mcp_ratio_vs_spaced``: direct calls separated by an idle
  pause as long as one keep round trip. On a virtual machine a call after an idle gap is itself
  slower (an idle virtual CPU halts, and waking the server's and the client loop's threads on
  it costs tens of microseconds), so this baseline separates the worker's own cost from that
  effect. Both sides of the worker channel poll briefly before sleeping
  (``WorkerSession(spin_s=..., worker_spin_s=...)``), which takes most wake-ups out of a keep
  round trip; timing the segments of a via-worker call separately puts the worker's own share
  at about 0.17 ms on a quiet host, 0.25 ms on a loaded one (waking the worker after the tool
  answers, the worker's bookkeeping, the boundary message), and the rest in the MCP round trip
  itself being slower when other processes ran between two calls;
- ``worker_start_s``: median time for ``WorkerSession.start()`` (target <= 0.3 s);
- ``replace_roundtrip_ms``: median time from the handler returning ``replace_workflow`` until
  the replacement block starts (target <= 10 ms);
- ``isolation``: the isolation in force.

Usage: ``python benchmarks/boundary_overhead.py [--calls N] [--spin-us U] [--worker-spin-us W]``
(``--spin-us 0 --worker-spin-us 0``: the channel always sleeps, for comparison).
"""

from __future__ import annotations

import argparse
import itertools
import json
import select
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from controlscope.core import (
    BlockResult,
    Boundary,
    Keep,
    PrimitiveCall,
    ReplaceWorkflow,
    ToolResult,
    ToolSchema,
)
from controlscope.core import Operation as Decision
from controlscope.envs.filesystem.server import start_filesystem_server
from controlscope.worker import CONTROLLER_SPIN_S, WORKER_SPIN_S, Limits, WorkerSession

BIG = Limits(primitive_calls=10**9)


class NoopServer:
    """An in-process ToolServer with one tool that does nothing."""

    def list_tools(self) -> list[ToolSchema]:
        return [ToolSchema(name="noop", input_schema={"type": "object", "properties": {}})]

    def call(
        self, name: str, arguments: dict[str, Any], *, timeout_s: float | None = None
    ) -> ToolResult:
        return ToolResult(text="")

    def close(self) -> None:
        pass


class Timer:
    """A handler that stamps every boundary and block start; decides with ``decide``."""

    def __init__(self, decide: Any = None) -> None:
        self.decide = decide
        self.boundary_times: list[float] = []
        self.decided_at: float | None = None
        self.started_at: dict[str, float] = {}

    def on_block_start(self, block_id: str, code: str, replaces: str | None) -> None:
        self.started_at[block_id] = time.perf_counter()

    def on_boundary(self, boundary: Boundary) -> Decision:
        self.boundary_times.append(time.perf_counter())
        decision: Decision = self.decide(boundary) if self.decide else Keep()
        self.decided_at = time.perf_counter()
        return decision

    def on_call(self, call: PrimitiveCall) -> None:
        pass

    def on_block_end(self, result: BlockResult) -> None:
        pass


def gaps_ms(stamps: list[float]) -> list[float]:
    return [(b - a) * 1000 for a, b in itertools.pairwise(stamps)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per timed loop")
    parser.add_argument(
        "--spin-us",
        type=float,
        default=CONTROLLER_SPIN_S * 1e6,
        help="microseconds the controller polls the channel before sleeping",
    )
    parser.add_argument(
        "--worker-spin-us",
        type=float,
        default=WORKER_SPIN_S * 1e6,
        help="microseconds the worker polls the channel before sleeping",
    )
    args = parser.parse_args()
    n = args.calls
    spin = {"spin_s": args.spin_us / 1e6, "worker_spin_s": args.worker_spin_us / 1e6}

    noop = NoopServer()
    starts = []
    for _ in range(7):
        s = WorkerSession(noop, **spin)
        t0 = time.perf_counter()
        s.start()
        starts.append(time.perf_counter() - t0)
        s.close()
    worker_start_s = statistics.median(starts)
    print(f"worker start: median {worker_start_s * 1000:.1f} ms over {len(starts)}")

    inproc = []
    for _ in range(n):
        t0 = time.perf_counter()
        noop.call("noop", {})
        inproc.append((time.perf_counter() - t0) * 1000)

    with WorkerSession(noop, BIG, **spin) as session:
        isolation = session.isolation
        timer = Timer()
        session.run_reply([("warm", "for _ in range(200):\n    noop()\n")], timer)
        timer = Timer()
        session.run_reply([("keep", f"for _ in range({n}):\n    noop()\n")], timer)
        keep_ms = statistics.median(gaps_ms(timer.boundary_times))
        print(f"keep round trip: median {keep_ms:.3f} ms over {n} boundaries ({isolation})")

        replace_ms = []
        for i in range(21):
            timer = Timer(
                lambda b: ReplaceWorkflow(code="pass") if b.block_call_index == 0 else Keep()
            )
            block = (
                "for _ in range(3):\n"
                "    try:\n"
                "        noop()\n"
                "    except BaseException:\n"
                "        pass\n"
            )
            session.run_reply([(f"r{i}", block)], timer)
            assert timer.decided_at is not None
            replace_ms.append((timer.started_at[f"r{i}.r1"] - timer.decided_at) * 1000)
        replace_roundtrip_ms = statistics.median(replace_ms)
        print(f"replacement effective: median {replace_roundtrip_ms:.2f} ms")

    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        (ws / "a.txt").write_text("hello\n")
        server = start_filesystem_server(ws, timeout_s=30)
        try:
            rounds, batch = max(8, n // 100), 25
            for _ in range(50):
                server.call("read_text_file", {"path": "a.txt"})
            direct: list[float] = []
            spaced: list[float] = []
            via: list[float] = []
            pause = keep_ms / 1000
            code = f"for _ in range({batch + 1}):\n    read_text_file('a.txt')\n"
            with WorkerSession(server, BIG, **spin) as session:
                session.run_reply([("warm", code)], Timer())
                # Small interleaved batches: the shared machine's load drifts, and this way the
                # drift hits both measurements alike.
                for _ in range(rounds):
                    for _ in range(batch):
                        t0 = time.perf_counter()
                        server.call("read_text_file", {"path": "a.txt"})
                        direct.append((time.perf_counter() - t0) * 1000)
                    for _ in range(batch):
                        t0 = time.perf_counter()
                        server.call("read_text_file", {"path": "a.txt"})
                        spaced.append((time.perf_counter() - t0) * 1000)
                        select.select([], [], [], pause)  # idle as long as a worker round trip
                    timer = Timer()
                    session.run_reply([("mcp", code)], timer)
                    via += gaps_ms(timer.boundary_times)
        finally:
            server.close()
    mcp_direct = statistics.median(direct)
    mcp_spaced = statistics.median(spaced)
    mcp_via = statistics.median(via)
    print(
        f"read_text_file: direct {mcp_direct:.3f} ms, direct with idle gaps {mcp_spaced:.3f} ms,"
        f" via worker {mcp_via:.3f} ms"
    )

    print(
        json.dumps(
            {
                "keep_roundtrip_median_ms": round(keep_ms, 4),
                "inprocess_call_median_ms": round(statistics.median(inproc), 5),
                "mcp_via_worker_median_ms": round(mcp_via, 4),
                "mcp_direct_median_ms": round(mcp_direct, 4),
                "mcp_ratio": round(mcp_via / mcp_direct, 3),
                "mcp_direct_spaced_median_ms": round(mcp_spaced, 4),
                "mcp_ratio_vs_spaced": round(mcp_via / mcp_spaced, 3),
                "worker_start_s": round(worker_start_s, 4),
                "replace_roundtrip_ms": round(replace_roundtrip_ms, 3),
                "isolation": isolation,
                "spin_us": [args.spin_us, args.worker_spin_us],
            }
        )
    )


if __name__ == "__main__":
    main()
