"""What the trajectory log and the reviewer's rendering cost per event (framework overhead).

Writes a synthetic but realistically sized run (planner turns with growing histories, boundaries
with variables, primitive calls with observations, reviews) through :class:`TrajectoryWriter`,
reads it back, summarizes it, and renders reviewer views. Prints a few human-readable lines, then
as its LAST line one JSON object:

- ``write_us_median`` / ``write_us_p95``: wall microseconds per ``TrajectoryWriter.write`` (JSON
  dump, write, flush; ``fsync`` only on run start/end);
- ``model_call_write_us_median``: the same for ``model_call`` events (the largest);
- ``bytes_per_event``: mean line size;
- ``read_ms`` / ``summarize_ms``: reading back and summarizing the whole log;
- ``render_view_us_median``: rendering one ``with_feedback`` review request;
- ``events``: events written.

Usage: ``python benchmarks/record_overhead.py [--boundaries N]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

from controlscope.core import (
    Boundary,
    BoundaryEvent,
    CallSite,
    Check,
    Event,
    FinalVerdictEvent,
    Keep,
    Message,
    ModelCallEvent,
    ModelRequest,
    ModelResponse,
    OperationSet,
    PlannerTurnEvent,
    PrimitiveCall,
    PrimitiveCallEvent,
    RealizedOperationEvent,
    RunEndEvent,
    RunStartEvent,
    Scope,
    Task,
    ToolCall,
    ToolResult,
    ToolSchema,
    Usage,
    Verdict,
)
from controlscope.record import TrajectoryWriter, read_events, summarize
from controlscope.review import PublicState, render_view

TASK = Task(
    id="student_database/bench",
    env="filesystem",
    category="student_database",
    instruction="Collect the English students into out/english.txt.",
    template="student_database",
)
CODE = "\n".join(f"x{i} = read_text_file('students/s{i}.json')" for i in range(20))
TOOLS = (
    ToolSchema(
        name="read_text_file",
        description="Read the complete contents of a file as text.",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
    ),
)


def _events(boundaries: int) -> list[Event]:
    history: list[Message] = [Message(role="system", content="s" * 3000)]
    events: list[Event] = [
        RunStartEvent(
            task=TASK, seed=0, scope=Scope.FULL, schedule="continuous", view="with_feedback"
        )
    ]
    for i in range(boundaries):
        if i % 10 == 0:
            events.append(PlannerTurnEvent(turn=i // 10))
            history.append(Message(role="user", content="result " * 100))
            request = ModelRequest(messages=tuple(history), purpose="planner")
            response = ModelResponse(
                tool_calls=(
                    ToolCall(id=f"c{i}", name="execute_python", arguments=json.dumps(CODE)),
                ),
                usage=Usage(input_tokens=2000, output_tokens=300),
            )
            events.append(ModelCallEvent(role="planner", request=request, response=response))
        boundary = Boundary(
            block_id=f"b{i // 10}",
            call_index=i,
            block_call_index=i % 10,
            tool="read_text_file",
            arguments={"path": f"students/s{i}.json"},
            line=i % 10 + 1,
            call_site=CallSite(module="b"),
            module_vars={f"x{j}": "v" * 200 for j in range(i % 10)},
            output="line\n" * 40,
            code=CODE,
        )
        events.append(BoundaryEvent(boundary=boundary, review=True))
        review = ModelRequest(
            messages=(
                Message(role="system", content="r" * 2500),
                Message(role="user", content="u" * 3000),
            ),
            purpose="reviewer",
        )
        events.append(
            ModelCallEvent(
                role="reviewer",
                request=review,
                response=ModelResponse(text='{"operation": "keep"}', usage=Usage(input_tokens=900)),
            )
        )
        events.append(RealizedOperationEvent(call_index=i, operation=Keep(), latency_s=0.1))
        events.append(
            PrimitiveCallEvent(
                call=PrimitiveCall(
                    block_id=boundary.block_id,
                    call_index=i,
                    tool="read_text_file",
                    arguments=boundary.arguments,
                    result=ToolResult(text="{" + "a" * 1500 + "}"),
                    started_at=time.time(),
                    elapsed_ms=1.0,
                )
            )
        )
    events.append(
        FinalVerdictEvent(
            verdict=Verdict(task_id=TASK.id, checks=[Check(name="c", passed=True)]),
            success=True,
            end_reason="final_answer",
        )
    )
    events.append(RunEndEvent(end_reason="final_answer"))
    return events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boundaries", type=int, default=300)
    args = parser.parse_args()
    events = _events(args.boundaries)
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp)
        times: list[float] = []
        model_times: list[float] = []
        with TrajectoryWriter(run_dir) as writer:
            for event in events:
                t0 = time.perf_counter()
                writer.write(event)
                dt = (time.perf_counter() - t0) * 1e6
                times.append(dt)
                if event.type == "model_call":
                    model_times.append(dt)
        size = (run_dir / "events.jsonl").stat().st_size
        t0 = time.perf_counter()
        back = read_events(run_dir)
        read_ms = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        summary = summarize(back)
        summarize_ms = (time.perf_counter() - t0) * 1e3
    assert summary.primitive_calls == args.boundaries
    boundary_events = [e for e in events if isinstance(e, BoundaryEvent)]
    render_times = []
    for event in boundary_events[:100]:
        state = PublicState(goal=TASK.instruction, boundary=event.boundary, tools=TOOLS)
        t0 = time.perf_counter()
        render_view(state, "with_feedback", OperationSet.of(Scope.FULL))
        render_times.append((time.perf_counter() - t0) * 1e6)
    result = {
        "events": len(events),
        "write_us_median": round(statistics.median(times), 1),
        "write_us_p95": round(statistics.quantiles(times, n=20)[-1], 1),
        "model_call_write_us_median": round(statistics.median(model_times), 1),
        "bytes_per_event": round(size / len(events)),
        "read_ms": round(read_ms, 1),
        "summarize_ms": round(summarize_ms, 2),
        "render_view_us_median": round(statistics.median(render_times), 1),
    }
    print(f"{len(events)} events, {size / 1e6:.1f} MB log")
    print(f"write median {result['write_us_median']} us, p95 {result['write_us_p95']} us")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
