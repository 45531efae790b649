"""How fast the viewer's pages load in a real browser (Debian's Chromium under playwright).

Writes a synthetic run of 100 boundaries through :class:`TrajectoryWriter` (ten planning turns,
a reviewed boundary at every call with the reviewer's view rendered by
:func:`controlscope.review.render_view` from a growing history, every fifth decision an argument
patch and every 25th a replacement, observations and printed output), serves it with
:class:`controlscope.view.ViewServer` and loads its page in the browser several times. Also
writes 1,000 small run directories and loads the folder-of-runs page that lists them, and a
synthetic panel of 1,000 runs (200 units of Keep, Arg and Full with two reviewer draws, written
by :func:`controlscope.panel.testing.write_synthetic_panel`, each run given a small log) and
loads its page: the report's tables built as ``controlscope report`` builds them (10,000
bootstrap resamples), every cell linked to its runs, and the 200 units.

Prints a few human-readable lines, then as its LAST line one JSON object:

- ``run_page_ms``: median milliseconds from the request's start to the browser's ``load`` event
  for the 100-boundary run (the server's reading and rendering included);
- ``run_page_first_byte_to_load_ms``: the same from the response's first byte (the browser's
  share alone);
- ``run_page_bytes``: the page's size;
- ``runs_index_1000_ms``: the same as ``run_page_ms`` for the page listing 1,000 runs;
- ``panel_page_ms``: the same for the panel of 1,000 runs (its report built on every load);
- ``panel_page_first_byte_to_load_ms``, ``panel_page_bytes``: as for the run page;
- ``panel_unit_page_ms``: the same for one unit's five runs side by side;
- ``loads``: page loads measured per page.

Targets (the viewer's issue): at most 500 ms for the run page, at most 1,500 ms for a panel of
1,000 runs.

Usage: ``python benchmarks/viewer.py [--boundaries N] [--loads N]``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, sync_playwright

from controlscope import view
from controlscope.core import (
    EVENTS_FILE,
    BlockEndEvent,
    BlockResult,
    BlockStartEvent,
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
    Operation,
    OperationSet,
    PatchArguments,
    PlannerTurnEvent,
    PrimitiveCall,
    PrimitiveCallEvent,
    ProposalEvent,
    RealizedOperationEvent,
    ReplaceWorkflow,
    ReviewRequestEvent,
    RunEndEvent,
    RunStartEvent,
    Scope,
    Task,
    ToolCall,
    ToolResult,
    ToolSchema,
    Usage,
    Validation,
    ValidationEvent,
    Verdict,
)
from controlscope.panel import run_dir
from controlscope.panel.testing import SyntheticRun, write_synthetic_panel
from controlscope.record import TrajectoryWriter, summarize, write_summary
from controlscope.review import PublicState, render_view

TASK = Task(
    id="student_database/bench",
    env="filesystem",
    category="student_database",
    instruction="Collect the English students into out/english.txt. <b>not bold</b>",
    template="student_database",
)
CODE = "\n".join(f"x{i} = read_text_file(path='students/s{i}.json')" for i in range(10))
TOOLS = (
    ToolSchema(
        name="read_text_file",
        description="Read the complete contents of a file as text.",
        input_schema={"type": "object", "properties": {"path": {"type": "string"}}},
    ),
)
FULL = OperationSet.of(Scope.FULL)


def _operation(i: int) -> Operation:
    if i % 25 == 24:
        return ReplaceWorkflow(code=CODE.replace("students/", "pupils/"))
    if i % 5 == 4:
        return PatchArguments(arguments={"path": f"students/t{i}.json"})
    return Keep()


def _boundary(i: int) -> Boundary:
    return Boundary(
        block_id=f"b{i // 10}",
        call_index=i,
        block_call_index=i % 10,
        tool="read_text_file",
        arguments={"path": f"students/s{i}.json"},
        line=i % 10 + 1,
        call_site=CallSite(module=f"b{i // 10}"),
        module_vars={f"x{j}": "v" * 200 for j in range(i % 10)},
        output="a printed line\n" * (i % 10),
        code=CODE,
    )


def _review(i: int, history: list[Message]) -> list[Event]:
    boundary = _boundary(i)
    state = PublicState(goal=TASK.instruction, boundary=boundary, tools=TOOLS)
    messages = render_view(state, "with_feedback", FULL)
    operation = _operation(i)
    raw = json.dumps({"reason": "checked", **operation.model_dump()})
    request = ModelRequest(messages=tuple(messages), purpose="reviewer")
    response = ModelResponse(text=raw, usage=Usage(input_tokens=1500, output_tokens=60))
    validation = Validation(
        granted=Scope.FULL, proposal=operation, accepted=True, realized=operation
    )
    return [
        BoundaryEvent(boundary=boundary, review=True),
        ReviewRequestEvent(
            call_index=i, block_id=boundary.block_id, view="with_feedback", granted=Scope.FULL
        ),
        ModelCallEvent(role="reviewer", request=request, response=response, call_index=i),
        ProposalEvent(call_index=i, raw=raw, operation=operation),
        ValidationEvent(call_index=i, validation=validation),
        RealizedOperationEvent(
            call_index=i, block_id=boundary.block_id, operation=operation, latency_s=0.2
        ),
    ]


def _call(i: int, operation: Operation) -> PrimitiveCallEvent:
    boundary = _boundary(i)
    arguments = dict(boundary.arguments)
    if isinstance(operation, PatchArguments):
        arguments.update(operation.arguments)
    call = PrimitiveCall(
        block_id=boundary.block_id,
        call_index=i,
        tool="read_text_file",
        arguments=arguments,
        result=ToolResult(text=f'{{"name": "S{i:04d}", "english": 91}}\n' * 20),
        started_at=time.time(),
        elapsed_ms=1.5,
        operation=operation.kind,
        requested=boundary.arguments if operation.kind != "keep" else None,
    )
    return PrimitiveCallEvent(call=call)


def run_events(boundaries: int) -> list[Event]:
    """A run of ``boundaries`` reviewed calls in blocks of ten, one block per planning turn."""
    events: list[Event] = [
        RunStartEvent(
            task=TASK, seed=0, scope=Scope.FULL, schedule="continuous", view="with_feedback"
        )
    ]
    history = [Message(role="system", content="the planner's system prompt\n" * 40)]
    for i in range(boundaries):
        if i % 10 == 0:
            events.append(PlannerTurnEvent(turn=i // 10))
            history.append(Message(role="user", content="the previous block's receipt\n" * 20))
            reply = ToolCall(
                id=f"c{i}", name="execute_python", arguments=json.dumps({"code": CODE})
            )
            events.append(
                ModelCallEvent(
                    role="planner",
                    request=ModelRequest(messages=tuple(history), purpose="planner"),
                    response=ModelResponse(
                        tool_calls=(reply,), usage=Usage(input_tokens=3000, output_tokens=200)
                    ),
                    turn=i // 10,
                )
            )
            events.append(BlockStartEvent(block_id=f"b{i // 10}", code=CODE, turn=i // 10))
        events += _review(i, history)
        operation = _operation(i)
        if operation.kind != "replace_workflow":
            events.append(_call(i, operation))
        if i % 10 == 9 or operation.kind == "replace_workflow":
            status = "cancelled" if operation.kind == "replace_workflow" else "completed"
            result = BlockResult(block_id=f"b{i // 10}", status=status, output="done\n", calls=10)
            events.append(BlockEndEvent(result=result))
    checks = [Check(name=f"check {n}", passed=n % 2 == 0, reason="why " * 10) for n in range(5)]
    events.append(
        FinalVerdictEvent(
            verdict=Verdict(task_id=TASK.id, checks=checks),
            success=False,
            end_reason="final_answer",
        )
    )
    events.append(RunEndEvent(end_reason="final_answer"))
    return events


def write_run(run_dir: Path, events: list[Event]) -> None:
    with TrajectoryWriter(run_dir) as writer:
        for event in events:
            writer.write(event)
    write_summary(run_dir, summarize(events))


def write_panel(folder: Path, runs: int, log: bytes) -> str:
    """A synthetic panel of ``runs`` runs (units of Keep, Arg and Full with two reviewer draws),
    each run given ``log`` as its ``events.jsonl``; returns its first unit's id."""
    planned = []
    for u in range(max(1, runs // 5)):
        unit = f"synthetic/task{u % 40}/s{u // 40}/p0"
        common = {"unit": unit, "category": f"c{u % 6}", "template": f"task{u % 40}"}
        planned.append(SyntheticRun(scope="keep", success=u % 3 == 0, calls=3, **common))
        for draw in (0, 1):
            for scope, success in (("arg", u % 4 == 0), ("full", (u + draw) % 2 == 0)):
                planned.append(
                    SyntheticRun(scope=scope, draw=draw, success=success, calls=3, **common)
                )
    manifest = write_synthetic_panel(folder, planned)
    for run in manifest.plan.runs:
        (run_dir(folder, run.id) / EVENTS_FILE).write_bytes(log)
    return manifest.plan.runs[0].unit


def load_ms(page: Page, url: str, loads: int) -> dict[str, Any]:
    """Median page-load timings over ``loads`` loads (one warm-up first)."""
    page.goto(url)
    totals, browser_only = [], []
    for _ in range(loads):
        page.goto(url, wait_until="load")
        timing = page.evaluate(
            "() => { const n = performance.getEntriesByType('navigation')[0];"
            " return [n.loadEventEnd - n.requestStart, n.loadEventEnd - n.responseStart,"
            " n.transferSize || n.encodedBodySize]; }"
        )
        totals.append(timing[0])
        browser_only.append(timing[1])
        size = timing[2]
    return {
        "ms": round(statistics.median(totals), 1),
        "browser_ms": round(statistics.median(browser_only), 1),
        "bytes": int(size),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--boundaries", type=int, default=100)
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--loads", type=int, default=7)
    args = parser.parse_args()
    executable = shutil.which("chromium")
    if executable is None:
        raise SystemExit("chromium is not installed: run scripts/setup.sh")
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "run"
        write_run(run_dir, run_events(args.boundaries))
        small = run_events(3)
        for n in range(args.runs):
            write_run(Path(tmp) / "runs" / f"run-{n:04d}", small)
        log = (Path(tmp) / "runs" / "run-0000" / EVENTS_FILE).read_bytes()
        unit = write_panel(Path(tmp) / "panel", args.runs, log)
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=executable)
            page = browser.new_page()
            with view.ViewServer(run_dir) as server:
                run = load_ms(page, server.url, args.loads)
            with view.ViewServer(Path(tmp) / "runs") as server:
                runs = load_ms(page, server.url, args.loads)
            with view.ViewServer(Path(tmp) / "panel") as server:
                panel = load_ms(page, server.url, args.loads)
                units = page.locator("#units tr").count() - 1
                side = load_ms(page, f"{server.url}unit/{unit}", args.loads)
            browser.close()
    print(f"run page ({args.boundaries} boundaries, {run['bytes'] / 1e6:.1f} MB): {run['ms']} ms")
    print(f"folder of {args.runs} runs: {runs['ms']} ms")
    print(f"panel of {args.runs} runs ({units} units, {panel['bytes'] / 1e6:.2f} MB): "
          f"{panel['ms']} ms; a unit side by side: {side['ms']} ms")  # fmt: skip
    result = {
        "run_page_ms": run["ms"],
        "run_page_first_byte_to_load_ms": run["browser_ms"],
        "run_page_bytes": run["bytes"],
        "runs_index_1000_ms": runs["ms"] if args.runs == 1000 else None,
        "panel_runs": args.runs,
        "panel_page_ms": panel["ms"],
        "panel_page_first_byte_to_load_ms": panel["browser_ms"],
        "panel_page_bytes": panel["bytes"],
        "panel_unit_page_ms": side["ms"],
        "loads": args.loads,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
