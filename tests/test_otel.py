"""OpenTelemetry traces of runs (GenAI semantic conventions), built from the events as written.

Real parts (the npm filesystem server, the isolated worker) with scripted models: the span tree
of a run captured with the SDK's in-memory exporter and checked against its log; the same spans
from the recorded log; spans from a real ``controlscope run``, a panel's pool processes and
forked branches received by an OTLP/HTTP endpoint on loopback; an executor's session; every
event type of the log's schema mapped; tracing off imports no SDK; a failing tracer or a
collector that never answers costs a run nothing but a warning and a bounded wait.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
import threading
import typing
from collections.abc import Iterator, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

import _session_support
import controlscope as cs
from controlscope.core import (
    BlockStartEvent,
    BoundaryEvent,
    Event,
    FinalVerdictEvent,
    ModelCallEvent,
    PlannerTurnEvent,
    PrimitiveCallEvent,
    ProposalEvent,
    RealizedOperationEvent,
    RunEndEvent,
    RunStartEvent,
    ValidationEvent,
)
from controlscope.record import _tracing, iter_events, trace_log, trace_to
from controlscope.record._spans import EVENT_SPANS, NOT_TRACED
from test_api import SOLVE, TASK
from test_executor import PatchSecond, _fs
from test_fork_branch import branches
from test_panel import write_config
from test_replay import fenced, record

KEEP = {"text": json.dumps({"reason": "fine", "operation": "keep"}), "usage": {"input_tokens": 40}}
PATCH = json.dumps(
    {"reason": "shorter", "operation": "patch_arguments", "arguments": {"content": "patched\n"}}
)
files = _session_support.files  # a fixture, used by name
_OTEL_VARIABLES = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def event_types() -> set[str]:
    """Every ``type`` of the log's schema (the ``Event`` union's members)."""
    union = typing.get_args(Event)[0]
    return {typing.get_args(m.model_fields["type"].annotation)[0] for m in typing.get_args(union)}


def script(tmp_path: Path, name: str, answers: Sequence[object]) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(list(answers)))
    return f"scripted:{path}"


def planner(tmp_path: Path) -> str:
    solve = {
        "text": f"```python\n{SOLVE}\n```",
        "usage": {"input_tokens": 300, "output_tokens": 90},
    }
    return script(tmp_path, "planner", [solve, {"text": "Done.", "usage": {"output_tokens": 2}}])


def reviewer(tmp_path: Path) -> str:
    """A keep (call 1, the first reviewed), a patch of the first write_file's content, an
    answer that is no review (a malformed fallback), then keeps."""
    return script(tmp_path, "reviewer", [KEEP, PATCH, "no idea", *[KEEP] * 8])


@pytest.fixture
def exporter() -> Iterator[InMemorySpanExporter]:
    """Spans of the runs started in this test, kept in memory."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    trace_to(provider)
    try:
        yield memory
    finally:
        trace_to(None)


def test_every_event_type_of_the_log_maps_to_spans_or_says_why_not() -> None:
    """A new event type in the schema fails here until it is traced or listed with a reason."""
    traced, left_out = set(EVENT_SPANS), set(NOT_TRACED)
    assert not traced & left_out
    assert traced | left_out == event_types(), "map the new event type in record/_spans.py"
    assert all(reason.strip() for reason in NOT_TRACED.values())


def _tree(spans: Sequence[ReadableSpan]) -> dict[int, ReadableSpan]:
    return {span.context.span_id: span for span in spans}


def _parent(span: ReadableSpan, by_id: dict[int, ReadableSpan]) -> ReadableSpan | None:
    return None if span.parent is None else by_id.get(span.parent.span_id)


def _ns(t: float) -> int:
    return int(t * 1e9)


