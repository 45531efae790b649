"""What tracing a run with OpenTelemetry costs: a scripted run with tracing on against off.

The run: a filesystem task whose scripted planner makes ``calls`` primitive calls in one block
(``list_directory`` in a loop), each reviewed (``continuous``) by a scripted reviewer that keeps,
on the real parts (the npm filesystem server, the isolated worker). Tracing on is the real path:
``OTEL_EXPORTER_OTLP_ENDPOINT`` set, spans batched and exported over OTLP/HTTP to a receiver on
loopback (its own process, which counts the spans it got). Runs alternate off and on, after one
warm-up of each.

Two measures of the overhead, in percent of the median wall time of a run with tracing off:

- ``otel_overhead_pct`` (the headline): the CPU seconds tracing adds to the run's process
  (``time.process_time``, every thread: building spans, the batch exporter's encoding and
  sending; medians on minus off). On an idle machine this is what it adds to the run's wall
  time; unlike wall time it does not swing with what else the machine runs;
- ``wall_overhead_pct``: the difference of the median wall times (on a shared machine, mostly
  the machine's load).

Target: at most 5 %.

Usage: ``python benchmarks/_otel_overhead.py [--calls N] [--pairs N]``; prints a line per run,
then as its LAST line one JSON object: ``otel_overhead_pct``, ``wall_overhead_pct``,
``off_s``, ``on_s`` (median wall seconds), ``off_cpu_s``, ``on_cpu_s`` (median CPU seconds of
this process), ``spans_per_run``, ``calls``, ``pairs``.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

import controlscope as cs

TASK = "file_context/file_splitting"
KEEP = json.dumps({"reason": "fine", "operation": "keep"})

_RECEIVER = """
import os, sys, threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

spans = [0]

class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):
        request = ExportTraceServiceRequest()
        request.ParseFromString(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        spans[0] += sum(len(s.spans) for r in request.resource_spans for s in r.scope_spans)
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_GET(self):
        body = str(spans[0]).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

def orphaned():
    sys.stdin.read()  # end of file: the benchmark's process is gone
    os._exit(0)

threading.Thread(target=orphaned, daemon=True).start()
server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


class Receiver:
    """An OTLP/HTTP traces endpoint on loopback in a process of its own; counts spans. It
    ends when its standard input closes (this process ended, however it ended)."""

    def __init__(self, start_s: float = 30.0) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _RECEIVER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        ready, _, _ = select.select([self.process.stdout], [], [], start_s)
        line = self.process.stdout.readline() if ready else ""
        if not line.strip().isdigit():
            self.close()
            raise RuntimeError(f"the OTLP receiver did not start within {start_s} s")
        self.endpoint = f"http://127.0.0.1:{line.strip()}"

    def spans(self) -> int:
        """Spans received so far."""
        with urllib.request.urlopen(self.endpoint, timeout=10) as answer:
            return int(answer.read())

    def close(self) -> None:
        """End the receiver's process (bounded waits)."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)


def _spec(root: Path, name: str, calls: int) -> cs.RunSpec:
    code = f'for i in range({calls}):\n    list_directory(path="/workspace")\n'
    planner, reviewer = root / f"{name}-planner.json", root / f"{name}-reviewer.json"
    planner.write_text(json.dumps([f"```python\n{code}```", "Done."]))
    reviewer.write_text(json.dumps([KEEP] * (calls + 1)))
    return cs.RunSpec(
        task=TASK,
        model=f"scripted:{planner}",
        reviewer_model=f"scripted:{reviewer}",
        schedule="continuous",
        max_calls=calls + 10,
        out=root / name,
    )


def _timed_run(root: Path, name: str, calls: int, endpoint: str | None) -> tuple[float, float]:
    """Wall and CPU seconds (this process) of one run, traced to ``endpoint`` (None: off)."""
    if endpoint is None:
        os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    else:
        os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = endpoint
    spec = _spec(root, name, calls)
    t0, cpu0 = time.perf_counter(), time.process_time()
    result = cs.run_task(spec)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    if result.summary.primitive_calls != calls:
        raise RuntimeError(f"{name}: {result.summary.primitive_calls} calls, not {calls}")
    return wall, cpu


def measure(calls: int = 100, pairs: int = 5, verbose: bool = False) -> dict[str, Any]:
    """Median wall seconds of ``pairs`` runs off and on, alternating, after one warm-up each.

    Raises:
        RuntimeError: the receiver got no spans from the traced runs (nothing was measured).
    """
    saved = os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
    os.environ.setdefault("NO_PROXY", "127.0.0.1,localhost")
    receiver = Receiver()
    off: list[tuple[float, float]] = []
    on: list[tuple[float, float]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            _timed_run(root, "warm-off", calls, None)
            _timed_run(root, "warm-on", calls, receiver.endpoint)
            warm_spans = receiver.spans()
            for i in range(pairs):
                off.append(_timed_run(root, f"off{i}", calls, None))
                on.append(_timed_run(root, f"on{i}", calls, receiver.endpoint))
                if verbose:
                    (w0, c0), (w1, c1) = off[-1], on[-1]
                    print(f"pair {i}: off {w0:.3f} s (cpu {c0:.3f}), on {w1:.3f} s (cpu {c1:.3f})")
            spans = receiver.spans()
    finally:
        receiver.close()
        os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
        if saved is not None:
            os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = saved
    if warm_spans == 0 or spans == warm_spans:
        raise RuntimeError("the traced runs exported no spans: nothing was measured")
    off_s, on_s = (statistics.median(w for w, _ in runs) for runs in (off, on))
    off_cpu, on_cpu = (statistics.median(c for _, c in runs) for runs in (off, on))
    return {
        "otel_overhead_pct": round((on_cpu - off_cpu) / off_s * 100, 2),
        "wall_overhead_pct": round((on_s - off_s) / off_s * 100, 2),
        "off_s": round(off_s, 3),
        "on_s": round(on_s, 3),
        "off_cpu_s": round(off_cpu, 3),
        "on_cpu_s": round(on_cpu, 3),
        "spans_per_run": (spans - warm_spans) // pairs,
        "calls": calls,
        "pairs": pairs,
    }


def otel_overhead_pct(calls: int = 100, pairs: int = 5) -> float:
    """Tracing's cost for a ``calls``-call scripted run: the CPU seconds it adds to the run's
    process (median on minus median off) in percent of the median wall time of a run with
    tracing off (target at most 5; see :func:`measure` for the wall-time difference too)."""
    return float(measure(calls, pairs)["otel_overhead_pct"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=100)
    parser.add_argument("--pairs", type=int, default=5)
    args = parser.parse_args()
    print(json.dumps(measure(args.calls, args.pairs, verbose=True)))


if __name__ == "__main__":
    main()
