"""Benchmark of the exact-request cache and the OpenAI-compatible client's own overhead.

Measures, on this machine:

- ``hit_us_median`` / ``hit_us_p95``: a cache hit through :class:`CachedModel` (key hashing, SQLite
  read, response parsing) for a planner-sized request (about 20 messages, 12 kB).
- ``miss_put_us_median``: a miss that stores the answer of an instant inner model.
- ``multiprocess_puts_per_s``: stores per second by 4 processes writing one cache file at once.
- ``client_overhead_ms_median``: :class:`OpenAIModel` round trip minus a raw ``urllib`` POST of the
  same body to the same loopback endpoint (which answers at once): what the SDK and the mapping add
  per request (most of it is the SDK's parameter transformation, which grows with message size).

Usage: ``python benchmarks/request_cache.py [--n 300]``. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import tempfile
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from controlscope.core import Message, ModelRequest, ModelResponse, Usage
from controlscope.models import CachedModel, OpenAIModel, RequestCache, request_key


class Instant:
    """An inner model that answers at once."""

    model_id = "instant"

    def complete(self, request: ModelRequest) -> ModelResponse:
        return ModelResponse(text="x" * 400, usage=Usage(input_tokens=3000, output_tokens=100))


def planner_request(i: int) -> ModelRequest:
    messages = [Message(role="system", content="You write Python programs. " * 20)]
    for turn in range(19):
        text = f"turn {turn} of request {i}: " + "o" * 500
        messages.append(
            Message(role="user", content=text)
            if turn % 2 == 0
            else Message(role="assistant", content=text)
        )
    return ModelRequest(messages=tuple(messages), purpose="planner")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _writer(path: str, worker: int, n: int, out: Any) -> None:
    cache = RequestCache(path)
    start = time.perf_counter()
    for i in range(n):
        request = planner_request(worker * 100_000 + i)
        cache.put(request_key("instant", request), "instant", request, Instant().complete(request))
    out.put(time.perf_counter() - start)


def bench_cache(n: int, root: Path) -> dict[str, float]:
    cache = RequestCache(root / "bench.sqlite")
    model = CachedModel(Instant(), cache)
    miss_us, hit_us = [], []
    for i in range(n):
        request = planner_request(i)
        t0 = time.perf_counter()
        model.complete(request)
        t1 = time.perf_counter()
        assert model.complete(request).cached
        t2 = time.perf_counter()
        miss_us.append((t1 - t0) * 1e6)
        hit_us.append((t2 - t1) * 1e6)

    path = str(root / "multi.sqlite")
    RequestCache(path).close()
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    procs = [context.Process(target=_writer, args=(path, w, n, queue)) for w in range(4)]
    for proc in procs:
        proc.start()
    seconds = [queue.get(timeout=300) for _ in procs]
    for proc in procs:
        proc.join()
    return {
        "hit_us_median": round(statistics.median(hit_us), 1),
        "hit_us_p95": round(_percentile(hit_us, 0.95), 1),
        "miss_put_us_median": round(statistics.median(miss_us), 1),
        "multiprocess_puts_per_s": round(4 * n / max(seconds), 1),
    }


def bench_client(n: int) -> dict[str, float]:
    body = json.dumps(
        {
            "id": "c",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "ok"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # as uvicorn does; else delayed ACKs add ~40 ms

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", 0)))
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    ).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/v1"
    model = OpenAIModel("m", base_url=base, api_key="k", max_retries=0)
    request = planner_request(0)
    payload = json.dumps({"model": "m", "messages": [m.model_dump() for m in request.messages]})
    model.complete(request)  # warm up (imports, connection)
    raw_ms, client_ms = [], []
    for _ in range(n):
        t0 = time.perf_counter()
        urllib.request.urlopen(
            urllib.request.Request(
                base + "/chat/completions",
                data=payload.encode(),
                headers={"content-type": "application/json"},
            ),
            timeout=10,
        ).read()
        t1 = time.perf_counter()
        model.complete(request)
        t2 = time.perf_counter()
        raw_ms.append((t1 - t0) * 1e3)
        client_ms.append((t2 - t1) * 1e3)
    server.shutdown()
    server.server_close()
    return {
        "raw_post_ms_median": round(statistics.median(raw_ms), 3),
        "client_ms_median": round(statistics.median(client_ms), 3),
        "client_overhead_ms_median": round(
            statistics.median(client_ms) - statistics.median(raw_ms), 3
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=300, help="requests per measurement")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result: dict[str, Any] = {"n": args.n}
        result.update(bench_cache(args.n, Path(tmp)))
        result.update(bench_client(min(args.n, 200)))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
