"""``controlscope run``: one task, one scope and schedule, on real parts, recorded.

Exit status: 0 when the run completed, whatever its verdict; 2 on bad input (unknown task, bad
scope, missing model file, unusable --out or --cache, a replay whose options differ from its
recording), before any model is called; 1 when a replay diverged from its recording; 3 when the
planner's provider failed (unreachable endpoint, weights llama.cpp cannot load...): the run is
recorded and graded as it stands (paper A.4), and the error is printed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

SCOPES = ("keep", "arg", "params", "full")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``run``'s options on ``parser``."""
    parser.add_argument(
        "--task", required=True, help="task id, e.g. student_database/english_talent"
    )
    parser.add_argument("--env", default="filesystem", help="environment (default: filesystem)")
    parser.add_argument("--seed", type=int, default=0, help="the task's data seed (default 0)")
    parser.add_argument(
        "--students", type=int, default=None, help="number of students (student tasks)"
    )
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a task generator parameter (repeatable)",
    )
    parser.add_argument(
        "--scope", choices=SCOPES, default="full", help="granted scope (default: full)"
    )
    parser.add_argument(
        "--schedule",
        default="continuous",
        help="never|continuous|per_block|once[:K]|midpoint:N|protect:n|retain_first (join with +)",
    )
    parser.add_argument("--view", choices=("code_only", "with_feedback"), default="with_feedback")
    parser.add_argument("--replace-boundary", choices=("block", "reply"), default="reply")
    parser.add_argument(
        "--model",
        type=str.strip,
        default="local",
        help="planner model: local | local:0.5b | PATH.gguf | openai:NAME | replay:DIR",
    )
    parser.add_argument(
        "--reviewer-model",
        type=str.strip,
        default=None,
        help="reviewer model (default: --model)",
    )
    parser.add_argument("--base-url", default=None, help="OpenAI-compatible base URL")
    parser.add_argument(
        "--planner-format",
        choices=("tools", "fenced"),
        default=None,
        help="how the planner emits code (default: fenced for local models, tools otherwise)",
    )
    parser.add_argument(
        "--review-mode",
        choices=("tools", "json"),
        default=None,
        help="how the reviewer answers (default: json for local models, tools otherwise)",
    )
    parser.add_argument("--temperature", type=float, default=None, help="default 0.7")
    parser.add_argument("--max-tokens", type=int, default=None, help="per-request token cap")
    parser.add_argument("--draw", type=int, default=None, help="reviewer draw index (default 0)")
    parser.add_argument("--max-calls", type=int, default=None, help="primitive-call budget")
    parser.add_argument("--max-turns", type=int, default=None, help="planning-turn budget")
    parser.add_argument("--max-seconds", type=float, default=None, help="execution-seconds budget")
    parser.add_argument(
        "--cache", type=Path, default=None, help="an SQLite exact-request cache file to use"
    )
    parser.add_argument("--out", required=True, type=Path, help="run directory to write")
    parser.add_argument("--quiet", action="store_true", help="no live progress")


def _params(args: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, Any] = {}
    for item in args.param:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--param expects KEY=VALUE, got {item!r}")
        params[key] = int(value) if value.lstrip("-").isdigit() else value
    if args.students is not None:
        params["students"] = args.students
    return params


