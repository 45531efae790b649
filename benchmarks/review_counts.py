"""Review counts of continuous Full on the 20-task main set, against the paper's rule.

The paper reports 517 scope reviews for 537 primitive calls over 20 tasks for continuous Full
(B.2), and says continuous review "can recur after a further public call" (B.1): one review per
boundary that follows a completed public call, none before a task's first call, none at a
replacement's first call before a further call completes. Per task that is one review for every
completed call that another boundary follows: calls - 1 when the task's last boundary completes
its call (537 - 20 = 517), one more when a replacement cancels the last call.
``reviews_expected_by_paper_rule`` applies that rule to each log's boundary and primitive-call
events, apart from the schedule that decided the reviews.

Each of the 20 instruction-compatible filesystem tasks (the paper's main set: those whose
instruction allows Python) runs on real parts (the npm MCP server, the isolated worker) with a
scripted planner that makes a fixed number of read-only calls in two replies, and a scripted
reviewer that keeps, except at every fifth review, where it replaces the rest of the reply with
code making 0, 1 or 2 calls. The same trajectories run under ``every_boundary`` (review at every
boundary, the old rule) for comparison. The last line is one JSON object:

    {"tasks": 20, "calls": ..., "reviews": ..., "reviews_expected_by_paper_rule": ...,
     "replacements": ..., "reviews_every_boundary": ..., "calls_every_boundary": ...}

Target: ``reviews`` equals ``reviews_expected_by_paper_rule``.

Usage: python benchmarks/review_counts.py
"""

from __future__ import annotations

import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from controlscope import ModelReviewer, read_events, run_trajectory
from controlscope.core import Condition, ModelRequest, ModelResponse, Scope
from controlscope.envs import get_environment
from controlscope.models import ScriptedModel


def _root(request: ModelRequest) -> str:
    """The workspace root the task message names (as a model reads it)."""
    for message in request.messages:
        if message.role == "user" and message.content and "Allowed directory:" in message.content:
            return message.content.split("Allowed directory:", 1)[1].strip().splitlines()[0]
    raise RuntimeError("the task message names no allowed directory")


def _calls(n: int) -> str:
    """Code making ``n`` read-only primitive calls at module level (``root`` names the
    workspace: the planner's block sets it, and a replacement runs in the same namespace)."""
    return "\n".join(f"listing_{i} = list_directory(path=root)" for i in range(n)) or "pass"


def _planner(first: int, second: int) -> ScriptedModel:
    """Two replies of ``first`` and ``second`` calls, then a final answer."""

    def reply(n: int) -> Callable[[ModelRequest], ModelResponse]:
        def answer(request: ModelRequest) -> ModelResponse:
            code = f"root = {_root(request)!r}\n{_calls(n)}"
            return ModelResponse(text=f"```python\n{code}\n```")

        return answer

    return ScriptedModel([reply(first), reply(second), "Done."])


class FifthReviewReplaces:
    """A scripted reviewer: ``keep``, except every fifth review replaces the rest of the reply
    with code making ``replacement_calls`` calls."""

    def __init__(self, replacement_calls: int) -> None:
        self.replacement_calls = replacement_calls
        self.reviews = 0

    @property
    def model_id(self) -> str:
        return "scripted-reviewer"

    def complete(self, request: ModelRequest) -> ModelResponse:
        self.reviews += 1
        decision: dict[str, str] = {"reason": "scripted", "operation": "keep"}
        if self.reviews % 5 == 0:
            code = _calls(self.replacement_calls)
            decision = {"reason": "scripted", "operation": "replace_workflow", "code": code}
        return ModelResponse(text=json.dumps(decision))


def paper_rule_reviews(run_dir: Path) -> int:
    """How many reviews the paper's continuous rule gives a recorded trajectory: one at each
    boundary that a completed primitive call precedes since the previous boundary (or, for the
    first, since the task began)."""
    expected, completed = 0, 0
    for event in read_events(run_dir):
        if event.type == "primitive_call":
            completed += 1
        elif event.type == "boundary":
            expected += completed > 0
            completed = 0
    return expected


def _run(task_index: int, task_id: str, schedule: str, out: Path) -> tuple[int, int, int, int]:
    """One task's (calls, reviews, replacements, reviews by the paper's rule) under
    ``schedule``."""
    env = get_environment("filesystem")
    first, second = 2 + task_index % 4, 1 + task_index % 3
    result = run_trajectory(
        env,
        env.task(task_id),
        seed=0,
        planner=_planner(first, second),
        reviewer=ModelReviewer(FifthReviewReplaces(task_index % 3)),
        condition=Condition(
            scope=Scope.FULL, schedule=schedule, planner_format="fenced", review_mode="json"
        ),
        out_dir=out / f"{schedule}-{task_index}",
        workspace_root=out / "ws",
    )
    s = result.summary
    if result.end_reason != "final_answer":
        raise RuntimeError(f"{task_id} under {schedule} ended {result.end_reason}: {result.detail}")
    return s.primitive_calls, s.reviews, s.replacements, paper_rule_reviews(result.run_dir)


def main() -> int:
    """Run the 20 tasks under both schedules and print the counts."""
    env = get_environment("filesystem")
    tasks = [t.id for t in env.tasks() if t.python_allowed]
    totals = {"calls": 0, "reviews": 0, "expected": 0, "replacements": 0}
    every = {"calls": 0, "reviews": 0}
    with tempfile.TemporaryDirectory(prefix="review-counts-") as tmp:
        out = Path(tmp)
        for i, task_id in enumerate(tasks):
            calls, reviews, replaced, expected = _run(i, task_id, "continuous", out)
            totals["calls"] += calls
            totals["reviews"] += reviews
            totals["expected"] += expected
            totals["replacements"] += replaced
            every_calls, every_reviews, _, _ = _run(i, task_id, "every_boundary", out)
            every["calls"] += every_calls
            every["reviews"] += every_reviews
            print(
                f"{task_id}: {calls} calls, {reviews} reviews (paper rule {expected}), "
                f"{replaced} replacements; every_boundary {every_reviews} reviews for "
                f"{every_calls} calls",
                file=sys.stderr,
            )
    print(
        json.dumps(
            {
                "tasks": len(tasks),
                "calls": totals["calls"],
                "reviews": totals["reviews"],
                "reviews_expected_by_paper_rule": totals["expected"],
                "replacements": totals["replacements"],
                "reviews_every_boundary": every["reviews"],
                "calls_every_boundary": every["calls"],
            }
        )
    )
    return 0 if totals["reviews"] == totals["expected"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
