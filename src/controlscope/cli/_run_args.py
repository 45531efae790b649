"""``controlscope run``'s options, in groups, and the :class:`~controlscope.run.RunSpec` they
describe (one option per spec field, dashes for underscores; a number option's help ends with
the range its spec field declares)."""

from __future__ import annotations

import argparse
import functools
import json
from collections.abc import Callable
from typing import Any

from controlscope import core
from controlscope.cli._console import path_option, range_words
from controlscope.envs.filesystem.tasks.student_database import MAX_STUDENTS
from controlscope.run import RunSpec

_Add = Callable[..., Any]


@functools.cache
def _spec_schema() -> dict[str, Any]:
    properties: dict[str, Any] = RunSpec.model_json_schema()["properties"]
    return properties


def _ranged(group: argparse._ArgumentGroup) -> _Add:
    """The group's ``add_argument``, adding to a number option's help the range of its
    :class:`RunSpec` field (declared once, in :mod:`controlscope.core`), which the spec
    checks."""

    def add(flag: str, *args: Any, **kwargs: Any) -> Any:
        field = _spec_schema().get(flag.removeprefix("--").replace("-", "_"))
        span = range_words(field) if kwargs.get("type") in (int, float) and field else ""
        if span:
            given = kwargs.get("help")
            kwargs["help"] = f"{given}; {span}" if given else span
        return group.add_argument(flag, *args, **kwargs)

    return add


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Register ``run``'s options, grouped: task, condition, models, sampling, budgets, output."""
    task = _ranged(parser.add_argument_group("task"))
    task("--task", default=None, help="task id, e.g. student_database/english_talent")
    task("--env", default="filesystem", help="environment (default: filesystem)")
    task("--mcpmark", type=path_option, default=None, help="an MCPMark task folder (or checkout)")
    task(
        "--state", type=path_option, default=None, help="the MCPMark task's initial-state directory"
    )
    task("--task-spec", type=path_option, default=None, help="a TOML task spec (any MCP server)")
    task("--allow-network", action="store_true", help="a task spec's server may use the network")
    task("--seed", type=int, default=0, help="data seed (student tasks: the subset seed)")
    task(
        "--students",
        type=int,
        default=None,
        help=f"number of students (student tasks; at most {MAX_STUDENTS:,})",
    )
    task("--param", action="append", default=[], metavar="KEY=VALUE", help="a task parameter")

    _condition_arguments(parser)
    _model_arguments(parser)
    _budget_arguments(parser)
    out = parser.add_argument_group("output").add_argument
    out("--out", required=True, type=path_option, help="run directory to write")
    out("--quiet", action="store_true", help="no live progress")


def _condition_arguments(parser: argparse.ArgumentParser) -> None:
    """The condition's options: scope, lattice, schedule, view, replacement, app protocol."""
    cond = parser.add_argument_group("condition").add_argument
    cond("--scope", choices=core.SCOPE_NAMES, default="full", help="params needs --lattice v2")
    cond(
        "--lattice",
        choices=core.LATTICES,
        default=None,
        help="default: Keep<Arg<Full (v2 under --app-protocol v2)",
    )
    cond(
        "--schedule",
        default=None,
        help="never|continuous|every_boundary|per_block|once[:K]|once_online|midpoint[:N]|"
        "protect:n|retain_first (join with +); default continuous (per_block under "
        "--app-protocol v1)",
    )
    cond(
        "--source-run", type=path_option, default=None, help="recorded run placing once / midpoint"
    )
    cond("--view", choices=core.VIEWS, default="with_feedback")
    cond("--view-bounds", choices=("complete", "bounded"), default=None, help="default: per model")
    cond(
        "--replace-boundary",
        choices=core.REPLACE_BOUNDARIES,
        default=None,
        help="default reply (block under --app-protocol)",
    )
    cond(
        "--app-protocol",
        choices=tuple(core.APP_PROTOCOLS),
        default=None,
        help="v1: review per natural block, a Full replacement renews the block's allowance; "
        "v2: shared allowance, Params, private-runtime guard (paper A.2)",
    )