def main(args: argparse.Namespace) -> int:
    """Run one task; return 0 when it completed (any verdict), 2 on bad input."""
    from rich.console import Console
    from rich.markup import escape

    from controlscope.agent import RunConfig, run_task
    from controlscope.envs.base import TaskError
    from controlscope.envs.catalog import get_environment
    from controlscope.models.cache import CacheError
    from controlscope.models.replay import ReplayMismatch
    from controlscope.models.types import ProviderError
    from controlscope.models.weights import WeightsError
    from controlscope.progress import LiveProgress
    from controlscope.run_setup import (
        REPLAYED_KNOBS,
        build_models,
        check_replay_condition,
        recorded_config,
    )
    from controlscope.schedule import parse_schedule
    from controlscope.scope import Scope

    console = Console(stderr=True, soft_wrap=True)
    try:
        args.schedule = parse_schedule(args.schedule).name  # recorded in canonical form
        if args.out.exists() and not args.out.is_dir():
            raise ValueError(f"--out {args.out} exists and is not a directory")
        if (
            args.cache is not None
            and args.cache.resolve().parent == args.out.resolve()
            and (args.cache.name in ("events.jsonl", "summary.json"))
        ):
            raise ValueError(f"--cache {args.cache} would overwrite the run's {args.cache.name}")
        if args.base_url is not None and not args.base_url.strip():
            raise ValueError("--base-url is empty; give the endpoint, e.g. http://HOST:PORT/v1")
        if args.base_url is not None and not any(
            spec is not None and spec.startswith("openai")
            for spec in (args.model, args.reviewer_model)
        ):
            raise ValueError("--base-url applies only to openai:NAME models")
        if (args.out / "events.jsonl").exists():
            raise ValueError(
                f"{args.out} already holds a recorded run; choose a new --out directory"
            )
        env = get_environment(args.env)
        task = env.task(args.task, **_params(args))
        budgets = task.budgets.model_copy(
            update={
                k: v
                for k, v in {
                    "primitive_calls": args.max_calls,
                    "planning_turns": args.max_turns,
                    "execution_seconds": args.max_seconds,
                }.items()
                if v is not None
            }
        )
        condition: dict[str, object] = {
            "--task": task.id,
            "params": dict(task.params),
            "--seed": args.seed,
            "--scope": args.scope,
            "--schedule": args.schedule,
            "--view": args.view,
            "--replace-boundary": args.replace_boundary,
            "--max-calls": budgets.primitive_calls,
            "--max-turns": budgets.planning_turns,
            "--max-seconds": budgets.execution_seconds,
            **{
                f"--{knob.replace('_', '-')}": getattr(args, knob)
                for knob in REPLAYED_KNOBS
                if getattr(args, knob) is not None
            },
        }
        for spec in (args.model, args.reviewer_model):
            if spec is not None and spec.startswith("replay:"):
                check_replay_condition(Path(spec.partition(":")[2]), condition)
        models = build_models(
            planner=args.model,
            reviewer=args.reviewer_model,
            base_url=args.base_url,
            cache_path=args.cache,
            need_reviewer=args.schedule != "never" and args.scope != "keep",
            normalise=env.normalise_observation,
        )
        knobs: dict[str, Any] = {
            "planner_format": models.planner_format,
            "review_mode": models.review_mode,
            "max_tokens": models.max_tokens,
            "temperature": 0.7,
            "draw": 0,
        }
        if args.model.startswith("replay:"):
            knobs.update(recorded_config(Path(args.model.partition(":")[2])))
        given = {
            "planner_format": args.planner_format,
            "review_mode": args.review_mode,
            "max_tokens": args.max_tokens,
            "temperature": args.temperature,
            "draw": args.draw,
        }
        knobs.update({k: v for k, v in given.items() if v is not None})
        config = RunConfig(
            scope=Scope[args.scope.upper()],
            schedule=args.schedule,
            view=args.view,
            replace_boundary=args.replace_boundary,
            budgets=budgets,
            **knobs,
        )
        try:
            args.out.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ValueError(f"cannot create --out {args.out}: {err}") from None
    except (
        TaskError,
        ValueError,
        FileNotFoundError,
        ProviderError,
        WeightsError,
        CacheError,
    ) as err:
        console.print(f"[red]controlscope run: {escape(str(err))}[/red]")
        return 2
    progress = None if args.quiet else LiveProgress(console, task.id, budgets.primitive_calls)
    try:
        if progress is not None:
            progress.start()
        result = run_task(
            env,
            task,
            seed=args.seed,
            planner=models.planner,
            reviewer_model=models.reviewer,
            config=config,
            out_dir=args.out,
            observer=progress.observe if progress is not None else None,
        )
    except TaskError as err:
        console.print(f"[red]controlscope run: {escape(str(err))}[/red]")
        return 2
    except ReplayMismatch as err:
        console.print(
            "[red]controlscope run: the replay diverged from the recording: "
            f"{escape(str(err))}[/red]"
        )
        console.print(
            "The options matched the recording, so the requests changed: the recording was made "
            "by code that prompts, shows or schedules differently, or the environment answered "
            f"differently. The diverged replay's log is in {args.out}; replay again into a new "
            "--out directory."
        )
        return 1
    except OSError as err:
        console.print(f"[red]controlscope run: {escape(str(err))}[/red]")
        return 1
    finally:
        if progress is not None:
            progress.stop()
    s = result.summary
    verdict = "PASS" if result.verdict.success else "FAIL"
    out = Console(soft_wrap=True)
    out.print(
        f"{task.id} seed={args.seed} scope={args.scope} schedule={args.schedule}: "
        f"[bold]{verdict}[/bold] ({result.end_reason}; {s.primitive_calls} calls, "
        f"{s.planning_turns} turns, {s.reviews} reviews, {s.patches} patches, "
        f"{s.replacements} replacements, {s.rejected_proposals} rejected)"
    )
    for check in result.verdict.checks:
        mark = "ok " if check.passed else "bad"
        out.print(f"  {mark} {check.name}: {check.reason}")
    out.print(f"log: {args.out / 'events.jsonl'}")
    if result.end_reason == "planner_provider_error":
        console.print(
            f"[red]controlscope run: the planner's model failed: {escape(result.detail)}[/red]"
        )
        return 3
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(argparse.ArgumentParser().parse_args()))
