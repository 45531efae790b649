"""What reviewing inside another agent's code costs: the executor's call against a direct one.

Prints a few human-readable lines, then as its LAST line one JSON object:

- ``overhead_per_call_ms``: the median time of one ``read_text_file`` of the real npm filesystem
  server made by agent code in a Keep executor (``controlscope.Executor``, scope ``keep``:
  every call still passes its boundary, is logged and checked) minus the median time of the
  same call made directly through the MCP client, over ``--calls`` calls each (default 200),
  timed in alternating rounds so that both sides see the same machine load (target <= 1 ms);
- ``executor_call_median_ms`` / ``direct_call_median_ms``: the two medians;
- ``worker_call_median_ms`` / ``executor_own_ms``: the same call made by the same block in a
  bare :class:`~controlscope.worker.WorkerSession` with a Keep handler (the worker's round
  trip, no run around it), and the executor's median less it: what the run adds (its log,
  schedule and controller), apart from the worker's process hops;
- ``executor_start_s``: the time to start an executor with that server (worker included);
- ``load_average``: the machine's one-minute load average when the calls were timed (the
  worker's round trip is two wake-ups of other processes per call: on a machine with more
  runnable processes than cores each costs a time slice, so read the overhead with it);
- ``adapters`` / ``adapters_passed``: the framework adapters and how many pass their
  end-to-end scenario (0: none are built yet);
- ``serve_overhead_ms``: one ``execute_python`` of 10 calls through ``controlscope serve`` (a
  Keep session, the mcp SDK's client over stdio) minus 10 direct calls, medians over
  ``--serve-repeats`` (default 10) of each (target <= 50 ms).

Usage: ``python benchmarks/executor.py [--calls N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

import controlscope as cs
from controlscope.core import BlockResult, Boundary, Keep, Operation, PrimitiveCall
from controlscope.envs import McpToolServer
from controlscope.envs.filesystem.server import find_server_script
from controlscope.worker import Limits, WorkerSession

_BLOCK = """
import time as _t
_times = []
for _ in range({n}):
    _s = _t.perf_counter()
    read_text_file(path={path!r})
    _times.append((_t.perf_counter() - _s) * 1000)