def test_a_scripted_run_is_a_span_tree_that_matches_its_log(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    spec = cs.RunSpec(
        task=TASK, model=planner(tmp_path), reviewer_model=reviewer(tmp_path), out=tmp_path / "r"
    )
    result = cs.run_task(spec)
    assert result.end_reason == "final_answer"
    events = cs.read_events(result.run_dir)
    spans = exporter.get_finished_spans()
    by_id = _tree(spans)
    assert len({span.context.trace_id for span in spans}) == 1

    (run,) = [s for s in spans if s.parent is None]
    start, end = events[0], events[-1]
    verdict = next(e for e in events if isinstance(e, FinalVerdictEvent))
    assert isinstance(start, RunStartEvent) and isinstance(end, RunEndEvent)
    assert run.name == "invoke_agent controlscope"
    assert (run.start_time, run.end_time) == (_ns(start.t), _ns(end.t))
    assert run.attributes is not None
    assert run.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert run.attributes["controlscope.task.id"] == start.task.id == TASK
    assert run.attributes["controlscope.scope"] == "full"
    assert run.attributes["controlscope.end_reason"] == end.end_reason
    assert run.attributes["controlscope.success"] is verdict.success

    turns = [s for s in spans if s.name == "planning_turn"]
    turn_events = [e for e in events if isinstance(e, PlannerTurnEvent)]
    assert [s.start_time for s in turns] == [_ns(e.t) for e in turn_events]
    assert all(_parent(s, by_id) is run for s in turns)
    blocks = [e for s in turns for e in s.events if e.name == "block_start"]
    assert len(blocks) == sum(isinstance(e, BlockStartEvent) for e in events)

    _check_tools(spans, events, by_id)
    _check_reviews(spans, events, by_id)
    _check_model_calls(spans, events, by_id)


def _check_tools(
    spans: Sequence[ReadableSpan], events: list[Event], by_id: dict[int, ReadableSpan]
) -> None:
    """One execute_tool span per primitive call, under its turn, timed by the call."""
    tools = [s for s in spans if s.name.startswith("execute_tool ")]
    calls = [e.call for e in events if isinstance(e, PrimitiveCallEvent)]
    assert len(tools) == len(calls) == 7
    reviewed = {e.boundary.call_index: e.review for e in events if isinstance(e, BoundaryEvent)}
    for span, call in zip(tools, calls, strict=True):
        assert span.attributes is not None
        assert span.attributes["gen_ai.operation.name"] == "execute_tool"
        assert span.attributes["gen_ai.tool.name"] == call.tool
        assert span.attributes["controlscope.operation"] == call.operation
        assert span.start_time == _ns(call.started_at)
        assert span.attributes["controlscope.reviewed"] is reviewed[call.call_index]
        parent = _parent(span, by_id)
        assert parent is not None and parent.name == "planning_turn"
    patched = [s.attributes for s in tools if s.attributes and s.attributes["controlscope.patched"]]
    assert [(p["gen_ai.tool.name"], p["controlscope.call_index"]) for p in patched] == [
        ("write_file", 2)
    ]


def _check_reviews(
    spans: Sequence[ReadableSpan], events: list[Event], by_id: dict[int, ReadableSpan]
) -> None:
    """One review span per realized operation: granted scope, operation, fallback."""
    reviews = [s for s in spans if s.name == "review"]
    realized = [e for e in events if isinstance(e, RealizedOperationEvent)]
    assert len(reviews) == len(realized) == 6
    proposals = [e for e in events if isinstance(e, ProposalEvent)]
    validations = [e for e in events if isinstance(e, ValidationEvent)]
    for span, event in zip(reviews, realized, strict=True):
        assert span.attributes is not None
        assert span.attributes["controlscope.call_index"] == event.call_index
        assert span.attributes["controlscope.review.granted_scope"] == "full"
        assert span.attributes["controlscope.review.operation"] == event.operation.kind
        assert span.attributes.get("controlscope.review.fallback") == event.fallback
        assert span.end_time == _ns(event.t)
        proposal = next(e for e in proposals if e.call_index == event.call_index)
        validation = next(e for e in validations if e.call_index == event.call_index)
        proposed = "none" if proposal.operation is None else proposal.operation.kind
        assert span.attributes["controlscope.review.proposed"] == proposed
        assert span.attributes["controlscope.review.accepted"] is validation.validation.accepted
        parent = _parent(span, by_id)
        assert parent is not None and parent.name == "planning_turn"
    kinds = [(e.operation.kind, e.fallback) for e in realized[:3]]
    assert kinds == [("keep", None), ("patch_arguments", None), ("keep", "malformed")]


def _check_model_calls(
    spans: Sequence[ReadableSpan], events: list[Event], by_id: dict[int, ReadableSpan]
) -> None:
    """One chat span per model call: model, tokens and role; a reviewer's under its review."""
    chats = [s for s in spans if s.name.startswith("chat ")]
    calls = [e for e in events if isinstance(e, ModelCallEvent)]
    assert len(chats) == len(calls) == 8
    models = events[0].models  # type: ignore[union-attr]
    for span, call in zip(chats, calls, strict=True):
        assert span.attributes is not None and call.response is not None
        assert span.attributes["gen_ai.operation.name"] == "chat"
        assert span.attributes["gen_ai.request.model"] == models[call.role]
        assert span.attributes["controlscope.role"] == call.role
        usage = call.response.usage
        assert span.attributes["gen_ai.usage.input_tokens"] == usage.input_tokens
        assert span.attributes["gen_ai.usage.output_tokens"] == usage.output_tokens
        assert span.end_time == _ns(call.t)
        parent = _parent(span, by_id)
        assert parent is not None and parent.attributes is not None
        if call.role == "reviewer":
            assert parent.name == "review"
            assert parent.attributes["controlscope.call_index"] == call.call_index
        else:
            assert parent.name == "planning_turn"
            assert parent.attributes["controlscope.turn"] == call.turn
    tokens = [s.attributes["gen_ai.usage.input_tokens"] for s in chats if s.attributes]
    assert tokens[0] == 300 and 40 in tokens


def _shape(spans: Sequence[ReadableSpan]) -> list[tuple[object, ...]]:
    by_id = _tree(spans)
    rows = []
    for span in spans:
        parent = _parent(span, by_id)
        events = [(e.name, e.timestamp, dict(e.attributes or {})) for e in span.events]
        rows.append(
            (
                span.name,
                None if parent is None else parent.name,
                span.start_time,
                span.end_time,
                dict(span.attributes or {}),
                events,
                span.status.status_code,
            )
        )
    return rows


def test_a_recorded_log_gives_the_spans_its_run_gave(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    spec = cs.RunSpec(
        task=TASK, model=planner(tmp_path), reviewer_model=reviewer(tmp_path), out=tmp_path / "r"
    )
    result = cs.run_task(spec)
    live = _shape(exporter.get_finished_spans())
    exporter.clear()
    trace_to(None)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    trace_log(iter_events(result.run_dir), provider, run_dir=result.run_dir)
    assert _shape(memory.get_finished_spans()) == live
    assert exporter.get_finished_spans() == ()  # only the provider given


class _Receiver(BaseHTTPRequestHandler):
    """An OTLP/HTTP traces endpoint: decodes each ``ExportTraceServiceRequest``."""

    received: list[ExportTraceServiceRequest]

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.headers.get("Content-Encoding") == "gzip":
            body = gzip.decompress(body)
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        if self.path == "/v1/traces":
            type(self).received.append(request)
        self.send_response(200 if self.path == "/v1/traces" else 404)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def receiver() -> Iterator[tuple[str, list[ExportTraceServiceRequest]]]:
    """An OTLP/HTTP endpoint on loopback: its base address and the requests it received."""
    handler = type("Receiver", (_Receiver,), {"received": []})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler.received
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def _attribute(value: object) -> object:
    kind = value.WhichOneof("value")  # type: ignore[attr-defined]
    return getattr(value, kind) if kind else None


def test_a_cli_run_exports_its_spans_to_an_otlp_http_endpoint(
    tmp_path: Path, receiver: tuple[str, list[ExportTraceServiceRequest]]
) -> None:
    endpoint, received = receiver
    out = tmp_path / "cli"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "NO_PROXY": "127.0.0.1,localhost"}
    cli = subprocess.run(
        [
            *(sys.executable, "-m", "controlscope.cli", "run", "--task", TASK, "--quiet"),
            *("--model", planner(tmp_path), "--reviewer-model", reviewer(tmp_path)),
            *("--out", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert cli.returncode == 0, cli.stderr
    assert "Traceback" not in cli.stderr and "Failed to export" not in cli.stderr
    spans = [
        (resource.resource, span)
        for request in received
        for resource in request.resource_spans
        for scope in resource.scope_spans
        for span in scope.spans
    ]
    events = cs.read_events(out)
    names = [span.name for _, span in spans]
    assert names.count("invoke_agent controlscope") == 1
    assert sum(n.startswith("chat ") for n in names) == 8
    assert sum(n.startswith("execute_tool ") for n in names) == 7
    assert names.count("review") == 6
    assert len({span.trace_id for _, span in spans}) == 1
    service = {a.key: _attribute(a.value) for a in spans[0][0].attributes}["service.name"]
    assert service == "controlscope"
    run = next(span for _, span in spans if span.name == "invoke_agent controlscope")
    attributes = {a.key: _attribute(a.value) for a in run.attributes}
    assert attributes["controlscope.task.id"] == TASK
    assert attributes["controlscope.run_dir"] == str(out)
    assert run.start_time_unix_nano == _ns(events[0].t)
    assert run.end_time_unix_nano == _ns(events[-1].t)


_MODULES = """
import json, sys
modules = lambda: sorted(m for m in sys.modules if m.startswith(("opentelemetry.sdk",
    "opentelemetry.exporter", "controlscope.record._spans")))
import controlscope as cs
result = cs.run_task(cs.RunSpec(task=sys.argv[1], model=sys.argv[2], out=sys.argv[3],
                                schedule="never"))
off = modules()
import os
from controlscope.record import TrajectoryWriter
os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:9"
TrajectoryWriter(sys.argv[3] + "-on").close()
print(json.dumps({"off": off, "on": modules(), "end": result.end_reason}))
"""


def test_tracing_off_imports_nothing_of_the_sdk(tmp_path: Path) -> None:
    """Off (no endpoint), a whole run imports neither the SDK, the exporter nor the span
    builder; the same process with an endpoint set does (the check can see them)."""
    env = {k: v for k, v in os.environ.items() if k not in _OTEL_VARIABLES}
    model = script(tmp_path, "p", [f"```python\n{SOLVE}\n```", "Done."])
    out = str(tmp_path / "off")
    child = subprocess.run(
        [sys.executable, "-c", _MODULES, TASK, model, out],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert child.returncode == 0, child.stderr
    seen = json.loads(child.stdout.strip().splitlines()[-1])
    assert seen["end"] == "final_answer"
    assert seen["off"] == []
    assert "controlscope.record._spans" in seen["on"]
    assert "opentelemetry.exporter.otlp.proto.http.trace_exporter" in seen["on"]


_NO_SDK = """
import sys
sys.modules["opentelemetry.sdk"] = None  # the otel extra not installed
import controlscope as cs
result = cs.run_task(cs.RunSpec(task=sys.argv[1], model=sys.argv[2], out=sys.argv[3],
                                schedule="never"))
print(result.end_reason)
"""


def test_an_endpoint_without_the_extra_warns_once_and_runs_untraced(tmp_path: Path) -> None:
    env = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9")
    model = script(tmp_path, "p", [f"```python\n{SOLVE}\n```", "Done."])
    child = subprocess.run(
        [sys.executable, "-c", _NO_SDK, TASK, model, str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.strip() == "final_answer"
    assert child.stderr.count("pip install 'controlscope[otel]'") == 1, child.stderr
    assert "runs are not traced" in child.stderr


class _BrokenTracer:
    def start_span(self, *args: object, **kwargs: object) -> None:
        raise RuntimeError("the tracer broke")


class _BrokenProvider:
    def get_tracer(self, name: str) -> _BrokenTracer:
        return _BrokenTracer()


def test_a_failing_tracer_stops_tracing_and_never_the_run(tmp_path: Path) -> None:
    trace_to(_BrokenProvider())
    try:
        model = script(tmp_path, "p", [f"```python\n{SOLVE}\n```", "Done."])
        spec = cs.RunSpec(task=TASK, model=model, schedule="never", out=tmp_path / "r")
        with pytest.warns(RuntimeWarning, match="tracing of .* stopped: the tracer broke"):
            result = cs.run_task(spec)
    finally:
        trace_to(None)
    assert result.end_reason == "final_answer" and result.verdict.success
    events = cs.read_events(result.run_dir)
    assert events[-1].type == "run_end" and result.summary.primitive_calls == 7


def test_a_failed_model_call_is_an_error_span(
    tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    """A planner whose script runs out: its failed call is a chat span with error status, and
    the run span carries the end reason and an error status."""
    model = script(tmp_path, "p", [])
    spec = cs.RunSpec(task=TASK, model=model, schedule="never", out=tmp_path / "r")
    result = cs.run_task(spec)
    assert result.end_reason == "planner_provider_error"
    spans = exporter.get_finished_spans()
    (chat,) = [s for s in spans if s.name.startswith("chat ")]
    assert chat.status.status_code is StatusCode.ERROR
    assert chat.attributes is not None and chat.attributes["error.type"] == "other"
    (run,) = [s for s in spans if s.parent is None]
    assert run.status.status_code is StatusCode.ERROR
    assert run.attributes is not None
    assert run.attributes["controlscope.end_reason"] == "planner_provider_error"


def test_the_overhead_benchmark_measures_traced_runs() -> None:
    """``benchmarks/_otel_overhead.py`` exports every span of its traced runs to its loopback
    receiver: per run, the run, two turns, one span per call, a review and its model call per
    reviewed call (all but the first), and the planner's two calls."""
    path = Path(__file__).parents[1] / "benchmarks" / "_otel_overhead.py"
    spec = importlib.util.spec_from_file_location("_otel_overhead", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    before = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    measured = module.measure(calls=5, pairs=1)
    assert os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") == before
    assert measured["spans_per_run"] == 1 + 2 + 5 + 2 * 4 + 2
    assert measured["off_s"] > 0 and measured["on_s"] > 0
    assert isinstance(measured["otel_overhead_pct"], float)


_SILENT_COLLECTOR = """
import json, socket, sys, threading, time
server = socket.create_server(("127.0.0.1", 0))
held = []
def accept():
    while True:
        held.append(server.accept()[0])  # read nothing, answer nothing
threading.Thread(target=accept, daemon=True).start()
import os
os.environ["OTEL_EXPORTER_OTLP_ENDPOINT"] = "http://127.0.0.1:%d" % server.getsockname()[1]
from controlscope.record import _tracing
_tracing.FLUSH_S = 0.5
import controlscope as cs
t0 = time.monotonic()
result = cs.run_task(cs.RunSpec(task=sys.argv[1], model=sys.argv[2], out=sys.argv[3],
                                schedule="never"))
print(json.dumps({"end": result.end_reason, "s": time.monotonic() - t0}), flush=True)
"""


def test_a_collector_that_never_answers_holds_a_run_at_most_the_flush_bound(
    tmp_path: Path,
) -> None:
    """The exporter waits 10 s for an answer by default (and retries); a run's end waits for
    its spans only ``FLUSH_S`` (0.5 s here), then goes on: the run returns well before the
    exporter's own timeout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["NO_PROXY"] = "127.0.0.1,localhost"
    model = script(tmp_path, "p", [f"```python\n{SOLVE}\n```", "Done."])
    child = subprocess.run(
        [sys.executable, "-c", _SILENT_COLLECTOR, TASK, model, str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert child.returncode == 0, child.stderr
    seen = json.loads(child.stdout.strip().splitlines()[0])
    assert seen["end"] == "final_answer"
    assert seen["s"] < 8.0, seen  # not the exporter's 10 s
    assert cs.read_events(tmp_path / "r")[-1].type == "run_end"


def test_forked_branches_are_each_one_trace_and_their_trunk_is_not_traced_twice(
    tmp_path: Path,
    receiver: tuple[str, list[ExportTraceServiceRequest]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each branch's process records its own run (its log and its trace); the trunk's spans,
    copied into each branch's process by the fork, are exported once, by the trunk."""
    endpoint, received = receiver
    source = record(tmp_path, "keep", [fenced(SOLVE), "Done."], [], scope="keep", schedule="never")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1,localhost")
    made = branches(source, tmp_path / "fork", "fork")
    assert made.ok and made.mechanism == "fork"
    assert _tracing._provider().force_flush(10_000)  # the trunk's own spans
    runs: dict[str, list[bytes]] = {}
    for request in received:
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    if span.name == "invoke_agent controlscope":
                        attributes = {a.key: _attribute(a.value) for a in span.attributes}
                        runs.setdefault(str(attributes["controlscope.run_dir"]), []).append(
                            span.trace_id
                        )
    expected = {str(tmp_path / "fork" / "prefix")} | {str(b.run_dir) for b in made.branches}
    assert set(runs) == expected
    assert all(len(traces) == 1 for traces in runs.values()), runs
    assert len({traces[0] for traces in runs.values()}) == len(expected)


def test_a_panels_pool_processes_trace_every_run_once(
    tmp_path: Path, receiver: tuple[str, list[ExportTraceServiceRequest]]
) -> None:
    """A panel run by the CLI on two pool processes: every run directory it wrote (Keep and
    the branches) is one trace at the endpoint, exported by the process that ran it."""
    endpoint, received = receiver
    config = write_config(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {"OTEL_EXPORTER_OTLP_ENDPOINT": endpoint, "NO_PROXY": "127.0.0.1,localhost"}
    folder = tmp_path / "panel"
    command = [sys.executable, "-m", "controlscope.cli", "panel", str(config), "--out"]
    done = subprocess.run(
        [*command, str(folder), "--quiet"], capture_output=True, text=True, timeout=300, env=env
    )
    assert done.returncode == 0, done.stderr
    runs: dict[str, int] = {}
    for request in received:
        for resource in request.resource_spans:
            for scope in resource.scope_spans:
                for span in scope.spans:
                    if span.name == "invoke_agent controlscope":
                        attributes = {a.key: _attribute(a.value) for a in span.attributes}
                        where = str(attributes["controlscope.run_dir"])
                        runs[where] = runs.get(where, 0) + 1
    logs = {str(path.parent) for path in folder.rglob("events.jsonl")}
    assert len(logs) >= 3 and set(runs) == logs
    assert set(runs.values()) == {1}


def test_an_executor_session_is_traced_like_a_run(
    files: Path, tmp_path: Path, exporter: InMemorySpanExporter
) -> None:
    """An agent's session (each ``execute`` a planning turn) is one trace: a turn span per
    execute, its call under it, and a review span per reviewed boundary (a patch at the
    second call)."""
    settings = cs.RunSettings(scope="arg", schedule="every_boundary")
    reviewer = PatchSecond(str(files / "b.txt"))
    read = f"read_text_file(path={str(files / 'a.txt')!r})"
    with cs.Executor(
        servers={"fs": _fs(files)}, settings=settings, reviewer=reviewer, out=tmp_path / "s"
    ) as session:
        assert session.execute(f"print({read}.strip())").ok
        assert session.execute(f"print({read}.strip())").output == "beta\n"
    spans = exporter.get_finished_spans()
    by_id = _tree(spans)
    (run,) = [s for s in spans if s.parent is None]
    assert run.name == "invoke_agent controlscope" and run.attributes is not None
    assert run.attributes["controlscope.run_dir"] == str(tmp_path / "s")
    tools = [s for s in spans if s.name == "execute_tool read_text_file"]
    turns = [_parent(s, by_id) for s in tools]
    assert len({id(t) for t in turns}) == 2 and all(t and t.name == "planning_turn" for t in turns)
    reviews = [s.attributes for s in spans if s.name == "review" and s.attributes]
    assert [r["controlscope.review.operation"] for r in reviews] == ["keep", "patch_arguments"]
    assert [r["controlscope.review.granted_scope"] for r in reviews] == ["arg", "arg"]
    assert [bool(s.attributes and s.attributes["controlscope.patched"]) for s in tools] == [
        False,
        True,
    ]
