"""Valid reviews by the embedded 1.5B model: how many of its proposals validation accepts.

A fixed set of boundaries comes from frozen source programs, one per filesystem task
(``benchmarks/embedded_review_programs/<env>__<task>.py``; each is written the way a small
planner writes, several with a repairable mistake: a wrong path, a misspelled folder, a wrong
destination). A scripted planner answers each task with its program (a first line
``root = '<workspace>'`` put in front), the program runs on real parts (the npm MCP server, the
isolated worker) under a reviewer that records the public state at every boundary (schedule
``every_boundary``) and keeps, so the program runs as written; the first ``--per-program``
boundaries of each program are the set. Each boundary is then reviewed by the embedded model
(``local``) as a run would review it (JSON decisions under the decision schema, the bounded
view, the local token cap), once granted Arg and once granted Full, and every proposal is
validated against the granted scope (:func:`controlscope.review.review_boundary`).

The last line of stdout is one JSON object:

    {"valid_arg_ratio": ..., "valid_full_ratio": ..., "boundaries": ..., "tasks": ...,
     "arg": {...}, "full": {...}, "review_s_mean": ..., "programs_2plus_calls_ratio": ...,
     "demo_non_ties": ..., "demo_minutes": ...}

``valid_*_ratio``: proposals accepted by validation over proposals (a provider error is no
proposal and is counted apart). ``arg``/``full``: proposals by kind, accepted ones by kind and
fallbacks by kind. Targets: at least 0.9 (Arg) and 0.7 (Full).

``demo_non_ties`` and ``demo_minutes`` (with ``--demo``) and ``programs_2plus_calls_ratio``
(with ``--programs``) come from ``benchmarks/_embedded_demo.py``, measured after the reviews'
model is closed; a key not asked for is null.

Usage: CONTROLSCOPE_THREADS=2 python benchmarks/embedded_review.py [--per-program N]
[--tasks TASK ...] [--timeout-s S] [--demo] [--programs]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from controlscope import ModelReviewer, run_trajectory
from controlscope.core import (
    ChatModel,
    Condition,
    Keep,
    ModelRequest,
    ModelResponse,
    Scope,
    ViewLimits,
)
from controlscope.envs import get_environment
from controlscope.models import ScriptedModel, make_model
from controlscope.review import Proposal, PublicState, review_boundary

HERE = Path(__file__).parent
PROGRAMS = HERE / "embedded_review_programs"
DEMO_KEYS = ("programs_2plus_calls_ratio", "demo_non_ties", "demo_minutes")
LOCAL_MAX_TOKENS = 1024  # a run's cap for the embedded model (controlscope.run)


def _root(request: ModelRequest) -> str:
    """The workspace root the task message names (as a model reads it)."""
    for message in request.messages:
        if message.role == "user" and message.content and "Allowed directory:" in message.content:
            return message.content.split("Allowed directory:", 1)[1].strip().splitlines()[0]
    raise RuntimeError("the task message names no allowed directory")


def _planner(program: str) -> ScriptedModel:
    """A planner whose first reply is the frozen program, then a final answer."""

    def reply(request: ModelRequest) -> ModelResponse:
        return ModelResponse(text=f"```python\nroot = {_root(request)!r}\n{program}```")

    return ScriptedModel([reply, "Done."])


class Recorder:
    """A reviewer that records the public state at the first ``limit`` boundaries and keeps."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.states: list[PublicState] = []

    def propose(self, state: PublicState, condition: Condition) -> Proposal:
        if len(self.states) < self.limit:
            self.states.append(state)
        return Proposal(operation=Keep(), reason="recording")


def capture(task_id: str, program: str, limit: int, tmp: Path) -> list[PublicState]:
    """The public states at the first ``limit`` boundaries of ``program`` on ``task_id``."""
    env = get_environment("filesystem")
    recorder = Recorder(limit)
    out = tmp / task_id.replace("/", "__")
    run_trajectory(
        env,
        env.task(task_id),
        seed=0,
        planner=_planner(program),
        reviewer=recorder,
        condition=Condition(
            scope=Scope.ARG,
            schedule="every_boundary",
            planner_format="fenced",
            review_mode="json",
        ),
        out_dir=out / "run",
        workspace_root=out / "ws",
    )
    return recorder.states


def review_condition(scope: Scope) -> Condition:
    """The review condition a run with the embedded reviewer gets (``controlscope.run``)."""
    return Condition(
        scope=scope,
        review_mode="json",
        view_limits=ViewLimits(),
        max_tokens=LOCAL_MAX_TOKENS,
        planner_format="fenced",
    )


class Tally:
    """One scope's counts: proposals, acceptances and fallbacks by kind, review seconds."""

    def __init__(self) -> None:
        self.proposed: Counter[str] = Counter()
        self.accepted: Counter[str] = Counter()
        self.fallbacks: Counter[str] = Counter()
        self.provider_errors = 0
        self.seconds: list[float] = []

    def summary(self) -> dict[str, Any]:
        total = sum(self.proposed.values())
        return {
            "ratio": round(sum(self.accepted.values()) / total, 3) if total else None,
            "proposals": total,
            "proposed": dict(self.proposed),
            "accepted": dict(self.accepted),
            "fallbacks": dict(self.fallbacks),
            "provider_errors": self.provider_errors,
        }