def _model_arguments(parser: argparse.ArgumentParser) -> None:
    """The models' and sampling options."""
    models = parser.add_argument_group("models").add_argument
    models("--model", default="local", help="local|local:0.5b|PATH.gguf|openai:NAME|replay:DIR")
    models("--reviewer-model", default=None, help="reviewer model (default: --model)")
    models("--base-url", default=None, help="OpenAI-compatible base URL")
    per_model = "default: per model"
    models("--planner-format", choices=core.PLANNER_FORMATS, default=None, help=per_model)
    models("--review-mode", choices=core.DECISION_MODES, default=None, help=per_model)
    models("--reviewer-tool-choice", choices=("auto", "required"), default=None)
    models(
        "--reviewer-protocol",
        choices=tuple(core.REVIEWER_PROTOCOLS),
        default=None,
        help="fast: required tool, 8192 tokens, an invalid review is a plan error; "
        "reasoning: auto, 16384 tokens, Keep",
    )
    models(
        "--cache", type=path_option, default=None, help="an SQLite exact-request cache file to use"
    )

    sampling = _ranged(parser.add_argument_group("sampling"))
    sampling("--temperature", type=float, default=None, help="default 0.7")
    sampling("--planner-temperature", type=float, default=None, help="default: --temperature")
    sampling("--max-tokens", type=int, default=None, help="per-request token cap")
    sampling("--reviewer-max-tokens", type=int, default=None, help="default: --max-tokens")
    for role in ("planner", "reviewer"):
        sampling(
            f"--{role}-option",
            action="append",
            default=[],
            metavar="KEY=JSON",
            help=f"a provider option passed with {role} requests",
        )
    sampling("--draw", type=int, default=None, help="reviewer draw index (default 0)")
    sampling("--source-program", type=int, default=None, help="source program index (default 0)")


def _budget_arguments(parser: argparse.ArgumentParser) -> None:
    """The budgets' options."""
    budgets = _ranged(parser.add_argument_group("budgets"))
    budgets("--max-calls", type=int, default=None, help="primitive-call budget (default 100)")
    budgets("--max-turns", type=int, default=None, help="planning-turn budget (default 100)")
    budgets("--max-seconds", type=float, default=None, help="execution seconds (default 1800)")
    budgets("--max-repairs", type=int, default=None, help="ordinary repairs (default: the task's)")
    budgets("--max-blocks", type=int, default=None, help="natural blocks per task (apps: 40)")
    budgets(
        "--max-block-requests", type=int, default=None, help="API requests per block (apps: 250)"
    )
    budgets("--block-exec-s", type=float, default=None, help="per-block limit (default none)")
    budgets(
        "--max-wall-seconds", type=float, default=None, help="whole-run ceiling (default 10800)"
    )
    budgets(
        "--request-timeout-s",
        type=float,
        default=None,
        help="seconds one model call may take, retries included (default 600)",
    )
    budgets("--worker-memory-mb", type=int, default=None, help="worker memory, all (default 2048)")


def key_values(option: str, items: list[str], *, json_values: bool) -> dict[str, Any]:
    """``KEY=VALUE`` items as a dict; values read as JSON when they parse, else as text (or,
    without ``json_values``, as integers when they look like one).

    Raises:
        ValueError: an item without ``=`` or a key.
    """
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"{option} expects KEY=VALUE, got {item!r}")
        if json_values:
            try:
                out[key] = json.loads(value)
            except json.JSONDecodeError:
                out[key] = value
        else:
            out[key] = int(value) if value.lstrip("-").isdigit() else value
    return out


def spec_from_args(args: argparse.Namespace) -> RunSpec:
    """The :class:`RunSpec` the options describe.

    Raises:
        ValueError: a malformed ``--param`` or ``--*-option``.
        pydantic.ValidationError: a value out of range.
    """
    params = key_values("--param", args.param, json_values=False)
    if args.students is not None:
        params["students"] = args.students
    given = {k: v for k, v in vars(args).items() if k in RunSpec.model_fields and v is not None}
    given.pop("params", None)
    for role in ("planner", "reviewer"):
        options = key_values(f"--{role}-option", getattr(args, f"{role}_option"), json_values=True)
        given[f"{role}_options"] = options or None
    return RunSpec(params=params, **given)