print(_times)
"""


def _executor_round(ex: cs.Executor, path: str, n: int) -> list[float]:
    """``n`` calls made by agent code in the executor, each timed inside the block."""
    run = ex.execute(_BLOCK.format(n=n, path=path))
    if not run.ok:
        raise RuntimeError(f"the timing block failed: {run.error}")
    times: list[float] = json.loads(run.output)
    return times


class _KeepAll:
    """A boundary handler that keeps every call (the worker's own cost alone)."""

    def on_block_start(self, block_id: str, code: str, replaces: str | None) -> None:
        """Nothing."""

    def on_boundary(self, boundary: Boundary) -> Operation:
        """Keep."""
        return Keep()

    def on_call(self, call: PrimitiveCall) -> None:
        """Nothing."""

    def on_block_end(self, result: BlockResult) -> None:
        """Nothing."""


def _worker_round(session: WorkerSession, path: str, n: int, index: int) -> list[float]:
    """``n`` calls made by the same block in a bare worker session."""
    (result,) = session.run_reply([(f"b{index}", _BLOCK.format(n=n, path=path))], _KeepAll())
    times: list[float] = json.loads(result.output)
    return times


def _direct_round(server: McpToolServer, path: str, n: int) -> list[float]:
    """``n`` calls of the same tool made directly through the MCP client."""
    times = []
    for _ in range(n):
        start = time.perf_counter()
        server.call("read_text_file", {"path": path})
        times.append((time.perf_counter() - start) * 1000)
    return times


def _serve_ms(
    config: Path, out: Path, path: str, repeats: int, direct: McpToolServer
) -> tuple[list[float], list[float]]:
    """Milliseconds of one ``execute_python`` of 10 calls through ``controlscope serve``, and
    of 10 direct calls made right after each (the same load on both sides)."""
    params = StdioServerParameters(
        command=sys.executable,
        args=[
            *("-m", "controlscope.cli", "serve", "--servers", str(config)),
            *("--scope", "keep", "--max-calls", "10000", "--out", str(out)),
        ],
        env={**os.environ, "PYTHONPATH": str(Path(cs.__file__).parents[1])},
    )
    code = f"for _ in range(10):\n    read_text_file(path={path!r})\nprint('ok')"

    async def session() -> tuple[list[float], list[float]]:
        async with Client(params, mode="legacy", read_timeout_seconds=120) as client:
            await client.call_tool("execute_python", {"code": code})  # warm up
            served, ten = [], []
            for _ in range(repeats):
                start = time.perf_counter()
                await client.call_tool("execute_python", {"code": code})
                served.append((time.perf_counter() - start) * 1000)
                ten.append(sum(_direct_round(direct, path, 10)))
            return served, ten

    return anyio.run(session)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per side")
    parser.add_argument("--rounds", type=int, default=20, help="alternating rounds")
    parser.add_argument("--serve-repeats", type=int, default=10, help="execute_python calls")
    args = parser.parse_args()
    per_round = max(1, args.calls // args.rounds)
    with tempfile.TemporaryDirectory(prefix="cs-bench-executor-") as tmp:
        root = Path(tmp) / "files"
        root.mkdir()
        (root / "a.txt").write_text("alpha\n" * 20)
        path = str(root / "a.txt")
        command = ["node", str(find_server_script()), str(root)]
        settings = cs.RunSettings(scope="keep", max_calls=10 * args.calls + 10)
        started = time.perf_counter()
        ex = cs.Executor(servers={"fs": command}, settings=settings, out=Path(tmp) / "run")
        start_s = time.perf_counter() - started
        direct = McpToolServer.stdio(command[0], command[1:], timeout_s=60)
        bare_server = McpToolServer.stdio(command[0], command[1:], timeout_s=60)
        bare = WorkerSession(bare_server, Limits(primitive_calls=10**9))
        via: list[float] = []
        plain: list[float] = []
        worker: list[float] = []
        try:
            _executor_round(ex, path, 5)  # warm every side up
            _direct_round(direct, path, 5)
            _worker_round(bare, path, 5, 0)
            for index in range(args.rounds):
                via += _executor_round(ex, path, per_round)
                plain += _direct_round(direct, path, per_round)
                worker += _worker_round(bare, path, per_round, index + 1)
            bare.close()
            bare_server.close()
            ex.close()
            config = Path(tmp) / "mcp.json"
            config.write_text(
                json.dumps({"mcpServers": {"fs": {"command": command[0], "args": command[1:]}}})
            )
            served, ten = _serve_ms(config, Path(tmp) / "served", path, args.serve_repeats, direct)
        finally:
            ex.close()
            direct.close()
            bare.close()
            bare_server.close()
    via_ms, plain_ms = statistics.median(via), statistics.median(plain)
    worker_ms = statistics.median(worker)
    print(f"executor start: {start_s:.2f} s ({len(via)} calls per side)")
    print(f"read_text_file: via a Keep executor {via_ms:.3f} ms, direct {plain_ms:.3f} ms")
    print(f"overhead per call: {via_ms - plain_ms:.3f} ms (target <= 1 ms)")
    print(f"a bare worker's call {worker_ms:.3f} ms: the run adds {via_ms - worker_ms:.3f} ms")
    serve_ms = statistics.median(served) - statistics.median(ten)
    print(
        f"execute_python of 10 calls via serve {statistics.median(served):.1f} ms, 10 direct "
        f"calls {statistics.median(ten):.1f} ms: overhead {serve_ms:.1f} ms (target <= 50 ms)"
    )
    print(
        json.dumps(
            {
                "overhead_per_call_ms": round(via_ms - plain_ms, 4),
                "executor_call_median_ms": round(via_ms, 4),
                "direct_call_median_ms": round(plain_ms, 4),
                "worker_call_median_ms": round(worker_ms, 4),
                "executor_own_ms": round(via_ms - worker_ms, 4),
                "executor_start_s": round(start_s, 3),
                "load_average": round(os.getloadavg()[0], 2),
                "calls": len(via),
                "adapters": 0,
                "adapters_passed": 0,
                "serve_overhead_ms": round(serve_ms, 2),
            }
        )
    )


if __name__ == "__main__":
    main()
