"""Framework overhead of a run: time outside model calls / wall time.

Runs one task live with the embedded local model as planner and continuous Full reviewer, then
replays the recorded run (``replay:`` models answer instantly). For each prints ``wall_s``,
``model_s`` (wall seconds spent inside the models' ``complete``) and ``framework_overhead_ratio`` =
(wall - model) / wall; the last line is one JSON object:

    {"live": {...}, "replay": {...}}

Target: framework overhead at most 5% of wall time in the live run.

Usage: python benchmarks/run_overhead.py [--task ID] [--students N] [--model local] [--max-turns N]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from controlscope import ModelReviewer, RunResult, RunSpec, prepare
from controlscope.core import ChatModel, ModelRequest, ModelResponse
from controlscope.run import run_prepared


class TimedModel:
    """Wraps a model and sums the wall seconds spent inside ``complete``."""

    def __init__(self, inner: ChatModel) -> None:
        self.inner = inner
        self.seconds = 0.0

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    def complete(self, request: ModelRequest) -> ModelResponse:
        t0 = time.perf_counter()
        try:
            return self.inner.complete(request)
        finally:
            self.seconds += time.perf_counter() - t0


def measure(result: RunResult, wall_s: float, model_s: float) -> dict[str, Any]:
    return {
        "wall_s": round(wall_s, 3),
        "model_s": round(model_s, 3),
        "framework_overhead_ratio": round((wall_s - model_s) / wall_s, 4) if wall_s else 0.0,
        "primitive_calls": result.summary.primitive_calls,
        "planning_turns": result.summary.planning_turns,
        "reviews": result.summary.reviews,
        "success": result.verdict.success,
        "end_reason": result.end_reason,
    }


def timed_run(spec: RunSpec) -> tuple[RunResult, float, float]:
    """Run ``spec`` through the public API with both roles timed: (result, wall s, model s)."""
    prepared = prepare(spec)
    planner = TimedModel(prepared.models.planner)
    assert prepared.models.reviewer is not None
    reviewer = TimedModel(prepared.models.reviewer)
    t0 = time.perf_counter()
    result = run_prepared(prepared, planner=planner, reviewer=ModelReviewer(reviewer))
    return result, time.perf_counter() - t0, planner.seconds + reviewer.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--task", default="student_database/english_talent")
    parser.add_argument("--students", type=int, default=25)
    parser.add_argument("--draw", type=int, default=1, help="reviewer draw index")
    parser.add_argument("--model", default="local")
    parser.add_argument("--max-turns", type=int, default=4)
    parser.add_argument("--max-calls", type=int, default=30)
    args = parser.parse_args()

    params = {"students": args.students} if args.task.startswith("student_database/") else {}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        spec = RunSpec(
            task=args.task,
            params=params,
            scope="full",
            schedule="continuous",
            model=args.model,
            draw=args.draw,
            max_turns=args.max_turns,
            max_calls=args.max_calls,
            out=root / "live",
        )
        live, live_wall, live_model = timed_run(spec)
        print("live:", json.dumps(measure(live, live_wall, live_model)), flush=True)
        again = spec.replace(model=f"replay:{root / 'live'}", out=root / "replay")
        replay, replay_wall, replay_model = timed_run(again)
        same = (
            replay.summary.primitive_calls == live.summary.primitive_calls
            and replay.verdict.success == live.verdict.success
        )
        result = {
            "live": measure(live, live_wall, live_model),
            "replay": {**measure(replay, replay_wall, replay_model), "matches_live": same},
        }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