def review_one(
    model: ChatModel, task_id: str, state: PublicState, scope: Scope, tally: Tally
) -> None:
    """Review ``state`` granted ``scope`` and count the outcome in ``tally``."""
    outcome = review_boundary(ModelReviewer(model), state, review_condition(scope))
    tally.seconds.append(outcome.latency_s)
    proposal = outcome.proposal
    if proposal is not None and proposal.error is not None:
        tally.provider_errors += 1
    else:
        kind = proposal.operation.kind if proposal and proposal.operation else "malformed"
        tally.proposed[kind] += 1
        tally.accepted[kind] += outcome.validation.accepted
    if outcome.fallback is not None:
        tally.fallbacks[outcome.validation.reason or outcome.fallback] += 1
    raw = (proposal.raw if proposal else "")[:600].replace("\n", "\\n")
    print(
        f"[{scope.name.lower()}] {task_id} call {state.boundary.call_index} "
        f"{state.boundary.tool}: {outcome.realized.kind} "
        f"accepted={outcome.validation.accepted} {outcome.validation.detail[:400]} "
        f"({outcome.latency_s:.0f}s) raw={raw}",
        file=sys.stderr,
        flush=True,
    )


def review_all(model: ChatModel, boundaries: list[tuple[str, PublicState]]) -> dict[Scope, Tally]:
    """Review every boundary granted Arg and granted Full: task by task, a task's boundaries
    under Arg and then under Full (successive requests share their prompt's head, which the
    model keeps)."""
    tallies = {Scope.ARG: Tally(), Scope.FULL: Tally()}
    for task_id in dict.fromkeys(task for task, _ in boundaries):
        states = [state for task, state in boundaries if task == task_id]
        for scope, tally in tallies.items():
            for state in states:
                review_one(model, task_id, state, scope, tally)
    return tallies


def demo_numbers(demo: bool, programs: bool) -> dict[str, Any]:
    """The demo's keys, measured by ``benchmarks/_embedded_demo.py`` after this benchmark's model
    is closed (one model process at a time): ``demo_non_ties`` and ``demo_minutes`` with
    ``demo`` (the main job's panel, run once), ``programs_2plus_calls_ratio`` with ``programs``
    (20 tasks x 2 planner samples); a key not asked for is null."""
    found: dict[str, Any] = dict.fromkeys(DEMO_KEYS)
    if not (demo or programs):
        return found
    spec = importlib.util.spec_from_file_location("_embedded_demo", HERE / "_embedded_demo.py")
    if spec is None or spec.loader is None:
        raise RuntimeError("cannot import benchmarks/_embedded_demo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    if demo:
        found["demo_non_ties"] = module.demo_non_ties()
        found["demo_minutes"] = module.demo_minutes()
    if programs:
        found["programs_2plus_calls_ratio"] = module.programs_2plus_calls_ratio()
    return found


def main() -> int:
    """Capture the boundaries, review them under Arg and Full, print the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-program", type=int, default=5, help="boundaries per program")
    parser.add_argument(
        "--tasks", nargs="*", default=None, help="only these tasks (default: every program's)"
    )
    parser.add_argument(
        "--timeout-s", type=float, default=600.0, help="the model's deadline per review"
    )
    parser.add_argument("--demo", action="store_true", help="also run the main job's panel")
    parser.add_argument(
        "--programs", action="store_true", help="also sample 20 tasks x 2 planner programs"
    )
    args = parser.parse_args()
    files = sorted(PROGRAMS.glob("*.py"))
    if args.tasks:
        files = [f for f in files if f.stem.replace("__", "/") in args.tasks]
    boundaries: list[tuple[str, PublicState]] = []
    with tempfile.TemporaryDirectory(prefix="embedded-review-") as tmp:
        for path in files:
            task_id = path.stem.replace("__", "/")
            states = capture(task_id, path.read_text(), args.per_program, Path(tmp))
            print(f"{task_id}: {len(states)} boundaries", file=sys.stderr, flush=True)
            boundaries.extend((task_id, s) for s in states)
    model = make_model("local", request_timeout_s=args.timeout_s)
    started = time.perf_counter()
    try:
        tallies = review_all(model, boundaries)
    finally:
        close = getattr(model, "close", None)
        if close is not None:
            close()
    demo = demo_numbers(args.demo, args.programs)
    arg, full = tallies[Scope.ARG].summary(), tallies[Scope.FULL].summary()
    seconds = tallies[Scope.ARG].seconds + tallies[Scope.FULL].seconds
    result = {
        "valid_arg_ratio": arg["ratio"],
        "valid_full_ratio": full["ratio"],
        "boundaries": len(boundaries),
        "tasks": len({task for task, _ in boundaries}),
        "arg": arg,
        "full": full,
        "review_s_mean": round(sum(seconds) / len(seconds), 1) if seconds else None,
        "review_minutes": round((time.perf_counter() - started) / 60, 1),
        **demo,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
